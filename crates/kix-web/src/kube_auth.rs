//! The operator's [`Authorizer`]: the apiserver says who a viewer is
//! (TokenReview of their bearer token, or an authenticating proxy's headers
//! when the operator is told to trust them) and what they may read
//! (SubjectAccessReview). The web view holds no rules of its own.
//!
//! A viewer sees a record when the apiserver lets them `get` Activations
//! (records are cluster-scoped), or, for a tenant's record, when it lets
//! them `get` the tenant's ServiceAccount in the tenant's namespace: what
//! the `view` role in that namespace grants, so a team that can look at its
//! namespace can look at its deploys, and no one else's.
//!
//! Answers are kept for [`KEEP_FOR`] per viewer, so a page of hundreds of
//! records costs one review per tenant, not one per record.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kix_api::Activation;
use kube::Client;
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};

use crate::auth::{Authorizer, BoxFuture, Denied, Viewer};

/// How long an answer of the apiserver is used before it is asked again.
pub const KEEP_FOR: Duration = Duration::from_secs(10);
/// Answers kept at most (all are dropped when more would be kept).
const KEPT_AT_MOST: usize = 10_000;

/// The headers of an authenticating proxy in front of the web view.
#[derive(Debug, Clone)]
pub struct ProxyHeaders {
    /// The header naming the user, e.g. `X-Remote-User`.
    pub user: String,
    /// The header (repeated, or comma-separated) naming their groups, e.g.
    /// `X-Remote-Group`.
    pub groups: String,
}

/// Who may see what, asked of the apiserver with the operator's client
/// (which needs `create` on tokenreviews and subjectaccessreviews).
pub struct KubeAuthorizer {
    client: Client,
    proxy: Option<ProxyHeaders>,
    viewers: Kept<Viewer>,
    verdicts: Kept<bool>,
}

impl KubeAuthorizer {
    /// Bearer tokens only.
    pub fn new(client: Client) -> KubeAuthorizer {
        KubeAuthorizer {
            client,
            proxy: None,
            viewers: Kept::default(),
            verdicts: Kept::default(),
        }
    }

    /// Also trust `proxy`'s headers: only where nothing but that proxy can
    /// reach the web view's address.
    pub fn trusting_proxy(mut self, proxy: ProxyHeaders) -> KubeAuthorizer {
        self.proxy = Some(proxy);
        self
    }

    async fn authenticate_token(&self, token: &str) -> Result<Viewer, Denied> {
        // Kept by the token's digest: the token itself is not held.
        let key = format!("{:x}", Sha256::digest(token.as_bytes()));
        if let Some(viewer) = self.viewers.get(&key) {
            return Ok(viewer);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| {
                Denied::Unauthenticated(format!("the apiserver's TokenReview failed: {e}"))
            })?;
        let status = answer.status.unwrap_or_default();
        let user = status.user.filter(|_| status.authenticated == Some(true));
        let Some(user) = user else {
            return Err(Denied::Unauthenticated(
                "the apiserver does not accept this bearer token".to_string(),
            ));
        };
        let viewer = Viewer {
            name: user.username.unwrap_or_default(),
            groups: user.groups.unwrap_or_default(),
        };
        self.viewers.put(key, viewer.clone());
        Ok(viewer)
    }

