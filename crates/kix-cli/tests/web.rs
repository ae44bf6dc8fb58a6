//! The read-only web view (`kix ui`, crate kix-web) over HTTP, against
//! records real deploys made on the test control plane: the pages' content,
//! HTML escaping, paging, the Host check, and that the server never writes
//! (it runs as a user who may only read; the audit log shows its requests).

mod cli_support;
mod common;
mod web_support;

use cli_support::{Kix, configmap};
use kix_api::Activation;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use web_support::Ui;

/// A user who may get, list and watch everything and write nothing, and a
/// kubeconfig for them.
fn reader(kix: &Kix, dir: &std::path::Path) -> (String, std::path::PathBuf) {
    let user = kix_testkit::unique_name("kix-web-reader");
    let rbac = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": user},
         "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": user},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}
    ]});
    let file = dir.join("reader.json");
    std::fs::write(&file, rbac.to_string()).expect("rbac file");
    kix.kubectl(&["apply", "-f", file.to_str().expect("utf-8")]);
    let kubeconfig = kix_testkit::kubeconfig_for_user(&user, dir).expect("reader kubeconfig");
    (user, kubeconfig)
}

/// The spec of a record whose receipt and source hold markup.
fn hostile_spec(cluster: &str) -> kix_api::ActivationSpec {
    serde_json::from_value(serde_json::json!({
        "cluster": cluster, "engine": "operator",
        "source": {"path": "/nix/store/00000000000000000000000000000000-x",
                   "flake": "<script>alert('flake')</script>"},
        "receipt": {"user": "<img src=x onerror=alert(1)>", "host": "a&b\"c", "kixVersion": "0",
                    "time": "2026-01-01T00:00:00Z", "planDigest": "<b>digest</b>"}
    }))
    .expect("a record's spec")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_show_what_the_records_of_real_deploys_hold_and_never_write() {
    let kix = Kix::new("web").await;
    let both = configmap("a", "1") + &configmap("b", "1");
    let changed = configmap("a", "2") + &configmap("c", "1");
    let v1 = kix.tree("v1", &both, serde_json::json!({}));
    let v2 = kix.tree("v2", &changed, serde_json::json!({}));
    kix.deploy(&v1, &[]).ok();
    kix.deploy(&v2, &[]).ok();
    let records = kix.records().await;
    let (first, second) = (&records[0], &records[1]);
    let hostile_cluster = format!("{}-x", kix.cluster());
    let hostile = common::write_record(
        &kix.env.client,
        &hostile_cluster,
        hostile_spec(&hostile_cluster),
    )
    .await;

    let dir = tempfile::tempdir().expect("tempdir");
    let (user, kubeconfig) = reader(&kix, dir.path());
    let ui = Ui::start(&kubeconfig, &[]);
    assert!(
        ui.banner.starts_with("kix ui: http://127.0.0.1:"),
        "{}",
        ui.banner
    );
    let mark = common::audit_mark(&kix_testkit::control_plane_dir());

    clusters_page(&ui, &kix, second);
    history_page(&ui, &kix, first, second);
    activation_pages(&ui, &kix, first, second);
    escaped(&ui, &hostile_cluster, &hostile);
    other_pages(&ui, &kix);

    let requests = common::requests_of(&kix_testkit::control_plane_dir(), mark, &user);
    assert!(requests.iter().any(|r| r.is_read()), "{requests:?}");
    let writes: Vec<_> = requests.iter().filter(|r| !r.is_read()).collect();
    assert!(
        writes.is_empty(),
        "kix ui made requests other than reads: {writes:?}"
    );
    let api: Api<Activation> = Api::all(kix.env.client.clone());
    let _ = api.delete(&hostile, &DeleteParams::default()).await;
}

fn clusters_page(ui: &Ui, kix: &Kix, second: &Activation) {
    let page = ui.get("/clusters").ok();
    let row = page.row("data-cluster", kix.cluster());
    assert!(row.contains(r#"data-phase="Active""#), "{row}");
    assert!(row.contains(&second.name_any()), "{row}");
    assert!(row.contains(&second.spec.source.path), "{row}");
    assert!(row.contains("web 1"), "the package's version: {row}");
    assert!(row.contains("Ready=True"), "{row}");
    assert!(
        row.contains(&format!(r#"href="/clusters/{}""#, kix.cluster())),
        "{row}"
    );
    assert_eq!(ui.get("/").status, 303, "/ redirects to /clusters");
}

fn history_page(ui: &Ui, kix: &Kix, first: &Activation, second: &Activation) {
    let page = ui.get(&format!("/clusters/{}", kix.cluster())).ok();
    let newest = page.row("data-record", &second.name_any());
    let oldest = page.row("data-record", &first.name_any());
    assert!(newest.contains(r#"data-phase="Active""#), "{newest}");
    assert!(oldest.contains(r#"data-phase="Superseded""#), "{oldest}");
    for (row, record, counts) in [(newest, second, "+1 ~1 -1"), (oldest, first, "+2 ~0 -0")] {
        let receipt = &record.spec.receipt;
        assert!(
            row.contains(&format!("title=\"{}\"", receipt.plan_digest)),
            "{row}"
        );
        assert!(
            row.contains(&format!("{}@{}", receipt.user, receipt.host)),
            "{row}"
        );
        assert!(row.contains(counts), "{row}");
    }
    assert!(
        page.body.find(&second.name_any())
            < page
                .body
                .find(&format!("data-record=\"{}\"", first.name_any())),
        "newest first"
    );
}

fn activation_pages(ui: &Ui, kix: &Kix, first: &Activation, second: &Activation) {
    let path = format!(
        "/clusters/{}/activations/{}",
        kix.cluster(),
        second.name_any()
    );
    let page = ui.get(&path).ok();
    let body = &page.body;
    assert!(body.contains(&second.spec.receipt.plan_digest), "{body}");
    assert!(body.contains("(the applied activation)"), "{body}");
    let ns = kix.ns();
    for name in ["a", "c"] {
        let object = format!("ConfigMap {ns}/{name} (v1)");
        let at = body
            .find(&object)
            .unwrap_or_else(|| panic!("{object} in {body}"));
        let row = &body[body[..at].rfind("<tr>").unwrap_or(0)..at];
        assert!(row.contains(r#"class="Ready""#), "{row}");
    }
    assert!(
        !body.contains(&format!("ConfigMap {ns}/b (v1)")),
        "b was pruned: {body}"
    );
    assert!(body.contains("All (2)"), "{body}");
    let degraded = ui.get(&format!("{path}?health=Degraded")).ok();
    assert!(
        !degraded.body.contains(&format!("ConfigMap {ns}/a")),
        "{}",
        degraded.body
    );

    let older = format!(
        "/clusters/{}/activations/{}",
        kix.cluster(),
        first.name_any()
    );
    let page = ui.get(&older).ok();
    assert!(
        page.body.contains(r#"data-phase="Superseded""#),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("shown for the Kix cluster's applied activation"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains(&second.name_any()),
        "links the applied one"
    );

    let wrong = format!(
        "/clusters/{}-other/activations/{}",
        kix.cluster(),
        first.name_any()
    );
    assert_eq!(ui.get(&wrong).status, 404);
    assert_eq!(ui.get("/clusters/no-such-cluster-here").status, 404);
    assert_eq!(ui.get("/no/such/page").status, 404);
}

/// Values a record holds are text on every page, never markup.
fn escaped(ui: &Ui, cluster: &str, record: &str) {
    for path in [
        "/clusters".to_string(),
        format!("/clusters/{cluster}"),
        format!("/clusters/{cluster}/activations/{record}"),
    ] {
        let page = ui.get(&path).ok();
        for raw in ["<img src=x", "<script>alert", "<b>digest", "a&b\"c"] {
            assert!(
                !page.body.contains(raw),
                "{path} shows {raw:?} as markup: {}",
                page.body
            );
        }
    }
    let page = ui.get(&format!("/clusters/{cluster}")).ok();
    assert!(
        page.body.contains("&lt;img src=x onerror=alert(1)&gt;"),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("&lt;script&gt;alert('flake')&lt;/script&gt;"),
        "{}",
        page.body
    );
    assert!(page.body.contains("a&amp;b&quot;c"), "{}", page.body);
}

fn other_pages(ui: &Ui, kix: &Kix) {
    ui.get("/deletions").ok();
    let fleets = ui.get("/fleets").ok();
    assert!(
        // Other tests' fleets may be listed: the page itself is what counts.
        fleets.body.contains("<h1>Fleets</h1>"),
        "{}",
        fleets.body
    );
    let refused = ui.get_as("/clusters", "attacker.example:80");
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(!refused.body.contains(kix.cluster()), "{}", refused.body);
}

/// An activation of 1,200 objects is shown 500 at a time, and every page
/// is small and starts at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_are_paged() {
    let kix = Kix::new("web-pages").await;
    let many: String = (0..1200)
        .map(|i| configmap(&format!("cm-{i:04}"), "1"))
        .collect();
    let tree = kix.tree("many", &many, serde_json::json!({}));
    kix.deploy(&tree, &[]).ok();
    let record = kix.name(1);
    let ui = Ui::start(&kix_testkit::kubeconfig_path(), &[]);
    let path = format!("/clusters/{}/activations/{record}", kix.cluster());
    let rows = |body: &str| body.matches("<tr><td>web</td>").count();

    let page = ui.get(&path).ok();
    assert_eq!(rows(&page.body), 500, "page 1");
    assert!(page.body.contains("page 1 of 3"), "{}", page.body);
    assert!(
        page.body
            .contains(&format!(r#"rel="next" href="{path}?page=2""#)),
        "{}",
        page.body
    );
    assert!(page.body.contains("cm-0000") && !page.body.contains("cm-0500"));
    let last = ui.get(&format!("{path}?page=3")).ok();
    assert_eq!(rows(&last.body), 200, "page 3");
    assert!(last.body.contains("cm-1199") && !last.body.contains("cm-0999"));
    for page in [&page, &last] {
        assert!(page.body.len() < 2_000_000, "{} bytes", page.body.len());
    }
    // Read once: the second page came from the first reading.
    let again = ui.get(&format!("{path}?page=2")).ok();
    assert!(
        again.first_byte < std::time::Duration::from_secs(5),
        "{:?}",
        again.first_byte
    );
}
