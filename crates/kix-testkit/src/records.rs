//! Activation records as unit tests need them, without a cluster.

use kix_api::{Activation, Phase};

/// The record `<cluster>-<sequence>` of a deploy of `path` (by the
/// operator), in `phase`.
pub fn activation(cluster: &str, sequence: u64, path: &str, phase: Phase) -> Activation {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kix.run/v1alpha1",
        "kind": "Activation",
        "metadata": {
            "name": format!("{cluster}-{sequence}"),
            "labels": {"kix.run/cluster": cluster},
        },
        "spec": {
            "cluster": cluster,
            "source": {"path": path},
            "receipt": {"user": "u", "host": "h", "kixVersion": "0",
                        "time": "2026-01-01T00:00:00Z", "planDigest": "d",
                        "counts": {}, "accepted": {}},
            "engine": "operator",
        },
        "status": {"phase": phase},
    }))
    .expect("an Activation")
}
