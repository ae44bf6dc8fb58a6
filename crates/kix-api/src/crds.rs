//! The CustomResourceDefinitions of kix's records, as YAML.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{Activation, PackageInstance};

const HEADER: &str = "\
# kix CustomResourceDefinitions (kix.run/v1alpha1): Activation, PackageInstance.
# Generated from crates/kix-api (also printed by `kix crds`); do not edit.
# Regenerate with: UPDATE_CRDS=1 cargo test -p kix-api
";

/// Both CRDs, Activation first, each annotated with its digest
/// ([`crate::ANNOTATION_DIGEST`], over the CRD without it): kix installs
/// them so, compares an installed CRD by it, and `kix crds` prints it, so
/// CRDs a platform applied with kubectl are not installed again by the
/// first deploy (which a tenant's account may not do).
pub fn crds() -> [CustomResourceDefinition; 2] {
    [Activation::crd(), PackageInstance::crd()].map(with_digest)
}

/// The digest `crd` carries, if any.
pub fn crd_digest(crd: &CustomResourceDefinition) -> Option<&str> {
    crd.metadata
        .annotations
        .as_ref()?
        .get(crate::ANNOTATION_DIGEST)
        .map(String::as_str)
}

fn with_digest(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    // The server adds defaults, so an installed spec is never compared
    // directly: the digest of what kix generates is.
    let digest = kix_manifest::canonical_digest(&serde_json::to_value(&crd).unwrap_or_default());
    crd.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(crate::ANNOTATION_DIGEST.to_string(), digest);
    crd
}

