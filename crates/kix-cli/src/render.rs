//! Human output of plans and deploy progress. Pure functions of values, so
//! they are snapshot-tested.

use std::fmt::Write as _;

use kix_engine::crd_upgrade::{CrdUpgrade, Hazard};
use kix_engine::plan::{Action, Plan, PlannedObject};
use kix_engine::records::CrdState;

/// ANSI colors, off when NO_COLOR is set or stdout is not a terminal.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    pub color: bool,
}

impl Style {
    pub fn detect() -> Style {
        use std::io::IsTerminal;
        Style {
            color: std::env::var_os("NO_COLOR").is_none() && std::io::stdout().is_terminal(),
        }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    fn action(&self, action: Action) -> String {
        let code = match action {
            Action::Create | Action::Adopt => "32",
            Action::Update => "33",
            Action::Delete | Action::Replace | Action::Conflict => "31",
            Action::Unchanged | Action::Keep => "2",
            Action::Deleting => "35",
        };
        self.paint(code, &format!("{:<10}", action.as_str()))
    }
}

/// The plan, grouped by package in apply order, then the prune section.
pub fn plan_text(plan: &Plan, style: Style, show_unchanged: bool) -> String {
    let mut out = String::new();
    header_text(&mut out, plan, style);
    for package in &plan.packages {
        let unchanged = package
            .objects
            .iter()
            .filter(|o| o.action == Action::Unchanged)
            .count();
        let _ = writeln!(out, "\npackage {} {}", package.name, package.version);
        if !package.handoff.is_empty() {
            let _ = writeln!(
                out,
                "  handed off (kix neither applies nor checks them): {}",
                package.handoff.join("; ")
            );
        }
        migrations_text(&mut out, plan, &package.name, style);
        for object in &package.objects {
            let completed =
                kix_engine::health::completed::is_completed(object.action, object.note.as_deref());
            if completed && !show_unchanged {
                // A Job that ran for this manifest: said, not run again.
                let _ = writeln!(
                    out,
                    "  {}(completed) {}",
                    style.action(Action::Unchanged),
                    object.key
                );
                continue;
            }
            if object.action == Action::Unchanged && !show_unchanged {
                continue;
            }
            object_text(&mut out, object, style);
            if let Some(upgrade) = plan.crd_upgrade(&object.key) {
                crd_upgrade_text(&mut out, upgrade, style);
            }
        }
        if unchanged > 0 && !show_unchanged {
            let _ = writeln!(
                out,
                "  {}{unchanged} objects",
                style.action(Action::Unchanged)
            );
        }
    }
    if !plan.prune.is_empty() {
        let _ = writeln!(out, "\nprune (the build no longer has these)");
        for object in &plan.prune {
            object_text(&mut out, object, style);
        }
    }
    let c = &plan.counts;
    let _ = writeln!(
        out,
        "\n{} to create, {} to update, {} unchanged, {} to delete, {} to replace, {} to adopt, {} conflicts, {} kept",
        c.create, c.update, c.unchanged, c.delete, c.replace, c.adopt, c.conflict, c.keep
    );
    if c.deleting > 0 {
        let _ = writeln!(
            out,
            "{} being deleted (held by finalizers; waited for, not deleted again)",
            c.deleting
        );
    }
    if !plan.migrations.is_empty() {
        let _ = writeln!(out, "{} migrations to run", plan.migrations.len());
    }
    for refusal in kix_engine::crd_upgrade::refusals(&plan.crd_upgrades) {
        let _ = writeln!(
            out,
            "\n{}: {refusal}",
            style.paint("31", "CRD upgrade refused")
        );
    }
    if plan.deletion_budget.is_exceeded() {
        let _ = writeln!(
            out,
            "\n{}: this plan {}",
            style.paint("31", "deletion budget exceeded"),
            plan.deletion_budget.explain()
        );
    }
    out
}

/// What is planned against (a record, a build, nothing) and kix's CRDs.
fn header_text(out: &mut String, plan: &Plan, style: Style) {
    let _ = writeln!(
        out,
        "Plan for Kix cluster {} ({})",
        plan.cluster, plan.store_path
    );
    match (&plan.current_activation, &plan.current_path) {
        (Some(name), Some(path)) if path == &plan.store_path => {
            let _ = writeln!(out, "current activation: {name} (same build)");
        }
        (Some(name), Some(path)) => {
            let _ = writeln!(out, "current activation: {name} ({path})");
        }
        // `kix plan --against STORE-PATH`: a build, no record.
        (None, Some(path)) => {
            let _ = writeln!(out, "planned against: {path} (offline, no cluster read)");
        }
        _ => {
            let _ = writeln!(out, "current activation: none");
        }
    }
    match plan.kix_crds {
        CrdState::Missing => {
            let _ = writeln!(
                out,
                "\nkix CRDs: {}activations.kix.run, packageinstances.kix.run",
                style.action(Action::Create)
            );
        }
        CrdState::Outdated => {
            let _ = writeln!(
                out,
                "\nkix CRDs: {}activations.kix.run, packageinstances.kix.run",
                style.action(Action::Update)
            );
        }
        CrdState::Current => {}
    }
}

/// The migrations a package crosses, each with its actions in order; they
/// run before the package's objects are applied.
fn migrations_text(out: &mut String, plan: &Plan, package: &str, style: Style) {
    let migrations: Vec<_> = plan
        .migrations
        .iter()
        .filter(|m| m.package == package)
        .collect();
    let Some(first) = migrations.first() else {
        return;
    };
    let _ = writeln!(
        out,
        "  migrations (installed {} -> {}; need --accept-migrations)",
        first.installed, first.version
    );
    for m in migrations {
        let mut line = format!("    {} {}", style.paint("35", "migration"), m.label());
        if !m.description.is_empty() {
            let _ = write!(line, ": {}", m.description);
        }
        let _ = writeln!(out, "{line}");
        for a in &m.actions {
            let action = style.paint("31", &format!("{:<10}", a.action.to_string()));
            let _ = writeln!(out, "      {action}{}", a.object);
        }
    }
}

/// A CRD's changes per version, then the stored versions it drops or stops
/// serving.
fn crd_upgrade_text(out: &mut String, upgrade: &CrdUpgrade, style: Style) {
    for change in &upgrade.changes {
        let _ = writeln!(out, "      {change}");
    }
    for (action, hazard) in upgrade.actions().zip(&upgrade.destructive) {
        let consent = match hazard.hazard {
            Hazard::NotServed => "needs --accept-migrations",
            Hazard::Removed => "refused: see below",
        };
        let _ = writeln!(
            out,
            "      {}: {action} ({}; {consent})",
            style.paint("31", "destructive"),
            upgrade.objects_text()
        );
    }
}

fn object_text(out: &mut String, object: &PlannedObject, style: Style) {
    let mut line = format!("  {}{}", style.action(object.action), object.key);
    if object.destructive {
        line.push_str(" (destructive: needs --accept-migrations)");
    }
    if let Some(n) = object.takes_with_it {
        let _ = write!(line, " (takes {n} objects with it)");
    }
    if !object.fields.is_empty() {
        let _ = write!(line, " ({})", object.fields.join("; "));
    }
    if let Some(note) = &object.note {
        let _ = write!(line, " [{note}]");
    }
    if let Some(waited) = object.deletion.as_ref().and_then(|d| d.waited()) {
        let _ = write!(line, " (for {waited})");
    }
    let _ = writeln!(out, "{line}");
    for warning in &object.warnings {
        let _ = writeln!(
            out,
            "      {}",
            style.paint("33", &format!("warning: {warning}"))
        );
    }
    for change in &object.changes {
        let show = |v: &Option<serde_json::Value>| {
            v.as_ref()
                .map(|v| v.to_string())
                .unwrap_or_else(|| "∅".into())
        };
        let text = format!(
            "      {}: {} → {}",
            change.path,
            show(&change.old),
            show(&change.new)
        );
        let _ = writeln!(out, "{}", style.paint("2", &text));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kix_engine::crd_upgrade::{SchemaChange, VersionHazard};
    use kix_manifest::ObjectKey;

    #[test]
    fn a_crds_changes_per_version_then_its_destructive_ones() {
        let change = |version: &str, path: &str, change: &str| SchemaChange {
            version: version.into(),
            path: path.into(),
            change: change.into(),
        };
        let upgrade = CrdUpgrade {
            key: ObjectKey {
                group: "apiextensions.k8s.io".into(),
                kind: "CustomResourceDefinition".into(),
                namespace: None,
                name: "widgets.example.com".into(),
            },
            stored_versions: vec!["v1alpha1".into(), "v1".into()],
            storage_version: Some("v1".into()),
            objects: Some(3),
            changes: vec![
                change("v1", "spec.replicas", "type integer → string"),
                change("v1alpha1", "", "served true → false"),
            ],
            destructive: vec![VersionHazard {
                version: "v1alpha1".into(),
                hazard: Hazard::NotServed,
            }],
        };
        let mut out = String::new();
        crd_upgrade_text(&mut out, &upgrade, Style { color: false });
        let expected = [
            "      v1: spec.replicas: type integer → string",
            "      v1alpha1: served true → false",
            "      destructive: stop serving stored version v1alpha1 of \
             CustomResourceDefinition.apiextensions.k8s.io/widgets.example.com \
             (3 widgets.example.com objects exist, stored versions v1alpha1, v1; \
             needs --accept-migrations)",
        ];
        assert_eq!(out, expected.map(|l| format!("{l}\n")).concat());
    }

    #[test]
    fn the_servers_warnings_follow_their_object() {
        let object = PlannedObject {
            key: ObjectKey {
                group: "apps".into(),
                kind: "Deployment".into(),
                namespace: Some("web".into()),
                name: "web".into(),
            },
            api_version: "apps/v1".into(),
            package: "web".into(),
            action: Action::Create,
            changes: vec![],
            fields: vec![],
            destructive: false,
            note: None,
            hook: None,
            warnings: vec!["spec.template.spec.nodeSelector[beta.kubernetes.io/os]: deprecated since v1.14; use \"kubernetes.io/os\" instead".into()],
            contenders: vec![],
            takes_with_it: None,
            deletion: None,
            activations: Default::default(),
            legacy: Default::default(),
        };
        let mut out = String::new();
        object_text(&mut out, &object, Style { color: false });
        assert_eq!(
            out,
            "  create    Deployment.apps web/web\n      warning: spec.template.spec.nodeSelector[beta.kubernetes.io/os]: deprecated since v1.14; use \"kubernetes.io/os\" instead\n"
        );
    }
}
