//! Files kix must refuse, each with the reason a user can act on, never a
//! value in the message: a tampered value, MAC, unencrypted value, order or
//! date; a truncated file; a wrong key; no key; a data key changed for our
//! own recipient. `sops decrypt` refuses each of them too.

mod common;

use common::{Key, Mode, encrypt, sops_decrypt};
use kix_sops::{Format, Identities, Reason, SopsError, decrypt};

const PLAIN: &str = "\
apiVersion: v1
kind: Secret
metadata:
  name: db
stringData:
  password: correct-horse-battery-staple
  user: admin-7b1f
  port: 5432
";
const VALUES: &[&str] = &["correct-horse-battery-staple", "admin-7b1f", "5432"];

struct Case {
    dir: tempfile::TempDir,
    key: Key,
    partial: String,
    whole: String,
}

fn setup() -> Case {
    let dir = tempfile::tempdir().expect("temp dir");
    let key = Key::generate(dir.path(), "k");
    let partial = encrypt(
        dir.path(),
        "db.yaml",
        PLAIN.as_bytes(),
        &[&key],
        Mode::Flags(&["--encrypted-regex", "^stringData$"]),
    );
    let whole = encrypt(
        dir.path(),
        "db.yaml",
        PLAIN.as_bytes(),
        &[&key],
        Mode::Flags(&[]),
    );
    Case {
        key,
        partial: String::from_utf8(partial).expect("UTF-8"),
        whole: String::from_utf8(whole).expect("UTF-8"),
        dir,
    }
}

/// kix's error for `text` with `ids`, checked to name the file and carry
/// no value, after `sops decrypt` refused it as well.
fn refused(case: &Case, text: &str, ids: &Identities, sops_key: &Key) -> Reason {
    let err: SopsError = match decrypt("secrets/db.sops.yaml", text.as_bytes(), Format::Yaml, ids) {
        Ok(d) => panic!("kix decrypted a file it must refuse: {d:?}\n{text}"),
        Err(e) => e,
    };
    let shown = err.to_string();
    assert!(shown.starts_with("secrets/db.sops.yaml: "), "{shown}");
    for value in VALUES {
        assert!(!shown.contains(value), "the error shows a value: {shown}");
    }
    assert!(
        sops_decrypt(case.dir.path(), "db.yaml", text.as_bytes(), sops_key).is_err(),
        "sops decrypts what kix refused ({shown})"
    );
    err.reason
}

/// `text` with the base64 data of the value on the line holding `marker`
/// changed (one character, kept valid base64).
fn flip_data(text: &str, marker: &str) -> String {
    let line = text
        .lines()
        .find(|l| l.contains(marker))
        .expect("marker line");
    let at = line.find("data:").expect("an ENC value") + "data:".len();
    let mut changed = line.to_owned();
    let c = if &line[at..at + 1] == "A" { "B" } else { "A" };
    changed.replace_range(at..at + 1, c);
    text.replacen(line, &changed, 1)
}

#[test]
fn the_untampered_files_decrypt() {
    let case = setup();
    for text in [&case.partial, &case.whole] {
        let out = decrypt(
            "db.yaml",
            text.as_bytes(),
            Format::Yaml,
            &case.key.identities(),
        )
        .expect("decrypts");
        assert_eq!(
            out.documents[0]["stringData"]["port"],
            serde_json::json!(5432)
        );
        assert!(format!("{out:?}").contains("redacted"));
        assert!(!format!("{out:?}").contains("correct-horse"));
    }
}

#[test]
fn a_changed_value_fails_authentication_naming_its_path() {
    let case = setup();
    let text = flip_data(&case.whole, "password:");
    let reason = refused(&case, &text, &case.key.identities(), &case.key);
    assert_eq!(
        reason,
        Reason::ValueTampered {
            path: "stringData:password".into()
        }
    );
}

#[test]
fn a_changed_mac_or_date_is_a_mac_mismatch() {
    let case = setup();
    let ids = case.key.identities();
    let text = flip_data(&case.whole, "mac:");
    assert_eq!(refused(&case, &text, &ids, &case.key), Reason::MacMismatch);
    let line = case
        .whole
        .lines()
        .find(|l| l.contains("lastmodified:"))
        .expect("date");
    let text = case
        .whole
        .replacen(line, "    lastmodified: \"2020-01-01T00:00:00Z\"", 1);
    assert_eq!(refused(&case, &text, &ids, &case.key), Reason::MacMismatch);
}

