# Declarations of the NixOS options that services.kix-operator and the VM
# tests' node set, with the types nixpkgs' NixOS modules give them, for
# evaluating the module with the real `lib.evalModules` (checks/nix/nixos.nix)
# where no nixpkgs is at hand. Written for these checks from the option
# types NixOS documents; what they catch is what nixos-rebuild would:
# unknown options, values of the wrong type, systemd values systemd rejects.
{ lib, pkgs, ... }:
let
  inherit (lib) mkOption types;
  opt = type: default: mkOption { inherit type default; };
  list = type: opt (types.listOf type) [ ];

  # A value in a systemd unit section: what NixOS can render into a unit
  # file (bool, number, string, path, package, or a list of them: one line
  # each, none for an empty list).
  # Definitions that are lists concatenate; scalar ones must agree.
  unitScalar = types.oneOf [
    types.bool
    types.int
    types.float
    types.str
    types.path
    types.package
  ];
  unitOption = types.mkOptionType {
    name = "systemd option";
    description = "systemd option";
    check = v: unitScalar.check v || builtins.isList v && lib.all unitScalar.check v;
    merge =
      loc: defs:
      let
        defs' = lib.filterOverrides defs;
      in
      if lib.any (d: builtins.isList d.value) defs' then
        lib.concatMap (d: lib.toList d.value) defs'
      else
        lib.mergeEqualOption loc defs';
  };

  # The values systemd accepts for the [Service] keys NixOS checks
  # (systemd.service(5)); a wrong one fails evaluation, as in NixOS.
  serviceValues = {
    Type = [ "exec" "simple" "forking" "oneshot" "dbus" "notify" "notify-reload" "idle" ];
    Restart = [ "no" "on-success" "on-failure" "on-abnormal" "on-abort" "on-watchdog" "always" ];
  };
  # The check sees each definition before merging: a value given with
  # mkForce or mkDefault is looked at inside its wrapper, as NixOS does.
  checkService =
    attrs:
    lib.all (
      key:
      let
        raw = attrs.${key};
        value = if raw._type or "" == "override" then raw.content else raw;
      in
      !(attrs ? ${key})
      || !(builtins.isString value)
      || builtins.elem value serviceValues.${key}
      || throw "Systemd Service field `${key}' cannot have value `${value}'."
    ) (builtins.attrNames serviceValues);

  unitName = types.strMatching "[a-zA-Z0-9@%:_.\\-]+[.](service|socket|device|mount|automount|swap|target|path|timer|scope|slice)";
  service = types.submodule {
    options = {
      description = opt types.singleLineStr "";
      wantedBy = list unitName;
      wants = list unitName;
      after = list unitName;
      environment = opt (types.attrsOf (types.nullOr (types.oneOf [ types.str types.path types.package ]))) { };
      path = list (types.oneOf [ types.package types.str ]);
      # Anything whose change restarts the unit on a switch (X-Restart-Triggers).
      restartTriggers = list types.unspecified;
      # An int in NixOS, with no default (null here: units that leave it out).
      startLimitIntervalSec = opt (types.nullOr types.int) null;
      serviceConfig = opt (types.addCheck (types.attrsOf unitOption) checkService) { };
    };
  };

  user = types.submodule {
    options = {
      isSystemUser = opt types.bool false;
      group = opt types.str "";
      home = opt (types.passwdEntry types.path) "/var/empty";
      description = opt (types.passwdEntry types.str) "";
    };
  };

  container = types.submodule {
    options = {
      image = mkOption { type = types.str; };
      imageFile = opt (types.nullOr types.package) null;
      user = opt (types.nullOr types.str) null;
      cmd = list types.str;
      environment = opt (types.attrsOf types.str) { };
      volumes = list types.str;
      extraOptions = list types.str;
    };
  };
in
{
  options = {
    assertions = list types.unspecified;
    warnings = list types.str;

    systemd.services = opt (types.attrsOf service) { };
    systemd.tmpfiles.rules = list types.str;

    users.users = opt (types.attrsOf user) { };
    users.groups = opt (types.attrsOf (types.submodule { })) { };

    networking.firewall.allowedTCPPorts = list types.port;
    networking.hostName = opt (types.strMatching "^$|^[[:alnum:]]([[:alnum:]_-]{0,61}[[:alnum:]])?$") "nixos";

    virtualisation.oci-containers = {
      backend = opt (types.enum [ "podman" "docker" ]) "podman";
      containers = opt (types.attrsOf container) { };
    };

    system.extraDependencies = list types.pathInStore;
    system.stateVersion = opt types.str "26.11";
    system.build = opt (types.lazyAttrsOf types.unspecified) { };

    nix.package = opt types.package pkgs.nix;
    nixpkgs.hostPlatform = opt (types.either types.str (types.attrsOf types.unspecified)) pkgs.system;
    boot.isContainer = opt types.bool false;
    # Other configurations of the same system (nixos/modules/system/activation/specialisation.nix).
    specialisation = opt (types.attrsOf (
      types.submodule {
        options = {
          inheritParentConfig = opt types.bool true;
          configuration = opt types.deferredModule { };
        };
      }
    )) { };
    environment.systemPackages = list types.package;

    services.k3s = {
      enable = opt types.bool false;
      role = opt (types.enum [ "server" "agent" ]) "server";
      extraFlags = opt (types.either types.str (types.listOf types.str)) [ ];
    };

    # The VM tests' node (nixos/modules/virtualisation/qemu-vm.nix).
    virtualisation = {
      memorySize = opt types.ints.positive 1024;
      diskSize = opt types.ints.positive 1024;
      cores = opt types.ints.positive 1;
      additionalPaths = list types.path;
    };
  };
}
