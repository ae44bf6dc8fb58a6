# kix's packaging checks that run with plain Nix, without the nixpkgs
# package set and without network: the flake's outputs, flake.lock, the
# NixOS module, the example NixOS host and the VM tests, evaluated with
# nixpkgs' real lib (module system and types) and the stand-ins in
# ./stand-in.
#
#   nix-instantiate --eval --strict --json checks/nix/eval.nix \
#     --arg nixpkgsLib ../shared/nixpkgs-lib/lib --arg throwOnFailure true
#
# prints {"failed":[],"passed":N,...} and fails evaluation listing the broken
# tests; checks/nix/run passes `--arg throwOnFailure false` to count them
# instead. Tests are { expected; actual; } (see common.nix).
{
  throwOnFailure ? true,
  system ? "x86_64-linux",
  # Also build the demo cluster with the host-tools builder (needs a local
  # store and sandbox = false, like nix/tests/run; not inside a Nix build).
  withBuilds ? false,
  # nixpkgs' lib/ directory.
  nixpkgsLib,
}:
let
  common = import ./common.nix { inherit system nixpkgsLib; };
  groups = {
    flake = import ./flake-outputs.nix { inherit common; };
    lock = import ./lock.nix { inherit common; };
    module = import ./module.nix { inherit common; };
    vm = import ./vm-test-eval.nix { inherit common; };
    example = import ./example.nix { inherit common; };
    build = if withBuilds then import ./host-demo.nix { inherit common; } else { };
  };
  tests = builtins.foldl' (acc: g: acc // g) { } (builtins.attrValues groups);

  outcome =
    name:
    let
      t = tests.${name};
      r = builtins.tryEval (builtins.deepSeq t.actual (t.actual == t.expected));
    in
    {
      inherit name;
      passed = r.success && r.value;
      actual = if r.success then t.actual else "<evaluation failed: a throw or a failed assert>";
      inherit (t) expected;
    };
  outcomes = map outcome (builtins.attrNames tests);
  failed = builtins.filter (o: !o.passed) outcomes;
  passed = builtins.length outcomes - builtins.length failed;
  summary = "${toString passed} passed, ${toString (builtins.length failed)} failed";
  result = {
    inherit passed summary;
    failed = map (o: removeAttrs o [ "passed" ]) failed;
  };
in
if throwOnFailure && failed != [ ] then
  throw "kix packaging checks: ${summary}: ${builtins.toJSON result.failed}"
else
  result
