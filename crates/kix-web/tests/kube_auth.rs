//! The operator's web view answers each viewer by what the apiserver says
//! of them (TokenReview, SubjectAccessReview): two tenants, each with a
//! person who holds the `view` role in the tenant's namespace, see only
//! their own Kix cluster; a person who may read records sees every one;
//! no token, or one the apiserver refuses, is refused.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kix_api::{Activation, Phase};
use kix_testkit::TestEnv;
use kix_web::{KubeAuthorizer, Web};
use kube::api::{Api, PostParams};

/// A record of `cluster` acting for `namespace/kix` (none: the operator's own).
async fn record(client: &kube::Client, cluster: &str, tenant: Option<&str>) -> Activation {
    let mut record = kix_testkit::records::activation(
        cluster,
        1,
        "/nix/store/00000000000000000000000000000000-x",
        Phase::Active,
    );
    record.spec.service_account = tenant.map(|ns| {
        serde_json::from_value(serde_json::json!({"namespace": ns, "name": "kix"}))
            .expect("account")
    });
    Api::<Activation>::all(client.clone())
        .create(&PostParams::default(), &record)
        .await
        .expect("record created")
}

/// ServiceAccount `viewer` in `namespace`, bound to the `view` role there,
/// and a token for it.
fn viewer_in(env: &TestEnv, namespace: &str) -> String {
    env.kubectl(&["create", "serviceaccount", "viewer", "-n", namespace])
        .expect("viewer");
    env.kubectl(&[
        "create",
        "rolebinding",
        "viewer-view",
        "-n",
        namespace,
        "--clusterrole=view",
        &format!("--serviceaccount={namespace}:viewer"),
    ])
    .expect("view role");
    env.kubectl(&["create", "token", "viewer", "-n", namespace])
        .expect("token")
        .trim()
        .to_string()
}

/// GET `path` with `token` (if any): status and body.
fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let mut socket = TcpStream::connect(addr).expect("connect");
    socket
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(socket, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}\r\n").expect("request");
    let mut text = String::new();
    socket.read_to_string(&mut text).expect("response");
    let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, body.to_string())
}

/// The clusters page for `token` once it lists `expected` (the watch
/// catches up with records just made), or what it showed after 30 s.
fn clusters_once_listing(addr: SocketAddr, token: &str, expected: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = get(addr, "/clusters", Some(token));
        assert_eq!(status, 200, "{body}");
        if body.contains(expected) || Instant::now() > deadline {
            return body;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_viewer_sees_what_the_apiserver_lets_them_read() {
    let mut env = TestEnv::new("web-auth").await.expect("env");
    let (team_a, team_b) = (
        env.namespace("a").await.expect("a"),
        env.namespace("b").await.expect("b"),
    );
    let (cluster_a, cluster_b, cluster_ops) = (
        kix_testkit::unique_name("web-a"),
        kix_testkit::unique_name("web-b"),
        kix_testkit::unique_name("web-ops"),
    );
    let a = record(&env.client, &cluster_a, Some(&team_a)).await;
    record(&env.client, &cluster_b, Some(&team_b)).await;
    record(&env.client, &cluster_ops, None).await;
    let (token_a, token_b) = (viewer_in(&env, &team_a), viewer_in(&env, &team_b));
    // Someone who may read every record: a ServiceAccount bound cluster-wide.
    env.kubectl(&["create", "serviceaccount", "reader", "-n", &team_a])
        .expect("reader");
    let binding = kix_testkit::unique_name("web-reader");
    env.kubectl(&[
        "create",
        "clusterrole",
        &binding,
        "--verb=get,list,watch",
        "--resource=activations.kix.run",
    ])
    .expect("role");
    env.kubectl(&[
        "create",
        "clusterrolebinding",
        &binding,
        &format!("--clusterrole={binding}"),
        &format!("--serviceaccount={team_a}:reader"),
    ])
    .expect("binding");
    let token_reader = env
        .kubectl(&["create", "token", "reader", "-n", &team_a])
        .expect("token")
        .trim()
        .to_string();

    let web = Web::new(
        env.client.clone(),
        Arc::new(KubeAuthorizer::new(env.client.clone())),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(web.serve(listener));

    let (addr2, a2, b2) = (addr, cluster_a.clone(), cluster_b.clone());
    let (a_sees, b_sees, reader_sees, refused) = tokio::task::spawn_blocking(move || {
        let (cluster_a, cluster_b) = (a2, b2);
        let reader_sees = clusters_once_listing(addr2, &token_reader, &cluster_b);
        let a_sees = clusters_once_listing(addr2, &token_a, &cluster_a);
        let b_sees = clusters_once_listing(addr2, &token_b, &cluster_b);
        let record_page = format!(
            "/clusters/{cluster_a}/activations/{}",
            a.metadata.name.clone().unwrap_or_default()
        );
        let refused = [
            get(addr2, "/clusters", None).0,
            get(addr2, "/clusters", Some("not-a-token")).0,
            get(addr2, &record_page, Some(&token_b)).0,
            get(addr2, &record_page, Some(&token_a)).0,
        ];
        (a_sees, b_sees, reader_sees, refused)
    })
    .await
    .expect("requests");

    for (who, page, sees, hidden) in [
        (
            "team a",
            &a_sees,
            vec![&cluster_a],
            vec![&cluster_b, &cluster_ops],
        ),
        (
            "team b",
            &b_sees,
            vec![&cluster_b],
            vec![&cluster_a, &cluster_ops],
        ),
        (
            "a reader of records",
            &reader_sees,
            vec![&cluster_a, &cluster_b, &cluster_ops],
            vec![],
        ),
    ] {
        for c in sees {
            assert!(page.contains(c.as_str()), "{who} should see {c}:\n{page}");
        }
        for c in hidden {
            assert!(
                !page.contains(c.as_str()),
                "{who} must not see {c}:\n{page}"
            );
        }
    }
    assert_eq!(
        refused,
        [401, 401, 404, 200],
        "no token, a refused token, team b on team a's record, team a on its own"
    );
    for name in [&cluster_a, &cluster_b, &cluster_ops] {
        let _ = env.kubectl(&["delete", "activations.kix.run", &format!("{name}-1")]);
    }
    let _ = env.kubectl(&["delete", "clusterrolebinding,clusterrole", &binding]);
}
