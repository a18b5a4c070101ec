//! JSON text read lazily, where it is read at all.
//!
//! The admission path compares two versions of one object that are byte for byte the same
//! almost everywhere (the API server serialises both from the same types, in the same order).
//! Building a document of each only to find that out is most of the cost of a decision, so the
//! agent keeps the request's objects as text: equal subtrees are recognised by their bytes, and
//! only where the bytes differ are maps and lists read, one level at a time, borrowing keys and
//! strings from the body.
//!
//! [`RawJson`] is only ever made from text serde_json has validated ([`RawDocument::new`] takes
//! a [`RawValue`]), so the scans below never meet malformed JSON; on text that is not valid
//! anyway they stop early instead of panicking.

use std::borrow::Cow;
use std::cell::{Cell, OnceCell};
use std::fmt;

use serde_json::Value;
use serde_json::value::RawValue;

use super::brackets::{Brackets, string_end_from};
use super::deep::{DEEP, DeepIndex};
use super::number::text_numbers_eq;
use super::{Document, LazyValue, MapView, Node, Shape};

/// One object of a request as the body's text, with the index of its brackets built on first
/// need (see [`Brackets`]): what the agent's parse gives for `object` and `oldObject`.
#[derive(Debug, Clone, Default)]
pub struct RawDocument<'a> {
    text: &'a str,
    brackets: OnceCell<Brackets>,
    /// Where in `brackets` the next lookup starts (see [`Brackets::close_of_near`]).
    cursor: Cell<u32>,
    /// Built only when a scan would go [`DEEP`] levels down.
    deep: OnceCell<DeepIndex>,
}

impl<'a> RawDocument<'a> {
    /// The value serde_json validated.
    pub fn new(raw: &'a RawValue) -> Self {
        Self {
            text: raw.get().trim_matches(is_whitespace_char),
            brackets: OnceCell::new(),
            cursor: Cell::new(0),
            deep: OnceCell::new(),
        }
    }

    /// The text of a document read before (its [`RawDocument::text`], kept past the body it
    /// was read from: see [`crate::review::HeldReview`]).
    pub(crate) fn read_before(text: &'a str) -> Self {
        Self {
            text,
            brackets: OnceCell::new(),
            cursor: Cell::new(0),
            deep: OnceCell::new(),
        }
    }

    /// The document's text, exactly as in the body.
    pub fn text(&self) -> &'a str {
        self.text
    }

    /// The end (exclusive) of the container opening at `bytes[at]`, where `bytes` lies within
    /// this document's text; `None` when it is not recorded.
    fn container_end(&self, bytes: &[u8], at: usize) -> Option<usize> {
        let start = self.offset_of(bytes)?;
        let brackets = self.brackets.get_or_init(|| Brackets::of(self.text));
        let close = brackets.close_of_near(start + at, &self.cursor)?;
        Some(close + 1 - start)
    }

    /// The end (exclusive) of the container opening at `bytes[at]` and whether it is absent,
    /// when at least [`DEEP`] levels nest below it (see [`DeepIndex`]).
    fn deep_container(&self, bytes: &[u8], at: usize) -> Option<(usize, bool)> {
        let start = self.offset_of(bytes)?;
        let deep = self.deep.get_or_init(|| DeepIndex::of(self.text));
        let (close, absent) = deep.lookup(start + at)?;
        Some((close + 1 - start, absent))
    }

    /// Where `bytes`, a part of this document's text, starts in it.
    fn offset_of(&self, bytes: &[u8]) -> Option<usize> {
        let base = self.text.as_ptr() as usize;
        let start = (bytes.as_ptr() as usize).checked_sub(base)?;
        (start + bytes.len() <= self.text.len()).then_some(start)
    }
}

impl PartialEq for RawDocument<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for RawDocument<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        <&'de RawValue>::deserialize(deserializer).map(RawDocument::new)
    }
}

impl Document for RawDocument<'_> {
    type Node<'n>
        = RawJson<'n>
    where
        Self: 'n;
    fn node(&self) -> RawJson<'_> {
        RawJson {
            text: self.text,
            doc: Some(self),
        }
    }
}

