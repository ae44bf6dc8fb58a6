//! No page of the web view shows a Secret's value: a build with a
//! SOPS-encrypted Secret (every value encrypted, sops' default) is deployed
//! twice with the real `sops`, then `kix ui` (holding the age key, so its
//! reading of the objects decrypts the build as `kix status` does) is
//! crawled from `/clusters` through every link, and each page's HTML is
//! scanned for the probe values and their base64.

mod common;
mod web_support;

use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::sops::{Key, encode, keygen, sops_bin_dir};
use common::{Pkg, run, write_tree};
use k8s_openapi::api::core::v1::Secret;
use kix_testkit::TestEnv;
use kube::api::Api;
use web_support::Ui;

/// A Secret whose every value is a probe, encrypted by `sops` for `key`.
fn encrypted_secret(dir: &Path, key: &Key, probe: &str) -> Vec<u8> {
    let plain = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  annotations:\n    \
         example.com/probe: annot-{probe}\n  labels:\n    probe: label-{probe}\ntype: Opaque\n\
         data:\n  token: {}\nstringData:\n  password: strdata-{probe}\n",
        encode(&format!("data-{probe}")),
    );
    let file = dir.join("plain.yaml");
    std::fs::write(&file, plain).expect("plain file");
    let out = Command::new(sops_bin_dir().join("sops"))
        .current_dir(dir)
        .env_clear()
        .env("HOME", dir)
        .args(["encrypt", "--age", &key.recipient])
        .arg(&file)
        .output()
        .expect("sops runs");
    std::fs::remove_file(&file).expect("remove the plain file");
    assert!(out.status.success(), "sops encrypt: {out:?}");
    out.stdout
}

/// The texts that would show a probe: each value and its base64.
fn probe_texts(probe: &str) -> Vec<String> {
    ["annot", "label", "data", "strdata"]
        .into_iter()
        .map(|p| format!("{p}-{probe}"))
        .flat_map(|v| [encode(&v), v])
        .collect()
}

/// A tree with package `app`: the encrypted Secret and a ConfigMap.
fn tree(root: &Path, env: &TestEnv, encrypted: &[u8]) -> PathBuf {
    let cm = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain}\ndata: {v: '1'}\n";
    write_tree(
        root,
        &env.cluster,
        &[Pkg {
            name: "app".into(),
            depends_on: vec![],
            namespace: env.namespace.clone(),
            files: vec![("cm.yaml".into(), cm.to_vec())],
        }],
    );
    let secrets = root.join("packages/app/secrets");
    std::fs::create_dir_all(&secrets).expect("mkdir");
    std::fs::write(secrets.join("db.sops.yaml"), encrypted).expect("encrypted file");
    root.to_path_buf()
}

fn deploy(scratch: &Path, key: &Key, tree: &Path, cluster: &str) {
    let out = run(
        common::kix(&kix_testkit::kubeconfig_path(), &scratch.join("gcroots"))
            .env_remove("SOPS_AGE_KEY")
            .env_remove("SOPS_AGE_KEY_FILE")
            .env("HOME", scratch)
            .arg("--age-identity")
            .arg(&key.file)
            .args(["deploy", "--yes", "--path"])
            .arg(tree)
            .arg(cluster),
    );
    assert_eq!(out.code, Some(0), "{out}");
}

/// Every page reachable from `/clusters` by links to this server: the
/// pages of Kix cluster `cluster` and those of no cluster (not the event
/// stream; other tests' clusters are left alone), with their HTML.
fn crawl(ui: &Ui, cluster: &str) -> Vec<(String, String)> {
    let ours = |link: &str| {
        !link.starts_with("/clusters/") || link.split('/').nth(2).is_some_and(|c| c == cluster)
    };
    let mut seen = BTreeSet::from(["/clusters".to_string()]);
    let mut queue = VecDeque::from(["/clusters".to_string()]);
    let mut pages = vec![];
    while let Some(path) = queue.pop_front() {
        let page = ui.get(&path);
        assert!(page.status == 200, "{path}: {}", page.status);
        for link in page.body.split("href=\"").skip(1) {
            let link = link
                .split('"')
                .next()
                .unwrap_or_default()
                .replace("&amp;", "&");
            if link.starts_with('/')
                && link != "/events"
                && ours(&link)
                && seen.insert(link.clone())
            {
                queue.push_back(link);
            }
        }
        pages.push((path, page.body));
        assert!(pages.len() < 500, "the crawl does not end");
    }
    pages
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_page_shows_a_secret_value() {
    let env = TestEnv::new("web-secret").await.expect("control plane");
    let scratch = tempfile::tempdir().expect("tempdir");
    let dir = scratch.path();
    let key = keygen(dir, "test.key");
    let (first, second) = (
        kix_testkit::unique_name("p1"),
        kix_testkit::unique_name("p2"),
    );
    for (name, probe) in [("v1", &first), ("v2", &second)] {
        let encrypted = encrypted_secret(dir, &key, probe);
        deploy(
            dir,
            &key,
            &tree(&dir.join(name), &env, &encrypted),
            &env.cluster,
        );
    }
    let secret = Api::<Secret>::namespaced(env.client.clone(), &env.namespace)
        .get("db")
        .await
        .expect("the Secret is deployed");
    let data = secret.data.clone().unwrap_or_default();
    assert_eq!(
        data["password"].0,
        format!("strdata-{second}").as_bytes(),
        "the probe is live"
    );

    let ui = Ui::start(
        &kix_testkit::kubeconfig_path(),
        &["--age-identity", key.file.to_str().expect("utf-8")],
    );
    let pages = crawl(&ui, &env.cluster);
    let applied = format!("/clusters/{}/activations/{}-2", env.cluster, env.cluster);
    let objects = &pages
        .iter()
        .find(|(path, _)| *path == applied)
        .unwrap_or_else(|| panic!("the crawl reached {applied}"))
        .1;
    assert!(
        objects.contains(&format!("Secret {}/db (v1)", env.namespace)),
        "{objects}"
    );
    assert!(
        !objects.contains("cannot be read"),
        "the build was read: {objects}"
    );
    let probes: Vec<String> = [&first, &second]
        .into_iter()
        .flat_map(|p| probe_texts(p))
        .collect();
    let mut hits = vec![];
    for (path, body) in &pages {
        for probe in &probes {
            if body.contains(probe.as_str()) {
                hits.push(format!("{path} shows {probe}"));
            }
        }
    }
    assert!(hits.is_empty(), "{} pages crawled; {hits:?}", pages.len());
    assert!(
        pages.len() >= 6,
        "{:?}",
        pages.iter().map(|p| &p.0).collect::<Vec<_>>()
    );
    let _ = kix_testkit::delete_namespace(&env.client, &env.namespace).await;
}
