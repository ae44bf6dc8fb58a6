//! kix reads resource files as kubectl does: for every input of the corpora
//! (tests/kubectl/corpus/, written by tests/kubectl/generate-corpus) and
//! every resource file of the fixture trees, kix's objects are kubectl's
//! (checks/kubectl-decode, the cli-runtime resource builder of
//! `kubectl apply -f`), or kix refuses the file with an error that names
//! the line. Never different values.
//!
//! The reference decoder is built by checks/build-kubectl-decode (cached;
//! checks/test builds it first); without it the test fails, it does not
//! skip.

#[path = "kubectl/oracle.rs"]
mod oracle;

use std::fs;
use std::path::{Path, PathBuf};

use kix_manifest::decode::file_objects;
use oracle::{Kubectl, Verdict, compare};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn files_below(dir: &Path, keep: &dyn Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).expect("readable corpus directory") {
            let path = entry.expect("dir entry").path();
            let meta = fs::symlink_metadata(&path);
            if meta.as_ref().is_ok_and(|m| m.is_dir()) {
                dirs.push(path);
            } else if meta.is_ok_and(|m| m.is_file()) && keep(&path) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Each corpus: its name and its files.
fn corpora() -> Vec<(String, Vec<PathBuf>)> {
    let root = crate_dir().join("tests/kubectl/corpus");
    let mut names: Vec<PathBuf> = fs::read_dir(&root)
        .expect("tests/kubectl/corpus exists (tests/kubectl/generate-corpus writes it)")
        .map(|e| e.expect("dir entry").path())
        .collect();
    names.sort();
    let mut out: Vec<(String, Vec<PathBuf>)> = names
        .iter()
        .map(|dir| {
            let name = dir
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            (name, files_below(dir, &|_| true))
        })
        .collect();
    // The project's own fixtures: every resource file kix reads in them.
    let fixtures = files_below(&crate_dir().join("tests/fixtures"), &|p| {
        let s = p.to_string_lossy();
        s.contains("/resources/") && [".yaml", ".yml", ".json"].iter().any(|e| s.ends_with(e))
    });
    out.push(("fixtures".to_owned(), fixtures));
    out
}

#[derive(Default)]
struct Counts {
    same: usize,
    refused_by_both: usize,
    refused_by_kix: usize,
    different: Vec<String>,
    unclear: Vec<String>,
}

/// A refusal names where the problem is (a line), or is about the whole
/// file (its encoding).
fn is_clear(message: &str) -> bool {
    message.contains("line ") || message.contains("UTF-8") || message.contains("UTF-16")
}

#[test]
fn kix_reads_every_corpus_as_kubectl_does() {
    // KIX_PARITY_VERBOSE=1 lists every refusal by kix alone.
    let verbose = std::env::var_os("KIX_PARITY_VERBOSE").is_some();
    let mut kubectl = Kubectl::start();
    let mut failures = Vec::new();
    let mut total = 0;
    for (name, files) in corpora() {
        assert!(!files.is_empty(), "corpus {name} is empty");
        let mut counts = Counts::default();
        for file in &files {
            let bytes = fs::read(file).expect("readable input");
            let theirs = kubectl.decode(&bytes);
            let ours = file_objects(&bytes);
            let shown = file.strip_prefix(crate_dir()).unwrap_or(file).display();
            match compare(&ours, &theirs) {
                Verdict::Same => counts.same += 1,
                Verdict::RefusedByBoth => counts.refused_by_both += 1,
                Verdict::RefusedByKix(message) => {
                    counts.refused_by_kix += 1;
                    if verbose {
                        println!("  refused by kix only: {shown}: {message}");
                    }
                    if !is_clear(&message) {
                        counts.unclear.push(format!("{shown}: {message}"));
                    }
                }
                Verdict::Different(why) => counts.different.push(format!("{shown}: {why}")),
            }
        }
        total += files.len();
        println!(
            "{name}: {} inputs: {} same, {} refused by both, {} refused by kix with a clear error, {} different",
            files.len(),
            counts.same,
            counts.refused_by_both,
            counts.refused_by_kix - counts.unclear.len(),
            counts.different.len()
        );
        failures.extend(counts.different);
        failures.extend(
            counts
                .unclear
                .into_iter()
                .map(|u| format!("refusal names no line: {u}")),
        );
    }
    println!("{total} inputs in all");
    assert!(
        failures.is_empty(),
        "{} inputs where kix differs from kubectl:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
