//! The store and GC roots, against the real local Nix store.
//!
//! Every test makes store paths of its own (unique content), so tests never
//! share a path, and none of them collects garbage: paths are deleted one by
//! one with `nix-store --delete`.

mod common;

use std::path::PathBuf;

use common::{fresh_store_path, nix_store_delete, unique};
use kix_nix::{GcRoots, NixError, StorePath};

#[test]
fn add_to_store_names_the_path_after_the_directory_and_keeps_the_tree() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("my-tree");
    std::fs::create_dir_all(dir.join("a/b")).expect("mkdir");
    let content = unique("deep");
    std::fs::write(dir.join("a/b/deep.json"), &content).expect("write");
    std::fs::write(dir.join("top.yaml"), "x: 1\n").expect("write");

    let path = kix_nix::add_to_store(&dir).expect("added");
    assert_eq!(path.name(), "my-tree");
    assert!(path.as_str().starts_with("/nix/store/"));
    assert_eq!(
        std::fs::read_to_string(path.as_path().join("a/b/deep.json")).expect("recursive copy"),
        content
    );
    assert!(path.as_path().join("top.yaml").is_file());
    assert!(kix_nix::is_valid(&path).expect("check"));

    // Same contents, same path.
    assert_eq!(kix_nix::add_to_store(&dir).expect("again"), path);
    nix_store_delete(&path).expect("our own unrooted path can go");
}

#[test]
fn add_to_store_cleans_up_names_nix_does_not_accept() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join(".my build");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join("f"), unique("odd-name")).expect("write");
    let path = kix_nix::add_to_store(&dir).expect("added");
    assert_eq!(path.name(), "my-build");
    nix_store_delete(&path).expect("delete");
}

#[test]
fn add_to_store_refuses_a_file_and_a_missing_directory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("file.json");
    std::fs::write(&file, "{}").expect("write");
    assert!(matches!(
        kix_nix::add_to_store(&file),
        Err(NixError::NotABuild { .. })
    ));
    assert!(matches!(
        kix_nix::add_to_store(&tmp.path().join("missing")),
        Err(NixError::PathNotFound { .. })
    ));
}

#[test]
fn validity_and_realise() {
    let path = fresh_store_path("valid");
    assert!(kix_nix::is_valid(&path).expect("check"));
    kix_nix::realise(&path).expect("a valid path realises to itself");
    kix_nix::ensure_valid(&path).expect("valid");
    nix_store_delete(&path).expect("delete");
    assert!(!kix_nix::is_valid(&path).expect("check"));

    // Gone, and no substituter has it (there are none here).
    let err = kix_nix::realise(&path).expect_err("cannot come back");
    match &err {
        NixError::NotRealisable { path: p, stderr } => {
            assert_eq!(p, path.as_str());
            assert!(!stderr.is_empty());
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(err.to_string().contains(path.as_str()), "{err}");
    assert!(kix_nix::ensure_valid(&path).is_err());
}

#[test]
fn a_path_is_found_first_and_checked_after() {
    // Registered: found, then checked as found.
    let path = fresh_store_path("unchecked");
    let resolved = kix_nix::resolve_path_unchecked(path.as_path()).expect("found");
    assert_eq!(resolved.path, path);
    assert_eq!(resolved.check().expect("valid"), kix_nix::Checked::AsFound);

    // On disk but not registered (half-written, or put there by hand): found,
    // and the check refuses it, naming it (no substituter has it here).
    nix_store_delete(&path).expect("delete");
    std::fs::create_dir(path.as_path()).expect("an unregistered directory in the store");
    std::fs::write(path.as_path().join("kix.json"), "{}").expect("write");
    let resolved = kix_nix::resolve_path_unchecked(path.as_path()).expect("found");
    let err = resolved.check().expect_err("not valid");
    let checked_at_once = kix_nix::resolve_path(path.as_path());
    std::fs::remove_dir_all(path.as_path()).expect("remove the unregistered directory");
    assert!(
        matches!(&err, NixError::NotRealisable { path: p, .. } if p == path.as_str()),
        "{err:?}"
    );
    assert!(
        matches!(checked_at_once, Err(NixError::NotRealisable { .. })),
        "{checked_at_once:?}"
    );
}

#[test]
fn resolve_path_of_a_store_path_and_of_a_symlink_to_one() {
    let path = fresh_store_path("resolve");
    assert_eq!(
        kix_nix::resolve_path(path.as_path()).expect("store path"),
        path
    );

    let tmp = tempfile::tempdir().expect("tempdir");
    let result = tmp.path().join("result");
    std::os::unix::fs::symlink(path.as_path(), &result).expect("symlink");
    assert_eq!(kix_nix::resolve_path(&result).expect("./result"), path);

    // Inside a store path is not a store path: name the one to use.
    let inner = path.as_path().join("content");
    let err = kix_nix::resolve_path(&inner).expect_err("a file inside");
    assert!(err.to_string().contains(path.as_str()), "{err}");
    nix_store_delete(&path).expect("delete");
}

#[test]
fn resolve_path_of_a_missing_store_path_tries_to_realise_it() {
    let missing = StorePath::parse("/nix/store/00000000000000000000000000000000-kix-not-there")
        .expect("syntactically valid");
    let err = kix_nix::resolve_path(missing.as_path()).expect_err("not anywhere");
    assert!(matches!(err, NixError::NotRealisable { .. }), "{err:?}");
}

#[test]
fn resolve_path_adds_a_plain_directory_with_kix_json() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("tree");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(
        dir.join("kix.json"),
        format!(
            r#"{{"format":1,"cluster":"c","packages":[],"settings":{{"note":"{}"}}}}"#,
            unique("tree")
        ),
    )
    .expect("write");
    let path = kix_nix::resolve_path(&dir).expect("added");
    assert_eq!(path.name(), "tree");
    assert!(path.as_path().join("kix.json").is_file());
    nix_store_delete(&path).expect("delete");

    // A directory that is not a tree is not added (think `--path ~`).
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let err = kix_nix::resolve_path(&empty).expect_err("no kix.json");
    assert!(err.to_string().contains("no kix.json"), "{err}");
    assert!(matches!(
        kix_nix::resolve_path(&tmp.path().join("nothing")),
        Err(NixError::PathNotFound { .. })
    ));
}

/// After `add`, Nix refuses to delete the path; after `remove`, it deletes it.
fn root_keeps_path_alive(roots: &GcRoots, cluster: &str) {
    let path = fresh_store_path("rooted");
    let activation = format!("{cluster}-1");

    let link = roots.add(cluster, &activation, &path).expect("add root");
    assert_eq!(link, roots.dir().join(cluster).join(&activation));
    assert_eq!(
        std::fs::read_link(&link).expect("symlink"),
        path.to_path_buf()
    );

    let err = nix_store_delete(&path).expect_err("the root keeps it alive");
    assert!(err.contains("still alive"), "{err}");
    assert!(kix_nix::is_valid(&path).expect("check"));

    // Idempotent.
    roots.add(cluster, &activation, &path).expect("add again");

    let listed = roots.list(cluster).expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].activation, activation);
    assert_eq!(listed[0].cluster, cluster);
    assert_eq!(listed[0].target, path.to_path_buf());

    assert!(roots.remove(cluster, &activation).expect("remove"));
    assert!(!roots.remove(cluster, &activation).expect("already gone"));
    assert!(roots.list(cluster).expect("list").is_empty());
    assert!(
        !roots.dir().join(cluster).exists(),
        "empty cluster dir removed"
    );

    nix_store_delete(&path).expect("no root any more");
    assert!(!kix_nix::is_valid(&path).expect("check"));
}

