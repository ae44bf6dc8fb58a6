//! A member's build (read once per store path, shared by the members that
//! name it) and its own kube client.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use kix_engine::client::{Accounts, Clients, Source};
use kix_manifest::{Build, StorePath};
use kube::Client;

use crate::error::{FleetError, Result};
use crate::spec::{FleetSpec, MemberName, MemberSpec};

/// Where the members' kube clients come from when a member names no
/// kubeconfig of its own.
#[derive(Debug, Clone, Default)]
pub struct Connect {
    /// `--kubeconfig`; none: `$KUBECONFIG`, then `~/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
}

/// A member's build, read from the store.
#[derive(Debug, Clone)]
pub struct MemberBuild {
    pub path: StorePath,
    pub build: Arc<Build>,
}

/// Reads every member's build, each store path once, checked to be the
/// Kix cluster the fleet file says. Blocking (file reads).
pub fn read_builds(spec: &FleetSpec) -> Result<BTreeMap<MemberName, MemberBuild>> {
    let mut read: BTreeMap<String, MemberBuild> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for (name, member) in &spec.members {
        let build = match read.get(&member.build) {
            Some(build) => build.clone(),
            None => {
                let build = read_build(name, member)?;
                read.insert(member.build.clone(), build.clone());
                build
            }
        };
        out.insert(name.clone(), build);
    }
    Ok(out)
}

fn read_build(name: &MemberName, member: &MemberSpec) -> Result<MemberBuild> {
    let fail = |reason: String| FleetError::Build {
        member: name.clone(),
        reason,
    };
    let path = StorePath::parse(&member.build)
        .map_err(|e| fail(format!("build {:?} is not a store path: {e}", member.build)))?;
    kix_nix::ensure_valid(&path).map_err(|e| fail(format!("build {path}: {e}")))?;
    let build = kix_nix::read_build(&path).map_err(|e| fail(e.to_string()))?;
    if let Some(cluster) = &member.cluster
        && &build.cluster != cluster
    {
        return Err(fail(format!(
            "the build {path} is of Kix cluster {:?}, not {cluster:?}",
            build.cluster
        )));
    }
    Ok(MemberBuild {
        path,
        build: Arc::new(build),
    })
}

/// The kubeconfig context a member goes to: its own, else its build's
/// `settings.context`, else none (the kubeconfig's current context).
pub fn context_of(member: &MemberSpec, build: &Build) -> Option<String> {
    member
        .context
        .clone()
        .or_else(|| build.settings.context.clone())
}

/// The member's credentials: its kubeconfig (else `--kubeconfig`, else
/// `$KUBECONFIG`) and context ([`context_of`]), through the one client
/// factory ([`kix_engine::client`]). The error says which kubeconfig or
/// context did not load.
pub async fn clients(
    member: &MemberSpec,
    build: &Build,
    connect: &Connect,
) -> std::result::Result<Clients, String> {
    let source = Source {
        kubeconfig: member
            .kubeconfig
            .clone()
            .or_else(|| connect.kubeconfig.clone()),
        context: context_of(member, build),
        in_cluster: false,
    };
    Clients::connect(&source, Accounts::default())
        .await
        .map_err(|e| e.to_string())
}

/// The member's client with the caller's own rights, for reading its
/// records and status.
pub async fn client(
    member: &MemberSpec,
    build: &Build,
    connect: &Connect,
) -> std::result::Result<Client, String> {
    Ok(clients(member, build, connect).await?.own().clone())
}

/// The client `kix deploy` of `build` uses on this member: the member's
/// credentials acting as the ServiceAccount the build names, so a member
/// has the rights, and the refusals, of a local deploy of its build.
pub async fn client_for_build(
    member: &MemberSpec,
    build: &Build,
    connect: &Connect,
) -> std::result::Result<Client, String> {
    acting_for_build(&clients(member, build, connect).await?, build)
}

/// `clients` acting as the ServiceAccount `build` names.
pub fn acting_for_build(clients: &Clients, build: &Build) -> std::result::Result<Client, String> {
    clients
        .for_build(&build.settings)
        .map(|acting| acting.client)
        .map_err(|e| e.to_string())
}

/// Whether an engine error means the member's apiserver could not be
/// reached (no answer at all), as against an answer that refused.
pub fn is_unreachable(err: &kix_engine::EngineError) -> bool {
    use kix_engine::EngineError;
    let kube_error = match err {
        EngineError::Api(e) => e,
        EngineError::List { source, .. } => source,
        EngineError::Object { source, .. } => source,
        _ => return false,
    };
    !matches!(kube_error, kube::Error::Api(_))
}
