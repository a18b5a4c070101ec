//! A value the engine hands out with a change: a document's value, or the JSON text of one in
//! an admission request's body, read into a [`Value`] only when something shows it.
//!
//! Most changes an admission finds are never shown: an allowed request's answer names no
//! value, and a denial shows only the first uncovered ones. The `last-applied-configuration`
//! annotation that every client-side `kubectl apply` rewrites is as long as the spec on each
//! side; decoding both for every UPDATE was 44 % of the decision (callgrind on the benchmark's
//! `apply.json`: 510,000 of 1,150,000 instructions per request).

use std::borrow::Cow;

use serde_json::Value;

/// One side of a change: a value, or valid JSON text (from a scanned body) that stands for one.
#[derive(Debug, Clone)]
pub enum LazyValue<'a> {
    Value(Cow<'a, Value>),
    /// The value's text exactly as the body holds it.
    Text(&'a str),
}

impl<'a> LazyValue<'a> {
    /// The value, read from the text when it is text.
    pub fn value(&self) -> Cow<'_, Value> {
        match self {
            LazyValue::Value(value) => Cow::Borrowed(value.as_ref()),
            LazyValue::Text(text) => Cow::Owned(super::raw::value_of_text(text)),
        }
    }

    /// The value, read from the text when it is text.
    pub fn into_value(self) -> Cow<'a, Value> {
        match self {
            LazyValue::Value(value) => value,
            LazyValue::Text(text) => Cow::Owned(super::raw::value_of_text(text)),
        }
    }

    /// The first `max` bytes of the value's compact JSON, written straight from the text or
    /// the value: showing a value never builds it whole (reference §5).
    pub fn encoded(&self, max: usize) -> super::Encoded {
        match self {
            LazyValue::Value(value) => super::value_prefix(value, max),
            LazyValue::Text(text) => super::text_prefix(text, max),
        }
    }

    /// The value's compact JSON cut to `max_chars` characters, the last being `…` when cut.
    pub fn shown(&self, max_chars: usize) -> String {
        // Enough bytes for one character more than shown, however wide the characters.
        let encoded = self.encoded(max_chars.saturating_add(2).saturating_mul(4));
        crate::truncate::truncate_chars(&encoded.text, max_chars)
    }

    /// The same value, borrowing nothing.
    pub fn into_owned(self) -> LazyValue<'static> {
        LazyValue::Value(Cow::Owned(self.into_value().into_owned()))
    }
}

impl From<Value> for LazyValue<'_> {
    fn from(value: Value) -> Self {
        LazyValue::Value(Cow::Owned(value))
    }
}

impl<'a> From<&'a Value> for LazyValue<'a> {
    fn from(value: &'a Value) -> Self {
        LazyValue::Value(Cow::Borrowed(value))
    }
}

/// As the value it stands for.
impl serde::Serialize for LazyValue<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(serializer)
    }
}

/// Equal values, whatever form each side is in (the same text is equal without reading it).
impl PartialEq for LazyValue<'_> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (LazyValue::Text(x), LazyValue::Text(y)) if x == y => true,
            _ => self.value() == other.value(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn text_reads_as_the_value_it_stands_for() {
        let cases = [
            (r#""a\"b""#, json!("a\"b")),
            ("3", json!(3)),
            ("-2.5", json!(-2.5)),
            (r#"{"k":[1,null,true]}"#, json!({"k": [1, null, true]})),
            // Past what a Value holds exactly: kept as its text, as the diff reports it.
            (
                "123456789012345678901234567890",
                json!("123456789012345678901234567890"),
            ),
        ];
        for (text, expected) in cases {
            let lazy = LazyValue::Text(text);
            assert_eq!(lazy.value().as_ref(), &expected, "{text}");
            assert_eq!(lazy.clone().into_value().into_owned(), expected, "{text}");
            assert_eq!(lazy, LazyValue::from(expected.clone()), "{text}");
            assert_eq!(
                serde_json::to_value(&lazy).ok(),
                Some(expected.clone()),
                "{text}"
            );
            assert_eq!(lazy.into_owned(), LazyValue::from(expected), "{text}");
        }
    }

    #[test]
    fn equality_is_by_value_not_by_form() {
        assert_eq!(LazyValue::Text("[1, 2]"), LazyValue::Text("[1,2]"));
        assert_eq!(LazyValue::Text("1.0"), LazyValue::from(json!(1.0)));
        assert_ne!(LazyValue::Text("1"), LazyValue::Text("2"));
        assert_ne!(LazyValue::Text(r#""1""#), LazyValue::from(json!(1)));
    }
}
