//! Validating a whole build: every object, every violation, each named by
//! file, document, object and JSON path.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::PathBuf;

use kix_manifest::{Build, Object, PackageSource};
use serde::Serialize;

use crate::catalogue::{Catalogue, CatalogueError, DEFAULT_KUBERNETES_VERSION};
use crate::{Outcome, Validator};

/// The setting of `kix.json` that names the cluster's Kubernetes version.
pub const VERSION_SETTING: &str = "kubernetesVersion";

/// The Kubernetes version a build asks to be validated against: its
/// `kubernetesVersion` setting, if it is a string.
pub fn kubernetes_version_of(build: &Build) -> Option<&str> {
    build.settings.extra.get(VERSION_SETTING)?.as_str()
}

/// One violation in one object of a build.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// The package the object belongs to.
    pub package: String,
    /// The resource file, relative to the tree root.
    pub file: PathBuf,
    /// Its document in the file, from 1.
    pub document: usize,
    /// The line the document starts on (YAML files).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// `Deployment.apps web/frontend`.
    pub object: String,
    /// `spec.replicas`; empty for the object as a whole.
    pub path: String,
    /// What is wrong: `expected integer, got string "3"`.
    pub message: String,
}

/// `packages/web/resources/app.yaml:12 (document 2) Deployment.apps web/frontend: spec.replicas: expected integer, got string "3"`
impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        write!(f, " (document {}) {}: ", self.document, self.object)?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

/// What could not be checked offline.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase", tag = "reason")]
pub enum Unchecked {
    /// Objects of a kind that is neither built in nor defined by a CRD of
    /// the build (`Foo.example.com`).
    UnknownKind { kind: String, objects: usize },
    /// CEL rules (`x-kubernetes-validations`) of a CRD of the build.
    CelRules {
        crd: String,
        rules: usize,
        objects: usize,
    },
}

impl fmt::Display for Unchecked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unchecked::UnknownKind { kind, objects } => write!(
                f,
                "{objects} {kind} object(s): no CRD in the build and not a built-in kind; the server checks them at plan time"
            ),
            Unchecked::CelRules {
                crd,
                rules,
                objects,
            } => write!(
                f,
                "{rules} x-kubernetes-validations rule(s) of CustomResourceDefinition {crd} ({objects} object(s)): CEL is not evaluated offline; the server checks them at plan time"
            ),
        }
    }
}

/// The outcome of validating a build.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub kubernetes_version: String,
    pub objects: usize,
    /// Custom resource kinds the build defines (one per CRD version).
    pub custom_kinds: usize,
    /// In dependency order.
    pub packages: Vec<PackageCheck>,
    /// By file, then document.
    pub findings: Vec<Finding>,
    pub unchecked: Vec<Unchecked>,
}

/// One package of a validated build: where it came from and how it fared.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PackageCheck {
    pub name: String,
    pub version: String,
    /// The Helm chart or Kustomize overlay it came from, when the build
    /// says (`source` in `package.json`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<PackageSource>,
    pub objects: usize,
    /// How many of the report's findings are in this package.
    pub findings: usize,
}

/// `certs (Helm chart cert-manager v1.16.2): 12 object(s) valid`,
/// `... : 2 schema error(s) in 12 object(s)`.
impl fmt::Display for PackageCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.name, self.version)?;
        if let Some(source) = &self.source {
            write!(f, " ({source})")?;
        }
        match self.findings {
            0 => write!(f, ": {} object(s) valid", self.objects),
            n => write!(f, ": {n} schema error(s) in {} object(s)", self.objects),
        }
    }
}

impl Report {
    pub fn is_valid(&self) -> bool {
        self.findings.is_empty()
    }
}

