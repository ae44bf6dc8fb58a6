# services.kix-operator: the kix operator on a NixOS host, next to the store
# it deploys from (NIX_REMOTE=daemon): in its OCI image under
# virtualisation.oci-containers with the host /nix/store mounted read-only
# (mode = "container"), or as a hardened systemd service (mode = "host").
# kix-operator-bootstrap (./kix-operator-bootstrap.sh) deploys with kix the
# Kix cluster "kix-operator" (./kix-operator-rbac.yaml, the RBAC the options
# generate, the token Secret of ./kix-operator-token.yaml; kix installs its
# CRDs and prunes what an earlier configuration had) and writes the
# ServiceAccount's kubeconfig the operator uses. Each entry of
# `clusters` is a Kix cluster this host declares: a oneshot unit
# kix-declare-<name> runs `kix declare` on each activation of a generation
# (nothing when the current record has the build, a rollback when an older
# activation had it, else a deploy through the operator). `tenants` (a
# kix.lib.mkTenants declaration) adds the admission policy that says who
# writes which Kix cluster's records to the bootstrap's Kix cluster, and
# with rbac.tenantsOnly the operator's own RBAC writes nothing but its
# records: it acts as each record's ServiceAccount. See docs/nix.md and
# docs/operator.md ("Several teams, one operator").
{
  config,
  lib,
  pkgs,
  ...
}:
let
  cfg = config.services.kix-operator;
  inherit (lib)
    mkOption
    mkIf
    mkMerge
    types
    literalExpression
    ;

  stateDir = "/var/lib/kix-operator";
  operatorKubeconfig = "${stateDir}/kubeconfig";
  # The age key for SOPS-encrypted Secrets, copied from ageIdentityFile.
  operatorAgeIdentity = "${stateDir}/age-identity.txt";
  copyAgeIdentity = cfg.ageIdentityFile != null;
  # The age keys bound to Kix clusters (ageKeyFiles), copied there as
  # <cluster>.txt, each passed as --age-key-file=<cluster>=<file>.
  boundKeyDir = "${stateDir}/age-keys";
  boundKey = name: "${boundKeyDir}/${name}.txt";
  copyAgeKeys = copyAgeIdentity || cfg.ageKeyFiles != { };
  isContainer = cfg.mode == "container";
  # The alerts (--alerts): Secret references only, so the file may be in
  # the store. The bootstrap lets the operator `get` exactly those Secrets.
  alertsFile = builtins.toFile "kix-alerts.json" (builtins.toJSON { inherit (cfg) alerts; });
  alertSecrets = map (
    alert:
    let
      spec = builtins.head (builtins.attrValues (alert.target or { }) ++ [ { } ]);
      ref = spec.urlSecret or spec.tokenSecret or { };
    in
    {
      namespace = ref.namespace or cfg.settings."lease-namespace";
      name = ref.name or "";
    }
  ) cfg.alerts;
  owner = if isContainer then toString (cfg.image.uid or 65532) else "kix-operator";
  group = if isContainer then toString (cfg.image.gid or 65532) else "kix-operator";

  # The operator reads ${operatorKubeconfig}: minted for its ServiceAccount
  # by the bootstrap, or copied from kubeconfigFile before each start.
  # Without either it runs with the in-cluster configuration.
  hasKubeconfig = cfg.rbac.useServiceAccount || cfg.kubeconfigFile != null;
  copyKubeconfig = !cfg.rbac.useServiceAccount && cfg.kubeconfigFile != null;
  k3sUnits = lib.optional (config.services.k3s.enable or false) "k3s.service";
  bootstrapUnits = lib.optional cfg.bootstrap.enable "kix-operator-bootstrap.service";

  renderFlag =
    name: value:
    if value == null || value == false then
      [ ]
    else if value == true then
      [ "--${name}" ]
    else
      map (v: "--${name}=${toString v}") (lib.toList value);
  hostPort = address: port: if lib.hasInfix ":" address then "[${address}]:${toString port}" else "${address}:${toString port}";
  arguments =
    lib.optional hasKubeconfig "--kubeconfig=${operatorKubeconfig}"
    ++ [
      "--log-format=${cfg.logFormat}"
      "--metrics-addr=${hostPort cfg.metricsAddress cfg.metricsPort}"
    ]
    ++ lib.optional copyAgeIdentity "--age-identity=${operatorAgeIdentity}"
    ++ lib.mapAttrsToList (name: _: "--age-key-file=${name}=${boundKey name}") cfg.ageKeyFiles
    ++ lib.optional (cfg.defaultServiceAccount != null) "--default-service-account=${cfg.defaultServiceAccount}"
    ++ lib.optional cfg.requireServiceAccount "--require-service-account"
    ++ map (url: "--substituter=${url}") cfg.substituters
    ++ map (key: "--trusted-public-key=${key}") cfg.trustedPublicKeys
    ++ lib.optional (cfg.store != null) "--store=${cfg.store}"
    ++ lib.optional (cfg.alerts != [ ]) "--alerts=${alertsFile}"
    ++ lib.concatLists (lib.mapAttrsToList renderFlag cfg.settings)
    ++ cfg.extraArgs;
  # One ExecStart argument: quoted, with systemd's specifiers escaped.
  systemdArg = a: lib.replaceStrings [ "%" "$" ] [ "%%" "$$" ] (builtins.toJSON a);
  # The directory of a store of the operator's own (store =
  # "local?root=DIR" or "DIR"): made and writable; its GC roots are kept
  # inside it, not in gcRootsDir.
  storeRoot =
    let
      root = if cfg.store == null then null else builtins.match "local[?](.*&)?root=([^&]+).*" cfg.store;
    in
    if root != null then
      builtins.elemAt root 1
    else if cfg.store != null && lib.hasPrefix "/" cfg.store then
      cfg.store
    else
      null;
  environment = {
    NIX_REMOTE = "daemon";
  }
  // lib.optionalAttrs (storeRoot == null) { KIX_GCROOTS_DIR = cfg.gcRootsDir; }
  // cfg.environment;

  # The operator's own ServiceAccount, as the apiserver names its requests.
  operatorUser = "system:serviceaccount:kix-system:kix-operator";
  # The accounts the operator acts as: each tenant's, and the default one.
  defaultAccount =
    let
      parts = lib.splitString "/" cfg.defaultServiceAccount;
    in
    lib.optional (cfg.defaultServiceAccount != null) {
      namespace = builtins.elemAt parts 0;
      name = builtins.elemAt parts 1;
    };
  impersonated = lib.unique ((if cfg.tenants == null then [ ] else cfg.tenants.serviceAccounts) ++ defaultAccount);

  # `kix crds --tenants`: the CRDs, then the policy and its binding (after
  # the header line); the bootstrap's Kix cluster takes the policy only
  # (kix installs its CRDs itself).
  tenantsPolicy =
    pkgs.runCommand "kix-tenants-policy.yaml" { preferLocalBuild = true; }
      ''
        ${cfg.bootstrap.package}/bin/kix crds --tenants ${cfg.tenants} > crds.yaml
        sed -n '/^# Who may write kix/,$p' crds.yaml > "$out"
        grep -q '^kind: ValidatingAdmissionPolicyBinding' "$out"
      '';

  bootstrapCluster = (import ../nix { }).mkCluster {
    inherit pkgs;
    name = "kix-operator";
    packages = {
      rbac = {
        version = "1";
        resources = import ./kix-operator-rbac.nix {
          inherit lib impersonated alertSecrets;
          inherit (cfg) rbac;
          leaseNamespace = cfg.settings."lease-namespace";
        };
        manifests = [ ./kix-operator-rbac.yaml ];
      };
      token = {
        version = "1";
        dependsOn = [ "rbac" ];
        manifests = [ ./kix-operator-token.yaml ];
      };
    }
    // lib.optionalAttrs (cfg.tenants != null) {
      tenants = {
        version = "1";
        dependsOn = [ "rbac" ];
        manifests = [ tenantsPolicy ];
      };
    };
  };

  prepareKubeconfig = pkgs.writeShellScript "kix-operator-kubeconfig" ''
    set -eu
    ${pkgs.coreutils}/bin/install -d -m 0750 -o ${owner} -g ${group} ${stateDir}
    ${pkgs.coreutils}/bin/install -m 0400 -o ${owner} -g ${group} \
      ${lib.escapeShellArg cfg.kubeconfigFile} ${stateDir}/.kubeconfig.new
    ${pkgs.coreutils}/bin/mv -f ${stateDir}/.kubeconfig.new ${operatorKubeconfig}
  '';

  # Root copies the keys for the operator's user before each start: the
  # files stay where the administrator keeps them, never in the store. The
  # bound keys' directory is made afresh: a cluster removed loses its key.
  prepareAgeIdentity = pkgs.writeShellScript "kix-operator-age-identity" (''
    set -eu
    ${pkgs.coreutils}/bin/install -d -m 0750 -o ${owner} -g ${group} ${stateDir}
  ''
  + lib.optionalString copyAgeIdentity ''
    ${pkgs.coreutils}/bin/install -m 0400 -o ${owner} -g ${group} \
      ${lib.escapeShellArg cfg.ageIdentityFile} ${stateDir}/.age-identity.new
    ${pkgs.coreutils}/bin/mv -f ${stateDir}/.age-identity.new ${operatorAgeIdentity}
  ''
  + ''
    ${pkgs.coreutils}/bin/rm -rf ${boundKeyDir}
  ''
  + lib.optionalString (cfg.ageKeyFiles != { }) ''
    ${pkgs.coreutils}/bin/install -d -m 0750 -o ${owner} -g ${group} ${boundKeyDir}
  ''
  + lib.concatStrings (lib.mapAttrsToList (name: file: ''
    ${pkgs.coreutils}/bin/install -m 0400 -o ${owner} -g ${group} \
      ${lib.escapeShellArg file} ${lib.escapeShellArg (boundKey name)}
  '') cfg.ageKeyFiles));

  ruleType = types.attrsOf (types.listOf types.str);

  # Declared Kix clusters (services.kix-operator.clusters).
  operatorUnit =
    if isContainer then
      "${config.virtualisation.oci-containers.backend}-kix-operator.service"
    else
      "kix-operator.service";
  # absent = "prune": a build with no objects, so the operator prunes what
  # the Kix cluster owns, through its deletion budget.
  emptyCluster = name: (import ../nix { }).mkCluster {
    inherit pkgs name;
    packages = { };
  };
  declaredTree =
    name: c:
    if c.absent == "prune" then
      emptyCluster name
    else if c.build == null then
      throw "services.kix-operator.clusters.${name}: set build, or absent = \"prune\" without a build."
    else
      c.build;
  hostName = config.networking.hostName or "";
  declareArguments =
    name: c:
    [
      "${cfg.bootstrap.package}/bin/kix"
      "declare"
      name
      "--path=${declaredTree name c}"
      "--wait=${toString c.waitTimeout}s"
    ]
    ++ map (a: "--accept=${a}") c.acceptMigrations
    ++ lib.optional (c.maxDeletions != null) "--max-deletions=${toString c.maxDeletions}"
    ++ lib.optional (c.absent == "prune") "--allow-empty"
    ++ lib.optional (hostName != "") "--declared-by=${hostName}"
    # It plans the build: its encrypted Secrets need the key (root reads it).
    ++ lib.optional copyAgeIdentity "--age-identity=${cfg.ageIdentityFile}"
    ++ lib.optional (cfg.ageKeyFiles ? ${name}) "--age-identity=${cfg.ageKeyFiles.${name}}";
  declareUnit = name: c: {
    description = "kix: declare Kix cluster ${name} (${if c.absent == "prune" then "pruned" else "this generation's build"})";
    wantedBy = [ "multi-user.target" ];
    wants = [ "network-online.target" operatorUnit ] ++ bootstrapUnits ++ k3sUnits;
    after = [ "network-online.target" "nix-daemon.socket" operatorUnit ] ++ bootstrapUnits ++ k3sUnits;
    # A switch to a generation with another build restarts the unit (its
    # ExecStart names the build too); one with the same build leaves it.
    restartTriggers = [ (declaredTree name c) ];
    path = [ cfg.nixPackage ];
    environment = {
      KUBECONFIG = c.kubeconfigFile;
      KIX_GCROOTS_DIR = cfg.gcRootsDir;
    };
    serviceConfig = {
      Type = "oneshot";
      RemainAfterExit = true;
      ExecStart = lib.concatMapStringsSep " " systemdArg (declareArguments name c);
      # The plan and the record come before the wait.
      TimeoutStartSec = c.waitTimeout + 300;
    };
  };
  clusterType = types.submodule (
    { name, ... }:
    {
      options = {
        build = mkOption {
          type = types.nullOr types.package;
          default = null;
          example = literalExpression "self.kixClusters.${name}";
          description = ''
            The Kix cluster's build (kix.lib.mkCluster), which joins the
            system closure. On each activation of a generation the unit
            kix-declare-${name} declares it through the operator: nothing
            when the current record names it, a rollback when an older
            activation had it (switching to an older generation), else a
            deploy. null only with absent = "prune".
          '';
        };
        absent = option (types.enum [ "keep" "prune" ]) "keep" ''
          `prune` (with build = null): the Kix cluster's objects are
          deleted, by declaring a build with no objects (through the
          deletion budget: maxDeletions). A cluster removed from the
          configuration is left as it is (`keep`).
        '';
        acceptMigrations = option (types.listOf types.str) [ ] ''
          What the plan may need accepted (migrations, replaces,
          adoptions, destructive deletions), each named by the start of
          its line in the plan, by whole words: "migration web",
          "adopt ConfigMap apps/legacy". Anything else needing acceptance
          refuses the declaration: the unit fails, and the refusal is a Failed `engine: local` record the operator ignores.
        '';
        maxDeletions = option (types.nullOr types.ints.unsigned) null ''
          Deletions allowed beyond the Kix cluster's deletion budget
          (`kix declare --max-deletions`). null: the budget applies.
        '';
        waitTimeout = option types.ints.positive 600 "Seconds the unit waits for the operator to make the record Active (Degraded fails it).";
        kubeconfigFile = mkOption {
          type = types.nullOr types.str;
          default = cfg.kubeconfigFile;
          defaultText = literalExpression "config.services.kix-operator.kubeconfigFile";
          description = "Kubeconfig the unit plans and writes the record with (it needs to read the build's kinds and create Activation records).";
        };
      };
    }
  );
  option =
    type: default: description:
    mkOption { inherit type default description; };
