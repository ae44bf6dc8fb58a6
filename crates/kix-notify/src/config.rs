//! The alerts an operator sends: a JSON file (`kix-operator --alerts FILE`,
//! written by the NixOS module or mounted from a ConfigMap). Credentials are
//! never in it: each names a key of a Secret in the operator's namespace,
//! read by the operator each time it sends a notice.
//!
//! ```json
//! {"alerts": [
//!   {"name": "chat", "events": ["Active", "Degraded", "Failed"],
//!    "target": {"slack": {"urlSecret": {"name": "kix-alerts", "key": "slack"}}}},
//!   {"name": "pull-requests", "clusters": ["web"],
//!    "target": {"github": {"repository": "acme/infra",
//!                          "tokenSecret": {"name": "kix-alerts", "key": "github"}}}}
//! ]}
//! ```

use std::collections::BTreeSet;

use serde::Deserialize;

use crate::{Event, Secret, Target};

/// A key of a Secret in the operator's namespace, or in `namespace`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretKey {
    pub name: String,
    pub key: String,
    #[serde(default)]
    pub namespace: Option<String>,
}

/// The alerts file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Alerts {
    pub alerts: Vec<Alert>,
}

/// One alert: which notices, where to.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Alert {
    pub name: String,
    /// The events sent; none given: all of them.
    #[serde(default)]
    pub events: Vec<Event>,
    /// The Kix clusters whose records are sent; none given: all.
    #[serde(default)]
    pub clusters: Vec<String>,
    pub target: TargetSpec,
}

/// Where an alert goes, credentials by reference.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum TargetSpec {
    Webhook {
        #[serde(rename = "urlSecret")]
        url_secret: SecretKey,
    },
    Slack {
        #[serde(rename = "urlSecret")]
        url_secret: SecretKey,
    },
    #[serde(rename = "github")]
    GitHub {
        repository: String,
        #[serde(default = "github_api")]
        api: String,
        #[serde(rename = "tokenSecret")]
        token_secret: SecretKey,
    },
    #[serde(rename = "gitlab")]
    GitLab {
        project: String,
        #[serde(default = "gitlab_api")]
        api: String,
        #[serde(rename = "tokenSecret")]
        token_secret: SecretKey,
    },
}

fn github_api() -> String {
    "https://api.github.com".to_string()
}

fn gitlab_api() -> String {
    "https://gitlab.com/api/v4".to_string()
}

/// Why an alerts file is refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}: {message}")]
    Invalid { file: String, message: String },
}

impl Alerts {
    /// Reads an alerts file's text; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<Alerts, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            file: file.to_string(),
            message,
        };
        let alerts: Alerts = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let mut names = BTreeSet::new();
        for alert in &alerts.alerts {
            if alert.name.trim().is_empty() {
                return Err(invalid("an alert without a name".into()));
            }
            if !names.insert(alert.name.as_str()) {
                return Err(invalid(format!("two alerts named {:?}", alert.name)));
            }
            if let Some(problem) = alert.target.problem() {
                return Err(invalid(format!("alert {:?}: {problem}", alert.name)));
            }
        }
        Ok(alerts)
    }

    /// Every Secret key the alerts read.
    pub fn secret_keys(&self) -> Vec<&SecretKey> {
        self.alerts.iter().map(|a| a.target.secret_key()).collect()
    }
}

impl Alert {
    /// Whether this alert sends `event` of Kix cluster `cluster`.
    pub fn wants(&self, event: Event, cluster: &str) -> bool {
        (self.events.is_empty() || self.events.contains(&event))
            && (self.clusters.is_empty() || self.clusters.iter().any(|c| c == cluster))
    }
}

impl TargetSpec {
    /// The Secret key holding this target's credential.
    pub fn secret_key(&self) -> &SecretKey {
        match self {
            TargetSpec::Webhook { url_secret } | TargetSpec::Slack { url_secret } => url_secret,
            TargetSpec::GitHub { token_secret, .. } | TargetSpec::GitLab { token_secret, .. } => {
                token_secret
            }
        }
    }

    fn problem(&self) -> Option<String> {
        let key = self.secret_key();
        if key.name.is_empty() || key.key.is_empty() {
            return Some("a Secret reference needs a name and a key".into());
        }
        match self {
            TargetSpec::GitHub {
                repository, api, ..
            } => (repository.split('/').count() != 2
                || repository.starts_with('/')
                || repository.ends_with('/'))
            .then(|| format!("repository {repository:?} is not OWNER/NAME"))
            .or_else(|| https(api)),
            TargetSpec::GitLab { project, api, .. } => project
                .is_empty()
                .then(|| "an empty project".to_string())
                .or_else(|| https(api)),
            TargetSpec::Webhook { .. } | TargetSpec::Slack { .. } => None,
        }
    }

