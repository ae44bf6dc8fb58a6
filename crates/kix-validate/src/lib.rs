//! kix-validate: checks a kix build without a cluster. Built-in kinds are
//! checked against the schemas of a Kubernetes release (generated from its
//! source, see [`catalogue`]); custom resources against the structural
//! schemas of the CRDs in the same build. Unknown fields are errors, as the
//! apiserver's strict field validation makes them. Pure: no network, no
//! Kubernetes client, no async.
//!
//! # Why a validator of its own
//!
//! JSON-schema crates (`jsonschema`, `boon`) validate draft 4..2020-12
//! documents. What the apiserver checks is not quite that: Kubernetes'
//! extensions (`x-kubernetes-int-or-string`, `-preserve-unknown-fields`,
//! `-embedded-resource`, `-list-type`/`-list-map-keys` uniqueness with
//! defaulted keys), null pruned unless `nullable`, required fields met by a
//! default, Go's integer widths and quantities for built-in kinds, and
//! unknown fields as errors everywhere except under preserve-unknown-fields
//! (which JSON Schema spells as `additionalProperties: false` on every
//! level, changing the schemas). Expressing that through a general crate
//! means rewriting every schema and still post-processing its errors into
//! kubectl-style paths and suggestions. The structural-schema subset is
//! small, so [`schema`](crate) compiles it into an arena and one walk
//! ([`check`](crate)) checks it, collecting every violation.
//!
//! CEL rules (`x-kubernetes-validations`) are not evaluated: they need
//! Kubernetes' CEL libraries (quantities, URLs, `format.named`, transition
//! rules), which no Rust CEL crate has; [`Report::unchecked`] lists them.
//!
//! # Where things are
//!
//! `catalogue.rs` (the release schemas), `schema.rs` (a schema and a CRD's
//! structural schema), `check.rs` (an object against a schema),
//! `formats.rs`, `report.rs`.

mod catalogue;
mod check;
mod formats;
mod report;
mod schema;

pub use catalogue::{Catalogue, CatalogueError, DEFAULT_KUBERNETES_VERSION, supported_versions};
pub use check::{Problem, Violation};
pub use report::{Finding, PackageCheck, Report, Unchecked, kubernetes_version_of, validate_build};
pub use schema::SchemaError;

use std::collections::HashMap;

use kix_manifest::Object;
use serde_json::Value;

use crate::check::Walker;
use crate::schema::{Arena, Flavor, NodeId};

/// How one object was checked.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Checked; these are its violations (none: valid).
    Checked(Vec<Violation>),
    /// Its kind is neither built in nor defined by a CRD of the build (a CRD
    /// installed in the cluster by others, an aggregated API).
    UnknownKind,
}

/// Validates objects against one Kubernetes release and a set of CRDs.
#[derive(Debug)]
pub struct Validator {
    catalogue: &'static Catalogue,
    crds: Arena,
    /// `group/version/kind` → schema root of that CRD version.
    custom_kinds: HashMap<String, CustomKind>,
    /// `group/kind` → the CRD defining it, whatever the version.
    custom_group_kinds: HashMap<String, String>,
}

#[derive(Debug, Clone)]
struct CustomKind {
    root: Option<NodeId>,
    /// The CRD's name, for messages.
    crd: String,
    /// How many CEL rules its schema has.
    rules: usize,
}

/// A CRD of the build whose schema cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("CustomResourceDefinition {crd} version {version}: {source}")]
pub struct CrdError {
    pub crd: String,
    pub version: String,
    pub source: SchemaError,
}

