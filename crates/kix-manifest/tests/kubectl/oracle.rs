//! The reference decoder: checks/kubectl-decode, which reads files as
//! `kubectl apply -f` does, run as a long-lived process; and the comparison
//! of its objects with kix's. Shared by `tests/kubectl_parity.rs` and the
//! `kubectl_parity` fuzz target.

use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde::Deserialize;
use serde_json::Value;

/// What kubectl made of one file.
#[derive(Debug, Deserialize)]
pub struct Report {
    pub objects: Vec<Value>,
    pub error: Option<String>,
}

pub struct Kubectl {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// The decoder binary: `$KIX_KUBECTL_DECODE`, else what
/// checks/build-kubectl-decode builds (cached). Panics, saying how to get
/// it, when there is none: the parity tests never skip.
pub fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("KIX_KUBECTL_DECODE") {
        return PathBuf::from(path);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../checks/build-kubectl-decode");
    let output = Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        output.status.success(),
        "the reference decoder is missing and {} failed to build it (it needs Go and the \
         module proxy); set KIX_KUBECTL_DECODE to a built kubectl-decode",
        script.display()
    );
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

impl Kubectl {
    pub fn start() -> Kubectl {
        let path = binary();
        let mut child = Command::new(&path)
            .args(["-stream", "yaml"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", path.display()));
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
        Kubectl {
            child,
            stdin,
            stdout,
        }
    }

    /// What `kubectl apply -f input.yaml` reads from `bytes`.
    pub fn decode(&mut self, bytes: &[u8]) -> Report {
        let size = u32::try_from(bytes.len()).expect("input under 4 GiB");
        self.stdin
            .write_all(&size.to_be_bytes())
            .and_then(|()| self.stdin.write_all(bytes))
            .and_then(|()| self.stdin.flush())
            .expect("kubectl-decode reads its input");
        let mut size = [0u8; 4];
        self.stdout
            .read_exact(&mut size)
            .expect("kubectl-decode answers");
        let mut answer = vec![0u8; u32::from_be_bytes(size) as usize];
        self.stdout
            .read_exact(&mut answer)
            .expect("kubectl-decode answers");
        if nesting(&answer) > MAX_ANSWER_DEPTH {
            // Deeper than serde_json reads (kix refuses such objects).
            return Report {
                objects: vec![Value::from("(nested too deep to compare)")],
                error: None,
            };
        }
        serde_json::from_slice(&answer).expect("kubectl-decode answers JSON")
    }
}

/// Deepest answer parsed: serde_json's limit is 128 levels, and the
/// answer wraps the objects in two.
const MAX_ANSWER_DEPTH: usize = 120;

/// How deep brackets nest in JSON text.
fn nesting(json: &[u8]) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0, false, false);
    for &b in json {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

impl Drop for Kubectl {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How kix's reading of a file compares with kubectl's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The same objects with the same values.
    Same,
    RefusedByBoth,
    /// kubectl reads it, kix refuses it with this message.
    RefusedByKix(String),
    /// kix sends other values than kubectl (or reads what kubectl refuses).
    Different(String),
}

pub fn compare(kix: &Result<Vec<Value>, String>, kubectl: &Report) -> Verdict {
    match (kix, &kubectl.error) {
        (Err(_), Some(_)) => Verdict::RefusedByBoth,
        (Err(message), None) => Verdict::RefusedByKix(message.clone()),
        (Ok(objects), Some(error)) => Verdict::Different(format!(
            "kix reads {} objects, kubectl refuses the file: {error}",
            objects.len()
        )),
        (Ok(objects), None) => {
            // kix drops what only the API server sets; kubectl sends it
            // and the server ignores it. The rest must be the same.
            let kubectl = Report {
                objects: kubectl.objects.iter().map(without_server_set).collect(),
                error: None,
            };
            if objects.len() != kubectl.objects.len() {
                return Verdict::Different(format!(
                    "kix reads {} objects, kubectl {}: kix {}, kubectl {}",
                    objects.len(),
                    kubectl.objects.len(),
                    Value::from(objects.clone()),
                    Value::from(kubectl.objects.clone())
                ));
            }
            for (i, (ours, theirs)) in objects.iter().zip(&kubectl.objects).enumerate() {
                if let Some(path) = difference(ours, theirs, String::new()) {
                    return Verdict::Different(format!(
                        "object {i} differs at {path}: kix {ours}, kubectl {theirs}"
                    ));
                }
            }
            Verdict::Same
        }
    }
}

/// kubectl's object less the fields kix drops
/// ([`kix_manifest::published::drop_server_set`]).
fn without_server_set(object: &Value) -> Value {
    let mut object = object.clone();
    if let Value::Object(map) = &mut object {
        kix_manifest::published::drop_server_set(map, &mut std::collections::BTreeSet::new());
    }
    object
}

/// Where two JSON values differ, or `None`. Key order aside, and one
/// difference of number form: numbers that are not `int64`s (floats, and
/// integers above `i64::MAX`, which kubectl sends as floats) are equal when
/// they are the same `float64`, however written (`1e+21`, `1e21`;
/// `12345678901234567000`, `1.2345678901234567e19`), and zeros are equal
/// whatever their sign. Otherwise an `int64` must be the same `int64`.
fn difference(a: &Value, b: &Value, path: String) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            if x.len() != y.len() || x.keys().any(|k| !y.contains_key(k)) {
                return Some(format!("{path} (keys)"));
            }
            x.iter()
                .find_map(|(k, v)| difference(v, &y[k], format!("{path}.{k}")))
        }
        (Value::Array(x), Value::Array(y)) => {
            if x.len() != y.len() {
                return Some(format!("{path} (length)"));
            }
            x.iter()
                .zip(y)
                .enumerate()
                .find_map(|(i, (v, w))| difference(v, w, format!("{path}[{i}]")))
        }
        (Value::Number(x), Value::Number(y)) => {
            // Zero's sign aside: JSON `-0` and `-0.0` look alike to kix
            // (serde_json), not to kubectl, which sends `0` for one and `-0`
            // for the other; the API server reads both as zero.
            let zero = x.as_f64() == Some(0.0) && y.as_f64() == Some(0.0);
            let same = zero
                || match (x.as_i64(), y.as_i64()) {
                    (Some(i), Some(j)) => i == j,
                    (None, None) => x.as_f64() == y.as_f64(),
                    _ => false,
                };
            (!same).then_some(path)
        }
        _ => (a != b).then_some(path),
    }
}
