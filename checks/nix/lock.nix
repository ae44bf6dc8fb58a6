# flake.lock: version 7, nixpkgs only, locked to the published 2026-08
# nixos-unstable channel tarball (/work/shared/nixpkgs-lock.md, pin 2).
{ common }:
let
  inherit (common) eq;
  lock = builtins.fromJSON (builtins.readFile ../../flake.lock);
in
{
  lockVersion = eq 7 lock.version;
  lockRoot = eq {
    root = "root";
    inputs = {
      nixpkgs = "nixpkgs";
    };
  } {
    inherit (lock) root;
    inherit (lock.nodes.root) inputs;
  };
  lockNodes = eq [
    "nixpkgs"
    "root"
  ] (builtins.attrNames lock.nodes);
  lockNixpkgsLocked = eq {
    type = "tarball";
    url = "https://releases.nixos.org/nixos/unstable/nixos-26.11pre1050399.279b4a8275f0/nixexprs.tar.xz";
    rev = "279b4a8275f032c566576b3f181fa0f27197f588";
    narHash = "sha256-qemNveuexlWhK0Qc6Y8o+gtSVTIj5xljzTAXQZxTHWA=";
    lastModified = 1786247143;
  } lock.nodes.nixpkgs.locked;
  lockNixpkgsOriginal = eq {
    type = "tarball";
    url = (import ../../flake.nix).inputs.nixpkgs.url;
  } lock.nodes.nixpkgs.original;
}
