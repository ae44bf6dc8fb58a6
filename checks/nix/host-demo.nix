# The demo cluster of the VM tests and the NixOS module's Kix cluster (what
# its bootstrap deploys), built for real with kix's library and the
# host-tools builder of nix/tests, then read back (import from derivation).
# The demo part asserts what the nix-lib-nixpkgs flake check asserts with
# nixpkgs' runCommand and jq, so those expectations are known to hold.
{ common }:
let
  inherit (common) eq ok;
  hostTools = import ../../nix/tests/host-tools.nix { system = builtins.currentSystem; };
  pkgs = hostTools // {
    writeText = builtins.toFile;
  };
  cluster = import ./demo-cluster.nix {
    kixLib = import ../../nix { };
    inherit pkgs;
    name = "nixpkgs-check";
  };
  read = file: builtins.fromJSON (builtins.readFile "${cluster}/${file}");
  kixJson = read "kix.json";
  app = read "packages/app/package.json";
  entries = dir: builtins.attrNames (builtins.readDir "${cluster}/${dir}");

  moduleCluster =
    (common.nixos [
      { _module.args.pkgs = common.lib.mkForce (common.pkgs // { inherit (hostTools) runCommand; }); }
      {
        services.kix-operator = {
          enable = true;
          kubeconfigFile = "/etc/kix/admin.yaml";
          rbac.namespaces = [ "apps" ];
        };
      }
    ]).config.services.kix-operator.bootstrap.cluster;
  moduleResources = builtins.attrNames (builtins.readDir "${moduleCluster}/packages/rbac/resources");
in
{
  demoKixJson = eq {
    format = 1;
    cluster = "nixpkgs-check";
    packages = [
      "base"
      "app"
    ];
    keep = 3;
    maxAge = "7d";
  } {
    inherit (kixJson) format cluster packages;
    inherit (kixJson.settings) keep maxAge;
  };
  demoAppPackageJson = eq {
    name = "app";
    dependsOn = [ "base" ];
    namespace = "kix-vm";
  } { inherit (app) name dependsOn namespace; };
  demoAppResources = ok (
    builtins.any (common.lib.hasSuffix ".json") (entries "packages/app/resources")
    && entries "packages/app/resources/manifests" != [ ]
  );
  moduleClusterTree = eq {
    kixJson = {
      format = 1;
      cluster = "kix-operator";
      packages = [
        "rbac"
        "token"
      ];
      settings = { };
    };
    resources = [
      "000-namespace-apps.json"
      "001-role-kix-operator-leases.json"
      "002-rolebinding-kix-operator-leases.json"
      "003-clusterrole-kix-operator-apply.json"
      "004-rolebinding-kix-operator-apply.json"
      "005-clusterrole-kix-operator-read.json"
      "006-clusterrolebinding-kix-operator-read.json"
      "manifests"
    ];
    manifests = [ "000-kix-operator-rbac.yaml" ];
    yaml = builtins.readFile ../../nixos-modules/kix-operator-rbac.yaml;
  } {
    kixJson = builtins.fromJSON (builtins.readFile "${moduleCluster}/kix.json");
    resources = moduleResources;
    manifests = builtins.attrNames (builtins.readDir "${moduleCluster}/packages/rbac/resources/manifests");
    yaml = builtins.readFile "${moduleCluster}/packages/rbac/resources/manifests/000-kix-operator-rbac.yaml";
  };
  demoBaseHasTheNamespace = ok (builtins.any (common.lib.hasInfix "namespace") (entries "packages/base/resources"));
}
