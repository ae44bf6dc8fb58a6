//! A YAML alias bomb in a tenant's build (#43, point 5): ~700 bytes, nine
//! levels of ten aliases, which a reader that expands every alias grows to
//! about 10^9 nodes. Given to `kix validate`, `kix deploy` and the operator
//! (a record naming the build, the operator run as a process), each ends
//! with an error naming the file and line, in little memory; the operator
//! keeps serving: the next record goes Active.
//!
//! Every process that reads the bomb runs under an address-space cap
//! (`ulimit -v`, `prlimit`), so a regression fails the test instead of
//! taking the machine; the memory asserted is its peak RSS.

mod common;

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Operator, Pkg, Run, add_to_store, write_tree};
use kix_api::Phase;

/// Address space the CLI may take (KiB, `ulimit -v`).
const CAP_KIB: u64 = 3_000_000;
/// Peak RSS a CLI run that reads the bomb may reach, and what the bomb may
/// add to the operator's peak.
const BOUND_KIB: u64 = 100 * 1024;
/// Generous: the 2 s goal is measured, not asserted (shared cores).
const SLOW: Duration = Duration::from_secs(20);

const FILE: &str = "packages/web/resources/bomb.yaml";

/// The shape: nine levels of ten aliases of the level below.
fn bomb() -> String {
    let mut text = String::from(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bomb\n\
         x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
    );
    for level in 1..=9 {
        let items = vec![format!("*a{}", level - 1); 10].join(", ");
        writeln!(text, "x{level}: &a{level} [{items}]").expect("write");
    }
    text
}

/// A build of Kix cluster `cluster` in the store: package `web` in
/// `namespace`, with `file` as its one resource file.
fn build(dir: &Path, cluster: &str, namespace: &str, file: (&str, String)) -> String {
    write_tree(
        dir,
        cluster,
        &[Pkg {
            name: "web".into(),
            depends_on: vec![],
            namespace: namespace.into(),
            files: vec![(file.0.into(), file.1.into_bytes())],
        }],
    );
    add_to_store(dir)
}

fn config_map(value: &str) -> (&'static str, String) {
    (
        "cm.yaml",
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings}}\ndata: {{value: {value}}}\n"
        ),
    )
}

/// `kix <args>` under [`CAP_KIB`], with its peak RSS (KiB, from
/// `/usr/bin/time`) and how long it took.
fn capped_kix(kubeconfig: &Path, gcroots: &Path, args: &[&str]) -> (Run, u64, Duration) {
    let scratch = tempfile::tempdir().expect("tempdir");
    let peak_file = scratch.path().join("peak");
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
        .arg(common::kix_bin())
        .args(args)
        .env_remove("KIX_LOG")
        .env("KUBECONFIG", kubeconfig)
        .env("KIX_GCROOTS_DIR", gcroots)
        .env("KIX_OFFLINE", "true")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run kix under /usr/bin/time");
    let elapsed = start.elapsed();
    let peak = std::fs::read_to_string(&peak_file).unwrap_or_default();
    // `time` writes a line about a failed command first.
    let peak = peak
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("peak RSS from /usr/bin/time: {peak:?}"));
    (out.into(), peak, elapsed)
}

/// The error of a CLI run that read the bomb: exit 1, the file and line
/// named, within the bounds.
fn assert_refused(what: &str, (run, peak, elapsed): (Run, u64, Duration)) {
    eprintln!(
        "{what}: exit {:?} in {} ms, peak RSS {peak} KiB: {}",
        run.code,
        elapsed.as_millis(),
        common::error_line(&run.stderr)
    );
    assert_eq!(run.code, Some(1), "{what}: {run}");
    assert!(
        run.stderr.contains(&format!("{FILE}: line ")) && run.stderr.contains("excessive aliasing"),
        "{what}: the error names the file, the line and the cause: {run}"
    );
    assert!(peak < BOUND_KIB, "{what}: peak RSS {peak} KiB");
    assert!(elapsed < SLOW, "{what}: took {elapsed:?}");
}

