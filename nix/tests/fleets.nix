# mkFleet tests, plain Nix, no nixpkgs:
#
#   nix-instantiate --eval --strict --json nix/tests/fleets.nix -A tests
#
# `good` is a fleet nix/tests/run builds in the sandbox; `bad.<case>` are
# fleets mkFleet refuses, each with the substrings its message must hold
# (crates/kix-fleet/tests/nix_fleet.rs checks the messages; `tests` checks
# that each throws and that the good one's values are what fleet.json says).
{
  system ? builtins.currentSystem,
}:
let
  kix = import ../default.nix { };
  pkgs = import ./host-tools.nix { inherit system; };
  cluster =
    name: settings:
    kix.mkCluster {
      inherit pkgs name settings;
      packages.app = {
        version = "1";
        resources = [
          {
            apiVersion = "v1";
            kind = "ConfigMap";
            metadata.name = "fleet-${name}";
            metadata.namespace = "default";
          }
        ];
      };
    };
  web = cluster "web" { };
  webStaging = cluster "web" { context = "staging"; };
  mk =
    args:
    kix.mkFleet (
      {
        name = "prod";
        members = {
          staging.build = web;
          staging.context = "staging";
          eu-1.build = web;
          eu-1.context = "eu-1";
          us-1 = {
            build = web;
            context = "us-1";
            operator = true;
          };
        };
        waves = [
          [ "staging" ]
          [ "eu-1" ]
          [ "us-1" ]
        ];
      }
      // args
    );
  case = expect: value: { inherit expect value; };

  good = mk { pause = "1s"; };

  bad = {
    unknownMemberInWave = case [
      "fleet \"prod\""
      "wave 1 names member \"eu-2\""
      "not a member"
    ] (mk {
      waves = [
        [ "staging" ]
        [ "eu-1" "eu-2" ]
        [ "us-1" ]
      ];
    });
    memberInTwoWaves = case [
      "member \"eu-1\""
      "is in two waves (1 and 2)"
    ] (mk {
      waves = [
        [ "staging" ]
        [ "eu-1" ]
        [ "us-1" "eu-1" ]
      ];
    });
    memberInNoWave = case [
      "member \"us-1\""
      "is in no wave"
    ] (mk {
      waves = [
        [ "staging" ]
        [ "eu-1" ]
      ];
    });
    twoMembersOneTarget = case [
      "member \"staging\""
      "Kix cluster \"web\""
      "same kubeconfig context (\"staging\") as member \"other\""
    ] (mk {
      members = {
        # The context comes from the build's settings here.
        other.build = webStaging;
        staging.build = web;
        staging.context = "staging";
      };
      waves = [ [ "other" "staging" ] ];
    });
    kubeconfigPathLiteral = case [
      "member \"staging\""
      "`kubeconfig` must be a string"
    ] (mk {
      members.staging = {
        build = web;
        kubeconfig = ./fleets.nix;
      };
      waves = [ [ "staging" ] ];
    });
    badPause = case [ "`pause` must be a duration" ] (mk { pause = "soon"; });
    emptyWave = case [ "wave 1 is empty" ] (mk {
      waves = [
        [ "staging" ]
        [ ]
        [ "eu-1" "us-1" ]
      ];
    });
  };

  eq = expected: actual: { inherit expected actual; };
  json = d: builtins.fromJSON (builtins.unsafeDiscardStringContext d.drvAttrs.fleetJson);
  fleetJson = json good;
  valueTests = {
    waves = eq [ [ "staging" ] [ "eu-1" ] [ "us-1" ] ] fleetJson.waves;
    maxParallelDefaultsToLargestWave = eq 1 fleetJson.maxParallel;
    maxParallelGiven = eq 4 (json (mk { maxParallel = 4; })).maxParallel;
    member = eq {
      build = builtins.unsafeDiscardStringContext "${web}";
      cluster = "web";
      context = "us-1";
      kubeconfig = null;
      operator = true;
      wave = 2;
    } fleetJson.members.us-1;
    pause = eq "1s" fleetJson.pause;
    name = eq "kix-fleet-prod.json" good.name;
  };
  throwTests = builtins.listToAttrs (
    map (n: {
      name = "throws-${n}";
      value = eq false (builtins.tryEval bad.${n}.value.drvPath).success;
    }) (builtins.attrNames bad)
  );
  all = valueTests // throwTests;
  failed = builtins.filter (n: all.${n}.expected != all.${n}.actual) (builtins.attrNames all);
in
{
  inherit good bad;
  tests =
    if failed == [ ] then
      {
        passed = builtins.length (builtins.attrNames all);
      }
    else
      throw "nix/tests/fleets.nix: failed: ${
        builtins.concatStringsSep "; " (
          map (n: "${n}: expected ${builtins.toJSON all.${n}.expected}, got ${builtins.toJSON all.${n}.actual}") failed
        )
      }";
}
