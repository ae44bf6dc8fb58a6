# A stand-in for nixpkgs' package set, for the packaging checks without
# nixpkgs (checks/nix/run). Every package and builder returns a real but
# never-built derivation (its builder fails on purpose) that records the
# arguments it was given as `stubArgs`, so a check can look at what the
# flake, the image or the module asked nixpkgs for. Builders that produce
# text keep it as `text`.
{
  system,
  # nixpkgs' lib, with nixosSystem (./nixpkgs.nix)
  lib,
  # nixpkgs' source (here: the directory holding its lib/)
  path,
}:
let
  stub =
    name: extra:
    derivation (
      {
        inherit name system;
        builder = "/bin/sh";
        args = [
          "-c"
          "echo 'this is a stand-in for a nixpkgs derivation; build it with nixpkgs' >&2; exit 1"
        ];
      }
      # Text (scripts, files) goes into the .drv too, so a check can read a
      # script back from the store path a unit refers to.
      // lib.optionalAttrs (extra ? text) { inherit (extra) text; }
    )
    // extra;

  package =
    pname:
    stub "${pname}-stand-in" {
      inherit pname;
      version = "stand-in";
      meta.mainProgram = pname;
    };

  pkgs = {
    inherit lib system path;
    stdenv = {
      hostPlatform.system = system;
      buildPlatform = {
        inherit system;
        canExecute = platform: platform.system == system;
      };
    };

    callPackage =
      fn: args:
      let
        f = if builtins.isFunction fn then fn else import fn;
      in
      f (builtins.intersectAttrs (builtins.functionArgs f) pkgs // args);

    runCommand =
      name: env: script:
      stub name {
        stubArgs = env;
        text = script;
        passthru = env.passthru or { };
      };
    writeText = name: text: stub name { inherit text; };
    # Not a derivation: the "store path" is the script itself, so a unit's
    # ExecStart shows the script and checks can read it back.
    writeShellScript = name: text: {
      inherit name;
      text = "#!/usr/bin/env bash\n" + text;
      outPath = "#!/usr/bin/env bash\n" + text;
    };

    rustPlatform = {
      buildRustPackage =
        args:
        stub "${args.pname}-${args.version}" {
          inherit (args) pname version;
          meta = args.meta or { };
          stubArgs = args;
        };
      rustLibSrc = stub "rust-lib-src" { };
    };

    dockerTools = {
      buildLayeredImage =
        args:
        stub "${args.name}.tar.gz" {
          imageName = args.name;
          imageTag = if args.tag or null != null then args.tag else "stand-in-tag";
          stubArgs = args;
        };
      fakeNss = stub "fake-nss" {
        override = args: stub "fake-nss" { stubArgs = args; };
      };
    };

    testers.runNixOSTest =
      args:
      stub "vm-test-run-${args.name}" {
        stubArgs = args;
        # The nodes, evaluated as NixOS systems (./nixos.nix).
        nodes = builtins.mapAttrs (
          _: node:
          (lib.nixosSystem {
            inherit system;
            modules = [ node ];
          }).config
        ) args.nodes;
      };

    mkShell = args: stub "nix-shell" { stubArgs = args; };
  }
  // lib.genAttrs [
    "bash"
    "cacert"
    "cargo"
    "clippy"
    "coreutils"
    "curl"
    "go"
    "installShellFiles"
    "jq"
    "kubectl"
    "nix"
    "nixfmt-tree"
    "openssl"
    "pkg-config"
    "rust-analyzer"
    "rustc"
    "rustfmt"
  ] package;
in
pkgs
