# A user's flake with a validation check: `nix flake check` builds
# `checks.<system>.web`, which is kix.lib.checkCluster over the cluster.
# The tests (crates/kix-cli/tests/validate.rs) copy nix/ into a Git
# repository (see nix/tests/flake/flake.nix for why) and write:
#   ./system.nix    the current system
#   ./kix-path.nix  a string: the directory holding the bin/kix under test
#   ./broken.nix    true to give the Deployment `replicas = "3"`
{
  description = "kix test fixture: kix.lib.checkCluster under nix flake check";

  outputs =
    { self }:
    let
      system = if builtins.pathExists ./system.nix then import ./system.nix else "x86_64-linux";
      broken = builtins.pathExists ./broken.nix && import ./broken.nix;
      kixLib = import ../../default.nix { };
      pkgs = import ../host-tools.nix { inherit system; };
      web = kixLib.mkCluster {
        inherit pkgs;
        name = "web";
        packages.web = {
          version = "1.0.0";
          namespace = "web";
          resources = [
            {
              apiVersion = "apps/v1";
              kind = "Deployment";
              metadata.name = "web";
              spec = {
                replicas = if broken then "3" else 3;
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
            }
          ];
        };
      };
    in
    {
      kixClusters.web = web;
      checks.${system}.web = kixLib.checkCluster {
        inherit pkgs;
        cluster = web;
        kix = import ./kix-path.nix;
      };
    };
}
