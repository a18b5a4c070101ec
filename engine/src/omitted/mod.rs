//! The zero values the API server leaves out (reference §4): for the built-in kinds the rules
//! select, which fields are stored as nothing at all when they hold `false`, `0` or `""`.
//!
//! The API server writes objects through the Go types of `k8s.io/api` with `encoding/json`: a
//! non-pointer bool, number or string tagged `omitempty` is then absent when it holds its zero,
//! so `paused: false` in a manifest (and in the `last-applied-configuration` baseline that keeps
//! it) is no `paused` on the live object. A pointer field keeps its zero
//! (`automountServiceAccountToken: false`, `securityContext.runAsUser: 0`): its absence means
//! something else, often a default of `true`. So do map values (`labels: {tier: ""}`) and list
//! elements. Neither k8s-openapi's types nor the OpenAPI schemas tell the two kinds of field
//! apart (both are an optional bool without a default), so the table (`table.rs`) is generated
//! from the Go types themselves by `tools/zero-fields`, and compiled in: it is looked up per
//! kind once per comparison, and only where one side of a field is absent.
//!
//! The table also marks the zeros that kube-apiserver's defaulting replaces with a value of its
//! own (`imagePullPolicy: ""` is stored as `IfNotPresent`, a probe's `timeoutSeconds: 0` as 1),
//! found by running that defaulting: a declared one says nothing about what is stored, so the
//! audit's declared state leaves it out (reference §8 step 2, `baseline`).

use serde_json::{Number, Value};

use crate::json::{MapView, Node, Shape};
use crate::path::{AsSegment, SegmentRef};

#[rustfmt::skip]
mod table;

/// One kind of the table: its object's fields, and whether kube-apiserver's defaulting runs on
/// it (not on a custom resource, which is stored as sent).
#[derive(Debug)]
pub struct Kind {
    group: &'static str,
    kind: &'static str,
    object: &'static Object,
    defaulted: bool,
}

/// The fields of one Go struct that the table describes, sorted by JSON name.
#[derive(Debug)]
pub struct Object {
    fields: &'static [Field],
}

/// One JSON field: the zero the API server leaves out, if any, whether its defaulting replaces
/// that zero with a value (`imagePullPolicy: ""` is stored as `IfNotPresent`), and the struct
/// below it.
#[derive(Debug)]
pub struct Field {
    name: &'static str,
    zero: Option<Zero>,
    defaulted: bool,
    nested: Nested,
}

/// The JSON type of the zero a field leaves out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zero {
    /// `false`.
    Bool,
    /// `0` (any spelling of zero: `0.0`, `-0`).
    Number,
    /// `""`.
    String,
}

