# The NixOS VM tests (checks/nix/vm-test.nix), evaluated with the stand-in:
# the node's configuration (k3s and the operator module, through the
# stand-in module system) and the steps of the test script. Running them
# needs nixpkgs and KVM (`nix flake check`).
{ common }:
let
  inherit (common)
    eq
    ok
    has
    self
    system
    ;
  test = mode: self.checks.${system}.${if mode == "container" then "vm-test" else "vm-test-host"};
  node = mode: (test mode).nodes.machine;
  script = mode: (test mode).stubArgs.testScript;
  cluster = common.lib.head (node "container").virtualisation.additionalPaths;
  failed = c: builtins.filter (a: !a.assertion) c.assertions;
  # The node switched to one of its specialisations (a later generation).
  specialised =
    mode: name:
    (common.lib.nixosSystem {
      inherit system;
      modules = [
        (test mode).stubArgs.nodes.machine
        (node mode).specialisation.${name}.configuration
      ];
    }).config;
  declaredPath =
    c:
    let
      start = c.systemd.services.kix-declare-declared.serviceConfig.ExecStart;
    in
    builtins.head (builtins.match ".*\"--path=([^\"]*)\".*" (builtins.unsafeDiscardStringContext start));
  declaredOf = c: c.services.kix-operator.clusters.declared.build;
  steps = [
    "machine.wait_for_unit(\"k3s.service\")"
    "kix-operator-bootstrap.service"
    "auth can-i"
    "build demo --path {cluster}"
    "deploy demo --path {cluster} --operator --yes"
    "get configmap demo-settings demo-extra"
    "patch configmap demo-settings"
    "delete configmap demo-extra"
    "status demo --operator"
    "/nix/var/nix/gcroots/kix/demo/"
    "wait_for_unit(\"kix-declare-declared.service\""
    "is declared by NixOS host machine"
    "systemctl restart kix-declare-declared.service"
    "/run/current-system/specialisation/generation2/bin/switch-to-configuration test"
    "/run/booted-system/bin/switch-to-configuration test"
    "{.spec.receipt.rollbackFrom}"
    "machine.fail("
    "/run/booted-system/specialisation/generation3/bin/switch-to-configuration test"
    "needs acceptance"
  ];
in
{
  vmTestNames = eq [
    "kix-operator-container"
    "kix-operator-host"
  ] (map (m: (test m).stubArgs.name) [ "container" "host" ]);
  vmNodeRunsK3sServer = eq [
    {
      enable = true;
      role = "server";
    }
    {
      enable = true;
      role = "server";
    }
  ] (map (m: { inherit ((node m).services.k3s) enable role; }) [ "container" "host" ]);
  vmNodeRunsTheOperator = eq [
    {
      enable = true;
      mode = "container";
      kubeconfigFile = "/etc/rancher/k3s/k3s.yaml";
    }
    {
      enable = true;
      mode = "host";
      kubeconfigFile = "/etc/rancher/k3s/k3s.yaml";
    }
  ] (map (m: { inherit ((node m).services.kix-operator) enable mode kubeconfigFile; }) [ "container" "host" ]);
  vmNodeUnits = ok (
    (node "container").virtualisation.oci-containers.containers ? kix-operator
    && (node "host").systemd.services ? kix-operator
    && (node "container").systemd.services ? kix-operator-bootstrap
  );
  vmNodeAssertionsPass = eq [ [ ] [ ] ] (map (m: failed (node m)) [ "container" "host" ]);
  vmClusterIsTheDemoBuild = eq "kix-demo" cluster.name;
  vmScriptSteps = eq [
    [ ]
    [ ]
  ] (map (m: builtins.filter (s: !(has s (script m))) steps) [ "container" "host" ]);
  vmScriptUsesTheBuild = ok (has cluster.outPath (script "container"));
  # Three generations of the Kix cluster `declared`: the boot one, a
  # value changed, a namespace moved; each unit declares its own build.
  vmGenerationsDeclareTheirBuilds = eq {
    clusters = [
      "declared"
      "declared"
      "declared"
    ];
    greetings = [
      "generation one"
      "generation two"
      "hello"
    ];
    namespaces = [
      "kix-decl"
      "kix-decl"
      "kix-decl-3"
    ];
    units = true;
    assertions = [
      [ ]
      [ ]
    ];
  } (
    let
      generations = [
        (node "container")
        (specialised "container" "generation2")
        (specialised "host" "generation3")
      ];
    in
    {
      clusters = map (c: (declaredOf c).cluster) generations;
      greetings = map (c: (builtins.head (declaredOf c).packages.app.resources).data.greeting) generations;
      namespaces = map (c: (declaredOf c).packages.app.namespace) generations;
      units = builtins.all (c: declaredPath c == (declaredOf c).outPath) generations;
      assertions = map failed [
        (specialised "container" "generation2")
        (specialised "host" "generation3")
      ];
    }
  );
  vmContainerChecksStoreMount = ok (has "container_mode = True" (script "container") && has "container_mode = False" (script "host"));
}
