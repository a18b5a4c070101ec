//! What a message or a record shows of a value: its compact JSON, as `Value::to_string` writes
//! it, cut to a bound and written straight from the body's text or from the value (reference
//! §5, "Bounded answers"). Showing 64 characters of a list of four million numbers read the
//! whole list into a `Value` first (300 MiB for a 7.9 MiB review); here the encoder stops at
//! the bound, and the memory is that of the bound and of the value's depth.
//!
//! Text is read as [`super::raw::value_of_text`] reads it: a number a `Value` cannot hold
//! exactly, and text serde_json's parser refuses (deeper than its 128 levels, a number beyond
//! a double), show as their text in a string. Where the value is cut, only the part shown is
//! read: such text shows as its string only when that part reaches what serde_json refuses
//! (no scan of the rest decides how to show its start), and an object with a repeated key
//! shows each (a `Value` keeps the last).

use std::io::{self, Write};

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Number, Value};

use super::string::{char_at, valid_from};

/// The first bytes of a value's compact JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    /// At most the bound, cut on a character boundary.
    pub text: String,
    /// Whether `text` is the whole encoding.
    pub complete: bool,
}

/// The first `max` bytes of the compact JSON of `value`.
pub fn value_prefix(value: &Value, max: usize) -> Encoded {
    let mut out = Bounded::new(max);
    // The only error is the bound's.
    let _ = serde_json::to_writer(&mut out, value);
    out.finish()
}

/// The first `max` bytes of the compact JSON of the value that `text`, the JSON text of one
/// value, stands for.
pub fn text_prefix(text: &str, max: usize) -> Encoded {
    let mut out = Bounded::new(max);
    match text.as_bytes().first() {
        Some(b'"') => string_literal(text, &mut out),
        Some(b'-' | b'0'..=b'9') => match serde_json::from_str::<Number>(text) {
            Ok(number) if super::number::text_numbers_eq(text, &number.to_string()) => {
                let _ = serde_json::to_writer(&mut out, &number);
            }
            _ => as_string(text, &mut out),
        },
        _ => {
            let mut reader = serde_json::Deserializer::from_str(text);
            if Copy(&mut out).deserialize(&mut reader).is_err() && !out.full {
                out = Bounded::new(max);
                as_string(text, &mut out);
            }
        }
    }
    out.finish()
}

/// A string literal's content, decoded only as far as the bound reaches (each character is at
/// least one byte of the encoding); a literal serde_json would refuse shows as its text.
fn string_literal(text: &str, out: &mut Bounded) {
    let inner = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or_default();
    if !valid_from(inner, 0) {
        return as_string(text, out);
    }
    let mut content = String::new();
    let mut at = 0;
    while at < inner.len() && content.len() <= out.max {
        let Some((c, len)) = char_at(inner, at) else {
            break;
        };
        content.push(c);
        at += len;
    }
    let _ = serde_json::to_writer(out, &content);
}

/// `text` itself as a JSON string, as far as the bound reaches (escaping never shortens).
fn as_string(text: &str, out: &mut Bounded) {
    let mut end = text.len().min(out.max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let _ = serde_json::to_writer(out, &text[..end]);
}

/// A writer that keeps the first `max` bytes and then fails, which stops the encoder.
struct Bounded {
    out: Vec<u8>,
    max: usize,
    full: bool,
}

impl Bounded {
    fn new(max: usize) -> Self {
        Self {
            out: Vec::with_capacity(max.min(1024)),
            max,
            full: false,
        }
    }

    fn finish(self) -> Encoded {
        let text = match String::from_utf8(self.out) {
            Ok(text) => text,
            // Cut inside a character: up to the last whole one.
            Err(e) => {
                let valid = e.utf8_error().valid_up_to();
                let mut bytes = e.into_bytes();
                bytes.truncate(valid);
                String::from_utf8(bytes).unwrap_or_default()
            }
        };
        Encoded {
            text,
            complete: !self.full,
        }
    }
}

impl Write for Bounded {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let room = self.max - self.out.len();
        if bytes.len() > room {
            self.out.extend_from_slice(&bytes[..room]);
            self.full = true;
            return Err(io::Error::other("bound reached"));
        }
        self.out.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Copies one value from serde_json's reader to the bounded writer, token by token, as
/// serde_json would encode the `Value` it reads (numbers and strings through its own encoder).
struct Copy<'o>(&'o mut Bounded);

impl<'de> DeserializeSeed<'de> for Copy<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, reader: D) -> Result<(), D::Error> {
        reader.deserialize_any(self)
    }
}

impl Copy<'_> {
    fn raw<E: de::Error>(&mut self, bytes: &[u8]) -> Result<(), E> {
        self.0.write_all(bytes).map_err(E::custom)
    }

    fn encoded<E: de::Error>(&mut self, value: &impl serde::Serialize) -> Result<(), E> {
        serde_json::to_writer(&mut *self.0, value).map_err(E::custom)
    }
}

