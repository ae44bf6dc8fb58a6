//! The one reading of a duration on a command line, shared by the CLI and
//! the operator: `90s`, `5m`, `1h`, `2d`, `1h30m`, or plain seconds.

use std::time::Duration;

/// Reads `text` (surrounding blanks ignored): a number alone is seconds,
/// otherwise humantime's spans (`s`, `m`, `h`, `d`, `w`, and their long
/// names, summed: `1h 30m`).
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse()
            .map(Duration::from_secs)
            .map_err(|_| format!("{text:?} is too large a duration"));
    }
    humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is not a duration (like 90s, 5m, 1h, 2d): {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_alike_on_every_command_line() {
        let secs = |s| Ok(Duration::from_secs(s));
        assert_eq!(parse("90s"), secs(90));
        assert_eq!(parse("5m"), secs(300));
        assert_eq!(parse("1h"), secs(3600));
        assert_eq!(parse("2d"), secs(172_800));
        assert_eq!(parse("1h30m"), secs(5400));
        assert_eq!(parse("120"), secs(120));
        assert_eq!(parse(" 60s\n"), secs(60));
        assert_eq!(parse("0"), secs(0));
        for bad in ["", " ", "5x", "m", "-1s", "5 m s", "99999999999999999999"] {
            let err = parse(bad).expect_err(bad);
            assert!(err.contains("duration"), "{bad:?}: {err}");
        }
    }
}
