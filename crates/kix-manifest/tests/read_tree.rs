//! `read_tree` cases that need a tree made at run time: limits, file types
//! git cannot store, the root and the store directory.

use std::fs;
use std::path::{Path, PathBuf};

use kix_manifest::{ObjectKey, ReadOptions, TreeError, read_tree};

/// A temporary "store" with one build in it.
struct Store {
    dir: tempfile::TempDir,
}

impl Store {
    fn new() -> Store {
        Store {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().canonicalize().expect("canonical tempdir")
    }

    fn build(&self) -> PathBuf {
        self.path().join("build")
    }

    fn write(&self, rel: &str, text: &str) {
        let path = self.build().join(rel);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, text).expect("write");
    }

    /// A build with package `app` (namespace `app`).
    fn with_app() -> Store {
        let store = Store::new();
        store.write(
            "kix.json",
            r#"{"format":1,"cluster":"test","packages":["app"]}"#,
        );
        store.write(
            "packages/app/package.json",
            r#"{"name":"app","version":"1","namespace":"app"}"#,
        );
        store
    }

    fn options(&self) -> ReadOptions {
        ReadOptions {
            store_dir: self.path(),
            ..ReadOptions::default()
        }
    }

    fn read(&self) -> Result<kix_manifest::Build, TreeError> {
        read_tree(&self.build(), &self.options())
    }
}

fn config_maps(names: impl IntoIterator<Item = usize>) -> String {
    names
        .into_iter()
        .map(|i| format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\n---\n"))
        .collect()
}

#[test]
fn reads_a_small_build() {
    let store = Store::with_app();
    store.write("packages/app/resources/cms.yaml", &config_maps(0..3));
    let build = store.read().expect("reads");
    assert_eq!(build.root, store.build());
    assert_eq!(build.cluster, "test");
    assert_eq!(build.object_count(), 3);
    let names: Vec<&str> = build.objects().map(|o| o.key.name.as_str()).collect();
    assert_eq!(names, ["cm-0", "cm-1", "cm-2"]);
    let object = build.objects().next().expect("one object");
    assert_eq!(object.package, "app");
    assert_eq!(object.api_version, "v1");
    assert_eq!(object.source, Path::new("packages/app/resources/cms.yaml"));
    // The package namespace is filled into the manifest too.
    assert_eq!(object.manifest()["metadata"]["namespace"], "app");
    assert_eq!(object.digest().len(), 64);
    assert_eq!(build.summary().by_kind["ConfigMap"], 3);
    assert_eq!(build.summary().by_package["app"], 3);
    assert_eq!(build.package("app").map(|p| p.version.as_str()), Some("1"));
}

#[test]
fn file_over_the_size_limit() {
    let store = Store::with_app();
    let text = config_maps(0..10);
    store.write("packages/app/resources/cms.yaml", &text);
    let options = ReadOptions {
        max_file_bytes: 100,
        ..store.options()
    };
    // kix.json and package.json are under 100 bytes; the resource file is not.
    assert_eq!(
        read_tree(&store.build(), &options),
        Err(TreeError::FileTooLarge {
            file: "packages/app/resources/cms.yaml".into(),
            size: text.len() as u64,
            limit: 100,
        })
    );
    let message = read_tree(&store.build(), &options)
        .expect_err("too large")
        .to_string();
    assert_eq!(
        message,
        format!(
            "packages/app/resources/cms.yaml: {} bytes, more than the limit of 100 bytes per file",
            text.len()
        )
    );
}

#[test]
fn object_over_the_size_limit() {
    let store = Store::with_app();
    let big = "x".repeat(300);
    store.write(
        "packages/app/resources/cms.yaml",
        &format!(
            "{}apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n  x: {big}\n",
            config_maps(0..2)
        ),
    );
    let options = ReadOptions {
        max_object_bytes: 200,
        ..store.options()
    };
    let err = read_tree(&store.build(), &options).expect_err("too large");
    assert_eq!(
        err,
        TreeError::ObjectTooLarge {
            file: "packages/app/resources/cms.yaml".into(),
            document: 3,
            line: Some(11),
            items: vec![],
            key: Box::new(ObjectKey {
                group: String::new(),
                kind: "ConfigMap".into(),
                namespace: Some("app".into()),
                name: "big".into(),
            }),
            limit: 200,
        }
    );
    assert_eq!(
        err.to_string(),
        "packages/app/resources/cms.yaml: document 3 (line 11): object ConfigMap app/big is more than 200 bytes as JSON"
    );
    // The limit counts compact JSON: a limit of exactly the size passes.
    let options = ReadOptions {
        max_object_bytes: 1000,
        ..store.options()
    };
    assert!(read_tree(&store.build(), &options).is_ok());
}

#[test]
fn too_many_objects() {
    let store = Store::with_app();
    store.write("packages/app/resources/a.yaml", &config_maps(0..3));
    store.write("packages/app/resources/b.yaml", &config_maps(3..6));
    let options = ReadOptions {
        max_objects: 4,
        ..store.options()
    };
    let err = read_tree(&store.build(), &options).expect_err("too many");
    assert_eq!(
        err,
        TreeError::TooManyObjects {
            file: "packages/app/resources/b.yaml".into(),
            limit: 4
        }
    );
    assert_eq!(
        err.to_string(),
        "packages/app/resources/b.yaml: the build has more than 4 objects"
    );
    let options = ReadOptions {
        max_objects: 6,
        ..store.options()
    };
    assert_eq!(
        read_tree(&store.build(), &options).map(|b| b.object_count()),
        Ok(6)
    );
}

#[test]
fn resource_that_is_not_a_regular_file() {
    let store = Store::with_app();
    let fifo = store.build().join("packages/app/resources/pipe.yaml");
    fs::create_dir_all(fifo.parent().expect("parent")).expect("mkdir");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(status.success());
    // Reading a FIFO would block forever; the reader refuses it instead.
    assert_eq!(
        store.read(),
        Err(TreeError::NotAFile {
            file: "packages/app/resources/pipe.yaml".into()
        })
    );
    // A directory named like a resource is just a directory.
    fs::remove_file(&fifo).expect("rm fifo");
    store.write(
        "packages/app/resources/dir.yaml/cm.json",
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}"#,
    );
    assert_eq!(store.read().map(|b| b.object_count()), Ok(1));
}

