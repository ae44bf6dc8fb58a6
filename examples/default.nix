# Two Kix clusters sharing one Kubernetes cluster, for the README's first
# command, the docs and the end-to-end tests:
#
#   kix deploy infra --file examples/default.nix --yes
#   kix deploy apps  --file examples/default.nix --yes
#   kix deploy apps  --file examples/default.nix -A next.apps --yes --accept-migrations
#   kix fleet deploy regions --file examples/default.nix --yes   (docs/fleet.md)
#
# `pkgs` is nixpkgs (`<nixpkgs>` unless given; the library uses only
# `pkgs.runCommand`). The offline tests and checks/demo, which have no
# nixpkgs, pass the host-tools builder instead:
#   --arg pkgs 'import ./nix/tests/host-tools.nix { }'   (nix-build)
#   NIX_PATH=nixpkgs=$PWD/nix/tests/host-tools.nix       (kix --file)
{
  pkgs ? import <nixpkgs> { },
  kix ? import ../nix { },
}:
let
  # The web tier's database password, SOPS-encrypted (docs/secrets.md):
  # checks/demo encrypts one with an age key it generates (never committed)
  # and names the file here. Without it (the tests, a fresh clone, pure
  # evaluation) the example has no Secret.
  dbSecret = builtins.getEnv "KIX_EXAMPLE_DB_SECRET";

  deployment =
    { name, image, replicas ? 1, env ? [ ], volumes ? [ ], mounts ? [ ] }:
    {
      apiVersion = "apps/v1";
      kind = "Deployment";
      metadata.name = name;
      spec = {
        inherit replicas;
        selector.matchLabels.app = name;
        template = {
          metadata.labels.app = name;
          spec = {
            containers = [ { inherit name image env; volumeMounts = mounts; } ];
            inherit volumes;
          };
        };
      };
    };

  infra = kix.mkCluster {
    inherit pkgs;
    name = "infra";
    settings = { keep = 5; maxAge = "30d"; };
    packages = {
      crds = {
        version = "1.0.0";
        manifests = [ ./manifests/infra-crds ];
      };
      controller = {
        version = "0.4.2";
        dependsOn = [ "crds" ];
        namespace = "infra";
        resources = [
          { apiVersion = "v1"; kind = "Namespace"; metadata.name = "infra"; }
          { apiVersion = "v1"; kind = "ServiceAccount"; metadata.name = "widget-controller"; }
          (deployment { name = "widget-controller"; image = "example.invalid/widget-controller:0.4.2"; })
          {
            apiVersion = "example.kix.run/v1";
            kind = "Widget";
            metadata.name = "default-widget";
            spec.size = 3;
          }
        ];
      };
    };
  };

  apps =
    { dbVersion }:
    kix.mkCluster {
      inherit pkgs;
      name = "apps";
      settings = { keep = 3; };
      packages = {
        db = {
          version = dbVersion;
          namespace = "apps";
          resources = [
            { apiVersion = "v1"; kind = "Namespace"; metadata.name = "apps"; }
            {
              apiVersion = "v1";
              kind = "PersistentVolume";
              metadata.name = "kix-example-db";
              spec = {
                capacity.storage = "1Gi";
                accessModes = [ "ReadWriteOnce" ];
                storageClassName = "manual";
                hostPath.path = "/var/lib/kix-example-db";
                claimRef = { namespace = "apps"; name = "db-data"; };
              };
            }
            {
              apiVersion = "v1";
              kind = "PersistentVolumeClaim";
              metadata.name = "db-data";
              spec = {
                accessModes = [ "ReadWriteOnce" ];
                storageClassName = "manual";
                volumeName = "kix-example-db";
                resources.requests.storage = "1Gi";
              };
            }
            {
              apiVersion = "apps/v1";
              kind = "StatefulSet";
              metadata.name = "db";
              spec = {
                serviceName = "db";
                replicas = 1;
                selector.matchLabels = { app = "db"; } // (if dbVersion == "2.0.0" then { tier = "data"; } else { });
                template = {
                  metadata.labels = { app = "db"; tier = "data"; };
                  spec = {
                    containers = [
                      {
                        name = "postgres";
                        image = "example.invalid/postgres:${if dbVersion == "2.0.0" then "16" else "15"}";
                        volumeMounts = [ { name = "data"; mountPath = "/var/lib/postgresql"; } ];
                      }
                    ];
                    volumes = [ { name = "data"; persistentVolumeClaim.claimName = "db-data"; } ];
                  };
                };
              };
            }
          ];
          # 1.x → 2.0.0 changes the StatefulSet's selector, which is immutable.
          migrations = [
            {
              from = "1.0.0";
              to = "2.0.0";
              description = "the StatefulSet selector gains tier=data: recreate it (the PVC keeps the data)";
              actions = [ { action = "recreate"; object = { kind = "StatefulSet"; name = "db"; namespace = "apps"; }; } ];
            }
          ];
        };
        web = {
          version = "2.3.1";
          dependsOn = [ "db" ];
          namespace = "apps";
          resources = [
            {
              apiVersion = "v1";
              kind = "ConfigMap";
              metadata.name = "web-config";
              data = { GREETING = "hello from kix"; DB_HOST = "db.apps.svc"; };
            }
            (deployment {
              name = "web";
              image = "example.invalid/web:2.3.1";
              replicas = 2;
              env = [ { name = "GREETING"; valueFrom.configMapKeyRef = { name = "web-config"; key = "GREETING"; }; } ]
                ++ (if dbSecret == "" then [ ] else [ { name = "DB_PASSWORD"; valueFrom.secretKeyRef = { name = "web-db"; key = "password"; }; } ]);
            })
            {
              apiVersion = "v1";
              kind = "Service";
              metadata.name = "web";
              spec = {
                selector.app = "web";
                ports = [ { port = 80; targetPort = 8080; } ];
              };
            }
          ];
          # Secret web-db: only its ciphertext is in the store; kix decrypts
          # it where it applies it (SOPS_AGE_KEY_FILE, --age-identity).
          secrets = if dbSecret == "" then [ ] else [ dbSecret ];
        };
      };
    };
  # The Kix cluster of the fleet below: small, healthy as soon as applied.
  hello =
    { version, greeting }:
    kix.mkCluster {
      inherit pkgs;
      name = "hello";
      packages.hello = {
        inherit version;
        namespace = "hello";
        resources = [
          { apiVersion = "v1"; kind = "Namespace"; metadata.name = "hello"; }
          { apiVersion = "v1"; kind = "ConfigMap"; metadata.name = "greeting"; data.GREETING = greeting; }
        ];
      };
    };

  # A fleet (docs/fleet.md): one build of the `hello` Kix cluster promoted
  # across three Kubernetes clusters (kubeconfig contexts staging, eu-1 and
  # us-1), a wave each, each wave Active and healthy for 2s before the next.
  regions =
    build:
    kix.mkFleet {
      name = "regions";
      members = {
        staging = { inherit build; context = "staging"; };
        eu-1 = { inherit build; context = "eu-1"; };
        us-1 = { inherit build; context = "us-1"; };
      };
      waves = [ [ "staging" ] [ "eu-1" ] [ "us-1" ] ];
      maxParallel = 2;
      pause = "2s";
    };
in
{
  kixClusters = {
    inherit infra;
    apps = apps { dbVersion = "1.0.0"; };
  };
  # The next release of apps: db 2.0.0 crosses the 1.0.0 → 2.0.0 migration.
  next.apps = apps { dbVersion = "2.0.0"; };

  kixFleets.regions = regions (hello { version = "1.0.0"; greeting = "hello from a fleet"; });
  # Its next release.
  next.kixFleets.regions = regions (hello { version = "1.1.0"; greeting = "hello again"; });
}
