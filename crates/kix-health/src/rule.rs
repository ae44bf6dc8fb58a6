//! One CEL health rule: the kind it judges and up to three expressions over
//! the object, as Flux's `healthCheckExprs` has them (`current`,
//! `inProgress`, `failed`), plus an optional `message`.
//!
//! The object's top-level fields are variables (`metadata`, `spec`,
//! `status`, ... as in Flux), and `self` is the whole object (as in
//! Kubernetes' CEL validation rules). `metadata`, `spec` and `status` are
//! bound to an empty map when the object has none, so `status.?conditions`
//! works before a controller wrote anything.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, LazyLock};

use cel::objects::Key;
use cel::{Context, Env, ExecutionError, Program};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::bounds;

/// A health rule as declared (in Nix, carried in the tree as JSON).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RuleSpec {
    /// API group; `""` for the core group.
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub kind: String,
    /// Only objects of this API version (any when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Only the object of this name (any when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// True when the object is healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<String>,
    /// True while the object is on its way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_progress: Option<String>,
    /// True when the object failed: checked first, it ends a wait at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    /// A CEL string expression: the reason shown when the object is not healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Which of a rule's expressions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExprField {
    Current,
    InProgress,
    Failed,
    Message,
}

impl ExprField {
    pub fn as_str(self) -> &'static str {
        match self {
            ExprField::Current => "current",
            ExprField::InProgress => "inProgress",
            ExprField::Failed => "failed",
            ExprField::Message => "message",
        }
    }
}

impl fmt::Display for ExprField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A rule that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("{source_name}: health rule for {kind}: {field} `{expr}` does not compile: {message}")]
    Compile {
        source_name: String,
        kind: String,
        field: ExprField,
        expr: String,
        message: String,
    },
    #[error("{source_name}: health rule for {kind}: {field} is refused: it is {over}")]
    Limit {
        source_name: String,
        kind: String,
        field: ExprField,
        over: String,
    },
    #[error("{source_name}: health rule for {kind}: none of current, inProgress, failed is set")]
    NoExpression { source_name: String, kind: String },
    #[error("{source_name}: health rule needs a kind")]
    NoKind { source_name: String },
    #[error("{source_name}: a health rule for {kind} is already declared by {other}")]
    Duplicate {
        source_name: String,
        kind: String,
        other: String,
    },
}

/// A compiled expression with its source text.
pub(crate) struct Expr {
    pub(crate) source: String,
    program: Program,
    /// The functions it calls: an undeclared one is a mistake in the rule,
    /// not a field the object lacks.
    functions: BTreeSet<String>,
    /// The most items a list or map literal of it can have.
    pub(crate) largest_literal: usize,
}

/// What evaluating a boolean expression gave.
pub(crate) enum Outcome {
    True,
    /// False, or it read a field the object does not have.
    False,
    /// It could not be evaluated (a type error, a string where a bool was due).
    Error(String),
}

/// The environment every rule compiles and runs in: the standard library,
/// its macros and optional values (`a.?b.orValue(c)`).
pub(crate) static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(Env::stdlib()));

impl Expr {
    /// Compiles a text [`bounds::check`] accepted (on a stack large enough
    /// for it).
    pub(crate) fn compile(source: &str) -> Result<Expr, String> {
        let program = bounds::with_stack(|| ENV.compile(source)).map_err(|e| e.to_string())?;
        let functions = program
            .references()
            .functions()
            .into_iter()
            .map(str::to_owned)
            .collect();
        Ok(Expr {
            largest_literal: bounds::largest_literal(source),
            source: source.to_owned(),
            program,
            functions,
        })
    }

    pub(crate) fn eval_bool(&self, ctx: &Context) -> Outcome {
        match bounds::with_stack(|| self.program.execute(ctx)) {
            Ok(cel::Value::Bool(true)) => Outcome::True,
            Ok(cel::Value::Bool(false)) => Outcome::False,
            Ok(other) => Outcome::Error(format!("gave a {}, not a bool", other.type_of())),
            Err(ExecutionError::UndeclaredReference(name))
                if self.functions.contains(name.as_str()) =>
            {
                Outcome::Error(format!("no function {name} in kix's CEL"))
            }
            Err(e) if is_missing(&e) => Outcome::False,
            Err(e) => Outcome::Error(e.to_string()),
        }
    }

    pub(crate) fn eval_string(&self, ctx: &Context) -> Option<String> {
        match bounds::with_stack(|| self.program.execute(ctx)) {
            Ok(cel::Value::String(s)) => Some(s.as_str().to_owned()),
            _ => None,
        }
    }
}

/// A field the object does not have: CEL reports it as an error, kix as
/// "not matched" (the controller may not have written it yet).
fn is_missing(e: &ExecutionError) -> bool {
    matches!(
        e,
        ExecutionError::NoSuchKey(_) | ExecutionError::UndeclaredReference(_)
    )
}

/// The evaluation context of one object: its top-level fields and `self`.
pub(crate) fn context(obj: &Value) -> Context<'static, 'static> {
    let mut ctx = Context::with_env(Arc::clone(&ENV));
    if let Value::Object(map) = obj {
        for (name, value) in map {
            ctx.add_variable_from_value(name.as_str(), to_cel(value));
        }
    }
    for name in ["metadata", "spec", "status"] {
        if obj.get(name).is_none() {
            ctx.add_variable_from_value(name, cel::Value::from(HashMap::<Key, cel::Value>::new()));
        }
    }
    ctx.add_variable_from_value("self", to_cel(obj));
    ctx
}

/// JSON as CEL: integers stay `int` (not `uint`), so `status.replicas == 1` holds.
fn to_cel(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            (None, None) => cel::Value::Float(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => cel::Value::from(s.as_str()),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(map) => cel::Value::from(
            map.iter()
                .map(|(k, v)| (Key::from(k.as_str()), to_cel(v)))
                .collect::<HashMap<Key, cel::Value>>(),
        ),
    }
}
