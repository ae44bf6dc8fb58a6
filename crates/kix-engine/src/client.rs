//! The one client factory: every `kube::Client` kix uses is made here, and
//! nowhere else is a kubeconfig read (`tests/architecture.rs` checks it).
//!
//! [`Clients::connect`] loads the credentials once (a kubeconfig file or
//! `$KUBECONFIG`/`~/.kube/config`, a context, for the operator the
//! in-cluster configuration) with the lock-down settings ([`Accounts`]);
//! then [`Clients::for_build`] and [`Clients::acting_for`] give the client
//! every request made for a build or a record uses: acting as the
//! ServiceAccount it names (impersonation: the apiserver, not kix, bounds
//! what the deploy may read and write), refused when one is required and
//! none is named ([`crate::gates::acting_account`]). A local deploy, a fleet
//! member, an operator record, its finalizer, a rollback, a gc: all go
//! through it, so one build acts the same whichever front end runs it.
//! [`Clients::own`] is the caller's own rights, for what is not done for a
//! build (reading records, status, history).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use kix_api::ServiceAccountRef;
use kube::config::{InferConfigError, KubeConfigOptions, KubeconfigError};
use kube::{Client, Config};

use crate::gates::BuildRefusal;
pub use crate::plan_value::declared_account;

/// Where the credentials come from.
#[derive(Debug, Clone, Default)]
pub struct Source {
    /// A kubeconfig file; none: `$KUBECONFIG`, then `~/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context; none: the kubeconfig's current context.
    pub context: Option<String>,
    /// With no file and no context: the kubeconfig if there is one, else
    /// the in-cluster configuration (a Pod's ServiceAccount): the operator.
    pub in_cluster: bool,
}

/// The lock-down settings: whom a record that names no ServiceAccount acts
/// as, and whether it must name one (the operator's
/// `--default-service-account`, `--require-service-account`).
#[derive(Debug, Clone, Default)]
pub struct Accounts {
    pub default: Option<ServiceAccountRef>,
    pub require: bool,
}

/// Why no client could be made. Each names the file, context or account.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("reading kubeconfig {}: {error}", path.display())]
    ReadFile {
        path: PathBuf,
        error: KubeconfigError,
    },
    #[error("reading kubeconfig: {0}")]
    Read(KubeconfigError),
    #[error("loading kubeconfig context {context:?}: {error}")]
    Context {
        context: String,
        error: KubeconfigError,
    },
    #[error("loading kubeconfig: {0}")]
    Load(KubeconfigError),
    #[error("loading the kubeconfig or the in-cluster configuration: {0}")]
    Infer(InferConfigError),
    #[error("creating the Kubernetes client: {0}")]
    Create(kube::Error),
    #[error("creating a client acting as {account}: {error}")]
    CreateActing {
        account: ServiceAccountRef,
        error: kube::Error,
    },
    /// No account named and one is required ([`Accounts::require`]).
    #[error(transparent)]
    Refused(BuildRefusal),
}

/// The kubeconfig file `kubeconfig` names, else `$KUBECONFIG`'s, else
/// `~/.kube/config`, read (for what a front end shows of it).
pub fn read_kubeconfig(kubeconfig: Option<&Path>) -> Result<kube::config::Kubeconfig, ClientError> {
    match kubeconfig {
        Some(path) => {
            kube::config::Kubeconfig::read_from(path).map_err(|error| ClientError::ReadFile {
                path: path.to_path_buf(),
                error,
            })
        }
        None => kube::config::Kubeconfig::read().map_err(ClientError::Read),
    }
}

/// The configuration `source` names, as no one in particular (no
/// impersonation yet).
pub async fn load_config(source: &Source) -> Result<Config, ClientError> {
    let options = KubeConfigOptions {
        context: source.context.clone(),
        ..Default::default()
    };
    let loaded = match &source.kubeconfig {
        Some(path) => {
            let kubeconfig = read_kubeconfig(Some(path))?;
            Config::from_custom_kubeconfig(kubeconfig, &options).await
        }
        None if source.in_cluster && source.context.is_none() => {
            return Config::infer().await.map_err(ClientError::Infer);
        }
        None => Config::from_kubeconfig(&options).await,
    };
    loaded.map_err(|error| match &options.context {
        Some(context) => ClientError::Context {
            context: context.clone(),
            error,
        },
        None => ClientError::Load(error),
    })
}

/// `config` acting as `account` (impersonation headers on every request;
/// the apiserver adds the account's groups), or unchanged for `None`.
pub fn acting_as(mut config: Config, account: Option<&ServiceAccountRef>) -> Config {
    if let Some(account) = account {
        config.auth_info.impersonate = Some(account.username());
        config.auth_info.impersonate_groups = None;
    }
    config
}

