//! A control plane of a test's own (`KIX_CP_DIR=<tempdir> checks/control-plane
//! up`), for tests that cannot share the one of `checks/control-plane up`:
//! faults that would disturb every other test (restarting the apiserver,
//! stopping etcd), an apiserver without kix's CRDs, or commands whose names
//! are fixed by the documentation (the examples' `infra` and `apps`, which
//! `checks/demo` deploys to the shared control plane). Stopped when dropped;
//! its logs are kept when the test failed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub struct PrivateControlPlane {
    dir: PathBuf,
}

impl PrivateControlPlane {
    /// Starts one in a fresh temporary directory. Panics with the script's
    /// output when it does not come up (the script's own waits are bounded
    /// and name what they waited for).
    pub fn start() -> PrivateControlPlane {
        let dir = std::env::temp_dir().join(crate::unique_name("kix-cp"));
        let cp = PrivateControlPlane { dir };
        let started = Instant::now();
        let out = cp.script(&["up"]);
        assert!(
            out.status.success(),
            "private control plane in {} did not start:\n{}",
            cp.dir.display(),
            text(&out)
        );
        eprintln!(
            "private control plane up in {:.1}s ({})",
            started.elapsed().as_secs_f64(),
            cp.dir.display()
        );
        cp
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    /// `checks/control-plane <args>` for this control plane.
    pub fn script(&self, args: &[&str]) -> Output {
        Command::new(crate::repo_root().join("checks/control-plane"))
            .args(args)
            .env("KIX_CP_DIR", &self.dir)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|err| panic!("running checks/control-plane {args:?}: {err}"))
    }

    /// `checks/control-plane <verb> <component>`, asserting it worked;
    /// returns how long it took.
    pub fn component(&self, verb: &str, component: &str) -> Duration {
        let started = Instant::now();
        let out = self.script(&[verb, component]);
        assert!(
            out.status.success(),
            "control-plane {verb} {component}:\n{}",
            text(&out)
        );
        started.elapsed()
    }
}

impl Drop for PrivateControlPlane {
    fn drop(&mut self) {
        let _ = self.script(&["down"]);
        if std::thread::panicking() {
            eprintln!(
                "private control plane stopped; its logs are kept in {}/logs",
                self.dir.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
