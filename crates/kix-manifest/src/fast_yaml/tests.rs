use proptest::prelude::*;
use serde_json::{Value, json};

use super::{check_against_full_parser, parse};

/// Reads `text` on the fast path (it must), checks it against serde-saphyr,
/// and returns the documents.
fn fast(text: &str) -> Vec<Value> {
    check_against_full_parser(text);
    parse(text).unwrap_or_else(|| panic!("the fast path gave up on {text:?}"))
}

/// The fast path gives `text` to the full parser.
fn gives_up(text: &str) {
    assert_eq!(parse(text), None, "the fast path read {text:?}");
}

#[test]
fn reads_a_deployment_as_helm_writes_it() {
    let text = r#"---
# Source: web/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    app.kubernetes.io/name: "web"
    app.kubernetes.io/version: "1.16.0"
    helm.sh/chart: web-0.1.0
  annotations: {}
spec:
  replicas: 3
  revisionHistoryLimit: 0
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: web
        image: "nginx:1.25"
        args: ["--port", '8080', --verbose]
        ports:
          - containerPort: 8080   # the app's port
            protocol: TCP
        resources:
          limits: {cpu: 500m, memory: 128Mi}
        env:
        - name: EMPTY
          value:
        - name: NULL_VALUE
          value: ~
        - name: QUOTED
          value: "a \"quoted\" \\ value\twith\u00e9 escapes"
        securityContext:
          runAsNonRoot: true
          readOnlyRootFilesystem: false
      nodeSelector:
        kubernetes.io/os: linux
      tolerations: []
"#;
    let docs = fast(text);
    assert_eq!(docs.len(), 1);
    let container = &docs[0]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["args"], json!(["--port", "8080", "--verbose"]));
    assert_eq!(
        container["ports"][0],
        json!({"containerPort": 8080, "protocol": "TCP"})
    );
    assert_eq!(
        container["resources"]["limits"],
        json!({"cpu": "500m", "memory": "128Mi"})
    );
    assert_eq!(container["env"][0]["value"], Value::Null);
    assert_eq!(container["env"][1]["value"], Value::Null);
    assert_eq!(
        container["env"][2]["value"],
        json!("a \"quoted\" \\ value\twithé escapes")
    );
    assert_eq!(docs[0]["metadata"]["annotations"], json!({}));
    assert_eq!(docs[0]["spec"]["replicas"], json!(3));
}

#[test]
fn reads_literal_blocks() {
    let text = "kind: ConfigMap\ndata:\n  clip: |\n    line one\n      indented\n\n    # not a comment\n\n\n  strip: |-\n    a\n    b\n  after: x\n";
    let docs = fast(text);
    assert_eq!(
        docs[0]["data"],
        json!({"clip": "line one\n  indented\n\n# not a comment\n", "strip": "a\nb", "after": "x"})
    );
    // In a sequence, and at the end of a text without a final line break.
    fast("items:\n- |\n  one\n- |-\n  two\n");
    // As serde-saphyr reads it: a line break even without one in the text.
    let docs = fast("a: |\n  no final break");
    assert_eq!(docs[0]["a"], json!("no final break\n"));
}

#[test]
fn reads_documents_and_skips_empty_ones() {
    let docs = fast("a: 1\n---\n# only a comment\n---\n\n---\nb: 2\n");
    assert_eq!(docs, vec![json!({"a": 1}), json!({"b": 2})]);
    assert_eq!(fast(""), Vec::<Value>::new());
    assert_eq!(fast("# nothing\n"), Vec::<Value>::new());
    fast("--- # a comment on the marker\nkind: List\nitems: []\n");
}

#[test]
fn resolves_plain_scalars_as_yaml_1_1() {
    let docs = fast(
        "t: [true, True, TRUE, yes, Yes, y, on, ON]\nf: [false, no, N, off]\nnulls: [null, Null, NULL, ~]\n\
         strings: [nULL, nan, inf, Infinity, 10.0.0.1, 1.2.3, 8080/TCP, 100m, 5Gi, 2h30m, -bar, v1, /path, nil]\n\
         ints: [0, 7, -7, 123456789012345678, 0644, 00]\n",
    );
    assert_eq!(
        docs[0]["t"],
        json!([true, true, true, true, true, true, true, true])
    );
    assert_eq!(docs[0]["f"], json!([false, false, false, false]));
    assert_eq!(docs[0]["nulls"], json!([null, null, null, null]));
    assert_eq!(
        docs[0]["ints"],
        json!([0, 7, -7, 123_456_789_012_345_678_u64, 420, 0])
    );
    let strings = docs[0]["strings"].as_array().expect("a sequence");
    assert!(strings.iter().all(Value::is_string), "{strings:?}");
}

