# The operator's RBAC that services.kix-operator's options decide: leases in
# the lease namespace, and the apply permissions (rbac.applyRules,
# cluster-wide or in rbac.namespaces only). The fixed part (ServiceAccount,
# token Secret, least privilege on kix's records) is ./kix-operator-rbac.yaml.
# Both are the resources of the Kix cluster the bootstrap deploys.
{
  lib,
  rbac,
  leaseNamespace,
}:
let
  object = kind: name: namespace: {
    apiVersion = "rbac.authorization.k8s.io/v1";
    inherit kind;
    metadata = { inherit name; } // lib.optionalAttrs (namespace != null) { inherit namespace; };
  };
  clusterRole = name: rules: object "ClusterRole" name null // { inherit rules; };
  # Bindings are named after their role.
  binding =
    kind: name: namespace: roleKind:
    object kind name namespace
    // {
      subjects = [
        {
          kind = "ServiceAccount";
          name = "kix-operator";
          namespace = "kix-system";
        }
      ];
      roleRef = {
        apiGroup = "rbac.authorization.k8s.io";
        kind = roleKind;
        inherit name;
      };
    };
  clusterBinding = name: binding "ClusterRoleBinding" name null "ClusterRole";

  # With rbac.namespaces, writes are bound per namespace, but the engine
  # lists and watches each kind across the cluster: the same kinds, read-only.
  readRules = map (r: removeAttrs r [ "nonResourceURLs" ] // { verbs = [ "get" "list" "watch" ]; }) (
    builtins.filter (r: r ? resources) rbac.applyRules
  );

  # A RoleBinding needs its namespace. kix never prunes these: a build that
  # declares one shares it, and other objects may live there.
  namespaces = lib.subtractLists [ "default" "kix-system" "kube-node-lease" "kube-public" "kube-system" ] (
    lib.unique ([ leaseNamespace ] ++ lib.optionals (rbac.namespaces != null) rbac.namespaces)
  );
in
map (name: {
  apiVersion = "v1";
  kind = "Namespace";
  metadata = {
    inherit name;
    annotations."kix.run/prune" = "disabled";
  };
}) namespaces
++ [
  (
    object "Role" "kix-operator-leases" leaseNamespace
    // {
      rules = [
        {
          apiGroups = [ "coordination.k8s.io" ];
          resources = [ "leases" ];
          verbs = [ "get" "list" "watch" "create" "update" "patch" "delete" ];
        }
      ];
    }
  )
  (binding "RoleBinding" "kix-operator-leases" leaseNamespace "Role")
  (clusterRole "kix-operator-apply" rbac.applyRules)
]
++ (
  if rbac.namespaces == null then
    [ (clusterBinding "kix-operator-apply") ]
  else
    map (ns: binding "RoleBinding" "kix-operator-apply" ns "ClusterRole") rbac.namespaces
    ++ lib.optionals (readRules != [ ]) [
      (clusterRole "kix-operator-read" readRules)
      (clusterBinding "kix-operator-read")
    ]
    ++ lib.optionals (rbac.clusterApplyRules != [ ]) [
      (clusterRole "kix-operator-apply-cluster" rbac.clusterApplyRules)
      (clusterBinding "kix-operator-apply-cluster")
    ]
)
