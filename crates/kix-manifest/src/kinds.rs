//! What the reader knows about kinds without asking a cluster: the apply
//! order inside a package, and which well-known kinds are cluster-scoped.

/// Apply-order rank of a kind inside a package; lower ranks are applied
/// first (and deleted last). Kinds are matched by API group **and** kind, so a
/// custom resource that happens to be called `Service` ranks as a custom
/// resource.
///
/// | rank | kinds |
/// |---|---|
/// | 0 | `CustomResourceDefinition` (apiextensions.k8s.io) |
/// | 1 | `Namespace` |
/// | 2 | `ServiceAccount`, `Role`, `ClusterRole`, `RoleBinding`, `ClusterRoleBinding`, `ConfigMap`, `Secret`, `ResourceQuota`, `LimitRange`, `PriorityClass`, `StorageClass`, `PersistentVolume`, `PersistentVolumeClaim`: identity, configuration and storage that workloads refer to |
/// | 3 | `Service` |
/// | 4 | workloads: `Deployment`, `StatefulSet`, `DaemonSet`, `ReplicaSet`, `ReplicationController`, `Job`, `CronJob`, `Pod` |
/// | 5 | everything else: custom resources, `Ingress`, `NetworkPolicy`, `HorizontalPodAutoscaler`, admission policies, ... |
/// | 6 | `ValidatingWebhookConfiguration`, `MutatingWebhookConfiguration`, `APIService`: last, so a webhook or aggregated API never intercepts requests before the workload serving it exists |
pub fn kind_rank(group: &str, kind: &str) -> u8 {
    match (group, kind) {
        ("apiextensions.k8s.io", "CustomResourceDefinition") => 0,
        ("", "Namespace") => 1,
        ("", "ServiceAccount" | "ConfigMap" | "Secret" | "ResourceQuota" | "LimitRange")
        | ("", "PersistentVolume" | "PersistentVolumeClaim")
        | (
            "rbac.authorization.k8s.io",
            "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding",
        )
        | ("scheduling.k8s.io", "PriorityClass")
        | ("storage.k8s.io", "StorageClass") => 2,
        ("", "Service") => 3,
        ("apps", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet")
        | ("batch", "Job" | "CronJob")
        | ("", "Pod" | "ReplicationController") => 4,
        (
            "admissionregistration.k8s.io",
            "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration",
        )
        | ("apiregistration.k8s.io", "APIService") => 6,
        _ => 5,
    }
}

/// Whether `(group, kind)` is a built-in kind known to be cluster-scoped.
///
/// The reader uses this to decide which objects without `metadata.namespace`
/// get their package's namespace. It cannot know the scope of custom
/// resources (or of kinds missing from this list) without a cluster: those are
/// treated as namespaced, and the engine corrects them with API discovery
/// before applying.
pub fn is_well_known_cluster_scoped(group: &str, kind: &str) -> bool {
    matches!(
        (group, kind),
        (
            "",
            "Namespace" | "Node" | "PersistentVolume" | "ComponentStatus"
        ) | ("apiextensions.k8s.io", "CustomResourceDefinition")
            | (
                "rbac.authorization.k8s.io",
                "ClusterRole" | "ClusterRoleBinding"
            )
            | (
                "storage.k8s.io",
                "StorageClass" | "CSIDriver" | "CSINode" | "VolumeAttachment"
            )
            | ("scheduling.k8s.io", "PriorityClass")
            | (
                "admissionregistration.k8s.io",
                "ValidatingWebhookConfiguration"
                    | "MutatingWebhookConfiguration"
                    | "ValidatingAdmissionPolicy"
                    | "ValidatingAdmissionPolicyBinding"
                    | "MutatingAdmissionPolicy"
                    | "MutatingAdmissionPolicyBinding"
            )
            | ("apiregistration.k8s.io", "APIService")
            | ("networking.k8s.io", "IngressClass")
            | ("node.k8s.io", "RuntimeClass")
            | ("certificates.k8s.io", "CertificateSigningRequest")
            | (
                "flowcontrol.apiserver.k8s.io",
                "FlowSchema" | "PriorityLevelConfiguration"
            )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks() {
        assert_eq!(
            kind_rank("apiextensions.k8s.io", "CustomResourceDefinition"),
            0
        );
        assert_eq!(kind_rank("", "Namespace"), 1);
        for (g, k) in [
            ("", "ServiceAccount"),
            ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
            ("", "ConfigMap"),
            ("", "Secret"),
            ("", "PersistentVolumeClaim"),
            ("storage.k8s.io", "StorageClass"),
            ("scheduling.k8s.io", "PriorityClass"),
        ] {
            assert_eq!(kind_rank(g, k), 2, "{g}/{k}");
        }
        assert_eq!(kind_rank("", "Service"), 3);
        assert_eq!(kind_rank("apps", "Deployment"), 4);
        assert_eq!(kind_rank("batch", "CronJob"), 4);
        assert_eq!(kind_rank("", "Pod"), 4);
        assert_eq!(kind_rank("networking.k8s.io", "Ingress"), 5);
        assert_eq!(kind_rank("example.com", "Widget"), 5);
        // Matching is by group and kind.
        assert_eq!(kind_rank("serving.knative.dev", "Service"), 5);
        assert_eq!(kind_rank("", "Deployment"), 5);
        assert_eq!(
            kind_rank(
                "admissionregistration.k8s.io",
                "MutatingWebhookConfiguration"
            ),
            6
        );
        assert_eq!(kind_rank("apiregistration.k8s.io", "APIService"), 6);
    }

    #[test]
    fn cluster_scoped() {
        assert!(is_well_known_cluster_scoped("", "Namespace"));
        assert!(is_well_known_cluster_scoped(
            "rbac.authorization.k8s.io",
            "ClusterRole"
        ));
        assert!(is_well_known_cluster_scoped(
            "admissionregistration.k8s.io",
            "ValidatingAdmissionPolicyBinding"
        ));
        assert!(!is_well_known_cluster_scoped("", "ConfigMap"));
        assert!(!is_well_known_cluster_scoped(
            "rbac.authorization.k8s.io",
            "Role"
        ));
        assert!(!is_well_known_cluster_scoped("example.com", "Namespace"));
    }
}