/// One JSON value as text, within the document it was read from (whose index of brackets it
/// uses; without one, containers are scanned).
#[derive(Clone, Copy)]
pub struct RawJson<'a> {
    text: &'a str,
    doc: Option<&'a RawDocument<'a>>,
}

impl PartialEq for RawJson<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for RawJson<'_> {}

impl fmt::Debug for RawJson<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = crate::truncate::truncate_chars(self.text, 200);
        write!(f, "RawJson({shown})")
    }
}

impl<'a> RawJson<'a> {
    /// Text that is known to be one valid JSON value (surrounding whitespace allowed), read
    /// without an index.
    #[cfg(test)]
    fn from_valid(text: &'a str) -> Self {
        Self {
            text: text.trim_matches(is_whitespace_char),
            doc: None,
        }
    }

    /// A value within the same document.
    fn within(self, text: &'a str) -> Self {
        Self {
            text,
            doc: self.doc,
        }
    }

    /// The value's text, exactly as in the body.
    pub fn text(self) -> &'a str {
        self.text
    }

    fn bytes(self) -> &'a [u8] {
        self.text.as_bytes()
    }

    /// The entries of an object in text order, repeats included (see [`RawMap`]).
    fn entries(self) -> RawEntries<'a> {
        RawEntries {
            within: self,
            at: if self.bytes().first() == Some(&b'{') {
                1
            } else {
                self.text.len()
            },
        }
    }
}

/// JSON's white space (RFC 8259: space, tab, line feed, carriage return).
fn is_whitespace_char(c: char) -> bool {
    matches!(c, ' ' | '\n' | '\r' | '\t')
}

fn skip_whitespace(bytes: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = bytes.get(at) {
        at += 1;
    }
    at
}

/// Where what follows `separator` (`,` between entries, `:` after a key) begins: white space
/// skipped before and after it. Without the separator, where the white space ends.
#[inline]
fn skip_separator(bytes: &[u8], at: usize, separator: u8) -> usize {
    let at = skip_whitespace(bytes, at);
    if bytes.get(at) == Some(&separator) {
        skip_whitespace(bytes, at + 1)
    } else {
        at
    }
}

/// Bytes looked at one by one before a vectorised search takes over: most strings and most
/// gaps between brackets and quotes are shorter than a search's setup is worth.
const SHORT_SCAN: usize = 16;

/// The position of the first byte in `bytes[from..]` that `is_wanted`, looking at a few
/// bytes directly and then with `search`.
#[inline]
fn find_from(
    bytes: &[u8],
    from: usize,
    is_wanted: impl Fn(u8) -> bool,
    search: impl Fn(&[u8]) -> Option<usize>,
) -> Option<usize> {
    let rest = bytes.get(from..)?;
    let short = rest.len().min(SHORT_SCAN);
    if let Some(offset) = rest[..short].iter().position(|&b| is_wanted(b)) {
        return Some(from + offset);
    }
    search(&rest[short..]).map(|offset| from + short + offset)
}

/// The end (exclusive) of the string whose opening quote is at `at`.
#[inline]
fn string_end(bytes: &[u8], at: usize) -> usize {
    string_end_from(bytes, at + 1)
}

/// The end (exclusive) of the value starting at `at`; containers are looked up in the
/// document's index of brackets where there is one.
fn value_end(bytes: &[u8], at: usize, doc: Option<&RawDocument<'_>>) -> usize {
    match bytes.get(at) {
        Some(b'"') => string_end(bytes, at),
        Some(b'{' | b'[') => doc
            .and_then(|doc| doc.container_end(bytes, at))
            .unwrap_or_else(|| container_end(bytes, at, doc)),
        Some(_) => {
            let mut end = at;
            while let Some(b) = bytes.get(end) {
                if matches!(b, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') {
                    break;
                }
                end += 1;
            }
            end
        }
        None => at,
    }
}

