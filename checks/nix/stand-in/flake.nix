# A stand-in for the nixpkgs flake input, for checking kix's flake with the
# flake machinery of a Nix that cannot fetch nixpkgs:
#
#   nix flake check path:<copy of the repository> --no-build \
#     --override-input nixpkgs path:<copy>/checks/nix/stand-in
#
# (checks/nix/run does this.) Its derivations are never built.
{
  description = "stand-in for nixpkgs (kix packaging checks)";

  outputs =
    { self }:
    let
      lib = import ./lib.nix;
    in
    {
      inherit lib;
      legacyPackages = lib.genAttrs [ "x86_64-linux" "aarch64-linux" ] (
        system: import ./pkgs.nix { inherit system lib; }
      );
    };
}
