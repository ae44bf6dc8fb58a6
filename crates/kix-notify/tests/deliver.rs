//! Deliveries against a local HTTP sink that records every request: retries
//! after 500s, no retry after a 404, the headers and bodies each target is
//! sent (a GitHub status checked field by field against GitHub's documented
//! request schema for "Create a commit status"), and no credential in an
//! error.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kix_notify::{
    DeliveryError, Event, Notice, Retry, Secret, Target, deliver, http_client, request,
};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A request as the sink read it.
#[derive(Clone, Debug)]
struct Seen {
    line: String,
    headers: Vec<(String, String)>,
    body: Value,
}

/// Answers each request with the next status of `answers` (the last one
/// from then on) and records it.
async fn sink(answers: Vec<u16>) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let mut raw = Vec::new();
            let mut buf = [0u8; 4096];
            // Head, then as much body as Content-Length says.
            let (head, body) = loop {
                let n = socket.read(&mut buf).await.unwrap_or(0);
                if n == 0 {
                    break (String::new(), Vec::new());
                }
                raw.extend_from_slice(&buf[..n]);
                if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&raw[..end]).to_string();
                    let length = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    let mut body = raw[end + 4..].to_vec();
                    while body.len() < length {
                        let n = socket.read(&mut buf).await.unwrap_or(0);
                        if n == 0 {
                            break;
                        }
                        body.extend_from_slice(&buf[..n]);
                    }
                    break (head, body);
                }
            };
            let mut lines = head.lines();
            let line = lines.next().unwrap_or_default().to_string();
            let headers = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
                .collect();
            let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let status = {
                let mut seen = log.lock().expect("log");
                seen.push(Seen {
                    line,
                    headers,
                    body,
                });
                *answers
                    .get(seen.len() - 1)
                    .or(answers.last())
                    .unwrap_or(&200)
            };
            let answer =
                format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            let _ = socket.write_all(answer.as_bytes()).await;
        }
    });
    (format!("http://{addr}"), seen)
}

fn quick() -> Retry {
    Retry {
        attempts: 4,
        first_wait: Duration::from_millis(50),
        longest_wait: Duration::from_millis(200),
        timeout: Duration::from_secs(10),
    }
}

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

fn notice(event: Event) -> Notice {
    Notice {
        event,
        cluster: "web".into(),
        record: "web-7".into(),
        message: "12 objects applied, 1 pruned".into(),
        store_path: "/nix/store/00000000000000000000000000000000-kix-web".into(),
        version: Some("1.2.0".into()),
        revision: Some(SHA.into()),
        plan_digest: "sha256:0f".into(),
        link: Some("https://kix.example/clusters/web/activations/web-7".into()),
    }
}

#[tokio::test]
async fn a_webhook_gets_the_notice_once_after_two_500s() {
    let (url, seen) = sink(vec![500, 500, 200]).await;
    let target = Target::Webhook {
        url: Secret::new(format!("{url}/hook")),
    };
    let sent = request(&target, &notice(Event::Active)).expect("a request");
    let attempts = deliver(&http_client(), &target, &sent, &quick())
        .await
        .expect("delivered");
    assert_eq!(attempts, 3);
    let seen = seen.lock().expect("log").clone();
    assert_eq!(
        seen.len(),
        3,
        "two refused, one taken, then nothing: {seen:?}"
    );
    let body = &seen[2].body;
    for (field, value) in [
        ("event", "Active"),
        ("cluster", "web"),
        ("record", "web-7"),
        (
            "storePath",
            "/nix/store/00000000000000000000000000000000-kix-web",
        ),
        ("version", "1.2.0"),
        ("revision", SHA),
        ("planDigest", "sha256:0f"),
        ("link", "https://kix.example/clusters/web/activations/web-7"),
    ] {
        assert_eq!(body[field], value, "{field} in {body}");
    }
    assert_eq!(seen[2].line, "POST /hook HTTP/1.1");
}