#[test]
fn gc_root_in_any_directory() {
    // Outside /nix/var/nix/gcroots: only the indirect root (gcroots/auto)
    // keeps the path alive.
    let tmp = tempfile::tempdir().expect("tempdir");
    let roots = GcRoots::new(tmp.path().join("roots"));
    root_keeps_path_alive(&roots, "prod");
}

#[test]
fn gc_root_in_the_default_directory() {
    let roots = GcRoots::new(kix_nix::DEFAULT_GCROOTS_DIR);
    // A cluster name of our own, so nothing else is touched.
    root_keeps_path_alive(&roots, &unique("kix-test"));
}

#[test]
fn gc_roots_of_several_activations() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let roots = GcRoots::new(tmp.path());
    let a = fresh_store_path("first");
    let b = fresh_store_path("second");
    roots.add("apps", "apps-2", &b).expect("add");
    roots.add("apps", "apps-1", &a).expect("add");
    roots.add("infra", "infra-1", &a).expect("add");

    let names: Vec<_> = roots
        .list("apps")
        .expect("list")
        .into_iter()
        .map(|r| (r.activation, r.target))
        .collect();
    assert_eq!(
        names,
        vec![
            ("apps-1".to_owned(), a.to_path_buf()),
            ("apps-2".to_owned(), b.to_path_buf())
        ]
    );
    assert!(roots.list("nothing").expect("list").is_empty());

    // `a` is still held by infra-1 after apps-1 goes.
    roots.remove("apps", "apps-1").expect("remove");
    assert!(nix_store_delete(&a).is_err());
    roots.remove("infra", "infra-1").expect("remove");
    roots.remove("apps", "apps-2").expect("remove");
    nix_store_delete(&a).expect("delete");
    nix_store_delete(&b).expect("delete");
}

#[test]
fn gc_roots_dir_from_environment_or_default() {
    // Read-only look at the environment: whatever it is, the dir follows it.
    let expected = match std::env::var_os(kix_nix::GCROOTS_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => kix_nix::default_gcroots_dir(),
    };
    assert_eq!(GcRoots::default().dir(), expected);
    assert_eq!(GcRoots::from_env().dir(), expected);
}

#[test]
fn gc_root_refuses_bad_names() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let roots = GcRoots::new(tmp.path());
    let path = StorePath::parse("/nix/store/00000000000000000000000000000000-x").expect("parse");
    for (cluster, activation) in [("..", "a"), ("c", "../../etc"), ("c", ""), ("a/b", "x")] {
        let err = roots.add(cluster, activation, &path).expect_err("bad name");
        assert!(matches!(err, NixError::InvalidRootName { .. }), "{err:?}");
    }
}
