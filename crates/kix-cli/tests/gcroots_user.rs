//! GC roots for a user who is not root, as on a multi-user Nix install: a
//! user made for the test (`useradd`) runs the real `kix` (`runuser`) and
//! talks to the store through a Nix daemon of the test's own (a private
//! socket, `NIX_DAEMON_SOCKET_PATH`), which creates the user's
//! `/nix/var/nix/gcroots/per-user/<user>` as Nix does.
//!
//! - A roots directory the user cannot write (the operator's
//!   `/nix/var/nix/gcroots/kix`): the deploy fails before any change, saying
//!   what to do.
//! - By default the user's roots go to
//!   `/nix/var/nix/gcroots/per-user/<user>/kix/<cluster>/<activation>`, which
//!   `nix-store --gc --print-roots` (read-only) lists.
//!
//! The tests create a user, so they need root (as CI and `checks/test` run).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kix_testkit::TestEnv;
use kube::api::{Api, ListParams};

/// A Nix daemon on a socket of its own, killed (by pid) when dropped.
struct NixDaemon {
    child: Child,
    socket: PathBuf,
}

impl NixDaemon {
    fn start(dir: &Path) -> NixDaemon {
        let socket = dir.join("nix-daemon.socket");
        let log = std::fs::File::create(dir.join("nix-daemon.log")).expect("daemon log");
        let child = Command::new("nix-daemon")
            .env("NIX_DAEMON_SOCKET_PATH", &socket)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start nix-daemon");
        let daemon = NixDaemon { child, socket };
        let started = Instant::now();
        while !daemon.socket.exists() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "nix-daemon did not create its socket {} in 20 s; its log: {}",
                daemon.socket.display(),
                std::fs::read_to_string(dir.join("nix-daemon.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        daemon
    }
}

impl Drop for NixDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A user made for the test; removed when dropped, with its per-user GC
/// roots directory and the `gcroots/auto` entries pointing into it.
struct TestUser {
    name: String,
}

impl TestUser {
    fn create() -> TestUser {
        // useradd limits names to 32 characters.
        let name = format!("kixgc{:x}", std::process::id());
        let out = run(Command::new("useradd").args([
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            &name,
        ]));
        assert_eq!(out.code, Some(0), "useradd {name}: {out}");
        TestUser { name }
    }

    fn gcroots_dir(&self) -> PathBuf {
        Path::new(kix_nix::PER_USER_GCROOTS).join(&self.name)
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let mine = self.gcroots_dir();
        if let Ok(entries) = std::fs::read_dir("/nix/var/nix/gcroots/auto") {
            for entry in entries.flatten() {
                if std::fs::read_link(entry.path()).is_ok_and(|t| t.starts_with(&mine)) {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        let _ = std::fs::remove_dir_all(&mine);
        let _ = Command::new("userdel").arg(&self.name).output();
    }
}

/// What the user's `kix` gets: the control plane's admin kubeconfig and the
/// kix binary copied where the user can read them, the private daemon.
struct UserKix<'a> {
    user: &'a TestUser,
    daemon: &'a NixDaemon,
    kix: PathBuf,
    kubeconfig: PathBuf,
    home: PathBuf,
}

impl<'a> UserKix<'a> {
    fn new(user: &'a TestUser, daemon: &'a NixDaemon, dir: &Path) -> UserKix<'a> {
        // The build's target dir may be under root's home, out of reach.
        let kix = dir.join("kix");
        std::fs::copy(kix_bin(), &kix).expect("copy kix");
        let kubeconfig = dir.join("admin.kubeconfig");
        std::fs::copy(kix_testkit::kubeconfig_path(), &kubeconfig).expect("copy kubeconfig");
        std::fs::set_permissions(&kubeconfig, std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
        let home = dir.join("home");
        std::fs::create_dir_all(&home).expect("home");
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        UserKix {
            user,
            daemon,
            kix,
            kubeconfig,
            home,
        }
    }

    /// `kix <args>` as the user, with `env` added.
    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", &self.user.name, "--", "env", "-i"])
            .arg("PATH=/usr/local/bin:/usr/bin:/bin")
            .arg(format!("HOME={}", self.home.display()))
            .arg(format!("USER={}", self.user.name))
            .arg(format!("KUBECONFIG={}", self.kubeconfig.display()))
            .arg("NIX_REMOTE=daemon")
            .arg(format!(
                "NIX_DAEMON_SOCKET_PATH={}",
                self.daemon.socket.display()
            ))
            .arg("KIX_OFFLINE=1")
            .arg("NO_COLOR=1");
        for (k, v) in env {
            cmd.arg(format!("{k}={v}"));
        }
        run(cmd.arg(&self.kix).args(args).stdin(Stdio::null()))
    }
}

#[tokio::test]
async fn a_non_root_deploy_roots_its_build_per_user_or_fails_before_any_change() {
    let uid = run(Command::new("id").arg("-u"));
    assert_eq!(
        uid.stdout.trim(),
        "0",
        "this test creates a user (useradd) and runs kix as that user: run it as root"
    );
    let env = TestEnv::new("gcroots-user").await.expect("control plane");
    let scratch = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    let root = scratch.path().join("tree");
    write_tree(
        &root,
        &env.cluster,
        &[Pkg {
            name: "web".into(),
            depends_on: vec![],
            namespace: env.namespace.clone(),
            files: vec![("cm.yaml".into(), configmap("settings").into_bytes())],
        }],
    );
    let path = add_to_store(&root);
    let daemon = NixDaemon::start(scratch.path());
    let user = TestUser::create();
    let kix = UserKix::new(&user, &daemon, scratch.path());
    let deploy = [
        "deploy",
        env.cluster.as_str(),
        "--path",
        path.as_str(),
        "--yes",
    ];

    // The operator's roots directory (root's): refused before any change.
    let out = kix.run(
        &deploy,
        &[("KIX_GCROOTS_DIR", kix_nix::DEFAULT_GCROOTS_DIR)],
    );
    assert_eq!(out.code, Some(1), "{out}");
    assert!(
        out.stderr.contains(&format!(
            "cannot write Nix GC roots in {}",
            kix_nix::DEFAULT_GCROOTS_DIR
        )) && out.stderr.contains("nothing was changed")
            && out.stderr.contains("KIX_GCROOTS_DIR")
            && out.stderr.contains("/nix/var/nix/gcroots/per-user/"),
        "the error says what to do: {out}"
    );
    assert!(records(&env.client, &env.cluster).await.is_empty());
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    assert!(
        configmaps
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .iter()
            .all(|c| c.metadata.name.as_deref() != Some("settings")),
        "nothing was applied"
    );
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), "kube-system");
    assert!(
        leases
            .get_opt(&kix_engine::lease::lease_name(&env.cluster))
            .await
            .expect("get lease")
            .is_none(),
        "no deploy Lease was taken"
    );

    // By default: the user's per-user roots, which Nix's collector sees.
    let out = kix.run(&deploy, &[]);
    assert_eq!(out.code, Some(0), "{out}");
    let activation = format!("{}-1", env.cluster);
    let link = user
        .gcroots_dir()
        .join("kix")
        .join(&env.cluster)
        .join(&activation);
    assert_eq!(
        std::fs::read_link(&link).ok(),
        Some(PathBuf::from(&path)),
        "{} is a root of the build: {out}",
        link.display()
    );
    let roots = run(Command::new("nix-store").args(["--gc", "--print-roots"]));
    assert_eq!(roots.code, Some(0), "nix-store --gc --print-roots: {roots}");
    assert!(
        roots
            .stdout
            .lines()
            .any(|l| l == format!("{} -> {path}", link.display())),
        "nix-store --gc --print-roots lists {}: {}",
        link.display(),
        roots.stdout
    );
    assert!(!out.stderr.contains("could not add a Nix GC root"), "{out}");
    cleanup(&env).await;
}

fn configmap(name: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{a: b}}\n")
}

async fn cleanup(env: &TestEnv) {
    let selector = ListParams::default().labels(&kix_api::labels::cluster_selector(&env.cluster));
    let records: Api<kix_api::Activation> = Api::all(env.client.clone());
    let _ = records
        .delete_collection(&Default::default(), &selector)
        .await;
    let instances: Api<kix_api::PackageInstance> = Api::all(env.client.clone());
    let _ = instances
        .delete_collection(&Default::default(), &selector)
        .await;
    let _ = kix_testkit::delete_namespace(&env.client, &env.namespace).await;
}
