# services.kix-operator, evaluated with nixpkgs' real module system and the
# NixOS option declarations of ./stand-in/nixos-options.nix (nixpkgs' types:
# systemd unit values, users, firewall, oci-containers, ...): option names,
# defaults and docs, the units, container and RBAC it generates in both
# modes, flag rendering, assertions and type errors.
{ common }:
let
  inherit (common)
    lib
    eq
    ok
    has
    throws
    sorted
    nixos
    rendered
    ;

  eval = cfg: (nixos [ { services.kix-operator = cfg; } ]).config;
  evalWith = modules: (nixos modules).config;
  k3sKubeconfig = "/etc/rancher/k3s/k3s.yaml";

  disabled = eval { };
  defaults = disabled.services.kix-operator;
  options = (nixos [ ]).options.services.kix-operator;
  docs = builtins.filter (d: d.visible && !d.internal) (lib.optionAttrSetToDocList options);

  inCluster = eval { enable = true; };
  # the k3s-style setup, container mode (the default)
  container = evalWith [
    {
      services.k3s.enable = true;
      services.kix-operator = {
        enable = true;
        kubeconfigFile = k3sKubeconfig;
      };
    }
  ];
  ctr = container.virtualisation.oci-containers.containers.kix-operator;
  podmanUnit = container.systemd.services.podman-kix-operator;
  bootstrap = container.systemd.services.kix-operator-bootstrap;
  host = eval {
    enable = true;
    mode = "host";
    kubeconfigFile = k3sKubeconfig;
    rbac.useServiceAccount = false;
  };
  hostUnit = host.systemd.services.kix-operator;
  containerNoSa = eval {
    enable = true;
    kubeconfigFile = "/etc/kix/admin.yaml";
    rbac.useServiceAccount = false;
  };

  # The bootstrap's Kix cluster and the RBAC objects the options generated.
  clusterOf = c: c.services.kix-operator.bootstrap.cluster;
  objectsOf = c: (clusterOf c).packages.rbac.resources;
  find =
    objects: kind: name:
    builtins.filter (o: o.kind == kind && o.metadata.name == name) objects;
  one =
    objects: kind: name:
    let
      found = find objects kind name;
    in
    if builtins.length found == 1 then builtins.head found else throw "expected one ${kind} ${name}";
  roleRefOf = b: "${b.roleRef.kind}/${b.roleRef.name}";
  objects = objectsOf container;
  namespacesOf = os: sorted (map (o: o.metadata.name) (builtins.filter (o: o.kind == "Namespace") os));

  restricted = eval {
    enable = true;
    kubeconfigFile = k3sKubeconfig;
    settings."lease-namespace" = "kix-leases";
    rbac.namespaces = [
      "apps"
      "web"
    ];
    rbac.clusterApplyRules = [
      {
        apiGroups = [ "" ];
        resources = [ "namespaces" ];
        verbs = [
          "get"
          "create"
        ];
      }
    ];
  };
  restrictedObjects = objectsOf restricted;

  flags = eval {
    enable = true;
    kubeconfigFile = k3sKubeconfig;
    logFormat = "json";
    metricsPort = 9000;
    metricsAddress = "::";
    settings = {
      "resync-interval" = "30s";
      "a-switch" = true;
      "switched-off" = false;
      "unset" = null;
      "count" = 3;
      "repeated" = [
        "x"
        "y"
      ];
    };
    extraArgs = [ "-v" ];
  };

  failedAssertions = c: map (a: a.message) (builtins.filter (a: !a.assertion) c.assertions);

  # Declared Kix clusters: two generations of the demo build (the second
  # with another namespace, so another store path) and one declared absent.
  demoBuild =
    namespace:
    import ./demo-cluster.nix {
      kixLib = import ../../nix { };
      inherit (common) pkgs;
      inherit namespace;
    };
  generation1 = demoBuild "kix-vm";
  generation2 = demoBuild "kix-vm-2";
  declaring =
    {
      demo ? { },
      extra ? { },
    }:
    eval (
      {
        enable = true;
        kubeconfigFile = k3sKubeconfig;
        clusters.demo = {
          build = generation1;
          acceptMigrations = [
            "migration app"
            "adopt ConfigMap kix-vm/legacy"
          ];
          maxDeletions = 5;
          waitTimeout = 120;
        }
        // demo;
        clusters.retired.absent = "prune";
      }
      // extra
    );
  declared = declaring { };
  declareUnit = declared.systemd.services.kix-declare-demo;
  retiredUnit = declared.systemd.services.kix-declare-retired;
  switched = (declaring { demo.build = generation2; }).systemd.services.kix-declare-demo;
  kixCli = "${declared.services.kix-operator.bootstrap.package}/bin/kix";
  # The store paths a string refers to (its context), as NixOS would put
  # them into the system closure.
  referenced = s: builtins.attrNames (builtins.getContext s);
  declareFailures = c: failedAssertions (declaring c);

  # Several teams, one operator: the tenants' declaration, every record
  # required to name its ServiceAccount, the operator's RBAC tenants-only.
  operatorUser = "system:serviceaccount:kix-system:kix-operator";
  mkTenants =
    platformUsers:
    (import ../../nix { }).mkTenants {
      inherit (common) pkgs;
      platform.users = platformUsers;
      platform.groups = [ "system:masters" ];
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
          name = "deployer";
        };
      };
    };
  tenantDeclaration = mkTenants [ operatorUser ];
  tenanting =
    extra:
    eval (
      {
        enable = true;
        kubeconfigFile = k3sKubeconfig;
        tenants = tenantDeclaration;
        requireServiceAccount = true;
      }
      // extra
    );
  tenanted = tenanting { };
  tenantObjects = objectsOf tenanted;
  tenantCluster = clusterOf tenanted;
  # Every rule of the Roles and ClusterRoles the options generate that
  # allows more than reading, as "<resources>:<verbs>".
  writeRules =
    os:
    lib.concatMap (
      o:
      map (r: "${o.kind}/${o.metadata.name}:${lib.concatStringsSep "," r.resources}:${lib.concatStringsSep "," r.verbs}") (
        builtins.filter (r: lib.subtractLists [ "get" "list" "watch" ] r.verbs != [ ]) (o.rules or [ ])
      )
    ) (builtins.filter (o: o.kind == "Role" || o.kind == "ClusterRole") os);
