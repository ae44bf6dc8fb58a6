# Entry point of the kix Nix library for the flake and for non-flake users:
#
#   lib = import ./nix { };          # in the flake: lib.mkCluster
#   (import ./nix { }).lib.mkCluster # the same, spelled through `lib`
#
# The library needs no arguments: `mkCluster` takes `pkgs` itself.
{ ... }:
let
  lib = import ./lib.nix;
in
lib // { inherit lib; }