/// How a field holds a struct of the table.
#[derive(Debug, Clone, Copy)]
pub enum Nested {
    No,
    Object(&'static Object),
    ListOf(&'static Object),
    MapOf(&'static Object),
}

impl Object {
    fn field(&self, name: &str) -> Option<&'static Field> {
        let fields: &'static [Field] = self.fields;
        fields
            .binary_search_by(|f| f.name.cmp(name))
            .ok()
            .map(|i| &fields[i])
    }
}

impl Field {
    /// Whether `value`, held by this field, is what the API server stores as nothing: the
    /// field's zero, or an object all of whose entries are absent or such zeros (§4: a map left
    /// empty by normalisation is dropped in turn).
    fn omits<'a, N: Node<'a>>(&self, value: N) -> bool {
        match value.shape() {
            Shape::Object => match self.nested {
                Nested::Object(object) => crate::nesting::guarded(|| object.all_omitted(value)),
                _ => false,
            },
            _ => self.is_zero(value),
        }
    }

    /// Whether `value` is this field's zero (`false`, `0`, `""`, as its type has it).
    fn is_zero<'a, N: Node<'a>>(&self, value: N) -> bool {
        match (self.zero, value.shape()) {
            (Some(Zero::Bool), Shape::Bool) => value.as_bool() == Some(false),
            (Some(Zero::String), Shape::String) => value.as_str().is_some_and(|s| s.is_empty()),
            (Some(Zero::Number), Shape::Number) => is_zero_number(value),
            _ => false,
        }
    }
}

impl Object {
    /// Every entry of the object `value` is absent, or a zero this struct leaves out.
    fn all_omitted<'a, N: Node<'a>>(&self, value: N) -> bool {
        value.as_map().is_some_and(|map| {
            map.iter().all(|(key, entry)| {
                entry.is_absent() || self.field(&key).is_some_and(|f| f.omits(entry))
            })
        })
    }
}

/// Exactly zero: a number that only looks like zero as a double (`1e-400`) is not.
fn is_zero_number<'a, N: Node<'a>>(value: N) -> bool {
    match value.to_value().as_ref() {
        Value::Number(n) => crate::json::numbers_eq(n, &Number::from(0)),
        _ => false,
    }
}

/// The zeros one kind's objects leave out: what the diff consults, where one side of a field
/// is absent. [`OmittedZeros::NONE`] for a kind the table does not know (every value counts).
#[derive(Debug, Clone, Copy, Default)]
pub struct OmittedZeros(Option<&'static Kind>);

impl OmittedZeros {
    /// No field leaves out its zero.
    pub const NONE: Self = Self(None);

    /// The zeros objects of `group`/`kind` leave out: the table's, for Deployments,
    /// StatefulSets, DaemonSets and Argo Rollouts; [`Self::NONE`] for any other kind.
    pub fn of_kind(group: &str, kind: &str) -> Self {
        Self(
            table::KINDS
                .iter()
                .find(|k| k.group == group && k.kind == kind),
        )
    }

    /// Whether the table knows the kind.
    pub fn is_known(self) -> bool {
        self.0.is_some()
    }

    fn object(self) -> Option<&'static Object> {
        self.0.map(|kind| kind.object)
    }

    /// Where a declared object of this kind starts in the table, for finding the zeros that
    /// kube-apiserver's defaulting replaces ([`Place::defaulted_zero`]); `None` for a kind it
    /// does not default (a custom resource) or does not know.
    pub(crate) fn defaulted_root(self) -> Option<Place> {
        self.0
            .filter(|kind| kind.defaulted)
            .map(|kind| Place::Object(kind.object))
    }

    /// Every field of the kind that leaves out its zero, as a path pattern (`[*]` for a list's
    /// items, `*` for a map's values) with that zero: the table as data, for a second reading
    /// of it (the differential test's model) and for people.
    pub fn fields(self) -> Vec<(String, Zero)> {
        fn walk(
            object: &'static Object,
            at: &str,
            on_path: &mut Vec<*const Object>,
            out: &mut Vec<(String, Zero)>,
        ) {
            if on_path.contains(&(object as *const Object)) {
                return; // a type that contains itself: its fields are listed once above
            }
            on_path.push(object);
            for field in object.fields {
                let path = if at.is_empty() {
                    field.name.to_owned()
                } else {
                    format!("{at}.{}", field.name)
                };
                if let Some(zero) = field.zero {
                    out.push((path.clone(), zero));
                }
                match field.nested {
                    Nested::No => {}
                    Nested::Object(o) => walk(o, &path, on_path, out),
                    Nested::ListOf(o) => walk(o, &format!("{path}[*]"), on_path, out),
                    Nested::MapOf(o) => walk(o, &format!("{path}.*"), on_path, out),
                }
            }
            on_path.pop();
        }
        let mut out = Vec::new();
        if let Some(root) = self.object() {
            walk(root, "", &mut Vec::new(), &mut out);
        }
        out
    }

    /// Whether `value`, found at `path` of an object of this kind, is stored by the API server
    /// as nothing at all: a zero of a field that leaves it out, or an object of nothing else.
    /// Cheap for what cannot be one (any other scalar, a list); a path is followed only for a
    /// zero or an object.
    pub fn omits<'a, N: Node<'a>, S: AsSegment>(self, path: &[S], value: N) -> bool {
        let candidate = match value.shape() {
            Shape::Bool => value.as_bool() == Some(false),
            Shape::String => value.as_str().is_some_and(|s| s.is_empty()),
            Shape::Number => is_zero_number(value),
            Shape::Object => true,
            Shape::Null | Shape::Array => false,
        };
        candidate && self.field_at(path).is_some_and(|f| f.omits(value))
    }

    /// The field the last segment of `path` names; `None` for a list element, a map value, or
    /// a path the table does not follow.
    fn field_at<S: AsSegment>(self, path: &[S]) -> Option<&'static Field> {
        let (last, parents) = path.split_last()?;
        let mut place = Place::Object(self.object()?);
        for segment in parents {
            place = place.step(segment.as_segment())?.1?;
        }
        place.step(last.as_segment())?.0
    }

    /// Where `path` leads in the table, for comparing whole subtrees ([`Place`]).
    pub(crate) fn place_at<S: AsSegment>(self, path: &[S]) -> Option<Place> {
        let mut place = Place::Object(self.object()?);
        for segment in path {
            place = place.step(segment.as_segment())?.1?;
        }
        Some(place)
    }
}

/// A position in the table: inside an object, at a list's items, or at a map's values.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Place {
    Object(&'static Object),
    Items(&'static Object),
    Values(&'static Object),
}

impl Place {
    /// One step down: the field it names (for a key of an object) and where it leads.
    fn step(self, segment: SegmentRef<'_>) -> Option<(Option<&'static Field>, Option<Place>)> {
        match (self, segment) {
            (Place::Object(object), SegmentRef::Key(key)) => {
                let field = object.field(key)?;
                let below = match field.nested {
                    Nested::No => None,
                    Nested::Object(o) => Some(Place::Object(o)),
                    Nested::ListOf(o) => Some(Place::Items(o)),
                    Nested::MapOf(o) => Some(Place::Values(o)),
                };
                Some((Some(field), below))
            }
            (Place::Items(object), SegmentRef::Index(_))
            | (Place::Values(object), SegmentRef::Key(_)) => {
                Some((None, Some(Place::Object(object))))
            }
            _ => None,
        }
    }

    /// The place of the entry `key` of an object (or of a map's value).
    pub(crate) fn key(self, key: &str) -> Option<Place> {
        self.step(SegmentRef::Key(key))?.1
    }

    /// The place of a list's items.
    pub(crate) fn items(self) -> Option<Place> {
        self.step(SegmentRef::Index(0))?.1
    }

    /// Whether `value`, the entry `key` of an object at this place whose other side lacks it,
    /// is stored as nothing (see [`OmittedZeros::omits`]).
    pub(crate) fn omits_entry<'a, N: Node<'a>>(self, key: &str, value: N) -> bool {
        matches!(self.step(SegmentRef::Key(key)), Some((Some(field), _)) if field.omits(value))
    }

    /// Whether `value`, the entry `key` of an object at this place, is a zero that
    /// kube-apiserver's defaulting replaces with a value of its own (`imagePullPolicy: ""`,
    /// a probe's `timeoutSeconds: 0`, a port's `protocol: ""`): declared, it says nothing about
    /// what is stored (reference §8 step 2).
    pub(crate) fn defaulted_zero<'a, N: Node<'a>>(self, key: &str, value: N) -> bool {
        matches!(self.step(SegmentRef::Key(key)), Some((Some(field), _)) if field.defaulted && field.is_zero(value))
    }
}

#[cfg(test)]
mod tests;
