//! Who may write kix's records: a ValidatingAdmissionPolicy generated from
//! the platform's declaration of its tenants.
//!
//! The operator acts for a record with the rights of the ServiceAccount the
//! record names, so the record itself must be guarded: only the subjects the
//! platform declares for a Kix cluster may create, change or delete that Kix
//! cluster's records, a record must name the ServiceAccount declared for its
//! Kix cluster, a record is created under its own Kix cluster's name
//! (`<cluster>-<n>`, `<cluster>.<package>`: no one takes another Kix
//! cluster's next record name), and no one may move a record to another Kix
//! cluster. The
//! apiserver enforces this (admission), so a direct API write cannot bypass
//! it the way it could bypass a check inside the operator.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::labels::{GROUP, LABEL_CLUSTER};

/// Name of the generated ValidatingAdmissionPolicy and of its binding.
pub const POLICY_NAME: &str = "kix-tenants.kix.run";

/// A ServiceAccount by namespace and name.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub struct ServiceAccountRef {
    pub namespace: String,
    pub name: String,
}

impl ServiceAccountRef {
    /// The username the apiserver gives this account's requests
    /// (`system:serviceaccount:<namespace>:<name>`), which is what a client
    /// impersonates to act as it.
    pub fn username(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }

    /// Parses `NAMESPACE/NAME`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim().split_once('/') {
            Some((namespace, name))
                if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
            {
                Ok(Self {
                    namespace: namespace.into(),
                    name: name.into(),
                })
            }
            _ => Err(format!(
                "`{text}` is not a ServiceAccount: write NAMESPACE/NAME"
            )),
        }
    }
}

/// `NAMESPACE/NAME`.
impl fmt::Display for ServiceAccountRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Users and groups, as the apiserver names them in `request.userInfo`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Subjects {
    #[serde(default)]
    pub users: Vec<String>,
    #[serde(default)]
    pub groups: Vec<String>,
}

/// One Kix cluster's tenant: who may write its records and whom it acts as.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Tenant {
    #[serde(flatten)]
    pub writers: Subjects,
    /// The ServiceAccount every record of this Kix cluster must name.
    pub service_account: ServiceAccountRef,
}

impl Tenant {
    /// The declared writers and the tenant's own ServiceAccount.
    pub fn writers_with_account(&self) -> Subjects {
        let mut writers = self.writers.clone();
        let account = self.service_account.username();
        if !writers.users.contains(&account) {
            writers.users.push(account);
        }
        writers
    }
}

/// The platform's declaration: the subjects that may write every record (the
/// operator, administrators) and each Kix cluster's tenant.
///
/// Read from JSON (`kix crds --tenants FILE`, or the Nix library's
/// `mkTenants`):
///
/// ```json
/// {"platform": {"users": ["system:serviceaccount:kix-system:kix-operator"]},
///  "clusters": {"team-a": {"groups": ["team-a"],
///                          "serviceAccount": {"namespace": "team-a", "name": "kix"}}}}
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tenants {
    #[serde(default)]
    pub platform: Subjects,
    #[serde(default)]
    pub clusters: BTreeMap<String, Tenant>,
}

/// A CEL string literal (single-quoted, escaped).
fn cel_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

fn cel_list(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|s| cel_string(s)).collect();
    format!("[{}]", items.join(", "))
}

/// CEL: the requesting user is one of `subjects`.
fn cel_is_one_of(subjects: &Subjects) -> String {
    format!(
        "(request.userInfo.username in {} || \
         (has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in {})))",
        cel_list(&subjects.users),
        cel_list(&subjects.groups)
    )
}

/// The record's Kix cluster (a non-empty label first, as
/// `Activation::cluster_name` reads it) and the
/// ServiceAccount it names (`namespace/name`, or empty), for `object` or
/// `oldObject`.
fn cel_cluster_of(object: &str) -> String {
    format!(
        "(has({object}.metadata.labels) && {label} in {object}.metadata.labels && \
         {object}.metadata.labels[{label}] != '' ? {object}.metadata.labels[{label}] : \
         (has({object}.spec) && has({object}.spec.cluster) ? {object}.spec.cluster : ''))",
        label = cel_string(LABEL_CLUSTER)
    )
}

