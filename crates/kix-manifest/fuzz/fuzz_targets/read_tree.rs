//! Reading a tree whose one resource file holds arbitrary bytes never panics
//! and never reads objects it should not: the bytes are written once as YAML
//! and once as JSON into a minimal build, which is then read.
#![no_main]

use std::fs;

use kix_manifest::{ReadOptions, read_tree};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let store = tempfile::tempdir().expect("tempdir");
    let store_dir = store.path().canonicalize().expect("canonical");
    let root = store_dir.join("build");
    let resources = root.join("packages/app/resources");
    fs::create_dir_all(&resources).expect("mkdir");
    fs::write(
        root.join("kix.json"),
        r#"{"format":1,"cluster":"fuzz","packages":["app"]}"#,
    )
    .expect("write");
    fs::write(
        root.join("packages/app/package.json"),
        r#"{"name":"app","version":"1","namespace":"fuzz"}"#,
    )
    .expect("write");
    let options = ReadOptions {
        store_dir,
        // Small limits keep each run fast.
        max_file_bytes: 64 * 1024,
        max_object_bytes: 64 * 1024,
        max_objects: 1000,
        age_identities: None,
    };
    for name in ["input.yaml", "input.json"] {
        let file = resources.join(name);
        fs::write(&file, data).expect("write");
        if let Ok(build) = read_tree(&root, &options) {
            for object in build.objects() {
                // Every object has a key and the namespace default applied.
                assert!(!object.key.name.is_empty());
                assert!(object.manifest().is_object());
                let _ = object.digest();
            }
        }
        fs::remove_file(&file).expect("rm");
    }
});