#[test]
fn gives_up_on_what_it_does_not_read() {
    for text in [
        // anchors, aliases, tags, merge keys
        "a: &x 1\nb: *x\n",
        "a: !!str 1\n",
        "<<: {a: 1}\n",
        // folded, kept and indented literal blocks; multi-line scalars
        "a: >\n  folded\n",
        "a: |+\n  kept\n",
        "a: |2\n    x\n",
        "a: |\n\n  leading blank\n",
        "a: plain\n  continued\n",
        "a: \"open\n  quote\"\n",
        // numbers other than plain decimal integers
        "a: 0.5\n",
        "a: 1e3\n",
        "a: 0x1F\n",
        "a: 0648\n",
        "a: -0644\n",
        "a: 1_000\n",
        "a: -0\n",
        "a: +1\n",
        "a: .inf\n",
        "a: -.nan\n",
        "a: 1:30\n",
        "a: 1234567890123456789\n",
        // keys that are not plainly strings
        "1: a\n",
        "y: a\n",
        "on: a\n",
        "? complex\n: key\n",
        "\"a\":b\n",
        // tabs, carriage returns, directives, flow spanning lines
        "a:\tb\n",
        "a: b\r\n",
        "%YAML 1.2\n---\na: 1\n",
        "a: [1,\n  2]\n",
        "a: [1, 2, ]\n",
        "--- a: 1\n",
        "a: 1\n...\n",
        // documents that are not mappings
        "- a\n- b\n",
        "just a scalar\n",
        // nested sequences on one line
        "a:\n- - x\n",
    ] {
        gives_up(text);
    }
}

#[test]
fn long_comment_blocks_are_read() {
    // serde-saphyr's default budget rejected more than 32 comments after
    // `key:`; kix raises it.
    let text = format!("a:\n{}b: 1\n", "# comment\n".repeat(1000));
    assert_eq!(fast(&text), vec![json!({"a": null, "b": 1})]);
}

#[test]
fn gives_up_at_serde_saphyrs_document_budget() {
    // Empty documents count towards serde-saphyr's budget of 100,000.
    gives_up(&format!("{}a: 1\n", "---\n".repeat(100_000)));
    fast(&format!("{}a: 1\n", "---\n".repeat(1_000)));
}

#[test]
fn gives_up_on_what_serde_saphyr_rejects() {
    for text in [
        "a: 1\na: 2\n",
        "a: {b: 1, b: 2}\n",
        "a: b: c\n",
        "a: - b\n",
        "a: \"x\"y\n",
        "a: \"x\"#c\n",
        "a:\n  b: 1\n c: 2\n",
        "a: 1\n  b: 2\n",
        "  a: 1\nb: 2\n",
        "a: [1, 2\n",
        "a: {b: 1\n",
        "a: 'x\n",
    ] {
        gives_up(text);
        check_against_full_parser(text);
    }
}

#[test]
fn the_fixture_trees_agree() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut checked = 0;
    for entry in walkdir::WalkDir::new(root).follow_links(false) {
        let entry = entry.expect("fixture walk");
        let is_yaml = entry
            .path()
            .extension()
            .is_some_and(|e| e == "yaml" || e == "yml");
        if entry.file_type().is_file()
            && is_yaml
            && let Ok(text) = std::fs::read_to_string(entry.path())
        {
            check_against_full_parser(&text);
            checked += 1;
        }
    }
    assert!(checked > 20, "only {checked} YAML fixture files found");
}

/// Text made of YAML's structural pieces: whatever the fast path reads of
/// it must be what serde-saphyr reads.
fn token_soup() -> impl Strategy<Value = String> {
    let token = prop::sample::select(vec![
        "\n", "\n", "\n", " ", " ", "  ", "    ", "a", "key", "b.c/d", "-", "- ", ": ", ":", "#",
        " #c", "\"", "'", "''", "\\", "\\n", "\\u00e9", "|", "|-", ">", "{", "}", "[", "]", ", ",
        ",", "---", "...", "&x", "*x", "!t", "?", "0", "1", "-1", "007", "1.5", "1e3", "0x1F",
        "yes", "no", "on", "~", "null", "Null", "true", "y", "10.0.0.1", "100m", "é", "\u{85}",
        "\t", "\r", "(", "=", "^", ";", "$", "/", "_", "<<", "@", "%", "`", "0644", "08", "\u{a0}",
        "\u{2028}", "\u{feff}",
    ]);
    prop::collection::vec(token, 0..40).prop_map(|tokens| tokens.concat())
}

/// Lines shaped like YAML (indentation, a dash, a key, a value made of
/// tokens), so that much of it is valid and reaches the fast path's corners.
fn line_soup() -> impl Strategy<Value = String> {
    let indent = prop_oneof![6 => Just(""), 3 => Just("  "), 1 => Just("    "), 1 => Just(" ")];
    let dash = prop_oneof![6 => Just(""), 2 => Just("- "), 1 => Just("-   "), 1 => Just("- - ")];
    let key = prop_oneof![
        8 => prop::sample::select(vec!["a: ", "b: ", "c: ", "k.io/x: ", "a:", "b:", "\"q\": ", "'s': "]),
        1 => prop::sample::select(vec!["", "y: ", "1: ", "a : ", "$r: ", "-"]),
    ];
    let value = prop::sample::select(vec![
        "x",
        "x y",
        "1",
        "-1",
        "0644",
        "08",
        "1.5",
        "yes",
        "~",
        "null",
        "\"s\"",
        "'t'",
        "\"a\\\"b\"",
        "[]",
        "{}",
        "[a, b]",
        "{a: 1}",
        "{a: 1, a: 2}",
        "[a, [b]]",
        "|",
        "|-",
        "|+",
        ">",
        "&a x",
        "*a",
        "!t x",
        "# c",
        " # c",
        "a: b",
        "---",
        "...",
        "100m",
        "é",
        "\\",
        "\"",
        "'",
        "[a",
        "{a: [1, {b: c}]}",
    ]);
    let line = (indent, dash, key, prop::collection::vec(value, 0..2))
        .prop_map(|(i, d, k, v)| format!("{i}{d}{k}{}", v.join(" ")));
    prop::collection::vec(line, 1..6).prop_map(|lines| lines.join("\n") + "\n")
}