impl<'de> Visitor<'de> for Copy<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(mut self, v: bool) -> Result<(), E> {
        self.raw(if v { b"true" } else { b"false" })
    }

    fn visit_i64<E: de::Error>(mut self, v: i64) -> Result<(), E> {
        self.encoded(&v)
    }

    fn visit_u64<E: de::Error>(mut self, v: u64) -> Result<(), E> {
        self.encoded(&v)
    }

    fn visit_f64<E: de::Error>(mut self, v: f64) -> Result<(), E> {
        // As a `Value` holds it (a float that is not finite cannot come out of JSON).
        match Number::from_f64(v) {
            Some(number) => self.encoded(&number),
            None => self.raw(b"null"),
        }
    }

    fn visit_str<E: de::Error>(mut self, v: &str) -> Result<(), E> {
        self.encoded(&v)
    }

    fn visit_unit<E: de::Error>(mut self) -> Result<(), E> {
        self.raw(b"null")
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut items: A) -> Result<(), A::Error> {
        self.raw(b"[")?;
        let mut first = true;
        loop {
            // A comma before an item that turns out not to exist is taken back.
            let comma_at = self.0.out.len();
            if !first {
                self.raw(b",")?;
            }
            if items.next_element_seed(Copy(&mut *self.0))?.is_none() {
                self.0.out.truncate(comma_at);
                break;
            }
            first = false;
        }
        self.raw(b"]")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut entries: A) -> Result<(), A::Error> {
        self.raw(b"{")?;
        let mut first = true;
        loop {
            let comma_at = self.0.out.len();
            if !first {
                self.raw(b",")?;
            }
            if entries.next_key_seed(Copy(&mut *self.0))?.is_none() {
                self.0.out.truncate(comma_at);
                break;
            }
            self.raw(b":")?;
            entries.next_value_seed(Copy(&mut *self.0))?;
            first = false;
        }
        self.raw(b"}")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Whatever the text, its prefix is the prefix of what reading it whole and encoding the
    /// `Value` gives.
    fn agrees(text: &str) {
        let whole = super::super::raw::value_of_text(text).to_string();
        // Cut before what serde_json refuses (a number beyond a double, the 128th level), the
        // text shows as what it reads as so far.
        let refused = text.contains("e400") || text.starts_with(&"[".repeat(128));
        for max in [0, 1, 2, 5, 17, 64, 256, 10_000] {
            let shown = text_prefix(text, max);
            if refused && !shown.complete {
                continue;
            }
            assert!(
                whole.starts_with(&shown.text),
                "{text} at {max}: {shown:?} of {whole}"
            );
            assert_eq!(shown.complete, whole.len() <= max, "{text} at {max}");
            assert!(shown.text.len() <= max);
            assert!(
                shown.complete || shown.text.len() + 4 > max,
                "{text} at {max}"
            );
            let value: Value = serde_json::from_str(&whole).unwrap();
            assert_eq!(value_prefix(&value, max), shown, "{text} at {max}");
        }
    }

    #[test]
    fn text_shows_as_its_value_encodes() {
        for text in [
            "0",
            "-1.50",
            "1e2",
            "1E+400",
            "123456789012345678901234567890",
            "9007199254740993",
            "18446744073709551615",
            "true",
            "null",
            r#""plain""#,
            r#""a\"b\\c\u0041\u00e9\ud83d\ude00\n""#,
            r#""\ud800 lone""#,
            "[]",
            "{}",
            "[1, 2.0 , -0, 1e2, true, null, \"x\"]",
            r#"{"a": {"b": [1, {"c": "é"}]}, "d": []}"#,
            "[123456789012345678901234567890]",
            "[1e400]",
            &format!("[{}1e400]", "0,".repeat(100)),
            &format!("{}1{}", "[".repeat(126), "]".repeat(126)),
            &format!("{}1{}", "[".repeat(127), "]".repeat(127)),
            &format!("{}1{}", "[".repeat(128), "]".repeat(128)),
            &format!("{}1{}", "[".repeat(200), "]".repeat(200)),
            &format!("[{}]", vec!["0"; 1000].join(",")),
            &format!("\"{}\"", "é".repeat(300)),
            &format!("\"{}\"", "\\u00e9".repeat(300)),
        ] {
            agrees(text);
        }
    }

    #[test]
    fn values_show_as_they_encode() {
        let value = json!({"a": [1, 2.5, "x\"y"], "b": {"c": null}, "é": true});
        let whole = value.to_string();
        for max in 0..=whole.len() + 1 {
            let shown = value_prefix(&value, max);
            assert!(whole.starts_with(&shown.text));
            assert_eq!(shown.complete, whole.len() <= max);
        }
    }

    #[test]
    fn a_repeated_key_shows_each_time() {
        let shown = text_prefix(r#"{"a":1,"a":2}"#, 100);
        assert_eq!(shown.text, r#"{"a":1,"a":2}"#);
    }

    /// Four million items (8 MB of text): the prefix is read, not the list.
    #[test]
    fn a_long_list_is_read_only_as_far_as_shown() {
        let text = format!("[{}]", vec!["0"; 4_000_000].join(","));
        let started = std::time::Instant::now();
        for _ in 0..1000 {
            let shown = text_prefix(&text, 300);
            assert!(!shown.complete);
            assert_eq!(shown.text.len(), 300);
        }
        // A thousand reads of the whole list would take minutes in a debug build.
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }
}
