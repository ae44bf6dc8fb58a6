//! Acting as a tenant: every request made for a Kix cluster that names a
//! ServiceAccount (`settings.serviceAccount`, an Activation's
//! `spec.serviceAccount`) impersonates that account, so the apiserver, not
//! kix, bounds what the deploy may read and write. The CLI and the operator
//! both make their client for a build or a record here; everything
//! downstream takes that client.

use kix_api::ServiceAccountRef;
use kube::{Client, Config};

pub use crate::plan_value::declared_account;

/// `config` acting as `account` (impersonation headers on every request;
/// the apiserver adds the account's groups), or unchanged for `None`.
pub fn acting_as(mut config: Config, account: Option<&ServiceAccountRef>) -> Config {
    if let Some(account) = account {
        config.auth_info.impersonate = Some(account.username());
        config.auth_info.impersonate_groups = None;
    }
    config
}

/// A client of `config` acting as `account`.
pub fn client_acting_as(
    config: Config,
    account: Option<&ServiceAccountRef>,
) -> Result<Client, kube::Error> {
    Client::try_from(acting_as(config, account))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acting_as_an_account_impersonates_its_username_without_groups() {
        let config = Config::new("https://127.0.0.1:1".parse().expect("a URL"));
        let account = ServiceAccountRef {
            namespace: "team-a".into(),
            name: "kix".into(),
        };
        let acting = acting_as(config.clone(), Some(&account));
        assert_eq!(
            acting.auth_info.impersonate.as_deref(),
            Some("system:serviceaccount:team-a:kix")
        );
        assert_eq!(acting.auth_info.impersonate_groups, None);
        assert_eq!(acting_as(config, None).auth_info.impersonate, None);
    }
}
