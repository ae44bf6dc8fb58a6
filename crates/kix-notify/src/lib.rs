//! kix's notifications (#48, point 2): one message per change of an
//! Activation's phase (and per deletion held by the budget, drift fight and
//! stuck deletion) to where people already look:
//!
//! | target | request |
//! |---|---|
//! | generic webhook | `POST url`, the [`Notice`] as JSON |
//! | Slack-compatible webhook | `POST url`, `{"text": …}` |
//! | GitHub commit status | `POST {api}/repos/{owner}/{repo}/statuses/{sha}` |
//! | GitLab commit status | `POST {api}/projects/{project}/statuses/{sha}` |
//!
//! A commit status needs the build's source revision (the flake's
//! `self.rev`); a notice without one sends none. What is sent holds what a
//! record holds (cluster, record, store path, version, plan digest, a
//! link): never a secret value, and the tokens and webhook URLs (a Slack
//! URL is itself a credential) appear in no error or log.
//!
//! [`deliver`] retries what may succeed later (connection errors, 5xx,
//! 429) with exponential backoff and gives up on what will not (other
//! 4xx). Exactly-once across restarts is the caller's: the operator records
//! what was sent on the record before it is sent again. Which notices go
//! where is an alerts file ([`Alerts`]), its credentials Secret keys.

mod config;
mod payload;

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use config::{Alert, Alerts, ConfigError, SecretKey, TargetSpec};
pub use payload::{Request, github_status_problem, request};
/// The HTTP client deliveries take ([`http_client`]).
pub use reqwest::Client as HttpClient;

/// What happened to a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Event {
    Applying,
    Active,
    Degraded,
    Failed,
    /// Pruning waits: more deletions than the budget allows.
    DeletionsHeld,
    /// Something else keeps writing fields the record applies.
    DriftFight,
    /// An object pruned is still there (a finalizer holds it).
    StuckDeletion,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Event::Applying => "Applying",
            Event::Active => "Active",
            Event::Degraded => "Degraded",
            Event::Failed => "Failed",
            Event::DeletionsHeld => "DeletionsHeld",
            Event::DriftFight => "DriftFight",
            Event::StuckDeletion => "StuckDeletion",
        })
    }
}

/// One message: what a record says, and where to look.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Notice {
    pub event: Event,
    /// The Kix cluster.
    pub cluster: String,
    /// The Activation record.
    pub record: String,
    /// The record's message (already free of secret values).
    pub message: String,
    /// The build's store path.
    pub store_path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The source revision the build was made from (a commit SHA).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    pub plan_digest: String,
    /// The record's page in the web view.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

/// A credential: shown as `<redacted>` by Debug, never serialized.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Where notices go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Any HTTP endpoint: the notice as JSON.
    Webhook { url: Secret },
    /// Slack's incoming webhooks, and those that take their payload.
    Slack { url: Secret },
    /// GitHub's commit statuses (`api`: `https://api.github.com` or a GitHub
    /// Enterprise `/api/v3`), for `repository` `owner/name`.
    GitHub {
        api: String,
        repository: String,
        token: Secret,
    },
    /// GitLab's commit statuses (`api`: `https://gitlab.com/api/v4`), for a
    /// project id or `group/name` path.
    GitLab {
        api: String,
        project: String,
        token: Secret,
    },
}

impl Target {
    /// Names the target without its credentials (for errors and logs).
    pub fn describe(&self) -> String {
        match self {
            Target::Webhook { .. } => "a webhook".to_string(),
            Target::Slack { .. } => "a Slack webhook".to_string(),
            Target::GitHub { repository, .. } => format!("GitHub commit statuses of {repository}"),
            Target::GitLab { project, .. } => {
                format!("GitLab commit statuses of project {project}")
            }
        }
    }
}

/// Why a notice was not delivered.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// An answer that will not change with a retry (4xx but 429).
    #[error("{target} refused the notice: HTTP {status}")]
    Refused { target: String, status: u16 },
    /// Still failing after every attempt.
    #[error("{target} did not take the notice after {attempts} attempts: {last}")]
    GaveUp {
        target: String,
        attempts: u32,
        last: String,
    },
}

/// How often and how patiently to try.
#[derive(Clone, Debug)]
pub struct Retry {
    pub attempts: u32,
    pub first_wait: Duration,
    pub longest_wait: Duration,
    /// Each attempt's own limit.
    pub timeout: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            attempts: 8,
            first_wait: Duration::from_secs(1),
            longest_wait: Duration::from_secs(60),
            timeout: Duration::from_secs(10),
        }
    }
}

/// Sends `request` (from [`request`]), retrying with backoff. Returns the
/// attempts it took.
pub async fn deliver(
    http: &reqwest::Client,
    target: &Target,
    request: &Request,
    retry: &Retry,
) -> Result<u32, DeliveryError> {
    let mut wait = retry.first_wait;
    let mut last = String::new();
    for attempt in 1..=retry.attempts.max(1) {
        match send(http, request, retry.timeout).await {
            Ok(()) => return Ok(attempt),
            Err(Failure::Permanent(status)) => {
                return Err(DeliveryError::Refused {
                    target: target.describe(),
                    status,
                });
            }
            Err(Failure::Transient(why)) => {
                tracing::debug!(target = %target.describe(), attempt, "notice not taken: {why}");
                last = why;
            }
        }
        if attempt < retry.attempts {
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(retry.longest_wait);
        }
    }
    Err(DeliveryError::GaveUp {
        target: target.describe(),
        attempts: retry.attempts.max(1),
        last,
    })
}

enum Failure {
    Permanent(u16),
    Transient(String),
}

async fn send(http: &reqwest::Client, request: &Request, timeout: Duration) -> Result<(), Failure> {
    let mut builder = http
        .post(request.url.expose())
        .timeout(timeout)
        .json(&request.body);
    for (name, value) in &request.headers {
        builder = builder.header(name.as_str(), value.expose());
    }
    // `without_url`: the URL may be the credential (a Slack webhook).
    let response = builder
        .send()
        .await
        .map_err(|e| Failure::Transient(e.without_url().to_string()))?;
    let status = response.status();
    if status.is_success() {
        Ok(())
    } else if status.as_u16() == 429 || status.is_server_error() {
        Err(Failure::Transient(format!("HTTP {}", status.as_u16())))
    } else {
        Err(Failure::Permanent(status.as_u16()))
    }
}

/// The client every delivery shares (one connection pool).
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .user_agent(concat!("kix/", env!("CARGO_PKG_VERSION")))
        .build()
        .unwrap_or_default()
}
