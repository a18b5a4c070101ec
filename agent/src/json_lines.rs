//! The JSON log line: one object per event, written straight into one string.
//!
//! The same object tracing-subscriber's JSON format with `flatten_event` writes — `timestamp`,
//! `level`, the event's fields in order (`message` first), `target` — without going through a
//! serde serializer that writes each token through an `io::Write` shim: that cost about 1,400
//! instructions per text field, and the admission log line has a dozen of them (issue 27).
//!
//! Every field is bounded (reference §5): a text longer than [`MAX_FIELD_BYTES`] is cut on a
//! character boundary and ends with a marker naming its length, so that a 2 MiB user name
//! posted to the webhook is a 16 KiB field, not a 2 MiB line.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The longest text a log field holds before it is cut: the longest text the engine renders
/// (a decision's reason), so what it bounds already is never cut again.
pub const MAX_FIELD_BYTES: usize = 16 * 1024;

/// Seconds from 1970-01-01 to 10000-01-01: past that a year has five digits, which
/// [`push_timestamp`] leaves to tracing-subscriber's formatter.
const YEAR_10000: u64 = 253_402_300_800;

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
    push_timestamp(&mut line)?;
    line.push_str("\",\"level\":\"");
    line.push_str(meta.level().as_str());
    line.push('"');
    let mut fields = Fields {
        line: &mut line,
        scratch: String::new(),
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
        push_field(self.line, value, value.len());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.scratch.clear();
        // Writing fails only if the value's own Debug does; what it wrote until then is kept,
        // as serde's formatter keeps it. Past the bound only the length is counted.
        let mut bounded = BoundedText {
            text: &mut self.scratch,
            length: 0,
        };
        let _ = write!(bounded, "{value:?}");
        let length = bounded.length;
        push_key(self.line, field.name());
        push_field(self.line, &self.scratch, length);
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        push_key(self.line, field.name());
        push_decimal(self.line, value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        push_key(self.line, field.name());
        push_decimal(self.line, value);
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

/// `value` in decimal digits, by itoa: `write!` goes through the formatting machinery, several
/// hundred instructions for a number; the decision log line has three.
fn push_decimal(line: &mut String, value: impl itoa::Integer) {
    line.push_str(itoa::Buffer::new().format(value));
}

/// The time now as tracing-subscriber's `SystemTime` writes it, RFC 3339 in UTC with
/// microseconds (`2026-12-05T09:22:33.123456Z`), by humantime: through tracing-subscriber's
/// `Display`, which formats each part on its own, it was a sixth of the decision log line's
/// instructions. humantime writes years up to 9999; a clock before 1970 or past that is left to
/// tracing-subscriber's formatter.
fn push_timestamp(line: &mut String) -> fmt::Result {
    let now = std::time::SystemTime::now();
    let in_range = now
        .duration_since(std::time::UNIX_EPOCH)
        .is_ok_and(|d| d.as_secs() < YEAR_10000);
    if in_range {
        write!(line, "{}", humantime::format_rfc3339_micros(now))
    } else {
        SystemTime.format_time(&mut Writer::new(line))
    }
}

/// Keeps the first [`MAX_FIELD_BYTES`] of what is written (to a character boundary), and
/// counts the whole length.
struct BoundedText<'t> {
    text: &'t mut String,
    length: usize,
}

impl fmt::Write for BoundedText<'_> {
    fn write_str(&mut self, part: &str) -> fmt::Result {
        self.length += part.len();
        let room = MAX_FIELD_BYTES.saturating_sub(self.text.len());
        if room >= part.len() {
            self.text.push_str(part);
        } else {
            let mut end = room;
            while !part.is_char_boundary(end) {
                end -= 1;
            }
            self.text.push_str(&part[..end]);
        }
        Ok(())
    }
}

/// A field's `text` (of `length` bytes, of which `text` may hold only the start) as a JSON
/// string, cut to [`MAX_FIELD_BYTES`] with a marker of the whole length when it is longer.
fn push_field(line: &mut String, text: &str, length: usize) {
    if length <= MAX_FIELD_BYTES && text.len() == length {
        push_string(line, text);
        return;
    }
    let mut marker = String::with_capacity(32);
    let _ = write!(marker, "…(cut from {length} bytes)");
    let mut end = MAX_FIELD_BYTES.saturating_sub(marker.len()).min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    line.push('"');
    push_escaped(line, &text[..end]);
    push_escaped(line, &marker);
    line.push('"');
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

    /// The line's timestamp has the shape tracing-subscriber's `SystemTime` gives the same
    /// moment: the same text up to the second, the same length.
    #[test]
    fn the_timestamp_is_what_tracing_subscriber_writes() {
        let mut ours = String::new();
        push_timestamp(&mut ours).unwrap();
        let mut theirs = String::new();
        SystemTime
            .format_time(&mut Writer::new(&mut theirs))
            .unwrap();
        assert_eq!(ours.len(), theirs.len(), "{ours} {theirs}");
        // Unless a second ended between the two.
        let second = |t: &str| t[..19].to_owned();
        if second(&ours) != second(&theirs) {
            let mut again = String::new();
            push_timestamp(&mut again).unwrap();
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

    /// A field past the bound is cut to it, on a character boundary, with a marker naming its
    /// length; one at the bound is whole. Text and Debug fields alike.
    #[test]
    fn long_fields_are_cut_with_a_marker() {
        let at_bound = "u".repeat(MAX_FIELD_BYTES);
        let huge = "é".repeat(1 << 20);
        let (ours, _) = both_formats(|| {
            tracing::info!(user = at_bound.as_str(), name = huge.as_str(), debug = ?huge, "m");
        });
        let line: Value = serde_json::from_str(ours.lines().next().unwrap()).unwrap();
        assert_eq!(line["user"], at_bound.as_str());
        let cut = line["name"].as_str().unwrap();
        assert!(cut.len() <= MAX_FIELD_BYTES, "{}", cut.len());
        assert!(
            cut.ends_with("…(cut from 2097152 bytes)"),
            "{}",
            &cut[cut.len() - 40..]
        );
        assert!(cut.starts_with("éé"));
        // Debug quotes the text: two bytes more.
        let debug = line["debug"].as_str().unwrap();
        assert!(debug.len() <= MAX_FIELD_BYTES);
        assert!(
            debug.ends_with("…(cut from 2097154 bytes)"),
            "{}",
            &debug[debug.len() - 40..]
        );
        assert!(ours.len() < 3 * MAX_FIELD_BYTES + 512, "{}", ours.len());
    }

    proptest! {
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