fn cel_service_account_of(object: &str) -> String {
    format!(
        "(has({object}.spec) && has({object}.spec.serviceAccount) ? \
         {object}.spec.serviceAccount.namespace + '/' + {object}.spec.serviceAccount.name : '')"
    )
}

/// CEL: a created record's name is the one kix gives it in its Kix cluster,
/// exactly: an Activation `<cluster>-<n>` (`n` decimal, no sign or leading
/// zero, as `Activation::sequence_in` reads it), a PackageInstance
/// `<cluster>.<spec.package>`. Only that form: `team-b-3` is never a name
/// of Kix cluster `team` (`b-3` is not a number), so no Kix cluster can take
/// another's next record name.
fn cel_name_is_its_clusters() -> String {
    let activation = "(object.metadata.name.startsWith(variables.cluster + '-') && \
         object.metadata.name.substring(size(variables.cluster) + 1).matches('^(0|[1-9][0-9]*)$'))";
    let instance = "(has(object.spec) && has(object.spec.package) && \
         object.metadata.name == variables.cluster + '.' + object.spec.package)";
    format!(
        "request.operation != 'CREATE' || variables.cluster == '' || \
         (request.resource.resource == 'activations' ? {activation} : {instance})"
    )
}

/// `cluster == 'a' && <writers of a> || cluster == 'b' && ...`, `false` when
/// no tenant is declared. A Kix cluster's own ServiceAccount is one of its
/// writers: the CLI creates the record acting as it, and the operator's
/// deploy writes the record's status acting as it.
fn cel_tenant_writes(tenants: &Tenants) -> String {
    let arms: Vec<String> = tenants
        .clusters
        .iter()
        .map(|(cluster, tenant)| {
            format!(
                "(variables.cluster == {} && {})",
                cel_string(cluster),
                cel_is_one_of(&tenant.writers_with_account())
            )
        })
        .collect();
    if arms.is_empty() {
        "false".into()
    } else {
        arms.join(" || ")
    }
}

fn cel_declared_account(tenants: &Tenants) -> String {
    let arms: Vec<String> = tenants
        .clusters
        .iter()
        .map(|(cluster, tenant)| {
            format!(
                "(variables.cluster == {} && variables.serviceAccount == {})",
                cel_string(cluster),
                cel_string(&tenant.service_account.to_string())
            )
        })
        .collect();
    if arms.is_empty() {
        "false".into()
    } else {
        arms.join(" || ")
    }
}

/// The ValidatingAdmissionPolicy and its binding for `tenants`.
pub fn admission_policy(tenants: &Tenants) -> [Value; 2] {
    let record = "(request.operation == 'DELETE' ? oldObject : object)";
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": {"app.kubernetes.io/managed-by": "kix"}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [GROUP],
                "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE", "DELETE"],
                "resources": ["activations", "activations/status", "packageinstances", "packageinstances/status"],
            }]},
            "variables": [
                {"name": "cluster", "expression": cel_cluster_of(record)},
                {"name": "serviceAccount", "expression": cel_service_account_of(record)},
                {"name": "platform", "expression": cel_is_one_of(&tenants.platform)},
                {"name": "tenantWrites", "expression": cel_tenant_writes(tenants)},
                {"name": "declaredAccount", "expression": cel_declared_account(tenants)},
            ],
            "validations": [
                {
                    "expression": "variables.platform || variables.tenantWrites",
                    "messageExpression": "request.userInfo.username + ' may not ' + request.operation.lowerAscii() + ' the kix records of Kix cluster ' + (variables.cluster == '' ? '(none)' : variables.cluster) + ': the platform does not declare it a writer of that Kix cluster'",
                    "reason": "Forbidden",
                },
                {
                    "expression": "request.operation == 'DELETE' || request.resource.resource != 'activations' || variables.platform || variables.declaredAccount",
                    "messageExpression": "'an Activation of Kix cluster ' + variables.cluster + ' must name the ServiceAccount the platform declares for it, not ' + (variables.serviceAccount == '' ? '(none)' : variables.serviceAccount)",
                    "reason": "Forbidden",
                },
                {
                    "expression": cel_name_is_its_clusters(),
                    "messageExpression": "'a kix record of Kix cluster ' + variables.cluster + ' is named ' + (request.resource.resource == 'activations' ? variables.cluster + '-<number>' : variables.cluster + '.<package>') + ', not ' + object.metadata.name + ': a record may not take another Kix cluster\\'s record name'",
                    "reason": "Forbidden",
                },
                {
                    "expression": format!(
                        "request.operation != 'UPDATE' || ({old_cluster} == variables.cluster && {old_account} == variables.serviceAccount)",
                        old_cluster = cel_cluster_of("oldObject"),
                        old_account = cel_service_account_of("oldObject"),
                    ),
                    "message": "a kix record cannot move to another Kix cluster or ServiceAccount (kix.run/cluster, spec.cluster and spec.serviceAccount are fixed once written)",
                    "reason": "Forbidden",
                },
            ],
        },
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME, "labels": {"app.kubernetes.io/managed-by": "kix"}},
        "spec": {"policyName": POLICY_NAME, "validationActions": ["Deny"]},
    });
    [policy, binding]
}

