//! `kix operator-kubeconfig` against the control plane: the kubeconfig it
//! writes authenticates as the ServiceAccount, whichever way the current
//! kubeconfig gives its CA (inline, a file, none: the Secret's ca.crt); a
//! token that never comes is a bounded wait, exit 1, and no file.

mod cli_support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cli_support::Kix;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

async fn create_service_account(kix: &Kix, name: &str) {
    let accounts: Api<ServiceAccount> = Api::namespaced(kix.env.client.clone(), kix.ns());
    let account = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
        .expect("ServiceAccount");
    accounts
        .create(&PostParams::default(), &account)
        .await
        .expect("create ServiceAccount");
}

async fn create_token_secret(kix: &Kix, name: &str, account: &str) {
    let secrets: Api<Secret> = Api::namespaced(kix.env.client.clone(), kix.ns());
    let secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "annotations": {"kubernetes.io/service-account.name": account}},
        "type": "kubernetes.io/service-account-token",
    }))
    .expect("Secret");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("create Secret");
}

/// The user name the apiserver sees for `kubeconfig`'s credential.
async fn whoami(kubeconfig: &Path) -> String {
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(kubeconfig).expect("read the written kubeconfig"),
        &KubeConfigOptions::default(),
    )
    .await
    .expect("load the written kubeconfig");
    let client = kube::Client::try_from(config).expect("client");
    let reviews: Api<SelfSubjectReview> = Api::all(client);
    let review = reviews
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .expect("SelfSubjectReview with the written kubeconfig");
    review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .unwrap_or_default()
}

/// How a kubeconfig gives its cluster's CA.
enum CaForm {
    Inline,
    RelativeFile,
    /// No CA and insecure-skip-tls-verify: the written kubeconfig must take
    /// the Secret's ca.crt (it verifies TLS).
    None,
}

/// The control plane's admin kubeconfig with its CA given as `form` says.
fn admin_kubeconfig(dir: &Path, form: CaForm) -> PathBuf {
    let mut kubeconfig =
        Kubeconfig::read_from(kix_testkit::kubeconfig_path()).expect("admin kubeconfig");
    let cluster = kubeconfig.clusters[0].cluster.as_mut().expect("cluster");
    let name = match form {
        CaForm::Inline => "inline",
        CaForm::RelativeFile => {
            let data = cluster
                .certificate_authority_data
                .take()
                .expect("inline CA");
            let pem: k8s_openapi::ByteString =
                serde_json::from_value(serde_json::Value::String(data)).expect("base64");
            std::fs::write(dir.join("ca.crt"), pem.0).expect("write ca.crt");
            cluster.certificate_authority = Some("ca.crt".into());
            "file"
        }
        CaForm::None => {
            cluster.certificate_authority_data = None;
            cluster.insecure_skip_tls_verify = Some(true);
            "none"
        }
    };
    let path = dir.join(format!("admin-{name}.kubeconfig"));
    std::fs::write(&path, serde_json::to_string(&kubeconfig).expect("json")).expect("write");
    path
}

#[tokio::test]
async fn kubeconfig_authenticates_as_the_service_account_for_every_ca_form() {
    let kix = Kix::new("sa-kubeconfig").await;
    create_service_account(&kix, "robot").await;
    create_token_secret(&kix, "robot-token", "robot").await;
    let expected = format!("system:serviceaccount:{}:robot", kix.ns());
    for form in [CaForm::Inline, CaForm::RelativeFile, CaForm::None] {
        let admin = admin_kubeconfig(kix.dir.path(), form);
        let out = kix.dir.path().join("out/kubeconfig");
        std::fs::create_dir_all(out.parent().expect("parent")).expect("mkdir");
        let run = kix
            .kix(&[
                "--kubeconfig",
                admin.to_str().expect("utf-8"),
                "operator-kubeconfig",
                "--namespace",
                kix.ns(),
                "--service-account",
                "robot",
                "--out",
                out.to_str().expect("utf-8"),
                "--wait",
                "60s",
            ])
            .ok();
        assert!(run.stderr.contains("for ServiceAccount"), "{}", run.stderr);
        let mode = std::fs::metadata(&out)
            .expect("written")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "mode of {}", out.display());
        let text = std::fs::read_to_string(&out).expect("read");
        assert!(!text.contains("insecure"), "{}: {text}", admin.display());
        assert_eq!(whoami(&out).await, expected, "with {}", admin.display());
        // No temporary file is left beside it.
        let left: Vec<_> = std::fs::read_dir(out.parent().expect("parent"))
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("kubeconfig")]);
    }
}