/// The operator's peak RSS so far (KiB).
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("operator status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

#[test]
fn kix_validate_refuses_the_bomb_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("tree");
    write_tree(
        &root,
        "bomb",
        &[Pkg {
            name: "web".into(),
            depends_on: vec![],
            namespace: "web".into(),
            files: vec![("bomb.yaml".into(), bomb().into_bytes())],
        }],
    );
    let root = root.to_str().expect("utf-8");
    let gcroots = dir.path().join("gcroots");
    let nowhere = dir.path().join("no-kubeconfig");
    assert_refused(
        "kix validate",
        capped_kix(&nowhere, &gcroots, &["validate", "--path", root]),
    );
}

#[tokio::test]
async fn kix_deploy_and_the_operator_refuse_the_bomb_and_the_operator_keeps_serving() {
    let env = kix_testkit::TestEnv::new("bombs").await.expect("env");
    // The records need kix's CRDs: installed as a platform does (on a fresh
    // control plane no other test has).
    common::tenancy::install_crds(&env);
    let dir = tempfile::tempdir().expect("tempdir");
    let gcroots = dir.path().join("gcroots");
    let kubeconfig = kix_testkit::kubeconfig_path();
    let bomb_path = build(
        &dir.path().join("bomb"),
        &env.cluster,
        &env.namespace,
        ("bomb.yaml", bomb()),
    );

    // `kix deploy` reads the build before it changes anything.
    assert_refused(
        "kix deploy",
        capped_kix(
            &kubeconfig,
            &gcroots,
            &["deploy", &env.cluster, "--path", &bomb_path, "--yes"],
        ),
    );

    // The operator: a record naming the bomb is Failed, naming the file.
    let operator = Operator::start(
        &kubeconfig,
        &[&env.cluster],
        &env.namespace,
        &kix_testkit::unique_name("lease"),
        dir.path().join("operator.log"),
        None,
    );
    let pid = operator.child.id();
    let capped = Command::new("prlimit")
        .args(["--pid", &pid.to_string(), "--as=4000000000"])
        .status()
        .expect("prlimit");
    assert!(capped.success(), "the operator's address space capped");
    let good = build(
        &dir.path().join("v1"),
        &env.cluster,
        &env.namespace,
        config_map("one"),
    );
    let first = common::write_record(
        &env.client,
        &env.cluster,
        common::operator_spec(&env.cluster, &good),
    )
    .await;
    let first = common::settled(&env.client, &first).await;
    assert_eq!(first.phase(), Some(Phase::Active), "{:?}", first.status);
    let before = peak_rss(pid);

    let start = Instant::now();
    let name = common::write_record(
        &env.client,
        &env.cluster,
        common::operator_spec(&env.cluster, &bomb_path),
    )
    .await;
    let refused = common::settled(&env.client, &name).await;
    let elapsed = start.elapsed();
    let message = refused
        .status
        .as_ref()
        .and_then(|s| s.message.clone())
        .unwrap_or_default();
    let after = peak_rss(pid);
    eprintln!(
        "operator: the bomb's record Failed in {} ms (from its creation, polled every 200 ms); \
         peak RSS {before} KiB before, {after} KiB after: {message}",
        elapsed.as_millis()
    );
    assert_eq!(refused.phase(), Some(Phase::Failed), "{message}");
    assert!(
        message.contains(&format!("{FILE}: line ")) && message.contains("excessive aliasing"),
        "the record's message names the file, the line and the cause: {message}"
    );
    assert!(
        after - before < BOUND_KIB,
        "the bomb added {} KiB to the operator's peak RSS",
        after - before
    );

    // It keeps serving: the next record goes Active.
    let next = build(
        &dir.path().join("v2"),
        &env.cluster,
        &env.namespace,
        config_map("two"),
    );
    let next = common::write_record(
        &env.client,
        &env.cluster,
        common::operator_spec(&env.cluster, &next),
    )
    .await;
    let next = common::settled(&env.client, &next).await;
    assert_eq!(next.phase(), Some(Phase::Active), "{:?}", next.status);
    let value = env
        .kubectl(&[
            "get",
            "configmap",
            "settings",
            "-n",
            &env.namespace,
            "-o",
            "jsonpath={.data.value}",
        ])
        .expect("kubectl");
    assert_eq!(value, "two");
}
