//! Times as `status` shows them: how old an RFC 3339 time is, and a duration as kubectl writes
//! it (`45s`, `3m`, `2h5m`, `4d`); for the agents' sources, the pods and the audit's runs.

use std::time::{Duration, SystemTime};

use drift_api::violation::parse_rfc3339;

/// How old `time` is at `now` (zero for a time in the future).
pub(super) fn age(time: &str, now: SystemTime) -> Option<Duration> {
    let at = parse_rfc3339(time)?;
    Some(now.duration_since(at).unwrap_or_default())
}

/// How long ago `time` was, as kubectl writes it (`never` for none, the text itself when it is
/// not an RFC 3339 time).
pub(super) fn ago(time: Option<&str>, now: SystemTime) -> String {
    match time {
        None => "never".to_owned(),
        Some(t) => match age(t, now) {
            Some(age) => format!("{} ago", short_duration(age)),
            None => t.to_owned(),
        },
    }
}

/// `45s`, `3m`, `2h5m`, `4d` — kubectl's way.
pub(super) fn short_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..120 => format!("{s}s"),
        120..3600 => format!("{}m", s / 60),
        3600..86400 if s % 3600 >= 60 && s < 8 * 3600 => {
            format!("{}h{}m", s / 3600, (s % 3600) / 60)
        }
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_as_kubectl_writes_them() {
        let d = Duration::from_secs;
        assert_eq!(short_duration(d(45)), "45s");
        assert_eq!(short_duration(d(119)), "119s");
        assert_eq!(short_duration(d(600)), "10m");
        assert_eq!(short_duration(d(3600 + 300)), "1h5m");
        assert_eq!(short_duration(d(10 * 3600)), "10h");
        assert_eq!(short_duration(d(3 * 86400)), "3d");
    }
}
