# kix.lib.checkCluster with the host-tools builder:
#
#   nix build --no-link -f nix/tests/check-cluster.nix --arg kix '"/dir/with/bin/kix"' invalid
#
# `clusters.<name>` are the Kix clusters checked; `<name>` their checks.
# crates/kix-cli/tests/validate.rs builds them with the kix under test.
{
  system ? builtins.currentSystem,
  # A directory holding bin/kix (a string: used where it is, not copied).
  kix ? null,
}:
let
  lib = import ../default.nix { };
  pkgs = import ./host-tools.nix { inherit system; };
  deployment = replicas: {
    apiVersion = "apps/v1";
    kind = "Deployment";
    metadata.name = "web";
    spec = {
      inherit replicas;
      selector.matchLabels.app = "web";
      template = {
        metadata.labels.app = "web";
        spec.containers = [
          {
            name = "web";
            image = "nginx:1.27";
          }
        ];
      };
    };
  };
  service = type: {
    apiVersion = "v1";
    kind = "Service";
    metadata.name = "web";
    spec = {
      inherit type;
      selector.app = "web";
      ports = [ { port = 80; } ];
    };
  };
  cluster =
    name: resources:
    lib.mkCluster {
      inherit pkgs name;
      packages.web = {
        version = "1.0.0";
        namespace = "web";
        inherit resources;
      };
    };
  clusters = {
    valid = cluster "valid" [
      (deployment 3)
      (service "ClusterIP")
    ];
    invalid = cluster "invalid" [
      (deployment "3")
      (service "Loadbalancer")
    ];
  };
  check =
    cluster: extra:
    lib.checkCluster (
      {
        inherit pkgs kix cluster;
      }
      // extra
    );
in
{
  inherit clusters;
  valid = check clusters.valid { };
  invalid = check clusters.invalid { };
  unsupportedVersion = check clusters.valid { kubernetesVersion = "v1.20.0"; };
}