in
{
  options.services.kix-operator = {
    enable = lib.mkEnableOption "the kix operator, which keeps the current Activation of each Kix cluster applied";
    package = mkOption {
      type = types.package;
      default = pkgs.kix-operator or (throw "services.kix-operator.package is not set and pkgs has no kix-operator: import the module through the kix flake (nixosModules.default) or apply its overlays.default");
      defaultText = literalExpression "pkgs.kix-operator (the flake's module sets the flake's build)";
      description = "The kix-operator package (run directly in host mode, inside the default image otherwise).";
    };
    mode = option (types.enum [ "container" "host" ]) "container" ''
      How the operator runs. `container`: the OCI image under
      virtualisation.oci-containers with the host /nix/store mounted
      read-only and the nix-daemon socket mounted. `host`: a hardened
      systemd service running the binary directly.
    '';
    image = mkOption {
      type = types.package;
      default = pkgs.callPackage ../images/operator.nix {
        kix-operator = cfg.package;
        nix = cfg.nixPackage;
      };
      defaultText = literalExpression "pkgs.callPackage ./images/operator.nix { kix-operator = cfg.package; nix = cfg.nixPackage; }";
      description = ''
        The operator image for container mode: a dockerTools archive with
        `imageName`, `imageTag` and `storeRoots`, the store paths it uses,
        which join the system closure (the container sees the host store).
      '';
    };
    nixPackage = mkOption {
      type = types.package;
      default = config.nix.package;
      defaultText = literalExpression "config.nix.package";
      description = "Nix providing `nix-store` (a client of this host's nix-daemon).";
    };
    kubeconfigFile = option (types.nullOr types.str) null ''
      Kubeconfig with this host's credentials for the cluster (k3s:
      "/etc/rancher/k3s/k3s.yaml"), as a string: a Nix path would copy the
      secret into the store. The bootstrap deploys with it; the operator
      gets a copy only without rbac.useServiceAccount. null: no
      --kubeconfig, the operator uses the in-cluster configuration.
    '';
    ageIdentityFile = option (types.nullOr types.str) null ''
      age identity file (as age-keygen writes it) that decrypts the
      SOPS-encrypted Secrets of the builds the operator applies, as a string
      ("/run/keys/kix-age.txt"): a Nix path would copy the key into the
      store. Copied (mode 0400, the operator's user) to
      /var/lib/kix-operator/age-identity.txt before each start and passed
      as --age-identity; the values are decrypted in memory only. Not bound
      to a tenant: every Kix cluster's builds may use it (one team); several
      teams use ageKeyFiles.
    '';
    ageKeyFiles = option (types.attrsOf types.str) { } ''
      age identity files bound to Kix clusters, as strings (a Nix path would
      copy a key into the store): { team-a = "/run/keys/team-a.txt"; }.
      Only the named cluster's builds decrypt with its key; a file of
      another cluster's build encrypted for it is refused, the record
      Failed naming the file. Copied (mode 0400, the operator's user) to
      /var/lib/kix-operator/age-keys/<cluster>.txt before each start and
      passed as --age-key-file=<cluster>=<file>; the declared cluster of
      the same name plans with it.
    '';
    defaultServiceAccount = option (types.nullOr (types.strMatching "[^/[:space:]]+/[^/[:space:]]+")) null ''
      "NAMESPACE/NAME": the ServiceAccount the operator acts as for records
      that name none (--default-service-account). null: such records are
      applied with the operator's own rights (or refused, with
      requireServiceAccount).
    '';
    requireServiceAccount = option types.bool false ''
      Refuse records that name no ServiceAccount (--require-service-account):
      Failed, with the reason, nothing changed.
    '';
    substituters = option (types.listOf (types.strMatching "(file|https?|s3)://[^[:space:]]+")) [ ] ''
      Binary caches the operator fetches builds from (--substituter, each):
      [ "https://cache.example.org" ]. Needs trustedPublicKeys: only builds
      signed by a trusted key are fetched.
    '';
    trustedPublicKeys = option (types.listOf (types.strMatching "[^:[:space:]]+:[A-Za-z0-9+/=]+")) [ ] ''
      Public keys (NAME:BASE64, as `nix key convert-secret-to-public` prints
      them) a record's build must be signed by (--trusted-public-key, each):
      its whole closure, whether or not it was already in the store; an
      unsigned, wrongly signed or tampered build ends the record Failed
      before any change. [ ]: builds are taken from the store as they are.
    '';
    store = option (types.nullOr types.str) null ''
      The Nix store the operator keeps builds in (--store):
      "local?root=/var/lib/kix-operator/store" gives it a store of its own
      (made writable for it; its GC roots inside it), from which it deletes
      the builds of retired records. null: the host's store.
    '';
    tenants = mkOption {
      type = types.nullOr (
        types.addCheck types.package (t: t ? declaration && t ? serviceAccounts)
        // {
          description = "kix.lib.mkTenants declaration";
        }
      );
      default = null;
      example = literalExpression ''
        kix.lib.mkTenants {
          inherit pkgs;
          platform.users = [ "system:serviceaccount:kix-system:kix-operator" ];
          platform.groups = [ "system:masters" ];
          clusters.team-a = {
            groups = [ "team-a" ];
            serviceAccount = { namespace = "team-a"; name = "kix"; };
          };
        }
      '';
      description = ''
        Who may write which Kix cluster's records, and which ServiceAccount
        each acts as (kix.lib.mkTenants). The bootstrap applies the
        ValidatingAdmissionPolicy and binding `kix crds --tenants` prints
        for it; the operator may impersonate the declared ServiceAccounts.
        Its platform subjects must include the operator's ServiceAccount and
        whoever the bootstrap's kubeconfig authenticates as (k3s's admin:
        group system:masters). See docs/operator.md.
      '';
    };
    alerts = mkOption {
      type = types.listOf (types.attrsOf types.anything);
      default = [ ];
      example = literalExpression ''
        [
          { name = "chat"; events = [ "Active" "Degraded" "Failed" ];
            target.slack.urlSecret = { name = "kix-alerts"; key = "slack"; }; }
          { name = "prs"; clusters = [ "web" ];
            target.github = { repository = "acme/infra";
                              tokenSecret = { name = "kix-alerts"; key = "github"; }; }; }
        ]
      '';
      description = ''
        Notices of the records' phase changes, deletions held, drift fights
        and stuck deletions (--alerts; docs/operator.md, Notifications):
        each { name; events ? [ ]; clusters ? [ ]; target; } with a
        webhook, slack, github or gitlab target. Credentials are keys of
        Secrets (urlSecret, tokenSecret: { name; key; namespace ? }, in
        settings."lease-namespace" by default), never values: the file is
        written to the store. The bootstrap grants the operator `get` on
        exactly those Secrets. Links in the notices: settings."web-url".
      '';
    };
    logFormat = option (types.enum [ "text" "json" ]) "text" "Log format on stderr (journald): --log-format.";
    metricsPort = option types.port 8080 "Port of /metrics, /healthz and /readyz (--metrics-addr).";
    metricsAddress = option types.str "0.0.0.0" "IP address /metrics, /healthz and /readyz listen on (--metrics-addr).";
    openFirewall = option types.bool false "Open metricsPort in the firewall.";
    settings = mkOption {
      type = types.submodule {
        freeformType = with types; attrsOf (nullOr (oneOf [ bool int str (listOf str) ]));
        options."resync-interval" = option types.str "60s" "How often every current record is re-checked in full (--resync-interval).";
        options."resync-budget" = option (types.nullOr types.ints.positive) null ''
          Full re-checks of idle Active records per minute, across all records
          (--resync-budget; null: the operator's default, 8).
        '';
        options.shards = option (types.nullOr (types.ints.between 1 1024)) null ''
          Split the records among operator replicas in this many shards, one
          Lease each (--shards; null: 1, one leader for every record). Give
          every replica the same value; see docs/operator.md, Sharding.
        '';
        options."lease-namespace" = option types.str "kube-system" ''
          Namespace of the leader-election and deploy leases (--lease-namespace);
          kube-system is where `kix deploy` takes its deploy lease too.
        '';
      };
      default = { };
      example = {
        "resync-interval" = "5m";
        cluster = [ "infra" "apps" ];
      };
      description = ''
        Operator flags: each attribute becomes `--name=value` (true: `--name`;
        false or null: left out; a list: the flag repeated, e.g. `cluster` to
        manage only some Kix clusters). See `kix-operator --help`.
      '';
    };
    extraArgs = option (types.listOf types.str) [ ] "Extra command-line arguments, after the generated ones.";
    environment = option (types.attrsOf types.str) { } "Extra environment variables for the operator (KIX_LOG: the log filter).";
    gcRootsDir = option types.str "/nix/var/nix/gcroots/kix" ''
      Directory of the GC roots that keep every store path an Activation
      names alive (KIX_GCROOTS_DIR); mounted at the same path in the
      container, since Nix registers indirect roots by their path.
    '';
    container.extraOptions = option (types.listOf types.str) [ ] "Extra options for the container runtime's `run`.";
    clusters = mkOption {
      type = types.attrsOf clusterType;
      default = { };
      example = literalExpression ''
        {
          apps = { build = self.kixClusters.apps; acceptMigrations = [ "migration db" ]; };
          old-tools.absent = "prune";
        }
      '';
      description = ''
        Kix clusters this host declares: each generation names their
        builds, `nixos-rebuild switch` deploys them through the operator
        and switching back to an older generation rolls them back (unit
        kix-declare-<name>; a refused or failed declaration fails it).
        A cluster removed from here is left as it is.
      '';
    };

    bootstrap = {
      enable = mkOption {
        type = types.bool;
        default = cfg.bootstrap.kubeconfigFile != null;
        defaultText = literalExpression "bootstrap.kubeconfigFile != null";
        description = "Run kix-operator-bootstrap (oneshot, root, before the operator): deploy the operator's RBAC with kix and write the ServiceAccount kubeconfig.";
      };
      kubeconfigFile = mkOption {
        type = types.nullOr types.str;
        default = cfg.kubeconfigFile;
        defaultText = literalExpression "config.services.kix-operator.kubeconfigFile";
        description = "Kubeconfig the bootstrap deploys with (it needs rights to create CRDs and RBAC).";
      };
      package = mkOption {
        type = types.package;
        default = pkgs.kix or (throw "services.kix-operator.bootstrap.package is not set and pkgs has no kix: import the module through the kix flake or apply its overlays.default");
        defaultText = literalExpression "pkgs.kix (the flake's module sets the flake's build)";
        description = "The kix CLI the bootstrap deploys with and the kix-declare units run.";
      };
      timeout = option types.ints.positive 300 "Seconds the bootstrap keeps trying while the API server starts.";
      cluster = mkOption {
        type = types.package;
        readOnly = true;
        default = bootstrapCluster;
        defaultText = literalExpression "the Kix cluster kix-operator";
        description = "The Kix cluster `kix-operator` the bootstrap deploys (read-only): ServiceAccount, token Secret and RBAC.";
      };
    };

    rbac = {
      useServiceAccount = mkOption {
        type = types.bool;
        default = cfg.bootstrap.enable;
        defaultText = literalExpression "bootstrap.enable";
        description = "Run the operator as its ServiceAccount (a kubeconfig the bootstrap writes) rather than with kubeconfigFile's credentials.";
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
            apiGroups = [ "" "apps" ];
            resources = [ "configmaps" "services" "deployments" ];
            verbs = [ "get" "list" "watch" "create" "update" "patch" "delete" ];
          }
        ];
        description = ''
          PolicyRules for what the operator applies, prunes and watches
          (ClusterRole kix-operator-apply). The default allows everything,
          which a deploy tool that installs CRDs and RBAC of its own needs;
          narrow it to the kinds your builds contain.
        '';
      };
      namespaces = option (types.nullOr (types.listOf types.str)) null ''
        null: applyRules are bound cluster-wide. A list: they are bound in
        these namespaces only (a RoleBinding each, the bootstrap creates the
        namespaces and never deletes them), plus get/list/watch on the same
        kinds cluster-wide (ClusterRole kix-operator-read: the engine lists
        and watches per kind). Writes to cluster-scoped kinds need
        clusterApplyRules.
      '';
      clusterApplyRules = option (types.listOf ruleType) [ ] ''
        PolicyRules bound cluster-wide when rbac.namespaces is a list, for
        the cluster-scoped kinds the builds contain (Namespaces, CRDs, ...).
      '';
      tenantsOnly = mkOption {
        type = types.bool;
        default = cfg.tenants != null;
        defaultText = literalExpression "tenants != null";
        description = ''
          The operator writes nothing with its own rights: it acts as each
          record's ServiceAccount. Its RBAC holds only `impersonate` on the
          tenants' ServiceAccounts and defaultServiceAccount (resourceNames),
          kix's records, its leases, Events, and get/list/watch on the kinds
          of applyRules cluster-wide (for the drift watches); each tenant's
          ServiceAccount may write Leases in the lease namespace (the deploy
          Lease is taken as the tenant). Needs requireServiceAccount or
          defaultServiceAccount; rbac.namespaces and clusterApplyRules do
          not apply.
        '';
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
          assertion = !cfg.rbac.useServiceAccount || cfg.bootstrap.enable;
          message = "services.kix-operator.rbac.useServiceAccount needs bootstrap.enable (the bootstrap writes its kubeconfig).";
        }
        {
          assertion = cfg.tenants == null || !cfg.rbac.useServiceAccount || builtins.elem operatorUser cfg.tenants.declaration.platform.users;
          message = "services.kix-operator.tenants: platform.users must include ${operatorUser}, the operator's ServiceAccount, which writes the records' status.";
        }
        {
          assertion = cfg.substituters == [ ] || cfg.trustedPublicKeys != [ ];
          message = "services.kix-operator.substituters needs trustedPublicKeys: the operator fetches only builds signed by a key it trusts.";
        }
        {
          assertion = !cfg.rbac.tenantsOnly || cfg.requireServiceAccount || cfg.defaultServiceAccount != null;
          message = "services.kix-operator.rbac.tenantsOnly: the operator has no write rights of its own; set requireServiceAccount = true (records naming no ServiceAccount are refused) or defaultServiceAccount.";
        }
        {
          assertion = !cfg.rbac.tenantsOnly || cfg.rbac.namespaces == null && cfg.rbac.clusterApplyRules == [ ];
          message = "services.kix-operator.rbac.tenantsOnly: rbac.namespaces and rbac.clusterApplyRules give the operator write rights of its own; with tenantsOnly each tenant's ServiceAccount holds them.";
        }
        {
          assertion = cfg.ageIdentityFile == null || !lib.hasPrefix builtins.storeDir cfg.ageIdentityFile;
          message = "services.kix-operator.ageIdentityFile is in the Nix store, where every user can read it: keep the key outside (\"/run/keys/...\", \"/var/lib/...\").";
        }
      ]
      ++ lib.mapAttrsToList (name: file: {
        assertion = !lib.hasPrefix builtins.storeDir file && builtins.match "[a-z0-9]([-a-z0-9.]*[a-z0-9])?" name != null;
        message = "services.kix-operator.ageKeyFiles.${name}: the key file must stay out of the Nix store, where every user can read it, and ${name} must be a Kix cluster name.";
      }) cfg.ageKeyFiles
      ++ lib.concatLists (lib.mapAttrsToList (name: c: [
        {
          assertion = (c.build != null) != (c.absent == "prune");
          message = "services.kix-operator.clusters.${name}: set build, or absent = \"prune\" without a build.";
        }
        {
          assertion = c.build == null || (c.build.cluster or name) == name;
          message = "services.kix-operator.clusters.${name}.build is the build of Kix cluster ${c.build.cluster or "?"}, not ${name}.";
        }
        {
          assertion = c.kubeconfigFile != null;
          message = "services.kix-operator.clusters.${name} needs kubeconfigFile (or services.kix-operator.kubeconfigFile).";
        }
      ]) cfg.clusters);
      warnings = lib.optional (!hasKubeconfig) ''
        services.kix-operator has no kubeconfig (kubeconfigFile = null and no
        ServiceAccount kubeconfig): the operator uses the in-cluster
        configuration, which a NixOS host normally does not provide.
      '';
      systemd.tmpfiles.rules = [
        "d ${stateDir} 0750 ${owner} ${group} - -"
        "d ${cfg.gcRootsDir} 0755 ${owner} ${group} - -"
      ]
      ++ lib.optional (storeRoot != null) "d ${storeRoot} 0750 ${owner} ${group} - -";
      networking.firewall.allowedTCPPorts = mkIf cfg.openFirewall [ cfg.metricsPort ];
      systemd.services = lib.mapAttrs' (name: c: lib.nameValuePair "kix-declare-${name}" (declareUnit name c)) cfg.clusters;
    }

    (mkIf cfg.bootstrap.enable {
      systemd.services.kix-operator-bootstrap = {
        description = "kix operator: deploy its CRDs and RBAC";
        wantedBy = [ "multi-user.target" ];
        wants = [ "network-online.target" ] ++ k3sUnits;
        after = [ "network-online.target" "nix-daemon.socket" ] ++ k3sUnits;
        path = [ cfg.bootstrap.package pkgs.coreutils cfg.nixPackage ];
        environment = {
          KUBECONFIG = cfg.bootstrap.kubeconfigFile;
          KIX_BOOTSTRAP_TREE = "${cfg.bootstrap.cluster}";
          KIX_BOOTSTRAP_TIMEOUT = toString cfg.bootstrap.timeout;
          KIX_OPERATOR_KUBECONFIG = if cfg.rbac.useServiceAccount then operatorKubeconfig else "";
          KIX_OPERATOR_OWNER = "${owner}:${group}";
          KIX_GCROOTS_DIR = cfg.gcRootsDir;
        };
        serviceConfig = {
          Type = "oneshot";
          RemainAfterExit = true;
          ExecStart = "${pkgs.bash}/bin/bash ${./kix-operator-bootstrap.sh}";
          Restart = "on-failure";
          RestartSec = 10;
          TimeoutStartSec = cfg.bootstrap.timeout + 300;
        };
      };
    })

    (mkIf isContainer {
      virtualisation.oci-containers.containers.kix-operator = {
        image = "${cfg.image.imageName}:${cfg.image.imageTag}";
        imageFile = cfg.image;
        user = "${owner}:${group}";
        cmd = arguments;
        inherit environment;
        volumes = [
          "/nix/store:/nix/store:ro"
          "/nix/var/nix/daemon-socket:/nix/var/nix/daemon-socket"
          "${cfg.gcRootsDir}:${cfg.gcRootsDir}"
        ]
        ++ lib.optional (hasKubeconfig || copyAgeKeys) "${stateDir}:${stateDir}:ro";
        extraOptions = [
          "--network=host"
          "--read-only"
          "--cap-drop=all"
          "--security-opt=no-new-privileges"
        ]
        ++ cfg.container.extraOptions;
      };
      system.extraDependencies = cfg.image.storeRoots or [ cfg.package ];
      systemd.services."${config.virtualisation.oci-containers.backend}-kix-operator" = {
        wants = bootstrapUnits ++ k3sUnits;
        after = bootstrapUnits ++ k3sUnits ++ [ "nix-daemon.socket" ];
        serviceConfig.ExecStartPre =
          lib.optional copyKubeconfig "${prepareKubeconfig}"
          ++ lib.optional copyAgeKeys "${prepareAgeIdentity}";
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
        after = [ "network-online.target" "nix-daemon.socket" ] ++ bootstrapUnits ++ k3sUnits;
        inherit environment;
        path = [ cfg.nixPackage ];
        startLimitIntervalSec = 0;
        serviceConfig = {
          ExecStartPre =
            lib.optional copyKubeconfig "+${prepareKubeconfig}"
            ++ lib.optional copyAgeKeys "+${prepareAgeIdentity}";
          ExecStart = lib.concatMapStringsSep " " systemdArg ([ "${cfg.package}/bin/kix-operator" ] ++ arguments);
          User = "kix-operator";
          Group = "kix-operator";
          Restart = "always";
          RestartSec = 5;
          ReadWritePaths = [ cfg.gcRootsDir ] ++ lib.optional (storeRoot != null) storeRoot;
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
          RestrictAddressFamilies = [ "AF_UNIX" "AF_INET" "AF_INET6" ];
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
