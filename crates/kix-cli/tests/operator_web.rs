//! `kix-operator --web-addr`: the operator serves the web view, and the
//! apiserver decides who sees what (TokenReview, SubjectAccessReview; the
//! rules themselves are tested in kix-web's tests/kube_auth.rs): a viewer
//! with the `view` role in a tenant's namespace sees that tenant's Kix
//! cluster and no other; no token is refused.

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::Operator;
use kix_api::{Activation, Phase};
use kix_testkit::TestEnv;
use kube::api::{Api, PostParams};

fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let mut socket = std::net::TcpStream::connect(addr).expect("connect to the web view");
    socket
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(socket, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}\r\n").expect("request");
    let mut text = String::new();
    socket.read_to_string(&mut text).expect("response");
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, body.to_string())
}

/// The web view's address, from the operator's log line.
fn web_addr(operator: &Operator) -> SocketAddr {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let log = operator.log();
        if let Some(addr) = log
            .lines()
            .find(|l| l.contains("serving the web view"))
            .and_then(|l| l.split("http://").nth(1))
            .and_then(|rest| rest.split('/').next())
            .and_then(|a| a.parse().ok())
        {
            return addr;
        }
        assert!(
            Instant::now() < deadline,
            "the operator did not say where its web view is:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_serves_each_viewer_what_the_apiserver_lets_them_read() {
    let mut env = TestEnv::new("op-web").await.expect("env");
    let (team_a, team_b) = (
        env.namespace("a").await.expect("a"),
        env.namespace("b").await.expect("b"),
    );
    let (cluster_a, cluster_b) = (
        kix_testkit::unique_name("opweb-a"),
        kix_testkit::unique_name("opweb-b"),
    );
    for (cluster, team) in [(&cluster_a, &team_a), (&cluster_b, &team_b)] {
        // Records the operator does not manage (--cluster names another):
        // the web view shows every record, whoever acts on it.
        let mut record = kix_testkit::records::activation(
            cluster,
            1,
            "/nix/store/00000000000000000000000000000000-x",
            Phase::Active,
        );
        record.spec.service_account = Some(
            serde_json::from_value(serde_json::json!({"namespace": team, "name": "kix"}))
                .expect("account"),
        );
        Api::<Activation>::all(env.client.clone())
            .create(&PostParams::default(), &record)
            .await
            .expect("record");
    }
    env.kubectl(&["create", "serviceaccount", "viewer", "-n", &team_a])
        .expect("viewer");
    env.kubectl(&[
        "create",
        "rolebinding",
        "viewer",
        "-n",
        &team_a,
        "--clusterrole=view",
        &format!("--serviceaccount={team_a}:viewer"),
    ])
    .expect("view in team a");
    let token = env
        .kubectl(&["create", "token", "viewer", "-n", &team_a])
        .expect("token")
        .trim()
        .to_string();

    let dir = tempfile::tempdir().expect("tempdir");
    let operator = Operator::start_with(
        &kix_testkit::kubeconfig_path(),
        &[&kix_testkit::unique_name("none")],
        &env.namespace,
        "kix-operator-web",
        dir.path().join("operator.log"),
        None,
        &["--web-addr", "127.0.0.1:0"],
    );
    let addr = web_addr(&operator);
    let expected = cluster_a.clone();
    let (page, refused) = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        let page = loop {
            let (status, body) = get(addr, "/clusters", Some(&token));
            assert_eq!(status, 200, "{body}");
            if body.contains(&expected) || Instant::now() > deadline {
                break body;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        (page, get(addr, "/clusters", None).0)
    })
    .await
    .expect("requests");
    assert!(
        page.contains(&cluster_a),
        "team a's viewer sees its Kix cluster:\n{page}"
    );
    assert!(!page.contains(&cluster_b), "and not team b's:\n{page}");
    assert_eq!(refused, 401, "a request without a token");
    drop(operator);
    for cluster in [&cluster_a, &cluster_b] {
        let _ = env.kubectl(&["delete", "activations.kix.run", &format!("{cluster}-1")]);
    }
}
