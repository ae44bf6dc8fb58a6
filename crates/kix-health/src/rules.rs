//! A set of compiled health rules: the user's first, then the built-in
//! library, then kstatus for every kind no rule names.

use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::bounds;
use crate::builtin;
use crate::evaluator::{self, Ran};
use crate::kstatus::{self, Health};
use crate::rule::{Expr, ExprField, Outcome, RuleError, RuleSpec, context};

/// Which rule judged an object.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RuleRef {
    /// A rule of the built-in library, named by its project.
    Builtin {
        project: &'static str,
        kind: &'static str,
    },
    /// A user's rule, named by where it was declared.
    User { source: Arc<str> },
    /// No CEL rule: the generic kstatus rules.
    Kstatus,
}

/// `built-in cert-manager Certificate`, the user rule's source, or `kstatus`.
impl fmt::Display for RuleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuleRef::Builtin { project, kind } => write!(f, "built-in {project} {kind}"),
            RuleRef::User { source } => f.write_str(source),
            RuleRef::Kstatus => f.write_str("kstatus"),
        }
    }
}

impl Serialize for RuleRef {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// An object's health and the rule that judged it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub health: Health,
    pub rule: RuleRef,
}

/// A user's rule and where it was declared (a file, and its place there).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UserRule {
    pub source: String,
    pub spec: RuleSpec,
}

/// Compiled rules: cheap to clone, shared by every judgement of a deploy.
#[derive(Clone, Default)]
pub struct Rules {
    user: Arc<[CompiledRule]>,
}

impl fmt::Debug for Rules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sources: Vec<String> = self.user.iter().map(|r| r.origin.to_string()).collect();
        f.debug_struct("Rules").field("user", &sources).finish()
    }
}

impl Rules {
    /// The built-in library and kstatus.
    pub fn builtin() -> Rules {
        Rules::default()
    }

    /// The user's rules before the built-in library: a user rule for a kind
    /// overrides the built-in one. Every expression compiles now; the first
    /// that does not is the error, naming its source and its text.
    pub fn with_user(rules: impl IntoIterator<Item = UserRule>) -> Result<Rules, RuleError> {
        let mut compiled: Vec<CompiledRule> = Vec::new();
        for rule in rules {
            let new = CompiledRule::user(rule)?;
            if let Some(other) = compiled.iter().find(|c| c.selector == new.selector) {
                return Err(RuleError::Duplicate {
                    source_name: new.origin.to_string(),
                    kind: new.selector.to_string(),
                    other: other.origin.to_string(),
                });
            }
            compiled.push(new);
        }
        // A rule for one object's name before a rule for its whole kind.
        compiled.sort_by_key(|r| r.selector.name.is_none());
        Ok(Rules {
            user: compiled.into(),
        })
    }

    /// The health of a live object and the rule that judged it.
    pub fn judge(&self, obj: &Value) -> Verdict {
        self.judge_at(obj, Utc::now())
    }

    /// [`Rules::judge`] with an explicit current time (kstatus' Pod scheduling).
    pub fn judge_at(&self, obj: &Value, now: DateTime<Utc>) -> Verdict {
        let object = ObjectKey::of(obj);
        let candidates = self.user.iter().chain(builtin::rules().iter());
        for rule in candidates.filter(|r| r.selector.matches(&object)) {
            if let Some(health) = rule.judge(obj) {
                return Verdict {
                    health,
                    rule: rule.origin.clone(),
                };
            }
        }
        Verdict {
            health: kstatus::health_at(obj, now),
            rule: RuleRef::Kstatus,
        }
    }

    /// Whether a CEL rule (the user's, or a built-in one other than a
    /// guarded wildcard) names this kind: it may read any field of the
    /// object, so a reader that keeps objects lean should give it whole.
    pub fn has_cel_rule(&self, group: &str, kind: &str) -> bool {
        self.user
            .iter()
            .chain(builtin::rules().iter())
            .any(|r| r.needs_condition.is_none() && r.selector.names_kind(group, kind))
    }

    /// Whether an object of this kind is judged by its metadata alone (no
    /// rule of these reads its spec or status): see
    /// [`kstatus::judged_by_metadata`].
    pub fn judged_by_metadata(&self, group: &str, kind: &str) -> bool {
        kstatus::judged_by_metadata(group, kind)
            && !self
                .user
                .iter()
                .chain(builtin::rules().iter())
                // A guarded wildcard reads status; kinds judged by metadata have none.
                .any(|r| r.needs_condition.is_none() && r.selector.names_kind(group, kind))
    }
}