    fn proxy_viewer(&self, headers: &HeaderMap) -> Option<Viewer> {
        let proxy = self.proxy.as_ref()?;
        let name = headers.get(&proxy.user)?.to_str().ok()?.trim().to_string();
        if name.is_empty() {
            return None;
        }
        let groups = headers
            .get_all(&proxy.groups)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|g| g.trim().to_string())
            .filter(|g| !g.is_empty())
            .collect();
        Some(Viewer { name, groups })
    }

    /// May `viewer` do `verb` on `resource`? Asked once per [`KEEP_FOR`].
    async fn allowed(&self, viewer: &Viewer, resource: ResourceAttributes) -> bool {
        let key = format!("{}\u{0}{:?}\u{0}{resource:?}", viewer.name, viewer.groups);
        if let Some(verdict) = self.verdicts.get(&key) {
            return verdict;
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(viewer.name.clone()),
                groups: Some(viewer.groups.clone()),
                resource_attributes: Some(resource),
                ..Default::default()
            },
            ..Default::default()
        };
        let verdict = match Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
        {
            Ok(answer) => answer.status.is_some_and(|s| s.allowed),
            Err(e) => {
                // Not kept: the next page asks again.
                tracing::warn!(viewer = %viewer.name, error = %e, "SubjectAccessReview failed; refusing");
                return false;
            }
        };
        self.verdicts.put(key, verdict);
        verdict
    }
}

/// `get` of every Activation (they are cluster-scoped).
fn all_records() -> ResourceAttributes {
    ResourceAttributes {
        group: Some("kix.run".to_string()),
        resource: Some("activations".to_string()),
        verb: Some("get".to_string()),
        ..Default::default()
    }
}

/// `get` of a tenant's ServiceAccount in its namespace.
fn tenant_account(namespace: &str, name: &str) -> ResourceAttributes {
    ResourceAttributes {
        group: Some(String::new()),
        resource: Some("serviceaccounts".to_string()),
        verb: Some("get".to_string()),
        namespace: Some(namespace.to_string()),
        name: Some(name.to_string()),
        ..Default::default()
    }
}

impl Authorizer for KubeAuthorizer {
    fn authenticate<'a>(&'a self, headers: &'a HeaderMap) -> BoxFuture<'a, Result<Viewer, Denied>> {
        Box::pin(async move {
            let bearer = headers
                .get(AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim)
                .filter(|t| !t.is_empty());
            if let Some(token) = bearer {
                return self.authenticate_token(token).await;
            }
            self.proxy_viewer(headers).ok_or_else(|| {
                Denied::Unauthenticated(
                    "send a bearer token the apiserver accepts (Authorization: Bearer …)"
                        .to_string(),
                )
            })
        })
    }

    fn may_read<'a>(&'a self, viewer: &'a Viewer, record: &'a Activation) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            if self.allowed(viewer, all_records()).await {
                return true;
            }
            match &record.spec.service_account {
                Some(sa) => {
                    self.allowed(viewer, tenant_account(&sa.namespace, &sa.name))
                        .await
                }
                None => false,
            }
        })
    }
}

/// Answers kept for [`KEEP_FOR`], at most [`KEPT_AT_MOST`] of them.
struct Kept<T> {
    answers: Mutex<HashMap<String, (Instant, T)>>,
}

impl<T> Default for Kept<T> {
    fn default() -> Self {
        Kept {
            answers: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Clone> Kept<T> {
    fn get(&self, key: &str) -> Option<T> {
        let answers = self.answers.lock().unwrap_or_else(|p| p.into_inner());
        answers
            .get(key)
            .filter(|(at, _)| at.elapsed() < KEEP_FOR)
            .map(|(_, answer)| answer.clone())
    }

    fn put(&self, key: String, answer: T) {
        let mut answers = self.answers.lock().unwrap_or_else(|p| p.into_inner());
        if answers.len() >= KEPT_AT_MOST {
            answers.retain(|_, (at, _)| at.elapsed() < KEEP_FOR);
            if answers.len() >= KEPT_AT_MOST {
                answers.clear();
            }
        }
        answers.insert(key, (Instant::now(), answer));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_expire_and_stay_bounded() {
        let kept = Kept::<bool>::default();
        kept.put("a".into(), true);
        assert_eq!(kept.get("a"), Some(true));
        assert_eq!(kept.get("b"), None);
        for i in 0..KEPT_AT_MOST + 5 {
            kept.put(i.to_string(), false);
        }
        assert!(kept.answers.lock().expect("lock").len() <= KEPT_AT_MOST);
    }
}