#[test]
fn a_changed_unencrypted_value_or_order_is_a_mac_mismatch() {
    let case = setup();
    let ids = case.key.identities();
    let text = case.partial.replacen("name: db", "name: other", 1);
    assert_eq!(refused(&case, &text, &ids, &case.key), Reason::MacMismatch);
    // Two entries in another order: the MAC hashes values in file order.
    let user = case
        .partial
        .lines()
        .find(|l| l.contains("user:"))
        .expect("user");
    let port = case
        .partial
        .lines()
        .find(|l| l.contains("port:"))
        .expect("port");
    let swapped = case
        .partial
        .replacen(user, "@@", 1)
        .replacen(port, user, 1)
        .replacen("@@", port, 1);
    assert_eq!(
        refused(&case, &swapped, &ids, &case.key),
        Reason::MacMismatch
    );
}

#[test]
fn a_truncated_file_is_refused() {
    let case = setup();
    let ids = case.key.identities();
    // A value dropped: the MAC no longer matches.
    let user = case
        .whole
        .lines()
        .find(|l| l.contains("user:"))
        .expect("user");
    let text = case.whole.replacen(&format!("{user}\n"), "", 1);
    assert_eq!(refused(&case, &text, &ids, &case.key), Reason::MacMismatch);
    // Cut anywhere: unreadable, no or incomplete metadata, or a MAC that
    // does not match.
    for cut in (40..case.whole.len()).step_by(97) {
        let reason = refused(&case, &case.whole[..cut], &ids, &case.key);
        assert!(
            matches!(
                reason,
                Reason::NotSops
                    | Reason::Syntax { .. }
                    | Reason::Metadata(_)
                    | Reason::DataKey { .. }
                    | Reason::MacMismatch
                    | Reason::MacUnreadable(_)
            ),
            "cut at {cut}: {reason:?}"
        );
    }
}

#[test]
fn a_key_not_among_the_recipients_is_named_with_the_recipients() {
    let case = setup();
    let other = Key::generate(case.dir.path(), "other");
    let reason = refused(&case, &case.whole, &other.identities(), &other);
    assert_eq!(
        reason,
        Reason::NotARecipient {
            identities: 1,
            recipients: vec![case.key.recipient.clone()]
        }
    );
    let shown = reason.to_string();
    assert!(shown.contains(&case.key.recipient), "{shown}");
}

#[test]
fn no_key_at_all_says_how_to_give_one() {
    let case = setup();
    let reason = refused(
        &case,
        &case.whole,
        &Identities::default(),
        &case.key_without_access(),
    );
    assert_eq!(reason, Reason::NoIdentities);
    assert!(reason.to_string().contains("--age-identity"));
}

#[test]
fn a_changed_data_key_for_our_recipient_is_named() {
    let case = setup();
    // Drop one line of the armored age file (the data key's stanza).
    let lines: Vec<&str> = case.whole.lines().collect();
    let begin = lines
        .iter()
        .position(|l| l.contains("BEGIN AGE ENCRYPTED FILE"))
        .expect("armor");
    let text = case
        .whole
        .replacen(&format!("{}\n", lines[begin + 2]), "", 1);
    let reason = refused(&case, &text, &case.key.identities(), &case.key);
    assert!(
        matches!(&reason, Reason::DataKey { recipient, .. } if *recipient == case.key.recipient),
        "{reason:?}"
    );
}

#[test]
fn plain_files_and_other_key_kinds_are_refused_by_name() {
    let ids = Identities::default();
    let err = decrypt("x.yaml", PLAIN.as_bytes(), Format::Yaml, &ids).expect_err("refused");
    assert_eq!(err.reason, Reason::NotSops);
    let pgp_only = "a: ENC[AES256_GCM,data:AA==,iv:AA==,tag:AA==,type:str]\nsops:\n  pgp:\n  - fp: X\n    enc: Y\n  lastmodified: \"2024-01-01T00:00:00Z\"\n  mac: ENC[x]\n  version: 3.9.0\n";
    let err = decrypt("x.yaml", pgp_only.as_bytes(), Format::Yaml, &ids).expect_err("refused");
    assert_eq!(err.reason, Reason::NoAgeRecipients);
    let err = kix_sops::inspect("x.yaml", pgp_only.as_bytes(), Format::Yaml).expect_err("refused");
    assert_eq!(err.reason, Reason::NoAgeRecipients);
}

impl Case {
    /// A key sops finds nowhere: sops refuses for want of a key too.
    fn key_without_access(&self) -> Key {
        Key {
            file: self.dir.path().join("missing.txt"),
            text: String::new(),
            recipient: String::new(),
        }
    }
}
