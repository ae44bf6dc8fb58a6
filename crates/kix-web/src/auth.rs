//! Who is looking, and what they may read. The operator authenticates a
//! viewer and asks the apiserver per record; `kix ui` serves one person,
//! whose own credentials make every read, so the apiserver already bounds
//! what the pages can show.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;

use axum::http::HeaderMap;
use axum::http::header::HOST;
use kix_api::Activation;

/// A boxed future, so an [`Authorizer`] is usable as `dyn`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The person a page is rendered for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Viewer {
    pub name: String,
    pub groups: Vec<String>,
}

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// Who is asking is unknown (HTTP 401).
    #[error("not authenticated: {0}")]
    Unauthenticated(String),
    /// Known, but refused (HTTP 403).
    #[error("forbidden: {0}")]
    Forbidden(String),
}

/// Decides who a request comes from, and which records they may see. A
/// record refused is left out of every list, its pages answer 404 and its
/// changes are not sent to the viewer's live updates.
pub trait Authorizer: Send + Sync + 'static {
    /// The viewer of a request, from its headers (a bearer token, an
    /// authenticating proxy's headers).
    fn authenticate<'a>(&'a self, headers: &'a HeaderMap) -> BoxFuture<'a, Result<Viewer, Denied>>;

    /// May `viewer` read `record`, and the objects of its Kix cluster?
    fn may_read<'a>(&'a self, viewer: &'a Viewer, record: &'a Activation) -> BoxFuture<'a, bool>;
}

/// `kix ui`'s authorizer: one viewer, the caller, whose credentials make
/// every read (the watch, the LISTs), so every record the server can see is
/// theirs to see. It answers only requests addressed to the address it
/// serves on (`Host`), so a web page elsewhere cannot reach it through a
/// name that resolves to loopback.
#[derive(Debug, Clone)]
pub struct CallerCredentials {
    /// The `Host` values served; empty: any (an unspecified address).
    hosts: Vec<String>,
}

impl CallerCredentials {
    /// For a server listening on `addr`.
    pub fn for_address(addr: SocketAddr) -> CallerCredentials {
        let port = addr.port();
        let hosts = if addr.ip().is_unspecified() {
            vec![]
        } else if addr.ip().is_loopback() {
            vec![
                addr.to_string(),
                format!("localhost:{port}"),
                format!("127.0.0.1:{port}"),
                format!("[::1]:{port}"),
            ]
        } else {
            vec![addr.to_string()]
        };
        CallerCredentials { hosts }
    }
}

impl Authorizer for CallerCredentials {
    fn authenticate<'a>(&'a self, headers: &'a HeaderMap) -> BoxFuture<'a, Result<Viewer, Denied>> {
        let host = headers
            .get(HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        let verdict = if self.hosts.is_empty() || self.hosts.iter().any(|h| h == host) {
            Ok(Viewer {
                name: "caller".to_string(),
                groups: vec![],
            })
        } else {
            Err(Denied::Forbidden(format!(
                "this server answers requests for {} only, not Host {host:?}",
                self.hosts.join(", ")
            )))
        };
        Box::pin(std::future::ready(verdict))
    }

    fn may_read<'a>(&'a self, _viewer: &'a Viewer, _record: &'a Activation) -> BoxFuture<'a, bool> {
        Box::pin(std::future::ready(true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Ok(v) = value.parse() {
            headers.insert(HOST, v);
        }
        headers
    }

    #[tokio::test]
    async fn the_caller_is_served_on_its_own_address_only() {
        let auth = CallerCredentials::for_address(([127, 0, 0, 1], 8080).into());
        for ok in ["127.0.0.1:8080", "localhost:8080", "[::1]:8080"] {
            assert!(auth.authenticate(&host(ok)).await.is_ok(), "{ok}");
        }
        for refused in ["evil.example:8080", "localhost:9090", ""] {
            let verdict = auth.authenticate(&host(refused)).await;
            assert!(
                matches!(verdict, Err(Denied::Forbidden(_))),
                "{refused}: {verdict:?}"
            );
        }
        let any = CallerCredentials::for_address(([0, 0, 0, 0], 8080).into());
        assert!(any.authenticate(&host("kix.example:8080")).await.is_ok());
    }
}
