//! The bypass annotation read at one time (reference §3 step 4): `true` is a bypass without an
//! end, an RFC 3339 time still ahead is a bypass until then; a time already past, or any other
//! value, is no bypass. A rule's `maxBypass` caps how far ahead an end may be, and then `true`
//! is not honoured either. Facts only: the texts are rendered in [`crate::message`].

use std::time::{Duration, SystemTime};

/// A bypass that is honoured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bypass {
    /// When it ends; `None` for `true`, a bypass without an end.
    pub end: Option<SystemTime>,
    /// The time it was read at, for "in 2d4h".
    pub now: SystemTime,
}

/// Why a bypass annotation is not honoured: the object is judged as if it had none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BypassRefusal {
    /// Its end is now or has passed.
    Expired { end: SystemTime, now: SystemTime },
    /// Neither `true` nor an RFC 3339 time with an offset (the value, cut to 64 characters).
    Invalid { value: String },
    /// `true` under a rule with `maxBypass`: a bypass there must end.
    NoEndUnderMax { max: Duration },
    /// An end further ahead than the rule's `maxBypass`.
    BeyondMax {
        end: SystemTime,
        now: SystemTime,
        max: Duration,
    },
}

/// What a bypass annotation's value means at `now` under a rule's `maxBypass`.
pub fn read_bypass(
    value: &str,
    now: SystemTime,
    max: Option<Duration>,
) -> Result<Bypass, BypassRefusal> {
    let trimmed = value.trim();
    if trimmed.eq_ignore_ascii_case("true") {
        return match max {
            Some(max) => Err(BypassRefusal::NoEndUnderMax { max }),
            None => Ok(Bypass { end: None, now }),
        };
    }
    let Some(end) = crate::time::parse_rfc3339(trimmed) else {
        return Err(BypassRefusal::Invalid {
            value: crate::truncate::truncate_chars(value, 64),
        });
    };
    // "Still ahead": an end exactly now has ended.
    if end <= now {
        return Err(BypassRefusal::Expired { end, now });
    }
    if let Some(max) = max
        && end.duration_since(now).unwrap_or(Duration::MAX) > max
    {
        return Err(BypassRefusal::BeyondMax { end, now, max });
    }
    Ok(Bypass {
        end: Some(end),
        now,
    })
}

impl Bypass {
    /// How long is left, when it has an end.
    pub fn remaining(&self) -> Option<Duration> {
        self.end
            .map(|end| end.duration_since(self.now).unwrap_or(Duration::ZERO))
    }
}

pub use drift_api::status::BypassEnd;

/// How the audit counts an object with the annotation read as `read`.
pub fn end_of(read: &Result<Bypass, BypassRefusal>) -> BypassEnd {
    match read {
        Ok(Bypass { end: None, .. }) => BypassEnd::None,
        Ok(_) => BypassEnd::Active,
        Err(BypassRefusal::Expired { .. }) => BypassEnd::Expired,
        Err(_) => BypassEnd::NotHonoured,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> SystemTime {
        crate::time::parse_rfc3339(text).unwrap()
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn ends_at_the_boundaries() {
        let now = at("2026-12-04T12:00:00Z");
        let second = Duration::from_secs(1);
        let max = Some(72 * HOUR);
        type Case = (
            &'static str,
            Option<Duration>,
            Result<Option<&'static str>, &'static str>,
        );
        let cases: &[Case] = &[
            ("true", None, Ok(None)),
            (" TRUE ", None, Ok(None)),
            ("True", max, Err("no-end")),
            // An end exactly now has ended; a second past too; a second ahead has not.
            ("2026-12-04T12:00:00Z", None, Err("expired")),
            ("2026-12-04T11:59:59Z", None, Err("expired")),
            (
                "2026-12-04T12:00:01Z",
                None,
                Ok(Some("2026-12-04T12:00:01Z")),
            ),
            // Time zones: the same instants written with offsets.
            ("2026-12-04T14:00:00+02:00", None, Err("expired")),
            (
                "2026-12-04T07:00:01-05:00",
                None,
                Ok(Some("2026-12-04T12:00:01Z")),
            ),
            (
                "2026-12-04T12:00:00.5Z",
                None,
                Ok(Some("2026-12-04T12:00:00.5Z")),
            ),
            // maxBypass exactly is honoured; a second over is not.
            (
                "2026-12-07T12:00:00Z",
                max,
                Ok(Some("2026-12-07T12:00:00Z")),
            ),
            ("2026-12-07T12:00:01Z", max, Err("beyond")),
            (
                "2026-12-07T13:00:00+01:00",
                max,
                Ok(Some("2026-12-07T12:00:00Z")),
            ),
            ("2026-12-07T13:00:01+01:00", max, Err("beyond")),
            // Anything else is no bypass.
            ("false", None, Err("invalid")),
            ("", None, Err("invalid")),
            ("2026-12-07T12:00:00", None, Err("invalid")),
            ("2026-12-07", None, Err("invalid")),
            ("yes", max, Err("invalid")),
        ];
        for (value, max, want) in cases {
            let got = read_bypass(value, now, *max);
            let got = match &got {
                Ok(bypass) => Ok(bypass.end),
                Err(BypassRefusal::Expired { .. }) => Err("expired"),
                Err(BypassRefusal::Invalid { .. }) => Err("invalid"),
                Err(BypassRefusal::NoEndUnderMax { .. }) => Err("no-end"),
                Err(BypassRefusal::BeyondMax { .. }) => Err("beyond"),
            };
            let want = want.map(|end| end.map(at));
            assert_eq!(got, want, "{value:?} under {max:?}");
        }
        assert_eq!(
            read_bypass("2026-12-04T12:00:01Z", now, None)
                .unwrap()
                .remaining(),
            Some(second)
        );
    }

    #[test]
    fn a_long_invalid_value_is_cut() {
        let value = "x".repeat(10_000);
        let Err(BypassRefusal::Invalid { value: kept }) =
            read_bypass(&value, SystemTime::UNIX_EPOCH, None)
        else {
            panic!("not invalid");
        };
        assert!(kept.chars().count() <= 64);
    }
}
