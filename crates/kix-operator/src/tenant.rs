//! Whom the operator acts as for a record: the ServiceAccount the record
//! names (`spec.serviceAccount`, which kix's admission policy lets only the
//! record's declared writers set), else `--default-service-account`; with
//! `--require-service-account`, a record that names none is refused. Every
//! request made for the record (plan reads, dry runs, applies, waits,
//! prunes, the finalizer's deletions) goes through the client made here.

use std::collections::BTreeMap;
use std::sync::Mutex;

use kix_api::{Activation, ServiceAccountRef};
use kube::{Client, Config};

/// The operator's base credentials and its lock-down settings.
pub struct Tenants {
    /// The operator's own configuration, impersonation added per account.
    base: Config,
    /// The operator's own client: what a record naming no account acts as
    /// when no default is set (single-tenant installs).
    own: Client,
    default: Option<ServiceAccountRef>,
    require: bool,
    /// One client per account: each keeps its connections.
    clients: Mutex<BTreeMap<ServiceAccountRef, Client>>,
}

/// Who acts for a record, and the client that acts as them.
pub struct Acting {
    pub account: Option<ServiceAccountRef>,
    pub client: Client,
}

impl Tenants {
    pub fn new(
        base: Config,
        own: Client,
        default: Option<ServiceAccountRef>,
        require: bool,
    ) -> Tenants {
        Tenants {
            base,
            own,
            default,
            require,
            clients: Mutex::default(),
        }
    }

    /// The account a record acts as, or why it may not act at all
    /// ([`kix_engine::gates::acting_account`]).
    pub fn account_of(&self, record: &Activation) -> Result<Option<ServiceAccountRef>, String> {
        kix_engine::gates::acting_account(
            record.spec.service_account.as_ref(),
            self.default.as_ref(),
            self.require,
        )
        .map_err(|refusal| refusal.to_string())
    }

    /// The client for a record ([`Tenants::account_of`]).
    pub fn for_record(&self, record: &Activation) -> Result<Acting, String> {
        let account = self.account_of(record)?;
        let client = match &account {
            None => self.own.clone(),
            Some(account) => self.client_as(account)?,
        };
        Ok(Acting { account, client })
    }

    fn client_as(&self, account: &ServiceAccountRef) -> Result<Client, String> {
        let mut clients = self
            .clients
            .lock()
            .map_err(|_| "the tenants' clients are poisoned".to_string())?;
        if let Some(client) = clients.get(account) {
            return Ok(client.clone());
        }
        let client = kix_engine::tenant::client_acting_as(self.base.clone(), Some(account))
            .map_err(|err| format!("creating a client acting as {account}: {err}"))?;
        clients.insert(account.clone(), client.clone());
        Ok(client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(text: &str) -> ServiceAccountRef {
        ServiceAccountRef::parse(text).expect("an account")
    }

    fn record(account: Option<&str>) -> Activation {
        let path = "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-x";
        let mut record =
            kix_testkit::records::activation("team-a", 1, path, kix_api::Phase::Pending);
        record.spec.service_account = account.map(self::account);
        record
    }

    fn tenants(default: Option<&str>, require: bool) -> Tenants {
        let config = Config::new("https://127.0.0.1:1".parse().expect("a URL"));
        let own = Client::try_from(config.clone()).expect("a client");
        Tenants::new(config, own, default.map(account), require)
    }

    /// The rule is `gates::acting_account` (its verdicts are tested there);
    /// this is the operator's use of it: its own settings, one client per
    /// account.
    #[tokio::test]
    async fn a_record_is_served_by_the_client_of_its_account() {
        let defaulted = tenants(Some("kix-system/tenant"), false);
        let acting = defaulted.for_record(&record(None)).expect("the default");
        assert_eq!(acting.account, Some(account("kix-system/tenant")));
        let acting = defaulted
            .for_record(&record(Some("a/kix")))
            .expect("its own");
        assert_eq!(acting.account, Some(account("a/kix")));
        assert_eq!(defaulted.clients.lock().expect("clients").len(), 2);
        let locked = tenants(Some("kix-system/tenant"), true);
        let refused = locked.for_record(&record(None)).err().expect("refused");
        assert!(refused.contains("--require-service-account"), "{refused}");
    }
}
