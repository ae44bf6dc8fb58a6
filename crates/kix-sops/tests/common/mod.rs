//! The real `sops` and `age-keygen` (checks/build-sops-age), driven in a
//! temporary directory with no sops configuration or key of the user.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use kix_sops::{Format, Identities, Layout};

/// The directory holding `sops`, `age` and `age-keygen`:
/// `$KIX_SOPS_BIN_DIR`, else what checks/build-sops-age builds (cached).
pub fn bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os("KIX_SOPS_BIN_DIR") {
            return PathBuf::from(dir);
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../checks/build-sops-age");
        let out = Command::new(&script).output();
        match out {
            Ok(out) if out.status.success() => {
                PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
            }
            other => panic!(
                "these tests need the real sops and age: run `checks/build-sops-age` (it needs Go and \
                 the Go module proxy) and export KIX_SOPS_BIN_DIR=<the directory it prints>; \
                 running {} failed: {other:?}",
                script.display()
            ),
        }
    })
}

/// A command for one of the tools with a clean environment: no user
/// keys, no configuration.
pub fn tool(name: &str, dir: &Path) -> Command {
    let mut command = Command::new(bin_dir().join(name));
    command
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", dir)
        .env("XDG_CONFIG_HOME", dir.join("config"));
    command
}

fn ok(out: Output, what: &str) -> Vec<u8> {
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// An age key made by `age-keygen`: its identity file and recipient.
pub struct Key {
    pub file: PathBuf,
    pub text: String,
    pub recipient: String,
}

impl Key {
    pub fn generate(dir: &Path, name: &str) -> Key {
        let text = String::from_utf8(ok(
            tool("age-keygen", dir).output().expect("runs age-keygen"),
            "age-keygen",
        ))
        .expect("UTF-8");
        let recipient = text
            .lines()
            .find_map(|l| l.strip_prefix("# public key: "))
            .expect("age-keygen prints the public key")
            .to_owned();
        let file = dir.join(format!("{name}.txt"));
        std::fs::write(&file, &text).expect("writes the key");
        Key {
            file,
            text,
            recipient,
        }
    }

    pub fn identities(&self) -> Identities {
        Identities::parse(&self.text, "key", Layout::OnePerLine).expect("an age-keygen key parses")
    }
}

/// How sops is told which values to encrypt.
#[derive(Debug, Clone, Copy)]
pub enum Mode {
    /// Command-line flags (none: the whole file).
    Flags(&'static [&'static str]),
    /// Lines of a `.sops.yaml` creation rule (what has no flag, such as
    /// `mac_only_encrypted`).
    Rule(&'static str),
}

/// `sops encrypt` of `plain` (written as `name`) to `recipients`, told
/// what to encrypt by `mode`; the encrypted bytes.
pub fn encrypt(dir: &Path, name: &str, plain: &[u8], recipients: &[&Key], mode: Mode) -> Vec<u8> {
    let path = dir.join(name);
    std::fs::write(&path, plain).expect("writes the plain file");
    let list: Vec<&str> = recipients.iter().map(|k| k.recipient.as_str()).collect();
    let config = dir.join(".sops.yaml");
    let mut command = tool("sops", dir);
    match mode {
        Mode::Flags(flags) => {
            command
                .arg("encrypt")
                .arg("--age")
                .arg(list.join(","))
                .args(flags);
        }
        Mode::Rule(lines) => {
            let rule = format!("creation_rules:\n  - age: {}\n{lines}", list.join(","));
            std::fs::write(&config, rule).expect("writes .sops.yaml");
            command.arg("--config").arg(&config).arg("encrypt");
        }
    }
    let out = command.arg(&path).output().expect("runs sops");
    let _ = std::fs::remove_file(&config);
    std::fs::remove_file(&path).expect("removes the plain file");
    ok(out, "sops encrypt")
}

/// `sops decrypt` of `encrypted` (as `name`) with `key`: the output, or
/// the error sops printed.
pub fn sops_decrypt(
    dir: &Path,
    name: &str,
    encrypted: &[u8],
    key: &Key,
) -> Result<Vec<u8>, String> {
    let path = dir.join(name);
    std::fs::write(&path, encrypted).expect("writes the encrypted file");
    let out = tool("sops", dir)
        .env("SOPS_AGE_KEY_FILE", &key.file)
        .arg("decrypt")
        .arg(&path)
        .output()
        .expect("runs sops");
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The documents `sops decrypt` printed, as JSON values.
pub fn parse_plain(format: Format, text: &[u8]) -> Vec<serde_json::Value> {
    match format {
        Format::Json => vec![serde_json::from_slice(text).expect("sops prints JSON")],
        Format::Yaml => {
            let text = std::str::from_utf8(text).expect("UTF-8");
            serde_saphyr::from_str_multiple(text).expect("sops prints YAML")
        }
    }
}

/// Values equal as a reader sees them: numbers by value (sops prints the
/// float 1.0 as `1`).
pub fn same(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((ka, va), (kb, vb))| ka == kb && same(va, vb))
        }
        _ => a == b,
    }
}
