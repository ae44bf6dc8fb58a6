//! Helm's annotations on a build's objects (#47): what `helm template`
//! leaves on a chart's hooks (`helm.sh/hook`, `helm.sh/hook-weight`,
//! `helm.sh/hook-delete-policy`) and on objects a release keeps
//! (`helm.sh/resource-policy: keep`). Read from the manifest as built; the
//! engine decides what they mean for a deploy.

use std::collections::BTreeSet;
use std::fmt;

use serde::Serialize;
use serde_json::Value;

use crate::Object;

pub const HOOK: &str = "helm.sh/hook";
pub const HOOK_WEIGHT: &str = "helm.sh/hook-weight";
pub const HOOK_DELETE_POLICY: &str = "helm.sh/hook-delete-policy";
pub const RESOURCE_POLICY: &str = "helm.sh/resource-policy";

/// When Helm runs a hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HookEvent {
    PreInstall,
    PostInstall,
    PreUpgrade,
    PostUpgrade,
    PreDelete,
    PostDelete,
    PreRollback,
    PostRollback,
    /// `helm test` (Helm 2's `test-success` and `test-failure` too).
    Test,
}

impl HookEvent {
    /// The event as `helm.sh/hook` names it (`test` for every test event).
    pub fn name(self) -> &'static str {
        EVENTS
            .iter()
            .find(|(_, event)| *event == self)
            .map_or("test", |(name, _)| name)
    }
}

impl fmt::Display for HookEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

const EVENTS: [(&str, HookEvent); 11] = [
    ("pre-install", HookEvent::PreInstall),
    ("post-install", HookEvent::PostInstall),
    ("pre-upgrade", HookEvent::PreUpgrade),
    ("post-upgrade", HookEvent::PostUpgrade),
    ("pre-delete", HookEvent::PreDelete),
    ("post-delete", HookEvent::PostDelete),
    ("pre-rollback", HookEvent::PreRollback),
    ("post-rollback", HookEvent::PostRollback),
    ("test", HookEvent::Test),
    ("test-success", HookEvent::Test),
    ("test-failure", HookEvent::Test),
];

/// When Helm deletes a hook's object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeletePolicy {
    BeforeHookCreation,
    HookSucceeded,
    HookFailed,
}

const POLICIES: [(&str, DeletePolicy); 3] = [
    ("before-hook-creation", DeletePolicy::BeforeHookCreation),
    ("hook-succeeded", DeletePolicy::HookSucceeded),
    ("hook-failed", DeletePolicy::HookFailed),
];

/// An object's Helm hook annotations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Hook {
    pub events: BTreeSet<HookEvent>,
    /// `helm.sh/hook-weight`, 0 when absent.
    pub weight: i64,
    /// `helm.sh/hook-delete-policy`; Helm's default, when absent, is
    /// `before-hook-creation`.
    pub delete: BTreeSet<DeletePolicy>,
}

impl Hook {
    /// A hook only `helm test` runs: never deployed.
    pub fn is_test(&self) -> bool {
        self.events.contains(&HookEvent::Test)
    }
}

/// An annotation Helm would not accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelmAnnotationError {
    pub annotation: &'static str,
    pub value: String,
    pub expected: String,
}

impl fmt::Display for HelmAnnotationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "annotation {}: {:?} is not {}",
            self.annotation, self.value, self.expected
        )
    }
}

/// The object's Helm hook, if it is one.
pub fn hook_of(object: &Object) -> Result<Option<Hook>, HelmAnnotationError> {
    // Most objects carry no Helm annotation: skip parsing them.
    if !object.manifest_text().contains(HOOK) {
        return Ok(None);
    }
    let manifest = object.manifest();
    let Some(events) = annotation(&manifest, HOOK) else {
        return Ok(None);
    };
    let events = parse_list(HOOK, events, &EVENTS)?;
    let weight = match annotation(&manifest, HOOK_WEIGHT) {
        None => 0,
        Some(text) => text.trim().parse().map_err(|_| HelmAnnotationError {
            annotation: HOOK_WEIGHT,
            value: text.to_owned(),
            expected: "an integer".to_owned(),
        })?,
    };
    let delete = match annotation(&manifest, HOOK_DELETE_POLICY) {
        None => BTreeSet::from([DeletePolicy::BeforeHookCreation]),
        Some(text) => parse_list(HOOK_DELETE_POLICY, text, &POLICIES)?,
    };
    Ok(Some(Hook {
        events,
        weight,
        delete,
    }))
}

