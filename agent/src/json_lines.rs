//! The JSON log line: one object per event, written straight into one string.
//!
//! The same object tracing-subscriber's JSON format with `flatten_event` writes — `timestamp`,
//! `level`, the event's fields in order (`message` first), `target` — without going through a
//! serde serializer that writes each token through an `io::Write` shim: that cost about 1,400
//! instructions per text field, and the admission log line has a dozen of them (issue 27).

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};

/// Seconds from 1970-01-01 to 10000-01-01: past that a year has five digits, which
/// [`push_timestamp`] leaves to tracing-subscriber's formatter.
const YEAR_10000: u64 = 253_402_300_800;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Formats each event as one JSON object on a line of its own.
#[derive(Debug, Default, Clone, Copy)]
pub struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        writer.write_str(&line_of(event)?)
    }
}

/// The line of `event`, with its newline.
fn line_of(event: &Event<'_>) -> Result<String, fmt::Error> {
    let meta = event.metadata();
    let mut line = String::with_capacity(512);
    line.push_str("{\"timestamp\":\"");
    let mut written = String::with_capacity(32);
    push_timestamp(&mut line, &mut written)?;
    line.push_str("\",\"level\":\"");
    line.push_str(meta.level().as_str());
    line.push('"');
    let mut fields = Fields {
        line: &mut line,
        scratch: written,
    };
    event.record(&mut fields);
    push_key(&mut line, "target");
    push_string(&mut line, meta.target());
    line.push_str("}\n");
    Ok(line)
}

/// Writes each field as `,"name":value`.
struct Fields<'l> {
    line: &'l mut String,
    /// Where a field that is not text is formatted before it is escaped.
    scratch: String,
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        push_key(self.line, field.name());
        push_string(self.line, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.scratch.clear();
        // Writing into a String fails only if the value's own Debug does; what it wrote
        // until then is kept, as serde's formatter keeps it.
        let _ = write!(self.scratch, "{value:?}");
        push_key(self.line, field.name());
        push_string(self.line, &self.scratch);
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        push_key(self.line, field.name());
        push_decimal(self.line, value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        push_key(self.line, field.name());
        if value < 0 {
            self.line.push('-');
        }
        push_decimal(self.line, value.unsigned_abs());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        push_key(self.line, field.name());
        self.line.push_str(if value { "true" } else { "false" });
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        push_key(self.line, field.name());
        // As serde_json writes a double: shortest round trip, `null` when not finite.
        match serde_json::Number::from_f64(value) {
            Some(number) => {
                let _ = write!(self.line, "{number}");
            }
            None => self.line.push_str("null"),
        }
    }
}

