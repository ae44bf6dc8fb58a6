//! Published manifests as kubectl takes them: the fields only the API
//! server sets are dropped from what kix applies, with one warning per file
//! naming them; fields that change what the object is stay errors.

use std::fs;
use std::path::PathBuf;

use kix_manifest::{ReadOptions, TreeError, read_tree};
use serde_json::{Value, json};

struct Store {
    dir: tempfile::TempDir,
}

impl Store {
    fn new() -> Store {
        let store = Store {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        store.write(
            "kix.json",
            r#"{"format":1,"cluster":"test","packages":["monitoring"]}"#,
        );
        store.write(
            "packages/monitoring/package.json",
            r#"{"name":"monitoring","version":"1","namespace":"monitoring"}"#,
        );
        store
    }

    fn root(&self) -> PathBuf {
        self.dir.path().canonicalize().expect("canonical tempdir")
    }

    fn write(&self, rel: &str, text: &str) {
        let path = self.root().join("build").join(rel);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, text).expect("write");
    }

    fn read(&self) -> Result<kix_manifest::Build, TreeError> {
        let options = ReadOptions {
            store_dir: self.root(),
            ..ReadOptions::default()
        };
        read_tree(&self.root().join("build"), &options)
    }
}

/// kube-prometheus' examples/continuous-delivery/argocd/appproject.yaml.
const APPPROJECT: &str = r#"apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata:
  annotations:
    recipients.argocd-notifications.argoproj.io: slack:alerts
  generation: 1
  name: monitoring
  namespace: argocd
spec:
  clusterResourceWhitelist:
    - group: "*"
      kind: "*"
  description: "Monitoring Stack deployment"
  destinations:
    - namespace: kube-system
      server: https://kubernetes.default.svc
  sourceRepos:
    - git@github.com:prometheus-operator/kube-prometheus.git
"#;

fn manifest(build: &kix_manifest::Build, kind: &str) -> Value {
    build
        .objects()
        .find(|o| o.key.kind == kind)
        .map(|o| o.manifest())
        .unwrap_or_else(|| panic!("no {kind}"))
}

#[test]
fn kube_prometheus_appproject_with_a_generation_is_read_without_it() {
    let store = Store::new();
    store.write("packages/monitoring/resources/appproject.yaml", APPPROJECT);
    let build = store.read().unwrap_or_else(|e| panic!("{e}"));
    let project = manifest(&build, "AppProject");
    assert_eq!(project["metadata"].get("generation"), None);
    assert_eq!(project["metadata"]["name"], "monitoring");
    assert_eq!(project["metadata"]["namespace"], "argocd");
    let warnings: Vec<String> = build.dropped.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        [
            "packages/monitoring/resources/appproject.yaml: dropped metadata.generation, which only the API server sets"
        ]
    );
}

#[test]
fn a_kubectl_get_dump_is_read_as_its_spec_with_one_warning_per_file() {
    let store = Store::new();
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "web", "uid": "7f0c1e2a-0000-4000-8000-000000000001",
                     "resourceVersion": "12345", "generation": 3, "selfLink": "/apis/apps/v1/namespaces/web/deployments/web",
                     "creationTimestamp": "2025-01-02T03:04:05Z",
                     "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "apps/v1",
                                        "time": "2025-01-02T03:04:05Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
        "spec": {"replicas": 1},
        "status": {"replicas": 1, "readyReplicas": 1, "observedGeneration": 3}
    });
    let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "web", "namespace": "web", "resourceVersion": "1"}, "data": {"a": "b"}});
    store.write(
        "packages/monitoring/resources/dump.json",
        &format!("{deployment}\n{config_map}"),
    );
    let build = store.read().unwrap_or_else(|e| panic!("{e}"));
    let applied = manifest(&build, "Deployment");
    assert_eq!(
        applied,
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "web"}, "spec": {"replicas": 1}})
    );
    assert_eq!(
        manifest(&build, "ConfigMap")["metadata"],
        json!({"name": "web", "namespace": "web"})
    );
    let warnings: Vec<String> = build.dropped.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        [
            "packages/monitoring/resources/dump.json: dropped metadata.creationTimestamp, metadata.generation, \
          metadata.managedFields, metadata.resourceVersion, metadata.selfLink, metadata.uid, status, \
          which only the API server sets"
        ]
    );
}

