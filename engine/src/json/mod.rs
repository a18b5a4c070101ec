//! The JSON the engine reads, behind one interface: a parsed [`serde_json::Value`] (rule files,
//! the plugin's local objects, the audit's listed objects) or the text of an admission request
//! read lazily ([`RawJson`], the agent's hot path). The diff and the evaluation are written
//! once, against [`Node`]; both kinds of document give the same answers.

use std::borrow::Cow;

use serde_json::{Map, Value};

mod brackets;
mod deep;
mod lazy;
mod number;
mod raw;
mod shown;
mod string;

pub use lazy::LazyValue;
pub use number::{numbers_eq, text_numbers_eq};
pub use raw::{RawDocument, RawItems, RawJson, RawMap};
pub use shown::{Encoded, text_prefix, value_prefix};

/// The JSON type of a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Null,
    Bool,
    Number,
    String,
    Array,
    Object,
}

impl Shape {
    pub fn is_scalar(self) -> bool {
        matches!(self, Shape::Bool | Shape::Number | Shape::String)
    }
}

/// A JSON value the engine reads. Cheap to copy: a reference into a document or into text.
pub trait Node<'a>: Copy + std::fmt::Debug {
    /// An object's entries, read once.
    type Map: MapView<'a, Self>;
    /// A list's items, in order; cloning restarts nothing (it copies a position).
    type Items: Iterator<Item = Self> + Clone;

    fn shape(self) -> Shape;
    /// The object's entries; `None` for any other type.
    fn as_map(self) -> Option<Self::Map>;
    /// The list's items; `None` for any other type.
    fn items(self) -> Option<Self::Items>;
    /// `self[key]` of an object.
    fn get(self, key: &str) -> Option<Self>;
    fn as_str(self) -> Option<Cow<'a, str>>;
    fn as_f64(self) -> Option<f64>;
    fn as_bool(self) -> Option<bool>;
    /// reference §4: `null`, `[]`, and maps whose every entry is absent (so `{}` too) are absent.
    fn is_absent(self) -> bool;
    /// Equality of two scalars (or nulls): strings by content, numbers by exact value.
    fn scalar_eq(self, other: Self) -> bool;
    /// Known equal without looking inside: the same text, the same value in memory. `false`
    /// says nothing.
    fn identical(self, other: Self) -> bool;
    /// The value as a document (borrowed when it is one already).
    fn to_value(self) -> Cow<'a, Value>;
    /// The value for a change to hold: as a document, or as text read only when shown.
    fn to_lazy_value(self) -> LazyValue<'a> {
        LazyValue::Value(self.to_value())
    }
}

/// What an admission request carries its objects as: a parsed document, or the raw text of
/// the request body.
pub trait Document {
    type Node<'n>: Node<'n>
    where
        Self: 'n;
    fn node(&self) -> Self::Node<'_>;
}

impl Document for Value {
    type Node<'n> = &'n Value;
    fn node(&self) -> &Value {
        self
    }
}

/// An object's entries: in document order, and by key.
pub trait MapView<'a, N> {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn iter(&self) -> impl Iterator<Item = (Cow<'a, str>, N)> + '_;
    fn get(&self, key: &str) -> Option<N>;
    fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }
}

/// Maps up to this size are searched by scanning (no hashing).
const SCAN_LOOKUP_MAX: usize = 12;

impl<'a> MapView<'a, &'a Value> for &'a Map<String, Value> {
    fn len(&self) -> usize {
        Map::len(self)
    }

    fn iter(&self) -> impl Iterator<Item = (Cow<'a, str>, &'a Value)> + '_ {
        let map: &'a Map<String, Value> = self;
        map.iter()
            .map(|(key, value)| (Cow::Borrowed(key.as_str()), value))
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        lookup(self, key)
    }
}

/// `map[key]`: a scan for the small maps of Kubernetes objects, a hashed lookup for large ones.
#[inline]
fn lookup<'v>(map: &'v Map<String, Value>, key: &str) -> Option<&'v Value> {
    if map.len() <= SCAN_LOOKUP_MAX {
        map.iter().find(|(k, _)| k.as_str() == key).map(|(_, v)| v)
    } else {
        map.get(key)
    }
}

impl<'a> Node<'a> for &'a Value {
    type Map = &'a Map<String, Value>;
    type Items = std::slice::Iter<'a, Value>;

    #[inline]
    fn shape(self) -> Shape {
        match self {
            Value::Null => Shape::Null,
            Value::Bool(_) => Shape::Bool,
            Value::Number(_) => Shape::Number,
            Value::String(_) => Shape::String,
            Value::Array(_) => Shape::Array,
            Value::Object(_) => Shape::Object,
        }
    }

    #[inline]
    fn as_map(self) -> Option<Self::Map> {
        self.as_object()
    }

    #[inline]
    fn items(self) -> Option<Self::Items> {
        self.as_array().map(|items| items.iter())
    }

    #[inline]
    fn get(self, key: &str) -> Option<Self> {
        lookup(self.as_object()?, key)
    }

    fn as_str(self) -> Option<Cow<'a, str>> {
        Value::as_str(self).map(Cow::Borrowed)
    }

    fn as_f64(self) -> Option<f64> {
        Value::as_f64(self)
    }

    fn as_bool(self) -> Option<bool> {
        Value::as_bool(self)
    }

    fn is_absent(self) -> bool {
        match self {
            Value::Null => true,
            Value::Array(items) => items.is_empty(),
            Value::Object(map) => crate::nesting::guarded(|| map.values().all(|v| v.is_absent())),
            _ => false,
        }
    }

    #[inline]
    fn scalar_eq(self, other: Self) -> bool {
        match (self, other) {
            (Value::String(x), Value::String(y)) => str_eq(x, y),
            (Value::Number(x), Value::Number(y)) => numbers_eq(x, y),
            (Value::Bool(x), Value::Bool(y)) => x == y,
            (Value::Null, Value::Null) => true,
            _ => false,
        }
    }

    #[inline]
    fn identical(self, other: Self) -> bool {
        std::ptr::eq(self, other)
    }

    fn to_value(self) -> Cow<'a, Value> {
        Cow::Borrowed(self)
    }
}

/// String equality tuned for the short keys and values of Kubernetes objects: strings up to 16
/// bytes are compared with two overlapping word loads instead of a library call.
#[inline]
pub(crate) fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let n = a.len();
    if n != b.len() {
        return false;
    }
    fn word8(s: &[u8], at: usize) -> u64 {
        s.get(at..at + 8)
            .and_then(|w| <[u8; 8]>::try_from(w).ok())
            .map_or(0, u64::from_ne_bytes)
    }
    fn word4(s: &[u8], at: usize) -> u32 {
        s.get(at..at + 4)
            .and_then(|w| <[u8; 4]>::try_from(w).ok())
            .map_or(0, u32::from_ne_bytes)
    }
    match n {
        0 => true,
        1..=3 => a.iter().zip(b).all(|(x, y)| x == y),
        4..=7 => word4(a, 0) == word4(b, 0) && word4(a, n - 4) == word4(b, n - 4),
        8..=16 => word8(a, 0) == word8(b, 0) && word8(a, n - 8) == word8(b, n - 8),
        _ => a == b,
    }
}
