//! The reason a rule gives when it has no `message`: the conditions its
//! expression reads (by their type, quoted in the expression), as found on
//! the object, else the phase it reads.

use serde_json::Value;

/// `Ready=False DoesNotExist: Issuer missing not found`, one entry per
/// condition the expression names, joined by `; `; conditions of route
/// parents, gateway listeners and policy ancestors are prefixed by whose.
pub(crate) fn fields_read(obj: &Value, expr: &str) -> Option<String> {
    let mut found = Vec::new();
    let status = obj.get("status");
    push_conditions(&mut found, "", status, expr);
    for (list, id) in [
        ("parents", "/parentRef/name"),
        ("ancestors", "/ancestorRef/name"),
        ("listeners", "/name"),
    ] {
        let items = status.and_then(|s| s.get(list)).and_then(Value::as_array);
        for item in items.into_iter().flatten() {
            let whose = item.pointer(id).and_then(Value::as_str).unwrap_or("?");
            let singular = list.trim_end_matches('s');
            push_conditions(
                &mut found,
                &format!("{singular} {whose}: "),
                Some(item),
                expr,
            );
        }
    }
    if found.is_empty() && expr.contains("phase") {
        let text = |field: &str| status.and_then(|s| s.get(field)).and_then(Value::as_str);
        if let Some(phase) = text("phase") {
            found.push(match text("message").filter(|m| !m.is_empty()) {
                Some(message) => format!("phase {phase}: {message}"),
                None => format!("phase {phase}"),
            });
        }
    }
    (!found.is_empty()).then(|| found.join("; "))
}

fn push_conditions(found: &mut Vec<String>, prefix: &str, holder: Option<&Value>, expr: &str) {
    let conditions = holder
        .and_then(|h| h.get("conditions"))
        .and_then(Value::as_array);
    for c in conditions.into_iter().flatten() {
        let text = |field: &str| c.get(field).and_then(Value::as_str).unwrap_or_default();
        let type_ = text("type");
        if type_.is_empty() || !names(expr, type_) {
            continue;
        }
        let mut entry = format!("{prefix}{type_}={}", text("status"));
        match (text("reason"), text("message")) {
            ("", "") => {}
            (reason, "") => entry.push_str(&format!(" {reason}")),
            ("", message) => entry.push_str(&format!(": {message}")),
            (reason, message) => entry.push_str(&format!(" {reason}: {message}")),
        }
        found.push(entry);
    }
}

/// Whether the expression names `word` as a quoted string.
fn names(expr: &str, word: &str) -> bool {
    expr.contains(&format!("'{word}'")) || expr.contains(&format!("\"{word}\""))
}
