//! Hostile input to `read_tree` (#43, point 5): alias bombs of every shape,
//! deep nesting, huge scalars, JSON bombs in `package.json`, quadratic
//! traps. Each is refused with an error naming the file (and the line),
//! or read, in memory bounded by the input's size and in little time.
//!
//! Each read runs in a child process (this test binary, run again for
//! [`child_reads_the_tree_it_is_given`]) under an address-space cap
//! (`ulimit -v`), so a regression fails the test rather than the machine;
//! its peak RSS comes from `/usr/bin/time`.

use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use kix_manifest::{ReadOptions, read_tree};

/// Address space a child may take (KiB, `ulimit -v`).
const CAP_KIB: u64 = 3_000_000;
/// Peak RSS one read of a bomb may reach (KiB).
const BOUND_KIB: u64 = 100 * 1024;
/// Time one read of a bomb may take (generous: the tests share 2 cores;
/// a bomb read in full takes minutes or all the memory).
const SLOW: Duration = Duration::from_secs(20);

/// In a child: the build to read.
const CHILD_TREE: &str = "KIX_BOUNDED_TREE";
/// Starts the line where a child says what it read.
const RESULT: &str = "kix-bounded-result: ";

/// Not a test of its own: in a child started by [`Store::read`], reads the
/// build [`CHILD_TREE`] names and prints the outcome.
#[test]
fn child_reads_the_tree_it_is_given() {
    let Some(root) = std::env::var_os(CHILD_TREE) else {
        return;
    };
    let root = PathBuf::from(root);
    let options = ReadOptions {
        store_dir: root.parent().expect("store").to_path_buf(),
        age_identities: None,
        ..ReadOptions::default()
    };
    let outcome = match read_tree(&root, &options) {
        Ok(build) => format!("ok {}", build.object_count()),
        Err(error) => format!("error {}", error.to_string().replace('\n', "\\n")),
    };
    println!("{RESULT}{outcome}");
}

/// A temporary "store" with one build: package `app` (namespace `app`).
struct Store {
    dir: tempfile::TempDir,
}

impl Store {
    fn new() -> Store {
        let store = Store {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        store.write(
            "kix.json",
            br#"{"format":1,"cluster":"test","packages":["app"]}"#,
        );
        store.write(
            "packages/app/package.json",
            br#"{"name":"app","version":"1","namespace":"app"}"#,
        );
        store
    }

    fn path(&self) -> PathBuf {
        self.dir.path().canonicalize().expect("canonical tempdir")
    }

    fn write(&self, rel: &str, bytes: &[u8]) {
        let path = self.path().join("build").join(rel);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, bytes).expect("write");
    }

