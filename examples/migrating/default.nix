# docs/migrating.md's examples ("From Helm", "From Kustomize"): each ```nix
# block there is a piece of this file, and tests/charts.rs builds
# `kixClusters.prod` (and evaluates `fetched`) with the pinned helm and
# kustomize standing in for nixpkgs' kubernetes-helm and kustomize.
{
  pkgs ? import <nixpkgs> { },
  kix ? import ../../nix { },
}:
{
  kixClusters.prod = kix.lib.mkCluster {
    inherit pkgs;
    name = "prod";
    packages = {
      web = kix.lib.helm.render {
        inherit pkgs;
        chart = ./charts/web;
        releaseName = "web";
        namespace = "web";
        values = {
          replicas = 3;
          greeting = "hello from kix";
        };
        valuesFiles = [ ./web-values.yaml ];
        kubeVersion = "1.36.3";
      } // {
        version = "1.2.0";
        resources = [ { apiVersion = "v1"; kind = "Namespace"; metadata.name = "web"; } ];
      };

      worker = kix.lib.kustomize.build {
        inherit pkgs;
        path = "${./k8s}/overlays/prod";
      } // {
        version = "3.2.0";
        namespace = "worker";
        resources = [ { apiVersion = "v1"; kind = "Namespace"; metadata.name = "worker"; } ];
      };
    };
  };

  # A published chart, pinned by the hash of its archive.
  fetched = kix.lib.helm.render {
    inherit pkgs;
    chart = kix.lib.helm.fetch {
      inherit pkgs;
      repo = "https://charts.jetstack.io";
      chart = "cert-manager";
      version = "v1.16.2";
      hash = "sha256-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="; # the first build prints the right one
    };
    releaseName = "cert-manager";
    namespace = "cert-manager";
    values.crds.enabled = true;
  };
}
