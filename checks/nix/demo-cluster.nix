# The Kix cluster the flake checks deploy and inspect: a Namespace and two
# ConfigMaps, nothing that needs an image pull, so k3s runs it offline.
#
#   import ./demo-cluster.nix { kixLib = import ../../nix { }; pkgs = ...; }
#
# `pkgs` only needs runCommand and writeText (nixpkgs, or the host-tools
# stand-in plus a writeText).
{
  kixLib,
  pkgs,
  name ? "demo",
  namespace ? "kix-vm",
  # Another value gives another build (a later generation of a host).
  greeting ? "hello",
  # More objects of package app.
  extraResources ? [ ],
}:
kixLib.mkCluster {
  inherit pkgs name;
  settings = {
    keep = 3;
    maxAge = "7d";
  };
  packages = {
    base = {
      version = "1";
      resources = [
        {
          apiVersion = "v1";
          kind = "Namespace";
          metadata.name = namespace;
        }
      ];
    };
    app = {
      version = "1.0.0";
      dependsOn = [ "base" ];
      inherit namespace;
      resources = [
        {
          apiVersion = "v1";
          kind = "ConfigMap";
          metadata = {
            name = "demo-settings";
            inherit namespace;
          };
          data.greeting = greeting;
        }
      ]
      ++ extraResources;
      manifests = [
        (pkgs.writeText "demo-extra.yaml" ''
          apiVersion: v1
          kind: ConfigMap
          metadata:
            name: demo-extra
            namespace: ${namespace}
          data:
            purpose: deleted by the test, re-created by the operator
        '')
      ];
    };
  };
}
