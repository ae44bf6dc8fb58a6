# services.kix-operator: the kix operator on a NixOS host, next to the store
# it deploys from (NIX_REMOTE=daemon): in its OCI image under
# virtualisation.oci-containers with the host /nix/store mounted read-only
# (mode = "container"), or as a hardened systemd service (mode = "host").
# kix-operator-bootstrap (./kix-operator-bootstrap.sh) deploys with kix the
# Kix cluster "kix-operator" (./kix-operator-rbac.yaml, the RBAC the options
# generate, the token Secret of ./kix-operator-token.yaml; kix installs its
# CRDs and prunes what an earlier configuration had) and writes the
# ServiceAccount's kubeconfig the operator uses. See docs/nix.md.
{
  config,
  lib,
  pkgs,
  ...
}:
let
  cfg = config.services.kix-operator;
  inherit (lib)
    mkOption
    mkIf
    mkMerge
    types
    literalExpression
    ;

  stateDir = "/var/lib/kix-operator";
  operatorKubeconfig = "${stateDir}/kubeconfig";
  isContainer = cfg.mode == "container";
  owner = if isContainer then toString (cfg.image.uid or 65532) else "kix-operator";
  group = if isContainer then toString (cfg.image.gid or 65532) else "kix-operator";

  # The operator reads ${operatorKubeconfig}: minted for its ServiceAccount
  # by the bootstrap, or copied from kubeconfigFile before each start.
  # Without either it runs with the in-cluster configuration.
  hasKubeconfig = cfg.rbac.useServiceAccount || cfg.kubeconfigFile != null;
  copyKubeconfig = !cfg.rbac.useServiceAccount && cfg.kubeconfigFile != null;
  k3sUnits = lib.optional (config.services.k3s.enable or false) "k3s.service";
  bootstrapUnits = lib.optional cfg.bootstrap.enable "kix-operator-bootstrap.service";

  renderFlag =
    name: value:
    if value == null || value == false then
      [ ]
    else if value == true then
      [ "--${name}" ]
    else
      map (v: "--${name}=${toString v}") (lib.toList value);
  hostPort = address: port: if lib.hasInfix ":" address then "[${address}]:${toString port}" else "${address}:${toString port}";
  arguments =
    lib.optional hasKubeconfig "--kubeconfig=${operatorKubeconfig}"
    ++ [
      "--log-format=${cfg.logFormat}"
      "--metrics-addr=${hostPort cfg.metricsAddress cfg.metricsPort}"
    ]
    ++ lib.concatLists (lib.mapAttrsToList renderFlag cfg.settings)
    ++ cfg.extraArgs;
  # One ExecStart argument: quoted, with systemd's specifiers escaped.
  systemdArg = a: lib.replaceStrings [ "%" "$" ] [ "%%" "$$" ] (builtins.toJSON a);
  environment = {
    NIX_REMOTE = "daemon";
    KIX_GCROOTS_DIR = cfg.gcRootsDir;
  }
  // cfg.environment;

  bootstrapCluster = (import ../nix { }).mkCluster {
    inherit pkgs;
    name = "kix-operator";
    packages.rbac = {
      version = "1";
      resources = import ./kix-operator-rbac.nix {
        inherit lib;
        inherit (cfg) rbac;
        leaseNamespace = cfg.settings."lease-namespace";
      };
      manifests = [ ./kix-operator-rbac.yaml ];
    };
    packages.token = {
      version = "1";
      dependsOn = [ "rbac" ];
      manifests = [ ./kix-operator-token.yaml ];
    };
  };

  prepareKubeconfig = pkgs.writeShellScript "kix-operator-kubeconfig" ''
    set -eu
    ${pkgs.coreutils}/bin/install -d -m 0750 -o ${owner} -g ${group} ${stateDir}
    ${pkgs.coreutils}/bin/install -m 0400 -o ${owner} -g ${group} \
      ${lib.escapeShellArg cfg.kubeconfigFile} ${stateDir}/.kubeconfig.new
    ${pkgs.coreutils}/bin/mv -f ${stateDir}/.kubeconfig.new ${operatorKubeconfig}
  '';

  ruleType = types.attrsOf (types.listOf types.str);
  option =
    type: default: description:
    mkOption { inherit type default description; };