/// `--context` picks the server and the client alike: the current context
/// of this kubeconfig points at no apiserver.
#[tokio::test]
async fn context_flag_picks_the_server_and_bad_flags_write_nothing() {
    let kix = Kix::new("sa-kubeconfig-context").await;
    create_service_account(&kix, "robot").await;
    create_token_secret(&kix, "robot-token", "robot").await;
    let (admin, good) = kix_testkit::kubeconfig_with_unreachable_context(kix.dir.path(), "broken")
        .expect("kubeconfig");

    let run = |context: &str, out: &Path| {
        kix.kix(&[
            "--kubeconfig",
            admin.to_str().expect("utf-8"),
            "--context",
            context,
            "operator-kubeconfig",
            "--namespace",
            kix.ns(),
            "--service-account",
            "robot",
            "--out",
            out.to_str().expect("utf-8"),
            "--wait",
            "60s",
        ])
    };
    let out = kix.dir.path().join("kubeconfig");
    run(&good, &out).ok();
    assert_eq!(
        whoami(&out).await,
        format!("system:serviceaccount:{}:robot", kix.ns())
    );

    let missing = kix.dir.path().join("missing");
    let failed = run("nope", &missing).code(1);
    assert!(failed.stderr.contains("\"nope\""), "{}", failed.stderr);
    assert!(!missing.exists());
    let in_no_dir = kix.dir.path().join("no-such-dir/kubeconfig");
    let failed = run(&good, &in_no_dir).code(1);
    assert!(
        failed
            .stderr
            .contains(&kix.dir.path().join("no-such-dir").display().to_string()),
        "{}",
        failed.stderr
    );
}

#[tokio::test]
async fn a_token_that_never_comes_is_a_bounded_wait_exit_1_and_no_file() {
    let kix = Kix::new("sa-kubeconfig-missing").await;
    // A Secret of a ServiceAccount nobody created (the token controller
    // never fills it), one nobody created at all, and one of another account.
    create_token_secret(&kix, "ghost-token", "ghost").await;
    create_service_account(&kix, "lonely").await;
    create_service_account(&kix, "other").await;
    create_token_secret(&kix, "other-token", "other").await;
    let cases = [
        ("ghost", "ghost-token", "the ServiceAccount does not exist"),
        ("lonely", "lonely-token", "the Secret does not exist"),
        (
            "lonely",
            "other-token",
            "is the token of ServiceAccount \"other\"",
        ),
    ];
    for (account, secret, why) in cases {
        let out = kix.dir.path().join("kubeconfig");
        let started = std::time::Instant::now();
        let run = kix
            .kix(&[
                "operator-kubeconfig",
                "--namespace",
                kix.ns(),
                "--service-account",
                account,
                "--secret",
                secret,
                "--out",
                out.to_str().expect("utf-8"),
                "--wait",
                "3s",
            ])
            .code(1);
        assert!(
            run.stderr
                .contains(&format!("Secret {}/{secret}", kix.ns()))
                && run.stderr.contains(why),
            "{account}/{secret}: {}",
            run.stderr
        );
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{account}/{secret}: the wait was not bounded"
        );
        assert!(
            !out.exists(),
            "{account}/{secret}: a kubeconfig was written"
        );
    }
}
