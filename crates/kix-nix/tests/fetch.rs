//! The operator's fetch and verify, with real Nix: a build fetched from a
//! signed `file://` cache into a store of its own, refused once a file of
//! it was changed in that store, and collected when no root keeps it.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::{key_pair, nix, offline, unique};
use kix_manifest::{CacheUrl, PublicKey};
use kix_nix::{BuildSource, FetchError, Fetcher, Store, StorePath};

/// An input-addressed top that refers to another path: two paths.
fn build_closure(dir: &Path) -> StorePath {
    let salt = unique("fetch");
    let file = dir.join("closure.nix");
    let text = format!(
        r#"let
  mk = name: script: derivation {{ inherit name; system = builtins.currentSystem; builder = "/bin/sh"; args = [ "-c" script ]; }};
  dep = mk "kix-fetch-dep" "echo {salt} > $out";
in {{ top = mk "kix-fetch-top" "echo ${{dep}} > $out"; }}
"#
    );
    std::fs::write(&file, text).expect("write closure.nix");
    let source = BuildSource::File {
        file,
        attr: "top".into(),
    };
    kix_nix::build(&source, &offline()).expect("nix build")
}

fn fetcher(root: &Path, cache: &CacheUrl, key: &PublicKey) -> Fetcher {
    let store = Store::parse(&format!("local?root={}", root.display())).expect("store");
    let roots = store.gc_roots(None);
    Fetcher::new(store, roots, vec![cache.clone()], vec![key.clone()])
}

#[test]
fn a_build_changed_in_the_store_is_refused_and_a_retired_one_is_collected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let top = build_closure(dir.path());
    let (secret, public) = key_pair(dir.path(), "kix-fetch-1");
    let cache_dir = dir.path().join("cache");
    let to = format!(
        "file://{}?secret-key={}",
        cache_dir.display(),
        secret.display()
    );
    nix(&["copy", "--to", &to, top.as_str()], None);
    let cache = CacheUrl::parse(&format!("file://{}", cache_dir.display())).expect("url");
    let root = dir.path().join("store");

    let fetched = fetcher(&root, &cache, &public)
        .obtain(&top, "prod", "prod-1")
        .expect("signed by the trusted key");
    assert_eq!(fetched, root.join(top.as_str().trim_start_matches('/')));
    assert!(fetched.is_file());

    // A file of the build changed in the store: a fresh fetcher (as after
    // a restart) re-hashes it and refuses it, naming the path and key.
    let mut permissions = std::fs::metadata(&fetched).expect("meta").permissions();
    permissions.set_mode(0o644);
    std::fs::set_permissions(&fetched, permissions).expect("chmod");
    std::fs::write(&fetched, "changed\n").expect("tamper");
    let err = fetcher(&root, &cache, &public)
        .obtain(&top, "prod", "prod-2")
        .expect_err("changed");
    assert!(matches!(err, FetchError::Untrusted { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains(top.as_str()) && text.contains("kix-fetch-1:"),
        "{text}"
    );
    assert!(text.contains("was modified"), "{text}");
    let link = root.join("nix/var/nix/gcroots/kix/prod");
    assert!(
        !link.join("prod-2").exists(),
        "the refused record keeps no root"
    );

    // The record retired (its root dropped): the closure is deleted from
    // the store, the bytes counted; the host's store keeps its copy.
    std::fs::remove_file(link.join("prod-1")).expect("drop the root");
    let collected = fetcher(&root, &cache, &public)
        .collect()
        .expect("collect")
        .expect("a store of its own is collected");
    assert!(collected.paths >= 2 && collected.bytes > 0, "{collected:?}");
    assert!(!fetched.exists());
    assert!(kix_nix::is_valid(&top).expect("host store"));
}
