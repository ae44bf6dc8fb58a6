# services.kix-operator: the kix operator on a NixOS host.
#
# The operator keeps the current Activation of each Kix cluster applied. It
# reads the store paths that Activations name straight from this host's
# /nix/store and asks this host's nix-daemon to realise them and to keep GC
# roots for them (NIX_REMOTE=daemon), so it runs next to the store it deploys
# from:
#
#   mode = "container" (default): the operator's OCI image (images/operator.nix)
#     under virtualisation.oci-containers (podman by default), host network,
#     read-only root, no capabilities, with the host /nix/store mounted
#     read-only over the image's own store and the nix-daemon socket mounted.
#     Since the mount hides the image's store, the image's store paths are
#     added to the system closure (system.extraDependencies), so they are
#     always valid in the host store.
#   mode = "host": a hardened systemd service running the same binary
#     directly, as the system user kix-operator.
#
# Cluster access:
#   kubeconfigFile   the credentials this host has for the cluster (for k3s:
#                    "/etc/rancher/k3s/k3s.yaml"); null: the operator gets no
#                    --kubeconfig and uses the in-cluster configuration.
#   bootstrap        a oneshot unit (kix-operator-bootstrap) that applies the
#                    CRDs and the RBAC objects with kubectl and that
#                    credential (server-side apply, field manager
#                    nixos-kix-operator), and removes RBAC objects an earlier
#                    configuration made.
#   rbac             the operator's own identity: ServiceAccount
#                    <namespace>/kix-operator with least privilege on kix's
#                    records (ClusterRole kix-operator), leases in the lease
#                    namespace, events, plus the configurable apply
#                    permissions (rbac.applyRules, cluster-wide or only in
#                    rbac.namespaces). With rbac.useServiceAccount (default
#                    whenever the bootstrap runs) the bootstrap writes a
#                    kubeconfig for that ServiceAccount and the operator uses
#                    it instead of the host's (admin) credential.
#
# With k3s one may instead drop the CRDs and `rbac.manifestFile` into
# services.k3s.manifests (k3s applies /var/lib/rancher/k3s/server/manifests);
# the bootstrap unit is preferred here because it works with any cluster,
# waits for the CRDs to be Established and mints the ServiceAccount's
# kubeconfig. See docs/nix.md.
{
  config,
  lib,
  pkgs,
  utils,
  ...
}:
let
  cfg = config.services.kix-operator;

  inherit (lib)
    mkOption
    mkEnableOption
    mkIf
    mkMerge
    types
    literalExpression
    ;

  stateDir = "/var/lib/kix-operator";
  operatorKubeconfig = "${stateDir}/kubeconfig";
  containerName = "kix-operator";
  fieldManager = "nixos-kix-operator";
  serviceAccount = "kix-operator";
  tokenSecret = "kix-operator-token";

  isContainer = cfg.mode == "container";
  owner = if isContainer then toString cfg.container.uid else "kix-operator";
  group = if isContainer then toString cfg.container.gid else "kix-operator";

  # The operator reads ${operatorKubeconfig}: minted for its ServiceAccount
  # by the bootstrap unit, or copied from kubeconfigFile before each start
  # (readable by the operator's user only). Without either it runs with the
  # in-cluster configuration.
  hasKubeconfig = cfg.rbac.useServiceAccount || cfg.kubeconfigFile != null;
  copyKubeconfig = !cfg.rbac.useServiceAccount && cfg.kubeconfigFile != null;

  k3sUnits = lib.optional (config.services.k3s.enable or false) "k3s.service";
  bootstrapUnits = lib.optional cfg.bootstrap.enable "kix-operator-bootstrap.service";

  # ---- command line ------------------------------------------------------

  renderFlag =
    name: value:
    if value == null || value == false then
      [ ]
    else if value == true then
      [ "--${name}" ]
    else if builtins.isList value then
      map (v: "--${name}=${toString v}") value
    else
      [ "--${name}=${toString value}" ];

  hostPort =
    address: port:
    if lib.hasInfix ":" address then "[${address}]:${toString port}" else "${address}:${toString port}";

  arguments =
    lib.optional hasKubeconfig "--kubeconfig=${operatorKubeconfig}"
    ++ [
      "--log-format=${cfg.logFormat}"
      "--metrics-addr=${hostPort cfg.metricsAddress cfg.metricsPort}"
    ]
    ++ lib.concatLists (lib.mapAttrsToList renderFlag cfg.settings)
    ++ cfg.extraArgs;

  environment = {
    NIX_REMOTE = "daemon";
    KIX_GCROOTS_DIR = cfg.gcRootsDir;
  }
  // cfg.environment;

  # ---- RBAC --------------------------------------------------------------

  leaseNamespace = cfg.settings."lease-namespace";
  systemNamespaces = [
    "default"
    "kube-system"
    "kube-public"
    "kube-node-lease"
  ];
  subject = {
    kind = "ServiceAccount";
    name = serviceAccount;
    inherit (cfg) namespace;
  };

  # Least privilege on kix's own records: the operator reads and watches
  # Activations, updates them (phase, Superseded) with their status and
  # finalizer (kix.run/resources); it owns the PackageInstances; it reports
  # with Events.
  recordRules = [
    {
      apiGroups = [ "kix.run" ];
      resources = [ "activations" ];
      verbs = [
        "get"
        "list"
        "watch"
        "update"
        "patch"
      ];
    }
    {
      apiGroups = [ "kix.run" ];
      resources = [ "packageinstances" ];
      verbs = [
        "get"
        "list"
        "watch"
        "create"
        "update"
        "patch"
        "delete"
      ];
    }
    {
      apiGroups = [ "kix.run" ];
      resources = [
        "activations/status"
        "packageinstances/status"
      ];
      verbs = [
        "get"
        "update"
        "patch"
      ];
    }
    {
      apiGroups = [ "kix.run" ];
      resources = [
        "activations/finalizers"
        "packageinstances/finalizers"
      ];
      verbs = [ "update" ];
    }
    {
      apiGroups = [
        ""
        "events.k8s.io"
      ];
      resources = [ "events" ];
      verbs = [
        "create"
        "patch"
        "update"
      ];
    }
    # The engine checks that kix's CRDs are current (by their kix.run/digest
    # annotation) and upgrades them with server-side apply when they are not:
    # read access to CRDs, write access to kix's two only.
    {
      apiGroups = [ "apiextensions.k8s.io" ];
      resources = [ "customresourcedefinitions" ];
      verbs = [
        "get"
        "list"
        "watch"
      ];
    }
    {
      apiGroups = [ "apiextensions.k8s.io" ];
      resources = [ "customresourcedefinitions" ];
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

  # With rbac.namespaces, writes are bound per namespace, but the engine
  # finds its objects with one LIST per kind and watches them cluster-wide:
  # the same kinds, read-only, everywhere.
  readRules = map (
    r:
    removeAttrs r [ "nonResourceURLs" ]
    // {
      verbs = [
        "get"
        "list"
        "watch"
      ];
    }
  ) (builtins.filter (r: r ? resources) cfg.rbac.applyRules);

  # Leader election and the per-Kix-cluster deploy lease.
  leaseRules = [
    {
      apiGroups = [ "coordination.k8s.io" ];
      resources = [ "leases" ];
      verbs = [
        "get"
        "list"
        "watch"
        "create"
        "update"
        "patch"
        "delete"
      ];
    }
  ];

  meta = kind: name: namespace: {
    apiVersion = if kind == "ServiceAccount" || kind == "Secret" || kind == "Namespace" then "v1" else "rbac.authorization.k8s.io/v1";
    inherit kind;
    metadata = {
      inherit name;
    }
    // lib.optionalAttrs (namespace != null) { inherit namespace; };
  };
  clusterRole = name: rules: meta "ClusterRole" name null // { inherit rules; };
  clusterRoleBinding = name: role: meta "ClusterRoleBinding" name null // {
    roleRef = {
      apiGroup = "rbac.authorization.k8s.io";
      kind = "ClusterRole";
      name = role;
    };
    subjects = [ subject ];
  };
  roleBinding = name: namespace: roleKind: role: meta "RoleBinding" name namespace // {
    roleRef = {
      apiGroup = "rbac.authorization.k8s.io";
      kind = roleKind;
      name = role;
    };
    subjects = [ subject ];
  };

  # Labelled so the bootstrap can remove what a later configuration dropped.
  rbacObjects = [
    (meta "ServiceAccount" serviceAccount cfg.namespace)
  ]
  ++ lib.optional cfg.rbac.useServiceAccount (
    meta "Secret" tokenSecret cfg.namespace
    // {
      type = "kubernetes.io/service-account-token";
      metadata = (meta "Secret" tokenSecret cfg.namespace).metadata // {
        annotations."kubernetes.io/service-account.name" = serviceAccount;
      };
    }
  )
  ++ [
    (clusterRole "kix-operator" recordRules)
    (clusterRoleBinding "kix-operator" "kix-operator")
    (meta "Role" "kix-operator-leases" leaseNamespace // { rules = leaseRules; })
    (roleBinding "kix-operator-leases" leaseNamespace "Role" "kix-operator-leases")
    (clusterRole "kix-operator-apply" cfg.rbac.applyRules)
  ]
  ++ (
    if cfg.rbac.namespaces == null then
      [ (clusterRoleBinding "kix-operator-apply" "kix-operator-apply") ]
    else
      map (ns: roleBinding "kix-operator-apply" ns "ClusterRole" "kix-operator-apply") cfg.rbac.namespaces
      ++ lib.optionals (readRules != [ ]) [
        (clusterRole "kix-operator-read" readRules)
        (clusterRoleBinding "kix-operator-read" "kix-operator-read")
      ]
      ++ lib.optionals (cfg.rbac.clusterApplyRules != [ ]) [
        (clusterRole "kix-operator-apply-cluster" cfg.rbac.clusterApplyRules)
        (clusterRoleBinding "kix-operator-apply-cluster" "kix-operator-apply-cluster")
      ]
  );

  rbacHash = builtins.substring 0 16 (builtins.hashString "sha256" (builtins.toJSON rbacObjects));
  rbacLabels = {
    "app.kubernetes.io/managed-by" = fieldManager;
    "app.kubernetes.io/name" = "kix-operator";
    "kix.run/nixos-rbac" = rbacHash;
  };

  # Namespaces the RBAC objects live in (never deleted by the bootstrap).
  namespaceObjects = map (ns: meta "Namespace" ns null) (
    lib.filter (ns: !(builtins.elem ns systemNamespaces)) (
      lib.unique ([ cfg.namespace leaseNamespace ] ++ (if cfg.rbac.namespaces == null then [ ] else cfg.rbac.namespaces))
    )
  );

  objects =
    namespaceObjects
    ++ map (o: o // { metadata = o.metadata // { labels = rbacLabels; }; }) rbacObjects;

  # ---- units --------------------------------------------------------------

  prepareKubeconfig = pkgs.writeShellScript "kix-operator-kubeconfig" ''
    set -eu
    ${pkgs.coreutils}/bin/install -d -m 0750 -o ${owner} -g ${group} ${stateDir}
    ${pkgs.coreutils}/bin/install -m 0400 -o ${owner} -g ${group} \
      ${lib.escapeShellArg (toString cfg.kubeconfigFile)} ${stateDir}/.kubeconfig.new
    ${pkgs.coreutils}/bin/mv -f ${stateDir}/.kubeconfig.new ${operatorKubeconfig}
  '';

  bootstrapScript = pkgs.writeShellScript "kix-operator-bootstrap" ''
    set -euo pipefail
    export PATH=${
      lib.makeBinPath [
        pkgs.kubectl
        pkgs.coreutils
      ]
    }
    export KUBECONFIG=${lib.escapeShellArg (toString cfg.bootstrap.kubeconfigFile)}
    log() { echo "kix-operator-bootstrap: $*" >&2; }

    # The API server may still be starting (k3s on this host, for one).
    deadline=$((SECONDS + ${toString cfg.bootstrap.timeout}))
    until [ -r "$KUBECONFIG" ] && kubectl get --raw=/readyz >/dev/null 2>&1; do
      if [ "$SECONDS" -ge "$deadline" ]; then
        log "the API server of $KUBECONFIG was not ready within ${toString cfg.bootstrap.timeout}s"
        exit 1
      fi
      sleep 2
    done

    apply() {
      kubectl apply --server-side --force-conflicts --field-manager=${fieldManager} -f "$1"
    }
    ${lib.optionalString cfg.bootstrap.crds ''
      log "applying the kix CRDs"
      apply ${cfg.bootstrap.crdsFile}
      kubectl wait --for=condition=Established --timeout=120s \
        crd/activations.kix.run crd/packageinstances.kix.run
    ''}
    ${lib.optionalString cfg.rbac.enable ''
      log "applying RBAC ${rbacHash}"
      apply ${cfg.rbac.manifestFile}
      # RBAC objects of an earlier configuration that this one no longer has.
      selector='app.kubernetes.io/managed-by=${fieldManager},kix.run/nixos-rbac,kix.run/nixos-rbac!=${rbacHash}'
      kubectl delete clusterrolebinding,clusterrole -l "$selector" --ignore-not-found
      kubectl delete rolebinding,role --all-namespaces -l "$selector" --ignore-not-found
    ''}
    ${lib.optionalString cfg.rbac.useServiceAccount ''
      # A kubeconfig for the ServiceAccount: the operator runs with the RBAC
      # above, not with this host's credential.
      ns=${lib.escapeShellArg cfg.namespace}
      token=""
      for _ in $(seq 1 120); do
        token=$(kubectl -n "$ns" get secret ${tokenSecret} -o 'jsonpath={.data.token}' || true)
        [ -n "$token" ] && break
        sleep 1
      done
      if [ -z "$token" ]; then
        log "Secret $ns/${tokenSecret} got no token (is the token controller running?)"
        exit 1
      fi
      server=$(kubectl config view --raw --minify -o 'jsonpath={.clusters[0].cluster.server}')
      ca=$(kubectl config view --raw --minify -o 'jsonpath={.clusters[0].cluster.certificate-authority-data}')
      if [ -z "$ca" ]; then
        ca=$(kubectl -n "$ns" get secret ${tokenSecret} -o 'jsonpath={.data.ca\.crt}')
      fi
      install -d -m 0750 -o ${owner} -g ${group} ${stateDir}
      tmp=$(mktemp ${stateDir}/.kubeconfig.XXXXXX)
      trap 'rm -f "$tmp"' EXIT
      {
        echo "apiVersion: v1"
        echo "kind: Config"
        echo "clusters:"
        echo "  - name: kix"
        echo "    cluster:"
        echo "      server: $server"
        echo "      certificate-authority-data: $ca"
        echo "users:"
        echo "  - name: ${serviceAccount}"
        echo "    user:"
        echo "      token: $(printf '%s' "$token" | base64 -d)"
        echo "contexts:"
        echo "  - name: ${serviceAccount}"
        echo "    context:"
        echo "      cluster: kix"
        echo "      user: ${serviceAccount}"
        echo "      namespace: $ns"
        echo "current-context: ${serviceAccount}"
      } > "$tmp"
      chown ${owner}:${group} "$tmp"
      chmod 0400 "$tmp"
      mv -f "$tmp" ${operatorKubeconfig}
      trap - EXIT
      log "wrote ${operatorKubeconfig} for ServiceAccount $ns/${serviceAccount}"
    ''}
  '';

  ruleType = types.attrsOf (types.listOf types.str);
in
{
  options.services.kix-operator = {
    enable = mkEnableOption "the kix operator, which keeps the current Activation of each Kix cluster applied";

    package = mkOption {
      type = types.package;
      default =
        pkgs.kix-operator
          or (throw "services.kix-operator.package is not set and pkgs has no kix-operator: import the module through the kix flake (nixosModules.default) or apply its overlays.default");
      defaultText = literalExpression "pkgs.kix-operator (the flake's nixosModules set the flake's build)";
      description = "The kix-operator package (used directly in host mode and inside the default image).";
    };

    mode = mkOption {
      type = types.enum [
        "container"
        "host"
      ];
      default = "container";
      description = ''
        How the operator runs. `container`: the OCI image under
        virtualisation.oci-containers with the host /nix/store mounted
        read-only and the nix-daemon socket mounted. `host`: a hardened
        systemd service running the binary directly.
      '';
    };

    image = mkOption {
      type = types.package;
      default = pkgs.callPackage ../images/operator.nix {
        kix-operator = cfg.package;
        nix = cfg.nixPackage;
      };
      defaultText = literalExpression "pkgs.callPackage ./images/operator.nix { kix-operator = cfg.package; nix = cfg.nixPackage; }";
      description = ''
        The operator image (a dockerTools image archive with `imageName` and
        `imageTag`), loaded into the container runtime in container mode.
      '';
    };

    imageStorePaths = mkOption {
      type = types.listOf types.package;
      default = cfg.image.storeRoots or [ cfg.package ];
      defaultText = literalExpression "config.services.kix-operator.image.storeRoots";
      description = ''
        Store paths the image uses. The container sees the host store in
        place of its own, so these (with their closures) are added to the
        system closure (system.extraDependencies).
      '';
    };

    nixPackage = mkOption {
      type = types.package;
      default = config.nix.package;
      defaultText = literalExpression "config.nix.package";
      description = "Nix providing `nix-store` (client of this host's nix-daemon).";
    };

    kubeconfigFile = mkOption {
      type = types.nullOr types.path;
      default = null;
      example = "/etc/rancher/k3s/k3s.yaml";
      description = ''
        Kubeconfig with this host's credentials for the cluster, as a string
        (a Nix path literal would copy the secret into the store). It is
        copied for the operator's user before each start unless
        rbac.useServiceAccount (then the bootstrap uses it and the operator
        gets a ServiceAccount kubeconfig). null: no --kubeconfig, the
        operator uses the in-cluster configuration.
      '';
    };

    logFormat = mkOption {
      type = types.enum [
        "text"
        "json"
      ];
      default = "text";
      description = "Log format on stderr (journald): --log-format.";
    };

    metricsPort = mkOption {
      type = types.port;
      default = 8080;
      description = "Port of /metrics, /healthz and /readyz (--metrics-addr).";
    };

    metricsAddress = mkOption {
      type = types.str;
      default = "0.0.0.0";
      description = "IP address /metrics, /healthz and /readyz listen on (--metrics-addr).";
    };

    openFirewall = mkOption {
      type = types.bool;
      default = false;
      description = "Open metricsPort in the firewall.";
    };

    settings = mkOption {
      type = types.submodule {
        freeformType =
          with types;
          attrsOf (
            nullOr (oneOf [
              bool
              int
              str
              (listOf str)
            ])
          );
        options = {
          "resync-interval" = mkOption {
            type = types.str;
            default = "60s";
            description = ''
              How often every current record is re-checked in full, besides
              the watches on owned objects (--resync-interval; s, m or h).
            '';
          };
          "lease-namespace" = mkOption {
            type = types.str;
            default = "kube-system";
            description = ''
              Namespace of the leader-election and deploy leases
              (--lease-namespace). kube-system is where `kix deploy` takes its
              deploy lease, so CLI and operator exclude each other.
            '';
          };
        };
      };
      default = { };
      example = {
        "resync-interval" = "5m";
        cluster = [
          "infra"
          "apps"
        ];
        "leader-lease-seconds" = 30;
      };
      description = ''
        Operator flags: each attribute becomes `--name=value` (true:
        `--name`; false or null: left out; a list: the flag repeated, e.g.
        `cluster` to manage only some Kix clusters). See
        `kix-operator --help`.
      '';
    };

    extraArgs = mkOption {
      type = types.listOf types.str;
      default = [ ];
      example = [ "-v" ];
      description = "Extra command-line arguments, after the generated ones.";
    };

    environment = mkOption {
      type = types.attrsOf types.str;
      default = { };
      example = {
        KIX_LOG = "info,kix_engine=debug";
      };
      description = "Extra environment variables for the operator.";
    };

    gcRootsDir = mkOption {
      type = types.str;
      default = "/nix/var/nix/gcroots/kix";
      description = ''
        Directory of the GC roots that keep every store path an Activation
        names alive (KIX_GCROOTS_DIR). Mounted at the same path in the
        container: Nix registers indirect roots by their path on the host.
      '';
    };

    namespace = mkOption {
      type = types.str;
      default = "kix-system";
      description = "Namespace of the operator's ServiceAccount (and its token Secret).";
    };

    arguments = mkOption {
      type = types.listOf types.str;
      readOnly = true;
      default = arguments;
      defaultText = literalExpression "generated from the options above";
      description = "The operator's command-line arguments, as generated (read-only).";
    };

    bootstrap = {
      enable = mkOption {
        type = types.bool;
        default = cfg.bootstrap.kubeconfigFile != null;
        defaultText = literalExpression "config.services.kix-operator.bootstrap.kubeconfigFile != null";
        description = ''
          Run kix-operator-bootstrap (oneshot, as root, before the operator):
          apply the CRDs and RBAC with kubectl, wait until the CRDs are
          Established, and write the ServiceAccount kubeconfig.
        '';
      };
      kubeconfigFile = mkOption {
        type = types.nullOr types.path;
        default = cfg.kubeconfigFile;
        defaultText = literalExpression "config.services.kix-operator.kubeconfigFile";
        description = "Kubeconfig the bootstrap applies with (needs rights to create CRDs and RBAC).";
      };
      crds = mkOption {
        type = types.bool;
        default = true;
        description = "Apply the CRDs (Activation, PackageInstance).";
      };
      crdsFile = mkOption {
        type = types.path;
        default = ../deploy/crds.yaml;
        defaultText = literalExpression "./deploy/crds.yaml";
        description = "The CRD manifest to apply.";
      };
      timeout = mkOption {
        type = types.ints.positive;
        default = 300;
        description = "Seconds to wait for the API server to become ready.";
      };
    };

    rbac = {
      enable = mkOption {
        type = types.bool;
        default = true;
        description = "Apply the operator's ServiceAccount and RBAC objects in the bootstrap.";
      };
      useServiceAccount = mkOption {
        type = types.bool;
        default = cfg.rbac.enable && cfg.bootstrap.enable;
        defaultText = literalExpression "rbac.enable && bootstrap.enable";
        description = ''
          Run the operator as its ServiceAccount (a kubeconfig with the
          account's token, written by the bootstrap) rather than with
          kubeconfigFile's credentials.
        '';
      };
      applyRules = mkOption {
        type = types.listOf ruleType;
        default = [
          {
            apiGroups = [ "*" ];
            resources = [ "*" ];
            verbs = [ "*" ];
          }
        ];
        example = [
          {
            apiGroups = [
              ""
              "apps"
            ];
            resources = [
              "configmaps"
              "secrets"
              "services"
              "deployments"
            ];
            verbs = [
              "get"
              "list"
              "watch"
              "create"
              "update"
              "patch"
              "delete"
            ];
          }
        ];
        description = ''
          PolicyRules for what the operator applies, prunes and watches
          (ClusterRole kix-operator-apply). The default allows everything,
          which a deploy tool that installs CRDs and RBAC of its own needs;
          narrow it to the kinds your builds contain.
        '';
      };
      namespaces = mkOption {
        type = types.nullOr (types.listOf types.str);
        default = null;
        example = [
          "apps"
          "monitoring"
        ];
        description = ''
          null: applyRules are bound cluster-wide (ClusterRoleBinding).
          A list: applyRules are bound only in these namespaces (one
          RoleBinding each), plus get/list/watch on the same kinds
          cluster-wide (ClusterRole kix-operator-read: the engine lists and
          watches per kind across the cluster). The bootstrap creates these
          namespaces (a RoleBinding needs its namespace), so a build that
          declares one adopts it on its first deploy (--accept-migrations).
          Writes to cluster-scoped kinds (Namespaces, CRDs, ...) need
          clusterApplyRules.
        '';
      };
      clusterApplyRules = mkOption {
        type = types.listOf ruleType;
        default = [ ];
        description = ''
          PolicyRules bound cluster-wide when rbac.namespaces is a list, for
          the cluster-scoped kinds the builds contain (Namespaces, CRDs,
          ClusterRoles, ...).
        '';
      };
      objects = mkOption {
        type = types.listOf (types.attrsOf types.anything);
        readOnly = true;
        default = objects;
        defaultText = literalExpression "generated from the rbac options";
        description = "The Namespace, ServiceAccount and RBAC objects the bootstrap applies (read-only).";
      };
      manifestFile = mkOption {
        type = types.package;
        readOnly = true;
        default = pkgs.writeText "kix-operator-rbac.json" (
          builtins.toJSON {
            apiVersion = "v1";
            kind = "List";
            items = objects;
          }
        );
        defaultText = literalExpression "a v1 List of rbac.objects";
        description = "rbac.objects as one manifest (read-only), e.g. for services.k3s.manifests.";
      };
    };

    container = {
      uid = mkOption {
        type = types.int;
        default = 65532;
        description = "User id in the container (the default image's user).";
      };
      gid = mkOption {
        type = types.int;
        default = 65532;
        description = "Group id in the container.";
      };
      extraOptions = mkOption {
        type = types.listOf types.str;
        default = [ ];
        description = "Extra options for the container runtime's `run`.";
      };
    };
  };

  config = mkIf cfg.enable (mkMerge [
    {
      assertions = [
        {
          assertion = !cfg.bootstrap.enable || cfg.bootstrap.kubeconfigFile != null;
          message = "services.kix-operator.bootstrap.enable needs bootstrap.kubeconfigFile (or kubeconfigFile).";
        }
        {
          assertion = !cfg.rbac.useServiceAccount || (cfg.rbac.enable && cfg.bootstrap.enable);
          message = "services.kix-operator.rbac.useServiceAccount needs rbac.enable and bootstrap.enable (the bootstrap mints its kubeconfig).";
        }
        {
          assertion = !(builtins.isPath cfg.kubeconfigFile) && !(builtins.isPath cfg.bootstrap.kubeconfigFile);
          message = "services.kix-operator: give kubeconfig paths as strings (\"/etc/...\"); a Nix path literal copies the credential into the world-readable Nix store.";
        }
      ];
      warnings = lib.optional (!hasKubeconfig) ''
        services.kix-operator has no kubeconfig (kubeconfigFile = null and no
        ServiceAccount kubeconfig): the operator uses the in-cluster
        configuration, which a NixOS host normally does not provide.
      '';

      systemd.tmpfiles.rules = [
        "d ${stateDir} 0750 ${owner} ${group} - -"
        "d ${cfg.gcRootsDir} 0755 ${owner} ${group} - -"
      ];

      networking.firewall.allowedTCPPorts = mkIf cfg.openFirewall [ cfg.metricsPort ];
    }

    (mkIf cfg.bootstrap.enable {
      systemd.services.kix-operator-bootstrap = {
        description = "kix operator: apply CRDs and RBAC";
        wantedBy = [ "multi-user.target" ];
        wants = [ "network-online.target" ] ++ k3sUnits;
        after = [ "network-online.target" ] ++ k3sUnits;
        serviceConfig = {
          Type = "oneshot";
          RemainAfterExit = true;
          ExecStart = "${bootstrapScript}";
          Restart = "on-failure";
          RestartSec = 10;
          TimeoutStartSec = cfg.bootstrap.timeout + 300;
        };
      };
    })

    (mkIf isContainer {
      virtualisation.oci-containers.containers.${containerName} = {
        image = "${cfg.image.imageName}:${cfg.image.imageTag}";
        imageFile = cfg.image;
        user = "${toString cfg.container.uid}:${toString cfg.container.gid}";
        cmd = arguments;
        inherit environment;
        volumes = [
          "/nix/store:/nix/store:ro"
          "/nix/var/nix/daemon-socket:/nix/var/nix/daemon-socket"
          "${cfg.gcRootsDir}:${cfg.gcRootsDir}"
        ]
        ++ lib.optional hasKubeconfig "${stateDir}:${stateDir}:ro";
        extraOptions = [
          "--network=host"
          "--read-only"
          "--cap-drop=all"
          "--security-opt=no-new-privileges"
        ]
        ++ cfg.container.extraOptions;
      };

      # The container sees the host store instead of the image's own.
      system.extraDependencies = cfg.imageStorePaths;

      systemd.services."${config.virtualisation.oci-containers.backend}-${containerName}" = {
        wants = bootstrapUnits ++ k3sUnits;
        after = bootstrapUnits ++ k3sUnits ++ [ "nix-daemon.socket" ];
        serviceConfig.ExecStartPre = lib.optional copyKubeconfig "${prepareKubeconfig}";
      };
    })

    (mkIf (!isContainer) {
      users.users.kix-operator = {
        isSystemUser = true;
        group = "kix-operator";
        home = stateDir;
        description = "kix operator";
      };
      users.groups.kix-operator = { };

      systemd.services.kix-operator = {
        description = "kix operator";
        wantedBy = [ "multi-user.target" ];
        wants = [ "network-online.target" ] ++ bootstrapUnits ++ k3sUnits;
        after = [
          "network-online.target"
          "nix-daemon.socket"
        ]
        ++ bootstrapUnits
        ++ k3sUnits;
        inherit environment;
        path = [ cfg.nixPackage ];
        startLimitIntervalSec = 0;
        serviceConfig = {
          ExecStartPre = lib.optional copyKubeconfig "+${prepareKubeconfig}";
          ExecStart = utils.escapeSystemdExecArgs ([ "${cfg.package}/bin/kix-operator" ] ++ arguments);
          User = "kix-operator";
          Group = "kix-operator";
          Restart = "always";
          RestartSec = 5;
          ReadWritePaths = [ cfg.gcRootsDir ];
          CapabilityBoundingSet = "";
          NoNewPrivileges = true;
          ProtectSystem = "strict";
          ProtectHome = true;
          PrivateTmp = true;
          PrivateDevices = true;
          ProtectKernelTunables = true;
          ProtectKernelModules = true;
          ProtectKernelLogs = true;
          ProtectControlGroups = true;
          ProtectClock = true;
          ProtectHostname = true;
          RestrictAddressFamilies = [
            "AF_UNIX"
            "AF_INET"
            "AF_INET6"
          ];
          RestrictNamespaces = true;
          RestrictRealtime = true;
          RestrictSUIDSGID = true;
          LockPersonality = true;
          MemoryDenyWriteExecute = true;
          SystemCallArchitectures = "native";
          UMask = "0027";
        };
      };
    })
  ]);
}