#[test]
fn root_outside_the_store() {
    let store = Store::with_app();
    let elsewhere = Store::new();
    let options = ReadOptions {
        store_dir: elsewhere.path(),
        ..ReadOptions::default()
    };
    assert_eq!(
        read_tree(&store.build(), &options),
        Err(TreeError::RootOutsideStore {
            root: store.build(),
            resolved: store.build(),
            store_dir: elsewhere.path(),
        })
    );
    // The store directory itself is not a build.
    let options = store.options();
    assert!(matches!(
        read_tree(&store.path(), &options),
        Err(TreeError::RootOutsideStore { .. })
    ));
    // Nor is anything under a store directory that does not exist.
    let options = ReadOptions {
        store_dir: "/does/not/exist".into(),
        ..ReadOptions::default()
    };
    assert!(matches!(
        read_tree(&store.build(), &options),
        Err(TreeError::RootOutsideStore { .. })
    ));
    // The default store is /nix/store.
    assert_eq!(ReadOptions::default().store_dir, Path::new("/nix/store"));
}

#[test]
fn root_errors() {
    let store = Store::with_app();
    let missing = store.path().join("missing");
    let err = read_tree(&missing, &store.options()).expect_err("missing");
    assert!(
        matches!(&err, TreeError::Root { root, .. } if *root == missing),
        "{err}"
    );
    let file = store.build().join("kix.json");
    assert_eq!(
        read_tree(&file, &store.options()),
        Err(TreeError::Root {
            root: file.clone(),
            message: "not a directory".into()
        })
    );
}

#[test]
fn root_through_a_symlink_is_canonicalized() {
    // `kix deploy --path ./result`: the root is a symlink into the store.
    let store = Store::with_app();
    store.write("packages/app/resources/cms.yaml", &config_maps(0..1));
    let outside = tempfile::tempdir().expect("tempdir");
    let result = outside.path().join("result");
    std::os::unix::fs::symlink(store.build(), &result).expect("symlink");
    let build = read_tree(&result, &store.options()).expect("reads");
    assert_eq!(build.root, store.build());
    assert_eq!(build.object_count(), 1);
}

