//! A plan as Markdown, for a pull request's comment (`kix plan --format
//! markdown`): a heading, a summary line, per package a table of what
//! changes, each update's field changes in a ```diff block. Values are
//! the plan's: Secret values are already redacted by the engine.

use std::fmt::Write as _;

use kix_engine::plan::{Action, Plan, PlannedObject};

/// The whole comment.
pub fn plan_markdown(plan: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "### kix plan: Kix cluster `{}`\n", plan.cluster);
    let _ = writeln!(out, "{}\n", summary(plan));
    let _ = writeln!(out, "- build: `{}`", plan.store_path);
    match (&plan.current_activation, &plan.current_path) {
        (Some(name), Some(path)) => {
            let _ = writeln!(out, "- against: `{path}` (activation `{name}`)");
        }
        (None, Some(path)) => {
            let _ = writeln!(out, "- against: `{path}`");
        }
        _ => {
            let _ = writeln!(out, "- against: nothing deployed yet");
        }
    }
    let _ = writeln!(out, "- plan digest: `{}`", plan.digest);
    for package in &plan.packages {
        let changed: Vec<&PlannedObject> = package
            .objects
            .iter()
            .filter(|o| o.action != Action::Unchanged)
            .collect();
        if changed.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "\n#### package `{}` {}\n",
            package.name, package.version
        );
        for m in plan.migrations.iter().filter(|m| m.package == package.name) {
            let _ = writeln!(out, "- migration {} (needs --accept-migrations)", m.label());
        }
        objects_markdown(&mut out, &changed);
    }
    let pruned: Vec<&PlannedObject> = plan.prune.iter().collect();
    if !pruned.is_empty() {
        let _ = writeln!(out, "\n#### prune (the build no longer has these)\n");
        objects_markdown(&mut out, &pruned);
    }
    if plan.deletion_budget.is_exceeded() {
        let _ = writeln!(
            out,
            "\n**Deletion budget exceeded**: this plan {}",
            cell(&plan.deletion_budget.explain())
        );
    }
    out
}

/// `**2 to create, 1 to update, 1 to delete**, 7 unchanged` (only the
/// actions the plan has), or that nothing changes.
fn summary(plan: &Plan) -> String {
    let c = &plan.counts;
    let changes: Vec<String> = [
        (c.create, "to create"),
        (c.update, "to update"),
        (c.replace, "to replace"),
        (c.adopt, "to adopt"),
        (c.delete, "to delete"),
        (c.conflict, "conflicts"),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect();
    let mut rest = vec![format!("{} unchanged", c.unchanged)];
    if c.keep > 0 {
        rest.push(format!("{} kept", c.keep));
    }
    if !plan.migrations.is_empty() {
        rest.push(format!("{} migrations", plan.migrations.len()));
    }
    if changes.is_empty() {
        format!("**No changes**, {}", rest.join(", "))
    } else {
        format!("**{}**, {}", changes.join(", "), rest.join(", "))
    }
}

/// A table of `objects`, then each one's field changes as a diff.
fn objects_markdown(out: &mut String, objects: &[&PlannedObject]) {
    let _ = writeln!(out, "| action | object | note |\n|---|---|---|");
    for o in objects {
        let mut note = o.note.clone().unwrap_or_default();
        if o.destructive {
            note = format!("destructive: needs --accept-migrations. {note}");
        }
        if !o.fields.is_empty() {
            let _ = write!(note, " ({})", o.fields.join("; "));
        }
        let _ = writeln!(
            out,
            "| {} | `{}` | {} |",
            o.action.as_str(),
            cell(&o.key.to_string()),
            cell(note.trim())
        );
    }
    for o in objects.iter().filter(|o| !o.changes.is_empty()) {
        let mut body = String::new();
        for change in &o.changes {
            if let Some(old) = &change.old {
                let _ = writeln!(body, "- {}: {old}", change.path);
            }
            if let Some(new) = &change.new {
                let _ = writeln!(body, "+ {}: {new}", change.path);
            }
        }
        let fence = fence_for(&body);
        let _ = writeln!(
            out,
            "\n`{}`\n\n{fence}diff\n{body}{fence}",
            cell(&o.key.to_string())
        );
    }
}

/// A table cell's text: pipes escaped, on one line.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// A code fence longer than any run of backticks in `body`.
fn fence_for(body: &str) -> String {
    let longest = body.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    "`".repeat(longest.max(2) + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_outgrows_the_backticks_it_holds() {
        assert_eq!(fence_for("plain"), "```");
        assert_eq!(fence_for("a ```` b"), "`````");
    }

    #[test]
    fn a_cell_keeps_to_its_column() {
        assert_eq!(cell("a|b\nc"), "a\\|b c");
    }
}
