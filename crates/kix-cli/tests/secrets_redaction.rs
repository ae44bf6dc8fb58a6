//! Redaction by provenance (#43, point 6): sops encrypts every value of a
//! file unless told otherwise, so a value that came out of decryption may
//! be anywhere in the Secret: an annotation, a label, `data`, `stringData`,
//! `type`. Each is redacted wherever kix prints or stores it, whatever its
//! path: `kix plan` (text, `--output json`, `--out`), `kix deploy` (text,
//! `--output json`, JSON logs), `kix status`, `kix history`, an apiserver's
//! error quoting a value, `kix validate`'s findings, the operator's log,
//! Events and the Activation records. The values are in the applied
//! Secret, so the scans would see them if kix printed them.
//!
//! Files are encrypted by the real `sops` to a key `age-keygen` made for
//! the test (`$KIX_SOPS_BIN_DIR`, else checks/build-sops-age).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::sops::{Key, encode, keygen, sops_bin_dir};
use common::{Pkg, Run, records, run, write_tree};
use k8s_openapi::api::core::v1::{Event, Secret};
use kix_testkit::TestEnv;
use kube::api::{Api, ListParams};

/// The probe values of one version of the Secret: each is put in one place.
struct Probes {
    annotation: String,
    /// An annotation the next version drops: its old value is shown nowhere.
    dropped: String,
    label: String,
    data: String,
    string_data: String,
}

impl Probes {
    fn new(version: &str) -> Probes {
        let unique = kix_testkit::unique_name(version);
        Probes {
            annotation: format!("annot-{unique}"),
            dropped: format!("dropped-{unique}"),
            label: format!("label-{unique}"),
            data: format!("data-{unique}"),
            string_data: format!("strdata-{unique}"),
        }
    }

    /// Every text that would show one of the values: each, and its base64.
    fn texts(&self) -> Vec<String> {
        [
            &self.annotation,
            &self.dropped,
            &self.label,
            &self.data,
            &self.string_data,
        ]
        .into_iter()
        .flat_map(|v| [v.clone(), encode(v)])
        .collect()
    }
}

/// The Secret `db` with `probes`, every value encrypted by `sops` (no
/// encryption rule: sops' default); `dropped` only when `with_dropped`.
fn encrypted_secret(dir: &Path, probes: &Probes, with_dropped: bool, key: &Key) -> Vec<u8> {
    let dropped = if with_dropped {
        format!("    example.com/dropped: {}\n", probes.dropped)
    } else {
        String::new()
    };
    let plain = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  annotations:\n    \
         example.com/probe: {}\n{dropped}  labels:\n    probe: {}\ntype: Opaque\n\
         data:\n  token: {}\nstringData:\n  password: {}\n",
        probes.annotation,
        probes.label,
        encode(&probes.data),
        probes.string_data,
    );
    encrypt(dir, key, &plain)
}

/// A tree with package `app` holding only the encrypted file.
fn tree(root: &Path, env: &TestEnv, encrypted: &[u8]) -> PathBuf {
    write_tree(
        root,
        &env.cluster,
        &[Pkg {
            name: "app".into(),
            depends_on: vec![],
            namespace: env.namespace.clone(),
            files: vec![],
        }],
    );
    let secrets = root.join("packages/app/secrets");
    std::fs::create_dir_all(&secrets).expect("mkdir");
    std::fs::write(secrets.join("000-db.sops.yaml"), encrypted).expect("encrypted file");
    root.to_path_buf()
}

/// `kix` as the test's admin with `key`, and no sops key of the environment.
fn kix(scratch: &Path, key: &Key) -> Command {
    let mut cmd = common::kix(&kix_testkit::kubeconfig_path(), &scratch.join("gcroots"));
    cmd.env_remove("SOPS_AGE_KEY")
        .env_remove("SOPS_AGE_KEY_FILE")
        .env("HOME", scratch)
        .env("XDG_CONFIG_HOME", scratch.join("config"))
        .arg("--age-identity")
        .arg(&key.file);
    cmd
}

fn assert_none_in(probes: &[String], what: &str, text: &str) {
    for value in probes {
        assert!(
            !text.contains(value.as_str()),
            "{what} shows the decrypted value {value:?}: {text}"
        );
    }
}

async fn live_secret(env: &TestEnv) -> Secret {
    Api::<Secret>::namespaced(env.client.clone(), &env.namespace)
        .get("db")
        .await
        .expect("the Secret is deployed")
}

/// The live Secret carries `probes` in each place: the test is meaningful.
fn assert_applied(secret: &Secret, probes: &Probes) {
    let annotations = secret.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get("example.com/probe"),
        Some(&probes.annotation)
    );
    let labels = secret.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("probe"), Some(&probes.label));
    let data = secret.data.clone().unwrap_or_default();
    assert_eq!(data["token"].0, probes.data.as_bytes());
    assert_eq!(data["password"].0, probes.string_data.as_bytes());
}

