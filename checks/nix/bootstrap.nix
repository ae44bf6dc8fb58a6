# The bootstrap unit's environment and Kix cluster for a given kubeconfig,
# from the evaluation of the module (real lib, stand-in packages), for
# checks/nix/bootstrap-test, which runs nixos-modules/kix-operator-bootstrap.sh
# with them against a real API server.
#
#   nix build -f checks/nix/bootstrap.nix tree --argstr kubeconfig K --argstr variant default --arg nixpkgsLib L
#   nix eval --raw -f checks/nix/bootstrap.nix environment ...
{
  kubeconfig,
  variant ? "default",
  system ? builtins.currentSystem,
  nixpkgsLib,
  # The `tenants` variant: a directory with the built kix, which renders the
  # admission policy (`kix crds --tenants`) when the tree is built.
  kixBinDir ? "",
}:
let
  common = import ./common.nix { inherit system nixpkgsLib; };
  variants = {
    default = { };
    tenants = tenantsVariant;
    # apply permissions for ConfigMaps in two namespaces only, plus
    # Namespaces cluster-wide
    restricted = {
      rbac.namespaces = [
        "apps"
        "web"
      ];
      rbac.applyRules = [
        {
          apiGroups = [ "" ];
          resources = [ "configmaps" ];
          verbs = [
            "get"
            "list"
            "watch"
            "create"
            "update"
            "patch"
            "delete"
          ];
        }
      ];
      rbac.clusterApplyRules = [
        {
          apiGroups = [ "" ];
          resources = [ "namespaces" ];
          verbs = [
            "get"
            "list"
            "watch"
            "create"
            "patch"
          ];
        }
      ];
    };
    # what the demo cluster of the VM tests needs, and no more
    demo = {
      rbac.namespaces = [ "kix-vm" ];
      rbac.applyRules = [
        {
          apiGroups = [ "" ];
          resources = [ "configmaps" ];
          verbs = [
            "get"
            "list"
            "watch"
            "create"
            "update"
            "patch"
            "delete"
          ];
        }
      ];
      rbac.clusterApplyRules = [
        {
          apiGroups = [ "" ];
          resources = [ "namespaces" ];
          verbs = [
            "get"
            "list"
            "watch"
            "create"
            "update"
            "patch"
          ];
        }
      ];
    };
  };
  # Several teams, one operator: team-t's records name team-t/kix, the
  # operator may only act as it (rbac.tenantsOnly), ConfigMaps the kinds.
  tenantsVariant = {
    tenants = (import ../../nix { }).mkTenants {
      pkgs = hostTools;
      platform.users = [ "system:serviceaccount:kix-system:kix-operator" ];
      platform.groups = [ "system:masters" ];
      clusters.team-t = {
        groups = [ "team-t" ];
        serviceAccount = {
          namespace = "team-t";
          name = "kix";
        };
      };
    };
    requireServiceAccount = true;
    rbac.applyRules = [
      {
        apiGroups = [ "" ];
        resources = [ "configmaps" ];
        verbs = [
          "get"
          "list"
          "watch"
          "create"
          "update"
          "patch"
          "delete"
        ];
      }
    ];
    # The kix of KIX_BIN_DIR as a package (a link; its digest makes a new
    # binary a new package, so the policy is rendered again).
    bootstrap.package = hostTools.runCommand "kix-of-kix-bin-dir" {
      kixDigest = builtins.hashFile "sha256" "${kixBinDir}/kix";
    } "mkdir -p $out/bin && ln -s ${kixBinDir}/kix $out/bin/kix";
  };
  # The module with the host tools' runCommand, so its Kix cluster builds
  # here for real.
  hostTools = import ../../nix/tests/host-tools.nix { inherit system; };
  config =
    (common.nixos [
      { _module.args.pkgs = common.lib.mkForce (common.pkgs // { inherit (hostTools) runCommand; }); }
      {
        services.kix-operator = {
          enable = true;
          kubeconfigFile = kubeconfig;
        }
        // variants.${variant};
      }
    ]).config;
  unit = config.systemd.services.kix-operator-bootstrap;
in
{
  # The Kix cluster kix-operator (ServiceAccount, RBAC).
  tree = config.services.kix-operator.bootstrap.cluster;
  # The unit's environment, as lines for bash's `export`.
  environment = common.lib.concatStrings (
    common.lib.mapAttrsToList (name: value: "${name}=${common.lib.escapeShellArg value}\n") unit.environment
  );
}
