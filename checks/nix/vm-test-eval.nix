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
  vmContainerChecksStoreMount = ok (has "container_mode = True" (script "container") && has "container_mode = False" (script "host"));
}