in
{
  moduleOptionNames = eq [
    "ageIdentityFile"
    "ageKeyFiles"
    "alerts"
    "bootstrap"
    "clusters"
    "container"
    "defaultServiceAccount"
    "enable"
    "environment"
    "extraArgs"
    "gcRootsDir"
    "image"
    "kubeconfigFile"
    "logFormat"
    "metricsAddress"
    "metricsPort"
    "mode"
    "nixPackage"
    "openFirewall"
    "package"
    "rbac"
    "requireServiceAccount"
    "settings"
    "store"
    "substituters"
    "tenants"
    "trustedPublicKeys"
  ] (builtins.attrNames options);
  moduleRbacOptionNames = eq [
    "applyRules"
    "clusterApplyRules"
    "namespaces"
    "tenantsOnly"
    "useServiceAccount"
  ] (builtins.attrNames options.rbac);
  moduleBootstrapOptionNames = eq [
    "cluster"
    "enable"
    "kubeconfigFile"
    "package"
    "timeout"
  ] (builtins.attrNames options.bootstrap);

  # The option docs (what the NixOS manual and search show): every option
  # described, types as lib names them, and no default that renders a store
  # path (those need a defaultText).
  optionDocsDescribed = eq [ ] (map (d: d.name) (builtins.filter (d: (d.description or "") == "") docs));
  optionDocsTypes = eq {
    "services.kix-operator.logFormat" = "one of \"text\", \"json\"";
    "services.kix-operator.metricsPort" = "16 bit unsigned integer; between 0 and 65535 (both inclusive)";
    "services.kix-operator.kubeconfigFile" = "null or string";
    "services.kix-operator.rbac.namespaces" = "null or (list of string)";
    "services.kix-operator.bootstrap.timeout" = "positive integer, meaning >0";
  } (
    lib.genAttrs [
      "services.kix-operator.logFormat"
      "services.kix-operator.metricsPort"
      "services.kix-operator.kubeconfigFile"
      "services.kix-operator.rbac.namespaces"
      "services.kix-operator.bootstrap.timeout"
    ] (name: (lib.findFirst (d: d.name == name) { type = "missing"; } docs).type)
  );
  optionDocsDefaultsWithoutStorePaths = eq [ ] (
    map (d: d.name) (builtins.filter (d: has "/nix/store" (builtins.toJSON (d.default or null))) docs)
  );
  optionDocsCount = eq 45 (builtins.length docs);
  moduleClusterOptionNames = eq [
    "absent"
    "acceptMigrations"
    "build"
    "kubeconfigFile"
    "maxDeletions"
    "waitTimeout"
  ] (builtins.filter (n: n != "_module") (builtins.attrNames (options.clusters.type.getSubOptions [ ])));
  moduleClusterDefaults = eq {
    build = null;
    absent = "keep";
    acceptMigrations = [ ];
    maxDeletions = null;
    waitTimeout = 600;
    kubeconfigFile = k3sKubeconfig;
  } (
    (eval {
      enable = true;
      kubeconfigFile = k3sKubeconfig;
      clusters.x.absent = "prune";
    }).services.kix-operator.clusters.x
    // { absent = "keep"; }
  );

  moduleDefaults = eq {
    enable = false;
    mode = "container";
    kubeconfigFile = null;
    logFormat = "text";
    metricsPort = 8080;
    metricsAddress = "0.0.0.0";
    openFirewall = false;
    settings = {
      "lease-namespace" = "kube-system";
      "resync-interval" = "60s";
      "resync-budget" = null;
      shards = null;
    };
    extraArgs = [ ];
    environment = { };
    gcRootsDir = "/nix/var/nix/gcroots/kix";
    bootstrap = {
      enable = false;
      kubeconfigFile = null;
      timeout = 300;
    };
    rbac = {
      useServiceAccount = false;
      applyRules = [
        {
          apiGroups = [ "*" ];
          resources = [ "*" ];
          verbs = [ "*" ];
        }
      ];
      namespaces = null;
      clusterApplyRules = [ ];
      tenantsOnly = false;
    };
    container.extraOptions = [ ];
    defaultServiceAccount = null;
    requireServiceAccount = false;
    tenants = null;
    substituters = [ ];
    trustedPublicKeys = [ ];
    store = null;
  } {
    inherit (defaults)
      enable
      mode
      kubeconfigFile
      logFormat
      metricsPort
      metricsAddress
      openFirewall
      settings
      extraArgs
      environment
      gcRootsDir
      rbac
      container
      defaultServiceAccount
      requireServiceAccount
      tenants
      substituters
      trustedPublicKeys
      store
      ;
    bootstrap = removeAttrs defaults.bootstrap [
      "cluster"
      "package"
    ];
  };
  modulePackagesFromTheFlake = eq {
    operator = common.self.packages.${common.system}.kix-operator.outPath;
    cli = common.self.packages.${common.system}.kix.outPath;
  } {
    operator = defaults.package.outPath;
    cli = defaults.bootstrap.package.outPath;
  };
  moduleImageBuiltFromThePackage = eq [ "${defaults.package}/bin/kix-operator" ] defaults.image.stubArgs.config.Entrypoint;

  disabledDefinesNothing = ok (
    disabled.systemd.services == { }
    && disabled.systemd.tmpfiles.rules == [ ]
    && disabled.virtualisation.oci-containers.containers == { }
    && disabled.users.users == { }
    && disabled.assertions == [ ]
  );

  inClusterHasNoKubeconfigFlag = ok (!(builtins.any (lib.hasPrefix "--kubeconfig") inCluster.virtualisation.oci-containers.containers.kix-operator.cmd));
  inClusterHasNoBootstrap = ok (!(inCluster.systemd.services ? kix-operator-bootstrap));
  inClusterWarns = ok (builtins.any (has "uses the in-cluster") inCluster.warnings);

  containerImage = eq {
    image = "kix-operator:stand-in-tag";
    imageFile = container.services.kix-operator.image.outPath;
    user = "65532:65532";
  } {
    inherit (ctr) image user;
    imageFile = ctr.imageFile.outPath;
  };
  containerMountsHostStoreAndDaemon = eq [
    "/nix/store:/nix/store:ro"
    "/nix/var/nix/daemon-socket:/nix/var/nix/daemon-socket"
    "/nix/var/nix/gcroots/kix:/nix/var/nix/gcroots/kix"
    "/var/lib/kix-operator:/var/lib/kix-operator:ro"
  ] ctr.volumes;
  containerHardening = ok (
    builtins.all (o: builtins.elem o ctr.extraOptions) [
      "--network=host"
      "--read-only"
      "--cap-drop=all"
      "--security-opt=no-new-privileges"
    ]
  );
  containerEnvironment = eq {
    NIX_REMOTE = "daemon";
    KIX_GCROOTS_DIR = "/nix/var/nix/gcroots/kix";
  } ctr.environment;
  containerArguments = eq [
    "--kubeconfig=/var/lib/kix-operator/kubeconfig"
    "--log-format=text"
    "--metrics-addr=0.0.0.0:8080"
    "--lease-namespace=kube-system"
    "--resync-interval=60s"
  ] ctr.cmd;
  imageClosureInHostStore = eq (map (p: p.outPath) container.services.kix-operator.image.storeRoots) (
    map (p: p.outPath) container.system.extraDependencies
  );
  containerAfterBootstrapAndK3s = ok (
    builtins.all (u: builtins.elem u podmanUnit.after) [
      "kix-operator-bootstrap.service"
      "k3s.service"
      "nix-daemon.socket"
    ]
  );
  containerNoHostUnitOrUser = ok (!(container.systemd.services ? kix-operator) && container.users.users == { });
  stateDirsForTheContainerUser = eq [
    "d /var/lib/kix-operator 0750 65532 65532 - -"
    "d /nix/var/nix/gcroots/kix 0755 65532 65532 - -"
  ] container.systemd.tmpfiles.rules;

  bootstrapIsOneshotAfterK3s = eq {
    Type = "oneshot";
    RemainAfterExit = true;
    Restart = "on-failure";
    afterK3s = true;
  } {
    inherit (bootstrap.serviceConfig) Type RemainAfterExit Restart;
    afterK3s = builtins.elem "k3s.service" bootstrap.after;
  };
  bootstrapRunsTheScriptFile = ok (
    lib.hasSuffix "-kix-operator-bootstrap.sh" bootstrap.serviceConfig.ExecStart
    && lib.hasPrefix "${common.pkgs.bash}/bin/bash " bootstrap.serviceConfig.ExecStart
  );
  bootstrapEnvironment = eq {
    KUBECONFIG = k3sKubeconfig;
    KIX_BOOTSTRAP_TREE = (clusterOf container).outPath;
    KIX_BOOTSTRAP_TIMEOUT = "300";
    KIX_OPERATOR_KUBECONFIG = "/var/lib/kix-operator/kubeconfig";
    KIX_OPERATOR_OWNER = "65532:65532";
    KIX_GCROOTS_DIR = "/nix/var/nix/gcroots/kix";
  } bootstrap.environment;
  # kix deploys and writes the ServiceAccount's kubeconfig: no kubectl.
  bootstrapPath = eq (map (p: p.outPath) [
    container.services.kix-operator.bootstrap.package
    common.pkgs.coreutils
    container.services.kix-operator.nixPackage
  ]) (map (p: p.outPath) bootstrap.path);
  bootstrapWithoutServiceAccountWritesNoKubeconfig = eq "" containerNoSa.systemd.services.kix-operator-bootstrap.environment.KIX_OPERATOR_KUBECONFIG;
  serviceAccountByDefaultWithKubeconfig = eq {
    bootstrap = true;
    useServiceAccount = true;
  } {
    bootstrap = container.services.kix-operator.bootstrap.enable;
    inherit (container.services.kix-operator.rbac) useServiceAccount;
  };
  noKubeconfigCopyWithServiceAccount = eq [ ] podmanUnit.serviceConfig.ExecStartPre;
  containerCopiesHostKubeconfigForItsUser = ok (
    let
      pre = containerNoSa.systemd.services.podman-kix-operator.serviceConfig.ExecStartPre;
    in
    builtins.length pre == 1
    && has "install -m 0400 -o 65532 -g 65532" (builtins.head pre)
    && has "/etc/kix/admin.yaml /var/lib/kix-operator/.kubeconfig.new" (builtins.head pre)
  );

  hostUnit = ok (
    hostUnit.serviceConfig.User == "kix-operator"
    && hostUnit.serviceConfig.Restart == "always"
    && hostUnit.startLimitIntervalSec == 0
    && hostUnit.serviceConfig.ProtectSystem == "strict"
    && hostUnit.serviceConfig.ReadWritePaths == [ "/nix/var/nix/gcroots/kix" ]
    && hostUnit.environment.NIX_REMOTE == "daemon"
    && builtins.elem host.services.kix-operator.nixPackage hostUnit.path
  );
  hostExecStart = ok (
    lib.hasPrefix "\"${host.services.kix-operator.package}/bin/kix-operator\" \"--kubeconfig=/var/lib/kix-operator/kubeconfig\"" hostUnit.serviceConfig.ExecStart
  );
  # Fetching builds (#44): each cache and key a flag; a store of its own
  # made, writable, and holding its GC roots (no KIX_GCROOTS_DIR).
  fetchFlags =
    let
      fetching = eval {
        enable = true;
        mode = "host";
        substituters = [ "https://cache.example.org" "file:///srv/cache" ];
        trustedPublicKeys = [ "ci-1:f+8sP/+hLYlJ6SSuHHhV4pdyOd+Eu2WGxX9WmXn2aHQ=" ];
        store = "local?root=/var/lib/kix-operator/store";
      };
      unit = fetching.systemd.services.kix-operator;
      start = unit.serviceConfig.ExecStart;
    in
    eq {
      flags = true;
      writable = [ "/nix/var/nix/gcroots/kix" "/var/lib/kix-operator/store" ];
      made = true;
      roots = false;
    } {
      flags =
        has "\"--substituter=https://cache.example.org\" \"--substituter=file:///srv/cache\"" start
        && has "\"--trusted-public-key=ci-1:f+8sP/+hLYlJ6SSuHHhV4pdyOd+Eu2WGxX9WmXn2aHQ=\"" start
        && has "\"--store=local?root=/var/lib/kix-operator/store\"" start;
      writable = unit.serviceConfig.ReadWritePaths;
      made = builtins.elem "d /var/lib/kix-operator/store 0750 kix-operator kix-operator - -" fetching.systemd.tmpfiles.rules;
      roots = unit.environment ? KIX_GCROOTS_DIR;
    };
  substitutersNeedAKey = ok (
    builtins.any (has "substituters needs trustedPublicKeys") (
      failedAssertions (eval {
        enable = true;
        kubeconfigFile = k3sKubeconfig;
        substituters = [ "https://cache.example.org" ];
      })
    )
  );
  badTrustedKeyIsRefused = throws (eval {
    enable = true;
    trustedPublicKeys = [ "no-colon" ];
  }).services.kix-operator.trustedPublicKeys;
  # systemd reads % as a specifier and $ as a variable: both are doubled.
  hostExecStartEscapesSpecifiers = ok (
    has "\"--label=50%%-$$HOME\"" (eval {
      enable = true;
      mode = "host";
      settings.label = "50%-$HOME";
    }).systemd.services.kix-operator.serviceConfig.ExecStart
  );
  hostCopiesKubeconfigAsRoot = ok (
    let
      pre = hostUnit.serviceConfig.ExecStartPre;
    in
    builtins.length pre == 1 && lib.hasPrefix "+" (builtins.head pre) && has "-o kix-operator -g kix-operator" (builtins.head pre)
  );
  hostUser = ok (host.users.users.kix-operator.isSystemUser && host.users.groups ? kix-operator);
  # The age key for encrypted Secrets: a string path, copied by root for
  # the operator's user before each start, passed as --age-identity; never
  # a store path.
  ageIdentityCopiedAndPassed = ok (
    let
      unit =
        (eval {
          enable = true;
          mode = "host";
          kubeconfigFile = k3sKubeconfig;
          rbac.useServiceAccount = false;
          ageIdentityFile = "/run/keys/kix-age.txt";
        }).systemd.services.kix-operator;
      pre = unit.serviceConfig.ExecStartPre;
    in
    has "--age-identity=/var/lib/kix-operator/age-identity.txt" unit.serviceConfig.ExecStart
    && builtins.length pre == 2
    && lib.hasPrefix "+" (builtins.elemAt pre 1)
  );
  ageIdentityForDeclaredClusters = ok (
    has "--age-identity=/run/keys/kix-age.txt"
      (declaring { extra.ageIdentityFile = "/run/keys/kix-age.txt"; }).systemd.services.kix-declare-demo.serviceConfig.ExecStart
    && !(has "--age-identity" declareUnit.serviceConfig.ExecStart)
  );
  ageIdentityNotInTheStore = ok (
    builtins.any (m: has "ageIdentityFile is in the Nix store" m) (
      failedAssertions (eval {
        enable = true;
        ageIdentityFile = "${builtins.storeDir}/0123456789abcdfghijklmnpqrsvwxyz-key.txt";
      })
    )
  );
  # Alerts: a JSON file in the store of Secret references only, passed as
  # --alerts; the bootstrap lets the operator `get` exactly those Secrets,
  # in the lease namespace unless a reference names its own.
  alertsFileAndTheirSecrets =
    let
      alerts = [
        {
          name = "hook";
          target.webhook.urlSecret = {
            name = "kix-alerts";
            key = "hook";
          };
        }
        {
          name = "prs";
          clusters = [ "web" ];
          target.github = {
            repository = "acme/infra";
            tokenSecret = {
              name = "gh";
              key = "token";
              namespace = "ci";
            };
          };
        }
      ];
      c = eval {
        enable = true;
        mode = "host";
        kubeconfigFile = k3sKubeconfig;
        inherit alerts;
      };
      start = c.systemd.services.kix-operator.serviceConfig.ExecStart;
      file = builtins.head (builtins.match ".*\"--alerts=([^\"]+)\".*" start);
      roles = builtins.filter (o: o.kind == "Role" && o.metadata.name == "kix-operator-alerts") (objectsOf c);
      bindings = builtins.filter (o: o.kind == "RoleBinding" && o.metadata.name == "kix-operator-alerts") (objectsOf c);
    in
    eq {
      file = { inherit alerts; };
      roles = [
        "ci:get:gh"
        "kube-system:get:kix-alerts"
      ];
      bindings = [ "ci" "kube-system" ];
    } {
      file = builtins.fromJSON (builtins.readFile file);
      roles = sorted (
        map (
          r:
          let
            rule = builtins.head r.rules;
          in
          "${r.metadata.namespace}:${lib.concatStringsSep "," rule.verbs}:${lib.concatStringsSep "," rule.resourceNames}"
        ) roles
      );
      bindings = sorted (map (b: b.metadata.namespace) bindings);
    };
  noAlertsNoFlagNoSecrets = ok (
    !(has "--alerts" hostUnit.serviceConfig.ExecStart)
    && !(builtins.any (o: o.metadata.name == "kix-operator-alerts") objects)
  );
  # Keys bound to Kix clusters: each copied by root to age-keys/<cluster>.txt
  # and passed as --age-key-file=<cluster>=<file>; the declared cluster of
  # that name plans with its own key only; never a store path.
  ageKeyFilesBoundPerCluster = ok (
    let
      unit =
        (eval {
          enable = true;
          mode = "host";
          kubeconfigFile = k3sKubeconfig;
          rbac.useServiceAccount = false;
          ageKeyFiles = {
            team-a = "/run/keys/team-a.txt";
            team-b = "/run/keys/team-b.txt";
          };
        }).systemd.services.kix-operator;
      pre = unit.serviceConfig.ExecStartPre;
      start = unit.serviceConfig.ExecStart;
    in
    has "\"--age-key-file=team-a=/var/lib/kix-operator/age-keys/team-a.txt\"" start
    && has "\"--age-key-file=team-b=/var/lib/kix-operator/age-keys/team-b.txt\"" start
    && !(has "--age-identity" start)
    && builtins.length pre == 2
    && lib.hasPrefix "+" (builtins.elemAt pre 1)
  );
  ageKeyFileForItsDeclaredClusterOnly = ok (
    let
      start =
        (declaring {
          extra.ageKeyFiles = {
            demo = "/run/keys/demo.txt";
            other = "/run/keys/other.txt";
          };
        }).systemd.services.kix-declare-demo.serviceConfig.ExecStart;
    in
    has "--age-identity=/run/keys/demo.txt" start && !(has "/run/keys/other.txt" start)
  );
  ageKeyFilesNotInTheStore = ok (
    builtins.any (m: has "ageKeyFiles.team-a: the key file must stay out of the Nix store" m) (
      failedAssertions (eval {
        enable = true;
        ageKeyFiles.team-a = "${builtins.storeDir}/0123456789abcdfghijklmnpqrsvwxyz-key.txt";
      })
    )
  );
  hostHasNoContainer = ok (host.virtualisation.oci-containers.containers == { } && host.system.extraDependencies == [ ]);

  # The token Secret comes after its ServiceAccount.
  bootstrapCluster = eq {
    cluster = "kix-operator";
    packages = [
      "rbac"
      "token"
    ];
    manifests = [ "kix-operator-rbac.yaml" ];
    token = {
      dependsOn = [ "rbac" ];
      manifests = [ "kix-operator-token.yaml" ];
    };
  } {
    inherit (clusterOf container) cluster;
    packages = (clusterOf container).packageOrder;
    manifests = map baseNameOf (clusterOf container).packages.rbac.manifests;
    token = {
      inherit ((clusterOf container).packages.token) dependsOn;
      manifests = map baseNameOf (clusterOf container).packages.token.manifests;
    };
  };
  # The fixed RBAC (ServiceAccount, token, records role) grants no wildcard;
  # bootstrap-test asks the API server what it allows.
  rbacFixedPartHasNoWildcard = ok (!(has "*" (builtins.readFile ../../nixos-modules/kix-operator-rbac.yaml)));
  rbacLeasesInLeaseNamespace = eq {
    namespace = "kube-system";
    resources = [ "leases" ];
    bound = "Role/kix-operator-leases";
  } {
    inherit ((one objects "Role" "kix-operator-leases").metadata) namespace;
    resources = lib.concatMap (r: r.resources) (one objects "Role" "kix-operator-leases").rules;
    bound = roleRefOf (one objects "RoleBinding" "kix-operator-leases");
  };
  rbacApplyClusterWideByDefault = eq {
    rules = [
      {
        apiGroups = [ "*" ];
        resources = [ "*" ];
        verbs = [ "*" ];
      }
    ];
    binding = "ClusterRole/kix-operator-apply";
    subject = {
      kind = "ServiceAccount";
      name = "kix-operator";
      namespace = "kix-system";
    };
  } {
    inherit (one objects "ClusterRole" "kix-operator-apply") rules;
    binding = roleRefOf (one objects "ClusterRoleBinding" "kix-operator-apply");
    subject = builtins.head (one objects "ClusterRoleBinding" "kix-operator-apply").subjects;
  };
  noReadRoleWhenClusterWide = eq [ ] (find objects "ClusterRole" "kix-operator-read");
  noSystemNamespacesCreated = eq [ ] (namespacesOf objects);

  rbacNamespacesAllowList = eq {
    roleBindings = [
      "apps"
      "web"
    ];
    readRules = [
      {
        apiGroups = [ "*" ];
        resources = [ "*" ];
        verbs = [
          "get"
          "list"
          "watch"
        ];
      }
    ];
    readBound = "ClusterRole/kix-operator-read";
    clusterWideApply = false;
    clusterApply = "ClusterRole/kix-operator-apply-cluster";
    leases = "kix-leases";
    namespaces = [
      "apps"
      "kix-leases"
      "web"
    ];
  } {
    roleBindings = sorted (map (o: o.metadata.namespace) (find restrictedObjects "RoleBinding" "kix-operator-apply"));
    readRules = (one restrictedObjects "ClusterRole" "kix-operator-read").rules;
    readBound = roleRefOf (one restrictedObjects "ClusterRoleBinding" "kix-operator-read");
    clusterWideApply = find restrictedObjects "ClusterRoleBinding" "kix-operator-apply" != [ ];
    clusterApply = roleRefOf (one restrictedObjects "ClusterRoleBinding" "kix-operator-apply-cluster");
    leases = (one restrictedObjects "Role" "kix-operator-leases").metadata.namespace;
    namespaces = namespacesOf restrictedObjects;
  };
  # kix prunes what a configuration drops, but never these namespaces.
  rbacNamespacesNeverPruned = ok (
    builtins.all (o: o.metadata.annotations."kix.run/prune" == "disabled") (
      builtins.filter (o: o.kind == "Namespace") restrictedObjects
    )
  );

  flagRendering = eq [
    "--kubeconfig=/var/lib/kix-operator/kubeconfig"
    "--log-format=json"
    "--metrics-addr=[::]:9000"
    "--a-switch"
    "--count=3"
    "--lease-namespace=kube-system"
    "--repeated=x"
    "--repeated=y"
    "--resync-interval=30s"
    "-v"
  ] flags.virtualisation.oci-containers.containers.kix-operator.cmd;
  openFirewall = eq [ 8080 ] (
    (eval {
      enable = true;
      openFirewall = true;
    }).networking.firewall.allowedTCPPorts
  );
  environmentExtends = eq {
    NIX_REMOTE = "daemon";
    KIX_GCROOTS_DIR = "/var/lib/roots";
    KIX_LOG = "debug";
  } (eval {
    enable = true;
    gcRootsDir = "/var/lib/roots";
    environment.KIX_LOG = "debug";
  }).virtualisation.oci-containers.containers.kix-operator.environment;

  # Every generated value has the type NixOS gives its option (units,
  # users, firewall, containers, system closure).
  generatedValuesTypeCheck = ok (
    builtins.all (c: builtins.deepSeq (rendered c) true) [
      container
      host
      containerNoSa
      restricted
      flags
      inCluster
      declared
    ]
  );

  # kix declare, after the operator, once per activation of a generation.
  declareUnitIsOneshotAfterTheOperator = eq {
    Type = "oneshot";
    RemainAfterExit = true;
    TimeoutStartSec = 420;
    wantedBy = [ "multi-user.target" ];
    afterOperator = true;
    wantsOperator = true;
    afterBootstrap = true;
    restart = null;
  } {
    inherit (declareUnit.serviceConfig) Type RemainAfterExit TimeoutStartSec;
    inherit (declareUnit) wantedBy;
    afterOperator = builtins.elem "podman-kix-operator.service" declareUnit.after;
    wantsOperator = builtins.elem "podman-kix-operator.service" declareUnit.wants;
    afterBootstrap = builtins.elem "kix-operator-bootstrap.service" declareUnit.after;
    restart = declareUnit.serviceConfig.Restart or null;
  };
  declareUnitAfterTheHostModeOperator = ok (
    builtins.elem "kix-operator.service"
      (declaring { extra.mode = "host"; }).systemd.services.kix-declare-demo.after
  );
  declareExecStart = eq (lib.concatMapStringsSep " " builtins.toJSON [
    kixCli
    "declare"
    "demo"
    "--path=${generation1}"
    "--wait=120s"
    "--accept=migration app"
    "--accept=adopt ConfigMap kix-vm/legacy"
    "--max-deletions=5"
    "--declared-by=nixos"
  ]) declareUnit.serviceConfig.ExecStart;
  declareEnvironment = eq {
    KUBECONFIG = k3sKubeconfig;
    KIX_GCROOTS_DIR = "/nix/var/nix/gcroots/kix";
  } declareUnit.environment;
  # The unit refers to the build: it is in the system closure, so the
  # generation keeps it alive and a rollback finds it in the store.
  declareBuildInTheClosure = ok (builtins.elem generation1.drvPath (referenced declareUnit.serviceConfig.ExecStart));
  # Another generation's build changes the unit (restarted by the switch);
  # the same build leaves it as it is.
  declareSwitchRestarts = eq {
    triggers = [ generation2.outPath ];
    differs = true;
    same = true;
  } {
    triggers = map toString switched.restartTriggers;
    differs = switched.serviceConfig.ExecStart != declareUnit.serviceConfig.ExecStart;
    same = (declaring { }).systemd.services.kix-declare-demo.serviceConfig.ExecStart == declareUnit.serviceConfig.ExecStart;
  };
  declareHostName = eq {
    default = true;
    named = true;
  } {
    # NixOS's default host name
    default = has "\"--declared-by=nixos\"" declareUnit.serviceConfig.ExecStart;
    named = has "\"--declared-by=edge-1\"" (evalWith [
      {
        networking.hostName = "edge-1";
        services.kix-operator = {
          enable = true;
          kubeconfigFile = k3sKubeconfig;
          clusters.demo.build = generation1;
        };
      }
    ]).systemd.services.kix-declare-demo.serviceConfig.ExecStart;
  };
  # absent = "prune": an empty build of that Kix cluster, allowed to be empty.
  declareAbsentPrunes = ok (
    let
      start = retiredUnit.serviceConfig.ExecStart;
    in
    has "\"--allow-empty\"" start && has "-kix-retired\"" start && !(has "--max-deletions" start)
  );
  declareAbsentBuildIsEmpty = eq {
    cluster = "retired";
    packages = [ ];
  } (
    let
      tree = builtins.head retiredUnit.restartTriggers;
    in
    {
      inherit (tree) cluster;
      packages = tree.packageOrder;
    }
  );
  noDeclareUnitsWithoutClusters = eq [ ] (
    builtins.filter (lib.hasPrefix "kix-declare-") (builtins.attrNames container.systemd.services)
  );
  declareAssertions = eq {
    both = true;
    neither = true;
    otherCluster = true;
    noKubeconfig = true;
    fine = [ ];
  } {
    both = builtins.any (has "set build, or absent") (declareFailures { demo.absent = "prune"; });
    neither = builtins.any (has "set build, or absent") (declareFailures { demo.build = null; });
    otherCluster = builtins.any (has "is the build of Kix cluster demo, not web") (
      declareFailures { extra.clusters.web.build = generation1; }
    );
    noKubeconfig = builtins.any (has "clusters.demo needs kubeconfigFile") (
      failedAssertions (eval {
        enable = true;
        clusters.demo.build = generation1;
      })
    );
    fine = failedAssertions declared;
  };
  declareBadAbsentRejected = throws (declaring { extra.clusters.retired.absent = "delete"; }).systemd.services;
  declareBadTimeoutRejected = throws (declaring { demo.waitTimeout = 0; }).systemd.services;
  declareBuildMustBeAPackage = throws (declaring { demo.build = "demo"; }).systemd.services;

  assertionServiceAccountNeedsBootstrap = ok (
    builtins.any (has "useServiceAccount needs") (failedAssertions (eval {
      enable = true;
      rbac.useServiceAccount = true;
    }))
  );
  failedAssertionsStopTheSystem = throws (eval {
    enable = true;
    rbac.useServiceAccount = true;
  }).system.build.toplevel;
  defaultConfigsPassAssertions = eq [ [ ] [ ] [ ] [ ] [ ] ] (map failedAssertions [
    container
    host
    containerNoSa
    restricted
    tenanted
  ]);

  # Several teams, one operator.
  tenantFlags = eq [
    "--kubeconfig=/var/lib/kix-operator/kubeconfig"
    "--log-format=text"
    "--metrics-addr=0.0.0.0:8080"
    "--default-service-account=team-c/kix"
    "--require-service-account"
    "--lease-namespace=kube-system"
    "--resync-interval=60s"
  ] (tenanting { defaultServiceAccount = "team-c/kix"; }).virtualisation.oci-containers.containers.kix-operator.cmd;
  tenantsOnlyByDefaultWithTenants = eq [ true false ] [
    tenanted.services.kix-operator.rbac.tenantsOnly
    container.services.kix-operator.rbac.tenantsOnly
  ];
  # The operator's generated RBAC writes nothing but Leases and
  # impersonates nothing but the tenants' accounts (the fixed records role
  # is kix-operator-rbac.yaml, checked for wildcards above).
  tenantsOnlyWrites = eq [
    "Role/kix-operator-leases:leases:get,list,watch,create,update,patch,delete"
    "Role/kix-operator-impersonate:serviceaccounts:impersonate"
    "Role/kix-operator-impersonate:serviceaccounts:impersonate"
    "Role/kix-tenant-leases:leases:get,list,watch,create,update,patch,delete"
    "Role/kix-tenant-leases:leases:get,list,watch,create,update,patch,delete"
  ] (writeRules tenantObjects);
  tenantsOnlyImpersonatesByName =
    let
      roleIn = ns: builtins.head (builtins.filter (o: o.kind == "Role" && o.metadata.name == "kix-operator-impersonate" && o.metadata.namespace == ns) tenantObjects);
      bindingIn = ns: builtins.head (builtins.filter (o: o.kind == "RoleBinding" && o.metadata.name == "kix-operator-impersonate" && o.metadata.namespace == ns) tenantObjects);
    in
    eq {
      team-a = [ "kix" ];
      team-b = [ "deployer" ];
      boundTo = "kix-system/kix-operator";
    } {
      team-a = (builtins.head (roleIn "team-a").rules).resourceNames;
      team-b = (builtins.head (roleIn "team-b").rules).resourceNames;
      boundTo = let sub = builtins.head (bindingIn "team-a").subjects; in "${sub.namespace}/${sub.name}";
    };
  # Reading the kinds (drift watches), cluster-wide; nothing bound to apply.
  tenantsOnlyReads = eq {
    read = [ { apiGroups = [ "*" ]; resources = [ "*" ]; verbs = [ "get" "list" "watch" ]; } ];
    apply = [ ];
    applyBindings = [ ];
  } {
    read = (one tenantObjects "ClusterRole" "kix-operator-read").rules;
    apply = find tenantObjects "ClusterRole" "kix-operator-apply";
    applyBindings = find tenantObjects "ClusterRoleBinding" "kix-operator-apply" ++ find tenantObjects "RoleBinding" "kix-operator-apply";
  };
  # The tenants take the deploy Lease acting as themselves, each in its
  # own namespace: none may write Leases where another's (or the
  # operator's leader Lease) lives.
  tenantLeaseSubjects =
    let
      bindingIn = ns: builtins.head (builtins.filter (o: o.kind == "RoleBinding" && o.metadata.name == "kix-tenant-leases" && o.metadata.namespace == ns) tenantObjects);
      subjectsIn = ns: map (s: "${s.namespace}/${s.name}") (bindingIn ns).subjects;
    in
    eq {
      team-a = [ "team-a/kix" ];
      team-b = [ "team-b/deployer" ];
      inLeaseNamespace = [ ];
    } {
      team-a = subjectsIn "team-a";
      team-b = subjectsIn "team-b";
      inLeaseNamespace = builtins.filter (o: o.metadata.name == "kix-tenant-leases" && o.metadata.namespace == "kube-system") tenantObjects;
    };
  tenantNamespacesCreated = eq [ "team-a" "team-b" ] (namespacesOf tenantObjects);
  # The admission policy is a package of the bootstrap's Kix cluster:
  # `kix crds --tenants <the declaration>`, the policy and binding only.
  tenantPolicyPackage = ok (
    let
      policy = builtins.head tenantCluster.packages.tenants.manifests;
    in
    tenantCluster.packages.tenants.dependsOn == [ "rbac" ]
    && has "/bin/kix crds --tenants ${tenantDeclaration}" policy.text
    && has "sed -n '/^# Who may write kix/,$p'" policy.text
  );
  noTenantPolicyWithoutTenants = eq [ "rbac" "token" ] (builtins.attrNames (clusterOf container).packages);
  # An impersonate Role without tenantsOnly too: the operator acts as the
  # default account; it keeps its apply rules.
  defaultAccountImpersonated = eq {
    impersonate = [ "kix" ];
    apply = true;
  } (
    let
      os = objectsOf (eval {
        enable = true;
        kubeconfigFile = k3sKubeconfig;
        defaultServiceAccount = "shared/kix";
      });
    in
    {
      impersonate = (builtins.head (one os "Role" "kix-operator-impersonate").rules).resourceNames;
      apply = find os "ClusterRoleBinding" "kix-operator-apply" != [ ];
    }
  );
  tenantAssertions = eq {
    operatorNotPlatform = true;
    noRequirement = true;
    namespacedApply = true;
  } {
    operatorNotPlatform = builtins.any (has "platform.users must include ${operatorUser}") (
      failedAssertions (tenanting { tenants = mkTenants [ "alice" ]; })
    );
    noRequirement = builtins.any (has "rbac.tenantsOnly: the operator has no write rights of its own") (
      failedAssertions (tenanting { requireServiceAccount = false; })
    );
    namespacedApply = builtins.any (has "rbac.namespaces and rbac.clusterApplyRules") (
      failedAssertions (tenanting { rbac.namespaces = [ "apps" ]; })
    );
  };
  # Without rbac.useServiceAccount the operator is not its ServiceAccount:
  # the platform need not name it.
  tenantsWithHostCredentials = eq [ ] (
    failedAssertions (tenanting {
      tenants = mkTenants [ "alice" ];
      rbac.useServiceAccount = false;
    })
  );
  tenantsMustBeADeclaration = throws (tenanting { tenants = common.pkgs.writeText "tenants.json" "{}"; }).services.kix-operator.tenants;
  defaultServiceAccountNamesNamespaceAndName = throws (tenanting { defaultServiceAccount = "kix"; }).services.kix-operator.defaultServiceAccount;
  requireServiceAccountIsABool = throws (tenanting { requireServiceAccount = "yes"; }).services.kix-operator.requireServiceAccount;
  # A Nix path would copy the credential into the world-readable store.
  kubeconfigPathLiteralRejected = throws (eval {
    enable = true;
    kubeconfigFile = ../../Cargo.toml;
  }).services.kix-operator.kubeconfigFile;
  badLogFormatRejected = throws (eval {
    enable = true;
    logFormat = "xml";
  }).virtualisation.oci-containers.containers.kix-operator.cmd;
  unknownOptionRejected = throws (eval { settingz = { }; }).services.kix-operator.enable;
  badSettingTypeRejected = throws (eval {
    enable = true;
    settings.nested = {
      a = 1;
    };
  }).virtualisation.oci-containers.containers.kix-operator.cmd;
  # The declarations reject what NixOS rejects in what a configuration adds
  # to the module's units (checks/nix/run also plants errors in a copy of
  # the module itself).
  badRestartRejected = throws (evalWith [
    {
      services.kix-operator = {
        enable = true;
        mode = "host";
      };
      systemd.services.kix-operator.serviceConfig.Restart = lib.mkForce "on-fail";
    }
  ]).systemd.services.kix-operator.serviceConfig;
  badUnitNameRejected = throws (evalWith [
    {
      services.kix-operator = {
        enable = true;
        mode = "host";
      };
      systemd.services.kix-operator.after = [ "k3s" ];
    }
  ]).systemd.services.kix-operator.after;
}
