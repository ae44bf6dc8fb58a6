# mkTenants tests, plain Nix, no nixpkgs:
#
#   nix-instantiate --eval --strict --json nix/tests/tenants.nix -A tests
#
# `good` is a declaration nix/tests/run builds in the sandbox (its JSON is
# what `kix crds --tenants` reads; docs/operator.md's example is tested by
# crates/kix-cli/tests/tenants_doc.rs); `bad.<case>` are declarations
# mkTenants refuses, each with the substrings its message must hold
# (nix/tests/run checks the messages; `tests` checks that each throws and
# the good one's values).
{
  system ? builtins.currentSystem,
}:
let
  kix = import ../default.nix { };
  pkgs = import ./host-tools.nix { inherit system; };
  mk =
    args:
    kix.mkTenants (
      {
        inherit pkgs;
        platform.users = [ "system:serviceaccount:kix-system:kix-operator" ];
        clusters.team-a = {
          groups = [ "team-a" ];
          serviceAccount = {
            namespace = "team-a";
            name = "kix";
          };
        };
        clusters.team-b = {
          users = [ "bob" ];
          serviceAccount = {
            namespace = "team-b";
            name = "kix";
          };
        };
        # A second Kix cluster of team-a, acting as the same account.
        clusters.team-a-jobs = {
          groups = [ "team-a" ];
          serviceAccount = {
            namespace = "team-a";
            name = "kix";
          };
        };
      }
      // args
    );
  case = expect: value: { inherit expect value; };
  account = namespace: name: { inherit namespace name; };

  good = mk { };

  bad = {
    noClusters = case [ "`clusters` must be a non-empty attrset" ] (mk { clusters = { }; });
    clusterNameNotADnsLabel = case [ "Kix cluster \"Team_A\"" "DNS label" ] (mk {
      clusters.Team_A.serviceAccount = account "a" "kix";
    });
    noServiceAccount = case [ "Kix cluster \"team-c\"" "has no `serviceAccount`" ] (mk {
      clusters.team-c.groups = [ "team-c" ];
    });
    serviceAccountAString = case [ "Kix cluster \"team-c\"" "`serviceAccount` must be an attrset" ] (mk {
      clusters.team-c.serviceAccount = "team-c/kix";
    });
    serviceAccountEmptyNamespace = case [ "`serviceAccount.namespace` must be a non-empty string" ] (mk {
      clusters.team-c.serviceAccount = account "" "kix";
    });
    serviceAccountExtra = case [ "`serviceAccount` takes only `namespace` and `name`" ] (mk {
      clusters.team-c.serviceAccount = account "c" "kix" // {
        kind = "ServiceAccount";
      };
    });
    groupsNotAList = case [ "Kix cluster \"team-c\"" "`groups` must be a list of non-empty strings" ] (mk {
      clusters.team-c = {
        groups = "team-c";
        serviceAccount = account "c" "kix";
      };
    });
    unknownTenantAttribute = case [ "Kix cluster \"team-c\"" "unknown attribute \"group\"" ] (mk {
      clusters.team-c = {
        group = [ "team-c" ];
        serviceAccount = account "c" "kix";
      };
    });
    platformEmptyUser = case [ "platform" "`users` must be a list of non-empty strings" ] (mk {
      platform.users = [ "" ];
    });
    platformUnknownAttribute = case [ "platform" "unknown attribute \"serviceAccount\"" ] (mk {
      platform.serviceAccount = account "kix-system" "kix-operator";
    });
    noPkgs = case [ "`pkgs` must provide `runCommand`" ] (mk { pkgs = { }; });
  };

  eq = expected: actual: { inherit expected actual; };
  fileJson = builtins.fromJSON good.tenantsJson;
  valueTests = {
    declaration = eq {
      platform = {
        users = [ "system:serviceaccount:kix-system:kix-operator" ];
        groups = [ ];
      };
      clusters = {
        team-a = {
          users = [ ];
          groups = [ "team-a" ];
          serviceAccount = account "team-a" "kix";
        };
        team-a-jobs = {
          users = [ ];
          groups = [ "team-a" ];
          serviceAccount = account "team-a" "kix";
        };
        team-b = {
          users = [ "bob" ];
          groups = [ ];
          serviceAccount = account "team-b" "kix";
        };
      };
    } good.declaration;
    fileIsTheDeclaration = eq good.declaration fileJson;
    serviceAccountsOnce = eq [
      (account "team-a" "kix")
      (account "team-b" "kix")
    ] good.serviceAccounts;
    clusterNames = eq [ "team-a" "team-a-jobs" "team-b" ] good.clusterNames;
    platformDefaultsToNoOne = eq {
      users = [ ];
      groups = [ ];
    } (mk { platform = { }; }).declaration.platform;
    name = eq "kix-tenants.json" good.name;
    passthru = eq good.serviceAccounts good.passthru.serviceAccounts;
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
      throw "nix/tests/tenants.nix: failed: ${
        builtins.concatStringsSep "; " (
          map (n: "${n}: expected ${builtins.toJSON all.${n}.expected}, got ${builtins.toJSON all.${n}.actual}") failed
        )
      }";
}
