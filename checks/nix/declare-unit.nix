# The kix-declare-demo unit of services.kix-operator.clusters.demo for one
# generation of a host, from the evaluation of the module (real lib,
# stand-in packages, the demo cluster built with the host tools), for
# checks/nix/bootstrap-test, which runs its ExecStart with its environment
# against a real API server and operator.
#
#   nix build -f checks/nix/declare-unit.nix tree --argstr generation two --argstr kubeconfig K --arg nixpkgsLib L
#   nix eval --raw -f checks/nix/declare-unit.nix execStart ...
{
  kubeconfig,
  generation,
  system ? builtins.currentSystem,
  nixpkgsLib,
}:
let
  common = import ./common.nix { inherit system nixpkgsLib; };
  hostTools = import ../../nix/tests/host-tools.nix { inherit system; };
  # What bootstrap-test builds the demo cluster with, so generation `one`
  # is the build `kix deploy --operator` deployed there.
  demo =
    args:
    import ./demo-cluster.nix (
      {
        kixLib = import ../../nix { };
        pkgs = hostTools // {
          writeText = builtins.toFile;
        };
      }
      // args
    );
  # An object the host adopts (kix does not own it before).
  legacy = {
    apiVersion = "v1";
    kind = "ConfigMap";
    metadata = {
      name = "legacy";
      namespace = "kix-vm";
    };
    data.owner = "kix";
  };
  generations = {
    one.build = demo { };
    two.build = demo { greeting = "generation two"; };
    adopting.build = demo { extraResources = [ legacy ]; };
    adopting-accepted = {
      build = demo { extraResources = [ legacy ]; };
      acceptMigrations = [ "adopt ConfigMap kix-vm/legacy" ];
    };
  };
  config =
    (common.nixos [
      { _module.args.pkgs = common.lib.mkForce (common.pkgs // { inherit (hostTools) runCommand; }); }
      {
        networking.hostName = "bootstrap-test";
        services.kix-operator = {
          enable = true;
          kubeconfigFile = kubeconfig;
          clusters.demo = generations.${generation} // {
            waitTimeout = 120;
          };
        };
      }
    ]).config;
  unit = config.systemd.services.kix-declare-demo;
in
assert builtins.filter (a: !a.assertion) config.assertions == [ ];
{
  # The generation's build of Kix cluster demo.
  tree = config.services.kix-operator.clusters.demo.build;
  # The unit's command line as systemd reads it (quoted, % and $ doubled).
  execStart = unit.serviceConfig.ExecStart;
  # The unit's environment, as lines for bash's `export`.
  environment = common.lib.concatStrings (
    common.lib.mapAttrsToList (name: value: "${name}=${common.lib.escapeShellArg value}\n") unit.environment
  );
}
