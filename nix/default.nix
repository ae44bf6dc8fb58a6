# Entry point of the kix Nix library for the flake and for non-flake users:
#
#   lib = import ./nix { };          # in the flake: lib.mkCluster
#   (import ./nix { }).lib.mkCluster # the same, spelled through `lib`
#
# The library needs no arguments: `mkCluster` takes `pkgs` itself.
# `mkOperatorInstall` (./operator-install.nix) is the operator installed in
# any Kubernetes cluster, a mkCluster build.
{ ... }:
let
  base = import ./lib.nix;
  lib = base // {
    mkOperatorInstall = import ./operator-install.nix { kixLib = base; };
  };
in
lib // { inherit lib; }