/// `value` in decimal digits. `write!` goes through the formatting machinery, several hundred
/// instructions for a number; the decision log line has three.
fn push_decimal(line: &mut String, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut from = digits.len();
    loop {
        from -= 1;
        digits[from] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    for &digit in &digits[from..] {
        line.push(char::from(digit));
    }
}

/// `digits` decimal digits of `value`, zeros in front (`value` has no more digits than that).
fn push_padded(line: &mut String, value: u64, digits: u32) {
    let mut unit = 10u64.pow(digits.saturating_sub(1));
    while unit > 0 {
        line.push(char::from(b'0' + (value / unit % 10) as u8));
        unit /= 10;
    }
}

/// The time now as tracing-subscriber's `SystemTime` writes it, RFC 3339 in UTC with
/// microseconds (`2026-12-05T09:22:33.123456Z`), computed directly: through its `Display` it
/// was a sixth of the decision log line's instructions. A clock before 1970 or past the year
/// 9999 is left to that formatter, through `scratch`.
fn push_timestamp(line: &mut String, scratch: &mut String) -> fmt::Result {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .filter(|d| d.as_secs() < YEAR_10000);
    match since_epoch {
        Some(since_epoch) => push_utc(line, since_epoch),
        None => {
            scratch.clear();
            SystemTime.format_time(&mut Writer::new(scratch))?;
            push_escaped(line, scratch);
        }
    }
    Ok(())
}

/// The time `since_epoch` after 1970-01-01T00:00:00Z, before the year 10000, in RFC 3339 with
/// microseconds.
fn push_utc(line: &mut String, since_epoch: std::time::Duration) {
    let seconds = since_epoch.as_secs();
    let (year, month, day) = civil_from_days(seconds / 86_400);
    let of_day = seconds % 86_400;
    push_padded(line, year, 4);
    line.push('-');
    push_padded(line, month, 2);
    line.push('-');
    push_padded(line, day, 2);
    line.push('T');
    push_padded(line, of_day / 3600, 2);
    line.push(':');
    push_padded(line, of_day / 60 % 60, 2);
    line.push(':');
    push_padded(line, of_day % 60, 2);
    line.push('.');
    push_padded(line, u64::from(since_epoch.subsec_micros()), 6);
    line.push('Z');
}

/// The proleptic Gregorian (year, month, day) of a count of days since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`, for days on or after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // Counted from 0000-03-01, so that the leap day ends each 400-, 100- and 4-year cycle.
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

fn push_key(line: &mut String, name: &str) {
    line.push(',');
    push_string(line, name);
    line.push(':');
}

fn push_string(line: &mut String, text: &str) {
    line.push('"');
    push_escaped(line, text);
    line.push('"');
}

/// `text` escaped as inside a JSON string, as serde_json escapes it: `"`, `\` and the
/// control characters, the common ones by their letter, the others as `\u00XX`.
fn push_escaped(line: &mut String, text: &str) {
    // Almost every field needs no escape. A fold without an early exit is vectorised; the
    // loop below takes about ten instructions a byte (escaping was 8,600 of the decision log
    // line's 13,000 instructions; with this check, 4,600).
    let needs_escape = text.bytes().fold(false, |any, b| {
        any | (b < 0x20) | (b == b'"') | (b == b'\\')
    });
    if !needs_escape {
        line.push_str(text);
        return;
    }
    let mut plain_from = 0;
    for (at, byte) in text.bytes().enumerate() {
        let escape = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0x00..=0x1f => "",
            _ => continue,
        };
        // `at` is an ASCII byte, so both slices end on character boundaries.
        line.push_str(&text[plain_from..at]);
        if escape.is_empty() {
            let _ = write!(line, "\\u{byte:04x}");
        } else {
            line.push_str(escape);
        }
        plain_from = at + 1;
    }
    line.push_str(&text[plain_from..]);
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use proptest::prelude::*;
    use serde_json::Value;

    use super::*;

    struct SharedWriter(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for SharedWriter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Logs the same events through `JsonLines` and through tracing-subscriber's JSON format.
    fn both_formats(emit: impl Fn()) -> (String, String) {
        let ours = Arc::new(Mutex::new(Vec::new()));
        let theirs = Arc::new(Mutex::new(Vec::new()));
        let ours_writer = {
            let ours = ours.clone();
            move || SharedWriter(ours.clone())
        };
        let theirs_writer = {
            let theirs = theirs.clone();
            move || SharedWriter(theirs.clone())
        };
        let ours_subscriber = tracing_subscriber::fmt()
            .event_format(JsonLines)
            .with_writer(ours_writer)
            .finish();
        let theirs_subscriber = tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_writer(theirs_writer)
            .finish();
        tracing::subscriber::with_default(ours_subscriber, &emit);
        tracing::subscriber::with_default(theirs_subscriber, &emit);
        let text = |b: &Arc<Mutex<Vec<u8>>>| String::from_utf8(b.lock().unwrap().clone()).unwrap();
        (text(&ours), text(&theirs))
    }

    /// The lines without their timestamps, which differ by when they were written.
    fn without_timestamps(lines: &str) -> Vec<Value> {
        lines
            .lines()
            .map(|line| {
                let mut object: Value = serde_json::from_str(line).unwrap();
                let stamp = object["timestamp"].as_str().unwrap();
                assert!(
                    humantime::parse_rfc3339(stamp).is_ok(),
                    "timestamp {stamp:?} is RFC 3339"
                );
                object["timestamp"] = Value::Null;
                object
            })
            .collect()
    }

    #[test]
    fn lines_are_what_the_json_format_writes() {
        let (ours, theirs) = both_formats(|| {
            tracing::info!(
                uid = "u-1",
                operation = %"UPDATE",
                count = 3u64,
                signed = -4i64,
                ratio = 0.25f64,
                not_a_number = f64::NAN,
                dry_run = false,
                step = ?Some("Violation"),
                reason = "quote \" backslash \\ newline \n return \r tab \t nul \u{0} bell \u{7} backspace \u{8} form feed \u{c} unit separator \u{1f} é 🦀",
                "admission decision"
            );
            tracing::warn!(path = "/x", "a {} message with {:?}", "formatted", "debug");
            tracing::error!("no fields at all");
        });
        // Field for field and in the same order: compared as text past the timestamp.
        let strip = |lines: &str| -> Vec<String> {
            lines
                .lines()
                .map(|l| l[l.find("\",\"level\"").unwrap()..].to_owned())
                .collect()
        };
        assert_eq!(strip(&ours), strip(&theirs));
        assert_eq!(without_timestamps(&ours), without_timestamps(&theirs));
        assert_eq!(ours.lines().count(), 3);
    }

    /// RFC 3339 with microseconds, as humantime writes it.
    fn reference_utc(since_epoch: std::time::Duration) -> String {
        humantime::format_rfc3339_micros(std::time::UNIX_EPOCH + since_epoch).to_string()
    }

    fn our_utc(since_epoch: std::time::Duration) -> String {
        let mut ours = String::new();
        push_utc(&mut ours, since_epoch);
        ours
    }

    #[test]
    fn times_are_written_in_rfc3339_with_microseconds() {
        let at = std::time::Duration::new;
        let cases = [
            (at(0, 0), "1970-01-01T00:00:00.000000Z"),
            (at(951_782_400, 999_999_999), "2000-02-29T00:00:00.999999Z"),
            (at(4_107_542_399, 1_000), "2100-02-28T23:59:59.000001Z"),
            (at(4_107_542_400, 999), "2100-03-01T00:00:00.000000Z"),
            (
                at(1_798_761_599, 123_456_789),
                "2026-12-31T23:59:59.123456Z",
            ),
            (at(YEAR_10000 - 1, 0), "9999-12-31T23:59:59.000000Z"),
        ];
        for (since_epoch, want) in cases {
            assert_eq!(our_utc(since_epoch), want);
            assert_eq!(reference_utc(since_epoch), want);
        }
    }

    /// The line's timestamp has the shape tracing-subscriber's `SystemTime` gives the same
    /// moment: the same text up to the second, the same length.
    #[test]
    fn the_timestamp_is_what_tracing_subscriber_writes() {
        let mut ours = String::new();
        push_timestamp(&mut ours, &mut String::new()).unwrap();
        let mut theirs = String::new();
        SystemTime
            .format_time(&mut Writer::new(&mut theirs))
            .unwrap();
        assert_eq!(ours.len(), theirs.len(), "{ours} {theirs}");
        // Unless a second ended between the two.
        let second = |t: &str| t[..19].to_owned();
        if second(&ours) != second(&theirs) {
            let mut again = String::new();
            push_timestamp(&mut again, &mut String::new()).unwrap();
            assert_eq!(second(&again), second(&theirs), "{again} {theirs}");
        }
    }

    #[test]
    fn integers_are_written_as_display_writes_them() {
        for value in [0, 7, 10, 99, 100, 1_234_567, u64::MAX] {
            let mut ours = String::new();
            push_decimal(&mut ours, value);
            assert_eq!(ours, value.to_string());
        }
        let (ours, theirs) = both_formats(|| {
            tracing::info!(low = i64::MIN, high = i64::MAX, zero = 0i64, big = u64::MAX);
        });
        let strip = |lines: &str| lines[lines.find("\",\"level\"").unwrap()..].to_owned();
        assert_eq!(strip(&ours), strip(&theirs));
    }

    proptest! {
        /// Any time from 1970 to the year 9999 is written as humantime writes it.
        #[test]
        fn any_time_is_written_in_rfc3339(seconds in 0..YEAR_10000, nanos in 0u32..1_000_000_000) {
            let since_epoch = std::time::Duration::new(seconds, nanos);
            prop_assert_eq!(our_utc(since_epoch), reference_utc(since_epoch));
        }

        /// Any text is escaped as serde_json escapes it.
        #[test]
        fn text_is_escaped_as_serde_json_escapes_it(chars in prop::collection::vec(prop_oneof![
            any::<char>(),
            (0u8..0x20).prop_map(char::from),
            Just('"'),
            Just('\\'),
        ], 0..40)) {
            let text: String = chars.into_iter().collect();
            let mut ours = String::new();
            push_string(&mut ours, &text);
            prop_assert_eq!(ours, serde_json::to_string(&text).unwrap());
        }
    }
}
