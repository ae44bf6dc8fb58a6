//! Resolving kinds to API resources: discovery for what the apiserver serves,
//! and the build's own CRDs for kinds that do not exist yet (a custom resource
//! whose CRD the same deploy creates).

use std::collections::HashMap;

use kix_manifest::{Build, ObjectKey};
use kube::Client;
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Scope};

use crate::error::{EngineError, Result};

/// Where a kind's resource info came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// The apiserver serves it now.
    Yes,
    /// A CRD in the build defines it; it is served once that CRD is applied.
    AfterCrd,
}

#[derive(Debug, Clone)]
pub struct Resource {
    pub api: ApiResource,
    pub namespaced: bool,
    pub served: Served,
}

/// A cache of kind → resource, filled by one discovery request per
/// group/version.
pub struct Resources {
    client: Client,
    by_gvk: HashMap<(String, String, String), Resource>,
    /// group/version pairs already asked about (served or not).
    asked: HashMap<(String, String), Vec<(ApiResource, ApiCapabilities)>>,
    build_crds: HashMap<(String, String, String), Resource>,
}

impl Resources {
    pub fn new(client: Client) -> Resources {
        Resources {
            client,
            by_gvk: HashMap::new(),
            asked: HashMap::new(),
            build_crds: HashMap::new(),
        }
    }

    /// Learns the kinds the build's CRDs define, for objects of those kinds.
    pub fn learn_build_crds(&mut self, build: &Build) {
        for object in build.objects() {
            if object.key.group_kind() != kix_manifest::group_kind::CUSTOM_RESOURCE_DEFINITION {
                continue;
            }
            let manifest = object.manifest();
            let spec = &manifest["spec"];
            let group = spec["group"].as_str().unwrap_or_default();
            let kind = spec["names"]["kind"].as_str().unwrap_or_default();
            let plural = spec["names"]["plural"].as_str().unwrap_or_default();
            let namespaced = spec["scope"].as_str() != Some("Cluster");
            for version in spec["versions"].as_array().into_iter().flatten() {
                let Some(version) = version["name"].as_str() else {
                    continue;
                };
                let gvk = GroupVersionKind::gvk(group, version, kind);
                let api = ApiResource::from_gvk_with_plural(&gvk, plural);
                self.build_crds.insert(
                    (group.to_string(), version.to_string(), kind.to_string()),
                    Resource {
                        api,
                        namespaced,
                        served: Served::AfterCrd,
                    },
                );
            }
        }
    }

    /// The resource for `apiVersion`/`kind`, or None when neither the
    /// apiserver nor the build's CRDs know it.
    pub async fn get(&mut self, api_version: &str, kind: &str) -> Result<Option<Resource>> {
        let (group, version) = split_api_version(api_version);
        let key = (group.to_string(), version.to_string(), kind.to_string());
        if let Some(found) = self.by_gvk.get(&key) {
            return Ok(Some(found.clone()));
        }
        let gv = (group.to_string(), version.to_string());
        if !self.asked.contains_key(&gv) {
            let resources = self.discover(group, version).await?;
            self.asked.insert(gv.clone(), resources);
        }
        let served = self.asked.get(&gv).and_then(|list| {
            list.iter()
                .find(|(api, _)| api.kind == kind)
                .map(|(api, caps)| Resource {
                    api: api.clone(),
                    namespaced: caps.scope == Scope::Namespaced,
                    served: Served::Yes,
                })
        });
        let found = served.or_else(|| self.build_crds.get(&key).cloned());
        if let Some(found) = &found {
            self.by_gvk.insert(key, found.clone());
        }
        Ok(found)
    }

    /// Forgets what discovery said, after CRDs were applied.
    pub fn refresh(&mut self) {
        self.by_gvk.clear();
        self.asked.clear();
    }

    async fn discover(
        &self,
        group: &str,
        version: &str,
    ) -> Result<Vec<(ApiResource, ApiCapabilities)>> {
        let gv = kube::core::GroupVersion::gv(group, version);
        match kube::discovery::oneshot::pinned_group(&self.client, &gv).await {
            Ok(group) => Ok(group.recommended_resources()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(vec![]),
            Err(err) => Err(EngineError::Api(err)),
        }
    }
}

pub fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", api_version),
    }
}

/// The key an object has once its kind's scope is known: cluster-scoped
/// objects have no namespace.
pub fn scoped_key(key: &ObjectKey, namespaced: bool) -> ObjectKey {
    let mut key = key.clone();
    if !namespaced {
        key.namespace = None;
    }
    key
}
