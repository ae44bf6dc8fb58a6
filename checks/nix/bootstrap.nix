# The bootstrap unit's script and RBAC manifest for a given kubeconfig, from
# the stand-in evaluation of the module, for checks/nix/bootstrap-test (which
# runs them against a real API server).
#
#   nix eval --raw -f checks/nix/bootstrap.nix script --argstr kubeconfig K --argstr variant default
{
  kubeconfig,
  variant ? "default",
  system ? "x86_64-linux",
}:
let
  common = import ./common.nix { inherit system; };
  variants = {
    default = { };
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
  config =
    (common.nixos [
      {
        services.kix-operator = {
          enable = true;
          kubeconfigFile = kubeconfig;
        }
        // variants.${variant};
      }
    ]).config;
  cfg = config.services.kix-operator;
in
{
  script = config.systemd.services.kix-operator-bootstrap.serviceConfig.ExecStart;
  rbacManifestPath = cfg.rbac.manifestFile.outPath;
  rbacManifest = cfg.rbac.manifestFile.text;
  crds = toString cfg.bootstrap.crdsFile;
}