/// Every Event and every Activation record of the test, as JSON.
async fn events_and_records(env: &TestEnv) -> String {
    let events = Api::<Event>::namespaced(env.client.clone(), &env.namespace)
        .list(&ListParams::default())
        .await
        .expect("events");
    let recs = records(&env.client, &env.cluster).await;
    format!(
        "{}\n{}",
        serde_json::to_string(&events.items).expect("json"),
        serde_json::to_string(&recs).expect("json")
    )
}

/// All a command printed (a `Run`'s Display keeps only stdout's end).
fn whole(out: &Run) -> String {
    format!("{}\n{}", out.stdout, out.stderr)
}

fn cli(scratch: &Path, key: &Key, args: &[&str], tree: &Path, cluster: &str) -> Run {
    run(kix(scratch, key)
        .args(args)
        .arg("--path")
        .arg(tree)
        .arg(cluster))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decrypted_values_are_redacted_wherever_the_cli_shows_them() {
    let env = TestEnv::new("redact").await.expect("control plane");
    let scratch = tempfile::tempdir().expect("tempdir");
    let dir = scratch.path();
    let key = keygen(dir, "test.key");
    let (v1, v2) = (Probes::new("v1"), Probes::new("v2"));
    let mut all = v1.texts();
    all.extend(v2.texts());
    let first = tree(
        &dir.join("v1"),
        &env,
        &encrypted_secret(dir, &v1, true, &key),
    );
    let deploy = ["deploy", "--yes", "--log-format", "json", "-v"];
    let out = cli(dir, &key, &deploy, &first, &env.cluster);
    assert_eq!(out.code, Some(0), "{out}");
    assert_none_in(&all, "kix deploy", &whole(&out));
    assert_applied(&live_secret(&env).await, &v1);

    // Every value changes and one annotation goes: the plan names each
    // field, old and new values redacted, in every form it is shown in.
    let second = tree(
        &dir.join("v2"),
        &env,
        &encrypted_secret(dir, &v2, false, &key),
    );
    let out = cli(dir, &key, &["plan"], &second, &env.cluster);
    assert!(out.stdout.contains("example.com/probe"), "{out}");
    assert!(out.stdout.contains("(redacted)"), "{out}");
    assert_none_in(&all, "kix plan", &whole(&out));
    let out = cli(
        dir,
        &key,
        &["plan", "--output", "json"],
        &second,
        &env.cluster,
    );
    assert!(out.stdout.contains("metadata.labels.probe"), "{out}");
    assert_none_in(&all, "kix plan --output json", &whole(&out));
    let saved = dir.join("plan.json");
    let out = cli(
        dir,
        &key,
        &["plan", "--out", &saved.display().to_string()],
        &second,
        &env.cluster,
    );
    assert_eq!(out.code, Some(0), "{out}");
    let saved_text = std::fs::read_to_string(&saved).expect("the saved plan");
    assert_none_in(
        &all,
        "kix plan --out",
        &format!("{}{saved_text}", whole(&out)),
    );
    let deploy_json = [
        "deploy",
        "--yes",
        "--output",
        "json",
        "--log-format",
        "json",
    ];
    let out = cli(dir, &key, &deploy_json, &second, &env.cluster);
    assert_eq!(out.code, Some(0), "{out}");
    assert_none_in(&all, "kix deploy --output json", &whole(&out));
    assert_applied(&live_secret(&env).await, &v2);

    for args in [
        ["status", "--output", "json"].as_slice(),
        &["status"],
        &["history"],
    ] {
        let out = cli(dir, &key, args, &second, &env.cluster);
        assert_none_in(&all, &format!("kix {}", args.join(" ")), &whole(&out));
    }
    assert_none_in(
        &all,
        "the Events and records",
        &events_and_records(&env).await,
    );
    refusals_quote_no_value(&env, dir, &key, &all);
    let _ = kix_testkit::delete_namespace(&env.client, &env.namespace).await;
}

/// `sops encrypt` (every value) of `plain`, a Secret's YAML.
fn encrypt(dir: &Path, key: &Key, plain: &str) -> Vec<u8> {
    let file = dir.join("plain.yaml");
    std::fs::write(&file, plain).expect("plain file");
    let out = Command::new(sops_bin_dir().join("sops"))
        .current_dir(dir)
        .env_clear()
        .env("HOME", dir)
        .args(["encrypt", "--age", &key.recipient])
        .arg(&file)
        .output()
        .expect("sops runs");
    std::fs::remove_file(&file).expect("remove the plain file");
    assert!(out.status.success(), "sops encrypt: {out:?}");
    out.stdout
}

/// A value the apiserver refuses (a label value with spaces: its message
/// quotes it) and one the offline validation refuses (`immutable` a string)
/// are named by their field, never shown.
fn refusals_quote_no_value(env: &TestEnv, dir: &Path, key: &Key, probes: &[String]) {
    let bad = format!("not a label {}", kix_testkit::unique_name("v"));
    let mut all = probes.to_vec();
    all.push(bad.clone());
    let head = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n";
    let not_boolean = encrypt(
        dir,
        key,
        &format!("{head}immutable: {bad}\nstringData:\n  password: x\n"),
    );
    let bad_tree = tree(&dir.join("not-boolean"), env, &not_boolean);
    let out = cli(dir, key, &["validate"], &bad_tree, &env.cluster);
    assert_ne!(out.code, Some(0), "validate refuses it: {out}");
    assert!(out.stdout.contains("immutable"), "{out}");
    assert_none_in(&all, "kix validate", &whole(&out));
    let out = cli(dir, key, &["plan"], &bad_tree, &env.cluster);
    assert_ne!(out.code, Some(0), "the apiserver refuses it: {out}");
    assert!(whole(&out).contains("immutable"), "{out}");
    assert_none_in(&all, "kix plan (not a boolean)", &whole(&out));

    let not_label = encrypt(
        dir,
        key,
        &format!("{head}  labels:\n    probe: {bad}\nstringData:\n  password: x\n"),
    );
    let bad_tree = tree(&dir.join("not-label"), env, &not_label);
    let out = cli(dir, key, &["plan"], &bad_tree, &env.cluster);
    assert_ne!(out.code, Some(0), "the apiserver refuses it: {out}");
    assert!(whole(&out).contains("metadata.labels"), "{out}");
    assert_none_in(&all, "kix plan (not a label)", &whole(&out));
}

/// `kix-operator` for `env`'s cluster as the test's admin with `key`, its
/// debug JSON log in `log`, no sops key of the environment.
fn start_operator(env: &TestEnv, scratch: &Path, key: &Key, log: &Path) -> common::Operator {
    let http = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let mut cmd = Command::new(common::operator_bin());
    cmd.arg("--kubeconfig")
        .arg(kix_testkit::kubeconfig_path())
        .args(["--metrics-addr", &http.to_string()])
        .args(["--leader-lease", &format!("{}-op", env.cluster)])
        .args(["--lease-namespace", &env.namespace])
        .args(["--leader-lease-seconds", "4", "--resync-interval", "10s"])
        .args(["--cluster", &env.cluster, "--log-format", "json"])
        .arg("--age-identity")
        .arg(&key.file)
        .env_remove("SOPS_AGE_KEY")
        .env_remove("SOPS_AGE_KEY_FILE")
        .env("HOME", scratch)
        .env("XDG_CONFIG_HOME", scratch.join("config"))
        .env("KIX_LOG", "debug,kube=warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(log).expect("operator log"));
    common::Operator {
        child: cmd.spawn().expect("start kix-operator"),
        log: log.to_path_buf(),
        http,
    }
}

/// The operator plans and applies each version of the Secret (its update
/// diffs every value): its log, the Events, the records and `kix deploy
/// --operator` show none of the values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decrypted_values_are_redacted_in_what_the_operator_writes() {
    let env = TestEnv::new("redact-op").await.expect("control plane");
    // kix deploy --operator needs kix's CRDs: installed as a platform does
    // (on a fresh control plane no other test has).
    common::tenancy::install_crds(&env);
    let scratch = tempfile::tempdir().expect("tempdir");
    let dir = scratch.path();
    let key = keygen(dir, "test.key");
    let operator = start_operator(&env, dir, &key, &dir.join("operator.log"));
    let (v1, v2) = (Probes::new("v1"), Probes::new("v2"));
    let mut all = v1.texts();
    all.extend(v2.texts());
    for (name, probes, with_dropped) in [("v1", &v1, true), ("v2", &v2, false)] {
        let root = tree(
            &dir.join(name),
            &env,
            &encrypted_secret(dir, probes, with_dropped, &key),
        );
        let path = common::add_to_store(&root);
        for args in [
            ["plan", "--operator"].as_slice(),
            &["deploy", "--operator", "--yes"],
        ] {
            let out = run(kix(dir, &key)
                .args(args)
                .args(["--path", &path, &env.cluster]));
            assert_eq!(out.code, Some(0), "{out}");
            assert_none_in(&all, &format!("kix {}", args.join(" ")), &whole(&out));
        }
        common::poll(
            "the operator to apply the Secret's new values",
            Duration::from_secs(90),
            Duration::from_millis(300),
            || async {
                let secret = Api::<Secret>::namespaced(env.client.clone(), &env.namespace)
                    .get_opt("db")
                    .await
                    .ok()??;
                let annotations = secret.metadata.annotations.unwrap_or_default();
                (annotations.get("example.com/probe") == Some(&probes.annotation)).then_some(())
            },
        )
        .await;
        assert_applied(&live_secret(&env).await, probes);
    }
    let out = run(kix(dir, &key).args(["history", &env.cluster]));
    assert_none_in(&all, "kix history", &whole(&out));
    assert_none_in(
        &all,
        "the Events and records",
        &events_and_records(&env).await,
    );
    assert_none_in(&all, "the operator's log", &operator.log());
    assert!(
        operator.log().contains(&format!("{}-2", env.cluster)),
        "the operator's log names the record it applied: {}",
        operator.log()
    );
    drop(operator);
    let _ = kix_testkit::delete_namespace(&env.client, &env.namespace).await;
}
