//! What deleting a Namespace or a CustomResourceDefinition takes with it:
//! every object in the namespace, every custom resource of the CRD. The plan
//! shows the count beside the deletion (which keeps its
//! `--accept-migrations` gate).
//!
//! Counted with one `limit=1` LIST per kind (the apiserver's
//! `remainingItemCount` gives the rest), only for the plans that delete a
//! Namespace or a CRD.

use kix_manifest::group_kind;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::{ApiResource, Discovery, Scope, verbs};

use crate::error::Result;
use crate::plan_object::{Action, PlannedObject};

/// Sets `takes_with_it` on each Namespace and CRD deletion of `prune`.
pub async fn count(client: &Client, prune: &mut [PlannedObject]) -> Result<()> {
    let mut namespaced: Option<Vec<ApiResource>> = None;
    for o in prune.iter_mut().filter(|o| o.action == Action::Delete) {
        o.takes_with_it = match o.key.group_kind() {
            group_kind::NAMESPACE => {
                if namespaced.is_none() {
                    namespaced = Some(namespaced_kinds(client).await?);
                }
                let kinds = namespaced.as_deref().unwrap_or_default();
                let mut total = 0;
                for kind in kinds {
                    let api = Api::namespaced_with(client.clone(), &o.key.name, kind);
                    total += how_many(&api).await;
                }
                Some(total)
            }
            group_kind::CUSTOM_RESOURCE_DEFINITION => custom_resources(client, &o.key.name).await,
            _ => continue,
        };
    }
    Ok(())
}

/// Full discovery. An API group removed while it walks the groups (a CRD
/// deleted meanwhile) fails the whole walk with a 404: walked again.
pub(crate) async fn discover_all(client: &Client) -> kube::Result<Discovery> {
    let mut attempt = 1;
    loop {
        match Discovery::new(client.clone()).run().await {
            Err(kube::Error::Api(status)) if status.code == 404 && attempt < 3 => attempt += 1,
            other => return other,
        }
    }
}

/// The namespaced kinds that can be listed, but Events (they go with the
/// namespace, and nobody misses them).
async fn namespaced_kinds(client: &Client) -> Result<Vec<ApiResource>> {
    let discovery = discover_all(client).await?;
    Ok(discovery
        .groups()
        .flat_map(|group| group.recommended_resources())
        .filter(|(resource, caps)| {
            caps.scope == Scope::Namespaced
                && caps.supports_operation(verbs::LIST)
                && resource.kind != "Event"
        })
        .map(|(resource, _)| resource)
        .collect())
}

/// The custom resources of CRD `name`, in all namespaces.
async fn custom_resources(client: &Client, name: &str) -> Option<u32> {
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    let crd = crds.get_opt(name).await.ok()??;
    let version = crd
        .spec
        .versions
        .iter()
        .find(|v| v.served)
        .map(|v| v.name.clone())?;
    let resource = ApiResource {
        group: crd.spec.group.clone(),
        version: version.clone(),
        api_version: format!("{}/{version}", crd.spec.group),
        kind: crd.spec.names.kind.clone(),
        plural: crd.spec.names.plural.clone(),
    };
    Some(how_many(&Api::<DynamicObject>::all_with(client.clone(), &resource)).await)
}

/// Objects behind `api`: the first page of one, plus what the apiserver
/// says remains. A kind that cannot be listed counts none.
pub(crate) async fn how_many(api: &Api<DynamicObject>) -> u32 {
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(list) => {
            let rest = list.metadata.remaining_item_count.unwrap_or(0).max(0);
            u32::try_from(list.items.len() as i64 + rest).unwrap_or(u32::MAX)
        }
        Err(_) => 0,
    }
}
