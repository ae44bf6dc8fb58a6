//! Every file `kubectl apply -f DIR` reads, kix reads, or it refuses the
//! build naming the file (#43, point 7): never a silent skip, whose objects
//! would then be pruned. kubectl (checked with v1.32) reads `.yaml`,
//! `.x.yaml`, `b.yml`, `c.json` and `caf\xe9.yaml`; it ignores `a.YAML`
//! and `d.yaml.bak`.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use kix_manifest::{ReadOptions, read_tree};

/// A temporary "store" with one build: package `app`, whose resources are
/// the files written with [`Store::resource`].
struct Store {
    dir: tempfile::TempDir,
}

impl Store {
    fn new() -> Store {
        let store = Store {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        let build = store.build();
        fs::create_dir_all(build.join("packages/app/resources")).expect("mkdir");
        fs::write(
            build.join("kix.json"),
            r#"{"format":1,"cluster":"test","packages":["app"]}"#,
        )
        .expect("kix.json");
        fs::write(
            build.join("packages/app/package.json"),
            r#"{"name":"app","version":"1","namespace":"app"}"#,
        )
        .expect("package.json");
        store
    }

    fn build(&self) -> PathBuf {
        self.dir
            .path()
            .canonicalize()
            .expect("canonical")
            .join("build")
    }

    /// A ConfigMap named `name` in the file whose path below `resources/`
    /// is `rel` (any bytes).
    fn resource(&self, rel: &[u8], name: &str) {
        let path = self
            .build()
            .join("packages/app/resources")
            .join(OsStr::from_bytes(rel));
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(
            path,
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n"),
        )
        .expect("write");
    }

    /// The names of the objects read, sorted, or the error.
    fn read(&self) -> Result<Vec<String>, String> {
        let options = ReadOptions {
            store_dir: self.build().parent().expect("store").to_path_buf(),
            age_identities: None,
            ..ReadOptions::default()
        };
        let build = read_tree(&self.build(), &options).map_err(|e| e.to_string())?;
        let mut names: Vec<String> = build.objects().map(|o| o.key.name.clone()).collect();
        names.sort();
        Ok(names)
    }
}

#[test]
fn files_kubectl_reads_are_read_and_those_it_ignores_are_ignored() {
    let store = Store::new();
    for (rel, name) in [
        (&b".yaml"[..], "only-extension"),
        (b".hidden.yaml", "hidden"),
        (b".json", "only-json"),
        (b"b.yml", "yml"),
        (b"c.json", "json"),
        (b"sub/.yaml", "in-a-directory"),
        // kubectl ignores these (extensions compared exactly).
        (b"a.YAML", "upper-case"),
        (b"d.yaml.bak", "backup"),
        (b"README.md", "readme"),
    ] {
        store.resource(rel, name);
    }
    // Names kubectl ignores are ignored whatever their bytes.
    store.resource(b"caf\xe9.txt", "not-utf8-ignored");
    assert_eq!(
        store.read(),
        Ok([
            "hidden",
            "in-a-directory",
            "json",
            "only-extension",
            "only-json",
            "yml"
        ]
        .map(String::from)
        .to_vec())
    );
}

#[test]
fn a_resource_file_whose_name_is_not_utf8_is_refused_by_its_bytes() {
    for (rel, shown) in [
        (&b"caf\xe9.yaml"[..], r"caf\xe9.yaml"),
        (b"\xff\xfe.json", r"\xff\xfe.json"),
        (b".\x80.yml", r".\x80.yml"),
        // In a directory whose name is not UTF-8.
        (b"d\xe9j\xe0/app.yaml", r"d\xe9j\xe0/app.yaml"),
    ] {
        let store = Store::new();
        store.resource(b"ok.yaml", "ok");
        store.resource(rel, "hidden-by-its-name");
        let error = store.read().expect_err("refused");
        assert_eq!(
            error,
            format!(
                "packages/app/resources/{shown}: a resource file whose name is not UTF-8 \
                 (kubectl reads it; kix names every file it reads in records and plans, so it \
                 refuses the build): rename it"
            ),
            "{}",
            Path::new(OsStr::from_bytes(rel)).display()
        );
    }
}
