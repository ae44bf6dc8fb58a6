# The demo cluster of the VM tests, built for real with kix's library and
# the host-tools builder of nix/tests (plain Nix, sandbox off: what
# nix/tests/run uses), then read back (import from derivation). It asserts
# what the nix-lib-nixpkgs flake check asserts with nixpkgs' runCommand and
# jq, so those expectations are known to hold.
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
  demoBaseHasTheNamespace = ok (builtins.any (common.lib.hasInfix "namespace") (entries "packages/base/resources"));
}
