//! A small, total comparison of package version strings.

use std::cmp::Ordering;

/// Compares two version strings, "semver-ish":
///
/// 1. An optional leading `v` is ignored, as is build metadata after `+`.
/// 2. The rest splits at the first `-` into a release (`1.2.3`) and an
///    optional pre-release (`rc.1`).
/// 3. Releases compare component by component (split on `.`); a missing
///    component counts as `0`, so `1.2` == `1.2.0`. Two numeric components
///    compare as numbers (any length); otherwise as strings.
/// 4. With equal releases, a version without pre-release is greater
///    (`1.0.0` > `1.0.0-rc.1`); two pre-releases compare component by
///    component like releases, a shorter one being smaller when it is a prefix.
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    let (a_release, a_pre) = split_version(a);
    let (b_release, b_pre) = split_version(b);
    compare_dotted(a_release, b_release, true).then_with(|| match (a_pre, b_pre) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Greater,
        (Some(_), None) => Ordering::Less,
        (Some(a), Some(b)) => compare_dotted(a, b, false),
    })
}

fn split_version(v: &str) -> (&str, Option<&str>) {
    let v = v.strip_prefix('v').unwrap_or(v);
    let v = v.split_once('+').map_or(v, |(v, _build)| v);
    match v.split_once('-') {
        Some((release, pre)) => (release, Some(pre)),
        None => (v, None),
    }
}

/// Compares dot-separated components. With `pad_zero`, missing components
/// count as "0"; otherwise the shorter list is smaller.
fn compare_dotted(a: &str, b: &str, pad_zero: bool) -> Ordering {
    let mut a = a.split('.');
    let mut b = b.split('.');
    loop {
        let ord = match (a.next(), b.next()) {
            (None, None) => return Ordering::Equal,
            (Some(x), None) if pad_zero => compare_component(x, "0"),
            (None, Some(y)) if pad_zero => compare_component("0", y),
            (Some(_), None) => return Ordering::Greater,
            (None, Some(_)) => return Ordering::Less,
            (Some(x), Some(y)) => compare_component(x, y),
        };
        if ord != Ordering::Equal {
            return ord;
        }
    }
}

fn compare_component(a: &str, b: &str) -> Ordering {
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    if numeric(a) && numeric(b) {
        // Compare as numbers of any size: drop leading zeros, then the longer
        // number is larger, and equal lengths compare digit by digit.
        let a = a.trim_start_matches('0');
        let b = b.trim_start_matches('0');
        a.len().cmp(&b.len()).then_with(|| a.cmp(b))
    } else {
        a.cmp(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Ordering::*;

    #[test]
    fn compares() {
        for (a, b, want) in [
            ("1.0", "1.0", Equal),
            ("1.0", "1.0.0", Equal),
            ("v1.2.3", "1.2.3", Equal),
            ("1.2.3+build.5", "1.2.3", Equal),
            ("1.2", "1.10", Less),
            ("2", "10", Less),
            ("1.9.9", "2.0", Less),
            ("0010", "9", Greater),
            ("99999999999999999999999", "100000000000000000000000", Less),
            ("1.0.0-rc.1", "1.0.0", Less),
            ("1.0.0-rc.1", "1.0.0-rc.2", Less),
            ("1.0.0-rc.2", "1.0.0-rc.10", Less),
            ("1.0.0-alpha", "1.0.0-alpha.1", Less),
            ("1.0.0-alpha", "1.0.0-beta", Less),
            ("1.a", "1.b", Less),
            ("2024-01-01", "2024-01-02", Less),
        ] {
            assert_eq!(compare_versions(a, b), want, "{a} vs {b}");
            assert_eq!(compare_versions(b, a), want.reverse(), "{b} vs {a}");
        }
    }
}
