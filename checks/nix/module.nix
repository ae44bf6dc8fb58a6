# services.kix-operator, evaluated with the stand-in module system: option
# names and defaults, the units and container it generates in both modes,
# the RBAC objects, flag rendering and assertions.
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
    ;

  eval = cfg: (nixos [ { services.kix-operator = cfg; } ]).config;
  evalWith = modules: (nixos modules).config;

  k3sKubeconfig = "/etc/rancher/k3s/k3s.yaml";

  disabled = eval { };
  defaults = disabled.services.kix-operator;
  options = (nixos [ ]).options.services.kix-operator;

  # enable, no kubeconfig: in-cluster configuration, no bootstrap
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
  bootstrapScript = bootstrap.serviceConfig.ExecStart;
  # host mode, operator using the host's kubeconfig directly
  host = eval {
    enable = true;
    mode = "host";
    kubeconfigFile = k3sKubeconfig;
    rbac.useServiceAccount = false;
  };
  hostUnit = host.systemd.services.kix-operator;
  # container mode, host's kubeconfig directly: copied for uid 65532
  containerNoSa = eval {
    enable = true;
    kubeconfigFile = "/etc/kix/admin.yaml";
    rbac.useServiceAccount = false;
  };

  objectsOf = c: c.services.kix-operator.rbac.objects;
  find =
    objects: kind: name:
    builtins.filter (o: o.kind == kind && o.metadata.name == name) objects;
  one =
    objects: kind: name:
    let
      found = find objects kind name;
    in
    if builtins.length found == 1 then builtins.head found else throw "expected one ${kind} ${name}";
  objects = objectsOf container;
  recordsRole = one objects "ClusterRole" "kix-operator";
  rulesFor = role: resource: builtins.filter (r: builtins.elem resource r.resources) role.rules;
  verbsFor = role: resource: sorted (lib.concatMap (r: r.verbs) (rulesFor role resource));

  restricted = eval {
    enable = true;
    kubeconfigFile = k3sKubeconfig;
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
          "list"
          "watch"
          "create"
          "patch"
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
  args = flags.services.kix-operator.arguments;

  failedAssertions = c: map (a: a.message) (builtins.filter (a: !a.assertion) c.assertions);
in
{
  moduleOptionNames = eq [
    "arguments"
    "bootstrap"
    "container"
    "enable"
    "environment"
    "extraArgs"
    "gcRootsDir"
    "image"
    "imageStorePaths"
    "kubeconfigFile"
    "logFormat"
    "metricsAddress"
    "metricsPort"
    "mode"
    "namespace"
    "nixPackage"
    "openFirewall"
    "package"
    "rbac"
    "settings"
  ] (builtins.attrNames options);
  moduleRbacOptionNames = eq [
    "applyRules"
    "clusterApplyRules"
    "enable"
    "manifestFile"
    "namespaces"
    "objects"
    "useServiceAccount"
  ] (builtins.attrNames options.rbac);
  moduleBootstrapOptionNames = eq [
    "crds"
    "crdsFile"
    "enable"
    "kubeconfigFile"
    "timeout"
  ] (builtins.attrNames options.bootstrap);

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
    };
    extraArgs = [ ];
    environment = { };
    gcRootsDir = "/nix/var/nix/gcroots/kix";
    namespace = "kix-system";
    bootstrap = {
      enable = false;
      kubeconfigFile = null;
      crds = true;
      timeout = 300;
    };
    rbac = {
      enable = true;
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
    };
    container = {
      uid = 65532;
      gid = 65532;
      extraOptions = [ ];
    };
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
      namespace
      container
      ;
    bootstrap = removeAttrs defaults.bootstrap [ "crdsFile" ];
    rbac = removeAttrs defaults.rbac [
      "objects"
      "manifestFile"
    ];
  };
  modulePackageFromTheFlake = eq common.self.packages.${common.system}.kix-operator.outPath defaults.package.outPath;
  moduleImageBuiltFromThePackage = eq [ "${defaults.package}/bin/kix-operator" ] defaults.image.stubArgs.config.Entrypoint;
  moduleCrdsFile = eq (toString ../../deploy/crds.yaml) (toString defaults.bootstrap.crdsFile);

  disabledDefinesNothing = ok (
    disabled.systemd == { } && disabled.virtualisation.oci-containers.containers == { } && disabled.users == { }
  );

  inClusterHasNoKubeconfigFlag = ok (!(builtins.any (lib.hasPrefix "--kubeconfig") inCluster.services.kix-operator.arguments));
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
  imageClosureInHostStore = ok (
    let
      deps = map (p: p.outPath) container.system.extraDependencies;
    in
    builtins.all (p: builtins.elem p.outPath deps) (
      container.services.kix-operator.image.storeRoots ++ [ container.services.kix-operator.package ]
    )
  );
  containerAfterBootstrapAndK3s = ok (
    builtins.all (u: builtins.elem u podmanUnit.after) [
      "kix-operator-bootstrap.service"
      "k3s.service"
      "nix-daemon.socket"
    ]
  );
  containerNoHostUnitOrUser = ok (!(container.systemd.services ? kix-operator) && !(container.users ? users));
  stateDirsForTheContainerUser = eq [
    "d /var/lib/kix-operator 0750 65532 65532 - -"
    "d /nix/var/nix/gcroots/kix 0755 65532 65532 - -"
  ] container.systemd.tmpfiles.rules;

  bootstrapIsOneshotAfterK3s = ok (
    bootstrap.serviceConfig.Type == "oneshot"
    && bootstrap.serviceConfig.RemainAfterExit
    && builtins.elem "k3s.service" bootstrap.after
  );
  bootstrapUsesTheKubeconfig = ok (has "export KUBECONFIG='${k3sKubeconfig}'" bootstrapScript);
  bootstrapAppliesCrdsAndWaits = ok (
    has "kubectl apply --server-side --force-conflicts --field-manager=nixos-kix-operator" bootstrapScript
    && has "crds.yaml" bootstrapScript
    && has "kubectl wait --for=condition=Established" bootstrapScript
    && has "crd/activations.kix.run crd/packageinstances.kix.run" bootstrapScript
  );
  bootstrapAppliesRbacAndPrunesOldRbac = ok (
    has "apply ${container.services.kix-operator.rbac.manifestFile}" bootstrapScript
    && has "kubectl delete clusterrolebinding,clusterrole -l" bootstrapScript
  );
  bootstrapWritesServiceAccountKubeconfig = ok (
    has "get secret kix-operator-token" bootstrapScript
    && has "mv -f \"$tmp\" /var/lib/kix-operator/kubeconfig" bootstrapScript
  );
  serviceAccountByDefaultWithKubeconfig = eq {
    bootstrap = true;
    useServiceAccount = true;
  } {
    bootstrap = container.services.kix-operator.bootstrap.enable;
    inherit (container.services.kix-operator.rbac) useServiceAccount;
  };
  noKubeconfigCopyWithServiceAccount = eq [ ] (podmanUnit.serviceConfig.ExecStartPre or [ ]);

  containerCopiesHostKubeconfigForItsUser = ok (
    let
      pre = containerNoSa.systemd.services.podman-kix-operator.serviceConfig.ExecStartPre;
    in
    builtins.length pre == 1
    && has "install -m 0400 -o 65532 -g 65532" (builtins.head pre)
    && has "'/etc/kix/admin.yaml'" (builtins.head pre)
  );

  hostUnit = ok (
    hostUnit.serviceConfig.User == "kix-operator"
    && hostUnit.serviceConfig.ProtectSystem == "strict"
    && hostUnit.serviceConfig.ReadWritePaths == [ "/nix/var/nix/gcroots/kix" ]
    && hostUnit.environment.NIX_REMOTE == "daemon"
    && builtins.elem host.services.kix-operator.nixPackage hostUnit.path
  );
  hostExecStart = ok (
    lib.hasPrefix "'${host.services.kix-operator.package}/bin/kix-operator' '--kubeconfig=/var/lib/kix-operator/kubeconfig'" hostUnit.serviceConfig.ExecStart
  );
  hostCopiesKubeconfigAsRoot = ok (
    let
      pre = hostUnit.serviceConfig.ExecStartPre;
    in
    builtins.length pre == 1 && lib.hasPrefix "+" (builtins.head pre) && has "-o kix-operator -g kix-operator" (builtins.head pre)
  );
  hostUser = ok (host.users.users.kix-operator.isSystemUser && host.users.groups ? kix-operator);
  hostHasNoContainer = ok (host.virtualisation.oci-containers.containers == { } && !(host.system ? extraDependencies && host.system.extraDependencies != [ ]));

  rbacRecordsRoleIsLeastPrivilege = eq {
    activations = [
      "get"
      "list"
      "patch"
      "update"
      "watch"
    ];
    status = [
      "get"
      "patch"
      "update"
    ];
    finalizers = [ "update" ];
    packageinstances = [
      "create"
      "delete"
      "get"
      "list"
      "patch"
      "update"
      "watch"
    ];
    events = [
      "create"
      "patch"
      "update"
    ];
    wildcards = false;
  } {
    activations = verbsFor recordsRole "activations";
    status = verbsFor recordsRole "activations/status";
    finalizers = verbsFor recordsRole "activations/finalizers";
    packageinstances = verbsFor recordsRole "packageinstances";
    events = verbsFor recordsRole "events";
    wildcards = builtins.any (r: builtins.elem "*" (r.verbs ++ r.resources ++ r.apiGroups)) recordsRole.rules;
  };
  rbacCrdsReadAllWriteOwn = eq {
    read = [
      "get"
      "list"
      "watch"
    ];
    write = [
      {
        resourceNames = [
          "activations.kix.run"
          "packageinstances.kix.run"
        ];
        verbs = [
          "patch"
          "update"
        ];
      }
    ];
  } {
    read = sorted (
      lib.concatMap (r: if r ? resourceNames then [ ] else r.verbs) (rulesFor recordsRole "customresourcedefinitions")
    );
    write = map (r: { inherit (r) resourceNames verbs; }) (
      builtins.filter (r: r ? resourceNames) (rulesFor recordsRole "customresourcedefinitions")
    );
  };
  noReadRoleWhenClusterWide = eq [ ] (find objects "ClusterRole" "kix-operator-read");
  rbacLeasesInLeaseNamespace = eq {
    namespace = "kube-system";
    resources = [ "leases" ];
    bound = "kix-operator-leases";
  } {
    inherit ((one objects "Role" "kix-operator-leases").metadata) namespace;
    resources = lib.concatMap (r: r.resources) (one objects "Role" "kix-operator-leases").rules;
    bound = (one objects "RoleBinding" "kix-operator-leases").roleRef.name;
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
    binding =
      let
        b = one objects "ClusterRoleBinding" "kix-operator-apply";
      in
      "${b.roleRef.kind}/${b.roleRef.name}";
    subject = builtins.head (one objects "ClusterRoleBinding" "kix-operator-apply").subjects;
  };
  rbacServiceAccountAndToken = ok (
    (one objects "ServiceAccount" "kix-operator").metadata.namespace == "kix-system"
    && (one objects "Secret" "kix-operator-token").type == "kubernetes.io/service-account-token"
    &&
      (one objects "Secret" "kix-operator-token").metadata.annotations."kubernetes.io/service-account.name"
      == "kix-operator"
  );
  rbacNamespaceCreatedButNotSystemOnes = eq [ "kix-system" ] (
    map (o: o.metadata.name) (builtins.filter (o: o.kind == "Namespace") objects)
  );
  rbacObjectsLabelled = ok (
    builtins.all (
      o:
      o.kind == "Namespace"
      || (
        o.metadata.labels."app.kubernetes.io/managed-by" == "nixos-kix-operator"
        && builtins.stringLength o.metadata.labels."kix.run/nixos-rbac" == 16
      )
    ) objects
  );
  rbacManifestIsAList = eq {
    apiVersion = "v1";
    kind = "List";
    items = objects;
  } (builtins.fromJSON container.services.kix-operator.rbac.manifestFile.text);

  rbacNamespacesAllowList = eq {
    roleBindings = [
      "apps"
      "web"
    ];
    # reads of the same kinds stay cluster-wide (LIST/WATCH per kind)
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
    namespaces = [
      "apps"
      "kix-system"
      "web"
    ];
  } {
    roleBindings = sorted (map (o: o.metadata.namespace) (find restrictedObjects "RoleBinding" "kix-operator-apply"));
    readRules = (one restrictedObjects "ClusterRole" "kix-operator-read").rules;
    readBound =
      let
        b = one restrictedObjects "ClusterRoleBinding" "kix-operator-read";
      in
      "${b.roleRef.kind}/${b.roleRef.name}";
    clusterWideApply = find restrictedObjects "ClusterRoleBinding" "kix-operator-apply" != [ ];
    clusterApply =
      let
        b = one restrictedObjects "ClusterRoleBinding" "kix-operator-apply-cluster";
      in
      "${b.roleRef.kind}/${b.roleRef.name}";
    namespaces = sorted (map (o: o.metadata.name) (builtins.filter (o: o.kind == "Namespace") restrictedObjects));
  };
  rbacChangeChangesTheHash = ok (
    (builtins.head (find objects "ClusterRole" "kix-operator")).metadata.labels."kix.run/nixos-rbac"
    != (builtins.head (find restrictedObjects "ClusterRole" "kix-operator")).metadata.labels."kix.run/nixos-rbac"
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
  ] args;
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

  assertionServiceAccountNeedsBootstrap = ok (
    builtins.any (has "useServiceAccount needs") (failedAssertions (eval {
      enable = true;
      rbac.useServiceAccount = true;
    }))
  );
  assertionKubeconfigNotInStore = ok (
    builtins.any (has "a Nix path literal") (failedAssertions (eval {
      enable = true;
      kubeconfigFile = ../../Cargo.toml;
    }))
  );
  failedAssertionsStopTheSystem = throws (eval {
    enable = true;
    rbac.useServiceAccount = true;
  }).system.build.toplevel;
  defaultConfigsPassAssertions = eq [ [ ] [ ] [ ] [ ] ] (map failedAssertions [
    container
    host
    containerNoSa
    restricted
  ]);
  badLogFormatRejected = throws (eval {
    enable = true;
    logFormat = "xml";
  }).services.kix-operator.arguments;
  unknownOptionRejected = throws (eval { settingz = { }; }).services.kix-operator.enable;
  badSettingTypeRejected = throws (eval {
    enable = true;
    settings.nested = {
      a = 1;
    };
  }).services.kix-operator.arguments;
}
