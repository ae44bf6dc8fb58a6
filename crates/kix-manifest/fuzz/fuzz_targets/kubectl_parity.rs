//! Differential fuzzing against kubectl: for any bytes, kix's objects are
//! the ones checks/kubectl-decode (kubectl apply's resource builder) reads,
//! or kix refuses the file. Panics when kix reads other values, or reads a
//! file that kubectl refuses.
//!
//! The reference decoder runs as one long-lived process
//! (`$KIX_KUBECTL_DECODE`, else built by checks/build-kubectl-decode).

#![no_main]

#[path = "../../tests/kubectl/oracle.rs"]
mod oracle;

use std::sync::{Mutex, OnceLock};

use libfuzzer_sys::fuzz_target;
use oracle::{Kubectl, Verdict, compare};

fn kubectl() -> &'static Mutex<Kubectl> {
    static KUBECTL: OnceLock<Mutex<Kubectl>> = OnceLock::new();
    KUBECTL.get_or_init(|| Mutex::new(Kubectl::start()))
}

fuzz_target!(|data: &[u8]| {
    let ours = kix_manifest::decode::file_objects(data);
    let theirs = kubectl().lock().expect("one fuzzing thread").decode(data);
    if let Verdict::Different(why) = compare(&ours, &theirs) {
        panic!("kix and kubectl differ on {:?}: {why}", String::from_utf8_lossy(data));
    }
});
