//! Deploy order, decided in one place: which group an object is applied in,
//! which groups go together (waves), the rank batches inside a group, and the
//! reverse order of deletions.
//!
//! Groups: the build's CRDs (so their kinds are served), its Namespaces (so
//! namespaced objects have a home), then each package in dependency order.
//! A wave holds the groups that apply and wait for health concurrently:
//! CRDs, then Namespaces, then the packages by dependency depth (a package's
//! wave comes after the waves of everything it depends on). Dependency cycles
//! never get here: reading the build refuses them.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;

use kix_manifest::{ObjectKey, Package, group_kind, kind_rank};
use serde::{Serialize, Serializer};

use crate::desired::Desired;

/// A deploy group: objects applied together, then waited for together.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Group {
    /// The build's CustomResourceDefinitions, of every package.
    Crds,
    /// The build's Namespaces, of every package.
    Namespaces,
    /// A package's other objects.
    Package(String),
}

impl Group {
    /// The group of an object of `package`.
    pub fn of(key: &ObjectKey, package: &str) -> Group {
        match key.group_kind() {
            group_kind::CUSTOM_RESOURCE_DEFINITION => Group::Crds,
            group_kind::NAMESPACE => Group::Namespaces,
            _ => Group::Package(package.to_owned()),
        }
    }

    /// The package, for a package's group.
    pub fn package(&self) -> Option<&str> {
        match self {
            Group::Package(name) => Some(name),
            _ => None,
        }
    }

    /// The group whose start runs a migration action of `package` on
    /// `target`, the build's object it names (if any): a CRD or Namespace of
    /// the build is handled before any package is applied.
    pub fn of_migration(target: Option<&ObjectKey>, package: &str) -> Group {
        match target {
            Some(key) => Group::of(key, package),
            None => Group::Package(package.to_owned()),
        }
    }
}

/// The text users see in progress lines and the TUI.
impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Group::Crds => f.pad("CustomResourceDefinitions"),
            Group::Namespaces => f.pad("Namespaces"),
            Group::Package(name) => f.pad(&format!("package {name}")),
        }
    }
}

/// As the text users see: events serialize as they always did.
impl Serialize for Group {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// What the order needs to know of an object.
pub trait Member {
    fn key(&self) -> &ObjectKey;
    fn package(&self) -> &str;
}

impl Member for Desired {
    fn key(&self) -> &ObjectKey {
        &self.key
    }
    fn package(&self) -> &str {
        &self.package
    }
}

/// One group of a deploy: its objects and the groups it waits for.
#[derive(Debug)]
pub struct Step<'a, T> {
    pub group: Group,
    pub objects: Vec<&'a T>,
    pub depends_on: Vec<Group>,
}

/// The groups of a deploy in order, and the waves they run in (indices
/// into `steps`).
#[derive(Debug)]
pub struct Order<'a, T> {
    pub steps: Vec<Step<'a, T>>,
    pub waves: Vec<Vec<usize>>,
}

