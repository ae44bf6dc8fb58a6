# Evaluation tests of the kix Nix library. Plain Nix, no nixpkgs:
#
#   nix-instantiate --eval --strict --json nix/tests/eval.nix
#
# prints {"failed":[],"passed":N,"summary":"N passed, 0 failed"} when every
# test passes, and fails evaluation listing the failed tests (with expected
# and actual values) otherwise. nix/tests/run.sh wraps it.
let
  system = builtins.currentSystem;
  inherit (builtins)
    attrNames
    filter
    fromJSON
    genList
    length
    split
    tryEval
    ;

  kix = import ../default.nix { };
  pkgs = import ./host-tools.nix { inherit system; };
  clusters = import ./clusters.nix { inherit system; };
  throwing = import ./throws.nix { inherit system; } // import ./chart-throws.nix { inherit system; };

  mk =
    args:
    kix.mkCluster (
      {
        inherit pkgs;
        name = "t";
      }
      // args
    );
  cm = name: {
    apiVersion = "v1";
    kind = "ConfigMap";
    metadata.name = name;
  };
  orderOf = packages: (mk { inherit packages; }).packageOrder;
  renderSource =
    chart:
    (kix.helm.render {
      inherit pkgs chart;
      releaseName = "r";
      namespace = "n";
      helm = "/bin/true";
    }).source.helm;
  # The builder script (host-tools puts it in `kixScript`) contains `s`.
  scriptHas = drv: s: length (split s drv.kixScript) > 1;

  eq = expected: actual: { inherit expected actual; };

  valueTests = {
    defaultEntryPoint = eq [ true true ] [
      (builtins.isFunction (import ../default.nix { }).lib.mkCluster)
      (builtins.isFunction (import ../default.nix { }).mkCluster)
    ];
    formatIsOne = eq 1 kix.format;

    basicOrder = eq [ "db" "api" "web" ] clusters.basic.packageOrder;
    basicClusterJson = eq {
      format = 1;
      cluster = "basic";
      packages = [ "db" "api" "web" ];
      settings = {
        keep = 5;
        maxAge = "30d";
        context = "kind-basic";
        note = "passed through";
      };
    } (fromJSON clusters.basic.kix_cluster);
    basicSettingsInPassthru = eq {
      keep = 5;
      maxAge = "30d";
      context = "kind-basic";
      note = "passed through";
    } clusters.basic.passthru.settings;
    passthruAlsoOnTheDerivation = eq clusters.basic.passthru.settings clusters.basic.settings;
    clusterNameInPassthru = eq "basic" clusters.basic.cluster;
    derivationName = eq "kix-basic" clusters.basic.name;
    isADerivation = eq "derivation" clusters.basic.type;
    webPackageJson = eq {
      name = "web";
      version = "1.2.0";
      dependsOn = [ "api" ];
      namespace = "web";
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
      handoff = [
        {
          kind = "Deployment";
          name = "web";
          fields = [ "spec.replicas" ];
        }
      ];
    } (fromJSON clusters.basic.kix_p2);
    namespaceOmittedWhenNull = eq {
      name = "db";
      version = "15.4";
      dependsOn = [ ];
      migrations = [ ];
    } (fromJSON clusters.basic.kix_p0);
    packageDefaults = eq {
      name = "app";
      version = "1";
      dependsOn = [ ];
      namespace = null;
      manifests = [ ];
      migrations = [ ];
      handoff = [ ];
      health = [ ];
      secrets = [ ];
      allowPlaintextSecrets = false;
      source = null;
    } (removeAttrs clusters.minimal.packages.app [ "resources" ]);
    # Encrypted files are copied into packages/<p>/secrets/ as they are;
    # allowPlaintextSecrets reaches package.json only when true.
    secretsCopied = eq true (scriptHas clusters.secrets "/secrets/000-db.sops.yaml");
    allowPlaintextInPackageJson = eq true (fromJSON (mk {
      packages.p = {
        version = "1";
        allowPlaintextSecrets = true;
      };
    }).kix_p0).allowPlaintextSecrets;
    noAllowPlaintextNoKey = eq false ((fromJSON clusters.basic.kix_p0) ? allowPlaintextSecrets);
    handoffInPackageJson = eq [
      {
        kind = "Deployment";
        fields = [ "spec.replicas" ];
      }
      {
        apiVersion = "apps/v1";
        kind = "StatefulSet";
        name = "db";
        fields = [ "spec.replicas" ];
      }
    ] (fromJSON (mk {
      packages.p = {
        version = "1";
        handoff = [
          {
            kind = "Deployment";
            fields = [ "spec.replicas" ];
          }
          {
            apiVersion = "apps/v1";
            kind = "StatefulSet";
            name = "db";
            fields = [ "spec.replicas" ];
          }
        ];
      };
    }).kix_p0).handoff;
    noHandoffNoKey = eq false ((fromJSON clusters.basic.kix_p0) ? handoff);
    # `source` reaches package.json, null fields left out; none: no key.
    sourceInPackageJson =
      eq
        {
          helm = {
            chart = "web";
            version = "0.4.0";
          };
        }
        (fromJSON (mk {
          packages.p = {
            version = "1";
            source.helm = {
              chart = "web";
              version = "0.4.0";
              repo = null;
            };
          };
        }).kix_p0).source;
    noSourceNoKey = eq false ((fromJSON clusters.basic.kix_p0) ? source);
    # What kix.lib.helm.render records of its chart, without a build: a
    # directory's Chart.yaml (top-level lines only), a <chart>-<version>.tgz
    # name, fetch's result with its repository.
    helmSourceFromChartYaml = eq {
      chart = "web-app";
      version = "1.2.0-rc.1";
    } (renderSource ./fixtures/chart-meta);
    helmSourceFromArchiveName = eq {
      chart = "cert-manager";
      version = "v1.16.2";
    } (renderSource "/srv/charts/cert-manager-v1.16.2.tgz");
    helmSourceFromFetch =
      eq
        {
          chart = "ingress-nginx";
          version = "4.11.3";
          repo = "https://kubernetes.github.io/ingress-nginx";
        }
        (renderSource {
          outPath = "/nix/store/00000000000000000000000000000000-ingress-nginx-4.11.3.tgz";
          chart = "ingress-nginx";
          version = "4.11.3";
          repo = "https://kubernetes.github.io/ingress-nginx";
        });
    # An overlay by its directory in the store and the path under it.
    kustomizeSourceInStore = eq "manifests-dir/overlays/prod" (kix.kustomize.build {
      inherit pkgs;
      path = "${./fixtures/manifests-dir}/overlays/prod";
      kustomize = "/bin/true";
    }).source.kustomize.path;
    # Health rules: the cluster's in kix.json, a package's in its
    # package.json; null attributes left out, none at all: no key.
    healthInKixJson = eq [
      {
        group = "cert-manager.io";
        kind = "Certificate";
        failed = "status.?conditions.orValue([]).exists(c, c.type == 'Ready' && c.status == 'False')";
      }
    ] (fromJSON (mk {
      health = [
        {
          group = "cert-manager.io";
          kind = "Certificate";
          version = null;
          failed = "status.?conditions.orValue([]).exists(c, c.type == 'Ready' && c.status == 'False')";
        }
      ];
      packages.p.version = "1";
    }).kix_cluster).health;
    healthInPackageJson = eq [
      {
        group = "example.com";
        kind = "Widget";
        name = "main";
        current = "status.phase == 'Running'";
        inProgress = "status.phase == 'Starting'";
        message = "'phase ' + status.phase";
      }
    ] (fromJSON (mk {
      packages.p = {
        version = "1";
        health = [
          {
            group = "example.com";
            kind = "Widget";
            name = "main";
            current = "status.phase == 'Running'";
            inProgress = "status.phase == 'Starting'";
            message = "'phase ' + status.phase";
          }
        ];
      };
    }).kix_p0).health;
    noHealthNoKey = eq [ false false ] [
      ((fromJSON clusters.basic.kix_p0) ? health)
      ((fromJSON clusters.basic.kix_cluster) ? health)
    ];
    resourceJson = eq (cm "x" // { data.k = "v"; }) (
      fromJSON (mk { packages.p = { version = "1"; resources = [ (cm "x" // { data.k = "v"; }) ]; }; }).kix_p0_r0
    );

    resourceFileNames = eq [ true true true ] [
      (scriptHas clusters.basic "/packages/web/resources/000-namespace-web\\.json")
      (scriptHas clusters.basic "/packages/web/resources/001-configmap-web-config\\.json")
      (scriptHas clusters.basic "/packages/db/resources/000-list-items\\.json")
    ];
    manifestFileNames = eq [ true true true ] [
      (scriptHas clusters.basic "/packages/web/resources/manifests/000-web\\.yaml")
      (scriptHas clusters.basic "/packages/web/resources/manifests/001-manifests-dir")
      (scriptHas clusters.basic "/packages/api/resources/manifests/000-chart-rendered")
    ];
    oddNamesSanitized = eq true (
      scriptHas (mk {
        packages.rbac = {
          version = "1";
          resources = [
            {
              apiVersion = "rbac.authorization.k8s.io/v1";
              kind = "ClusterRole";
              metadata.name = "system:controller:x";
            }
          ];
        };
      }) "000-clusterrole-system_controller_x\\.json"
    );
    wideIndexForManyResources = eq [ true true ] (
      let
        c = mk {
          packages.many = {
            version = "1";
            resources = genList (i: cm "c${toString i}") 1001;
          };
        };
      in
      [
        (scriptHas c "/0000-configmap-c0\\.json")
        (scriptHas c "/1000-configmap-c1000\\.json")
      ]
    );
    nestedResourceListsFlattened = eq 3 (
      length
        (mk {
          packages.p = {
            version = "1";
            resources = [
              (cm "a")
              [
                (cm "b")
                [ (cm "c") ]
              ]
            ];
          };
        }).packages.p.resources
    );

    listFormOrder = eq [ "first" "second" ] clusters.listForm.packageOrder;
    emptyCluster = eq [ ] clusters.empty.packageOrder;
    tieBrokenByName = eq [ "a" "b" "c" ] (orderOf {
      c = {
        version = "1";
        dependsOn = [ "a" ];
      };
      b.version = "1";
      a.version = "1";
    });
    dependenciesFirst = eq [ "z" "a" ] (orderOf {
      a = {
        version = "1";
        dependsOn = [ "z" ];
      };
      z.version = "1";
    });
    diamond = eq [ "base" "left" "right" "top" ] (orderOf {
      top = {
        version = "1";
        dependsOn = [ "left" "right" ];
      };
      left = {
        version = "1";
        dependsOn = [ "base" ];
      };
      right = {
        version = "1";
        dependsOn = [ "base" ];
      };
      base.version = "1";
    });

    nullSettingsDropped = eq { keep = 3; } (mk {
      packages = { };
      settings = {
        keep = 3;
        context = null;
      };
    }).settings;
    defaultSettings = eq { } (mk { packages = { }; }).settings;
    # Where the build is published, in kix.json's settings as given.
    cacheInKixJson =
      eq
        {
          url = "https://cache.example.com";
          publicKeys = [ "ci-1:6QvDa6hXFbyvcNd9+lgp8zTNlucdNHq1LOWoKM32LoA=" ];
        }
        (fromJSON (mk {
          packages = { };
          settings.cache = {
            url = "https://cache.example.com";
            publicKeys = [ "ci-1:6QvDa6hXFbyvcNd9+lgp8zTNlucdNHq1LOWoKM32LoA=" ];
          };
        }).kix_cluster).settings.cache;
    deletionBudget = eq { percent = 50; floor = 3; } (mk {
      packages = { };
      settings.deletionBudget = { percent = 50; floor = 3; };
    }).settings.deletionBudget;
    # The account the Kix cluster acts as, in kix.json's settings; given
    # as settings.serviceAccount too, or both the same.
    serviceAccountInKixJson = eq {
      namespace = "team-a";
      name = "kix";
    } (fromJSON (mk {
      packages = { };
      serviceAccount = {
        namespace = "team-a";
        name = "kix";
      };
    }).kix_cluster).settings.serviceAccount;
    # The commit the build is made from (self.rev), in kix.json; none given,
    # no field.
    revisionInKixJson = eq "0123456789abcdef0123456789abcdef01234567" (fromJSON (mk {
      packages = { };
      revision = "0123456789abcdef0123456789abcdef01234567";
    }).kix_cluster).revision;
    noRevisionNoField = eq false ((fromJSON (mk { packages = { }; }).kix_cluster) ? revision);
    serviceAccountAsSetting = eq "team-a" (mk {
      packages = { };
      settings.serviceAccount = {
        namespace = "team-a";
        name = "kix";
      };
    }).settings.serviceAccount.namespace;
    serviceAccountBothTheSame = eq "kix" (mk {
      packages = { };
      serviceAccount = {
        namespace = "team-a";
        name = "kix";
      };
      settings.serviceAccount = {
        namespace = "team-a";
        name = "kix";
      };
    }).settings.serviceAccount.name;
    noServiceAccountNoSetting = eq false ((fromJSON clusters.basic.kix_cluster).settings ? serviceAccount);
    compoundMaxAge = eq "1d12h" (mk {
      packages = { };
      settings.maxAge = "1d12h";
    }).settings.maxAge;

    deterministic = eq clusters.basic.drvPath (import ./clusters.nix { inherit system; }).basic.drvPath;
    saltChangesTheBuild = eq false (
      clusters.minimal.drvPath == (import ./clusters.nix {
        inherit system;
        salt = "x";
      }).minimal.drvPath
    );
    manifestStringWithContext = eq true (
      scriptHas (mk {
        packages.p = {
          version = "1";
          manifests = [ "${pkgs.runCommand "rendered" { } "mkdir -p $out/sub"}/sub" ];
        };
      }) "/manifests/000-sub"
    );
  };

  # Every declaration in throws.nix must fail evaluation (with `throw`, which
  # tryEval catches), both when the result is looked at and when it is built.
  throwTests = builtins.listToAttrs (
    map (n: {
      name = "throws-${n}";
      value = eq [ false false ] [
        (tryEval (builtins.seq throwing.${n}.value true)).success
        (tryEval throwing.${n}.value.drvPath).success
      ];
    }) (attrNames throwing)
  );

  tests = valueTests // throwTests;
  failed = filter (n: tests.${n}.expected != tests.${n}.actual) (attrNames tests);
  passed = length (attrNames tests) - length failed;
  summary = "${toString passed} passed, ${toString (length failed)} failed";
in
if failed == [ ] then
  {
    inherit failed passed summary;
  }
else
  throw (
    "kix nix/tests/eval.nix: ${summary}:\n"
    + builtins.concatStringsSep "\n" (
      map (
        n: "  ${n}: expected ${builtins.toJSON tests.${n}.expected}, got ${builtins.toJSON tests.${n}.actual}"
      ) failed
    )
  )