/// The end (exclusive) of the object or list opening at `at`. In valid JSON each kind of
/// bracket nests on its own, so only the opener's kind is counted, and strings are skipped
/// whole: a vectorised search for three bytes, instead of a look at every byte (a list of two
/// million numbers holds none of them until its end). Past [`DEEP`] levels of its kind, a
/// container inside is looked up in the document's [`DeepIndex`] and skipped whole: scanning
/// each level of a deep chain for each level above it would cost the square of its depth.
fn container_end(bytes: &[u8], at: usize, doc: Option<&RawDocument<'_>>) -> usize {
    let (open, close) = match bytes.get(at) {
        Some(b'{') => (b'{', b'}'),
        _ => (b'[', b']'),
    };
    let mut depth = 0usize;
    let mut i = at;
    while let Some(found) = find_from(
        bytes,
        i,
        |b| b == b'"' || b == open || b == close,
        |rest| memchr::memchr3(b'"', open, close, rest),
    ) {
        i = found;
        match bytes[i] {
            b'"' => {
                i = string_end(bytes, i);
                continue;
            }
            b if b == open => {
                if depth >= DEEP as usize
                    && let Some((end, _)) = doc.and_then(|doc| doc.deep_container(bytes, i))
                {
                    // A deep container inside: skipped whole.
                    i = end;
                    continue;
                }
                depth += 1;
            }
            _ => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
        }
        i += 1;
    }
    bytes.len()
}

/// The end of the value at `at` when it is absent (reference §4: `null`, `[]`, or a map whose
/// every entry is absent); `None` as soon as something present is seen. Decided from the front:
/// a present value is never scanned to its end (`present()` is asked of every map and list on
/// the way down to a change, each of which can hold the whole rest of the object).
///
/// Past [`DEEP`] levels of maps, each map is first looked up in the document's [`DeepIndex`]:
/// scanning every level of a deep chain again for every level of the walk down it would cost
/// the square of its depth.
fn absent_end(bytes: &[u8], at: usize, doc: Option<&RawDocument<'_>>) -> Option<usize> {
    absent_end_within(bytes, at, doc, DEEP)
}

/// [`absent_end`], `levels` levels of maps before the index is asked.
fn absent_end_within(
    bytes: &[u8],
    at: usize,
    doc: Option<&RawDocument<'_>>,
    levels: u32,
) -> Option<usize> {
    if levels == 0
        && bytes.get(at) == Some(&b'{')
        && let Some((end, absent)) = doc.and_then(|doc| doc.deep_container(bytes, at))
    {
        return absent.then_some(end);
    }
    match bytes.get(at) {
        None => None,
        Some(b'n') => Some(at + 4),
        Some(b'[') => {
            let close = skip_whitespace(bytes, at + 1);
            (bytes.get(close) == Some(&b']')).then_some(close + 1)
        }
        Some(b'{') => {
            let mut next = skip_whitespace(bytes, at + 1);
            loop {
                match bytes.get(next)? {
                    b'}' => return Some(next + 1),
                    b',' => next = skip_whitespace(bytes, next + 1),
                    b'"' => {
                        let colon = skip_whitespace(bytes, string_end(bytes, next));
                        let value = skip_whitespace(bytes, colon + 1);
                        let below = levels.saturating_sub(1);
                        let end = crate::nesting::guarded(|| {
                            absent_end_within(bytes, value, doc, below)
                        })?;
                        next = skip_whitespace(bytes, end);
                    }
                    _ => return None,
                }
            }
        }
        Some(_) => None,
    }
}

/// A string's content: borrowed when it has no escapes, decoded otherwise.
fn decode_string(quoted: &str) -> Cow<'_, str> {
    let inner = quoted
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(quoted);
    if !inner.contains('\\') {
        return Cow::Borrowed(inner);
    }
    super::string::decode(quoted).unwrap_or(Cow::Borrowed(inner))
}

/// Whether the quoted key `quoted` spells `key`. An escape always takes more bytes than the
/// character it stands for, so a key spelt with fewer bytes than `key` never is it, and one
/// spelt with as many is it only when spelt without escapes: most keys are settled by their
/// length alone, without decoding.
fn key_is(quoted: &str, key: &str) -> bool {
    let spelt = quoted.len().saturating_sub(2);
    match spelt.cmp(&key.len()) {
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => {
            quoted.get(1..quoted.len() - 1) == Some(key) && !key.contains('\\')
        }
        std::cmp::Ordering::Greater => quoted.contains('\\') && decode_string(quoted) == key,
    }
}

/// Iterates an object's entries as `(quoted key, value)`.
#[derive(Clone)]
struct RawEntries<'a> {
    /// The object.
    within: RawJson<'a>,
    at: usize,
}

