//! Times as the product writes and reads them: RFC 3339 (records, bypass ends, managedFields)
//! and short durations for people (`2d4h`). Pure functions of their input: the engine never
//! reads a clock; whoever calls it passes the time it judges at.

use std::time::{Duration, SystemTime};

/// Parses an RFC 3339 time: `Z` or a numeric offset up to ±23:59 is required (jiff alone
/// would also take a time without offset, or offsets RFC 3339 does not allow).
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let text = text.trim();
    let has_offset = text.ends_with(['Z', 'z'])
        || text
            .len()
            .checked_sub(6)
            .and_then(|at| text.get(at..))
            .is_some_and(|offset| {
                let b = offset.as_bytes();
                matches!(b[0], b'+' | b'-')
                    && b[3] == b':'
                    && [b[1], b[2], b[4], b[5]].iter().all(u8::is_ascii_digit)
                    && (b[1] - b'0') * 10 + (b[2] - b'0') <= 23
                    && (b[4] - b'0') * 10 + (b[5] - b'0') <= 59
            });
    if !has_offset {
        return None;
    }
    let timestamp: jiff::Timestamp = text.parse().ok()?;
    Some(SystemTime::from(timestamp))
}

/// Formats a time as RFC 3339 in UTC with microseconds, as records carry it.
pub fn format_rfc3339(time: SystemTime) -> String {
    match jiff::Timestamp::try_from(time) {
        Ok(timestamp) => format!("{timestamp:.6}"),
        Err(_) => "1970-01-01T00:00:00.000000Z".to_owned(),
    }
}

/// Formats a time as RFC 3339 in UTC to the second (`2026-12-10T18:00:00Z`), as a person
/// reads a bypass end.
pub fn format_rfc3339_seconds(time: SystemTime) -> String {
    match jiff::Timestamp::try_from(time) {
        Ok(timestamp) => format!("{timestamp:.0}"),
        Err(_) => "1970-01-01T00:00:00Z".to_owned(),
    }
}

/// A duration as a person reads it: its two largest units of days, hours, minutes and
/// seconds (`2d4h`, `4h`, `59m30s`, `0s`); what is below the second unit is dropped.
pub fn human_duration(duration: Duration) -> String {
    const UNITS: [(u64, &str); 4] = [(86_400, "d"), (3_600, "h"), (60, "m"), (1, "s")];
    let mut left = duration.as_secs();
    let mut text = String::new();
    let mut parts = 0;
    for (size, unit) in UNITS {
        let count = left / size;
        left %= size;
        if count > 0 || (parts > 0 && parts < 2) {
            if count > 0 {
                text.push_str(&count.to_string());
                text.push_str(unit);
            }
            parts += 1;
        }
        if parts == 2 {
            break;
        }
    }
    if text.is_empty() {
        text.push_str("0s");
    }
    text
}

/// Parses a duration as rules and flags write it (`72h`, `30m`, `1h30m`, `7d`): at least one
/// second, whole seconds only.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text.trim()).map_err(|e| {
        format!("{text:?} is not a duration like 72h, 30m or 1h30m (units s, m, h, d): {e}")
    })?;
    if duration.subsec_nanos() != 0 {
        return Err(format!("{text:?} is not a whole number of seconds"));
    }
    if duration.is_zero() {
        return Err(format!("{text:?} is not longer than zero"));
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_with_offsets_only() {
        let utc = parse_rfc3339("2026-12-10T18:00:00Z").unwrap();
        assert_eq!(parse_rfc3339("2026-12-10T20:00:00+02:00"), Some(utc));
        assert_eq!(parse_rfc3339("2026-12-10t13:00:00-05:00"), Some(utc));
        assert_eq!(parse_rfc3339(" 2026-12-10T18:00:00z "), Some(utc));
        for bad in [
            "2026-12-10T18:00:00",
            "2026-12-10",
            "true",
            "2026-12-10T18:00:00+24:00",
            "",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
        assert_eq!(format_rfc3339_seconds(utc), "2026-12-10T18:00:00Z");
        assert_eq!(format_rfc3339(utc), "2026-12-10T18:00:00.000000Z");
    }

    #[test]
    fn durations_for_people() {
        for (seconds, text) in [
            (0, "0s"),
            (1, "1s"),
            (59, "59s"),
            (60, "1m"),
            (3_599, "59m59s"),
            (3_600, "1h"),
            (3_661, "1h1m"),
            (187_200, "2d4h"),
            (187_259, "2d4h"),
            (86_401, "1d"),
            (90_000, "1d1h"),
        ] {
            assert_eq!(
                human_duration(Duration::from_secs(seconds)),
                text,
                "{seconds}"
            );
        }
    }

    #[test]
    fn durations_of_rules_and_flags() {
        assert_eq!(parse_duration("72h"), Ok(Duration::from_secs(72 * 3600)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(30 * 86_400)));
        for bad in ["", "72", "h", "-1h", "0s", "1.5s", "500ms", "forever"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
