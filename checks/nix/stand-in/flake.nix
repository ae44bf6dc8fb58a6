# A stand-in for the nixpkgs flake input, for checking kix's flake with the
# flake machinery of a Nix that cannot fetch nixpkgs:
#
#   nix flake check path:<copy of the repository> --no-build \
#     --override-input nixpkgs path:<copy>/checks/nix/stand-in
#
# checks/nix/run does this, after copying nixpkgs' lib (../shared/nixpkgs-lib)
# to ./nixpkgs-lib in the copy. Its derivations are never built.
{
  description = "stand-in for nixpkgs (kix packaging checks)";
  outputs = { self }: import ./nixpkgs.nix { nixpkgsLib = ./nixpkgs-lib/lib; };
}
