# The flake's outputs, evaluated with the stand-in nixpkgs: output names for
# both systems and what each output asks nixpkgs for.
{ common }:
let
  inherit (common)
    self
    lib
    eq
    ok
    has
    sorted
    system
    ;
  systems = [
    "aarch64-linux"
    "x86_64-linux"
  ];
  packages = self.packages.${system};
  kix = packages.kix;
  operator = packages.kix-operator;
  image = packages.operator-image;
  imageArgs = image.stubArgs;
  env = imageArgs.config.Env;
  imageMode =
    img:
    let
      e = img.stubArgs.config.Env;
    in
    {
      inherit (img) ownStore;
      daemon = builtins.elem "NIX_REMOTE=daemon" e;
      gcroots = builtins.any (lib.hasPrefix "KIX_GCROOTS_DIR=") e;
      kixStore = builtins.elem "KIX_STORE=local?root=/var/lib/kix" e;
      storeDir = has "chown 65532:65532 ./var/lib/kix" img.stubArgs.fakeRootCommands;
    };
  cargoToml = builtins.fromTOML (builtins.readFile ../../Cargo.toml);
  flakeNix = import ../../flake.nix;
  namesPerSystem = output: map (s: sorted (builtins.attrNames output.${s})) systems;
  # The module a nixosModules output evaluates to, with dummy arguments.
  moduleKey =
    m:
    (m {
      inherit lib;
      pkgs = common.pkgs;
      config = { };
    }).key;
  overlay = self.overlays.default common.pkgs common.pkgs;
  devShellPackages = map (p: p.pname or p.name) self.devShells.${system}.default.stubArgs.packages;
