# The flake's checks for one system (`nix flake check`). These need nixpkgs;
# what runs without it is checks/nix/run (see docs/nix.md).
{
  self,
  pkgs,
  system,
  # rustPlatform.buildRustPackage with the workspace's source and Cargo.lock.
  buildWorkspace,
  # The cargo workspace's filtered source.
  workspaceSrc,
  # nixpkgs.lib.nixosSystem
  nixosSystem,
}:
let
  inherit (pkgs) lib;
  packages = self.packages.${system};

  # Runs `script` in the flake's source with Nix available and a private
  # store under the build directory (as nixpkgs' own lib tests do), so
  # nix-instantiate can write .drv files inside the sandbox.
  withNix =
    name: script:
    pkgs.runCommand name { nativeBuildInputs = [ pkgs.nix ]; } ''
      export TEST_ROOT=$PWD/nix-test
      export HOME=$TEST_ROOT/home
      export NIX_BUILD_HOOK=
      export NIX_CONF_DIR=$TEST_ROOT/etc
      export NIX_LOCALSTATE_DIR=$TEST_ROOT/var
      export NIX_LOG_DIR=$TEST_ROOT/var/log/nix
      export NIX_STATE_DIR=$TEST_ROOT/var/nix
      export NIX_STORE_DIR=$TEST_ROOT/store
      export PAGER=cat
      mkdir -p "$HOME" "$NIX_CONF_DIR"
      printf '%s\n' 'experimental-features = nix-command flakes' 'substituters =' 'build-users-group =' \
        > "$NIX_CONF_DIR/nix.conf"
      nix-store --init
      cd ${self}
      ${script}
      touch $out
    '';

  # A check that runs cargo in the workspace (vendored from Cargo.lock).
  cargoCheck =
    pname: nativeBuildInputs: command:
    buildWorkspace pkgs {
      inherit pname nativeBuildInputs;
      # cargo-auditable wraps rustc, as clippy does; neither output ships.
      auditable = false;
      buildPhase = ''
        runHook preBuild
        ${command}
        runHook postBuild
      '';
      installPhase = "touch $out";
    };

  # The module evaluated with the real NixOS module system (no VM): both
  # modes, assertions included (forcing system.build.toplevel.drvPath).
  evalModule =
    extra:
    (nixosSystem {
      modules = [
        self.nixosModules.default
        {
          nixpkgs.hostPlatform = system;
          boot.isContainer = true;
          system.stateVersion = "25.11";
          services.kix-operator = {
            enable = true;
            kubeconfigFile = "/etc/kix/admin.yaml";
          }
          // extra;
        }
      ];
    }).config;
  container = evalModule { };
  declaredDemo = import ./demo-cluster.nix {
    kixLib = self.lib;
    inherit pkgs;
  };
  host = evalModule {
    mode = "host";
    rbac.namespaces = [ "apps" ];
    clusters.demo.build = declaredDemo;
    clusters.retired.absent = "prune";
  };
  moduleChecks =
    let
      c = container.virtualisation.oci-containers.containers.kix-operator;
      h = host.systemd.services.kix-operator;
      expect = ok: what: if ok then what else throw "nixos-module-eval: expected ${what}";
      strings = map toString;
    in
    [
      (expect (builtins.elem "/nix/store:/nix/store:ro" c.volumes) "the host store mounted read-only")
      (expect (builtins.elem "/nix/var/nix/daemon-socket:/nix/var/nix/daemon-socket" c.volumes) "the daemon socket mounted")
      (expect (c.environment.NIX_REMOTE == "daemon") "NIX_REMOTE=daemon in the container")
      (expect (builtins.elem "--kubeconfig=/var/lib/kix-operator/kubeconfig" c.cmd) "--kubeconfig")
      (expect (lib.all (p: builtins.elem p (strings container.system.extraDependencies)) (
        strings container.services.kix-operator.image.storeRoots
      )) "the image's store paths in the system closure")
      (expect (container.systemd.services ? kix-operator-bootstrap) "the bootstrap unit")
      (expect (!(container.systemd.services ? kix-operator)) "no host unit in container mode")
      (expect (h.serviceConfig.User == "kix-operator") "host mode runs as kix-operator")
      (expect (h.environment.NIX_REMOTE == "daemon") "NIX_REMOTE=daemon in host mode")
      (expect (!(host.virtualisation.oci-containers.containers ? kix-operator)) "no container in host mode")
      (expect (lib.any (
        o: o.kind == "RoleBinding" && o.metadata.name == "kix-operator-apply" && o.metadata.namespace == "apps"
      ) host.services.kix-operator.bootstrap.cluster.packages.rbac.resources) "apply permissions bound in rbac.namespaces only")
      (expect (lib.hasInfix (builtins.unsafeDiscardStringContext "\"--path=${declaredDemo}\"") (
        builtins.unsafeDiscardStringContext host.systemd.services.kix-declare-demo.serviceConfig.ExecStart
      )) "kix declare of the declared build")
      (expect (builtins.elem "kix-operator.service" host.systemd.services.kix-declare-demo.after) "the declare unit after the operator")
      (expect (lib.hasInfix "\"--allow-empty\"" host.systemd.services.kix-declare-retired.serviceConfig.ExecStart) "absent = prune declares an empty build")
    ];
