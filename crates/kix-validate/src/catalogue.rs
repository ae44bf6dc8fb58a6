//! The schemas of the built-in kinds of the Kubernetes releases kix knows,
//! generated from their source by `gen/gen-schemas` into
//! `schemas/k8s-<version>.json` and embedded in the binary.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::Value;

use crate::schema::{Arena, Flavor, NodeId, SchemaError};

/// The release validated against when neither the build's settings nor a
/// flag choose one: `K8S_VERSION` of `checks/versions.env`.
pub const DEFAULT_KUBERNETES_VERSION: &str = "v1.36.3";

/// The generated catalogues, by version.
const CATALOGUES: &[(&str, &str)] = &[("v1.36.3", include_str!("../schemas/k8s-v1.36.3.json"))];

/// The Kubernetes versions schemas are embedded for.
pub fn supported_versions() -> Vec<&'static str> {
    CATALOGUES.iter().map(|(v, _)| *v).collect()
}

/// The built-in kinds of one Kubernetes release.
#[derive(Debug)]
pub struct Catalogue {
    pub(crate) version: String,
    pub(crate) arena: Arena,
    /// `apps/v1/Deployment` → the model of that kind.
    kinds: HashMap<String, NodeId>,
    /// API groups that have built-in kinds (`""`, `apps`, ...).
    groups: Vec<String>,
    pub(crate) object_meta: NodeId,
}

/// Why no catalogue could be had for a version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogueError {
    #[error(
        "Kubernetes {version} is not supported for validation (supported: {}); generate its schemas with crates/kix-validate/gen/gen-schemas {version}, or skip validation",
        supported.join(", ")
    )]
    Unsupported {
        version: String,
        supported: Vec<String>,
    },
    #[error("the embedded schemas of Kubernetes {version} are broken: {message}")]
    Broken { version: String, message: String },
}

impl Catalogue {
    /// The catalogue of `version` (`v1.36.3`, `1.36.3`, or a minor release
    /// `v1.36` meaning its supported patch release). Parsed once per process.
    pub fn get(version: &str) -> Result<&'static Catalogue, CatalogueError> {
        static LOADED: OnceLock<Vec<OnceLock<Result<Catalogue, CatalogueError>>>> = OnceLock::new();
        let wanted = if version.starts_with('v') {
            version.to_owned()
        } else {
            format!("v{version}")
        };
        let index = CATALOGUES
            .iter()
            .position(|(v, _)| *v == wanted)
            .or_else(|| {
                CATALOGUES
                    .iter()
                    .position(|(v, _)| v.starts_with(&format!("{wanted}.")))
            })
            .ok_or_else(|| CatalogueError::Unsupported {
                version: version.to_owned(),
                supported: supported_versions().iter().map(|v| v.to_string()).collect(),
            })?;
        let slots = LOADED.get_or_init(|| CATALOGUES.iter().map(|_| OnceLock::new()).collect());
        let (name, text) = CATALOGUES[index];
        slots[index]
            .get_or_init(|| {
                Catalogue::parse(text).map_err(|message| CatalogueError::Broken {
                    version: name.to_owned(),
                    message,
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The version these schemas are of.
    pub fn version(&self) -> &str {
        &self.version
    }

    fn parse(text: &str) -> Result<Catalogue, String> {
        let doc: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let version = doc
            .get("kubernetesVersion")
            .and_then(Value::as_str)
            .ok_or("no kubernetesVersion")?
            .to_owned();
        let mut arena = Arena::new(Flavor::BuiltIn);
        let definitions = doc
            .get("definitions")
            .and_then(Value::as_object)
            .ok_or("no definitions")?;
        for (name, schema) in definitions {
            arena
                .add_model(name, schema)
                .map_err(|e: SchemaError| e.to_string())?;
        }
        arena.resolve_refs().map_err(|e| e.to_string())?;
        let mut kinds = HashMap::new();
        let mut groups: Vec<String> = Vec::new();
        for (gvk, model) in doc
            .get("kinds")
            .and_then(Value::as_object)
            .ok_or("no kinds")?
        {
            let model = model.as_str().ok_or("a kind's model must be a string")?;
            let id = arena
                .model(model)
                .ok_or_else(|| format!("kind {gvk}: no model {model}"))?;
            kinds.insert(gvk.clone(), id);
            let group = gvk.rsplitn(3, '/').nth(2).unwrap_or("").to_owned();
            if !groups.contains(&group) {
                groups.push(group);
            }
        }
        let object_meta = arena
            .model("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
            .ok_or("no ObjectMeta")?;
        Ok(Catalogue {
            version,
            arena,
            kinds,
            groups,
            object_meta,
        })
    }

    /// The schema of a built-in kind (`apiVersion` as in manifests).
    pub(crate) fn kind(&self, api_version: &str, kind: &str) -> Option<NodeId> {
        self.kinds.get(&format!("{api_version}/{kind}")).copied()
    }

    /// Whether `group` is one of the release's own API groups (a kind of it
    /// that the catalogue lacks is not served).
    pub(crate) fn has_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}