impl Validator {
    /// A validator for `catalogue` and the CRDs among `objects`. A CRD whose
    /// schema cannot be compiled (bad pattern, ...) is reported in the
    /// second value; its custom resources are then checked as unknown kinds.
    pub fn new<'a>(
        catalogue: &'static Catalogue,
        objects: impl IntoIterator<Item = &'a Object>,
    ) -> (Validator, Vec<CrdError>) {
        let mut validator = Validator {
            catalogue,
            crds: Arena::new(Flavor::Custom),
            custom_kinds: HashMap::new(),
            custom_group_kinds: HashMap::new(),
        };
        let mut errors = Vec::new();
        for object in objects {
            if object.key.group_kind() == kix_manifest::group_kind::CUSTOM_RESOURCE_DEFINITION {
                validator.add_crd(&object.manifest(), &object.key.name, &mut errors);
            }
        }
        (validator, errors)
    }

    fn add_crd(&mut self, crd: &Value, name: &str, errors: &mut Vec<CrdError>) {
        let spec = &crd["spec"];
        let (Some(group), Some(kind)) = (spec["group"].as_str(), spec["names"]["kind"].as_str())
        else {
            return; // the CRD's own validation reports it
        };
        self.custom_group_kinds
            .insert(format!("{group}/{kind}"), name.to_owned());
        for version in spec["versions"].as_array().into_iter().flatten() {
            let Some(version_name) = version["name"].as_str() else {
                continue;
            };
            let first_node = self.crds.len();
            let root = match version["schema"].get("openAPIV3Schema") {
                None => None,
                Some(schema) => match self.crds.add(schema, "openAPIV3Schema") {
                    Ok(id) => Some(id),
                    Err(source) => {
                        errors.push(CrdError {
                            crd: name.to_owned(),
                            version: version_name.to_owned(),
                            source,
                        });
                        continue;
                    }
                },
            };
            self.custom_kinds.insert(
                format!("{group}/{version_name}/{kind}"),
                CustomKind {
                    root,
                    crd: name.to_owned(),
                    rules: self.crds.rules_since(first_node),
                },
            );
        }
    }

    /// The Kubernetes version of the built-in schemas.
    pub fn kubernetes_version(&self) -> &str {
        self.catalogue.version()
    }

    /// Checks one manifest (`apiVersion` and `kind` as in it).
    pub fn validate(&self, manifest: &Value) -> Outcome {
        let api_version = manifest["apiVersion"].as_str().unwrap_or_default();
        let kind = manifest["kind"].as_str().unwrap_or_default();
        let group = kix_manifest::group_of(api_version).unwrap_or_default();
        let mut out = Vec::new();
        let meta = (&self.catalogue.arena, self.catalogue.object_meta);
        if let Some(root) = self.catalogue.kind(api_version, kind) {
            Walker {
                arena: &self.catalogue.arena,
                object_meta: Some(meta),
                out: &mut out,
                strict: true,
                identity_at_root: false,
            }
            .check(root, manifest, &mut String::new());
        } else if let Some(custom) = self.custom_kinds.get(&format!("{api_version}/{kind}")) {
            self.check_custom(custom, manifest, &mut out);
        } else if let Some(crd) = self.custom_group_kinds.get(&format!("{group}/{kind}")) {
            out.push(Violation {
                path: String::new(),
                problem: Problem::NotServedByCrd {
                    api_version: api_version.to_owned(),
                    kind: kind.to_owned(),
                    crd: crd.clone(),
                },
            });
        } else if self.catalogue.has_group(group) {
            out.push(Violation {
                path: String::new(),
                problem: Problem::NotServed {
                    api_version: api_version.to_owned(),
                    kind: kind.to_owned(),
                    kubernetes: self.catalogue.version().to_owned(),
                },
            });
        } else {
            return Outcome::UnknownKind;
        }
        Outcome::Checked(out)
    }

    /// A custom resource: metadata as ObjectMeta, the rest against the CRD.
    fn check_custom(&self, custom: &CustomKind, manifest: &Value, out: &mut Vec<Violation>) {
        let meta = (&self.catalogue.arena, self.catalogue.object_meta);
        if let Some(metadata) = manifest.get("metadata") {
            Walker {
                arena: meta.0,
                object_meta: Some(meta),
                out: &mut *out,
                strict: true,
                identity_at_root: false,
            }
            .check(meta.1, metadata, &mut "metadata".to_owned());
        }
        let Some(root) = custom.root else { return };
        Walker {
            arena: &self.crds,
            object_meta: Some(meta),
            out,
            strict: true,
            identity_at_root: false,
        }
        .check_resource_root(root, manifest);
    }

    /// The CRD `manifest` is checked against and how many CEL rules its
    /// schema has, when it has some.
    pub(crate) fn rules_of(&self, manifest: &Value) -> Option<(&str, usize)> {
        let api_version = manifest["apiVersion"].as_str()?;
        let kind = manifest["kind"].as_str()?;
        let custom = self.custom_kinds.get(&format!("{api_version}/{kind}"))?;
        (custom.rules > 0).then_some((custom.crd.as_str(), custom.rules))
    }
}

impl Validator {
    /// How many custom resource kinds (CRD versions) the build defines.
    pub fn custom_kind_count(&self) -> usize {
        self.custom_kinds.len()
    }
}
