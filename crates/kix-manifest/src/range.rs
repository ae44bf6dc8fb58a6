//! Version ranges: the `from` of a migration.
//!
//! The syntax is deliberately small:
//!
//! | `from`              | matches                                   |
//! |---------------------|-------------------------------------------|
//! | `1.2.0`             | `>=1.2.0` (a plain version: from it on)   |
//! | `>=1.0.0 <2.0.0`    | every comparator holds (space-separated)  |
//! | `>1.0`, `<=1.5`, `=1.2.3` | one comparator                      |
//! | `1.x`, `1.*`        | `>=1 <2`                                  |
//! | `1.2.x`             | `>=1.2 <1.3`                              |
//! | `*`, `x`            | any version                               |
//!
//! Operators are `>=`, `>`, `<=`, `<` and `=`; an operator may be separated
//! from its version by spaces (`>= 1.0`). There is no `||`, `~` or `^`.
//! Versions compare with [`compare_versions`].
//!
//! A migration covers its `from` range below its `to`: `from: "1.0.0", to:
//! "2.0.0"` is the half-open range `[1.0.0, 2.0.0)`.

use std::cmp::Ordering;
use std::fmt;

use crate::version::compare_versions;

/// One end of a range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bound {
    pub version: String,
    pub inclusive: bool,
}

/// A (possibly unbounded) interval of versions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VersionRange {
    pub lower: Option<Bound>,
    pub upper: Option<Bound>,
}

impl VersionRange {
    /// Every version.
    pub fn any() -> VersionRange {
        VersionRange::default()
    }

    /// `>=version`.
    pub fn at_least(version: &str) -> VersionRange {
        VersionRange {
            lower: Some(Bound {
                version: version.to_owned(),
                inclusive: true,
            }),
            upper: None,
        }
    }

    /// `<version`.
    pub fn below(version: &str) -> VersionRange {
        VersionRange {
            lower: None,
            upper: Some(Bound {
                version: version.to_owned(),
                inclusive: false,
            }),
        }
    }

    /// Parses the syntax in the module documentation.
    pub fn parse(text: &str) -> Result<VersionRange, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("empty version range".to_owned());
        }
        if matches!(text, "*" | "x" | "X") {
            return Ok(VersionRange::any());
        }
        if !text.starts_with(['<', '>', '=']) {
            if text.contains(char::is_whitespace) {
                return Err(format!(
                    "{text:?}: a version range with several parts needs an operator (>=, >, <=, <, =) before each version"
                ));
            }
            return wildcard(text).unwrap_or_else(|| {
                check_version(text)?;
                Ok(VersionRange::at_least(text))
            });
        }
        let mut range = VersionRange::any();
        let mut tokens = text.split_whitespace();
        while let Some(token) = tokens.next() {
            let (op, rest) = split_operator(token)
                .ok_or_else(|| format!("{text:?}: {token:?} has no operator (>=, >, <=, <, =)"))?;
            let version = if rest.is_empty() {
                tokens
                    .next()
                    .ok_or_else(|| format!("{text:?}: {op:?} has no version after it"))?
            } else {
                rest
            };
            check_version(version).map_err(|e| format!("{text:?}: {e}"))?;
            let bound = |inclusive| Bound {
                version: version.to_owned(),
                inclusive,
            };
            let part = match op {
                ">=" => VersionRange {
                    lower: Some(bound(true)),
                    upper: None,
                },
                ">" => VersionRange {
                    lower: Some(bound(false)),
                    upper: None,
                },
                "<=" => VersionRange {
                    lower: None,
                    upper: Some(bound(true)),
                },
                "<" => VersionRange {
                    lower: None,
                    upper: Some(bound(false)),
                },
                _ => VersionRange {
                    lower: Some(bound(true)),
                    upper: Some(bound(true)),
                },
            };
            range = range.intersect(&part);
        }
        Ok(range)
    }

    /// The versions a migration covers: its `from` range below its `to`.
    pub fn of_migration(from: &str, to: &str) -> Result<VersionRange, String> {
        check_version(to).map_err(|e| format!("`to`: {e}"))?;
        Ok(VersionRange::parse(from)?.intersect(&VersionRange::below(to)))
    }

    /// The versions in both ranges.
    pub fn intersect(&self, other: &VersionRange) -> VersionRange {
        VersionRange {
            lower: tighter(&self.lower, &other.lower, Ordering::Greater),
            upper: tighter(&self.upper, &other.upper, Ordering::Less),
        }
    }

    /// Whether no version is in the range (versions are taken as dense: `(1.0,
    /// 1.1)` is not empty).
    pub fn is_empty(&self) -> bool {
        match (&self.lower, &self.upper) {
            (Some(lo), Some(hi)) => match compare_versions(&lo.version, &hi.version) {
                Ordering::Less => false,
                Ordering::Equal => !(lo.inclusive && hi.inclusive),
                Ordering::Greater => true,
            },
            _ => false,
        }
    }

    pub fn contains(&self, version: &str) -> bool {
        let above =
            self.lower
                .as_ref()
                .is_none_or(|lo| match compare_versions(version, &lo.version) {
                    Ordering::Greater => true,
                    Ordering::Equal => lo.inclusive,
                    Ordering::Less => false,
                });
        let below =
            self.upper
                .as_ref()
                .is_none_or(|hi| match compare_versions(version, &hi.version) {
                    Ordering::Less => true,
                    Ordering::Equal => hi.inclusive,
                    Ordering::Greater => false,
                });
        above && below
    }
}

