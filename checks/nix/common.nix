# Shared by the packaging evaluation checks (checks/nix/eval.nix): the
# stand-in nixpkgs, kix's flake evaluated against it, and test helpers.
# Plain Nix, no nixpkgs, no network.
{
  system ? "x86_64-linux",
}:
rec {
  inherit system;
  lib = import ./stand-in/lib.nix;

  nixpkgs = {
    inherit lib;
    legacyPackages = lib.genAttrs [ "x86_64-linux" "aarch64-linux" ] (
      s:
      import ./stand-in/pkgs.nix {
        system = s;
        inherit lib;
      }
    );
  };
  pkgs = nixpkgs.legacyPackages.${system};

  # The flake's outputs function, called as Nix would, with the stand-in in
  # place of the nixpkgs input. `outPath` is the source path as a string (no
  # copy of the working tree into the store).
  flake = import ../../flake.nix;
  self = flake.outputs { inherit self nixpkgs; } // {
    outPath = toString ../..;
  };

  # A NixOS system (stand-in module system) with kix's module, as the flake
  # exposes it.
  nixos =
    modules:
    lib.nixosSystem {
      inherit system;
      modules = [ self.nixosModules.default ] ++ modules;
    };

  # Tests are { expected; actual; }.
  eq = expected: actual: { inherit expected actual; };
  ok = actual: eq true actual;
  # `x` fails evaluation with a throw (or a failed assert).
  throws = x: eq false (builtins.tryEval (builtins.deepSeq x x)).success;
  has = lib.hasInfix;
  sorted = builtins.sort builtins.lessThan;
}