    /// The target, with `secret` giving each referenced Secret key's value.
    pub fn target<E>(&self, secret: impl Fn(&SecretKey) -> Result<String, E>) -> Result<Target, E> {
        let value = Secret::new(secret(self.secret_key())?.trim().to_string());
        Ok(match self {
            TargetSpec::Webhook { .. } => Target::Webhook { url: value },
            TargetSpec::Slack { .. } => Target::Slack { url: value },
            TargetSpec::GitHub {
                repository, api, ..
            } => Target::GitHub {
                api: api.clone(),
                repository: repository.clone(),
                token: value,
            },
            TargetSpec::GitLab { project, api, .. } => Target::GitLab {
                api: api.clone(),
                project: project.clone(),
                token: value,
            },
        })
    }
}

/// A token is sent to this API: never in clear text but to loopback.
fn https(api: &str) -> Option<String> {
    let loopback = ["http://127.0.0.1", "http://localhost", "http://[::1]"];
    (!api.starts_with("https://") && !loopback.iter().any(|l| api.starts_with(l)))
        .then(|| format!("api {api:?} is not https:// (a token would be sent in clear text)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"alerts": [
      {"name": "chat", "events": ["Active", "Degraded", "Failed"],
       "target": {"slack": {"urlSecret": {"name": "kix-alerts", "key": "slack"}}}},
      {"name": "prs", "clusters": ["web"],
       "target": {"github": {"repository": "acme/infra", "tokenSecret": {"name": "kix-alerts", "key": "github"}}}}
    ]}"#;

    #[test]
    fn alerts_read_with_their_secrets_by_reference() {
        let alerts = Alerts::parse("alerts.json", GOOD).expect("valid");
        assert_eq!(alerts.alerts.len(), 2);
        let chat = &alerts.alerts[0];
        assert!(chat.wants(Event::Failed, "any") && !chat.wants(Event::Applying, "any"));
        let prs = &alerts.alerts[1];
        assert!(prs.wants(Event::Applying, "web") && !prs.wants(Event::Active, "db"));
        let target = prs
            .target
            .target(|k| Ok::<_, ()>(format!("value of {}/{}\n", k.name, k.key)))
            .expect("resolved");
        assert_eq!(
            target,
            Target::GitHub {
                api: "https://api.github.com".into(),
                repository: "acme/infra".into(),
                token: Secret::new("value of kix-alerts/github"),
            }
        );
    }

    #[test]
    fn a_bad_file_is_refused_naming_the_file_and_alert() {
        for (text, expected) in [
            (
                r#"{"alerts": [{"name": "a", "events": ["Bogus"], "target": {"slack": {"urlSecret": {"name": "s", "key": "k"}}}}]}"#,
                "Bogus",
            ),
            (
                r#"{"alerts": [{"name": "a", "target": {"slack": {"url": "https://hooks.slack.com/x"}}}]}"#,
                "url",
            ),
            (
                r#"{"alerts": [{"name": "a", "target": {"webhook": {"urlSecret": {"name": "s", "key": "k"}}}}, {"name": "a", "target": {"webhook": {"urlSecret": {"name": "s", "key": "k"}}}}]}"#,
                "two alerts named \"a\"",
            ),
            (
                r#"{"alerts": [{"name": "gh", "target": {"github": {"repository": "infra", "tokenSecret": {"name": "s", "key": "k"}}}}]}"#,
                "alert \"gh\": repository \"infra\" is not OWNER/NAME",
            ),
            (
                r#"{"alerts": [{"name": "gl", "target": {"gitlab": {"project": "1", "api": "http://gitlab.example/api/v4", "tokenSecret": {"name": "s", "key": "k"}}}}]}"#,
                "clear text",
            ),
            (
                r#"{"alerts": [{"name": "w", "target": {"webhook": {"urlSecret": {"name": "", "key": "k"}}}}]}"#,
                "needs a name and a key",
            ),
        ] {
            let err = Alerts::parse("/etc/kix/alerts.json", text)
                .expect_err(text)
                .to_string();
            assert!(err.starts_with("/etc/kix/alerts.json: "), "{err}");
            assert!(err.contains(expected), "{expected:?} not in {err}");
        }
    }
}
