# kix: deploy the Kubernetes manifest trees that Nix builds.
#
# Outputs (see docs/nix.md for each one and for which checks need nixpkgs):
#   packages.<system>.{kix, kix-operator, operator-image, crds, default,
#                      operator-image-own-store, operator-manifests}
#   apps.<system>.{kix, default}
#   lib                       the Nix library (lib.mkCluster), from ./nix
#   nixosModules.{kix-operator, default}
#   overlays.default          adds kix and kix-operator to nixpkgs
#   checks.<system>.*         builds, clippy, fmt, unit tests, Nix library
#                             tests, module evaluation, NixOS VM tests (k3s)
#   devShells.<system>.default, formatter.<system>
{
  description = "kix: deploy Kubernetes resources that Nix builds";

  # nixos-unstable: its rustc satisfies the workspace's rust-version (1.89).
  inputs.nixpkgs.url = "https://channels.nixos.org/nixos-unstable/nixexprs.tar.xz";

  outputs =
    { self, nixpkgs }:
    let
      inherit (nixpkgs) lib;

      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];
      forAllSystems = f: lib.genAttrs systems (system: f system nixpkgs.legacyPackages.${system});

      cargoToml = builtins.fromTOML (builtins.readFile ./Cargo.toml);
      version = cargoToml.workspace.package.version;

      # What cargo needs and nothing else, so editing docs, Nix files or
      # checks does not rebuild the binaries. deploy/ holds crds.yaml, which
      # the kix-api unit tests compare with the types.
      workspaceSrc = lib.fileset.toSource {
        root = ./.;
        fileset = lib.fileset.unions [
          ./Cargo.toml
          ./Cargo.lock
          ./crates
          ./deploy
        ];
      };

      # The Rust workspace for any nixpkgs (used by packages, the overlay,
      # the module's fallback and the checks). `args` override the defaults.
      buildWorkspace =
        pkgs: args:
        pkgs.rustPlatform.buildRustPackage (
          {
            pname = "kix-workspace";
            inherit version;
            src = workspaceSrc;
            cargoLock.lockFile = ./Cargo.lock;
            # Most tests need a control plane and Nix with a store; the
            # checks run the unit tests that need neither (cargo-test).
            doCheck = false;
            meta = {
              homepage = "https://github.com/kix-run/kix";
              license = lib.licenses.asl20;
              platforms = lib.platforms.linux;
            };
          }
          // args
        );

      mkPackages =
        pkgs:
        let
          crate =
            {
              pname,
              package,
              description,
              extra ? { },
            }:
            buildWorkspace pkgs (
              {
                inherit pname;
                cargoBuildFlags = [
                  "--package"
                  package
                  "--bin"
                  pname
                ];
                meta = {
                  inherit description;
                  homepage = "https://github.com/kix-run/kix";
                  license = lib.licenses.asl20;
                  platforms = lib.platforms.linux;
                  mainProgram = pname;
                };
              }
              // extra
            );
        in
        rec {
          kix = crate {
            pname = "kix";
            package = "kix-cli";
            description = "Deploy Kubernetes resources that Nix builds";
            # Shell completions and the man page, from the binary itself.
            extra = {
              nativeBuildInputs = [ pkgs.installShellFiles ];
              postInstall = lib.optionalString (pkgs.stdenv.buildPlatform.canExecute pkgs.stdenv.hostPlatform) ''
                installShellCompletion --cmd kix \
                  --bash <($out/bin/kix completions bash) \
                  --fish <($out/bin/kix completions fish) \
                  --zsh <($out/bin/kix completions zsh)
                $out/bin/kix man > kix.1
                installManPage kix.1
              '';
            };
          };
          kix-operator = crate {
            pname = "kix-operator";
            package = "kix-operator";
            description = "Keeps the current kix Activation of each Kix cluster applied";
          };
          # The CRDs of kix's records (Activation, PackageInstance), as a file:
          # kubectl apply -f $(nix build --print-out-paths .#crds)
          crds = pkgs.runCommand "kix-crds.yaml" { } ''
            cp ${./deploy/crds.yaml} $out
          '';
          operator-image = pkgs.callPackage ./images/operator.nix { inherit kix-operator; };
          # For clusters whose nodes have no Nix: the operator's own store
          # on a volume (images/operator.nix, ownStore).
          operator-image-own-store = pkgs.callPackage ./images/operator.nix {
            inherit kix-operator;
            ownStore = true;
          };
          # The in-cluster install of that image, a Kix cluster (kix deploy
          # kix-operator --path ...). The tag is the image's output hash;
          # push the image under this name, or call lib.mkOperatorInstall
          # with your registry's reference.
          operator-manifests = (import ./nix { }).mkOperatorInstall {
            inherit pkgs;
            image = "${operator-image-own-store.imageName}:${operator-image-own-store.imageTag}";
          };
        };
    in
    {
      packages = forAllSystems (
        system: pkgs:
        let
          p = mkPackages pkgs;
        in
        {
          inherit (p)
            kix
            kix-operator
            operator-image
            operator-image-own-store
            operator-manifests
            crds
            ;
          default = p.kix;
        }
      );

      apps = forAllSystems (
        system: pkgs:
        let
          kix = {
            type = "app";
            program = "${self.packages.${system}.kix}/bin/kix";
            meta.description = "kix: build, plan and deploy Kix clusters";
          };
        in
        {
          inherit kix;
          default = kix;
        }
      );

      # kix.lib.mkCluster { pkgs, name, packages, settings ? {} }
      lib = import ./nix { };

      overlays.default = final: prev: {
        inherit (mkPackages final) kix kix-operator;
      };

      # The module, with the packages (operator, and the kix CLI of the
      # bootstrap) defaulting to this flake's build (or, on a system this
      # flake does not build for, a build with the host's nixpkgs). Non-flake
      # users import ./nixos-modules/kix-operator.nix and set
      # services.kix-operator.package and bootstrap.package (or apply
      # overlays.default).
      nixosModules.kix-operator =
        { lib, pkgs, ... }:
        let
          system = pkgs.stdenv.hostPlatform.system;
          build = if self.packages ? ${system} then self.packages.${system} else mkPackages pkgs;
        in
        {
          key = "kix#nixosModules.kix-operator";
          _file = "${toString ./flake.nix}#nixosModules.kix-operator";
          imports = [ ./nixos-modules/kix-operator.nix ];
          services.kix-operator = {
            package = lib.mkDefault build.kix-operator;
            bootstrap.package = lib.mkDefault build.kix;
          };
        };
      nixosModules.default = self.nixosModules.kix-operator;

      checks = forAllSystems (
        system: pkgs:
        import ./checks/nix {
          inherit
            self
            pkgs
            system
            buildWorkspace
            workspaceSrc
            ;
          inherit (nixpkgs.lib) nixosSystem;
        }
      );

      devShells = forAllSystems (
        system: pkgs: {
          default = pkgs.mkShell {
            packages = [
              pkgs.cargo
              pkgs.rustc
              pkgs.clippy
              pkgs.rustfmt
              pkgs.rust-analyzer
              pkgs.go # checks/build-control-plane builds etcd and Kubernetes
              pkgs.nix
              pkgs.openssl
              pkgs.pkg-config
              pkgs.kubectl
            ];
            RUST_SRC_PATH = "${pkgs.rustPlatform.rustLibSrc}";
          };
        }
      );

      formatter = forAllSystems (system: pkgs: pkgs.nixfmt-tree);
    };
}
