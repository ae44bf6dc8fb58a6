# kix.lib.mkFleet: one build promoted across many clusters in waves.
#
#   kixFleets.prod = kix.lib.mkFleet {
#     name = "prod";
#     members.staging = { build = kixClusters.prod; context = "staging"; };
#     members.eu-1    = { build = kixClusters.prod; context = "eu-1"; operator = true; };
#     members.us-1    = { build = kixClusters.prod; kubeconfig = "/etc/kix/us-1.yaml"; };
#     waves = [ [ "staging" ] [ "eu-1" ] [ "us-1" ] ];
#     maxParallel = 4;     # members deployed at once inside a wave (default: the largest wave)
#     pause = "5m";        # how long a wave stays Active and healthy before the next starts
#   };
#
# A member is an ordinary Kix cluster build (the result of mkCluster, or any
# derivation or store path of a manifest tree; several members may share one
# build), the kubeconfig context it goes to (`context`; null: the build's
# `settings.context`, else the current context) and the kubeconfig file
# (`kubeconfig`, a string: a path literal would copy it into the store), and
# whether the in-cluster operator applies it (`operator`).
#
# The result is a derivation whose output is the fleet file (JSON, named
# `kix-fleet-<name>.json`):
#
#   {"format":1,"fleet":name,"maxParallel":n,"pause":"5m","waves":[[...]],
#    "members":{"<m>":{"build":"/nix/store/...","cluster":"prod","context":...,
#                      "kubeconfig":...,"operator":false,"wave":0}}}
#
# It refers to every member's build, so a GC root of the fleet keeps them
# all. Refused at evaluation, naming the member: a wave naming a member that
# does not exist, a member in two waves, a member in no wave (a member that a
# rollout would never reach is a mistake, not a default), two members on one
# kubeconfig context and Kix cluster (they would fight over the same
# records), an empty wave.
#
# It needs no nixpkgs: the builder is /bin/sh with its builtin printf.
{
  isDnsLabel,
  isDuration,
  describeValue,
  quote,
}:
let
  inherit (builtins)
    all
    attrNames
    concatMap
    concatStringsSep
    elem
    filter
    foldl'
    genList
    head
    isAttrs
    isBool
    isInt
    isList
    isPath
    isString
    length
    listToAttrs
    seq
    toJSON
    ;

  checkAll = checks: value: seq (all (c: c) checks) value;
  imap0 = f: xs: genList (i: f i (builtins.elemAt xs i)) (length xs);

  memberAttrs = [
    "build"
    "context"
    "kubeconfig"
    "operator"
  ];