in
{
  options.services.kix-operator = {
    enable = lib.mkEnableOption "the kix operator, which keeps the current Activation of each Kix cluster applied";
    package = mkOption {
      type = types.package;
      default = pkgs.kix-operator or (throw "services.kix-operator.package is not set and pkgs has no kix-operator: import the module through the kix flake (nixosModules.default) or apply its overlays.default");
      defaultText = literalExpression "pkgs.kix-operator (the flake's module sets the flake's build)";
      description = "The kix-operator package (run directly in host mode, inside the default image otherwise).";
    };
    mode = option (types.enum [ "container" "host" ]) "container" ''
      How the operator runs. `container`: the OCI image under
      virtualisation.oci-containers with the host /nix/store mounted
      read-only and the nix-daemon socket mounted. `host`: a hardened
      systemd service running the binary directly.
    '';
    image = mkOption {
      type = types.package;
      default = pkgs.callPackage ../images/operator.nix {
        kix-operator = cfg.package;
        nix = cfg.nixPackage;
      };
      defaultText = literalExpression "pkgs.callPackage ./images/operator.nix { kix-operator = cfg.package; nix = cfg.nixPackage; }";
      description = ''
        The operator image for container mode: a dockerTools archive with
        `imageName`, `imageTag` and `storeRoots`, the store paths it uses,
        which join the system closure (the container sees the host store).
      '';
    };
    nixPackage = mkOption {
      type = types.package;
      default = config.nix.package;
      defaultText = literalExpression "config.nix.package";
      description = "Nix providing `nix-store` (a client of this host's nix-daemon).";
    };
    kubeconfigFile = option (types.nullOr types.str) null ''
      Kubeconfig with this host's credentials for the cluster (k3s:
      "/etc/rancher/k3s/k3s.yaml"), as a string: a Nix path would copy the
      secret into the store. The bootstrap deploys with it; the operator
      gets a copy only without rbac.useServiceAccount. null: no
      --kubeconfig, the operator uses the in-cluster configuration.
    '';
    logFormat = option (types.enum [ "text" "json" ]) "text" "Log format on stderr (journald): --log-format.";
    metricsPort = option types.port 8080 "Port of /metrics, /healthz and /readyz (--metrics-addr).";
    metricsAddress = option types.str "0.0.0.0" "IP address /metrics, /healthz and /readyz listen on (--metrics-addr).";
    openFirewall = option types.bool false "Open metricsPort in the firewall.";
    settings = mkOption {
      type = types.submodule {
        freeformType = with types; attrsOf (nullOr (oneOf [ bool int str (listOf str) ]));
        options."resync-interval" = option types.str "60s" "How often every current record is re-checked in full (--resync-interval).";
        options."lease-namespace" = option types.str "kube-system" ''
          Namespace of the leader-election and deploy leases (--lease-namespace);
          kube-system is where `kix deploy` takes its deploy lease too.
        '';
      };
      default = { };
      example = {
        "resync-interval" = "5m";
        cluster = [ "infra" "apps" ];
      };
      description = ''
        Operator flags: each attribute becomes `--name=value` (true: `--name`;
        false or null: left out; a list: the flag repeated, e.g. `cluster` to
        manage only some Kix clusters). See `kix-operator --help`.
      '';
    };
    extraArgs = option (types.listOf types.str) [ ] "Extra command-line arguments, after the generated ones.";
    environment = option (types.attrsOf types.str) { } "Extra environment variables for the operator (KIX_LOG: the log filter).";
    gcRootsDir = option types.str "/nix/var/nix/gcroots/kix" ''
      Directory of the GC roots that keep every store path an Activation
      names alive (KIX_GCROOTS_DIR); mounted at the same path in the
      container, since Nix registers indirect roots by their path.
    '';
    container.extraOptions = option (types.listOf types.str) [ ] "Extra options for the container runtime's `run`.";

    bootstrap = {
      enable = mkOption {
        type = types.bool;
        default = cfg.bootstrap.kubeconfigFile != null;
        defaultText = literalExpression "bootstrap.kubeconfigFile != null";
        description = "Run kix-operator-bootstrap (oneshot, root, before the operator): deploy the operator's RBAC with kix and write the ServiceAccount kubeconfig.";
      };
      kubeconfigFile = mkOption {
        type = types.nullOr types.str;
        default = cfg.kubeconfigFile;
        defaultText = literalExpression "config.services.kix-operator.kubeconfigFile";
        description = "Kubeconfig the bootstrap deploys with (it needs rights to create CRDs and RBAC).";
      };
      package = mkOption {
        type = types.package;
        default = pkgs.kix or (throw "services.kix-operator.bootstrap.package is not set and pkgs has no kix: import the module through the kix flake or apply its overlays.default");
        defaultText = literalExpression "pkgs.kix (the flake's module sets the flake's build)";
        description = "The kix CLI the bootstrap deploys with.";
      };
      timeout = option types.ints.positive 300 "Seconds the bootstrap keeps trying while the API server starts.";
      cluster = mkOption {
        type = types.package;
        readOnly = true;
        default = bootstrapCluster;
        defaultText = literalExpression "the Kix cluster kix-operator";
        description = "The Kix cluster `kix-operator` the bootstrap deploys (read-only): ServiceAccount, token Secret and RBAC.";
      };
    };

    rbac = {
      useServiceAccount = mkOption {
        type = types.bool;
        default = cfg.bootstrap.enable;
        defaultText = literalExpression "bootstrap.enable";
        description = "Run the operator as its ServiceAccount (a kubeconfig the bootstrap writes) rather than with kubeconfigFile's credentials.";
      };
      applyRules = mkOption {
        type = types.listOf ruleType;
        default = [
          {
            apiGroups = [ "*" ];
            resources = [ "*" ];
            verbs = [ "*" ];
          }
        ];
        example = [
          {
            apiGroups = [ "" "apps" ];
            resources = [ "configmaps" "services" "deployments" ];
            verbs = [ "get" "list" "watch" "create" "update" "patch" "delete" ];
          }
        ];
        description = ''
          PolicyRules for what the operator applies, prunes and watches
          (ClusterRole kix-operator-apply). The default allows everything,
          which a deploy tool that installs CRDs and RBAC of its own needs;
          narrow it to the kinds your builds contain.
        '';
      };
      namespaces = option (types.nullOr (types.listOf types.str)) null ''
        null: applyRules are bound cluster-wide. A list: they are bound in
        these namespaces only (a RoleBinding each, the bootstrap creates the
        namespaces and never deletes them), plus get/list/watch on the same
        kinds cluster-wide (ClusterRole kix-operator-read: the engine lists
        and watches per kind). Writes to cluster-scoped kinds need
        clusterApplyRules.
      '';
      clusterApplyRules = option (types.listOf ruleType) [ ] ''
        PolicyRules bound cluster-wide when rbac.namespaces is a list, for
        the cluster-scoped kinds the builds contain (Namespaces, CRDs, ...).
      '';
    };
  };

  config = mkIf cfg.enable (mkMerge [
    {
      assertions = [
        {
          assertion = !cfg.bootstrap.enable || cfg.bootstrap.kubeconfigFile != null;
          message = "services.kix-operator.bootstrap.enable needs bootstrap.kubeconfigFile (or kubeconfigFile).";
        }
        {
          assertion = !cfg.rbac.useServiceAccount || cfg.bootstrap.enable;
          message = "services.kix-operator.rbac.useServiceAccount needs bootstrap.enable (the bootstrap writes its kubeconfig).";
        }
      ];
      warnings = lib.optional (!hasKubeconfig) ''
        services.kix-operator has no kubeconfig (kubeconfigFile = null and no
        ServiceAccount kubeconfig): the operator uses the in-cluster
        configuration, which a NixOS host normally does not provide.
      '';
      systemd.tmpfiles.rules = [
        "d ${stateDir} 0750 ${owner} ${group} - -"
        "d ${cfg.gcRootsDir} 0755 ${owner} ${group} - -"
      ];
      networking.firewall.allowedTCPPorts = mkIf cfg.openFirewall [ cfg.metricsPort ];
    }

    (mkIf cfg.bootstrap.enable {
      systemd.services.kix-operator-bootstrap = {
        description = "kix operator: deploy its CRDs and RBAC";
        wantedBy = [ "multi-user.target" ];
        wants = [ "network-online.target" ] ++ k3sUnits;
        after = [ "network-online.target" "nix-daemon.socket" ] ++ k3sUnits;
        path = [ cfg.bootstrap.package pkgs.coreutils cfg.nixPackage ];
        environment = {
          KUBECONFIG = cfg.bootstrap.kubeconfigFile;
          KIX_BOOTSTRAP_TREE = "${cfg.bootstrap.cluster}";
          KIX_BOOTSTRAP_TIMEOUT = toString cfg.bootstrap.timeout;
          KIX_OPERATOR_KUBECONFIG = if cfg.rbac.useServiceAccount then operatorKubeconfig else "";
          KIX_OPERATOR_OWNER = "${owner}:${group}";
          KIX_GCROOTS_DIR = cfg.gcRootsDir;
        };
        serviceConfig = {
          Type = "oneshot";
          RemainAfterExit = true;
          ExecStart = "${pkgs.bash}/bin/bash ${./kix-operator-bootstrap.sh}";
          Restart = "on-failure";
          RestartSec = 10;
          TimeoutStartSec = cfg.bootstrap.timeout + 300;
        };
      };
    })

    (mkIf isContainer {
      virtualisation.oci-containers.containers.kix-operator = {
        image = "${cfg.image.imageName}:${cfg.image.imageTag}";
        imageFile = cfg.image;
        user = "${owner}:${group}";
        cmd = arguments;
        inherit environment;
        volumes = [
          "/nix/store:/nix/store:ro"
          "/nix/var/nix/daemon-socket:/nix/var/nix/daemon-socket"
          "${cfg.gcRootsDir}:${cfg.gcRootsDir}"
        ]
        ++ lib.optional hasKubeconfig "${stateDir}:${stateDir}:ro";
        extraOptions = [
          "--network=host"
          "--read-only"
          "--cap-drop=all"
          "--security-opt=no-new-privileges"
        ]
        ++ cfg.container.extraOptions;
      };
      system.extraDependencies = cfg.image.storeRoots or [ cfg.package ];
      systemd.services."${config.virtualisation.oci-containers.backend}-kix-operator" = {
        wants = bootstrapUnits ++ k3sUnits;
        after = bootstrapUnits ++ k3sUnits ++ [ "nix-daemon.socket" ];
        serviceConfig.ExecStartPre = lib.optional copyKubeconfig "${prepareKubeconfig}";
      };
    })

    (mkIf (!isContainer) {
      users.users.kix-operator = {
        isSystemUser = true;
        group = "kix-operator";
        home = stateDir;
        description = "kix operator";
      };
      users.groups.kix-operator = { };
      systemd.services.kix-operator = {
        description = "kix operator";
        wantedBy = [ "multi-user.target" ];
        wants = [ "network-online.target" ] ++ bootstrapUnits ++ k3sUnits;
        after = [ "network-online.target" "nix-daemon.socket" ] ++ bootstrapUnits ++ k3sUnits;
        inherit environment;
        path = [ cfg.nixPackage ];
        startLimitIntervalSec = 0;
        serviceConfig = {
          ExecStartPre = lib.optional copyKubeconfig "+${prepareKubeconfig}";
          ExecStart = lib.concatMapStringsSep " " systemdArg ([ "${cfg.package}/bin/kix-operator" ] ++ arguments);
          User = "kix-operator";
          Group = "kix-operator";
          Restart = "always";
          RestartSec = 5;
          ReadWritePaths = [ cfg.gcRootsDir ];
          CapabilityBoundingSet = "";
          NoNewPrivileges = true;
          ProtectSystem = "strict";
          ProtectHome = true;
          PrivateTmp = true;
          PrivateDevices = true;
          ProtectKernelTunables = true;
          ProtectKernelModules = true;
          ProtectKernelLogs = true;
          ProtectControlGroups = true;
          ProtectClock = true;
          ProtectHostname = true;
          RestrictAddressFamilies = [ "AF_UNIX" "AF_INET" "AF_INET6" ];
          RestrictNamespaces = true;
          RestrictRealtime = true;
          RestrictSUIDSGID = true;
          LockPersonality = true;
          MemoryDenyWriteExecute = true;
          SystemCallArchitectures = "native";
          UMask = "0027";
        };
      };
    })
  ]);
}
