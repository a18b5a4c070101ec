//! Times as the product writes and reads them: RFC 3339 (records, bypass ends, managedFields)
//! and short durations for people (`2d4h`). Pure functions of their input: the engine (which
//! uses them as `drift_engine::time`) never reads a clock; whoever calls it passes the time.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jiff::SignedDuration;
use jiff::civil::DateTime;

/// 1970-01-01T00:00:00, where `SystemTime` counts from.
const EPOCH: DateTime = DateTime::constant(1970, 1, 1, 0, 0, 0, 0);

/// Parses an RFC 3339 time: `Z` or a numeric offset up to ±23:59 is required (jiff alone
/// would also take a time without offset, or offsets RFC 3339 does not allow). Every time
/// RFC 3339 writes in UTC is accepted, `0000-01-01T00:00:00Z` to `9999-12-31T23:59:59.999999999Z`
/// (jiff's `Timestamp` stops a day short of both ends, so the arithmetic is done here on the
/// civil time); a local time whose offset puts it outside that range is refused, since no
/// RFC 3339 text in UTC could show it again.
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let text = text.trim();
    let (local, offset) = split_offset(text)?;
    // A date alone is no time (jiff reads `2026-12-10` as its midnight).
    if !local.contains(['T', 't', ' ']) {
        return None;
    }
    let civil: DateTime = local.parse().ok()?;
    let utc = civil.checked_sub(offset).ok()?;
    if utc.year() < 0 {
        return None;
    }
    system_time(utc.duration_since(EPOCH))
}

/// The local part of an RFC 3339 time and its offset from UTC.
fn split_offset(text: &str) -> Option<(&str, SignedDuration)> {
    if let Some(local) = text.strip_suffix(['Z', 'z']) {
        return Some((local, SignedDuration::ZERO));
    }
    let at = text.len().checked_sub(6)?;
    let b = text.get(at..)?.as_bytes();
    let well_formed = matches!(b[0], b'+' | b'-')
        && b[3] == b':'
        && [b[1], b[2], b[4], b[5]].iter().all(u8::is_ascii_digit);
    if !well_formed {
        return None;
    }
    let (hours, minutes) = (
        i64::from((b[1] - b'0') * 10 + (b[2] - b'0')),
        i64::from((b[4] - b'0') * 10 + (b[5] - b'0')),
    );
    if hours > 23 || minutes > 59 {
        return None;
    }
    let magnitude = SignedDuration::from_secs(hours * 3_600 + minutes * 60);
    let offset = if b[0] == b'-' { -magnitude } else { magnitude };
    Some((&text[..at], offset))
}

fn system_time(since_epoch: SignedDuration) -> Option<SystemTime> {
    let magnitude = Duration::try_from(since_epoch.abs()).ok()?;
    if since_epoch.is_negative() {
        UNIX_EPOCH.checked_sub(magnitude)
    } else {
        UNIX_EPOCH.checked_add(magnitude)
    }
}

/// A time as a civil time in UTC; `None` outside the years 0000 to 9999 (which no RFC 3339
/// parse gives).
fn utc_civil(time: SystemTime) -> Option<DateTime> {
    let since_epoch = match time.duration_since(UNIX_EPOCH) {
        Ok(after) => SignedDuration::try_from(after).ok()?,
        Err(before) => -SignedDuration::try_from(before.duration()).ok()?,
    };
    EPOCH
        .checked_add(since_epoch)
        .ok()
        .filter(|civil| civil.year() >= 0)
}

/// Formats a time as RFC 3339 in UTC with microseconds, as records carry it.
pub fn format_rfc3339(time: SystemTime) -> String {
    match utc_civil(time) {
        Some(civil) => format!("{civil:.6}Z"),
        None => "1970-01-01T00:00:00.000000Z".to_owned(),
    }
}

/// Formats a time as RFC 3339 in UTC to the second (`2026-12-10T18:00:00Z`), as a person
/// reads a bypass end.
pub fn format_rfc3339_seconds(time: SystemTime) -> String {
    match utc_civil(time) {
        Some(civil) => format!("{civil:.0}Z"),
        None => "1970-01-01T00:00:00Z".to_owned(),
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

    /// Every time RFC 3339 writes in UTC is read, to its last nanosecond at both ends, and
    /// written back as it was; one step past either end is refused.
    #[test]
    fn rfc3339_to_both_ends_of_its_range() {
        let last = parse_rfc3339("9999-12-31T23:59:59Z").expect("the last second");
        assert_eq!(format_rfc3339_seconds(last), "9999-12-31T23:59:59Z");
        assert_eq!(format_rfc3339(last), "9999-12-31T23:59:59.000000Z");
        assert_eq!(
            last.duration_since(UNIX_EPOCH).unwrap().as_secs(),
            253_402_300_799
        );
        let very_last = parse_rfc3339("9999-12-31T23:59:59.999999999Z").unwrap();
        assert_eq!(
            very_last.duration_since(last).unwrap().as_nanos(),
            999_999_999
        );
        assert_eq!(format_rfc3339(very_last), "9999-12-31T23:59:59.999999Z");
        // The same instant in another offset, and the second before.
        assert_eq!(parse_rfc3339("9999-12-31T23:59:59+00:00"), Some(last));
        assert_eq!(parse_rfc3339("9999-12-31T22:59:59-01:00"), Some(last));
        assert_eq!(
            parse_rfc3339("9999-12-31T23:59:58Z"),
            Some(last - Duration::from_secs(1))
        );
        // jiff's own Timestamp ends here; RFC 3339 does not.
        assert!(parse_rfc3339("9999-12-30T22:00:01Z").is_some());

        let first = parse_rfc3339("0000-01-01T00:00:00Z").expect("the first second");
        assert_eq!(format_rfc3339_seconds(first), "0000-01-01T00:00:00Z");
        assert_eq!(
            UNIX_EPOCH.duration_since(first).unwrap().as_secs(),
            62_167_219_200
        );
        assert_eq!(parse_rfc3339("0000-01-01T01:00:00+01:00"), Some(first));
        assert_eq!(
            parse_rfc3339("1969-12-31T23:59:59Z"),
            Some(UNIX_EPOCH - Duration::from_secs(1))
        );

        for beyond in [
            // Past the end of year 9999 in UTC, or before year 0: no RFC 3339 text in UTC
            // shows them.
            "9999-12-31T23:59:59-00:01",
            "0000-01-01T00:00:00+00:01",
            // Not RFC 3339 at all.
            "10000-01-01T00:00:00Z",
            "9999-12-32T00:00:00Z",
            "9999-13-01T00:00:00Z",
            "9999-12-31T24:00:00Z",
            "9999-12-31Z",
            "-0001-12-31T23:59:59Z",
        ] {
            assert_eq!(parse_rfc3339(beyond), None, "{beyond}");
        }
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
