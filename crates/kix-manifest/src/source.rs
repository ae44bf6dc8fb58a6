//! Where a package's objects came from: `source` in `package.json`, which
//! `kix.lib.helm.render` and `kix.lib.kustomize.build` record. Only shown
//! (`kix build`, `kix validate`); nothing is decided by it.
//!
//! ```json
//! "source": {"helm": {"chart": "cert-manager", "version": "v1.16.2", "repo": "https://charts.jetstack.io"}}
//! "source": {"kustomize": {"path": "k8s/overlays/prod"}}
//! ```

use std::fmt;

use serde::{Deserialize, Serialize};

/// Longest text of a source field: a chart name, a version, a URL.
const MAX_TEXT: usize = 1024;

/// The origin of a package, as the Nix library recorded it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum PackageSource {
    /// Rendered by `helm template` from a chart.
    Helm(HelmSource),
    /// Built by `kustomize build` from an overlay.
    Kustomize(KustomizeSource),
}

/// A chart by name and version, and the repository it was fetched from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelmSource {
    pub chart: SourceText,
    pub version: SourceText,
    /// The chart repository (`https://...`, `oci://...`) when fetched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<SourceText>,
}

/// An overlay by its path in the store (`k8s/overlays/prod`: the copied
/// directory's name and the path under it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KustomizeSource {
    pub path: SourceText,
}

/// A field of a source: non-empty, at most 1024 bytes, no control
/// characters (it is printed on terminals).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SourceText(String);

impl TryFrom<String> for SourceText {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        if text.is_empty() {
            return Err("source fields must not be empty".to_owned());
        }
        if text.len() > MAX_TEXT {
            return Err(format!(
                "source field of {} bytes (at most {MAX_TEXT})",
                text.len()
            ));
        }
        if text.chars().any(char::is_control) {
            return Err(format!("source field {text:?} holds control characters"));
        }
        Ok(SourceText(text))
    }
}

impl From<SourceText> for String {
    fn from(text: SourceText) -> String {
        text.0
    }
}

impl SourceText {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SourceText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `Helm chart cert-manager v1.16.2 (https://charts.jetstack.io)`,
/// `Kustomize overlay k8s/overlays/prod`.
impl fmt::Display for PackageSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PackageSource::Helm(helm) => {
                write!(f, "Helm chart {} {}", helm.chart, helm.version)?;
                match &helm.repo {
                    Some(repo) => write!(f, " ({repo})"),
                    None => Ok(()),
                }
            }
            PackageSource::Kustomize(k) => write!(f, "Kustomize overlay {}", k.path),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<PackageSource, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn a_chart_and_an_overlay_read_and_display() {
        let chart = parse(
            r#"{"helm":{"chart":"cert-manager","version":"v1.16.2","repo":"https://charts.jetstack.io"}}"#,
        )
        .expect("a fetched chart");
        assert_eq!(
            chart.to_string(),
            "Helm chart cert-manager v1.16.2 (https://charts.jetstack.io)"
        );
        let local = parse(r#"{"helm":{"chart":"hookdemo","version":"0.3.1"}}"#).expect("a chart");
        assert_eq!(local.to_string(), "Helm chart hookdemo 0.3.1");
        let overlay = parse(r#"{"kustomize":{"path":"k8s/overlays/prod"}}"#).expect("an overlay");
        assert_eq!(overlay.to_string(), "Kustomize overlay k8s/overlays/prod");
    }

    #[test]
    fn unknown_shapes_and_unprintable_text_are_refused() {
        let unknown = parse(r#"{"jsonnet":{"path":"x"}}"#).expect_err("unknown kind");
        assert!(unknown.contains("unknown variant `jsonnet`"), "{unknown}");
        let extra = parse(r#"{"helm":{"chart":"a","version":"1","url":"x"}}"#).expect_err("field");
        assert!(extra.contains("unknown field `url`"), "{extra}");
        let missing = parse(r#"{"helm":{"chart":"a"}}"#).expect_err("no version");
        assert!(missing.contains("missing field `version`"), "{missing}");
        let control = parse(r#"{"helm":{"chart":"a\u001b[2J","version":"1"}}"#).expect_err("esc");
        assert!(control.contains("control characters"), "{control}");
        let empty = parse(r#"{"kustomize":{"path":""}}"#).expect_err("empty");
        assert!(empty.contains("must not be empty"), "{empty}");
    }
}