in
{
  inherit (packages)
    kix
    kix-operator
    operator-image
    operator-image-own-store
    crds
    ;
  # The in-cluster install builds and passes kix validate.
  operator-manifests = self.lib.checkCluster {
    inherit pkgs;
    cluster = packages.operator-manifests;
    kix = packages.kix;
  };

  cargo-fmt = pkgs.runCommand "kix-cargo-fmt" {
    nativeBuildInputs = [
      pkgs.cargo
      pkgs.rustfmt
    ];
  } ''
    export HOME=$TMPDIR
    cd ${workspaceSrc}
    cargo fmt --all -- --check
    touch $out
  '';

  cargo-clippy = cargoCheck "kix-cargo-clippy" [ pkgs.clippy ] ''
    cargo clippy --workspace --all-targets --offline --locked -- -D warnings
  '';

  # Unit tests that need neither a control plane nor a Nix store (the
  # integration tests in crates/*/tests run in checks/test against the
  # project's own control plane, and in the VM tests below).
  cargo-test = cargoCheck "kix-cargo-test" [ ] ''
    cargo test --offline --locked --lib \
      --package kix-manifest --package kix-api --package kix-nix --package kix-engine
  '';

  # Every .nix file parses.
  nix-parse = withNix "kix-nix-parse" ''
    find . -name '*.nix' -print0 | xargs -0 -r -n1 nix-instantiate --parse >/dev/null
  '';

  # The Nix library's evaluation tests (nix/tests/eval.nix; what
  # nix/tests/run does first). The fixture builds of nix/tests/run use the
  # host-tools builder (/usr/bin, no sandbox) and run there, not here;
  # nix-lib-nixpkgs builds a cluster with nixpkgs' runCommand instead.
  nix-lib = withNix "kix-nix-lib" ''
    nix-instantiate --eval --strict --json nix/tests/eval.nix
  '';

  # The packaging evaluation checks of checks/nix/run (this nixpkgs' lib,
  # the stand-in package set).
  nix-packaging = withNix "kix-nix-packaging" ''
    nix-instantiate --eval --strict --json checks/nix/eval.nix --arg throwOnFailure true \
      --arg nixpkgsLib ${pkgs.path}/lib
  '';

  # The examples (examples/default.nix) built with this nixpkgs, in the
  # sandbox of the build: what `kix deploy infra --file examples/default.nix`
  # builds on a user's machine.
  examples =
    let
      examples = import ../../examples/default.nix {
        inherit pkgs;
        kix = self.lib;
      };
    in
    pkgs.runCommand "kix-examples" { } ''
      mkdir $out
      ln -s ${examples.kixClusters.infra} $out/infra
      ln -s ${examples.kixClusters.apps} $out/apps
      ln -s ${examples.next.apps} $out/next-apps
    '';

  # lib.mkCluster with nixpkgs' runCommand: the tree has the format-1 layout.
  nix-lib-nixpkgs =
    let
      cluster = import ./demo-cluster.nix {
        kixLib = self.lib;
        inherit pkgs;
        name = "nixpkgs-check";
      };
    in
    pkgs.runCommand "kix-lib-with-nixpkgs" { nativeBuildInputs = [ pkgs.jq ]; } ''
      tree=${cluster}
      jq -e '.format == 1 and .cluster == "nixpkgs-check" and .packages == ["base", "app"]' $tree/kix.json
      jq -e '.settings.keep == 3 and .settings.maxAge == "7d"' $tree/kix.json
      jq -e '.name == "app" and .dependsOn == ["base"] and .namespace == "kix-vm"' $tree/packages/app/package.json
      ls $tree/packages/app/resources/*.json
      ls $tree/packages/app/resources/manifests
      touch $out
    '';

  nixos-module-eval = pkgs.writeText "kix-nixos-module-eval.json" (
    builtins.deepSeq moduleChecks (
      builtins.unsafeDiscardStringContext (
        builtins.toJSON {
          checks = moduleChecks;
          container = {
            inherit (container.virtualisation.oci-containers.containers.kix-operator)
              image
              cmd
              volumes
              extraOptions
              ;
            toplevel = container.system.build.toplevel.drvPath;
          };
          host = {
            inherit (host.systemd.services.kix-operator.serviceConfig) ExecStart;
            declare = host.systemd.services.kix-declare-demo.serviceConfig.ExecStart;
            toplevel = host.system.build.toplevel.drvPath;
          };
        }
      )
    )
  );

  # The example NixOS host (examples/nixos-host.nix) with the real NixOS
  # module system: its kix-declare units and assertions, toplevel forced.
  nixos-example-eval =
    let
      example =
        (nixosSystem {
          specialArgs.kix = self;
          modules = [
            self.nixosModules.default
            ../../examples/nixos-host.nix
            {
              nixpkgs.hostPlatform = system;
              boot.isContainer = true;
              system.stateVersion = "25.11";
            }
          ];
        }).config;
      units = builtins.filter (lib.hasPrefix "kix-declare-") (builtins.attrNames example.systemd.services);
    in
    assert units == [
      "kix-declare-apps"
      "kix-declare-infra"
      "kix-declare-legacy-tools"
    ];
    pkgs.writeText "kix-nixos-example-eval.json" (
      builtins.unsafeDiscardStringContext (
        builtins.toJSON {
          inherit units;
          toplevel = example.system.build.toplevel.drvPath;
        }
      )
    );

  vm-test = import ./vm-test.nix {
    inherit pkgs self system;
    mode = "container";
  };
  vm-test-host = import ./vm-test.nix {
    inherit pkgs self system;
    mode = "host";
  };
}