in
{
  name,
  members,
  waves,
  maxParallel ? null,
  pause ? "0s",
}:
let
  fail = msg: throw "kix.mkFleet: fleet ${quote name}: ${msg}";
  failMember = m: msg: fail "member ${quote m}: ${msg}";

  names = if isAttrs members then attrNames members else [ ];

  # The Kix cluster a build deploys: mkCluster's `cluster`, or (for a plain
  # store path or another derivation) unknown at evaluation.
  clusterOf = b: if isAttrs b && b ? cluster then b.cluster else null;
  contextOf =
    m:
    let
      d = members.${m};
    in
    if d.context or null != null then d.context else d.build.settings.context or null;

  checkMember =
    m:
    let
      d = members.${m};
      unknown = filter (a: !(elem a memberAttrs)) (attrNames d);
    in
    (isDnsLabel m || failMember m "a member name must be a DNS label (lowercase letters, digits and '-')")
    && (isAttrs d || failMember m "must be an attrset { build; context ? null; kubeconfig ? null; operator ? false; }, got ${describeValue d}")
    && (unknown == [ ] || failMember m "unknown attribute ${quote (head unknown)} (known: ${concatStringsSep ", " memberAttrs})")
    && (d ? build || failMember m "has no `build` (a Kix cluster: kixClusters.<name>)")
    && (
      (isAttrs d.build && d.build ? outPath) || isString d.build
      || failMember m "`build` must be a Kix cluster build (a derivation or a store path), got ${describeValue d.build}"
    )
    && (d.context or null == null || isString d.context || failMember m "`context` must be a string or null, got ${describeValue d.context}")
    && (
      !(isPath (d.kubeconfig or null))
      || failMember m "`kubeconfig` must be a string (a path literal would copy the kubeconfig into the Nix store)"
    )
    && (d.kubeconfig or null == null || isString d.kubeconfig || failMember m "`kubeconfig` must be a string or null, got ${describeValue d.kubeconfig}")
    && (isBool (d.operator or false) || failMember m "`operator` must be a boolean, got ${describeValue d.operator}");

  # member → the indices of the waves naming it.
  wavesOf = m: filter (i: elem m (builtins.elemAt waves i)) (genList (i: i) (length waves));

  checkWave =
    i: wave:
    (isList wave || fail "wave ${toString i} must be a list of member names, got ${describeValue wave}")
    && (wave != [ ] || fail "wave ${toString i} is empty")
    && all (
      m:
      (isString m || fail "wave ${toString i} holds ${describeValue m}, not a member name")
      && (elem m names || fail "wave ${toString i} names member ${quote m}, which is not a member (members: ${concatStringsSep ", " names})")
      && (
        length (filter (x: x == m) wave) == 1 || fail "member ${quote m} is named twice in wave ${toString i}"
      )
    ) wave;

  checkPlacement =
    m:
    let
      at = wavesOf m;
    in
    (at != [ ] || failMember m "is in no wave (add it to a wave, or remove it from `members`)")
    && (
      length at == 1
      || failMember m "is in two waves (${concatStringsSep " and " (map toString at)}): a member is deployed once per rollout"
    );

  # Two members on one kubeconfig (file, context) and one Kix cluster would
  # write the same records.
  targetOf = m: {
    kubeconfig = members.${m}.kubeconfig or null;
    context = contextOf m;
    cluster = clusterOf members.${m}.build;
  };
  checkTargets = foldl' (
    seen: m:
    let
      t = targetOf m;
      same = filter (s: s.target == t && t.cluster != null) seen;
    in
    if same != [ ] then
      failMember m "deploys Kix cluster ${quote t.cluster} to the same kubeconfig context (${
        if t.context == null then "the current context" else quote t.context
      }) as member ${quote (head same).member}"
    else
      seen
      ++ [
        {
          member = m;
          target = t;
        }
      ]
  ) [ ] names;

  largestWave = foldl' (n: w: if length w > n then length w else n) 1 waves;
  parallel = if maxParallel == null then largestWave else maxParallel;

  checks = [
    (isDnsLabel name || throw "kix.mkFleet: the fleet name must be a DNS label, got ${describeValue name}")
    (isAttrs members && names != [ ] || fail "`members` must be a non-empty attrset of members")
    (all checkMember names)
    (isList waves && waves != [ ] || fail "`waves` must be a non-empty list of lists of member names")
    (all (x: x) (imap0 checkWave waves))
    (all checkPlacement names)
    (isList checkTargets)
    (isInt parallel && parallel >= 1 || fail "`maxParallel` must be an integer of at least 1, got ${describeValue maxParallel}")
    (isDuration pause || fail "`pause` must be a duration such as \"0s\", \"90s\", \"5m\", got ${describeValue pause}")
  ];

  waveOf = m: head (wavesOf m);
  memberJson =
    m:
    let
      d = members.${m};
    in
    {
      build = "${d.build}";
      cluster = clusterOf d.build;
      context = d.context or null;
      kubeconfig = d.kubeconfig or null;
      operator = d.operator or false;
      wave = waveOf m;
    };

  fleetJson = toJSON {
    format = 1;
    fleet = name;
    maxParallel = parallel;
    inherit pause waves;
    members = listToAttrs (
      map (m: {
        name = m;
        value = memberJson m;
      }) names
    );
  };

  firstBuild = members.${head names}.build;
  system =
    if isAttrs firstBuild && firstBuild ? system then firstBuild.system else builtins.currentSystem;

  drv = derivation {
    name = "kix-fleet-${name}.json";
    inherit system fleetJson;
    builder = "/bin/sh";
    args = [
      "-c"
      "printf '%s\\n' \"$fleetJson\" > \"$out\""
    ];
    preferLocalBuild = true;
    allowSubstitutes = false;
  };

  info = {
    fleet = name;
    inherit waves;
    maxParallel = parallel;
    inherit pause;
    memberNames = names;
  };
in
checkAll checks (drv // info // { passthru = info; })
