# Fixture clusters for the library tests, built with the host-tools builder:
#
#   nix build --no-link --json -f nix/tests/clusters.nix basic
#
# The good ones are read back by the Rust reader in crates/kix-nix/tests/;
# the `broken*` ones fail evaluation on purpose (the CLI tests show Nix's
# error text).
{
  system ? builtins.currentSystem,
  # Makes the outputs unique when a test needs paths nobody else has.
  salt ? "",
}:
let
  kix = import ../default.nix { };
  pkgs = import ./host-tools.nix { inherit system; };

  # Stands in for `helm template ... --output-dir $out`: a directory of YAML
  # in a derivation output, with a symlink to another store path that the
  # library must follow so the tree is self-contained.
  roleFile = builtins.toFile "role.yaml" ''
    apiVersion: rbac.authorization.k8s.io/v1
    kind: Role
    metadata:
      name: chart-reader
    rules:
      - apiGroups: [""]
        resources: ["pods"]
        verbs: ["get", "list"]
  '';
  chart = pkgs.runCommand "chart-rendered" { } ''
    mkdir -p "$out/chart/templates"
    cat > "$out/chart/templates/deployment.yaml" <<'YAML'
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: chart-app
    spec:
      selector:
        matchLabels: {app: chart-app}
      template:
        metadata:
          labels: {app: chart-app}
        spec:
          containers:
            - {name: app, image: "busybox:1.36"}
    YAML
    ln -s ${roleFile} "$out/chart/templates/role.yaml"
  '';

  configMap = name: data: {
    apiVersion = "v1";
    kind = "ConfigMap";
    metadata = { inherit name; };
    inherit data;
  };
in
{
  # A SOPS-encrypted Secret (fixtures/db.sops.yaml, encrypted to a key that
  # was thrown away): the store holds only its ciphertext (nix/tests/run
  # greps the output for fixtures/db.sops.plaintext).
  secrets = kix.mkCluster {
    inherit pkgs;
    name = "secrets";
    packages.db = {
      version = "1";
      namespace = "db";
      resources = [ (configMap "db-config" { inherit salt; }) ];
      secrets = [ ./fixtures/db.sops.yaml ];
    };
  };

  # Three packages: db <- api <- web, settings with an unknown key, every
  # kind of resource source.
  basic = kix.mkCluster {
    inherit pkgs;
    name = "basic";
    settings = {
      keep = 5;
      maxAge = "30d";
      context = "kind-basic";
      note = "passed through";
    };
    packages = {
      web = {
        version = "1.2.0";
        dependsOn = [ "api" ];
        namespace = "web";
        resources = [
          {
            apiVersion = "v1";
            kind = "Namespace";
            metadata.name = "web";
          }
          (configMap "web-config" {
            greeting = "hello";
            salt = salt;
          })
        ];
        manifests = [
          ./fixtures/web.yaml
          ./fixtures/manifests-dir
        ];
        migrations = [
          {
            from = "1.1.0";
            to = "1.2.0";
            description = "recreate the web Deployment (selector changed)";
            actions = [
              {
                action = "recreate";
                object = {
                  apiVersion = "apps/v1";
                  kind = "Deployment";
                  name = "web";
                };
              }
            ];
          }
        ];
        # An autoscaler owns the replicas.
        handoff = [
          {
            kind = "Deployment";
            name = "web";
            fields = [ "spec.replicas" ];
          }
        ];
      };
      api = {
        version = "0.3.1";
        dependsOn = [ "db" ];
        namespace = "api";
        manifests = [ chart ];
      };
      db = {
        version = "15.4";
        resources = [
          {
            apiVersion = "v1";
            kind = "List";
            items = [
              (configMap "db-a" { a = "1"; })
              (configMap "db-b" { b = "2"; })
            ];
          }
          {
            apiVersion = "apps/v1";
            kind = "StatefulSet";
            metadata = {
              name = "db";
              namespace = "db";
            };
            spec = {
              serviceName = "db";
              selector.matchLabels.app = "db";
              template = {
                metadata.labels.app = "db";
                spec.containers = [
                  {
                    name = "db";
                    image = "postgres:15.4";
                  }
                ];
              };
            };
          }
        ];
      };
    };
  };

  # One package, one resource, no settings.
  minimal = kix.mkCluster {
    inherit pkgs;
    name = "minimal";
    packages.app = {
      version = "1";
      resources = [ (configMap "app" { salt = salt; }) ];
    };
  };

  # A cluster without packages builds an empty tree.
  empty = kix.mkCluster {
    inherit pkgs;
    name = "empty";
    packages = { };
  };

  # The list form of `packages`.
  listForm = kix.mkCluster {
    inherit pkgs;
    name = "list-form";
    packages = [
      {
        name = "second";
        version = "2";
        dependsOn = [ "first" ];
      }
      {
        name = "first";
        version = "1";
        resources = [ (configMap "first" { }) ];
      }
    ];
  };

  # Fails evaluation: a dependency on a package that does not exist.
  brokenDependency = kix.mkCluster {
    inherit pkgs;
    name = "broken";
    packages.web = {
      version = "1";
      dependsOn = [ "database" ];
    };
  };

  # Fails evaluation: a resource without metadata.name.
  brokenResource = kix.mkCluster {
    inherit pkgs;
    name = "broken";
    packages.web = {
      version = "1";
      resources = [
        {
          apiVersion = "v1";
          kind = "ConfigMap";
          metadata = { };
        }
      ];
    };
  };
}
