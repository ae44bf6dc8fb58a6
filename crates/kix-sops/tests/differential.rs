//! Files encrypted by the real `sops` with real `age-keygen` keys are
//! decrypted by kix to exactly the values `sops decrypt` prints: whole-file
//! and partial encryption, YAML (multi-document too) and JSON, several
//! recipients, over a generated corpus of Secret manifests.

mod common;

use base64::Engine;
use common::{Key, Mode, encrypt, parse_plain, same, sops_decrypt};
use kix_sops::{Format, decrypt};
use serde_json::{Value, json};

/// A small deterministic generator (xorshift), so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

const TEXTS: &[&str] = &[
    "hunter2",
    "pässwörd ✓ 日本語 🙂",
    "line one\nline two\n\ttabbed\n",
    "",
    " leading and trailing spaces ",
    "0123",
    "true",
    "null",
    "1e3",
    "yes",
    "key: value # not a comment",
    "ENC[AES256_GCM,data:AAAA,iv:BBBB,tag:CCCC,type:str]",
    "quotes ' and \" and \\ backslash",
    "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n",
];

fn value(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth > 2 { 7 } else { 9 }) {
        0 | 1 => json!(TEXTS[rng.below(TEXTS.len())]),
        2 => {
            // A long value, up to 20k characters.
            let n = 1000 + rng.below(19_000);
            json!("x".repeat(n) + "✓")
        }
        3 => json!(rng.next() as i64 >> rng.below(60)),
        4 => json!((rng.next() % 100_000) as f64 / 64.0 - 500.0),
        5 => json!(rng.below(2) == 0),
        6 => Value::Null,
        7 => Value::Array((0..rng.below(4)).map(|_| value(rng, depth + 1)).collect()),
        _ => {
            let mut map = serde_json::Map::new();
            for i in 0..rng.below(4) {
                map.insert(format!("k{i}"), value(rng, depth + 1));
            }
            Value::Object(map)
        }
    }
}

/// A Secret with `stringData` of varied values and binary `data`.
fn secret(rng: &mut Rng, index: usize) -> Value {
    let mut string_data = serde_json::Map::new();
    for i in 0..1 + rng.below(6) {
        string_data.insert(format!("value-{i}"), value(rng, 0));
    }
    let size = rng.below(300);
    let binary = rng.bytes(size);
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": { "name": format!("secret-{index}"), "namespace": "apps",
                      "labels": { "app": "web", "tier": "db" } },
        "type": "Opaque",
        "data": {
            "binary": base64::engine::general_purpose::STANDARD.encode(&binary),
            "empty": "",
        },
        "stringData": string_data,
    })
}

/// The values kix decrypts `encrypted` to, and those `sops decrypt` prints.
fn both(
    dir: &std::path::Path,
    name: &str,
    encrypted: &[u8],
    key: &Key,
) -> (Vec<Value>, Vec<Value>) {
    let format = Format::of_path(std::path::Path::new(name));
    let ours = decrypt(name, encrypted, format, &key.identities()).unwrap_or_else(|e| {
        panic!(
            "kix refuses what sops wrote: {e}\n{}",
            String::from_utf8_lossy(encrypted)
        )
    });
    let theirs = sops_decrypt(dir, name, encrypted, key).expect("sops decrypts its own file");
    (ours.documents, parse_plain(format, &theirs))
}

fn assert_same(ours: &[Value], theirs: &[Value], what: &str) {
    assert_eq!(ours.len(), theirs.len(), "{what}: document count");
    for (a, b) in ours.iter().zip(theirs) {
        assert!(same(a, b), "{what}: kix read\n{a:#}\nsops printed\n{b:#}");
    }
}

/// The encryption modes sops offers for a Secret.
const MODES: &[Mode] = &[
    Mode::Flags(&[]),
    Mode::Flags(&["--encrypted-regex", "^(data|stringData)$"]),
    Mode::Flags(&["--unencrypted-regex", "^(apiVersion|kind|metadata|type)$"]),
    Mode::Flags(&["--encrypted-suffix", "Data"]),
    Mode::Flags(&["--unencrypted-suffix", "_plain"]),
    Mode::Rule("    encrypted_regex: ^(data|stringData)$\n    mac_only_encrypted: true\n"),
];