#[test]
fn symlinks_into_other_store_paths_are_followed() {
    // Nix trees link into other store paths (symlinkJoin): allowed.
    let store = Store::with_app();
    let other = store.path().join("other-store-path");
    fs::create_dir_all(other.join("manifests")).expect("mkdir");
    fs::write(other.join("manifests/cm.yaml"), config_maps(0..2)).expect("write");
    fs::write(
        other.join("single.json"),
        r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"}}"#,
    )
    .expect("write");
    fs::create_dir_all(store.build().join("packages/app/resources")).expect("mkdir");
    std::os::unix::fs::symlink(
        other.join("manifests"),
        store.build().join("packages/app/resources/linked"),
    )
    .expect("symlink");
    std::os::unix::fs::symlink(
        other.join("single.json"),
        store.build().join("packages/app/resources/single.json"),
    )
    .expect("symlink");
    let build = store.read().expect("reads");
    let sources: Vec<String> = build
        .objects()
        .map(|o| format!("{} {}", o.key, o.source.display()))
        .collect();
    assert_eq!(
        sources,
        [
            "ConfigMap app/cm-0 packages/app/resources/linked/cm.yaml",
            "ConfigMap app/cm-1 packages/app/resources/linked/cm.yaml",
            "Secret app/s packages/app/resources/single.json",
        ]
    );
}

