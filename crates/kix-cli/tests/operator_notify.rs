//! `kix-operator --alerts FILE` (#48, point 2): the operator run as a
//! process against the shared control plane, its notices sent to a local
//! HTTP sink that records every request.
//!
//! - A deploy through the operator gives one notice per phase change
//!   (Applying, then Active) to a generic webhook (the documented JSON) and
//!   to GitHub commit statuses (the body checked against GitHub's
//!   documented schema), also when the operator is killed (SIGKILL) while
//!   the record is Applying, after its Applying notices were recorded on
//!   it, and started again.
//! - The GitHub token (a probe value in a Secret) is in the request's
//!   Authorization header only: not in either operator log, the record,
//!   the Events, or any body the sink got.
//! - A sink answering 500 twice then 200 gets the notice three times and it
//!   is delivered once; an alert whose Secret key is missing says so on the
//!   record and in the log; a bad alerts file stops the operator, naming
//!   the file and where.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Operator;
use kix_api::{Activation, Phase};
use kube::api::Api;
use serde_json::{Value, json};

/// A request as the sink read it.
#[derive(Clone, Debug)]
struct Seen {
    line: String,
    headers: Vec<(String, String)>,
    body: String,
    status: u16,
}

impl Seen {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A local HTTP server answering each request with the next of `answers`
/// (then 200), recording them all.
struct Sink {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Sink {
    fn start(answers: Vec<u16>) -> Sink {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the sink");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for (n, stream) in listener.incoming().enumerate() {
                let Ok(mut stream) = stream else { continue };
                let status = answers.get(n).copied().unwrap_or(200);
                if let Some(mut request) = read_request(&mut stream) {
                    request.status = status;
                    log.lock().expect("log").push(request);
                }
                let answer = format!(
                    "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                );
                let _ = stream.write_all(answer.as_bytes());
            }
        });
        Sink { addr, seen }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The requests whose path starts with `prefix`.
    fn requests(&self, prefix: &str) -> Vec<Seen> {
        let wanted = format!("POST {prefix}");
        self.seen
            .lock()
            .expect("log")
            .iter()
            .filter(|s| s.line.starts_with(&wanted))
            .cloned()
            .collect()
    }
}

fn read_request(stream: &mut std::net::TcpStream) -> Option<Seen> {
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        raw.extend_from_slice(&buf[..n]);
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
    };
    let head = String::from_utf8_lossy(&raw[..end]).to_string();
    let mut lines = head.lines();
    let line = lines.next().unwrap_or_default().to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = raw[end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&buf[..n]);
    }
    Some(Seen {
        line,
        headers,
        body: String::from_utf8_lossy(&body).to_string(),
        status: 0,
    })
}

