# Declarations that mkCluster must reject, each with the substrings its error
# message must contain. eval.nix checks that each one throws (tryEval cannot
# see the message); crates/kix-nix/tests/nix_lib.rs evaluates each `value`
# with nix-instantiate and checks the messages.
{
  system ? builtins.currentSystem,
}:
let
  kix = import ../default.nix { };
  pkgs = import ./host-tools.nix { inherit system; };
  mk =
    args:
    kix.mkCluster (
      {
        inherit pkgs;
        name = "prod";
      }
      // args
    );
  cm = name: {
    apiVersion = "v1";
    kind = "ConfigMap";
    metadata.name = name;
  };
  case = expect: value: { inherit expect value; };
in
{
  unknownDependency =
    case
      [
        "cluster \"prod\""
        "package \"web\""
        "depends on \"database\""
        "not a package"
      ]
      (mk {
        packages.web = {
          version = "1";
          dependsOn = [ "database" ];
        };
      });

  duplicatePackage =
    case
      [
        "duplicate package \"web\""
        "entries 0 and 2"
      ]
      (mk {
        packages = [
          {
            name = "web";
            version = "1";
          }
          {
            name = "db";
            version = "1";
          }
          {
            name = "web";
            version = "2";
          }
        ];
      });

  listEntryWithoutName =
    case
      [ "package entry 1 has no `name`" ]
      (mk {
        packages = [
          {
            name = "web";
            version = "1";
          }
          { version = "1"; }
        ];
      });

  resourceWithoutKind =
    case
      [
        "package \"web\""
        "resource 1 (\"b\")"
        "missing `kind`"
      ]
      (mk {
        packages.web = {
          version = "1";
          resources = [
            (cm "a")
            {
              apiVersion = "v1";
              metadata.name = "b";
            }
          ];
        };
      });

  resourceWithoutApiVersion =
    case
      [
        "package \"web\""
        "resource 0 (Service \"web\")"
        "missing `apiVersion`"
      ]
      (mk {
        packages.web = {
          version = "1";
          resources = [
            {
              kind = "Service";
              metadata.name = "web";
            }
          ];
        };
      });

  resourceWithoutName =
    case
      [
        "package \"web\""
        "resource 2 (ConfigMap)"
        "missing `metadata.name`"
      ]
      (mk {
        packages.web = {
          version = "1";
          resources = [
            (cm "a")
            (cm "b")
            {
              apiVersion = "v1";
              kind = "ConfigMap";
              metadata.labels.x = "y";
            }
          ];
        };
      });

  resourceWithoutMetadata =
    case
      [
        "resource 0 (ConfigMap)"
        "missing `metadata`"
      ]
      (mk {
        packages.web = {
          version = "1";
          resources = [
            {
              apiVersion = "v1";
              kind = "ConfigMap";
            }
          ];
        };
      });

  resourceNotAnAttrset =
    case
      [
        "resource 0"
        "must be an attrset, got the string"
      ]
      (mk {
        packages.web = {
          version = "1";
          resources = [ "apiVersion: v1" ];
        };
      });

  resourceIsADerivation =
    case
      [
        "resource 0"
        "belong in `manifests`"
      ]
      (mk {
        packages.web = {
          version = "1";
          resources = [ (pkgs.runCommand "x" { } "echo > $out") ];
        };
      });

  listWithoutItems =
    case
      [
        "resource 0 (List)"
        "a List needs `items`"
      ]
      (mk {
        packages.web = {
          version = "1";
          resources = [
            {
              apiVersion = "v1";
              kind = "List";
            }
          ];
        };
      });

  listItemWithoutName =
    case
      [
        "resource 0 (List), item 1"
        "missing `metadata.name`"
      ]
      (mk {
        packages.web = {
          version = "1";
          resources = [
            {
              apiVersion = "v1";
              kind = "List";
              items = [
                (cm "a")
                {
                  apiVersion = "v1";
                  kind = "ConfigMap";
                  metadata = { };
                }
              ];
            }
          ];
        };
      });

  cycle =
    case
      [
        "dependency cycle between packages"
        "a -> b -> c -> a"
      ]
      (mk {
        packages = {
          a = {
            version = "1";
            dependsOn = [ "b" ];
          };
          b = {
            version = "1";
            dependsOn = [ "c" ];
          };
          c = {
            version = "1";
            dependsOn = [ "a" ];
          };
          free = {
            version = "1";
          };
        };
      });

  cycleBehindAPackage =
    case
      [ "dependency cycle between packages: b -> c -> b" ]
      (mk {
        packages = {
          a = {
            version = "1";
            dependsOn = [ "b" ];
          };
          b = {
            version = "1";
            dependsOn = [ "c" ];
          };
          c = {
            version = "1";
            dependsOn = [ "b" ];
          };
        };
      });

  selfDependency =
    case
      [ "dependency cycle between packages: web -> web" ]
      (mk {
        packages.web = {
          version = "1";
          dependsOn = [ "web" ];
        };
      });

  missingVersion =
    case
      [
        "package \"web\""
        "missing `version`"
      ]
      (mk { packages.web = { }; });

  versionNotAString =
    case
      [
        "package \"web\""
        "`version` must be a non-empty string, got the integer 1"
      ]
      (mk { packages.web.version = 1; });

  emptyVersion =
    case
      [ "`version` must be a non-empty string" ]
      (mk { packages.web.version = ""; });

  unknownPackageAttribute =
    case
      [
        "package \"web\""
        "unknown attribute(s) \"dependOn\""
      ]
      (mk {
        packages.web = {
          version = "1";
          dependOn = [ ];
        };
      });

  nameMismatch =
    case
      [ "`name` is \"api\" but the package is declared as \"web\"" ]
      (mk {
        packages.web = {
          name = "api";
          version = "1";
        };
      });

  badClusterName =
    case
      [ "cluster name must be a DNS label" ]
      (mk {
        name = "Prod_1";
        packages = { };
      });

  badPackageName =
    case
      [
        "package \"Web\""
        "must be a DNS label"
      ]
      (mk { packages.Web.version = "1"; });

  badNamespace =
    case
      [ "`namespace` must be null or a DNS label" ]
      (mk {
        packages.web = {
          version = "1";
          namespace = "Web NS";
        };
      });

  dependsOnNotAList =
    case
      [ "`dependsOn` must be a list" ]
      (mk {
        packages.web = {
          version = "1";
          dependsOn = "db";
        };
      });

  pkgsWithoutRunCommand =
    case
      [ "`pkgs` must provide `runCommand`" ]
      (kix.mkCluster {
        pkgs = { };
        name = "prod";
        packages = { };
      });

  packagesNotACollection =
    case
      [ "`packages` must be an attrset" ]
      (mk { packages = "web"; });

  negativeKeep =
    case
      [
        "settings"
        "`keep` must be a non-negative integer"
      ]
      (mk {
        packages = { };
        settings.keep = -1;
      });

  keepAsString =
    case
      [ "`keep` must be a non-negative integer, got the string \"5\"" ]
      (mk {
        packages = { };
        settings.keep = "5";
      });

  badMaxAge =
    case
      [ "`maxAge` must be a duration" ]
      (mk {
        packages = { };
        settings.maxAge = "30 days";
      });

  badContext =
    case
      [ "`context` must be a non-empty string" ]
      (mk {
        packages = { };
        settings.context = 1;
      });

  badDeletionBudgetPercent =
    case
      [ "settings.deletionBudget" "`percent` must be an integer from 0 to 100" ]
      (mk {
        packages = { };
        settings.deletionBudget.percent = 101;
      });

  badCacheUrl =
    case
      [ "settings.cache" "`url` must be a Nix binary cache URL" "ssh://host" ]
      (mk {
        packages = { };
        settings.cache.url = "ssh://host";
      });

  badCachePublicKey =
    case
      [ "settings.cache" "`publicKeys`" "\"ci-1\" is not a Nix public key" ]
      (mk {
        packages = { };
        settings.cache = {
          url = "file:///srv/cache";
          publicKeys = [ "ci-1" ];
        };
      });

  badCacheField =
    case
      [ "settings.cache" "unknown attribute `secretKey`" ]
      (mk {
        packages = { };
        settings.cache = {
          url = "file:///srv/cache";
          secretKey = "/etc/key";
        };
      });

  badDeletionBudgetField =
    case
      [ "settings.deletionBudget" "unknown attribute `share`" ]
      (mk {
        packages = { };
        settings.deletionBudget.share = 5;
      });

  # revision: a commit, as self.rev (a dirty tree's self.dirtyRev is not).
  revisionDirty =
    case
      [ "cluster \"prod\"" "`revision` must be a commit" "0123456-dirty" ]
      (mk {
        packages = { };
        revision = "0123456-dirty";
      });
  revisionUpperCase =
    case
      [ "`revision` must be a commit" "ABCDEF1" ]
      (mk {
        packages = { };
        revision = "ABCDEF1";
      });

  # serviceAccount: exactly { namespace; name; }, non-empty strings, given
  # once (or the same in both places).
  serviceAccountNotAnAttrset =
    case
      [ "cluster \"prod\"" "`serviceAccount`" "must be an attrset { namespace; name; }" "team-a/kix" ]
      (mk {
        packages = { };
        serviceAccount = "team-a/kix";
      });
  serviceAccountEmptyName =
    case
      [ "cluster \"prod\"" "`serviceAccount`" "`name` must be a non-empty string" ]
      (mk {
        packages = { };
        serviceAccount = {
          namespace = "team-a";
          name = "";
        };
      });
  serviceAccountMissingNamespace =
    case
      [ "`serviceAccount`" "`namespace` must be a non-empty string, got null" ]
      (mk {
        packages = { };
        serviceAccount.name = "kix";
      });
  serviceAccountUnknownAttribute =
    case
      [ "`settings.serviceAccount`" "unknown attribute `kind`" ]
      (mk {
        packages = { };
        settings.serviceAccount = {
          namespace = "team-a";
          name = "kix";
          kind = "ServiceAccount";
        };
      });
  serviceAccountTwiceDifferent =
    case
      [ "`serviceAccount`" "`settings.serviceAccount`" "differ" ]
      (mk {
        packages = { };
        serviceAccount = {
          namespace = "team-a";
          name = "kix";
        };
        settings.serviceAccount = {
          namespace = "team-b";
          name = "kix";
        };
      });

  missingManifest =
    case
      [
        "package \"web\""
        "manifest 0"
        "does-not-exist.yaml does not exist"
      ]
      (mk {
        packages.web = {
          version = "1";
          manifests = [ ./fixtures/does-not-exist.yaml ];
        };
      });

  manifestIsAnAttrset =
    case
      [
        "manifest 0"
        "belong in `resources`"
      ]
      (mk {
        packages.web = {
          version = "1";
          manifests = [ (cm "a") ];
        };
      });

  migrationWithoutFrom =
    case
      [
        "package \"web\""
        "migration 0"
        "missing `from`"
      ]
      (mk {
        packages.web = {
          version = "2";
          migrations = [
            {
              to = "2";
              actions = [ ];
            }
          ];
        };
      });

  migrationBadAction =
    case
      [
        "package \"web\""
        "migration 0, action 1"
        "`action` must be one of \"recreate\", \"delete\", \"adopt\", got the string \"replace\""
      ]
      (mk {
        packages.web = {
          version = "2";
          migrations = [
            {
              from = "1";
              to = "2";
              actions = [
                {
                  action = "delete";
                  object = {
                    kind = "Deployment";
                    name = "old";
                  };
                }
                {
                  action = "replace";
                  object = {
                    kind = "Deployment";
                    name = "web";
                  };
                }
              ];
            }
          ];
        };
      });

  migrationUnknownAttribute =
    case
      [
        "migration 0"
        "unknown attribute(s) \"steps\""
      ]
      (mk {
        packages.web = {
          version = "2";
          migrations = [
            {
              from = "1";
              to = "2";
              steps = [ ];
            }
          ];
        };
      });
  secretNotAPath =
    case
      [
        "package \"db\""
        "secret 0"
        "must be a path"
      ]
      (mk {
        packages.db = {
          version = "1";
          secrets = [ "db.sops.yaml" ];
        };
      });

  secretNotYamlOrJson =
    case
      [
        "package \"db\""
        "secret 0"
        "must be named .yaml, .yml or .json"
      ]
      (mk {
        packages.db = {
          version = "1";
          secrets = [ ./fixtures/manifests-dir ];
        };
      });

  allowPlaintextSecretsNotBool =
    case
      [
        "package \"db\""
        "`allowPlaintextSecrets` must be a boolean"
      ]
      (mk {
        packages.db = {
          version = "1";
          allowPlaintextSecrets = "yes";
        };
      });

  handoffWithoutFields =
    case
      [
        "package \"web\""
        "handoff 0"
        "`fields` must be a non-empty list"
      ]
      (mk {
        packages.web = {
          version = "1";
          handoff = [ { kind = "Deployment"; } ];
        };
      });
  handoffUnknownAttribute =
    case
      [
        "handoff 1"
        "unknown attribute(s) \"field\""
      ]
      (mk {
        packages.web = {
          version = "1";
          handoff = [
            {
              kind = "Deployment";
              fields = [ "spec.replicas" ];
            }
            {
              kind = "Deployment";
              field = "spec.replicas";
            }
          ];
        };
      });
  handoffNotAList =
    case
      [ "`handoff` must be a list" ]
      (mk {
        packages.web = {
          version = "1";
          handoff = {
            kind = "Deployment";
          };
        };
      });
  healthRuleWithoutExpression =
    case
      [
        "package \"web\""
        "health 0"
        "needs at least one of `current`, `inProgress`, `failed`"
      ]
      (mk {
        packages.web = {
          version = "1";
          health = [ { kind = "Widget"; } ];
        };
      });
  healthRuleUnknownAttribute =
    case
      [
        "cluster \"prod\""
        "health 0"
        "unknown attribute(s) \"healthy\""
      ]
      (mk {
        health = [
          {
            kind = "Widget";
            healthy = "true";
          }
        ];
        packages.web.version = "1";
      });
  healthRuleWithoutKind =
    case
      [
        "health 1"
        "missing `kind`"
      ]
      (mk {
        packages.web = {
          version = "1";
          health = [
            {
              kind = "Widget";
              current = "true";
            }
            { current = "true"; }
          ];
        };
      });
  healthRuleNotAString =
    case
      [
        "health 0"
        "`failed` must be a non-empty string"
      ]
      (mk {
        health = [
          {
            kind = "Widget";
            failed = true;
          }
        ];
        packages.web.version = "1";
      });
  healthNotAList =
    case
      [ "`health` must be a list of health rules" ]
      (mk {
        health = {
          kind = "Widget";
        };
        packages.web.version = "1";
      });
}