#[test]
fn package_directories_may_be_symlinks() {
    let store = Store::new();
    store.write(
        "kix.json",
        r#"{"format":1,"cluster":"test","packages":["app"]}"#,
    );
    let pkg = store.path().join("pkg-app");
    fs::create_dir_all(pkg.join("resources")).expect("mkdir");
    fs::write(pkg.join("package.json"), r#"{"name":"app","version":"1"}"#).expect("write");
    fs::write(pkg.join("resources/cm.yaml"), config_maps(0..1)).expect("write");
    fs::create_dir_all(store.build().join("packages")).expect("mkdir");
    std::os::unix::fs::symlink(&pkg, store.build().join("packages/app")).expect("symlink");
    let build = store.read().expect("reads");
    assert_eq!(build.object_count(), 1);
    assert_eq!(
        build.objects().next().map(|o| o.source.clone()),
        Some(PathBuf::from("packages/app/resources/cm.yaml"))
    );
}

/// A tree of many resource files over three packages (`a` and `b` in
/// namespace `shared`): more files than the reader's threads parse ahead of
/// its checks (16 per thread), also across packages. `a` has 150 files of two
/// ConfigMaps each (`cm-0` to `cm-299`); `b` has 150 files of one each
/// (`cm-1000` on); `c` has none.
fn many_files() -> Store {
    let store = Store::new();
    store.write(
        "kix.json",
        r#"{"format":1,"cluster":"test","packages":["a","b","c"]}"#,
    );
    for package in ["a", "b", "c"] {
        store.write(
            &format!("packages/{package}/package.json"),
            &format!(r#"{{"name":"{package}","version":"1","namespace":"shared"}}"#),
        );
    }
    for i in 0..150 {
        store.write(
            &format!("packages/a/resources/{i:03}.yaml"),
            &config_maps([2 * i, 2 * i + 1]),
        );
        store.write(
            &format!("packages/b/resources/{i:03}.yaml"),
            &config_maps([1000 + i]),
        );
    }
    store
}

#[test]
fn first_error_in_file_order_across_many_files() {
    let store = many_files();
    // Three errors, in file order: a duplicate of a/075.yaml's second object
    // in b/100.yaml, a YAML syntax error in the file after it, and a
    // package.json `c` that does not parse.
    store.write("packages/b/resources/100.yaml", &config_maps([151]));
    store.write("packages/b/resources/101.yaml", "a: [unclosed\n");
    store.write("packages/c/package.json", "{");
    let expected = [
        "duplicate object ConfigMap shared/cm-151: in packages/a/resources/075.yaml (document 2) and in packages/b/resources/100.yaml (document 1)",
        "packages/b/resources/101.yaml: line 1: unclosed bracket '[' (column 4)",
        "packages/c/package.json: EOF while parsing an object at line 1 column 1",
    ];
    // The first is reported; once it is fixed, the next one.
    assert_eq!(
        store.read().map_err(|e| e.to_string()).err().as_deref(),
        Some(expected[0])
    );
    store.write("packages/b/resources/100.yaml", &config_maps([1100]));
    assert_eq!(
        store.read().map_err(|e| e.to_string()).err().as_deref(),
        Some(expected[1])
    );
    store.write("packages/b/resources/101.yaml", &config_maps([1101]));
    assert_eq!(
        store.read().map_err(|e| e.to_string()).err().as_deref(),
        Some(expected[2])
    );
    store.write("packages/c/package.json", r#"{"name":"c","version":"1"}"#);
    assert_eq!(store.read().map(|b| b.object_count()), Ok(450));
}

#[test]
fn too_many_objects_across_many_files() {
    let store = many_files();
    // A syntax error after the file where the limit is crossed is not reached.
    store.write("packages/b/resources/000.yaml", "a: [unclosed\n");
    let options = ReadOptions {
        max_objects: 250,
        ..store.options()
    };
    let err = read_tree(&store.build(), &options).expect_err("too many");
    assert_eq!(
        err.to_string(),
        "packages/a/resources/125.yaml: the build has more than 250 objects"
    );
}

#[test]
fn many_files_keep_their_order() {
    let store = many_files();
    let build = store.read().expect("reads");
    assert_eq!(build.object_count(), 450);
    // Each package's objects in key order (all are ConfigMaps of one
    // namespace), each from its own file.
    for package in &build.packages {
        let keys: Vec<_> = package.objects.iter().map(|o| &o.key).collect();
        assert!(keys.is_sorted(), "{}", package.name);
        for object in &package.objects {
            let n: usize = object.key.name["cm-".len()..].parse().expect("cm-<n>");
            let file = match package.name.as_str() {
                "a" => n / 2,
                _ => n - 1000,
            };
            assert_eq!(
                object.source,
                PathBuf::from(format!(
                    "packages/{}/resources/{file:03}.yaml",
                    package.name
                ))
            );
        }
    }
    // The same build every time.
    assert_eq!(store.read(), Ok(build));
}

// ---- the issue's observations: YAML read as kubectl reads it ----------

/// Reads one resource file `app.yaml` in package `app`: its manifests in
/// apply order, or the error message.
fn read_one(text: &str) -> Result<Vec<serde_json::Value>, String> {
    let store = Store::with_app();
    store.write("packages/app/resources/app.yaml", text);
    store
        .read()
        .map(|build| build.objects().map(|o| o.manifest()).collect())
        .map_err(|e| e.to_string())
}

fn cm(body: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n{body}")
}

#[test]
fn mixed_case_booleans_are_strings() {
    let objects = read_one(&cm("data: {a: oN, b: tRUE, c: nO, d: On, e: NO}\n")).expect("reads");
    assert_eq!(
        objects[0]["data"],
        serde_json::json!({"a": "oN", "b": "tRUE", "c": "nO", "d": true, "e": false})
    );
}

#[test]
fn keys_that_are_not_strings_are_refused_with_the_line_and_what_to_write() {
    for (key, to_yaml) in [
        ("on", "the boolean true"),
        ("y", "the boolean true"),
        ("0644", "the integer 420"),
        ("1.0", "a number"),
        ("0x1F", "the integer 31"),
        ("null", "null"),
    ] {
        let error = read_one(&cm(&format!("data:\n  a: b\n  {key}: c\n"))).expect_err(key);
        assert_eq!(
            error,
            format!(
                "packages/app/resources/app.yaml: line 7: key `{key}` is {to_yaml} to YAML, not \
                 a string (kubectl {}): quote it, as \"{key}\"",
                match key {
                    "on" | "y" => "sends the key \"true\"".to_owned(),
                    "0644" => "sends the key \"420\"".to_owned(),
                    "0x1F" => "sends the key \"31\"".to_owned(),
                    "null" => "fails".to_owned(),
                    _ => "sends another key".to_owned(),
                }
            ),
            "{key}"
        );
    }
    // Quoted, they are the strings written.
    let objects = read_one(&cm("data: {\"on\": a, '0644': b}\n")).expect("reads");
    assert_eq!(
        objects[0]["data"],
        serde_json::json!({"on": "a", "0644": "b"})
    );
}

#[test]
fn content_after_a_document_end_is_refused() {
    let text = format!(
        "{}...\n{}",
        cm(""),
        cm("").replace("name: cm", "name: other")
    );
    assert_eq!(
        read_one(&text).expect_err("refused"),
        "packages/app/resources/app.yaml: line 6: content after the end of a document (`...`), \
         which kubectl ignores: remove the `...` line above it, or start a new document with a \
         `---` line"
    );
    // `...` followed by `---`, or by comments only, is fine.
    let text = format!(
        "{}...\n---\n{}...\n# end\n",
        cm(""),
        cm("").replace("name: cm", "name: b")
    );
    assert_eq!(read_one(&text).expect("reads").len(), 2);
}

#[test]
fn a_merge_key_after_an_explicit_key_replaces_it_as_in_kubectl() {
    let objects = read_one(&format!(
        "b: &b {{x: 1}}\n{}",
        cm("d: {x: 0, <<: *b}\ne: {<<: *b, x: 0}\n")
    ))
    .expect("reads");
    assert_eq!(objects[0]["d"], serde_json::json!({"x": 1}));
    assert_eq!(objects[0]["e"], serde_json::json!({"x": 0}));
}

#[test]
fn numbers_in_every_base_and_with_underscores() {
    let objects = read_one(&cm(
        "x: [0X1F, 0O17, 0B101, 1_, 685_230.15, 0644, 1.0, 1e3, 08]\nt:\n- 1:30\n",
    ))
    .expect("reads");
    assert_eq!(
        objects[0]["x"],
        serde_json::json!([31, 15, 5, 1, 685230.15, 420, 1, 1000, 8])
    );
    // Sexagesimal is a string (in a flow collection, kix asks to quote it).
    assert_eq!(objects[0]["t"], serde_json::json!(["1:30"]));
}

#[test]
fn duplicate_keys_are_refused_also_when_they_differ_only_in_form() {
    for data in ["{\"a\": b, a: c}", "{a: 1, a: 2}", "{'x': 1, \"x\": 2}"] {
        let error = read_one(&cm(&format!("data: {data}\n"))).expect_err(data);
        assert!(error.contains("line 5: duplicate key"), "{data}: {error}");
    }
    // `{"1": b, 1: a}`: the plain 1 is an integer key, refused as such.
    let error = read_one(&cm("data: {\"1\": b, 1: a}\n")).expect_err("refused");
    assert!(error.contains("key `1` is the integer 1"), "{error}");
}

#[test]
fn any_document_with_items_is_a_list_whose_items_are_the_objects() {
    let text = "apiVersion: v1\nkind: ConfigMapList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n- metadata: {name: b}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleList\nitems:\n- apiVersion: rbac.authorization.k8s.io/v1\n  kind: Role\n  metadata: {name: r, namespace: monitoring}\n  rules: []\n";
    let objects = read_one(text).expect("reads");
    let names: Vec<(&str, &str)> = objects
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        names,
        [("ConfigMap", "a"), ("ConfigMap", "b"), ("Role", "r")]
    );
    // The item without kind and apiVersion got the List's.
    assert_eq!(objects[1]["apiVersion"], "v1");
    // An error in an item names the item and its line.
    let error = read_one("apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {}\n").expect_err("refused");
    assert_eq!(
        error,
        "packages/app/resources/app.yaml: document 1, items[1] (line 7): missing metadata.name"
    );
}

#[test]
fn kube_prometheus_list_files_read() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kubectl/corpus/lists");
    for (file, kind, count) in [
        (
            "kube-prometheus-grafana-dashboardDefinitions.yaml",
            "ConfigMap",
            3,
        ),
        (
            "kube-prometheus-prometheus-roleSpecificNamespaces.yaml",
            "Role",
            3,
        ),
        (
            "kube-prometheus-prometheus-roleBindingSpecificNamespaces.yaml",
            "RoleBinding",
            3,
        ),
    ] {
        let text = fs::read_to_string(corpus.join(file)).expect("corpus file");
        let objects = read_one(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(objects.len(), count, "{file}");
        assert!(objects.iter().all(|o| o["kind"] == kind), "{file}");
    }
}

#[test]
fn json_objects_on_consecutive_lines_of_a_yaml_file_are_two_objects() {
    let text = "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"a\"}}\n{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"b\"},\"data\":{\"x\":\"1\"}}\n";
    let objects = read_one(text).expect("reads");
    assert_eq!(objects.len(), 2);
    assert_eq!(objects[1]["data"]["x"], "1");
    // A third value that is not JSON: kubectl stops with the JSON error.
    let error = read_one(&format!("{text}kind: x\n")).expect_err("refused");
    assert!(error.contains("line 3: JSON:"), "{error}");
}

#[test]
fn a_builds_source_revision_is_a_commit_or_refused_naming_kix_json() {
    let store = Store::with_app();
    assert_eq!(store.read().expect("no revision").revision, None);
    let full = "0123456789abcdef0123456789abcdef01234567";
    for good in [full, "abc1234", &"f".repeat(64)] {
        let kix =
            format!(r#"{{"format":1,"cluster":"test","packages":["app"],"revision":"{good}"}}"#);
        store.write("kix.json", &kix);
        assert_eq!(store.read().expect(good).revision.as_deref(), Some(good));
    }
    for bad in [
        "",
        "abc123",
        "ABCDEF1",
        "0123456-dirty",
        &"a".repeat(65),
        "g123456",
    ] {
        let kix =
            format!(r#"{{"format":1,"cluster":"test","packages":["app"],"revision":"{bad}"}}"#);
        store.write("kix.json", &kix);
        let error = store.read().expect_err(bad).to_string();
        assert_eq!(
            error,
            format!(
                "kix.json: revision {bad:?} is not a commit (7 to 64 lowercase hex digits, as the flake's self.rev)"
            )
        );
    }
}