    /// Reads the build in a capped child: the number of objects or the
    /// error (as a user sees it), and the child's peak RSS (KiB).
    fn read(&self, what: &str) -> (Result<usize, String>, u64) {
        let peak_file = self.path().join("peak");
        let start = Instant::now();
        let out = Command::new("/usr/bin/time")
            .arg("-f")
            .arg("%M")
            .arg("-o")
            .arg(&peak_file)
            .args([
                "sh",
                "-c",
                &format!("ulimit -v {CAP_KIB}; exec \"$0\" \"$@\""),
            ])
            .arg(std::env::current_exe().expect("this test binary"))
            .args(["--exact", "child_reads_the_tree_it_is_given", "--nocapture"])
            .args(["--test-threads", "1"])
            .env(CHILD_TREE, self.path().join("build"))
            .output()
            .expect("run the child");
        let elapsed = start.elapsed();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let peak = fs::read_to_string(&peak_file).unwrap_or_default();
        let peak: u64 = peak
            .lines()
            .last()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or_else(|| panic!("{what}: peak RSS from /usr/bin/time: {peak:?}"));
        let outcome = stdout
            .lines()
            .find_map(|l| l.split_once(RESULT).map(|(_, outcome)| outcome))
            .unwrap_or_else(|| {
                panic!(
                    "{what}: the child said nothing (exit {:?}, peak RSS {peak} KiB): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        let read = match outcome.split_once(' ') {
            Some(("ok", count)) => Ok(count.parse().expect("count")),
            Some(("error", error)) => Err(error.replace("\\n", "\n")),
            _ => panic!("{what}: {outcome}"),
        };
        eprintln!(
            "{what}: {} ms, peak RSS {peak} KiB: {read:?}",
            elapsed.as_millis()
        );
        assert!(elapsed < SLOW, "{what}: read in {elapsed:?}");
        assert!(peak < BOUND_KIB, "{what}: peak RSS {peak} KiB");
        (read, peak)
    }
}

/// Reads `text` as the resource file `packages/app/resources/<name>`:
/// refused, with a message that starts with the file and holds `says`.
fn refused(what: &str, name: &str, text: &[u8], says: &str) -> String {
    let store = Store::new();
    store.write(&format!("packages/app/resources/{name}"), text);
    let (read, _) = store.read(what);
    let error = read.expect_err(what);
    let file = format!("packages/app/resources/{name}: ");
    assert!(
        error.starts_with(&file) && error.contains(says),
        "{what}: {error}"
    );
    error
}

const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n";

/// The shape of the issue: nine levels of ten aliases of the level
/// below, each level a block sequence (`flow`: a flow sequence).
fn laughs(levels: usize, flow: bool) -> String {
    let mut text = String::from("x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for level in 1..=levels {
        let below = format!("*a{}", level - 1);
        if flow {
            let items = [below.as_str(); 10].join(", ");
            writeln!(text, "x{level}: &a{level} [{items}]").expect("write");
        } else {
            writeln!(text, "x{level}: &a{level}").expect("write");
            for _ in 0..10 {
                writeln!(text, "  - {below}").expect("write");
            }
        }
    }
    text
}

#[test]
fn billion_laughs_are_refused_at_once_naming_the_file_and_line() {
    // ~700 bytes: today about 10^9 nodes when read in full.
    let bomb = laughs(9, true);
    assert!(bomb.len() < 1000, "{}", bomb.len());
    let error = refused(
        "flow laughs",
        "bomb.yaml",
        format!("{CM}{bomb}").as_bytes(),
        "excessive aliasing",
    );
    assert!(error.contains(": line "), "{error}");
    refused(
        "block laughs",
        "bomb.yaml",
        format!("{CM}{}", laughs(9, false)).as_bytes(),
        "excessive aliasing",
    );
    // All in one flow mapping on one line (after the object's fields: a
    // file that starts with `{` is JSON to kubectl, and its JSON error is
    // what it reports).
    let mut flow = format!("{CM}bomb: {{x0: &a0 [l, l, l, l, l, l, l, l, l, l]");
    for level in 1..=9 {
        let items = vec![format!("*a{}", level - 1); 10].join(",");
        write!(flow, ", x{level}: &a{level} [{items}]").expect("write");
    }
    flow.push_str("}\n");
    refused(
        "one flow mapping",
        "bomb.yml",
        flow.as_bytes(),
        "excessive aliasing",
    );
}

#[test]
fn laughs_through_merge_keys_are_refused() {
    let mut text = String::from(CM);
    text.push_str("x0: &a0 {k0: v, k1: v, k2: v, k3: v, k4: v, k5: v, k6: v, k7: v}\n");
    for level in 1..=9 {
        let below = format!("*a{}", level - 1);
        writeln!(text, "x{level}: &a{level}").expect("write");
        writeln!(text, "  <<: [{below}, {below}, {below}]").expect("write");
        for i in 0..8 {
            writeln!(text, "  m{i}: {below}").expect("write");
        }
    }
    refused(
        "merge keys",
        "merge.yaml",
        text.as_bytes(),
        "excessive aliasing",
    );
}

#[test]
fn laughs_inside_a_list_item_are_refused() {
    let mut text = String::from(
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n  bomb:\n",
    );
    for line in laughs(9, true).lines() {
        writeln!(text, "    {line}").expect("write");
    }
    refused(
        "in a List",
        "list.yaml",
        text.as_bytes(),
        "excessive aliasing",
    );
    // After a JSON object, the rest of a file is read as YAML.
    let json = format!("{{\"apiVersion\": \"v1\"}}\n{CM}{}", laughs(9, true));
    refused("after JSON", "mixed.json", json.as_bytes(), "");
}

#[test]
fn an_alias_of_a_large_value_repeated_is_refused_by_its_bytes() {
    // One node per alias: within the node budget, not within the bytes.
    let big = "x".repeat(1024 * 1024);
    let mut text = format!("{CM}big: &big \"{big}\"\nmany:\n");
    for _ in 0..150 {
        text.push_str("- *big\n");
    }
    refused(
        "aliases of 1 MiB",
        "big.yaml",
        text.as_bytes(),
        "aliases repeat more than",
    );
    // As keys: an alias of a large string used as a key.
    let mut text = format!("{CM}big: &k \"{big}\"\n");
    for i in 0..150 {
        writeln!(text, "m{i}: {{*k : v}}").expect("write");
    }
    refused(
        "keys of 1 MiB",
        "keys.yaml",
        text.as_bytes(),
        "aliases repeat more than",
    );
}

#[test]
fn many_documents_each_within_its_budget_do_not_add_up_past_the_files() {
    // Each document repeats 16 KiB 60 times (under its own limits): 500 of
    // them held about 500 MiB.
    let chunk = format!(
        "a: &a \"{}\"\nb: [{}]\n---\n",
        "x".repeat(16 * 1024),
        ["*a"; 60].join(", ")
    );
    refused(
        "many documents of large aliases",
        "docs.yaml",
        chunk.repeat(500).as_bytes(),
        "a file may repeat at most its own length and 1 MiB",
    );
    // Each document's aliases add 90 nodes (under the 100 a document may
    // add freely): 30,000 of them held 2.7 million nodes. The file's node
    // limit, which counts aliases as what they expand to, comes first.
    let chunk = format!(
        "a: &a [~, ~, ~, ~, ~, ~, ~, ~, ~]\nb: [{}]\n---\n",
        ["*a"; 10].join(", ")
    );
    refused(
        "many documents of aliases",
        "nodes.yaml",
        chunk.repeat(30_000).as_bytes(),
        "more than 500000 values, keys and items in one file",
    );
}

/// `levels` mappings each anchored inside the one above, around `inner`.
fn nested_anchors(levels: usize, inner: &str, alias_all: bool) -> String {
    let mut text = String::from(CM);
    text.push_str("small: &s x\nagain: *s\nouter:\n");
    for level in 0..levels {
        writeln!(text, "{}n{level}: &n{level}", " ".repeat(level * 2 + 2)).expect("write");
    }
    for line in inner.lines() {
        writeln!(text, "{}{line}", " ".repeat(levels * 2 + 2)).expect("write");
    }
    if alias_all {
        for level in 0..levels {
            writeln!(text, "alias{level}: *n{level}").expect("write");
        }
    }
    text
}

#[test]
fn anchors_nested_in_anchors_do_not_copy_the_document_many_times() {
    // 100 anchors around 6,000 entries: copying each anchored value, as
    // the reader did, held 100 copies of it.
    let inner: String = (0..6000).map(|i| format!("k{i}: [a, b, c]\n")).collect();
    let store = Store::new();
    let text = nested_anchors(100, &inner, false);
    store.write("packages/app/resources/nested.yaml", text.as_bytes());
    let (read, _) = store.read("nested anchors, no alias of them");
    assert_eq!(read, Ok(1), "kubectl reads it: so does kix");
    // Each named by an alias: refused, as the aliases would repeat it all.
    refused(
        "nested anchors, each aliased",
        "nested.yaml",
        nested_anchors(100, &inner, true).as_bytes(),
        "excessive aliasing",
    );
}

#[test]
fn deep_nesting_is_refused_in_every_syntax() {
    let depth = 100_000;
    let flow = format!("{CM}deep: {}{}\n", "[".repeat(depth), "]".repeat(depth));
    refused("flow sequences", "flow.yaml", flow.as_bytes(), "");
    let maps = format!("{CM}deep: {}{}\n", "{a: ".repeat(depth), "}".repeat(depth));
    refused("flow mappings", "maps.yaml", maps.as_bytes(), "");
    let block = format!("{CM}deep:\n{}x\n", "- ".repeat(depth));
    refused("block sequences", "block.yaml", block.as_bytes(), "");
    let indented: String = (0..200).map(|i| format!("{}k:\n", " ".repeat(i))).collect();
    refused(
        "block mappings",
        "indented.yaml",
        indented.as_bytes(),
        "recursion limit exceeded",
    );
    let json = format!(
        "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"cm\"}},\"deep\":{}{}}}",
        "[".repeat(depth),
        "]".repeat(depth)
    );
    refused("JSON", "deep.json", json.as_bytes(), "recursion limit");
}

#[test]
fn a_huge_scalar_is_refused_naming_the_file() {
    let huge = "x".repeat(8 * 1024 * 1024);
    for (what, text) in [
        ("plain", format!("{CM}data:\n  a: {huge}\n")),
        ("quoted", format!("{CM}data:\n  a: \"{huge}\"\n")),
        ("literal", format!("{CM}data:\n  a: |\n    {huge}\n")),
        (
            "JSON",
            format!(
                "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"cm\"}},\"data\":{{\"a\":\"{huge}\"}}}}"
            ),
        ),
    ] {
        refused(
            what,
            "huge.yaml",
            text.as_bytes(),
            "is more than 1048576 bytes as JSON",
        );
    }
}

#[test]
fn json_bombs_in_package_json_are_refused_naming_the_file() {
    // Over the metadata limit: refused before it is parsed.
    let store = Store::new();
    let wide = format!(
        r#"{{"name":"app","version":"1","dependsOn":[{}""]}}"#,
        "\"\",".repeat(1024 * 1024)
    );
    store.write("packages/app/package.json", wide.as_bytes());
    let (read, _) = store.read("wide package.json");
    let error = read.expect_err("refused");
    assert!(
        error.starts_with("packages/app/package.json: ")
            && error.contains("more than the limit of 1048576 bytes"),
        "{error}"
    );
    // Deep: refused by the JSON reader.
    let deep = format!(
        r#"{{"name":"app","version":"1","migrations":{}{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    store.write("packages/app/package.json", deep.as_bytes());
    let error = store.read("deep package.json").0.expect_err("refused");
    assert!(
        error.starts_with("packages/app/package.json: ") && error.contains("line 1 column"),
        "{error}"
    );
    // The same in kix.json (its settings keep any value).
    let deep = format!(
        r#"{{"format":1,"cluster":"test","packages":["app"],"settings":{{"x":{}{}}}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    store.write(
        "packages/app/package.json",
        br#"{"name":"app","version":"1"}"#,
    );
    store.write("kix.json", deep.as_bytes());
    let error = store.read("deep kix.json").0.expect_err("refused");
    assert!(
        error.starts_with("kix.json: ") && error.contains("recursion limit"),
        "{error}"
    );
}

#[test]
fn an_alias_bomb_in_an_encrypted_file_is_refused_naming_the_file() {
    let store = Store::new();
    let mut bomb = laughs(9, true);
    bomb.push_str("sops:\n  age: []\n");
    store.write("packages/app/secrets/db.yaml", bomb.as_bytes());
    let error = store.read("sops laughs").0.expect_err("refused");
    assert!(
        error.starts_with("packages/app/secrets/db.yaml: ") && error.contains("aliases"),
        "{error}"
    );
    // Anchors nested in anchors, each aliased.
    let inner: String = (0..6000).map(|i| format!("k{i}: [a, b, c]\n")).collect();
    let nested = nested_anchors(100, &inner, true);
    store.write("packages/app/secrets/db.yaml", nested.as_bytes());
    let error = store.read("sops nested anchors").0.expect_err("refused");
    assert!(
        error.starts_with("packages/app/secrets/db.yaml: "),
        "{error}"
    );
    // Large strings repeated.
    let big = "x".repeat(1024 * 1024);
    let mut text = format!("big: &big \"{big}\"\nmany:\n");
    for _ in 0..150 {
        text.push_str("- *big\n");
    }
    store.write("packages/app/secrets/db.yaml", text.as_bytes());
    let error = store.read("sops large aliases").0.expect_err("refused");
    assert!(
        error.starts_with("packages/app/secrets/db.yaml: ")
            && error.contains("aliases repeat more than"),
        "{error}"
    );
}

#[test]
fn many_tabs_and_many_json_objects_read_in_linear_time() {
    // Tabs inside values: each was checked against every value before it.
    let mut text = format!("{CM}data:\n");
    for i in 0..150_000 {
        writeln!(text, "  k{i}: \"a\\tb\tc\"").expect("write");
    }
    let store = Store::new();
    store.write("packages/app/resources/tabs.yaml", text.as_bytes());
    let (read, _) = store.read("many tabs");
    assert!(read.is_err_and(|e| e.contains("is more than 1048576 bytes as JSON")));
    // A JSON stream: each object's line was counted from the start.
    let stream = "{\"kind\":\"List\",\"items\":[]}\n".repeat(100_000);
    let store = Store::new();
    store.write("packages/app/resources/stream.json", stream.as_bytes());
    let (read, _) = store.read("many JSON objects");
    assert_eq!(read, Ok(0));
}

#[test]
fn what_kubectl_reads_with_aliases_still_reads() {
    // A few anchors and aliases, a merge key: as written by hand.
    let text = format!(
        "{CM}data:\n  a: &v value\n  b: *v\nx: &base {{k: 1, l: 2}}\nz:\n  <<: *base\n  k: 3\n"
    );
    let store = Store::new();
    store.write("packages/app/resources/ok.yaml", text.as_bytes());
    let (read, _) = store.read("aliases by hand");
    assert_eq!(read, Ok(1));
    // Fifty documents, each merging shared defaults in.
    let documents: String = (0..50)
        .map(|i| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\n\
                 defaults: &d {{a: \"1\", b: \"2\", c: \"3\", d: \"4\", e: \"5\"}}\n\
                 data:\n  <<: *d\n  own: \"{i}\"\nmore: [*d, *d]\n---\n"
            )
        })
        .collect();
    store.write("packages/app/resources/ok.yaml", documents.as_bytes());
    let (read, _) = store.read("merged defaults in fifty documents");
    assert_eq!(read, Ok(50));
}

/// Just under the file size limit (16 MiB), so the file is read, not
/// refused for its size.
const NEAR_LIMIT: usize = 16_000_000;

/// `head`, then `item` repeated (joined by `sep`) up to [`NEAR_LIMIT`],
/// then `tail`.
fn filled(head: &str, item: &str, sep: &str, tail: &str) -> String {
    let count = (NEAR_LIMIT - head.len() - tail.len()) / (item.len() + sep.len());
    let mut text = String::with_capacity(NEAR_LIMIT);
    text.push_str(head);
    for i in 0..count {
        if i > 0 {
            text.push_str(sep);
        }
        text.push_str(item);
    }
    text.push_str(tail);
    text
}

/// Block mapping entries `k<i>: 0`, one a line, up to [`NEAR_LIMIT`].
fn block_entries(head: &str, indent: &str) -> String {
    let mut text = String::from(head);
    let mut i = 0;
    while text.len() < NEAR_LIMIT - 32 {
        writeln!(text, "{indent}k{i}: 0").expect("write");
        i += 1;
    }
    text
}

const TOO_MANY: &str = "values, keys and items in one file";

#[test]
fn a_file_of_millions_of_tiny_values_is_refused_naming_the_file_and_line() {
    // Each took hundreds of MB (446 MB for tiny flow values) and tens of
    // seconds before the object was refused as too large.
    let cases = [
        (
            "tiny flow values",
            "flow.yaml",
            filled(&format!("{CM}x: ["), "[]", ",", "]\n"),
        ),
        (
            "tiny block items",
            "items.yaml",
            filled(&format!("{CM}x:\n"), "- []", "\n", "\n"),
        ),
        (
            "tiny block entries",
            "entries.yaml",
            block_entries(&format!("{CM}data:\n"), "  "),
        ),
        (
            "a JSON value of tiny values",
            "value.json",
            filled(
                "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"cm\"},\"x\":[",
                "[]",
                ",",
                "]}",
            ),
        ),
        (
            "a JSON stream of tiny objects",
            "stream.json",
            filled("", "{}", "\n", "\n"),
        ),
        (
            "a List of tiny items",
            "list.yaml",
            filled("apiVersion: v1\nkind: List\nitems:\n", "- {}", "\n", "\n"),
        ),
        (
            "a JSON List of tiny items",
            "list.json",
            filled("{\"kind\":\"List\",\"items\":[", "{}", ",", "]}"),
        ),
    ];
    for (what, name, text) in cases {
        assert!(text.len() <= NEAR_LIMIT, "{what}: {}", text.len());
        let error = refused(what, name, text.as_bytes(), TOO_MANY);
        assert!(error.contains(": line "), "{what}: {error}");
    }
}

#[test]
fn tiny_values_in_many_documents_add_up_in_the_file() {
    // Each document small, the file's total counted.
    let chunk = format!("{CM}x: [[],[],[],[],[],[],[],[],[],[]]\n---\n");
    let text = chunk.repeat(NEAR_LIMIT / chunk.len());
    refused(
        "documents of tiny values",
        "docs.yaml",
        text.as_bytes(),
        TOO_MANY,
    );
    // Lines without nodes: read in bounded memory too.
    let blank = format!("{CM}{}", "\n".repeat(NEAR_LIMIT - CM.len()));
    let store = Store::new();
    store.write("packages/app/resources/blank.yaml", blank.as_bytes());
    assert_eq!(store.read("16 M blank lines").0, Ok(1));
}

#[test]
fn an_encrypted_file_of_tiny_values_is_refused_naming_the_file() {
    for (what, name, text) in [
        (
            "sops YAML of tiny values",
            "db.yaml",
            filled("x: [", "[]", ",", "]\nsops:\n  age: []\n"),
        ),
        (
            "sops JSON of tiny values",
            "db.json",
            filled("{\"x\":[", "[]", ",", "],\"sops\":{\"age\":[]}}"),
        ),
    ] {
        let store = Store::new();
        store.write(&format!("packages/app/secrets/{name}"), text.as_bytes());
        let error = store.read(what).0.expect_err("refused");
        assert!(
            error.starts_with(&format!("packages/app/secrets/{name}: ")),
            "{what}: {error}"
        );
    }
}