/// What a rule applies to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Selector {
    pub(crate) group: String,
    /// `*`: every kind of the group (the built-in library's wildcards).
    pub(crate) kind: String,
    pub(crate) version: Option<String>,
    pub(crate) name: Option<String>,
}

impl Selector {
    fn matches(&self, object: &ObjectKey) -> bool {
        (self.group == "*" || self.group == object.group)
            && (self.kind == "*" || self.kind == object.kind)
            && self.version.as_deref().is_none_or(|v| v == object.version)
            && self.name.as_deref().is_none_or(|n| n == object.name)
    }

    fn names_kind(&self, group: &str, kind: &str) -> bool {
        (self.group == "*" || self.group == group) && (self.kind == "*" || self.kind == kind)
    }
}

/// `Kind.group`, `Kind.group/version`, with ` name` when it names one object.
impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.kind)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        if let Some(version) = &self.version {
            write!(f, "/{version}")?;
        }
        if let Some(name) = &self.name {
            write!(f, " {name}")?;
        }
        Ok(())
    }
}

/// An object's identity as rules match it.
struct ObjectKey<'a> {
    group: &'a str,
    version: &'a str,
    kind: &'a str,
    name: &'a str,
}

impl<'a> ObjectKey<'a> {
    fn of(obj: &'a Value) -> Self {
        let text = |field: &str| obj.get(field).and_then(Value::as_str).unwrap_or_default();
        let api_version = text("apiVersion");
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        ObjectKey {
            group,
            version,
            kind: text("kind"),
            name: obj
                .get("metadata")
                .and_then(|m| m.get("name"))
                .and_then(Value::as_str)
                .unwrap_or_default(),
        }
    }
}

#[derive(Clone)]
pub(crate) struct CompiledRule {
    pub(crate) origin: RuleRef,
    pub(crate) selector: Selector,
    /// A built-in wildcard's guard: the rule judges only objects whose
    /// status has a condition of this type (checked before any CEL runs,
    /// so other kinds pay nothing for it).
    pub(crate) needs_condition: Option<&'static str>,
    pub(crate) current: Option<Arc<Expr>>,
    pub(crate) in_progress: Option<Arc<Expr>>,
    pub(crate) failed: Option<Arc<Expr>>,
    pub(crate) message: Option<Arc<Expr>>,
}

/// The texts of a rule's expressions, to compile.
pub(crate) struct Sources<'a> {
    pub(crate) current: Option<&'a str>,
    pub(crate) in_progress: Option<&'a str>,
    pub(crate) failed: Option<&'a str>,
    pub(crate) message: Option<&'a str>,
}

impl CompiledRule {
    fn user(rule: UserRule) -> Result<CompiledRule, RuleError> {
        let UserRule { source, spec } = rule;
        if spec.kind.is_empty() {
            return Err(RuleError::NoKind {
                source_name: source,
            });
        }
        let selector = Selector {
            group: spec.group,
            kind: spec.kind,
            version: spec.version,
            name: spec.name,
        };
        let sources = Sources {
            current: spec.current.as_deref(),
            in_progress: spec.in_progress.as_deref(),
            failed: spec.failed.as_deref(),
            message: spec.message.as_deref(),
        };
        CompiledRule::compile(
            RuleRef::User {
                source: source.into(),
            },
            selector,
            None,
            &sources,
        )
    }

    pub(crate) fn compile(
        origin: RuleRef,
        selector: Selector,
        needs_condition: Option<&'static str>,
        sources: &Sources,
    ) -> Result<CompiledRule, RuleError> {
        if sources.current.is_none() && sources.in_progress.is_none() && sources.failed.is_none() {
            return Err(RuleError::NoExpression {
                source_name: origin.to_string(),
                kind: selector.to_string(),
            });
        }
        let compile =
            |field: ExprField, text: Option<&str>| -> Result<Option<Arc<Expr>>, RuleError> {
                text.map(|text| {
                    crate::bounds::check(text).map_err(|over| RuleError::Limit {
                        source_name: origin.to_string(),
                        kind: selector.to_string(),
                        field,
                        over: over.to_string(),
                    })?;
                    Expr::compile(text)
                        .map(Arc::new)
                        .map_err(|message| RuleError::Compile {
                            source_name: origin.to_string(),
                            kind: selector.to_string(),
                            field,
                            expr: text.to_owned(),
                            message,
                        })
                })
                .transpose()
            };
        Ok(CompiledRule {
            needs_condition,
            current: compile(ExprField::Current, sources.current)?,
            in_progress: compile(ExprField::InProgress, sources.in_progress)?,
            failed: compile(ExprField::Failed, sources.failed)?,
            message: compile(ExprField::Message, sources.message)?,
            origin,
            selector,
        })
    }