/// Whether an object's `helm.sh/resource-policy` annotation says `keep`:
/// Helm never deletes such an object, and neither does kix's prune.
pub fn keeps(resource_policy: Option<&str>) -> bool {
    resource_policy.is_some_and(|v| v.trim() == "keep")
}

fn annotation<'a>(manifest: &'a Value, name: &str) -> Option<&'a str> {
    manifest
        .pointer("/metadata/annotations")?
        .get(name)?
        .as_str()
}

fn parse_list<T: Copy + Ord>(
    annotation: &'static str,
    text: &str,
    known: &[(&str, T)],
) -> Result<BTreeSet<T>, HelmAnnotationError> {
    let mut out = BTreeSet::new();
    for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        let Some((_, value)) = known.iter().find(|(name, _)| *name == word) else {
            return Err(HelmAnnotationError {
                annotation,
                value: word.to_owned(),
                expected: format!(
                    "one of {}",
                    known.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
                ),
            });
        };
        out.insert(*value);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ObjectKey;
    use serde_json::json;

    fn object(annotations: Value) -> Object {
        let manifest = json!({"apiVersion": "batch/v1", "kind": "Job",
                              "metadata": {"name": "migrate", "annotations": annotations}});
        let key = ObjectKey::from_manifest(&manifest).expect("key");
        Object::new(
            key,
            &manifest,
            manifest.to_string(),
            "packages/app/resources/hook.yaml".into(),
            1,
            "app".into(),
        )
    }

    #[test]
    fn a_hook_reads_as_helm_writes_it() {
        let hook = hook_of(&object(json!({
            "helm.sh/hook": "pre-install, pre-upgrade",
            "helm.sh/hook-weight": "-5",
            "helm.sh/hook-delete-policy": "hook-succeeded,before-hook-creation"
        })))
        .expect("valid")
        .expect("a hook");
        assert_eq!(
            hook.events,
            BTreeSet::from([HookEvent::PreInstall, HookEvent::PreUpgrade])
        );
        assert_eq!(hook.weight, -5);
        assert_eq!(
            hook.delete,
            BTreeSet::from([
                DeletePolicy::BeforeHookCreation,
                DeletePolicy::HookSucceeded
            ])
        );
        assert!(!hook.is_test());
        assert_eq!(HookEvent::PreUpgrade.to_string(), "pre-upgrade");
    }

    #[test]
    fn helm_defaults_apply_and_test_hooks_are_tests() {
        let hook = hook_of(&object(json!({"helm.sh/hook": "test-success"})))
            .expect("valid")
            .expect("a hook");
        assert!(hook.is_test());
        assert_eq!(hook.weight, 0);
        assert_eq!(
            hook.delete,
            BTreeSet::from([DeletePolicy::BeforeHookCreation])
        );
        assert_eq!(hook_of(&object(json!({"team": "a"}))), Ok(None));
    }

    #[test]
    fn an_annotation_helm_would_refuse_is_named() {
        let error = hook_of(&object(json!({"helm.sh/hook": "pre-instal"}))).expect_err("refused");
        assert_eq!(
            error.to_string(),
            "annotation helm.sh/hook: \"pre-instal\" is not one of pre-install, post-install, \
             pre-upgrade, post-upgrade, pre-delete, post-delete, pre-rollback, post-rollback, \
             test, test-success, test-failure"
        );
        let error = hook_of(&object(json!({"helm.sh/hook": "post-install",
                                           "helm.sh/hook-weight": "high"})))
        .expect_err("refused");
        assert_eq!(
            error.to_string(),
            "annotation helm.sh/hook-weight: \"high\" is not an integer"
        );
    }

    #[test]
    fn keep_is_helms_resource_policy() {
        assert!(keeps(Some("keep")));
        assert!(!keeps(Some("delete")));
        assert!(!keeps(None));
    }
}
