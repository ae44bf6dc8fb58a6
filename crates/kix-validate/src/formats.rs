//! The string formats the apiserver checks, and resource quantities.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use base64::Engine as _;
use serde_json::Value;

use crate::schema::Flavor;

/// Whether `s` has `format`. Formats the apiserver does not check (and
/// unknown ones) pass. Built-in kinds decode only `byte` and `date-time`.
pub(crate) fn string_ok(format: &str, s: &str, flavor: Flavor) -> bool {
    match format {
        "byte" => base64::engine::general_purpose::STANDARD.decode(s).is_ok(),
        "date-time" | "datetime" => chrono::DateTime::parse_from_rfc3339(s).is_ok(),
        _ if flavor == Flavor::BuiltIn => true,
        "date" => chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok(),
        "ipv4" => s.parse::<Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<Ipv6Addr>().is_ok(),
        "cidr" => is_cidr(s),
        "uuid" | "uuid3" | "uuid4" | "uuid5" => is_uuid(s),
        "mac" => is_mac(s),
        "hostname" => is_hostname(s),
        _ => true,
    }
}

/// Go's integer width for `int32`/`int64` fields: a message when `value`
/// does not fit.
pub(crate) fn int_width_violation(format: &str, value: &Value) -> Option<String> {
    let (min, max) = match format {
        "int32" => (i64::from(i32::MIN), i64::from(i32::MAX)),
        "int64" => (i64::MIN, i64::MAX),
        _ => return None,
    };
    let fits = value.as_i64().is_some_and(|n| (min..=max).contains(&n));
    (!fits && (value.is_i64() || value.is_u64())).then(|| format!("does not fit {format}"))
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    match ip.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => bits <= 32,
        Ok(IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}

fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.chars().all(|c| c.is_ascii_hexdigit()))
}

fn is_mac(s: &str) -> bool {
    let groups: Vec<&str> = s.split([':', '-']).collect();
    matches!(groups.len(), 6 | 8 | 20)
        && groups
            .iter()
            .all(|g| g.len() == 2 && g.chars().all(|c| c.is_ascii_hexdigit()))
}

fn is_hostname(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// A Kubernetes resource quantity: a signed decimal number and a suffix
/// (binary `Ki`..`Ei`, decimal `n u m "" k M G T P E`, or an exponent
/// `e3`/`E-2`).
pub(crate) fn is_quantity(s: &str) -> bool {
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    let number_end = unsigned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_end);
    let digits = number.chars().filter(char::is_ascii_digit).count();
    if digits == 0 || number.matches('.').count() > 1 {
        return false;
    }
    match suffix {
        "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" | "n" | "u" | "m" | "k" | "M" | "G" | "T"
        | "P" | "E" => true,
        _ => suffix
            .strip_prefix(['e', 'E'])
            .map(|exp| exp.strip_prefix(['+', '-']).unwrap_or(exp))
            .is_some_and(|exp| !exp.is_empty() && exp.chars().all(|c| c.is_ascii_digit())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        for ok in [
            "1", "500m", "1.5Gi", "+2", "-3k", ".5", "1e3", "2E-2", "100Mi", "0",
        ] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in ["", "Gi", "1GB", "1.2.3", "abc", "1 Gi", "1e", "1Kii", "--1"] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }

    #[test]
    fn formats_checked_for_custom_resources() {
        let custom = Flavor::Custom;
        assert!(string_ok("cidr", "10.0.0.0/8", custom));
        assert!(!string_ok("cidr", "10.0.0.0/33", custom));
        assert!(string_ok(
            "uuid",
            "123e4567-e89b-12d3-a456-426614174000",
            custom
        ));
        assert!(!string_ok("uuid", "123e4567", custom));
        assert!(!string_ok("date-time", "yesterday", custom));
        assert!(string_ok("date-time", "2026-01-02T03:04:05Z", custom));
        assert!(!string_ok("hostname", "-bad.example", custom));
        // Built-in kinds only decode byte and date-time.
        assert!(string_ok("cidr", "nonsense", Flavor::BuiltIn));
        assert!(!string_ok("byte", "not base64!", Flavor::BuiltIn));
    }
}