/// A small document tree in many YAML spellings.
fn document() -> impl Strategy<Value = String> {
    let scalar = prop::sample::select(vec![
        "x",
        "value with spaces",
        "\"quoted: yes\"",
        "'single ''q'''",
        "1",
        "-2",
        "0",
        "true",
        "off",
        "null",
        "~",
        "",
        "100m",
        "v1.2.3",
        "\"\\u00e9\\t\"",
        "0644",
        "0o17",
        "[]",
        "{}",
        "[a, 1, \"b\"]",
        "{k: v, n: 2}",
        "a#b",
        "x # comment",
        "http://h:80/p",
        "|\n  lit\n  eral\n",
        "|-\n  one\n",
    ]);
    let key = prop::sample::select(vec![
        "a",
        "b",
        "key",
        "app.kubernetes.io/name",
        "\"q k\"",
        "'s'",
    ]);
    let leaf = (key.clone(), scalar).prop_map(|(k, v)| vec![format!("{k}: {v}")]);
    leaf.prop_recursive(4, 32, 4, move |inner| {
        let key = key.clone();
        prop_oneof![
            // A mapping of entries, each nested block indented.
            (
                key.clone(),
                prop::collection::vec(inner.clone(), 1..4),
                1..4usize
            )
                .prop_map(|(k, children, indent)| {
                    let pad = " ".repeat(indent);
                    let mut lines = vec![format!("{k}:")];
                    for child in children {
                        lines.extend(child.into_iter().map(|l| format!("{pad}{l}")));
                    }
                    lines
                }),
            // A sequence of mappings, compact or not, at the key's indent or deeper.
            (key, prop::collection::vec(inner, 1..3), 0..3usize).prop_map(
                |(k, children, indent)| {
                    let pad = " ".repeat(indent);
                    let mut lines = vec![format!("{k}:")];
                    for child in children {
                        for (i, l) in child.into_iter().enumerate() {
                            let dash = if i == 0 { "- " } else { "  " };
                            lines.push(format!("{pad}{dash}{l}"));
                        }
                    }
                    lines
                }
            ),
        ]
    })
    .prop_map(|lines| lines.join("\n") + "\n")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn token_soup_agrees_with_serde_saphyr(text in token_soup()) {
        check_against_full_parser(&text);
    }

    #[test]
    fn line_soup_agrees_with_serde_saphyr(text in line_soup()) {
        check_against_full_parser(&text);
    }

    #[test]
    fn generated_documents_agree_with_serde_saphyr(
        docs in prop::collection::vec(document(), 1..3),
    ) {
        let text = docs.join("---\n");
        check_against_full_parser(&text);
    }
}

/// How many of `total` texts drawn from `strategy` the fast path reads to
/// at least one document.
fn fast_path_count(strategy: impl Strategy<Value = String>, total: usize) -> usize {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    (0..total)
        .filter(|_| {
            let text = strategy.new_tree(&mut runner).expect("tree").current();
            parse(&text).is_some_and(|docs| !docs.is_empty())
        })
        .count()
}

/// Enough of the generated texts are read on the fast path that the
/// agreement checks above compare something.
#[test]
fn generated_texts_take_the_fast_path() {
    let soups = fast_path_count(line_soup(), 2000);
    assert!(
        soups > 100,
        "only {soups} of 2000 line soups on the fast path"
    );
    let documents = fast_path_count(document(), 500);
    assert!(
        documents > 250,
        "only {documents} of 500 documents on the fast path"
    );
}

/// YAML limits implicit keys to 1,024 characters: a longer key, quoted or
/// not, in a block or a flow mapping, is the full reader's to refuse (found
/// by fuzzing: the fast path read a 1,030-character quoted key in `{...}`).
#[test]
fn long_keys_are_left_to_the_full_reader() {
    let long = "g".repeat(1030);
    gives_up(&format!("a: {{\"{long}\": x}}\n"));
    gives_up(&format!("a: {{'{long}': x}}\n"));
    gives_up(&format!("a: {{{long}: x}}\n"));
    gives_up(&format!("\"{long}\": x\n"));
    gives_up(&format!("{long}: x\n"));
    // Escapes count as written: 300 `\t` are 600 characters of key.
    gives_up(&format!("\"{}\": x\n", "\\t".repeat(300)));
    fast(&format!("a: {{\"{}\": x}}\n", "g".repeat(500)));
}