/// Who acts for a build or a record, and the client that acts as them.
#[derive(Clone)]
pub struct Acting {
    pub account: Option<ServiceAccountRef>,
    pub client: Client,
}

/// One set of credentials and its lock-down settings; a client per account
/// acting (each keeps its connections).
pub struct Clients {
    base: Config,
    accounts: Accounts,
    own: Client,
    acting: Mutex<BTreeMap<ServiceAccountRef, Client>>,
}

impl Clients {
    /// The credentials `source` names, with `accounts`' lock-down.
    pub async fn connect(source: &Source, accounts: Accounts) -> Result<Clients, ClientError> {
        Clients::from_config(load_config(source).await?, accounts)
    }

    /// `base` (as [`load_config`] loaded it, headers added) with
    /// `accounts`' lock-down.
    pub fn from_config(base: Config, accounts: Accounts) -> Result<Clients, ClientError> {
        let own = Client::try_from(base.clone()).map_err(ClientError::Create)?;
        Ok(Clients {
            base,
            accounts,
            own,
            acting: Mutex::default(),
        })
    }

    /// The configuration every client here starts from.
    pub fn config(&self) -> &Config {
        &self.base
    }

    /// The caller's own rights: for what is not done for a build or a
    /// record (listing records, status, history, the operator's own work).
    pub fn own(&self) -> &Client {
        &self.own
    }

    /// The client for what a build or record naming `named` does: `named`,
    /// else the default account, else the caller's own rights; refused
    /// when an account is required and none is named.
    pub fn acting_for(&self, named: Option<&ServiceAccountRef>) -> Result<Acting, ClientError> {
        let account = crate::gates::acting_account(
            named,
            self.accounts.default.as_ref(),
            self.accounts.require,
        )
        .map_err(ClientError::Refused)?;
        let client = match &account {
            None => self.own.clone(),
            Some(account) => self.client_as(account)?,
        };
        Ok(Acting { account, client })
    }

    /// [`Clients::acting_for`] the ServiceAccount a build's settings name.
    pub fn for_build(&self, settings: &kix_manifest::Settings) -> Result<Acting, ClientError> {
        self.acting_for(declared_account(settings).as_ref())
    }

    fn client_as(&self, account: &ServiceAccountRef) -> Result<Client, ClientError> {
        // A poisoned cache only lost its clients: make another.
        let mut acting = self
            .acting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(client) = acting.get(account) {
            return Ok(client.clone());
        }
        let client =
            Client::try_from(acting_as(self.base.clone(), Some(account))).map_err(|error| {
                ClientError::CreateActing {
                    account: account.clone(),
                    error,
                }
            })?;
        acting.insert(account.clone(), client.clone());
        Ok(client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(text: &str) -> ServiceAccountRef {
        ServiceAccountRef::parse(text).expect("an account")
    }

    fn clients(default: Option<&str>, require: bool) -> Clients {
        let config = Config::new("https://127.0.0.1:1".parse().expect("a URL"));
        let accounts = Accounts {
            default: default.map(account),
            require,
        };
        Clients::from_config(config, accounts).expect("clients")
    }

    #[test]
    fn acting_as_an_account_impersonates_its_username_without_groups() {
        let config = Config::new("https://127.0.0.1:1".parse().expect("a URL"));
        let acting = acting_as(config.clone(), Some(&account("team-a/kix")));
        assert_eq!(
            acting.auth_info.impersonate.as_deref(),
            Some("system:serviceaccount:team-a:kix")
        );
        assert_eq!(acting.auth_info.impersonate_groups, None);
        assert_eq!(acting_as(config, None).auth_info.impersonate, None);
    }

    /// The rule is `gates::acting_account` (its verdicts are tested there);
    /// this is the factory's use of it: one client per account.
    #[tokio::test]
    async fn each_account_has_its_client_and_a_required_one_is_enforced() {
        let open = clients(None, false);
        assert_eq!(open.acting_for(None).expect("own").account, None);
        let defaulted = clients(Some("kix-system/tenant"), false);
        let acting = defaulted.acting_for(None).expect("the default");
        assert_eq!(acting.account, Some(account("kix-system/tenant")));
        let acting = defaulted
            .acting_for(Some(&account("a/kix")))
            .expect("its own");
        assert_eq!(acting.account, Some(account("a/kix")));
        defaulted
            .acting_for(Some(&account("a/kix")))
            .expect("again");
        assert_eq!(defaulted.acting.lock().expect("cache").len(), 2);
        let locked = clients(Some("kix-system/tenant"), true);
        let refused = locked.acting_for(None).err().expect("refused");
        assert!(
            refused.to_string().contains("--require-service-account"),
            "{refused}"
        );
    }
}
