# The kix Nix library.
#
#   kix.lib.mkCluster { pkgs, name, packages, settings ? {}, health ? [], serviceAccount ? null, revision ? null }
#   kix.lib.mkFleet { name, members, waves, maxParallel ? null, pause ? "0s" }  (nix/fleet.nix)
#   kix.lib.mkTenants { pkgs, platform ? {}, clusters }  (nix/tenants.nix)
#   kix.lib.helm.fetch / kix.lib.helm.render  (nix/helm.nix): Helm charts as packages
#   kix.lib.kustomize.build  (nix/kustomize.nix): Kustomize overlays as packages
#
# returns a derivation whose output is a format-1 manifest tree:
#
#   kix.json                                  {"format":1,"cluster":name,"packages":[...],"settings":{...},"health"?:[...],"revision"?:sha}
#   packages/<package>/package.json           {"name","version","dependsOn","namespace"?,"migrations","handoff"?,"health"?,"source"?}
#   packages/<package>/resources/NNN-<kind>-<name>.json    one per Nix attrset in `resources`
#   packages/<package>/resources/manifests/NNN-<basename>  each of `manifests` (file or directory)
#   packages/<package>/secrets/NNN-<basename>  each of `secrets` (SOPS-encrypted, copied as it is)
#
# `packages` is an attrset of package declarations (the primary form):
#
#   packages.web = {
#     version = "1.2.0";          # required, non-empty string
#     dependsOn = [ "db" ];       # names of other packages of this cluster
#     namespace = "web";          # optional default namespace (null: none)
#     resources = [ { apiVersion = "v1"; kind = "ConfigMap"; metadata.name = "web"; } ];
#     manifests = [ ./web.yaml helmOutput ];  # YAML/JSON files or directories
#     migrations = [ { from = "1.1.0"; to = "1.2.0"; description = "..."; actions = [ ... ]; } ];
#     handoff = [ { kind = "Deployment"; fields = [ "spec.replicas" ]; } ];  # left to other managers
#     secrets = [ ./db.sops.yaml ];  # SOPS-encrypted files (age): only ciphertext in the store
#     allowPlaintextSecrets = false; # true: plain Secrets among `resources`/`manifests` are allowed
#     health = [ { group = "example.com"; kind = "Widget"; current = "status.phase == 'Running'"; } ];
#     source = { helm = { chart = "web"; version = "0.4.0"; repo = "https://charts.example.com"; }; };
#   };
#
# `source` says where the package came from, for `kix build` and `kix
# validate` to show: `{ helm = { chart; version; repo ? null; }; }` or
# `{ kustomize = { path; }; }`. kix.lib.helm.render and
# kix.lib.kustomize.build set it; nothing else depends on it.
#
# `health` (on the cluster and on each package): CEL health rules, each
# `{ group ? ""; kind; version ? null; name ? null; current ? null;
# inProgress ? null; failed ? null; message ? null; }` with at least one of
# current, inProgress, failed (see docs/concepts.md, "Health"). Nix checks
# their shape; kix compiles the expressions when it reads the tree.
#
# A list of declarations that each carry a `name` is accepted too
# (`packages = [ { name = "web"; version = "1"; } ]`); there two entries with
# the same name are an error. In the attrset form a `name` attribute, if given,
# must equal the attribute name.
#
# `settings`: `keep` (int >= 0, Superseded activations to keep), `maxAge`
# (string such as "30d", "12h", "1d12h"; units s m h d w), `context` (default
# kubeconfig context), `deletionBudget` (`{ percent = 25; floor = 10; }`: a
# deploy deleting more than `percent` % of the owned objects and more than
# `floor` objects needs consent), `cache` (`{ url; publicKeys ? []; }`: the
# Nix binary cache `kix push` and `kix deploy --operator` publish the build
# to, signed, and the keys it is trusted under). Null values are dropped; unknown settings pass through
# to kix.json unchanged.
#
# `revision = self.rev or null;`: the commit the build is made from (7 to
# 64 lowercase hex digits; a dirty tree has no `self.rev`: null), written to
# kix.json. Records carry it (`spec.source.revision`) and the operator's
# GitHub/GitLab commit statuses are set on it (docs/operator.md,
# Notifications). A build per commit: the store path changes with it.
#
# `serviceAccount = { namespace = "team-a"; name = "kix"; }` (also accepted
# as `settings.serviceAccount`; both given, they must be equal): the
# ServiceAccount every request made for this Kix cluster acts as (the CLI
# and the operator impersonate it), written to kix.json as
# `settings.serviceAccount`. Exactly those two attributes, non-empty strings.
#
# The only thing taken from `pkgs` is `pkgs.runCommand name env script`, so the
# library works with nixpkgs or with a plain host-tools builder (see
# nix/tests/host-tools.nix). The build script uses mkdir and cp only; file
# contents reach the builder through `passAsFile`, which Nix itself handles.
#
# The result is the derivation (named `kix-<name>`) plus `cluster` (the
# cluster name), `settings` (as evaluated), `packages` (the normalised
# declarations), `packageOrder` (dependency order, ties by name) and
# `kixFormat`; the same set is also `passthru`. (`name` stays the derivation
# name.)
#
# Invalid input fails evaluation with a `throw` naming the cluster, the
# package and the resource.
let
  inherit (builtins)
    all
    any
    attrNames
    concatMap
    concatStringsSep
    elem
    elemAt
    filter
    genList
    head
    isAttrs
    isInt
    isList
    isPath
    isString
    length
    listToAttrs
    match
    replaceStrings
    seq
    stringLength
    substring
    toJSON
    typeOf
    ;

  format = 1;

  packageAttrs = [
    "name"
    "version"
    "dependsOn"
    "namespace"
    "resources"
    "manifests"
    "migrations"
    "handoff"
    "health"
    "secrets"
    "allowPlaintextSecrets"
    "source"
  ];

  # A health rule: CEL expressions judging one kind (kix-health's RuleSpec).
  healthAttrs = [
    "group"
    "kind"
    "version"
    "name"
    "current"
    "inProgress"
    "failed"
    "message"
  ];

  healthExprAttrs = [
    "current"
    "inProgress"
    "failed"
  ];

  # Checks one health rule; `f` makes the error (it names the place).
  checkHealthRule =
    f: r:
    let
      unknown = filter (a: !(elem a healthAttrs)) (attrNames r);
      optionalString = a: r.${a} or null == null || isString r.${a} && r.${a} != "" || f "`${a}` must be a non-empty string, got ${describeValue r.${a}}";
    in
    (isAttrs r || f "must be an attrset, got ${describeValue r}")
    && (unknown == [ ] || f "unknown attribute(s) ${quoteList unknown}; a health rule takes ${quoteList healthAttrs}")
    && (isString (r.kind or null) && r.kind != "" || f "missing `kind`")
    && (r.group or null == null || isString r.group || f "`group` must be a string (\"\" for the core group), got ${describeValue r.group}")
    && all optionalString [ "version" "name" "current" "inProgress" "failed" "message" ]
    && (any (a: r.${a} or null != null) healthExprAttrs || f "needs at least one of `current`, `inProgress`, `failed` (CEL expressions)");

  # A handoff rule: fields kix leaves to another manager (an autoscaler).
  handoffAttrs = [
    "apiVersion"
    "kind"
    "name"
    "namespace"
    "fields"
  ];

  migrationAttrs = [
    "from"
    "to"
    "description"
    "actions"
  ];

  actionKinds = [
    "recreate"
    "delete"
    "adopt"
  ];

  objectRefAttrs = [
    "apiVersion"
    "kind"
    "namespace"
    "name"
  ];

  # ---- small helpers (no nixpkgs) --------------------------------------

  quote = toJSON;
  quoteList = xs: concatStringsSep ", " (map quote xs);

  flatten = xs: concatMap (x: if isList x then flatten x else [ x ]) xs;

  imap0 = f: xs: genList (i: f i (elemAt xs i)) (length xs);

  padTo =
    width: s:
    if stringLength s >= width then s else padTo width ("0" + s);

  index = width: i: padTo width (toString i);

  toLower = replaceStrings [
    "A" "B" "C" "D" "E" "F" "G" "H" "I" "J" "K" "L" "M"
    "N" "O" "P" "Q" "R" "S" "T" "U" "V" "W" "X" "Y" "Z"
  ] [
    "a" "b" "c" "d" "e" "f" "g" "h" "i" "j" "k" "l" "m"
    "n" "o" "p" "q" "r" "s" "t" "u" "v" "w" "x" "y" "z"
  ];

  # Keeps [A-Za-z0-9._-]; anything else becomes "_". Never starts with ".".
  sanitize =
    s:
    let
      out = concatStringsSep "" (
        map (x: if isList x then "_" else x) (builtins.split "[^A-Za-z0-9._-]" s)
      );
    in
    if out == "" then "_" else if substring 0 1 out == "." then "_" + out else out;

  # A shell word in single quotes.
  shellQuote = s: "'" + replaceStrings [ "'" ] [ "'\\''" ] s + "'";

  isDnsLabel =
    s: isString s && stringLength s <= 63 && match "[a-z0-9]([-a-z0-9]*[a-z0-9])?" s != null;

  isDuration = s: isString s && match "([0-9]+[smhdw])+" s != null;

  describeValue =
    v:
    if isString v then
      "the string ${quote v}"
    else if isAttrs v && v ? outPath then
      "a derivation"
    else if builtins.isInt v then
      "the integer ${toString v}"
    else if builtins.isBool v then
      "the boolean ${if v then "true" else "false"}"
    else if v == null then
      "null"
    else if builtins.elem (typeOf v) [ "attrs" "int" ] then
      "an ${typeOf v}"
    else
      "a ${typeOf v}";

  removeNulls =
    attrs:
    listToAttrs (
      concatMap (
        n:
        if attrs.${n} == null then
          [ ]
        else
          [
            {
              name = n;
              value = attrs.${n};
            }
          ]
      ) (attrNames attrs)
    );

  # A tool run in a build (helm, kustomize): a package with bin/<name>, or
  # the executable itself as a path or an absolute path string (imported
  # into the store like a path literal). The shell word that runs it.
  tool =
    name: t:
    if isAttrs t && t ? outPath then
      shellQuote "${t}/bin/${name}"
    else if isPath t then
      shellQuote "${t}"
    else if isString t && substring 0 1 t == "/" then
      shellQuote (if builtins.hasContext t then t else "${/. + t}")
    else
      throw "kix.lib: `${name}` must be a package with bin/${name} or the ${name} executable (a path), got ${describeValue t}";

  # Forces every check (each returns true or throws) before `value`.
  checkAll = checks: value: seq (all (c: c) checks) value;

  # ---- the library -------------------------------------------------------

  mkCluster =
    {
      pkgs,
      name,
      packages,
      settings ? { },
      health ? [ ],
      serviceAccount ? null,
      revision ? null,
    }:
    let
      fail = msg: throw "kix.mkCluster: cluster ${quote name}: ${msg}";

      clusterChecks = [
        (
          isDnsLabel name
          || throw "kix.mkCluster: cluster name must be a DNS label (lowercase letters, digits and '-', at most 63 characters), got ${describeValue name}"
        )
        (isAttrs pkgs && pkgs ? runCommand || fail "`pkgs` must provide `runCommand` (nixpkgs or a runCommand-style builder)")
        (isAttrs packages || isList packages || fail "`packages` must be an attrset of package declarations (or a list of declarations with `name`), got ${describeValue packages}")
        (isAttrs settings || fail "`settings` must be an attrset, got ${describeValue settings}")
        (isList health || fail "`health` must be a list of health rules, got ${describeValue health}")
        (all (x: x) (imap0 (i: checkHealthRule (msg: fail "health ${toString i}: ${msg}")) health))
        (
          revision == null
          || isString revision && match "[0-9a-f]{7,64}" revision != null
          || fail "`revision` must be a commit (7 to 64 lowercase hex digits: `self.rev or null`), got ${describeValue revision}"
        )
      ];

      # ---- packages: list or attrset → attrset name → declaration --------

      fromList =
        let
          entries = imap0 (
            i: p:
            if !(isAttrs p) then
              fail "package entry ${toString i} must be an attrset, got ${describeValue p}"
            else if !(p ? name) || !(isString p.name) then
              fail "package entry ${toString i} has no `name` (a list of packages needs a `name` in each entry; or give `packages` as an attrset)"
            else
              {
                name = p.name;
                value = p;
              }
          ) packages;
          names = map (e: e.name) entries;
          firstIndex = n: head (filter (i: elemAt names i == n) (genList (i: i) (length names)));
          dupCheck = imap0 (
            i: e:
            firstIndex e.name == i
            || fail "duplicate package ${quote e.name} (list entries ${toString (firstIndex e.name)} and ${toString i})"
          ) entries;
        in
        seq names (checkAll dupCheck (listToAttrs entries));

      declared = if isList packages then fromList else packages;

      names = attrNames declared;

      # ---- one package ----------------------------------------------------

      normalizePackage =
        pname: raw:
        let
          pfail = msg: fail "package ${quote pname}: ${msg}";
          p = raw;
          unknown = filter (a: !(elem a packageAttrs)) (attrNames p);

          version = p.version or null;
          dependsOn = p.dependsOn or [ ];
          namespace = p.namespace or null;
          resources = flatten (p.resources or [ ]);
          manifests = p.manifests or [ ];
          migrations = p.migrations or [ ];
          handoff = p.handoff or [ ];
          health = p.health or [ ];
          secrets = p.secrets or [ ];
          allowPlaintextSecrets = p.allowPlaintextSecrets or false;
          source = p.source or null;

          # { helm = { chart; version; repo ? null; }; } or { kustomize = { path; }; }
          checkSource =
            let
              f = msg: pfail "`source`: ${msg}";
              kinds = if isAttrs source then attrNames source else [ ];
              kind = head kinds;
              fields = source.${kind};
              known = if kind == "helm" then [ "chart" "version" "repo" ] else [ "path" ];
              required = if kind == "helm" then [ "chart" "version" ] else [ "path" ];
              unknown = filter (a: !(elem a known)) (attrNames fields);
              text = a: isString fields.${a} && fields.${a} != "" || f "`${kind}.${a}` must be a non-empty string, got ${describeValue fields.${a}}";
            in
            source == null
            || (kinds == [ "helm" ] || kinds == [ "kustomize" ] || f "must be { helm = { chart; version; repo ? null; }; } or { kustomize = { path; }; }, got ${describeValue source}")
            && (isAttrs fields || f "`${kind}` must be an attrset, got ${describeValue fields}")
            && (unknown == [ ] || f "unknown attribute(s) ${quoteList unknown} of `${kind}` (known: ${quoteList known})")
            && all (a: fields ? ${a} || f "`${kind}.${a}` is missing") required
            && all text (filter (a: fields ? ${a} && fields.${a} != null) known);

          describeResource =
            i: r:
            let
              kind = if isAttrs r && isString (r.kind or null) then r.kind else null;
              rname =
                if isAttrs r && isAttrs (r.metadata or null) && isString (r.metadata.name or null) then
                  r.metadata.name
                else
                  null;
            in
            "resource ${toString i}"
            + (
              if kind != null && rname != null then
                " (${kind} ${quote rname})"
              else if kind != null then
                " (${kind})"
              else if rname != null then
                " (${quote rname})"
              else
                ""
            );

          checkObject =
            what: r:
            let
              f = msg: pfail "${what}: ${msg}";
            in
            (isAttrs r || f "must be an attrset, got ${describeValue r}")
            && (!(r ? outPath) || f "is a derivation or path; files and directories belong in `manifests`")
            && (isString (r.apiVersion or null) && r.apiVersion != "" || f "missing `apiVersion`")
            && (isString (r.kind or null) && r.kind != "" || f "missing `kind`")
            && (
              if r.kind == "List" then
                isList (r.items or null)
                || f "a List needs `items`"
              else
                (isAttrs (r.metadata or null) || f "missing `metadata`")
                && (isString (r.metadata.name or null) && r.metadata.name != "" || f "missing `metadata.name`")
                && (
                  !(r.metadata ? namespace)
                  || isString r.metadata.namespace
                  || f "`metadata.namespace` must be a string"
                )
            );

          checkResource =
            i: r:
            let
              what = describeResource i r;
            in
            checkObject what r
            && (
              if r.kind == "List" then
                all (x: x) (imap0 (j: item: checkObject "${what}, item ${toString j}" item) r.items)
              else
                true
            );

          checkManifest =
            i: m:
            let
              f = msg: pfail "manifest ${toString i}: ${msg}";
            in
            if isPath m then
              builtins.pathExists m || f "${toString m} does not exist"
            else if isAttrs m && m ? outPath then
              true
            else if isString m then
              (substring 0 1 m == "/" || f "must be a path, a derivation or an absolute path string, got ${describeValue m}")
              && (builtins.hasContext m || builtins.pathExists m || f "${m} does not exist")
            else if isAttrs m && m ? apiVersion then
              f "is an attrset; Nix attrsets belong in `resources`"
            else
              f "must be a path, a derivation or an absolute path string, got ${describeValue m}";

          # A SOPS-encrypted file: a path, a derivation's file or an absolute
          # path string, named .yaml, .yml or .json (sops' formats).
          checkSecret =
            i: s:
            let
              f = msg: pfail "secret ${toString i}: ${msg}";
              fileName = if isPath s then baseNameOf s else storeName (toString s);
            in
            (
              if isPath s then
                builtins.pathExists s || f "${toString s} does not exist"
              else if isAttrs s && s ? outPath then
                true
              else if isString s then
                (substring 0 1 s == "/" || f "must be a path, a derivation or an absolute path string, got ${describeValue s}")
                && (builtins.hasContext s || builtins.pathExists s || f "${s} does not exist")
              else
                f "must be a SOPS-encrypted file (a path such as ./db.sops.yaml), got ${describeValue s}"
            )
            && (
              match ".*[.](yaml|yml|json)" fileName != null
              || f "${quote fileName} must be named .yaml, .yml or .json (the format sops wrote it in)"
            );

          checkMigration =
            i: m:
            let
              f = msg: pfail "migration ${toString i}: ${msg}";
            in
            (isAttrs m || f "must be an attrset, got ${describeValue m}")
            && (
              let
                unknown = filter (a: !(elem a migrationAttrs)) (attrNames m);
              in
              unknown == [ ]
              || f "unknown attribute(s) ${quoteList unknown}; a migration takes ${quoteList migrationAttrs}"
            )
            && (isString (m.from or null) || f "missing `from` (a version string)")
            && (isString (m.to or null) || f "missing `to` (a version string)")
            && (!(m ? description) || isString m.description || f "`description` must be a string")
            && (!(m ? actions) || isList m.actions || f "`actions` must be a list")
            && all (x: x) (imap0 (j: checkAction "migration ${toString i}, action ${toString j}") (m.actions or [ ]));

          # {action = "recreate" | "delete" | "adopt"; object = {apiVersion?, kind, namespace?, name};}
          checkAction =
            what: a:
            let
              f = msg: pfail "${what}: ${msg}";
              o = a.object or null;
            in
            (isAttrs a || f "must be an attrset, got ${describeValue a}")
            && (attrNames a == [ "action" "object" ] || f "must have exactly `action` and `object`, got ${quoteList (attrNames a)}")
            && (elem a.action actionKinds || f "`action` must be one of ${quoteList actionKinds}, got ${describeValue a.action}")
            && (isAttrs o || f "`object` must be an attrset")
            && (
              let
                unknown = filter (k: !(elem k objectRefAttrs)) (attrNames o);
              in
              unknown == [ ] || f "`object` has unknown attribute(s) ${quoteList unknown}; it takes ${quoteList objectRefAttrs}"
            )
            && (isString (o.kind or null) || f "`object.kind` is missing")
            && (isString (o.name or null) || f "`object.name` is missing");

          # {kind, fields = [ "spec.replicas" ], apiVersion?, name?, namespace?}
          checkHandoff =
            i: h:
            let
              f = msg: pfail "handoff ${toString i}: ${msg}";
              unknown = filter (a: !(elem a handoffAttrs)) (attrNames h);
              optionalString = a: !(h ? ${a}) || isString h.${a} || f "`${a}` must be a string";
            in
            (isAttrs h || f "must be an attrset, got ${describeValue h}")
            && (unknown == [ ] || f "unknown attribute(s) ${quoteList unknown}; a handoff takes ${quoteList handoffAttrs}")
            && (isString (h.kind or null) && h.kind != "" || f "missing `kind`")
            && (isList (h.fields or null) && h.fields != [ ] || f "`fields` must be a non-empty list of field paths such as \"spec.replicas\"")
            && (all (x: isString x && x != "" || f "`fields` entries must be non-empty strings, got ${describeValue x}") h.fields)
            && all optionalString [ "apiVersion" "name" "namespace" ];

          checks = [
            (isAttrs raw || pfail "must be an attrset, got ${describeValue raw}")
            (
              unknown == [ ]
              || pfail "unknown attribute(s) ${quoteList unknown}; a package takes ${quoteList packageAttrs}"
            )
            (isDnsLabel pname || pfail "the package name must be a DNS label (lowercase letters, digits and '-', at most 63 characters)")
            (!(p ? name) || p.name == pname || pfail "`name` is ${quote p.name} but the package is declared as ${quote pname}")
            (version != null || pfail "missing `version`")
            (isString version && version != "" || pfail "`version` must be a non-empty string, got ${describeValue version}")
            (isList dependsOn || pfail "`dependsOn` must be a list of package names")
            (
              all (
                d:
                (isString d || pfail "`dependsOn` entries must be package names, got ${describeValue d}")
                && (
                  elem d names
                  || pfail "depends on ${quote d}, which is not a package of this cluster (packages: ${quoteList names})"
                )
              ) dependsOn
            )
            (namespace == null || isDnsLabel namespace || pfail "`namespace` must be null or a DNS label, got ${describeValue namespace}")
            (isList (p.resources or [ ]) || pfail "`resources` must be a list of attrsets")
            (isList manifests || pfail "`manifests` must be a list of files or directories")
            (isList migrations || pfail "`migrations` must be a list")
            (all (x: x) (imap0 checkResource resources))
            (all (x: x) (imap0 checkManifest manifests))
            (all (x: x) (imap0 checkMigration migrations))
            (isList handoff || pfail "`handoff` must be a list")
            (all (x: x) (imap0 checkHandoff handoff))
            (isList health || pfail "`health` must be a list of health rules")
            (all (x: x) (imap0 (i: checkHealthRule (msg: pfail "health ${toString i}: ${msg}")) health))
            (isList secrets || pfail "`secrets` must be a list of SOPS-encrypted files")
            (all (x: x) (imap0 checkSecret secrets))
            (builtins.isBool allowPlaintextSecrets || pfail "`allowPlaintextSecrets` must be a boolean, got ${describeValue allowPlaintextSecrets}")
            checkSource
          ];
        in
        checkAll checks {
          name = pname;
          inherit
            version
            dependsOn
            namespace
            resources
            manifests
            migrations
            handoff
            health
            secrets
            allowPlaintextSecrets
            source
            ;
        };

      normalized = listToAttrs (
        map (n: {
          name = n;
          value = normalizePackage n declared.${n};
        }) names
      );

      # ---- dependency order ---------------------------------------------

      depsOf = n: normalized.${n}.dependsOn;

      # Lexicographically smallest topological order: dependencies first,
      # ties broken by name.
      order =
        let
          go =
            done: remaining:
            if remaining == [ ] then
              done
            else
              let
                ready = filter (n: all (d: elem d done) (depsOf n)) remaining;
                n = head ready;
              in
              if ready == [ ] then
                cycleError remaining
              else
                go (done ++ [ n ]) (filter (x: x != n) remaining);
        in
        go [ ] names;

      # Every package left has a dependency among the ones left: walk until
      # a package repeats and report that loop.
      cycleError =
        remaining:
        let
          walk =
            path: n:
            if elem n path then
              let
                from = head (filter (i: elemAt path i == n) (genList (i: i) (length path)));
                loop = genList (i: elemAt path (from + i)) (length path - from);
              in
              loop ++ [ n ]
            else
              walk (path ++ [ n ]) (head (filter (d: elem d remaining) (depsOf n)));
        in
        fail "dependency cycle between packages: ${concatStringsSep " -> " (walk [ ] (head remaining))}";

      # ---- settings ------------------------------------------------------

      evaluatedSettings =
        let
          s = removeNulls settings;
          sfail = msg: fail "settings: ${msg}";
        in
        checkAll [
          (!(s ? keep) || isInt s.keep && s.keep >= 0 || sfail "`keep` must be a non-negative integer, got ${describeValue s.keep}")
          (!(s ? maxAge) || isDuration s.maxAge || sfail "`maxAge` must be a duration such as \"30d\", \"12h\" or \"1d12h\" (units s, m, h, d, w), got ${describeValue s.maxAge}")
          (!(s ? context) || isString s.context && s.context != "" || sfail "`context` must be a non-empty string, got ${describeValue s.context}")
          (!(s ? deletionBudget) || isAttrs s.deletionBudget || sfail "`deletionBudget` must be an attrset { percent; floor; }, got ${describeValue s.deletionBudget}")
          (!(s ? deletionBudget) || checkDeletionBudget s.deletionBudget)
          (!(s ? serviceAccount) || checkServiceAccount "settings.serviceAccount" s.serviceAccount)
          (!(s ? cache) || checkCache s.cache)
          (
            serviceAccount == null
            || !(s ? serviceAccount)
            || s.serviceAccount == serviceAccount
            || fail "`serviceAccount` (${toJSON serviceAccount}) and `settings.serviceAccount` (${toJSON s.serviceAccount}) differ: give it once"
          )
          (serviceAccount == null || checkServiceAccount "serviceAccount" serviceAccount)
        ] (s // (if serviceAccount == null then { } else { inherit serviceAccount; }));

      # `{ namespace = "team-a"; name = "kix"; }`: exactly these two,
      # non-empty strings.
      checkServiceAccount =
        what: a:
        let
          afail = msg: fail "`${what}`: ${msg}";
          keys = if isAttrs a then attrNames a else [ ];
          unknown = filter (k: k != "namespace" && k != "name") keys;
          field = k: isString (a.${k} or null) && a.${k} != "" || afail "`${k}` must be a non-empty string, got ${describeValue (a.${k} or null)}";
        in
        checkAll [
          (isAttrs a || afail "must be an attrset { namespace; name; } naming a ServiceAccount, got ${describeValue a}")
          (unknown == [ ] || afail "unknown attribute `${head unknown}` (a ServiceAccount is { namespace; name; })")
          (field "namespace")
          (field "name")
        ] true;

      # `cache = { url = "https://cache.example.com"; publicKeys = [ "name:base64" ]; }`:
      # where kix push and kix deploy --operator publish the build. The shapes
      # only: a Nix binary cache URL, keys as `nix key convert-secret-to-public`
      # prints them (32 bytes of base64).
      checkCache =
        c:
        let
          cfail = msg: fail "settings.cache: ${msg}";
          unknown = filter (k: k != "url" && k != "publicKeys") (if isAttrs c then attrNames c else [ ]);
          keys = c.publicKeys or [ ];
          isKey = k: isString k && match "[^:[:space:]]+:[A-Za-z0-9+/]{43}=" k != null;
          badKeys = if isList keys then filter (k: !isKey k) keys else [ ];
        in
        checkAll [
          (isAttrs c || cfail "must be an attrset { url; publicKeys; }, got ${describeValue c}")
          (unknown == [ ] || cfail "unknown attribute `${head unknown}` (known: url, publicKeys)")
          (
            isString (c.url or null) && match "(file|http|https|s3)://[^[:space:]]+" c.url != null
            || cfail "`url` must be a Nix binary cache URL (file:///dir, http://host, https://host, s3://bucket), got ${describeValue (c.url or null)}"
          )
          (isList keys || cfail "`publicKeys` must be a list of \"name:base64\" keys, got ${describeValue keys}")
          (badKeys == [ ] || cfail "`publicKeys`: ${describeValue (head badKeys)} is not a Nix public key \"name:base64\" (as `nix key convert-secret-to-public` prints it)")
        ] true;

      # `deletionBudget = { percent = 25; floor = 10; }`: both optional.
      checkDeletionBudget =
        b:
        let
          bfail = msg: fail "settings.deletionBudget: ${msg}";
          unknown = filter (k: k != "percent" && k != "floor") (attrNames b);
        in
        checkAll [
          (unknown == [ ] || bfail "unknown attribute `${head unknown}` (known: percent, floor)")
          (!(b ? percent) || isInt b.percent && b.percent >= 0 && b.percent <= 100 || bfail "`percent` must be an integer from 0 to 100, got ${describeValue b.percent}")
          (!(b ? floor) || isInt b.floor && b.floor >= 0 || bfail "`floor` must be a non-negative integer, got ${describeValue b.floor}")
        ] true;

      # ---- the files -----------------------------------------------------

      # Null attributes of a health rule are left out (kix reads them as absent).
      healthJson = map removeNulls;

      clusterJson = toJSON (
        {
          inherit format;
          cluster = name;
          packages = order;
          settings = evaluatedSettings;
        }
        // (if health == [ ] then { } else { health = healthJson health; })
        // (if revision == null then { } else { inherit revision; })
      );

      packageJson =
        p:
        toJSON (
          {
            inherit (p) name version dependsOn migrations;
          }
          // (if p.namespace == null then { } else { inherit (p) namespace; })
          // (if p.handoff == [ ] then { } else { inherit (p) handoff; })
          // (if p.health == [ ] then { } else { health = healthJson p.health; })
          // (if p.allowPlaintextSecrets then { inherit (p) allowPlaintextSecrets; } else { })
          // (if p.source == null then { } else { source = builtins.mapAttrs (_: removeNulls) p.source; })
        );

      width = count: if count > 1000 then stringLength (toString (count - 1)) else 3;

      resourceFile =
        count: i: r:
        let
          rname = if r.kind == "List" then r.metadata.name or "items" else r.metadata.name;
        in
        "${index (width count) i}-${sanitize (toLower r.kind)}-${sanitize rname}.json";

      storeName =
        s:
        let
          base = baseNameOf s;
          m = match "[0-9a-df-np-sv-z]{32}-(.+)" base;
        in
        if m == null then base else head m;

      # What to copy for a manifest entry, and the name it gets. A plain
      # string without context is read as a path, so it is imported into the
      # store like a path literal; strings with context (for example
      # "${helmOutput}/templates") and derivations are used as they are.
      manifestSource =
        m:
        if isString m && !(builtins.hasContext m) then /. + m else m;

      manifestFile =
        count: i: m:
        "${index (width count) i}-${sanitize (if isPath m then baseNameOf m else storeName (toString m))}";

      # Per package p (its position k in `order`): attributes handed to the
      # builder as files, and the script lines that place them.
      packagePlan =
        k: pname:
        let
          p = normalized.${pname};
          dir = "$out/packages/${pname}";
          pkgVar = "kix_p${toString k}";
          nres = length p.resources;
          nman = length p.manifests;
          nsec = length p.secrets;
          res = imap0 (i: r: {
            var = "kix_p${toString k}_r${toString i}";
            value = toJSON r;
            file = resourceFile nres i r;
          }) p.resources;
        in
        {
          files = [
            {
              name = pkgVar;
              value = packageJson p;
            }
          ]
          ++ map (r: {
            name = r.var;
            value = r.value;
          }) res;
          script = [
            "mkdir -p \"${dir}/resources\""
            "cp \"\$${pkgVar}Path\" \"${dir}/package.json\""
          ]
          ++ map (r: "cp \"\$${r.var}Path\" \"${dir}/resources/${r.file}\"") res
          ++ (if nman == 0 then [ ] else [ "mkdir -p \"${dir}/resources/manifests\"" ])
          ++ imap0 (
            i: m:
            "cp -RL ${shellQuote "${manifestSource m}"} \"${dir}/resources/manifests/${manifestFile nman i m}\""
          ) p.manifests
          ++ (if nsec == 0 then [ ] else [ "mkdir -p \"${dir}/secrets\"" ])
          ++ imap0 (
            i: m:
            "cp -L ${shellQuote "${manifestSource m}"} \"${dir}/secrets/${manifestFile nsec i m}\""
          ) p.secrets;
        };

      plans = imap0 packagePlan order;

      files = [
        {
          name = "kix_cluster";
          value = clusterJson;
        }
      ]
      ++ concatMap (p: p.files) plans;

      script = concatStringsSep "\n" (
        [
          "set -e"
          "mkdir -p \"$out/packages\""
          "cp \"$kix_clusterPath\" \"$out/kix.json\""
        ]
        ++ concatMap (p: p.script) plans
      ) + "\n";

      env = listToAttrs files // {
        passAsFile = map (f: f.name) files;
        preferLocalBuild = true;
        allowSubstitutes = false;
      };

      drv = pkgs.runCommand "kix-${name}" env script;

      info = {
        cluster = name;
        settings = evaluatedSettings;
        inherit health;
        packages = normalized;
        packageOrder = order;
        kixFormat = format;
      };
    in
    checkAll clusterChecks (
      # Validate every package, the order (cycles) and the settings now, so a
      # mistake surfaces as soon as the result is looked at.
      checkAll [
        (all (n: isAttrs normalized.${n}) names)
        (isList order)
        (isAttrs evaluatedSettings)
      ] (drv // info // { passthru = info; })
    );

  # kix.lib.checkCluster { pkgs, cluster, kix, kubernetesVersion ? null }
  #
  # A derivation that runs `kix validate --path <cluster>` on a built Kix
  # cluster (the result of mkCluster, or any manifest tree): it builds (an
  # empty output) when every object matches the Kubernetes API schemas and
  # the cluster's own CRDs, and fails with kix's messages otherwise. For a
  # flake's `checks`, so `nix flake check` fails on an invalid manifest.
  # `kix` is the kix package (its bin/kix runs in the build); like
  # mkCluster, only `pkgs.runCommand` is used.
  checkCluster =
    {
      pkgs,
      cluster,
      kix,
      kubernetesVersion ? null,
    }:
    let
      versionFlag =
        if kubernetesVersion == null then
          ""
        else
          " --kubernetes-version ${shellQuote kubernetesVersion}";
    in
    pkgs.runCommand "kix-check-${cluster.cluster or "cluster"}"
      {
        preferLocalBuild = true;
        allowSubstitutes = false;
      }
      ''
        set -e
        ${shellQuote "${kix}/bin/kix"} validate --path ${shellQuote "${cluster}"}${versionFlag}
        : > "$out"
      '';
  # kix.lib.mkFleet { name, members, waves, maxParallel ? null, pause ? "0s" }
  # (nix/fleet.nix): many clusters deployed in waves.
  mkFleet = import ./fleet.nix {
    inherit
      isDnsLabel
      isDuration
      describeValue
      quote
      ;
  };
  # kix.lib.mkTenants { pkgs, platform ? {}, clusters } (nix/tenants.nix):
  # who may write which Kix cluster's records, and whom each acts as.
  mkTenants = import ./tenants.nix {
    inherit
      isDnsLabel
      describeValue
      quote
      checkAll
      ;
  };
  # kix.lib.helm.{fetch,render} (nix/helm.nix): charts as package fragments.
  helm = import ./helm.nix {
    inherit
      describeValue
      quote
      shellQuote
      isDnsLabel
      checkAll
      tool
      ;
  };
  # kix.lib.kustomize.build (nix/kustomize.nix): overlays as package fragments.
  kustomize = import ./kustomize.nix {
    inherit
      describeValue
      shellQuote
      tool
      ;
  };
in
{
  inherit
    mkCluster
    checkCluster
    mkFleet
    mkTenants
    helm
    kustomize
    format
    ;
}
