//! The record an operator-mode deploy writes (`kix deploy --operator`,
//! `kix rollback --operator`, `kix declare`, a fleet's operator members):
//! the build's store path and the receipt, `engine: operator`, for the
//! in-cluster operator to apply. One home, so every writer makes the same
//! checks.

use kix_api::{Activation, ActivationSpec, Engine};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};

use crate::error::{EngineError, Result};
use crate::plan::Plan;

pub use crate::records::RecordMeta;

/// Creates the record `plan.activation` names. An Activation CRD older than
/// this kix drops the receipt fields it does not know (a saved plan, the
/// accepted deletions), and the operator would act without them: a
/// dry-run create shows what the server keeps, and a record that would
/// lose a field is not written.
pub async fn create(
    client: &Client,
    plan: &Plan,
    mut spec: ActivationSpec,
    meta: RecordMeta,
) -> Result<Activation> {
    spec.engine = Engine::Operator;
    let sequence = Activation::sequence_in(&plan.activation, &plan.cluster).unwrap_or(1);
    let mut record = Activation::new_record(sequence, spec);
    meta.apply_to(&mut record);
    let name = record.name_any();
    let failed = |e: kube::Error| EngineError::Records(format!("creating Activation {name}: {e}"));
    let api: Api<Activation> = Api::all(client.clone());
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let kept = match api.create(&dry_run, &record).await {
        Ok(kept) => kept,
        Err(kube::Error::Api(status)) if status.code == 409 => {
            return Err(crate::records::name_taken(client, &name, record.cluster_name()).await);
        }
        Err(err) => return Err(failed(err)),
    };
    let as_value = |spec: &ActivationSpec| serde_json::to_value(spec).unwrap_or_default();
    let lost = lost_fields(&as_value(&record.spec), &as_value(&kept.spec), "spec");
    if !lost.is_empty() {
        return Err(EngineError::Records(format!(
            "the Activation CRD in the cluster is older than this kix: it drops {} from the record, so the operator would not see them; nothing was changed. Upgrade the CRDs with `kix crds | kubectl apply -f -` and the operator to kix {}",
            lost.join(", "),
            env!("CARGO_PKG_VERSION")
        )));
    }
    api.create(&PostParams::default(), &record)
        .await
        .map_err(failed)
}

/// The fields of `sent` that `kept` (what the server stored) lacks, by path.
fn lost_fields(sent: &serde_json::Value, kept: &serde_json::Value, path: &str) -> Vec<String> {
    use serde_json::Value;
    match (sent, kept) {
        (Value::Object(sent), Value::Object(kept)) => sent
            .iter()
            .flat_map(|(key, value)| {
                let at = format!("{path}.{key}");
                match kept.get(key) {
                    None => vec![at],
                    Some(kept) => lost_fields(value, kept, &at),
                }
            })
            .collect(),
        (Value::Array(sent), Value::Array(kept)) => sent
            .iter()
            .zip(kept)
            .enumerate()
            .flat_map(|(i, (sent, kept))| lost_fields(sent, kept, &format!("{path}[{i}]")))
            .collect(),
        _ => vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What an older CRD's structural schema prunes is named by its path;
    /// what the server adds (defaults) is not a loss.
    #[test]
    fn fields_the_server_dropped_are_named_by_path() {
        let sent = json!({
            "cluster": "c",
            "receipt": {"savedPlan": true, "acceptedDeletions": 3, "accepted": {"crdVersions": ["x"]}},
            "list": [{"a": 1, "b": 2}],
        });
        let kept = json!({
            "cluster": "c",
            "engine": "operator",
            "receipt": {"accepted": {}},
            "list": [{"a": 1}],
        });
        assert_eq!(
            lost_fields(&sent, &kept, "spec"),
            vec![
                "spec.receipt.savedPlan",
                "spec.receipt.acceptedDeletions",
                "spec.receipt.accepted.crdVersions",
                "spec.list[0].b",
            ]
        );
        assert!(lost_fields(&sent, &sent, "spec").is_empty());
    }
}
