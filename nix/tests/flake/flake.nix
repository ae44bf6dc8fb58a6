# A user's flake, as kix expects it: `kixClusters.<name>` built with
# `lib.mkCluster`. It has no inputs, so it locks and builds offline; the
# host-tools builder stands in for nixpkgs.
#
# It imports the library by relative path (../../lib.nix), which works when the
# flake's source tree contains the whole nix/ directory, i.e. when Nix sees it
# as part of a Git repository (`git+file:...?dir=nix/tests/flake`, which is
# what `nix build ./nix/tests/flake#...` gives inside a checkout; files must
# be tracked, `git add` is enough). A `path:` flake is copied alone, without
# its parent directories, and Nix 2.8 has no `dir` parameter for `path:`, so
# there `../../lib.nix` is outside the flake and pure evaluation refuses it.
# The tests therefore copy nix/ into a fresh Git repository (see
# crates/kix-cli/tests/build.rs).
#
# Flakes evaluate purely, without builtins.currentSystem: the system comes
# from ./system.nix when present (the tests write it), else x86_64-linux.
{
  description = "kix test fixture: a flake with kixClusters, kixFleets and no inputs";

  outputs =
    { self }:
    let
      system = if builtins.pathExists ./system.nix then import ./system.nix else "x86_64-linux";
      kix = import ../../default.nix { };
      pkgs = import ../host-tools.nix { inherit system; };
    in
    {
      kixClusters = {
        demo = kix.mkCluster {
          inherit pkgs;
          name = "demo";
          settings = {
            keep = 3;
            context = "kind-demo";
          };
          packages = {
            monitoring = {
              version = "2.0.0";
              namespace = "monitoring";
              resources = [
                {
                  apiVersion = "v1";
                  kind = "Namespace";
                  metadata.name = "monitoring";
                }
              ];
            };
            app = {
              version = "1.0.0";
              dependsOn = [ "monitoring" ];
              namespace = "app";
              resources = [
                {
                  apiVersion = "v1";
                  kind = "ConfigMap";
                  metadata = {
                    name = "app";
                    namespace = "app";
                  };
                  data.source = "flake";
                }
              ];
              manifests = [ ../fixtures/web.yaml ];
            };
          };
        };

        # Declared under another name than it builds: `kix build wrong`
        # must refuse it.
        wrong = kix.mkCluster {
          inherit pkgs;
          name = "not-wrong";
          packages = { };
        };
      };

      # A fleet of the demo cluster on one context: `kix fleet plan demo`
      # builds `.#kixFleets.demo`.
      kixFleets.demo = kix.mkFleet {
        name = "demo";
        members.one.build = self.kixClusters.demo;
        waves = [ [ "one" ] ];
      };
    };
}
