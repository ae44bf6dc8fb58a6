//! Whom the operator acts as for a record: the ServiceAccount the record
//! names (`spec.serviceAccount`, which kix's admission policy lets only the
//! record's declared writers set), else `--default-service-account`; with
//! `--require-service-account`, a record that names none is refused. Every
//! request made for the record (plan reads, dry runs, applies, waits,
//! prunes, the finalizer's deletions) goes through the client made here:
//! the operator's adapter of the one client factory
//! ([`kix_engine::client`]), which the CLI and the fleet use too.

use std::sync::Arc;

use kix_api::Activation;
pub use kix_engine::client::Acting;
use kix_engine::client::{ClientError, Clients};

/// The operator's credentials and its lock-down settings.
pub struct Tenants {
    clients: Arc<Clients>,
}

impl Tenants {
    pub fn new(clients: Arc<Clients>) -> Tenants {
        Tenants { clients }
    }

    /// Who acts for a record and their client, or why it may not act at
    /// all ([`kix_engine::gates::acting_account`]).
    pub fn for_record(&self, record: &Activation) -> Result<Acting, String> {
        self.clients
            .acting_for(record.spec.service_account.as_ref())
            .map_err(|err| match err {
                ClientError::Refused(refusal) => refusal.to_string(),
                other => other.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kix_api::ServiceAccountRef;
    use kix_engine::client::Accounts;

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
        let config = kube::Config::new("https://127.0.0.1:1".parse().expect("a URL"));
        let accounts = Accounts {
            default: default.map(account),
            require,
        };
        Tenants::new(Arc::new(
            Clients::from_config(config, accounts).expect("clients"),
        ))
    }

    /// The rule is `gates::acting_account` (its verdicts are tested there)
    /// and the factory's (tested there); this is the operator's use of it:
    /// a record's own account, else its settings'.
    #[tokio::test]
    async fn a_record_is_served_by_the_client_of_its_account() {
        let defaulted = tenants(Some("kix-system/tenant"), false);
        let acting = defaulted.for_record(&record(None)).expect("the default");
        assert_eq!(acting.account, Some(account("kix-system/tenant")));
        let acting = defaulted
            .for_record(&record(Some("a/kix")))
            .expect("its own");
        assert_eq!(acting.account, Some(account("a/kix")));
        let locked = tenants(Some("kix-system/tenant"), true);
        let refused = locked.for_record(&record(None)).err().expect("refused");
        assert!(refused.contains("--require-service-account"), "{refused}");
    }
}