impl<'a, T: Member> Order<'a, T> {
    /// The order of `objects`, whose packages are `packages` (in the build's
    /// order, dependencies first). CRD and Namespace groups appear only when
    /// the build has some; every package has its group, empty or not.
    pub fn of(packages: &[Package], objects: &'a [T]) -> Order<'a, T> {
        let mut crds = Vec::new();
        let mut namespaces = Vec::new();
        let mut by_package: BTreeMap<&str, Vec<&T>> = BTreeMap::new();
        for o in objects {
            match Group::of(o.key(), "") {
                Group::Crds => crds.push(o),
                Group::Namespaces => namespaces.push(o),
                Group::Package(_) => by_package.entry(o.package()).or_default().push(o),
            }
        }
        let mut steps = Vec::with_capacity(packages.len() + 2);
        for (group, members) in [(Group::Crds, crds), (Group::Namespaces, namespaces)] {
            if !members.is_empty() {
                steps.push(Step {
                    group,
                    objects: members,
                    depends_on: vec![],
                });
            }
        }
        for package in packages {
            steps.push(Step {
                group: Group::Package(package.name.clone()),
                objects: by_package.remove(package.name.as_str()).unwrap_or_default(),
                depends_on: package
                    .depends_on
                    .iter()
                    .map(|d| Group::Package(d.clone()))
                    .collect(),
            });
        }
        let waves = waves(&steps);
        Order { steps, waves }
    }
}

/// Waves of `steps`: each CRD or Namespace group its own, then each package
/// one after the deepest of its dependencies. A dependency not (yet) placed
/// is not waited for.
fn waves<T>(steps: &[Step<'_, T>]) -> Vec<Vec<usize>> {
    let first_package_wave = steps.iter().filter(|s| s.group.package().is_none()).count();
    let mut depth: BTreeMap<&Group, usize> = BTreeMap::new();
    let mut waves: Vec<Vec<usize>> = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let wave = match step.group {
            Group::Package(_) => step
                .depends_on
                .iter()
                .filter_map(|d| depth.get(d))
                .map(|w| w + 1)
                .max()
                .unwrap_or(first_package_wave)
                .max(first_package_wave),
            _ => i,
        };
        depth.insert(&step.group, wave);
        if waves.len() <= wave {
            waves.resize(wave + 1, Vec::new());
        }
        waves[wave].push(i);
    }
    waves
}

/// The rank batches a group applies one after the other, lowest
/// [`kind_rank`] first, in the given order inside a rank.
pub fn apply_batches<T>(items: Vec<T>, rank: impl Fn(&T) -> u8) -> Vec<Vec<T>> {
    let mut ranks: BTreeMap<u8, Vec<T>> = BTreeMap::new();
    for item in items {
        ranks.entry(rank(&item)).or_default().push(item);
    }
    ranks.into_values().collect()
}

/// How many apply or delete futures are built at a time. Each is
/// kilobytes: building a whole rank's at once held 250 MB at 50,000 objects.
pub const CHUNK: usize = 256;

/// Each batch of `batches` (ranks, run one after the other) cut in chunks
/// of at most [`CHUNK`], in order.
pub fn chunks<T>(batches: Vec<Vec<T>>) -> impl Iterator<Item = Vec<T>> {
    batches.into_iter().flat_map(|batch| {
        let mut items = batch.into_iter().peekable();
        std::iter::from_fn(move || {
            items.peek()?;
            Some(items.by_ref().take(CHUNK).collect())
        })
    })
}

/// Deletions run in reverse apply order: highest [`kind_rank`] first, then
/// by key.
pub fn prune_order(a: &ObjectKey, b: &ObjectKey) -> Ordering {
    let ra = kind_rank(&a.group, &a.kind);
    let rb = kind_rank(&b.group, &b.kind);
    rb.cmp(&ra).then_with(|| a.cmp(b))
}

/// The rank batches a prune deletes one after the other: runs of one
/// [`kind_rank`] in `items` (already in [`prune_order`]).
pub fn prune_batches<T>(items: Vec<T>, key: impl Fn(&T) -> &ObjectKey) -> Vec<Vec<T>> {
    let mut batches: Vec<Vec<T>> = Vec::new();
    let mut last_rank = None;
    for item in items {
        let k = key(&item);
        let rank = kind_rank(&k.group, &k.kind);
        if last_rank != Some(rank) {
            batches.push(Vec::new());
            last_rank = Some(rank);
        }
        if let Some(batch) = batches.last_mut() {
            batch.push(item);
        }
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Obj(ObjectKey, &'static str);

    impl Member for Obj {
        fn key(&self) -> &ObjectKey {
            &self.0
        }
        fn package(&self) -> &str {
            self.1
        }
    }

    fn key(group: &str, kind: &str, name: &str) -> ObjectKey {
        ObjectKey {
            group: group.into(),
            kind: kind.into(),
            namespace: None,
            name: name.into(),
        }
    }

    #[test]
    fn chunks_keep_ranks_apart_and_order_inside_them() {
        let ranks = vec![(0..600).collect::<Vec<u32>>(), vec![600, 601]];
        let chunks: Vec<Vec<u32>> = chunks(ranks).collect();
        let sizes: Vec<usize> = chunks.iter().map(Vec::len).collect();
        assert_eq!(sizes, [CHUNK, CHUNK, 600 - 2 * CHUNK, 2]);
        assert_eq!(chunks.concat(), (0..602).collect::<Vec<u32>>());
        assert_eq!(super::chunks(Vec::<Vec<u32>>::new()).count(), 0);
    }

    fn crd(name: &str) -> ObjectKey {
        key("apiextensions.k8s.io", "CustomResourceDefinition", name)
    }

    fn ns(name: &str) -> ObjectKey {
        key("", "Namespace", name)
    }

    fn cm(name: &str) -> ObjectKey {
        key("", "ConfigMap", name)
    }

    fn package(name: &str, depends_on: &[&str]) -> Package {
        Package {
            name: name.into(),
            version: "1".into(),
            depends_on: depends_on.iter().map(|d| d.to_string()).collect(),
            namespace: None,
            migrations: vec![],
            handoff: vec![],
            tests: vec![],
            objects: vec![],
        }
    }

    /// (group shown, object names) per step.
    type Steps = Vec<(String, Vec<String>)>;

    /// The steps, and the waves as group texts.
    fn shape(order: &Order<'_, Obj>) -> (Steps, Vec<Vec<String>>) {
        let steps = order
            .steps
            .iter()
            .map(|s| {
                let names = s.objects.iter().map(|o| o.0.name.clone()).collect();
                (s.group.to_string(), names)
            })
            .collect();
        let waves = order
            .waves
            .iter()
            .map(|w| {
                w.iter()
                    .map(|&i| order.steps[i].group.to_string())
                    .collect()
            })
            .collect();
        (steps, waves)
    }

    #[test]
    fn crds_then_namespaces_then_packages_of_any_package() {
        let objects = vec![
            Obj(cm("b-cfg"), "b"),
            Obj(ns("b-ns"), "b"),
            Obj(crd("widgets.example.com"), "b"),
            Obj(cm("a-cfg"), "a"),
            Obj(ns("a-ns"), "a"),
        ];
        let packages = [package("a", &[]), package("b", &["a"])];
        let (steps, waves) = shape(&Order::of(&packages, &objects));
        assert_eq!(
            steps,
            vec![
                (
                    "CustomResourceDefinitions".to_string(),
                    vec!["widgets.example.com".to_string()]
                ),
                (
                    "Namespaces".to_string(),
                    vec!["b-ns".to_string(), "a-ns".to_string()]
                ),
                ("package a".to_string(), vec!["a-cfg".to_string()]),
                ("package b".to_string(), vec!["b-cfg".to_string()]),
            ]
        );
        assert_eq!(
            waves,
            vec![
                vec!["CustomResourceDefinitions"],
                vec!["Namespaces"],
                vec!["package a"],
                vec!["package b"],
            ]
        );
    }

    #[test]
    fn independent_packages_share_a_wave_and_dependents_wait_for_the_deepest() {
        // c depends on a and d; d on b: c comes after d's wave, not a's.
        let packages = [
            package("a", &[]),
            package("b", &[]),
            package("d", &["b"]),
            package("c", &["a", "d"]),
            package("e", &[]),
        ];
        let objects = vec![Obj(crd("x.example.com"), "a")];
        let order = Order::of(&packages, &objects);
        let (_, waves) = shape(&order);
        assert_eq!(
            waves,
            vec![
                vec!["CustomResourceDefinitions"],
                vec!["package a", "package b", "package e"],
                vec!["package d"],
                vec!["package c"],
            ]
        );
        assert_eq!(
            order.steps[4].depends_on,
            vec![Group::Package("a".into()), Group::Package("d".into())]
        );
    }

    #[test]
    fn without_crds_or_namespaces_packages_start_at_the_first_wave() {
        let packages = [package("a", &[]), package("b", &["a"]), package("c", &[])];
        let objects = vec![Obj(cm("a-cfg"), "a")];
        let (steps, waves) = shape(&Order::of(&packages, &objects));
        // Every package has its group, even with no objects.
        assert_eq!(steps.len(), 3);
        assert_eq!(steps[1], ("package b".to_string(), vec![]));
        assert_eq!(
            waves,
            vec![vec!["package a", "package c"], vec!["package b"]]
        );
    }

    #[test]
    fn a_dependency_on_a_package_not_in_the_build_is_not_waited_for() {
        let packages = [package("a", &["gone"])];
        let (_, waves) = shape(&Order::of(&packages, &Vec::<Obj>::new()));
        assert_eq!(waves, vec![vec!["package a"]]);
    }

    #[test]
    fn group_text_is_what_users_see() {
        assert_eq!(Group::Crds.to_string(), "CustomResourceDefinitions");
        assert_eq!(Group::Namespaces.to_string(), "Namespaces");
        assert_eq!(Group::Package("web".into()).to_string(), "package web");
        // Padding works as for the strings it replaces (TUI columns).
        assert_eq!(
            format!("{:<12}|", Group::Package("a".into())),
            "package a   |"
        );
        assert_eq!(
            serde_json::to_string(&Group::Package("web".into())).ok(),
            Some("\"package web\"".to_string())
        );
    }

    #[test]
    fn migrations_run_with_the_crd_or_namespace_group_of_their_target() {
        assert_eq!(
            Group::of_migration(Some(&crd("x.example.com")), "db"),
            Group::Crds
        );
        assert_eq!(
            Group::of_migration(Some(&ns("data")), "db"),
            Group::Namespaces
        );
        // Any other object, even of another package, or none of the build:
        // the migration's own package.
        assert_eq!(
            Group::of_migration(Some(&cm("cfg")), "db"),
            Group::Package("db".into())
        );
        assert_eq!(Group::of_migration(None, "db"), Group::Package("db".into()));
    }

    #[test]
    fn a_crd_named_like_a_core_kind_of_another_group_is_a_package_object() {
        let fake = key("example.com", "Namespace", "n");
        assert_eq!(Group::of(&fake, "p"), Group::Package("p".into()));
    }

    #[test]
    fn apply_batches_go_by_rank_and_keep_the_order_inside_one() {
        let items = vec![
            ("deploy", 4),
            ("svc", 3),
            ("cm-b", 2),
            ("cm-a", 2),
            ("hook", 6),
        ];
        let batches = apply_batches(items, |i| i.1);
        let names: Vec<Vec<&str>> = batches
            .iter()
            .map(|b| b.iter().map(|i| i.0).collect())
            .collect();
        assert_eq!(
            names,
            vec![
                vec!["cm-b", "cm-a"],
                vec!["svc"],
                vec!["deploy"],
                vec!["hook"]
            ]
        );
    }

    #[test]
    fn deletions_run_in_reverse_apply_order() {
        let mut keys = vec![
            crd("x.example.com"),
            cm("b"),
            ns("n"),
            key("apps", "Deployment", "web"),
            cm("a"),
            key(
                "admissionregistration.k8s.io",
                "ValidatingWebhookConfiguration",
                "v",
            ),
        ];
        keys.sort_by(prune_order);
        let kinds: Vec<String> = keys
            .iter()
            .map(|k| format!("{} {}", k.kind, k.name))
            .collect();
        assert_eq!(
            kinds,
            vec![
                "ValidatingWebhookConfiguration v",
                "Deployment web",
                "ConfigMap a",
                "ConfigMap b",
                "Namespace n",
                "CustomResourceDefinition x.example.com",
            ]
        );
        let batches = prune_batches(keys, |k| k);
        let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![1, 1, 2, 1, 1]);
    }
}
