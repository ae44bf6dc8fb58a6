# kix.lib.mkTenants: who may write which Kix cluster's records, and which
# ServiceAccount each Kix cluster acts as.
#
#   tenants = kix.lib.mkTenants {
#     inherit pkgs;
#     platform = {                 # may write every record (the operator, admins)
#       users = [ "system:serviceaccount:kix-system:kix-operator" ];
#       groups = [ "platform-admins" ];
#     };
#     clusters.team-a = {
#       groups = [ "team-a" ];     # may write team-a's records
#       users = [ "alice" ];
#       serviceAccount = { namespace = "team-a"; name = "kix"; };
#     };
#   };
#
# The result is a derivation whose output is the declaration as JSON (named
# `kix-tenants.json`), the file `kix crds --tenants FILE` reads to print the
# ValidatingAdmissionPolicy and its binding:
#
#   {"platform":{"users":[...],"groups":[...]},
#    "clusters":{"team-a":{"users":[...],"groups":[...],
#                          "serviceAccount":{"namespace":"team-a","name":"kix"}}}}
#
# plus `declaration` (that value as an attrset), `clusterNames` and
# `serviceAccounts` (each Kix cluster's account, `{ namespace; name; }`,
# once each), also in `passthru`. A Kix cluster's own ServiceAccount may
# write its records too (the CLI and the operator write them acting as it);
# the policy adds it. Refused at evaluation, naming the Kix cluster: a name
# that is not a DNS label, an unknown attribute, users or groups that are
# not lists of non-empty strings, a missing or malformed serviceAccount.
# Only `pkgs.runCommand` is used (as mkCluster).
{
  isDnsLabel,
  describeValue,
  quote,
  checkAll,
}:
let
  inherit (builtins)
    all
    attrNames
    elem
    filter
    head
    isAttrs
    isList
    isString
    mapAttrs
    toJSON
    ;

  subjectAttrs = [
    "users"
    "groups"
  ];
  tenantAttrs = subjectAttrs ++ [ "serviceAccount" ];
in
{
  pkgs,
  platform ? { },
  clusters,
}:
let
  fail = msg: throw "kix.mkTenants: ${msg}";
  failCluster = c: msg: fail "Kix cluster ${quote c}: ${msg}";

  # `users` and `groups` of `s`, each a list of non-empty strings.
  checkSubjects =
    f: known: s:
    let
      unknown = filter (a: !(elem a known)) (attrNames s);
      list =
        a:
        let
          v = s.${a} or [ ];
        in
        isList v && all (x: isString x && x != "") v
        || f "`${a}` must be a list of non-empty strings, got ${describeValue v}";
    in
    (isAttrs s || f "must be an attrset { users ? [ ]; groups ? [ ]; }, got ${describeValue s}")
    && (unknown == [ ] || f "unknown attribute ${quote (head unknown)} (known: ${toJSON known})")
    && list "users"
    && list "groups";

  checkAccount =
    f: a:
    let
      keys = if isAttrs a then attrNames a else [ ];
      field = k: isString (a.${k} or null) && a.${k} != "" || f "`serviceAccount.${k}` must be a non-empty string, got ${describeValue (a.${k} or null)}";
    in
    (isAttrs a || f "`serviceAccount` must be an attrset { namespace; name; }, got ${describeValue a}")
    && (
      filter (k: k != "namespace" && k != "name") keys == [ ]
      || f "`serviceAccount` takes only `namespace` and `name`"
    )
    && field "namespace"
    && field "name";

  checkCluster =
    c:
    let
      t = clusters.${c};
      f = failCluster c;
    in
    (isDnsLabel c || f "a Kix cluster name must be a DNS label (lowercase letters, digits and '-')")
    && (isAttrs t || f "must be an attrset { users ? [ ]; groups ? [ ]; serviceAccount; }, got ${describeValue t}")
    && checkSubjects f tenantAttrs t
    && (t ? serviceAccount || f "has no `serviceAccount` ({ namespace; name; }: the account its records act as)")
    && checkAccount f t.serviceAccount;

  names = if isAttrs clusters then attrNames clusters else [ ];

  checks = [
    (isAttrs pkgs && pkgs ? runCommand || fail "`pkgs` must provide `runCommand` (nixpkgs or a runCommand-style builder)")
    (checkSubjects (msg: fail "platform: ${msg}") subjectAttrs platform)
    (isAttrs clusters && names != [ ] || fail "`clusters` must be a non-empty attrset of Kix clusters, got ${describeValue clusters}")
    (all checkCluster names)
  ];

  subjects = s: {
    users = s.users or [ ];
    groups = s.groups or [ ];
  };

  declaration = {
    platform = subjects platform;
    clusters = mapAttrs (
      _: t:
      subjects t
      // {
        serviceAccount = { inherit (t.serviceAccount) namespace name; };
      }
    ) clusters;
  };

  serviceAccounts = builtins.foldl' (
    seen: c:
    let
      a = declaration.clusters.${c}.serviceAccount;
    in
    if elem a seen then seen else seen ++ [ a ]
  ) [ ] names;

  drv = pkgs.runCommand "kix-tenants.json" {
    tenantsJson = toJSON declaration;
    passAsFile = [ "tenantsJson" ];
    preferLocalBuild = true;
    allowSubstitutes = false;
  } "cp \"$tenantsJsonPath\" \"$out\"\n";

  info = {
    inherit declaration serviceAccounts;
    clusterNames = names;
  };
in
checkAll checks (drv // info // { passthru = info; })