impl<'a> Iterator for RawEntries<'a> {
    type Item = (&'a str, RawJson<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        let text = self.within.text;
        let bytes = text.as_bytes();
        let at = skip_separator(bytes, self.at, b',');
        if bytes.get(at) != Some(&b'"') {
            // `}` or the end.
            self.at = text.len();
            return None;
        }
        let key_end = string_end(bytes, at);
        let key = text.get(at..key_end)?;
        let value_at = skip_separator(bytes, key_end, b':');
        let end = value_end(bytes, value_at, self.within.doc);
        let value = text.get(value_at..end)?;
        self.at = end;
        Some((key, self.within.within(value)))
    }
}

/// Iterates a list's items.
#[derive(Clone)]
pub struct RawItems<'a> {
    /// The list.
    within: RawJson<'a>,
    at: usize,
}

impl<'a> Iterator for RawItems<'a> {
    type Item = RawJson<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        let text = self.within.text;
        let bytes = text.as_bytes();
        let at = skip_separator(bytes, self.at, b',');
        match bytes.get(at) {
            None | Some(b']') => {
                self.at = text.len();
                return None;
            }
            Some(_) => {}
        }
        let end = value_end(bytes, at, self.within.doc);
        let item = text.get(at..end)?;
        self.at = end;
        Some(self.within.within(item))
    }
}

/// An object's entries, read once: keys decoded, a repeated key kept once — at its first
/// place, with its last value, as serde_json's ordered map keeps it — so that raw text and a
/// parsed document of it compare alike.
#[derive(Debug)]
pub struct RawMap<'a> {
    entries: Vec<(Cow<'a, str>, RawJson<'a>)>,
    /// Entry positions sorted by key, built on the first lookup in a large map.
    sorted: OnceCell<Vec<u32>>,
}

/// The room a map's entries are read into before it grows.
const ENTRIES_AT_ONCE: usize = 16;

/// Maps up to this many entries are searched by scanning.
const SCAN_LOOKUP_MAX: usize = 16;

impl<'a> RawMap<'a> {
    fn read(object: RawJson<'a>) -> Self {
        // Room for most maps of a Kubernetes object at once: growing from four entries cost
        // 1.6 % of a decision's instructions.
        let mut entries: Vec<(Cow<'a, str>, RawJson<'a>)> = Vec::with_capacity(ENTRIES_AT_ONCE);
        entries.extend(
            object
                .entries()
                .map(|(quoted, value)| (decode_string(quoted), value)),
        );
        let sorted = OnceCell::new();
        let repeats = if entries.len() <= SCAN_LOOKUP_MAX {
            (1..entries.len()).any(|i| entries[..i].iter().any(|(k, _)| *k == entries[i].0))
        } else {
            let order = sorted_order(&entries);
            let repeats = order
                .windows(2)
                .any(|w| entries[w[0] as usize].0 == entries[w[1] as usize].0);
            let _ = sorted.set(order);
            repeats
        };
        if repeats {
            entries = without_repeats(entries);
            return Self {
                entries,
                sorted: OnceCell::new(),
            };
        }
        Self { entries, sorted }
    }
}

/// Entry positions in key order; equal keys in text order.
fn sorted_order(entries: &[(Cow<'_, str>, RawJson<'_>)]) -> Vec<u32> {
    let mut order: Vec<u32> = (0..u32::try_from(entries.len()).unwrap_or(u32::MAX)).collect();
    order.sort_by(|&a, &b| entries[a as usize].0.cmp(&entries[b as usize].0));
    order
}

/// Each key once, at its first place, with its last value.
fn without_repeats<'a>(
    entries: Vec<(Cow<'a, str>, RawJson<'a>)>,
) -> Vec<(Cow<'a, str>, RawJson<'a>)> {
    let order = sorted_order(&entries);
    let mut keep = vec![false; entries.len()];
    let mut last_value: Vec<Option<RawJson<'a>>> = vec![None; entries.len()];
    for group in order.chunk_by(|&a, &b| entries[a as usize].0 == entries[b as usize].0) {
        let (first, last) = (group[0] as usize, group[group.len() - 1] as usize);
        keep[first] = true;
        last_value[first] = Some(entries[last].1);
    }
    entries
        .into_iter()
        .enumerate()
        .filter(|(i, _)| keep[*i])
        .map(|(i, (key, value))| (key, last_value[i].unwrap_or(value)))
        .collect()
}