/// Both CRDs as one multi-document YAML stream (Activation first), preceded
/// by a comment header. Deterministic: the same types give the same bytes.
///
/// # Panics
///
/// Never in practice: a CRD is plain data and always serializes.
pub fn crds_yaml() -> String {
    let mut out = String::from(HEADER);
    for crd in crds() {
        out.push_str("---\n");
        #[allow(clippy::expect_used)]
        out.push_str(&serde_saphyr::to_string(&crd).expect("a CRD always serializes to YAML"));
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn committed_path() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds.yaml")
    }

    /// `deploy/crds.yaml` is exactly what the types produce (controller-rs
    /// style crdgen check). `UPDATE_CRDS=1 cargo test -p kix-api` rewrites it.
    #[test]
    fn committed_crds_yaml_is_up_to_date() {
        let path = committed_path();
        let shown = "deploy/crds.yaml";
        let generated = crds_yaml();
        if std::env::var_os("UPDATE_CRDS").is_some_and(|v| !v.is_empty() && v != "0") {
            std::fs::write(&path, &generated).unwrap_or_else(|e| panic!("writing {shown}: {e}"));
            return;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("reading {shown}: {e}\nregenerate it with: UPDATE_CRDS=1 cargo test -p kix-api")
        });
        assert!(
            committed == generated,
            "{shown} is out of date with the kix-api types.\n\
             Regenerate it with: UPDATE_CRDS=1 cargo test -p kix-api"
        );
    }

    #[test]
    fn crds_yaml_is_deterministic() {
        assert_eq!(crds_yaml(), crds_yaml());
    }

    #[test]
    fn crds_yaml_parses_back_to_the_crds() {
        let yaml = crds_yaml();
        let docs: Vec<&str> = yaml.split("\n---\n").skip(1).collect();
        assert_eq!(docs.len(), 2, "{yaml}");
        let parsed: Vec<CustomResourceDefinition> = docs
            .iter()
            .map(|doc| serde_saphyr::from_str(doc).unwrap_or_else(|e| panic!("{e}\n{doc}")))
            .collect();
        assert_eq!(parsed, crds());
        assert_eq!(
            parsed[0].metadata.name.as_deref(),
            Some("activations.kix.run")
        );
        assert_eq!(
            parsed[1].metadata.name.as_deref(),
            Some("packageinstances.kix.run")
        );
    }

    fn json(crd: &CustomResourceDefinition) -> serde_json::Value {
        serde_json::to_value(crd).unwrap_or_default()
    }

    fn columns(crd: &serde_json::Value) -> Vec<(String, String, i64)> {
        crd["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or_default().to_owned(),
                    c["jsonPath"].as_str().unwrap_or_default().to_owned(),
                    c["priority"].as_i64().unwrap_or(0),
                )
            })
            .collect()
    }

    #[test]
    fn activation_crd_shape() {
        let crd = json(&Activation::crd());
        let spec = &crd["spec"];
        assert_eq!(spec["group"], "kix.run");
        assert_eq!(spec["scope"], "Cluster");
        assert_eq!(spec["names"]["kind"], "Activation");
        assert_eq!(spec["names"]["plural"], "activations");
        assert_eq!(spec["names"]["shortNames"], serde_json::json!(["act"]));
        assert_eq!(spec["names"]["categories"], serde_json::json!(["kix"]));
        let version = &spec["versions"][0];
        assert_eq!(version["name"], "v1alpha1");
        assert_eq!(version["served"], true);
        assert_eq!(version["storage"], true);
        assert_eq!(version["subresources"]["status"], serde_json::json!({}));
        let wide: Vec<_> = columns(&crd)
            .into_iter()
            .filter(|(_, _, priority)| *priority == 0)
            .map(|(name, path, _)| (name, path))
            .collect();
        assert_eq!(
            wide,
            [
                ("Cluster", ".spec.cluster"),
                ("Phase", ".status.phase"),
                ("Path", ".spec.source.path"),
                ("Age", ".metadata.creationTimestamp"),
            ]
            .map(|(n, p)| (n.to_owned(), p.to_owned()))
        );
        let props = &version["schema"]["openAPIV3Schema"]["properties"];
        assert_eq!(
            props["spec"]["properties"]["engine"]["enum"],
            serde_json::json!(["local", "operator"])
        );
        let phase_enum = props["status"]["properties"]["phase"]["enum"].clone();
        for phase in crate::Phase::ALL {
            assert!(
                phase_enum
                    .as_array()
                    .is_some_and(|values| values.contains(&serde_json::json!(phase.as_str()))),
                "{phase} missing from {phase_enum}"
            );
        }
        assert_eq!(
            props["spec"]["properties"]["receipt"]["properties"]["time"]["format"],
            "date-time"
        );
    }

    #[test]
    fn package_instance_crd_shape() {
        let crd = json(&PackageInstance::crd());
        let spec = &crd["spec"];
        assert_eq!(crd["metadata"]["name"], "packageinstances.kix.run");
        assert_eq!(spec["scope"], "Cluster");
        assert_eq!(spec["names"]["kind"], "PackageInstance");
        assert_eq!(spec["names"]["shortNames"], serde_json::json!(["kpi"]));
        let version = &spec["versions"][0];
        assert_eq!(version["name"], "v1alpha1");
        assert_eq!(version["subresources"]["status"], serde_json::json!({}));
        let wide: Vec<_> = columns(&crd)
            .into_iter()
            .filter(|(_, _, priority)| *priority == 0)
            .map(|(name, _, _)| name)
            .collect();
        assert_eq!(wide, ["Cluster", "Package", "Version", "Phase", "Age"]);
    }

    /// The apiserver rejects a CRD whose schema is not structural (kube's
    /// rewriter handles most of it; this catches what it leaves behind) and
    /// warns about formats it does not know.
    #[test]
    fn schemas_are_structural() {
        fn walk(path: &str, schema: &serde_json::Value, problems: &mut Vec<String>) {
            let Some(obj) = schema.as_object() else {
                return;
            };
            for banned in ["$ref", "anyOf", "oneOf", "allOf", "definitions", "$defs"] {
                if obj.contains_key(banned) {
                    problems.push(format!("{path}: has {banned}"));
                }
            }
            if !obj.contains_key("type") && !obj.contains_key("x-kubernetes-int-or-string") {
                problems.push(format!("{path}: no type"));
            }
            // Formats the apiserver knows; anything else draws a warning.
            if let Some(format) = obj.get("format").and_then(|f| f.as_str())
                && !["date-time", "int32", "int64", "double", "float", "byte"].contains(&format)
            {
                problems.push(format!("{path}: unrecognized format {format}"));
            }
            if let Some(props) = obj.get("properties").and_then(|p| p.as_object()) {
                for (name, sub) in props {
                    walk(&format!("{path}.{name}"), sub, problems);
                }
            }
            if let Some(items) = obj.get("items") {
                walk(&format!("{path}[]"), items, problems);
            }
        }
        for crd in crds() {
            let crd = json(&crd);
            let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
            let mut problems = Vec::new();
            walk("", schema, &mut problems);
            assert!(problems.is_empty(), "{problems:#?}");
        }
    }
}