/// Validates every object of `build` against Kubernetes `version` (default:
/// the build's `kubernetesVersion` setting, else
/// [`DEFAULT_KUBERNETES_VERSION`]) and the build's CRDs.
pub fn validate_build(build: &Build, version: Option<&str>) -> Result<Report, CatalogueError> {
    let version = version
        .or_else(|| kubernetes_version_of(build))
        .unwrap_or(DEFAULT_KUBERNETES_VERSION);
    let catalogue = Catalogue::get(version)?;
    let (validator, crd_errors) = Validator::new(catalogue, build.objects());
    let mut findings = Vec::new();
    let mut lines = Lines::default();
    for error in crd_errors {
        if let Some((package, crd)) = objects_of(build).find(|(_, o)| {
            o.key.group_kind() == kix_manifest::group_kind::CUSTOM_RESOURCE_DEFINITION
                && o.key.name == error.crd
        }) {
            findings.push(finding(
                &mut lines,
                build,
                (package, crd),
                format!(
                    "spec.versions[{}].schema.{}",
                    error.version, error.source.path
                ),
                error.source.message,
            ));
        }
    }
    let mut unknown: BTreeMap<String, usize> = BTreeMap::new();
    let mut cel: BTreeMap<(String, usize), usize> = BTreeMap::new();
    for (package, object) in objects_of(build) {
        let manifest = object.manifest();
        match validator.validate(&manifest) {
            Outcome::Checked(violations) => {
                for v in violations {
                    let message = v.problem.to_string();
                    findings.push(finding(
                        &mut lines,
                        build,
                        (package, object),
                        v.path,
                        message,
                    ));
                }
                if let Some((crd, rules)) = validator.rules_of(&manifest) {
                    *cel.entry((crd.to_owned(), rules)).or_default() += 1;
                }
            }
            Outcome::UnknownKind => {
                let kind = format!("{} ({})", object.key.group_kind(), object.api_version);
                *unknown.entry(kind).or_default() += 1;
            }
        }
    }
    // As the files read, not in apply order; an object's own findings keep
    // their order (the walk's, which follows the manifest's).
    findings.sort_by(|a, b| (&a.file, a.document).cmp(&(&b.file, b.document)));
    let unchecked = unknown
        .into_iter()
        .map(|(kind, objects)| Unchecked::UnknownKind { kind, objects })
        .chain(
            cel.into_iter()
                .map(|((crd, rules), objects)| Unchecked::CelRules {
                    crd,
                    rules,
                    objects,
                }),
        )
        .collect();
    Ok(Report {
        kubernetes_version: catalogue.version().to_owned(),
        objects: build.object_count(),
        custom_kinds: validator.custom_kind_count(),
        packages: package_checks(build, &findings),
        findings,
        unchecked,
    })
}

/// Every object with the name of its package.
fn objects_of(build: &Build) -> impl Iterator<Item = (&str, &Object)> {
    (build.packages.iter()).flat_map(|p| p.objects.iter().map(move |o| (p.name.as_str(), o)))
}

fn package_checks(build: &Build, findings: &[Finding]) -> Vec<PackageCheck> {
    build
        .packages
        .iter()
        .map(|p| PackageCheck {
            name: p.name.clone(),
            version: p.version.clone(),
            source: build.sources.get(&p.name).cloned(),
            objects: p.objects.len(),
            findings: findings.iter().filter(|f| f.package == p.name).count(),
        })
        .collect()
}

fn finding(
    lines: &mut Lines,
    build: &Build,
    (package, object): (&str, &Object),
    path: String,
    message: String,
) -> Finding {
    Finding {
        package: package.to_owned(),
        file: object.source.clone(),
        document: object.document,
        line: lines.of(build, object),
        object: object.key.to_string(),
        path,
        message,
    }
}

/// Where documents start, found again from their files (only for objects
/// with findings: the tree reader does not keep lines), once per document.
#[derive(Default)]
struct Lines(HashMap<(PathBuf, usize), Option<u32>>);

impl Lines {
    fn of(&mut self, build: &Build, object: &Object) -> Option<u32> {
        let key = (object.source.clone(), object.document);
        *self.0.entry(key).or_insert_with(|| {
            let is_yaml = object
                .source
                .extension()
                .is_some_and(|e| e == "yaml" || e == "yml");
            if !is_yaml {
                return None;
            }
            let bytes = std::fs::read(build.root.join(&object.source)).ok()?;
            kix_manifest::tree::yaml_document_line(&bytes, object.document)
        })
    }
}
