//! Publishing a build to a `file://` binary cache with real Nix: signed
//! narinfos, nothing sent twice, signatures checked by Nix.

mod common;

use std::path::Path;

use common::{key_pair, offline, unique};
use kix_manifest::CacheUrl;
use kix_nix::{BuildSource, Cache, CacheError, PushProgress, SigningKey, StorePath};

/// An input-addressed build (so its paths need signatures, unlike paths
/// added with `nix-store --add`) of three paths: `top` refers to two others.
fn build_closure(dir: &Path) -> StorePath {
    let salt = unique("cache");
    let file = dir.join("closure.nix");
    std::fs::write(
        &file,
        format!(
            r#"let
  mk = name: script: derivation {{ inherit name; system = builtins.currentSystem; builder = "/bin/sh"; args = [ "-c" script ]; }};
  a = mk "kix-cache-dep-a" "echo a {salt} > $out";
  b = mk "kix-cache-dep-b" "echo b {salt} > $out";
in {{ top = mk "kix-cache-top" "echo ${{a}} ${{b}} > $out"; }}
"#
        ),
    )
    .expect("write closure.nix");
    let source = BuildSource::File {
        file,
        attr: "top".into(),
    };
    kix_nix::build(&source, &offline()).expect("nix build")
}

fn narinfos(cache: &Path) -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(cache)
        .expect("cache dir")
        .filter_map(|e| {
            let path = e.expect("entry").path();
            (path.extension()? == "narinfo").then(|| std::fs::read_to_string(&path).expect("read"))
        })
        .collect();
    found.sort();
    found
}

#[test]
fn a_push_signs_the_closure_and_a_second_push_sends_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let top = build_closure(tmp.path());
    let (secret, public) = key_pair(tmp.path(), "kix-test-1");
    let dir = tmp.path().join("cache");
    let url = CacheUrl::parse(&format!("file://{}", dir.display())).expect("url");
    let cache = Cache::new(url, vec![public]);
    let key = SigningKey::from_file(&secret).expect("key");
    assert_eq!(key.name(), "kix-test-1");

    let mut events = Vec::new();
    let report = cache
        .push(&top, Some(&key), &mut |e| events.push(e))
        .expect("push");
    assert_eq!(report.paths_sent, 3, "{report:?}");
    assert_eq!(report.paths_present, 0);
    assert!(report.bytes_sent > 0);
    assert_eq!(
        events.first(),
        Some(&PushProgress::Checked {
            closure: 3,
            present: 0
        })
    );
    let copying = events
        .iter()
        .filter(|e| matches!(e, PushProgress::Copying { total: 3, .. }))
        .count();
    assert_eq!(copying, 3, "{events:?}");

    let infos = narinfos(&dir);
    assert_eq!(infos.len(), 3);
    for info in &infos {
        assert!(info.contains("\nSig: kix-test-1:"), "{info}");
    }
    assert!(infos.iter().any(|i| i.contains(top.as_str())));
    cache.verify(&top).expect("signed by the trusted key");

    let again = cache.push(&top, Some(&key), &mut |_| {}).expect("again");
    assert_eq!(again.paths_sent, 0, "{again:?}");
    assert_eq!(again.bytes_sent, 0);
    assert_eq!(again.paths_present, 3);
    assert_eq!(again.paths_signed, 0);
    assert_eq!(narinfos(&dir), infos, "nothing rewritten");
}

#[test]
fn signatures_from_another_key_are_refused_and_a_new_key_signs_in_place() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let top = build_closure(tmp.path());
    let (_, trusted) = key_pair(tmp.path(), "kix-trusted-1");
    let (other_secret, _) = key_pair(tmp.path(), "kix-other-1");
    let dir = tmp.path().join("cache");
    let url = CacheUrl::parse(&format!("file://{}", dir.display())).expect("url");
    let cache = Cache::new(url.clone(), vec![trusted]);

    // Unsigned, then signed by a key the cache does not trust.
    let report = cache.push(&top, None, &mut |_| {}).expect("push unsigned");
    assert_eq!(report.paths_sent, 3);
    assert!(narinfos(&dir).iter().all(|i| !i.contains("\nSig:")));
    let err = cache.verify(&top).expect_err("unsigned");
    assert!(matches!(err, CacheError::Untrusted { .. }), "{err}");

    let other = SigningKey::from_file(&other_secret).expect("key");
    let report = cache.push(&top, Some(&other), &mut |_| {}).expect("sign");
    assert_eq!(
        (report.paths_sent, report.paths_signed),
        (0, 3),
        "{report:?}"
    );
    assert!(
        narinfos(&dir)
            .iter()
            .all(|i| i.contains("\nSig: kix-other-1:"))
    );
    let err = cache.verify(&top).expect_err("signed by an untrusted key");
    assert!(err.to_string().contains(top.as_str()), "{err}");

    let none = Cache::new(url, Vec::new());
    assert!(matches!(
        none.verify(&top),
        Err(CacheError::NoPublicKeys { .. })
    ));
}

#[test]
fn a_cache_that_cannot_be_read_is_named_with_what_nix_said() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let top = build_closure(tmp.path());
    // A file where the cache directory should be: Nix cannot make it.
    let blocker = tmp.path().join("not-a-dir");
    std::fs::write(&blocker, "x").expect("write");
    let url = CacheUrl::parse(&format!("file://{}/cache", blocker.display())).expect("url");
    let err = Cache::new(url, Vec::new())
        .push(&top, None, &mut |_| {})
        .expect_err("cannot write");
    let text = err.to_string();
    assert!(matches!(err, CacheError::Unreachable { .. }), "{err:?}");
    assert!(
        text.starts_with(&format!("cannot ask file://{}/cache", blocker.display())),
        "{text}"
    );
    assert!(text.contains("is not a directory"), "{text}");
}
