# Shared by the packaging evaluation checks (checks/nix/eval.nix): nixpkgs'
# real lib with the stand-in package set (./stand-in/nixpkgs.nix), kix's
# flake evaluated against them, and test helpers. Plain Nix, no network.
{
  system ? "x86_64-linux",
  # nixpkgs' lib/ directory (checks/nix/run: ../shared/nixpkgs-lib/lib).
  nixpkgsLib,
}:
rec {
  inherit system;
  nixpkgs = import ./stand-in/nixpkgs.nix { inherit nixpkgsLib; };
  inherit (nixpkgs) lib;
  pkgs = nixpkgs.legacyPackages.${system};

  # The flake's outputs function, called as Nix would, with the stand-in in
  # place of the nixpkgs input. `outPath` is the source path as a string (no
  # copy of the working tree into the store).
  flake = import ../../flake.nix;
  self = flake.outputs { inherit self nixpkgs; } // {
    outPath = toString ../..;
  };

  # A NixOS system (real module system, ./stand-in/nixos-options.nix) with
  # kix's module, as the flake exposes it.
  nixos =
    modules:
    lib.nixosSystem {
      inherit system;
      modules = [ self.nixosModules.default ] ++ modules;
    };

  # What NixOS renders from a configuration of the module: forcing it runs
  # every type check of the option declarations.
  rendered = config: {
    inherit (config)
      systemd
      users
      networking
      assertions
      warnings
      ;
    inherit (config.virtualisation.oci-containers) containers;
    inherit (config.system) extraDependencies;
  };

  # Tests are { expected; actual; }.
  eq = expected: actual: { inherit expected actual; };
  ok = actual: eq true actual;
  # `x` fails evaluation with a throw (or a failed assert).
  throws = x: eq false (builtins.tryEval (builtins.deepSeq x x)).success;
  # lib.hasInfix, for strings that name store paths too (Nix 2.8's regex
  # matching refuses a pattern with string context).
  has =
    infix: s:
    lib.hasInfix (builtins.unsafeDiscardStringContext infix) (builtins.unsafeDiscardStringContext s);
  sorted = builtins.sort builtins.lessThan;
}
