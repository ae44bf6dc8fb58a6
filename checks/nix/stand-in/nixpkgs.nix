# What kix's flake and checks take from nixpkgs, for evaluating them where
# nixpkgs is not at hand: nixpkgs' real `lib` (given as `nixpkgsLib`, the
# path of its lib/ directory), plus what the nixpkgs flake adds to it
# (`nixosSystem`: here the real lib.evalModules with the option
# declarations of ./nixos-options.nix, see ./nixos.nix), and the stand-in
# package set of ./pkgs.nix, whose derivations are never built.
{ nixpkgsLib }:
let
  realLib = import nixpkgsLib;
  systems = [
    "x86_64-linux"
    "aarch64-linux"
  ];
  lib = realLib.extend (
    final: prev:
    {
      nixosSystem = import ./nixos.nix {
        lib = final;
        pkgsFor = system: legacyPackages.${system};
      };
    }
    # lib.fileset needs builtins.readFileType (Nix 2.14); Debian's Nix 2.8
    # lacks it. lib.filesystem.pathType is that builtin; without it, a path
    # takes its type from its parent directory's listing (what older
    # nixpkgs did). A top-level store path is taken as a directory: it is a
    # flake's source here, and pure evaluation may not list /nix/store.
    # (The condition uses builtins only: the extension's attribute names
    # must not depend on the lib it extends.)
    // (
      if builtins ? readFileType then
        { }
      else
        {
          filesystem = prev.filesystem // {
            pathType =
              path:
              if dirOf path == path || toString (dirOf path) == builtins.storeDir then
                "directory"
              else
                (builtins.readDir (dirOf path)).${baseNameOf path};
          };
        }
    )
  );
  legacyPackages = lib.genAttrs systems (
    system:
    import ./pkgs.nix {
      inherit system lib;
      # Where nixpkgs' lib/ is, as a string (no copy into the store).
      path = toString (dirOf nixpkgsLib);
    }
  );
in
{
  inherit lib legacyPackages;
}