    /// The object's health by this rule; `None` when the rule has nothing
    /// to say (its guard does not hold, or it has no `current` and neither
    /// `failed` nor `inProgress` matched): the next rule, or kstatus, judges.
    fn judge(&self, obj: &Value) -> Option<Health> {
        if let Some(type_) = self.needs_condition
            && !has_condition(obj, type_)
        {
            return None;
        }
        if let Some(health) = kstatus::terminating_or_unobserved(obj) {
            return Some(health);
        }
        let (cost, items) = match self.runtime_cost(obj) {
            Ok(estimate) => estimate,
            Err(over) => return Some(over),
        };
        if cost <= evaluator::INLINE_COST {
            return self.evaluate(obj);
        }
        let key = format!("{}\0{}\0{items}", self.origin, self.selector);
        let (rule, object) = (self.clone(), obj.clone());
        let limit = evaluator::WALL_LIMIT.as_secs();
        let what = match evaluator::run(key, move || rule.evaluate(&object)) {
            Ran::Done(health) => return health,
            Ran::Overran => format!(" exceeded its budget ({limit} s of evaluation)"),
            Ran::Busy => format!(
                " exceeded its budget (waited {limit} s for one of the {} evaluators \
                 of expensive rules)",
                evaluator::EVALUATORS
            ),
            Ran::Panicked => " could not be evaluated: the CEL evaluator failed".to_owned(),
        };
        Some(self.exceeded(&what))
    }

    /// The object's health by this rule's expressions, evaluated here.
    fn evaluate(&self, obj: &Value) -> Option<Health> {
        let ctx = context(obj);
        let steps = [
            (ExprField::Failed, &self.failed),
            (ExprField::InProgress, &self.in_progress),
            (ExprField::Current, &self.current),
        ];
        for (field, expr) in steps {
            let Some(expr) = expr else { continue };
            match expr.eval_bool(&ctx) {
                Outcome::True => {
                    return Some(match field {
                        ExprField::Failed => Health::degraded(self.reason(obj, &ctx, field, expr)),
                        ExprField::Current => Health::Ready,
                        _ => Health::progressing(self.reason(obj, &ctx, field, expr)),
                    });
                }
                Outcome::Error(error) => {
                    return Some(Health::degraded(format!(
                        "{}: {field} `{}` could not be evaluated: {error}",
                        self.origin, expr.source
                    )));
                }
                Outcome::False => {}
            }
        }
        let current = self.current.as_ref()?;
        Some(Health::progressing(self.reason(
            obj,
            &ctx,
            ExprField::Current,
            current,
        )))
    }

    /// The largest estimated cost of this rule's expressions over this
    /// object's lists, and the largest list's size; Degraded when one could
    /// exceed the runtime budget (the `cel` crate cannot stop an evaluation).
    fn runtime_cost(&self, obj: &Value) -> Result<(u64, usize), Health> {
        let exprs = [
            (ExprField::Failed, &self.failed),
            (ExprField::InProgress, &self.in_progress),
            (ExprField::Current, &self.current),
            (ExprField::Message, &self.message),
        ];
        let largest = bounds::largest_collection(obj);
        let (mut cost, mut items) = (0, largest);
        for (field, expr) in exprs {
            let Some(expr) = expr else { continue };
            let size = largest.max(expr.largest_literal);
            items = items.max(size);
            let Some(expr_cost) = bounds::runtime_cost(&expr.source, size as u64) else {
                return Err(self.exceeded(&format!(
                    ": {field} exceeded its budget ({} steps with lists of {size} items)",
                    bounds::RUNTIME_BUDGET
                )));
            };
            cost = cost.max(expr_cost);
        }
        Ok((cost, items))
    }

    /// Degraded: `what` (`: current exceeded its budget (...)`) went over.
    fn exceeded(&self, what: &str) -> Health {
        Health::degraded(format!(
            "{}: health rule for {}{what}",
            self.origin, self.selector
        ))
    }

    /// The rule's message, else the conditions (or phase) the expression
    /// reads, else the expression itself.
    fn reason(&self, obj: &Value, ctx: &cel::Context, field: ExprField, expr: &Expr) -> String {
        if let Some(message) = self.message.as_ref().and_then(|m| m.eval_string(ctx))
            && !message.is_empty()
        {
            return message;
        }
        crate::reason::fields_read(obj, &expr.source).unwrap_or_else(|| match field {
            ExprField::Current => format!("waiting for `{}`", expr.source),
            _ => format!("{field} `{}` holds", expr.source),
        })
    }
}

fn has_condition(obj: &Value, type_: &str) -> bool {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.get("type").and_then(Value::as_str) == Some(type_))
        })
}