impl<'a> MapView<'a, RawJson<'a>> for RawMap<'a> {
    fn len(&self) -> usize {
        self.entries.len()
    }

    fn iter(&self) -> impl Iterator<Item = (Cow<'a, str>, RawJson<'a>)> + '_ {
        self.entries.iter().map(|(k, v)| (k.clone(), *v))
    }

    fn get(&self, key: &str) -> Option<RawJson<'a>> {
        if self.entries.len() <= SCAN_LOOKUP_MAX {
            return self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| *v);
        }
        let sorted = self.sorted.get_or_init(|| sorted_order(&self.entries));
        let found = sorted
            .binary_search_by(|&i| self.entries[i as usize].0.as_ref().cmp(key))
            .ok()?;
        Some(self.entries[sorted[found] as usize].1)
    }
}

impl<'a> Node<'a> for RawJson<'a> {
    type Map = RawMap<'a>;
    type Items = RawItems<'a>;

    fn shape(self) -> Shape {
        match self.bytes().first() {
            Some(b'{') => Shape::Object,
            Some(b'[') => Shape::Array,
            Some(b'"') => Shape::String,
            Some(b't' | b'f') => Shape::Bool,
            Some(b'n') | None => Shape::Null,
            Some(_) => Shape::Number,
        }
    }

    fn as_map(self) -> Option<RawMap<'a>> {
        (self.shape() == Shape::Object).then(|| RawMap::read(self))
    }

    fn items(self) -> Option<RawItems<'a>> {
        (self.shape() == Shape::Array).then_some(RawItems {
            within: self,
            at: 1,
        })
    }

    fn get(self, key: &str) -> Option<Self> {
        // The last of repeated keys counts, as in a parsed document.
        self.entries()
            .filter(|(quoted, _)| key_is(quoted, key))
            .last()
            .map(|(_, value)| value)
    }

    fn as_str(self) -> Option<Cow<'a, str>> {
        (self.shape() == Shape::String).then(|| decode_string(self.text))
    }

    fn as_f64(self) -> Option<f64> {
        match self.shape() {
            Shape::Number => self.text.parse().ok(),
            _ => None,
        }
    }

    fn as_bool(self) -> Option<bool> {
        match self.text {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        }
    }

    fn is_absent(self) -> bool {
        absent_end(self.bytes(), 0, self.doc).is_some()
    }

    fn scalar_eq(self, other: Self) -> bool {
        match (self.shape(), other.shape()) {
            (Shape::String, Shape::String) => {
                self.text == other.text
                    // Escapes can spell one string two ways.
                    || ((self.text.contains('\\') || other.text.contains('\\'))
                        && super::string::contents_eq(self.text, other.text).unwrap_or_else(
                            || decode_string(self.text) == decode_string(other.text),
                        ))
            }
            (Shape::Number, Shape::Number) => text_numbers_eq(self.text, other.text),
            (Shape::Bool, Shape::Bool) | (Shape::Null, Shape::Null) => self.text == other.text,
            _ => false,
        }
    }

    fn identical(self, other: Self) -> bool {
        self.text == other.text
    }

    fn to_value(self) -> Cow<'a, Value> {
        Cow::Owned(value_of_text(self.text))
    }

    fn to_lazy_value(self) -> LazyValue<'a> {
        LazyValue::Text(self.text)
    }
}

/// The value that `text`, the JSON text of one value, stands for.
pub(super) fn value_of_text(text: &str) -> Value {
    // A number that a `Value` cannot hold exactly (past 64 bits, past a double's precision,
    // beyond f64) is reported as its text, so that a change of it never reads `x → x`.
    if text.starts_with('"')
        && let Some(decoded) = super::string::decode(text)
    {
        return Value::String(decoded.into_owned());
    }
    match serde_json::from_str(text) {
        Ok(Value::Number(n)) if !text_numbers_eq(text, &n.to_string()) => {
            Value::String(text.into())
        }
        Ok(value) => value,
        Err(_) => Value::String(text.into()),
    }
}

#[cfg(test)]
#[path = "raw_tests.rs"]
mod tests;
