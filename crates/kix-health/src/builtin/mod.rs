//! The built-in library: CEL rules for the custom resources people install
//! most, one file per project, each rule tested on the status shapes in the
//! `fixtures/<project>/` folder beside this file (see `tests`).
//!
//! A new rule is one entry in its project's table and three fixtures
//! (`<kind>.ready.json`, `<kind>.progressing.json`, `<kind>.degraded.json`).

use std::sync::LazyLock;

use crate::rule::RuleError;
use crate::rules::{CompiledRule, RuleRef, Selector, Sources};

mod argo_rollouts;
mod cert_manager;
mod cloudnative_pg;
mod crossplane;
mod flux;
mod gateway_api;
mod keda;
mod prometheus_operator;

/// Every project's table, in the order they are tried (wildcards last).
const PROJECTS: &[&[Builtin]] = &[
    cert_manager::RULES,
    gateway_api::RULES,
    prometheus_operator::RULES,
    argo_rollouts::RULES,
    keda::RULES,
    cloudnative_pg::RULES,
    flux::RULES,
    crossplane::RULES,
];

/// `status.conditions` has one of this type and status.
macro_rules! cond {
    ($type:literal, $status:literal) => {
        concat!(
            "status.?conditions.orValue([]).exists(c, c.type == '",
            $type,
            "' && c.status == '",
            $status,
            "')"
        )
    };
}
pub(crate) use cond;

/// A built-in rule: [`crate::RuleSpec`]'s fields as constants, plus a guard
/// for the wildcards (Crossplane's claims and composites have groups of
/// their users' choosing).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Builtin {
    pub(crate) project: &'static str,
    pub(crate) group: &'static str,
    pub(crate) kind: &'static str,
    pub(crate) needs_condition: Option<&'static str>,
    pub(crate) current: Option<&'static str>,
    pub(crate) in_progress: Option<&'static str>,
    pub(crate) failed: Option<&'static str>,
    pub(crate) message: Option<&'static str>,
}

impl Builtin {
    pub(crate) const fn new(
        project: &'static str,
        group: &'static str,
        kind: &'static str,
    ) -> Self {
        Builtin {
            project,
            group,
            kind,
            needs_condition: None,
            current: None,
            in_progress: None,
            failed: None,
            message: None,
        }
    }

    /// Only objects whose status has a condition of this type.
    pub(crate) const fn needs_condition(mut self, type_: &'static str) -> Self {
        self.needs_condition = Some(type_);
        self
    }

    pub(crate) const fn current(mut self, expr: &'static str) -> Self {
        self.current = Some(expr);
        self
    }

    pub(crate) const fn in_progress(mut self, expr: &'static str) -> Self {
        self.in_progress = Some(expr);
        self
    }

    pub(crate) const fn failed(mut self, expr: &'static str) -> Self {
        self.failed = Some(expr);
        self
    }

    pub(crate) const fn message(mut self, expr: &'static str) -> Self {
        self.message = Some(expr);
        self
    }

    fn compile(&self) -> Result<CompiledRule, RuleError> {
        CompiledRule::compile(
            RuleRef::Builtin {
                project: self.project,
                kind: self.kind,
            },
            Selector {
                group: self.group.to_owned(),
                kind: self.kind.to_owned(),
                version: None,
                name: None,
            },
            self.needs_condition,
            &Sources {
                current: self.current,
                in_progress: self.in_progress,
                failed: self.failed,
                message: self.message,
            },
        )
    }
}

/// Every built-in rule.
pub(crate) fn table() -> impl Iterator<Item = &'static Builtin> {
    PROJECTS.iter().flat_map(|rules| rules.iter())
}

/// Every built-in rule, compiled, or the first that does not compile.
#[cfg(test)]
pub(crate) fn compile_all() -> Result<Vec<CompiledRule>, RuleError> {
    table().map(Builtin::compile).collect()
}

static COMPILED: LazyLock<Vec<CompiledRule>> =
    LazyLock::new(|| table().filter_map(|rule| rule.compile().ok()).collect());

/// The compiled library (a rule that did not compile is left out; the
/// tests hold that every one compiles).
pub(crate) fn rules() -> &'static [CompiledRule] {
    &COMPILED
}

#[cfg(test)]
mod tests;
