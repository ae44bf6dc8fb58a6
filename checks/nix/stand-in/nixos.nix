# `nixosSystem` for the checks without nixpkgs: the real lib.evalModules
# with the declarations of ./nixos-options.nix and a package set (the
# stand-in's). `system.build.toplevel` (a never-built derivation) fails on
# failed assertions, listing them, as NixOS's does.
{ lib, pkgsFor }:
{
  modules,
  system ? "x86_64-linux",
  # Module arguments known before the configuration (imports may use them).
  specialArgs ? { },
  ...
}:
lib.evalModules {
  inherit specialArgs;
  modules = [
    ./nixos-options.nix
    { _module.args.pkgs = pkgsFor system; }
    (
      { config, pkgs, ... }:
      {
        system.build.toplevel =
          let
            failed = map (a: a.message) (builtins.filter (a: !a.assertion) config.assertions);
          in
          if failed == [ ] then
            pkgs.writeText "nixos-system-stand-in" "never built"
          else
            throw "Failed assertions:\n${lib.concatMapStrings (m: "- ${m}\n") failed}";
      }
    )
  ]
  ++ modules;
}