/// [`admission_policy`] as a multi-document YAML stream with a header.
///
/// # Panics
///
/// Never in practice: the objects are plain JSON values.
pub fn admission_policy_yaml(tenants: &Tenants) -> String {
    let mut out = String::from(
        "# Who may write kix's records: generated by `kix crds --tenants` from the\n\
         # platform's declaration of its tenants; do not edit.\n",
    );
    for object in admission_policy(tenants) {
        out.push_str("---\n");
        #[allow(clippy::expect_used)]
        out.push_str(&serde_saphyr::to_string(&object).expect("JSON values serialize to YAML"));
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cel_strings_are_quoted_and_escaped() {
        assert_eq!(cel_string("team-a"), "'team-a'");
        assert_eq!(cel_string("o'brien\\x"), "'o\\'brien\\\\x'");
        assert_eq!(cel_string("a\nb"), "'a\\nb'");
    }

    #[test]
    fn service_accounts_parse_and_name_their_user() {
        let sa = ServiceAccountRef::parse(" team-a/kix ").expect("an account");
        assert_eq!(sa.to_string(), "team-a/kix");
        assert_eq!(sa.username(), "system:serviceaccount:team-a:kix");
        for bad in ["kix", "/kix", "team-a/", "a/b/c", ""] {
            assert!(ServiceAccountRef::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tenants_read_from_json_and_refuse_unknown_fields() {
        let tenants: Tenants = serde_json::from_value(json!({
            "platform": {"groups": ["system:masters"]},
            "clusters": {"team-a": {"groups": ["team-a"],
                "serviceAccount": {"namespace": "team-a", "name": "kix"}}}
        }))
        .expect("a declaration");
        assert_eq!(
            tenants.clusters["team-a"].service_account.to_string(),
            "team-a/kix"
        );
        let typo = serde_json::from_value::<Tenants>(json!({
            "clusters": {"team-a": {"group": ["team-a"],
                "serviceAccount": {"namespace": "team-a", "name": "kix"}}}
        }));
        assert!(typo.is_err());
    }

    /// The tenant's ServiceAccount writes its own Kix cluster's records
    /// (the CLI and the operator act as it), not another's.
    #[test]
    fn a_tenants_account_writes_its_own_kix_clusters_records() {
        let tenants: Tenants = serde_json::from_value(json!({
            "clusters": {
                "team-a": {"groups": ["team-a"],
                           "serviceAccount": {"namespace": "team-a", "name": "kix"}},
                "team-b": {"users": ["bob", "system:serviceaccount:team-b:kix"],
                           "serviceAccount": {"namespace": "team-b", "name": "kix"}}
            }
        }))
        .expect("a declaration");
        let [policy, _] = admission_policy(&tenants);
        let writes = policy["spec"]["variables"][3]["expression"]
            .as_str()
            .expect("an expression")
            .to_string();
        assert_eq!(
            writes,
            "(variables.cluster == 'team-a' && (request.userInfo.username in ['system:serviceaccount:team-a:kix'] || \
             (has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in ['team-a'])))) || \
             (variables.cluster == 'team-b' && (request.userInfo.username in ['bob', 'system:serviceaccount:team-b:kix'] || \
             (has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in []))))"
        );
    }

    #[test]
    fn no_tenant_declared_lets_only_the_platform_write() {
        let [policy, _] = admission_policy(&Tenants::default());
        let variables = &policy["spec"]["variables"];
        assert_eq!(variables[3]["expression"], "false");
        assert_eq!(variables[4]["expression"], "false");
    }
}