in
{
  outputNames = eq [
    "apps"
    "checks"
    "devShells"
    "formatter"
    "lib"
    "nixosModules"
    "overlays"
    "packages"
  ] (builtins.filter (n: n != "outPath") (builtins.attrNames self));

  inputsNixpkgsOnly = eq [ "nixpkgs" ] (builtins.attrNames flakeNix.inputs);
  inputUrlIsTheChannelTarball = eq "https://channels.nixos.org/nixos-unstable/nixexprs.tar.xz" flakeNix.inputs.nixpkgs.url;
  outputsTakeSelfAndNixpkgs = eq {
    self = false;
    nixpkgs = false;
  } (builtins.functionArgs flakeNix.outputs);

  perSystemOutputsForBothSystems = eq (lib.genAttrs [ "apps" "checks" "devShells" "formatter" "packages" ] (_: systems)) (
    lib.genAttrs [ "apps" "checks" "devShells" "formatter" "packages" ] (o: sorted (builtins.attrNames self.${o}))
  );

  packageNames = eq [
    [
      "crds"
      "default"
      "kix"
      "kix-operator"
      "operator-image"
      "operator-image-own-store"
      "operator-manifests"
    ]
    [
      "crds"
      "default"
      "kix"
      "kix-operator"
      "operator-image"
      "operator-image-own-store"
      "operator-manifests"
    ]
  ] (namesPerSystem self.packages);
  defaultPackageIsKix = eq kix.outPath packages.default.outPath;

  kixPackage = eq {
    pname = "kix";
    inherit (cargoToml.workspace.package) version;
    cargoBuildFlags = [
      "--package"
      "kix-cli"
      "--bin"
      "kix"
    ];
    lockFile = ../../Cargo.lock;
    doCheck = false;
    mainProgram = "kix";
  } {
    inherit (kix) pname version;
    inherit (kix.stubArgs) cargoBuildFlags doCheck;
    lockFile = kix.stubArgs.cargoLock.lockFile;
    mainProgram = kix.meta.mainProgram;
  };
  operatorPackage = eq {
    pname = "kix-operator";
    cargoBuildFlags = [
      "--package"
      "kix-operator"
      "--bin"
      "kix-operator"
    ];
    doCheck = false;
    mainProgram = "kix-operator";
  } {
    inherit (operator) pname;
    inherit (operator.stubArgs) cargoBuildFlags doCheck;
    mainProgram = operator.meta.mainProgram;
  };
  # lib.fileset keeps Cargo.toml, Cargo.lock, crates/ and deploy/ of the
  # repository, and nothing else.
  sourceIsFilteredToTheWorkspace = eq {
    root = toString ../..;
    kept = [
      "Cargo.lock"
      "Cargo.toml"
      "crates"
      "deploy"
    ];
  } {
    root = toString kix.stubArgs.src.origSrc;
    kept = builtins.filter (
      name: kix.stubArgs.src.filter (toString ../.. + "/${name}") (builtins.readDir ../..).${name}
    ) (builtins.attrNames (builtins.readDir ../..));
  };
  bothBinariesShareTheSource = eq kix.stubArgs.src.outPath operator.stubArgs.src.outPath;
  kixShipsCompletionsAndManPage = ok (
    has "installShellCompletion --cmd kix" kix.stubArgs.postInstall
    && has "kix man > kix.1" kix.stubArgs.postInstall
    && builtins.elem common.pkgs.installShellFiles kix.stubArgs.nativeBuildInputs
  );

  crdsIsDeployCrdsYaml = ok (
    packages.crds.name == "kix-crds.yaml" && has "crds.yaml $out" packages.crds.text
  );

  imageName = eq "kix-operator" image.imageName;
  imageIsLayered = ok (lib.hasSuffix ".tar.gz" image.name);
  imageEntrypoint = eq [ "${operator}/bin/kix-operator" ] imageArgs.config.Entrypoint;
  imageRunsAsNonRoot = eq "65532:65532" imageArgs.config.User;
  imageEnv = ok (
    builtins.elem "NIX_REMOTE=daemon" env
    && builtins.elem "SSL_CERT_FILE=${common.pkgs.cacert}/etc/ssl/certs/ca-bundle.crt" env
    && builtins.any (e: lib.hasPrefix "PATH=" e && has "${common.pkgs.nix}/bin" e) env
  );
  imageContents = ok (
    builtins.all (p: builtins.elem p.outPath (map (c: c.outPath) imageArgs.contents)) [
      operator
      common.pkgs.nix
      common.pkgs.cacert
    ]
  );
  imageUserInPasswd = ok (
    builtins.any (
      c: builtins.any (has "kix:x:65532:65532:") (c.stubArgs.extraPasswdLines or [ ])
    ) imageArgs.contents
  );
  imageStoreRootsAreItsContents = eq (map (c: c.outPath) imageArgs.contents) (map (c: c.outPath) image.storeRoots);
  imageHomeOwnedByTheUser = ok (has "chown 65532:65532 ./home/kix" imageArgs.fakeRootCommands);
  imageHostStoreMode = eq {
    ownStore = false;
    daemon = true;
    gcroots = true;
    kixStore = false;
    storeDir = false;
  } (imageMode image);

  # Own-store mode: no daemon, its store under /var/lib/kix (KIX_STORE),
  # the GC roots inside it (no KIX_GCROOTS_DIR), the mount point the user's.
  ownStoreImage = eq {
    ownStore = true;
    daemon = false;
    gcroots = false;
    kixStore = true;
    storeDir = true;
  } (imageMode packages.operator-image-own-store);
  ownStoreImageSameEntrypointAndUser = eq {
    inherit (imageArgs.config) Entrypoint User;
    storeRoots = map (c: c.outPath) image.storeRoots;
  } {
    inherit (packages.operator-image-own-store.stubArgs.config) Entrypoint User;
    storeRoots = map (c: c.outPath) packages.operator-image-own-store.storeRoots;
  };

  # The in-cluster install names the own-store image (name:tag) and runs
  # it with its store on the volume and its leader Lease in kix-system.
  operatorManifests =
    let
      manifests = packages.operator-manifests;
      firstKind = (builtins.head manifests.packages.operator.resources).kind;
      deployment = builtins.head (builtins.filter (r: r.kind == "Deployment") manifests.packages.operator.resources);
      c = builtins.head deployment.spec.template.spec.containers;
    in
    eq {
      cluster = "kix-operator";
      order = [
        "rbac"
        "operator"
      ];
      first = "PersistentVolumeClaim";
      image = "kix-operator:stand-in-tag";
      replicas = 2;
      args = [
        "--store=local?root=/var/lib/kix"
        "--lease-namespace=kix-system"
        "--leader-lease=kix-operator"
        "--metrics-addr=0.0.0.0:8080"
      ];
    } {
      inherit (manifests) cluster;
      order = manifests.packageOrder;
      first = firstKind;
      inherit (c) image args;
      inherit (deployment.spec) replicas;
    };

  apps = eq [
    [
      "default"
      "kix"
    ]
    [
      "default"
      "kix"
    ]
  ] (namesPerSystem self.apps);
  appKix = eq {
    type = "app";
    program = "${kix}/bin/kix";
  } { inherit (self.apps.${system}.kix) type program; };

  libMkCluster = ok (builtins.isFunction self.lib.mkCluster);
  libIsTheNixDirectory = eq (builtins.attrNames (import ../../nix { })) (builtins.attrNames self.lib);

  nixosModules = eq [
    "default"
    "kix-operator"
  ] (builtins.attrNames self.nixosModules);
  nixosModuleDefaultIsKixOperator = eq (moduleKey self.nixosModules.kix-operator) (moduleKey self.nixosModules.default);
  nixosModuleImportsTheFile = eq [ ../../nixos-modules/kix-operator.nix ] (
    (self.nixosModules.default {
      inherit lib;
      pkgs = common.pkgs;
      config = { };
    }).imports
  );

  overlayAddsKixAndOperator = eq [
    "kix"
    "kix-operator"
  ] (builtins.attrNames overlay);
  overlayBuildsWithFinal = eq "kix-operator" overlay.kix-operator.pname;

  checkNames = eq [
    "cargo-clippy"
    "cargo-fmt"
    "cargo-test"
    "crds"
    "examples"
    "kix"
    "kix-operator"
    "nix-lib"
    "nix-lib-nixpkgs"
    "nix-packaging"
    "nix-parse"
    "nixos-example-eval"
    "nixos-module-eval"
    "operator-image"
    "operator-image-own-store"
    "operator-manifests"
    "vm-test"
    "vm-test-host"
  ] (builtins.attrNames self.checks.${system});
  checksForBothSystems = eq systems (sorted (builtins.attrNames self.checks));
  clippyDeniesWarnings = ok (
    has "cargo clippy --workspace --all-targets --offline --locked -- -D warnings" self.checks.${system}.cargo-clippy.stubArgs.buildPhase
  );
  unitTestsNeedNoCluster = ok (
    has "cargo test --offline --locked --lib" self.checks.${system}.cargo-test.stubArgs.buildPhase
  );
  fmtCheck = ok (has "cargo fmt --all -- --check" self.checks.${system}.cargo-fmt.text);
  nixLibCheckRunsEvalNix = ok (has "nix-instantiate --eval --strict --json nix/tests/eval.nix" self.checks.${system}.nix-lib.text);

  devShell = ok (
    builtins.all (p: builtins.elem p devShellPackages) [
      "cargo"
      "rustc"
      "clippy"
      "rustfmt"
      "go"
      "nix"
      "openssl"
      "kubectl"
    ]
  );
  formatterIsNixfmt = eq "nixfmt-tree" self.formatter.${system}.pname;

  # Every derivation output instantiates (a .drv path) for both systems.
  everythingInstantiates = ok (
    builtins.all (
      s:
      builtins.all (d: lib.hasSuffix ".drv" d.drvPath) (
        builtins.attrValues self.packages.${s}
        ++ builtins.attrValues self.checks.${s}
        ++ [
          self.devShells.${s}.default
          self.formatter.${s}
        ]
      )
    ) systems
  );
  # The nixos-module-eval check (its expectations run at evaluation time,
  # here against the stand-in module system).
  nixosModuleEvalCheck = eq 14 (builtins.length (builtins.fromJSON self.checks.${system}.nixos-module-eval.text).checks);
}