/// `>=1.0.0 <2.0.0`; `*` for every version.
impl fmt::Display for VersionRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(lo) = &self.lower {
            parts.push(format!(
                "{}{}",
                if lo.inclusive { ">=" } else { ">" },
                lo.version
            ));
        }
        if let Some(hi) = &self.upper {
            parts.push(format!(
                "{}{}",
                if hi.inclusive { "<=" } else { "<" },
                hi.version
            ));
        }
        if parts.is_empty() {
            f.write_str("*")
        } else {
            f.write_str(&parts.join(" "))
        }
    }
}

/// The tighter of two bounds: the greater lower bound (`wanted` Greater) or
/// the smaller upper bound (`wanted` Less); at the same version the exclusive
/// one.
fn tighter(a: &Option<Bound>, b: &Option<Bound>, wanted: Ordering) -> Option<Bound> {
    match (a, b) {
        (None, x) | (x, None) => x.clone(),
        (Some(a), Some(b)) => {
            let ord = compare_versions(&a.version, &b.version);
            if ord == wanted || (ord == Ordering::Equal && !a.inclusive) {
                Some(a.clone())
            } else {
                Some(b.clone())
            }
        }
    }
}

fn split_operator(token: &str) -> Option<(&str, &str)> {
    [">=", "<=", ">", "<", "="]
        .into_iter()
        .find_map(|op| token.strip_prefix(op).map(|rest| (op, rest)))
}

fn check_version(version: &str) -> Result<(), String> {
    if version.is_empty() {
        return Err("empty version".to_owned());
    }
    if version.contains(|c: char| c.is_whitespace() || matches!(c, '<' | '>' | '=' | '*')) {
        return Err(format!("{version:?} is not a version"));
    }
    Ok(())
}

/// `1.x`, `1.2.*`, `1.x.x`: the prefix before the first wildcard component,
/// as `>=prefix <prefix with its last component + 1`. None when `text` has
/// no wildcard component.
fn wildcard(text: &str) -> Option<Result<VersionRange, String>> {
    let text = text.strip_prefix('v').unwrap_or(text);
    let parts: Vec<&str> = text.split('.').collect();
    let is_wild = |p: &str| matches!(p, "x" | "X" | "*");
    let first = parts.iter().position(|p| is_wild(p))?;
    if !parts[first..].iter().all(|p| is_wild(p)) {
        return Some(Err(format!(
            "{text:?}: only trailing components may be wildcards"
        )));
    }
    if first == 0 {
        return Some(Ok(VersionRange::any()));
    }
    let prefix = &parts[..first];
    let Some(last) = prefix.last().and_then(|p| p.parse::<u64>().ok()) else {
        return Some(Err(format!(
            "{text:?}: the component before a wildcard must be a number"
        )));
    };
    let lower = prefix.join(".");
    let mut next: Vec<String> = prefix.iter().map(|p| (*p).to_owned()).collect();
    if let Some(slot) = next.last_mut() {
        *slot = (last + 1).to_string();
    }
    Some(Ok(VersionRange {
        lower: Some(Bound {
            version: lower,
            inclusive: true,
        }),
        upper: Some(Bound {
            version: next.join("."),
            inclusive: false,
        }),
    }))
}
