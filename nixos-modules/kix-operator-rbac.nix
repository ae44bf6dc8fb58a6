# The operator's RBAC that services.kix-operator's options decide: leases in
# the lease namespace, and the apply permissions (rbac.applyRules,
# cluster-wide or in rbac.namespaces only), `impersonate` on the
# ServiceAccounts it acts as (a Role in each one's namespace, by
# resourceNames) and Leases in each of those accounts' namespaces (the
# deploy Lease is taken acting as the tenant, in its own namespace: no
# tenant may write Leases where another's or the operator's leader Lease
# lives). With rbac.tenantsOnly, no
# apply permission: get/list/watch on applyRules' kinds, for the drift
# watches. The fixed part
# (ServiceAccount, token Secret, least privilege on kix's records) is
# ./kix-operator-rbac.yaml. Both are the resources of the Kix cluster the
# bootstrap deploys.
{
  lib,
  rbac,
  leaseNamespace,
  # [ { namespace; name; } ]: the tenants' and the default ServiceAccount.
  impersonated ? [ ],
  # [ { namespace; name; } ]: the Secrets the alerts' credentials are in.
  alertSecrets ? [ ],
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
  tenantsOnly = rbac.tenantsOnly or false;
  impersonatedNamespaces = lib.unique (map (a: a.namespace) impersonated);

  # `get` on the alerts' Secrets, by name, in each of their namespaces.
  alertNamespaces = lib.unique (map (s: s.namespace) alertSecrets);
  alertRoles = lib.concatMap (ns: [
    (
      object "Role" "kix-operator-alerts" ns
      // {
        rules = [
          {
            apiGroups = [ "" ];
            resources = [ "secrets" ];
            resourceNames = lib.unique (map (s: s.name) (builtins.filter (s: s.namespace == ns) alertSecrets));
            verbs = [ "get" ];
          }
        ];
      }
    )
    (binding "RoleBinding" "kix-operator-alerts" ns "Role")
  ]) alertNamespaces;

  # With rbac.namespaces, writes are bound per namespace, but the engine
  # lists and watches each kind across the cluster: the same kinds, read-only.
  readRules = map (r: removeAttrs r [ "nonResourceURLs" ] // { verbs = [ "get" "list" "watch" ]; }) (
    builtins.filter (r: r ? resources) rbac.applyRules
  );

  # A RoleBinding needs its namespace. kix never prunes these: a build that
  # declares one shares it, and other objects may live there.
  namespaces = lib.subtractLists [ "default" "kix-system" "kube-node-lease" "kube-public" "kube-system" ] (
    lib.unique (
      [ leaseNamespace ]
      ++ lib.optionals (rbac.namespaces != null && !tenantsOnly) rbac.namespaces
      ++ impersonatedNamespaces
    )
  );

  # Acting as the tenants (with rbac.tenantsOnly, all the operator may do).
  impersonation = lib.concatMap (
    ns:
    let
      role = object "Role" "kix-operator-impersonate" ns // {
        rules = [
          {
            apiGroups = [ "" ];
            resources = [ "serviceaccounts" ];
            verbs = [ "impersonate" ];
            resourceNames = lib.unique (map (a: a.name) (builtins.filter (a: a.namespace == ns) impersonated));
          }
        ];
      };
    in
    [
      role
      (binding "RoleBinding" "kix-operator-impersonate" ns "Role")
    ]
  ) impersonatedNamespaces;
  # Each account takes its deploy Lease in its own namespace.
  tenantLeases = lib.concatMap (
    ns:
    [
      (
        object "Role" "kix-tenant-leases" ns
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
      (
        object "RoleBinding" "kix-tenant-leases" ns
        // {
          subjects = map (a: {
            kind = "ServiceAccount";
            inherit (a) name namespace;
          }) (builtins.filter (a: a.namespace == ns) impersonated);
          roleRef = {
            apiGroup = "rbac.authorization.k8s.io";
            kind = "Role";
            name = "kix-tenant-leases";
          };
        }
      )
    ]
  ) impersonatedNamespaces;
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
]
++ impersonation
++ tenantLeases
++ alertRoles
++ (
  if tenantsOnly then
    lib.optionals (readRules != [ ]) [
      (clusterRole "kix-operator-read" readRules)
      (clusterBinding "kix-operator-read")
    ]
  else if rbac.namespaces == null then
    [
      (clusterRole "kix-operator-apply" rbac.applyRules)
      (clusterBinding "kix-operator-apply")
    ]
  else
    [ (clusterRole "kix-operator-apply" rbac.applyRules) ]
    ++ map (ns: binding "RoleBinding" "kix-operator-apply" ns "ClusterRole") rbac.namespaces
    ++ lib.optionals (readRules != [ ]) [
      (clusterRole "kix-operator-read" readRules)
      (clusterBinding "kix-operator-read")
    ]
    ++ lib.optionals (rbac.clusterApplyRules != [ ]) [
      (clusterRole "kix-operator-apply-cluster" rbac.clusterApplyRules)
      (clusterBinding "kix-operator-apply-cluster")
    ]
)