/// Secret `kix-alerts` in `namespace` with `data`.
fn alerts_secret(env: &kix_testkit::TestEnv, namespace: &str, data: &[(&str, &str)]) {
    let mut args = vec![
        "create".to_string(),
        "secret".into(),
        "generic".into(),
        "kix-alerts".into(),
        "-n".into(),
        namespace.into(),
    ];
    for (key, value) in data {
        args.push(format!("--from-literal={key}={value}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    env.kubectl(&args).expect("the alerts' Secret");
}

/// A build of `cluster` with one ConfigMap in `namespace`; with `gated`,
/// the build's own health rule keeps it in progress until the ConfigMap
/// has the annotation kix.test/ready, so the record stays Applying.
fn build(root: &Path, cluster: &str, namespace: &str, gated: bool) -> String {
    let config_map =
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notified}\ndata: {a: '1'}\n";
    common::write_tree(
        root,
        cluster,
        &[common::Pkg {
            name: "web".into(),
            depends_on: vec![],
            namespace: namespace.into(),
            files: vec![("cm.yaml".into(), config_map.as_bytes().to_vec())],
        }],
    );
    if gated {
        let ready = "'kix.test/ready' in metadata.?annotations.orValue({})";
        let kix_json = json!({"format": 1, "cluster": cluster, "packages": ["web"], "settings": {},
            "health": [{"group": "", "kind": "ConfigMap", "current": ready,
                        "inProgress": format!("!({ready})")}]});
        std::fs::write(root.join("kix.json"), kix_json.to_string()).expect("kix.json");
    }
    common::add_to_store(root)
}

/// The record's `status.notifications` entry of `alert`, once it names
/// `event`.
async fn notified(client: &kube::Client, record: &str, alert: &str, event: &str) -> Value {
    let api: Api<Activation> = Api::all(client.clone());
    common::poll(
        &format!("record {record} to say {alert} was sent {event}"),
        Duration::from_secs(120),
        Duration::from_millis(200),
        || {
            let api = api.clone();
            async move {
                let record = api.get(record).await.ok()?;
                let status = record.status?;
                let entry = status
                    .notifications
                    .iter()
                    .find(|n| n.alert == alert && n.event == event)?;
                Some(serde_json::to_value(entry).expect("json"))
            }
        },
    )
    .await
}

async fn phase(client: &kube::Client, record: &str) -> Option<Phase> {
    let api: Api<Activation> = Api::all(client.clone());
    api.get(record).await.ok().and_then(|r| r.phase())
}

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
const PROBE: &str = "ghp_PROBE7f3a9c1e5b";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_notice_per_phase_change_across_a_kill_and_the_token_only_in_its_header() {
    let env = kix_testkit::TestEnv::new("op-notify").await.expect("env");
    common::tenancy::install_crds(&env);
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = kix_testkit::unique_name("c-notify");
    let sink = Sink::start(vec![]);
    alerts_secret(
        &env,
        &env.namespace,
        &[("hook", &format!("{}/hook", sink.url())), ("github", PROBE)],
    );
    let alerts = json!({"alerts": [
        {"name": "hook", "target": {"webhook": {"urlSecret": {"name": "kix-alerts", "key": "hook"}}}},
        {"name": "prs", "clusters": [cluster],
         "target": {"github": {"repository": "acme/infra", "api": sink.url(),
                               "tokenSecret": {"name": "kix-alerts", "key": "github"}}}}
    ]});
    let alerts_file = dir.path().join("alerts.json");
    std::fs::write(&alerts_file, alerts.to_string()).expect("alerts.json");
    let lease = kix_testkit::unique_name("lease");
    let flags = [
        "--alerts",
        alerts_file.to_str().expect("utf8"),
        "--web-url",
        "https://kix.example",
    ];
    let start = |log: &str| {
        Operator::start_with(
            &kix_testkit::kubeconfig_path(),
            &[&cluster],
            &env.namespace,
            &lease,
            dir.path().join(log),
            None,
            &flags,
        )
    };
    let mut first = start("first.log");

    let path = build(&dir.path().join("tree"), &cluster, &env.namespace, true);
    let mut spec = common::operator_spec(&cluster, &path);
    spec.source.revision = Some(SHA.into());
    let record = common::write_record(&env.client, &cluster, spec).await;

    // Applying sent to both alerts and recorded on the record, which is
    // still Applying (its ConfigMap not ready): killed here.
    notified(&env.client, &record, "hook", "Applying").await;
    notified(&env.client, &record, "prs", "Applying").await;
    assert_eq!(phase(&env.client, &record).await, Some(Phase::Applying));
    first.child.kill().expect("SIGKILL the operator");
    first.child.wait().expect("killed");
    let second = start("second.log");
    env.kubectl(&[
        "annotate",
        "configmap",
        "notified",
        "-n",
        &env.namespace,
        "kix.test/ready=yes",
    ])
    .expect("the ConfigMap ready");
    let settled = common::settled(&env.client, &record).await;
    assert_eq!(settled.phase(), Some(Phase::Active), "{:?}", settled.status);
    notified(&env.client, &record, "hook", "Active").await;
    notified(&env.client, &record, "prs", "Active").await;
    // Long enough for a few of the operator's scans (every 2 s): nothing
    // more is sent.
    tokio::time::sleep(Duration::from_secs(8)).await;

    let hook = sink.requests("/hook");
    let events: Vec<Value> = hook.iter().map(|s| s.json()["event"].clone()).collect();
    assert_eq!(events, [json!("Applying"), json!("Active")], "{hook:#?}");
    let body = hook[1].json();
    for (field, value) in [
        ("cluster", cluster.as_str()),
        ("record", record.as_str()),
        ("storePath", path.as_str()),
        ("version", "1"),
        ("revision", SHA),
        ("planDigest", "x"),
        (
            "link",
            &format!("https://kix.example/clusters/{cluster}/activations/{record}"),
        ),
    ] {
        assert_eq!(body[field], value, "{field} in {body:#}");
    }
    let statuses = sink.requests(&format!("/repos/acme/infra/statuses/{SHA}"));
    let states: Vec<Value> = statuses.iter().map(|s| s.json()["state"].clone()).collect();
    assert_eq!(
        states,
        [json!("pending"), json!("success")],
        "{statuses:#?}"
    );
    for status in &statuses {
        let body = status.json();
        assert_eq!(kix_notify::github_status_problem(&body), None, "{body:#}");
        assert_eq!(body["context"], format!("kix/{cluster}"));
        assert_eq!(
            status.header("authorization"),
            Some(&*format!("Bearer {PROBE}"))
        );
    }

    // The token: in the Authorization header only.
    let record_json = env
        .kubectl(&["get", "activations.kix.run", &record, "-o", "json"])
        .expect("record");
    let events_json = env
        .kubectl(&["get", "events", "-A", "-o", "json"])
        .expect("events");
    let logs = format!("{}\n{}", first.log(), second.log());
    for (what, text) in [
        ("the operator's log", logs.as_str()),
        ("the record", record_json.as_str()),
        ("the Events", events_json.as_str()),
    ] {
        assert!(!text.contains(PROBE), "the token is in {what}");
    }
    for seen in sink.seen.lock().expect("log").iter() {
        assert!(
            !seen.body.contains(PROBE),
            "the token is in a body: {seen:?}"
        );
    }
    let metrics = second.metrics();
    assert!(
        metrics
            .contains("kix_operator_notifications_total{alert=\"hook\",outcome=\"delivered\"} 1"),
        "{metrics}"
    );
    let _ = env.kubectl(&["delete", "activations.kix.run", &record, "--wait=false"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_failing_twice_is_retried_and_a_missing_secret_key_is_said() {
    let env = kix_testkit::TestEnv::new("op-notify-retry")
        .await
        .expect("env");
    common::tenancy::install_crds(&env);
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = kix_testkit::unique_name("c-notify-retry");
    let sink = Sink::start(vec![500, 500, 200]);
    alerts_secret(
        &env,
        &env.namespace,
        &[("hook", &format!("{}/hook", sink.url()))],
    );
    let alerts = json!({"alerts": [
        {"name": "hook", "events": ["Active"],
         "target": {"webhook": {"urlSecret": {"name": "kix-alerts", "key": "hook"}}}},
        {"name": "chat", "events": ["Active"],
         "target": {"slack": {"urlSecret": {"name": "kix-alerts", "key": "slack"}}}}
    ]});
    let alerts_file = dir.path().join("alerts.json");
    std::fs::write(&alerts_file, alerts.to_string()).expect("alerts.json");
    let operator = Operator::start_with(
        &kix_testkit::kubeconfig_path(),
        &[&cluster],
        &env.namespace,
        &kix_testkit::unique_name("lease"),
        dir.path().join("operator.log"),
        None,
        &["--alerts", alerts_file.to_str().expect("utf8")],
    );
    let path = build(&dir.path().join("tree"), &cluster, &env.namespace, false);
    let record = common::write_record(
        &env.client,
        &cluster,
        common::operator_spec(&cluster, &path),
    )
    .await;
    let sent = notified(&env.client, &record, "hook", "Active").await;
    assert_eq!(sent.get("error"), None, "delivered: {sent}");
    let missing = notified(&env.client, &record, "chat", "Active").await;
    let said = format!("Secret {}/kix-alerts has no key \"slack\"", env.namespace);
    assert_eq!(missing["error"], said.as_str(), "{missing}");
    tokio::time::sleep(Duration::from_secs(6)).await;

    let hook = sink.requests("/hook");
    let answered: Vec<u16> = hook.iter().map(|s| s.status).collect();
    assert_eq!(answered, [500, 500, 200], "{hook:#?}");
    assert!(hook.iter().all(|s| s.body == hook[0].body), "{hook:#?}");
    assert_eq!(hook[2].json()["event"], "Active");
    assert!(operator.log().contains(&said), "{}", operator.log());
    let metrics = operator.metrics();
    for line in [
        "kix_operator_notifications_total{alert=\"hook\",outcome=\"delivered\"} 1",
        "kix_operator_notifications_total{alert=\"chat\",outcome=\"no_secret\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    let _ = env.kubectl(&["delete", "activations.kix.run", &record, "--wait=false"]);
    drop(operator);
}

#[test]
fn a_bad_alerts_file_stops_the_operator_naming_the_file_and_where() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("alerts.json");
    std::fs::write(
        &file,
        "{\"alerts\": [\n  {\"name\": \"chat\",\n   \"target\": {\"slack\": {\"url\": \"https://hooks.example/x\"}}}\n]}\n",
    )
    .expect("alerts.json");
    let out = std::process::Command::new(common::operator_bin())
        .args([
            "--kubeconfig",
            "/nonexistent",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .arg("--alerts")
        .arg(&file)
        .output()
        .expect("run kix-operator");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&file.display().to_string()), "{stderr}");
    assert!(
        stderr.contains("unknown field `url`") && stderr.contains("line 3"),
        "{stderr}"
    );
}
