//! `kix gc` end to end: retention, objects only retired activations name,
//! records, and real Nix GC roots (`nix-store --delete` of a retained build
//! is refused, of a retired one succeeds). No whole-store collection.

mod cli_support;

use cli_support::{Kix, configmap, nix_delete, path_of};

fn activations(kix: &Kix, name: &str) -> String {
    kix.configmap(name).expect("configmap")["metadata"]["annotations"]["kix.run/activations"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn gc_retires_records_their_objects_and_their_gc_roots() {
    let kix = Kix::new("gc").await;
    // keep 1 comes from the build's settings.
    let settings = serde_json::json!({"keep": 1});
    let v1 = kix.tree(
        "v1",
        &(configmap("base", "same") + &configmap("a", "1")),
        settings.clone(),
    );
    let v2 = kix.tree(
        "v2",
        &(configmap("base", "same") + &configmap("b", "2")),
        settings.clone(),
    );
    let v3 = kix.tree(
        "v3",
        &(configmap("base", "same") + &configmap("b", "2") + &configmap("c", "3")),
        settings,
    );
    kix.deploy(&v1, &[]).ok();
    // Without prune, `a` stays, named only by activation 1.
    kix.deploy(&v2, &["--prune=false"]).ok();
    kix.deploy(&v3, &["--prune=false"]).ok();
    let records = kix.records().await;
    let paths: Vec<String> = records.iter().map(path_of).collect();
    assert_eq!(paths.len(), 3);
    for path in &paths {
        assert!(
            !nix_delete(path),
            "{path} is rooted while its record exists"
        );
    }
    // `base` is unchanged since activation 1, so it still names only it.
    assert_eq!(activations(&kix, "base"), kix.name(1));

    let plan = kix
        .kix(&["gc", kix.cluster(), "--dry-run", "--output", "json"])
        .ok()
        .json();
    assert_eq!(plan["retention"]["keep"], 1);
    assert_eq!(plan["retention"]["keepFrom"], "build");
    let retired: Vec<&str> = plan["retired"]
        .as_array()
        .expect("retired")
        .iter()
        .map(|r| r["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(retired, [kix.name(1)]);
    let action = |name: &str| {
        plan["objects"]
            .as_array()
            .expect("objects")
            .iter()
            .find(|o| o["object"]["name"] == name)
            .map(|o| o["action"].as_str().unwrap_or_default().to_string())
    };
    assert_eq!(action("a").as_deref(), Some("delete"));
    assert_eq!(action("base").as_deref(), Some("repoint"));
    assert_eq!(action("b"), None, "b names a kept record only");
    // Dry run and a refused confirmation change nothing.
    let run = kix.kix(&["gc", kix.cluster()]).code(1);
    assert!(run.stderr.contains("confirmation needed"), "{}", run.stderr);
    assert_eq!(kix.records().await.len(), 3);
    assert!(kix.configmap("a").is_some());

    let run = kix.kix(&["gc", kix.cluster(), "--yes"]).ok();
    assert!(
        run.stdout
            .contains(&format!("retired 1 record(s): {}", kix.name(1))),
        "{}",
        run.stdout
    );
    let names: Vec<String> = kix
        .records()
        .await
        .iter()
        .map(|r| r.metadata.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(names, [kix.name(2), kix.name(3)]);
    assert!(
        kix.configmap("a").is_none(),
        "only the retired record named a"
    );
    // base is in the current build: kept, and it names the current record,
    // written by a server-side apply of kix's own manifest (no second manager).
    assert_eq!(activations(&kix, "base"), kix.name(3));
    let full = kix.kubectl(&[
        "get",
        "configmap",
        "-n",
        kix.ns(),
        "base",
        "-o",
        "json",
        "--show-managed-fields",
    ]);
    let full: serde_json::Value = serde_json::from_str(&full).expect("json");
    let managers = full["metadata"]["managedFields"].clone();
    let managers: Vec<(String, String)> = managers
        .as_array()
        .expect("managedFields")
        .iter()
        .map(|m| {
            (
                m["manager"].as_str().unwrap_or_default().into(),
                m["operation"].as_str().unwrap_or_default().into(),
            )
        })
        .collect();
    assert_eq!(
        managers,
        [(format!("kix/{}", kix.cluster()), "Apply".to_string())]
    );
    assert_eq!(activations(&kix, "b"), kix.name(2));
    // The next deploy of the same build is a no-op: nothing conflicts.
    let run = kix.deploy(&v3, &[]).ok();
    assert!(run.stdout.contains("nothing to do"), "{}", run.stdout);

    // Nix: the retired build can go, the retained ones cannot.
    assert!(!kix.roots.join(kix.cluster()).join(kix.name(1)).exists());
    assert!(nix_delete(&paths[0]), "{} is no longer rooted", paths[0]);
    assert!(!nix_delete(&paths[1]), "{} is still rooted", paths[1]);
    assert!(!nix_delete(&paths[2]), "{} is still rooted", paths[2]);

    // --keep 0 from the flag: activation 2 goes; `b` is in the current build.
    let run = kix
        .kix(&[
            "gc",
            kix.cluster(),
            "--keep",
            "0",
            "--yes",
            "--output",
            "json",
        ])
        .ok();
    let out = run.json();
    assert_eq!(out["plan"]["retention"]["keepFrom"], "flag");
    assert_eq!(
        out["report"]["deletedRecords"],
        serde_json::json!([kix.name(2)])
    );
    assert_eq!(activations(&kix, "b"), kix.name(3));
    assert!(nix_delete(&paths[1]));
    assert!(!nix_delete(&paths[2]));
    // Nothing left to do.
    let run = kix.kix(&["gc", kix.cluster(), "--keep", "0", "--yes"]).ok();
    assert!(run.stdout.contains("nothing to retire"), "{}", run.stdout);
}

#[tokio::test]
async fn gc_max_age_and_orphaned_roots() {
    let kix = Kix::new("gc-age").await;
    let v1 = kix.tree(
        "v1",
        &configmap("x", "1"),
        serde_json::json!({"maxAge": "30d"}),
    );
    let v2 = kix.tree(
        "v2",
        &configmap("x", "2"),
        serde_json::json!({"maxAge": "30d"}),
    );
    kix.deploy(&v1, &[]).ok();
    kix.deploy(&v2, &[]).ok();
    // Nothing is 30 days old; keep defaults to 5.
    let plan = kix
        .kix(&["gc", kix.cluster(), "--dry-run", "-o", "json"])
        .ok()
        .json();
    assert_eq!(plan["retention"]["keep"], 5);
    assert_eq!(plan["retention"]["keepFrom"], "default");
    assert_eq!(plan["retention"]["maxAge"], "30d");
    assert_eq!(plan["retired"], serde_json::json!([]));
    // A root whose record is gone (deleted by hand) is dropped.
    let stray = kix.roots.join(kix.cluster()).join(kix.name(99));
    std::os::unix::fs::symlink(kix.roots.join(kix.cluster()).join(kix.name(1)), &stray)
        .expect("symlink");
    // --max-age 0s retires every Superseded record, whatever keep says.
    let run = kix
        .kix(&["gc", kix.cluster(), "--max-age", "0s", "--yes"])
        .ok();
    assert!(run.stdout.contains("older than 0s"), "{}", run.stdout);
    assert!(
        run.stdout
            .contains(&format!("retired 1 record(s): {}", kix.name(1))),
        "{}",
        run.stdout
    );
    assert!(!stray.exists(), "orphaned root removed");
    assert_eq!(kix.records().await.len(), 1);
}