#[test]
fn generated_corpus_decrypts_to_what_sops_prints() {
    let dir = tempfile::tempdir().expect("temp dir");
    let alice = Key::generate(dir.path(), "alice");
    let bob = Key::generate(dir.path(), "bob");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut cases = 0;
    for (m, mode) in MODES.iter().enumerate() {
        for round in 0..3 {
            let doc = secret(&mut rng, round);
            let recipients: &[&Key] = if round % 2 == 0 {
                &[&alice, &bob]
            } else {
                &[&bob]
            };
            let key = if round % 2 == 0 { &alice } else { &bob };
            for (ext, text) in [
                ("json", serde_json::to_vec_pretty(&doc).expect("JSON")),
                ("yaml", serde_json::to_vec(&doc).expect("JSON is YAML too")),
            ] {
                let name = format!("s{m}-{round}.{ext}");
                let encrypted = encrypt(dir.path(), &name, &text, recipients, *mode);
                let (ours, theirs) = both(dir.path(), &name, &encrypted, key);
                assert_same(&ours, &theirs, &format!("{name} {mode:?}"));
                assert!(same(&ours[0], &doc), "{name}: kix read what was encrypted");
                cases += 1;
            }
        }
    }
    assert_eq!(cases, MODES.len() * 3 * 2);
}

#[test]
fn multi_document_yaml_with_comments_and_anchors() {
    let dir = tempfile::tempdir().expect("temp dir");
    let key = Key::generate(dir.path(), "k");
    let text = "\
# The database credentials.
apiVersion: v1
kind: Secret
metadata:
  name: db # inline comment
stringData:
  # the admin
  user: &user admin
  password: |
    multi
    line ✓
  again: *user
  port: 5432
  ratio: 0.25
  enabled: true
  nothing:
  quoted: \"007\"
---
---
apiVersion: v1
kind: Secret
metadata: {name: api}
data:
  token: aGVsbG8=
";
    for mode in MODES {
        let encrypted = encrypt(dir.path(), "multi.yaml", text.as_bytes(), &[&key], *mode);
        let (ours, theirs) = both(dir.path(), "multi.yaml", &encrypted, &key);
        assert_same(&ours, &theirs, &format!("multi.yaml {mode:?}"));
        assert_eq!(ours.len(), 3);
        assert_eq!(ours[0]["stringData"]["again"], json!("admin"));
        assert_eq!(ours[0]["stringData"]["password"], json!("multi\nline ✓\n"));
        assert_eq!(ours[0]["stringData"]["port"], json!(5432));
        assert_eq!(ours[1], json!({}));
    }
}

#[test]
fn every_recipient_decrypts_and_a_sops_age_key_variable_reads_as_sops_reads_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let keys: Vec<Key> = (0..3)
        .map(|i| Key::generate(dir.path(), &format!("k{i}")))
        .collect();
    let plain =
        br#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"},"stringData":{"a":"b"}}"#;
    let encrypted = encrypt(
        dir.path(),
        "x.json",
        plain,
        &keys.iter().collect::<Vec<_>>(),
        Mode::Flags(&[]),
    );
    for key in &keys {
        let (ours, theirs) = both(dir.path(), "x.json", &encrypted, key);
        assert_same(&ours, &theirs, "x.json");
    }
    // SOPS_AGE_KEY: several keys on one line, and comments.
    let secrets: Vec<&str> = keys
        .iter()
        .map(|k| {
            k.text
                .lines()
                .find(|l| l.starts_with("AGE-SECRET-KEY-"))
                .expect("a key line")
        })
        .collect();
    let variable = format!("# team keys\n{} {}\n", secrets[0], secrets[1]);
    let ids =
        kix_sops::Identities::parse(&variable, "SOPS_AGE_KEY", kix_sops::Layout::SeveralPerLine)
            .expect("parses");
    assert_eq!(
        ids.recipients(),
        vec![keys[0].recipient.clone(), keys[1].recipient.clone()]
    );
    let out = decrypt("x.json", &encrypted, Format::Json, &ids).expect("decrypts");
    assert_eq!(out.documents[0]["stringData"]["a"], json!("b"));
}

#[test]
fn the_digest_key_follows_the_identity_not_the_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let alice = Key::generate(dir.path(), "alice");
    let bob = Key::generate(dir.path(), "bob");
    let plain =
        br#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"},"stringData":{"a":"b"}}"#;
    let first = encrypt(dir.path(), "x.json", plain, &[&alice], Mode::Flags(&[]));
    // Encrypted again, to more recipients: another data key.
    let again = encrypt(
        dir.path(),
        "x.json",
        plain,
        &[&bob, &alice],
        Mode::Flags(&[]),
    );
    let key = |bytes: &[u8], who: &Key| {
        decrypt("x.json", bytes, Format::Json, &who.identities())
            .expect("decrypts")
            .digest_key
    };
    assert_eq!(key(&first, &alice), key(&again, &alice));
    assert_ne!(key(&again, &alice), key(&again, &bob));
    let digest = key(&first, &alice).digest_hex(b"b");
    assert_eq!(digest.len(), 64);
    assert_ne!(digest, key(&again, &bob).digest_hex(b"b"));
    assert!(!format!("{:?}", key(&first, &alice)).contains(&digest[..8]));
}