#[test]
fn status_of_a_custom_resource_is_dropped_where_the_builds_crd_has_a_status_subresource() {
    let store = Store::new();
    let crd = |kind: &str, plural: &str, status: bool| {
        let mut version = json!({"name": "v1", "served": true, "storage": true,
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}});
        if status {
            version["subresources"] = json!({"status": {}});
        }
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": format!("{plural}.example.com")},
               "spec": {"group": "example.com", "scope": "Namespaced",
                        "names": {"kind": kind, "plural": plural}, "versions": [version]}})
    };
    store.write(
        "packages/monitoring/resources/crds.json",
        &format!(
            "{}\n{}",
            crd("Widget", "widgets", true),
            crd("Gadget", "gadgets", false)
        ),
    );
    store.write(
        "packages/monitoring/resources/objects.yaml",
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\nstatus:\n  ready: true\n---\n\
         apiVersion: example.com/v1\nkind: Gadget\nmetadata:\n  name: g\nstatus:\n  ready: true\n",
    );
    let build = store.read().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(manifest(&build, "Widget").get("status"), None);
    assert_eq!(manifest(&build, "Gadget")["status"], json!({"ready": true}));
    let warnings: Vec<String> = build.dropped.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        [
            "packages/monitoring/resources/objects.yaml: dropped status, which only the API server sets"
        ]
    );
}

#[test]
fn fields_that_change_what_the_object_is_or_deletion_stay_errors() {
    for (field, value) in [
        ("deletionTimestamp", "\"2025-01-02T03:04:05Z\""),
        ("deletionGracePeriodSeconds", "30"),
    ] {
        let store = Store::new();
        store.write(
            "packages/monitoring/resources/cm.yaml",
            &format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  {field}: {value}\n"),
        );
        let error = store
            .read()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            error.contains(&format!("metadata.{field} is set by the API server")),
            "{error}"
        );
    }
    let store = Store::new();
    store.write(
        "packages/monitoring/resources/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  generation: \"one\"\n",
    );
    let error = store
        .read()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        error.contains("metadata.generation must be an integer"),
        "{error}"
    );
}

#[test]
fn a_build_of_clean_manifests_warns_of_nothing() {
    let store = Store::new();
    store.write(
        "packages/monitoring/resources/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n",
    );
    let build = store.read().unwrap_or_else(|e| panic!("{e}"));
    assert!(build.dropped.is_empty());
}

#[test]
fn the_items_of_a_list_lose_what_the_api_server_set_and_keep_kubectls_types() {
    let store = Store::new();
    store.write(
        "packages/monitoring/resources/list.yaml",
        "apiVersion: v1\nkind: List\nitems:\n\
         - apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: a\n    resourceVersion: \"7\"\n    creationTimestamp: \"2025-01-02T03:04:05.123+02:00\"\n\
         - apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: b\n",
    );
    let build = store.read().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        manifest(&build, "ConfigMap")["metadata"],
        json!({"name": "a", "namespace": "monitoring"})
    );
    let warnings: Vec<String> = build.dropped.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        [
            "packages/monitoring/resources/list.yaml: dropped metadata.creationTimestamp, \
          metadata.resourceVersion, which only the API server sets"
        ]
    );
    let store = Store::new();
    store.write(
        "packages/monitoring/resources/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  creationTimestamp: yesterday\n",
    );
    let error = store
        .read()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        error.contains("metadata.creationTimestamp must be a time"),
        "{error}"
    );
    // In a List's item too, naming the item.
    let store = Store::new();
    store.write(
        "packages/monitoring/resources/list.yaml",
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: a\n    generation: x\n",
    );
    let error = store
        .read()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        error.contains("items[0]") && error.contains("metadata.generation must be an integer"),
        "{error}"
    );
}
