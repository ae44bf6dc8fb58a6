# The example NixOS host (examples/nixos-host.nix), evaluated with nixpkgs'
# real module system and the NixOS option declarations of ./stand-in: the
# Kix clusters it declares become kix-declare units that run `kix declare`
# with the example builds, after the operator, and its assertions pass.
{ common }:
let
  inherit (common) eq ok has;
  config =
    (common.nixos [
      ../../examples/nixos-host.nix
      { _module.args.kix = common.self; }
    ]).config;
  examples = import ../../examples/default.nix {
    inherit (common) pkgs;
    kix = common.self.lib;
  };
  units = config.systemd.services;
  execStart = name: units."kix-declare-${name}".serviceConfig.ExecStart;
in
{
  exampleHostDeclaresItsClusters = eq [
    "kix-declare-apps"
    "kix-declare-infra"
    "kix-declare-legacy-tools"
  ] (builtins.filter (common.lib.hasPrefix "kix-declare-") (builtins.attrNames units));
  exampleHostDeclaresTheExampleBuilds = ok (
    has "\"--path=${examples.kixClusters.infra}\"" (execStart "infra")
    && has "\"--path=${examples.kixClusters.apps}\"" (execStart "apps")
  );
  exampleHostAcceptsOnlyTheDbMigration = ok (
    has "\"--accept=migration db\"" (execStart "apps") && !(has "--accept" (execStart "infra"))
  );
  exampleHostPrunesLegacyTools = ok (has "\"--allow-empty\"" (execStart "legacy-tools"));
  exampleHostNamesItself = ok (has "\"--declared-by=edge\"" (execStart "apps"));
  exampleHostRunsAfterK3sAndTheOperator = ok (
    builtins.all (u: builtins.elem u units.kix-declare-apps.after) [
      "k3s.service"
      "podman-kix-operator.service"
      "kix-operator-bootstrap.service"
    ]
  );
  exampleHostAssertionsPass = eq [ ] (builtins.filter (a: !a.assertion) config.assertions);
  exampleHostTypeChecks = ok (builtins.deepSeq (common.rendered config) true);
  # The flake's nixos-example-eval check (nixosSystem with specialArgs.kix),
  # here through the stand-in.
  exampleFlakeCheck = eq [
    "kix-declare-apps"
    "kix-declare-infra"
    "kix-declare-legacy-tools"
  ] (builtins.fromJSON common.self.checks.${common.system}.nixos-example-eval.text).units;
}