#[tokio::test]
async fn a_refusal_is_not_retried_and_names_no_credential() {
    let (url, seen) = sink(vec![404]).await;
    let secret_url = format!("{url}/services/T000/B000/SECRETPART");
    let target = Target::Slack {
        url: Secret::new(secret_url),
    };
    let sent = request(&target, &notice(Event::Failed)).expect("a request");
    let err = deliver(&http_client(), &target, &sent, &quick())
        .await
        .expect_err("refused");
    assert!(
        matches!(err, DeliveryError::Refused { status: 404, .. }),
        "{err}"
    );
    assert_eq!(seen.lock().expect("log").len(), 1);
    assert!(!err.to_string().contains("SECRETPART"), "{err}");

    // Nothing listening: every attempt fails, and the error still hides the URL.
    let gone = Target::Webhook {
        url: Secret::new("http://127.0.0.1:9/SECRETPART"),
    };
    let sent = request(&gone, &notice(Event::Failed)).expect("a request");
    let err = deliver(&http_client(), &gone, &sent, &quick())
        .await
        .expect_err("gave up");
    assert!(
        matches!(err, DeliveryError::GaveUp { attempts: 4, .. }),
        "{err}"
    );
    assert!(!err.to_string().contains("SECRETPART"), "{err}");
}

/// GitHub's "Create a commit status" request body, as its REST reference
/// documents it ([`kix_notify::github_status_problem`]).
fn check_github_status_body(body: &Value) {
    if let Some(problem) = kix_notify::github_status_problem(body) {
        panic!("not GitHub's commit status schema: {problem}: {body}");
    }
}

#[tokio::test]
async fn commit_statuses_as_github_and_gitlab_document_them() {
    let (url, seen) = sink(vec![201]).await;
    let github = Target::GitHub {
        api: url.clone(),
        repository: "acme/infra".into(),
        token: Secret::new("ghs_TOKEN"),
    };
    let gitlab = Target::GitLab {
        api: format!("{url}/api/v4"),
        project: "acme/infra".into(),
        token: Secret::new("glpat-TOKEN"),
    };
    for (event, github_state, gitlab_state) in [
        (Event::Applying, "pending", "running"),
        (Event::Active, "success", "success"),
        (Event::Degraded, "failure", "failed"),
        (Event::DeletionsHeld, "pending", "pending"),
    ] {
        for target in [&github, &gitlab] {
            let sent = request(target, &notice(event)).expect("a status");
            deliver(&http_client(), target, &sent, &quick())
                .await
                .expect("delivered");
        }
        let seen = seen.lock().expect("log").clone();
        let (gh, gl) = (&seen[seen.len() - 2], &seen[seen.len() - 1]);
        assert_eq!(
            gh.line,
            format!("POST /repos/acme/infra/statuses/{SHA} HTTP/1.1")
        );
        check_github_status_body(&gh.body);
        assert_eq!(gh.body["state"], github_state);
        assert_eq!(gh.body["context"], "kix/web");
        assert_eq!(
            gh.body["target_url"],
            "https://kix.example/clusters/web/activations/web-7"
        );
        let header = |s: &Seen, name: &str| {
            s.headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(
            header(gh, "authorization").as_deref(),
            Some("Bearer ghs_TOKEN")
        );
        assert_eq!(
            header(gh, "accept").as_deref(),
            Some("application/vnd.github+json")
        );
        assert!(
            header(gh, "user-agent").is_some_and(|ua| ua.starts_with("kix/")),
            "GitHub requires a User-Agent"
        );
        assert_eq!(
            gl.line,
            format!("POST /api/v4/projects/acme%2Finfra/statuses/{SHA} HTTP/1.1")
        );
        assert_eq!(gl.body["state"], gitlab_state);
        assert_eq!(gl.body["name"], "kix/web");
        assert_eq!(header(gl, "private-token").as_deref(), Some("glpat-TOKEN"));
    }
    // A drift fight is about the cluster, not the commit: no status.
    assert!(request(&github, &notice(Event::DriftFight)).is_none());
}
