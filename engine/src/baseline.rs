//! The audit's comparison of a live object with its declared state (reference §8 step 2).
//!
//! The declared state is the `kubectl.kubernetes.io/last-applied-configuration` annotation. Only
//! what it declares is compared: a declared field whose live value differs is a change; a field
//! it does not declare (a server default, a controller's field) never is. Keyed lists (the §4
//! merge keys) are compared element by element — a declared element missing live, or differing
//! in a declared field, is a change at that element's path, and elements that exist only live
//! are not drift — while lists of scalars and lists without keys compare whole.
//!
//! Rather than a second diff, the comparison builds the object *as declared*: the live object
//! with every declared value laid over it ([`expected`]). Everything the baseline does not
//! declare is then equal on both sides by construction, so the one diff of §4 — with the rule's
//! own scope (system fields, `include`, `exclude`) and its `mutable` descent — reports exactly the
//! declared fields that differ, at the live object's paths.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::diff::{self, Change, Scope, element_keys, is_absent, merge_key_for};
use crate::omitted::{OmittedZeros, Place};
use crate::path::PathPattern;

/// The annotation `kubectl apply` keeps the declared object in.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Why a baseline cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BaselineError {
    #[error("the {LAST_APPLIED_ANNOTATION} annotation is not JSON: {0}")]
    NotJson(String),
    #[error("the {LAST_APPLIED_ANNOTATION} annotation does not hold a JSON object")]
    NotAnObject,
}

/// The baseline of `object`: `None` without the annotation (or with an empty one).
pub fn baseline_of(object: &Value) -> Option<Result<Value, BaselineError>> {
    let text = crate::evaluation::annotation(object, LAST_APPLIED_ANNOTATION)?;
    if text.trim().is_empty() {
        return None;
    }
    // Anyone who may update the object writes this text (reference §5).
    if let Err(e) = crate::nesting::check_json(text.as_bytes()) {
        return Some(Err(BaselineError::NotJson(e.to_string())));
    }
    Some(match serde_json::from_str::<Value>(&text) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(_) => Err(BaselineError::NotAnObject),
        Err(e) => Err(BaselineError::NotJson(e.to_string())),
    })
}

/// The live object as declared: `live` with every value `declared` declares laid over it.
/// Maps keep the live keys (in the live order) and gain the declared ones; keyed lists keep the
/// live elements in the live order, each overlaid with the declared element of the same key,
/// and gain the declared elements missing live at their declared position; anything else
/// (a scalar, a list of scalars, a list without keys, a value of another type) is the declared
/// value. A declared `null`, `{}` or `[]` declares nothing (§4: they are all "absent"), nor does
/// a zero that the kind's defaulting replaces (`zeros`: `imagePullPolicy: ""`, §8 step 2).
pub fn expected(declared: &Value, live: &Value, zeros: OmittedZeros) -> Value {
    overlay(Some(live), declared, None, zeros.defaulted_root())
}

/// Whether `declared`, the value of `key` in a declared object at `place`, declares nothing.
/// The table is consulted only for a zero (most declared values are not one).
fn declares_nothing(place: Option<Place>, key: &str, declared: &Value) -> bool {
    let zero = match declared {
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    };
    is_absent(declared) || (zero && place.is_some_and(|p| p.defaulted_zero(key, declared)))
}

/// The place of a declared container value `value` at `key` below `place`; a scalar needs none.
fn place_below(place: Option<Place>, key: &str, value: &Value) -> Option<Place> {
    match value {
        Value::Object(_) | Value::Array(_) => place.and_then(|p| p.key(key)),
        _ => None,
    }
}

fn overlay(
    live: Option<&Value>,
    declared: &Value,
    list_name: Option<&str>,
    place: Option<Place>,
) -> Value {
    match (live, declared) {
        (Some(Value::Object(live)), Value::Object(declared)) => overlay_map(live, declared, place),
        (Some(Value::Array(live)), Value::Array(declared)) => {
            overlay_list(live, declared, list_name, place.and_then(Place::items))
        }
        _ => declared.clone(),
    }
}

fn overlay_map(
    live: &Map<String, Value>,
    declared: &Map<String, Value>,
    place: Option<Place>,
) -> Value {
    let mut out = Map::with_capacity(live.len().max(declared.len()));
    for (key, value) in live {
        let merged = match declared.get(key) {
            Some(d) if !declares_nothing(place, key, d) => {
                overlay(Some(value), d, Some(key), place_below(place, key, d))
            }
            _ => value.clone(),
        };
        out.insert(key.clone(), merged);
    }
    for (key, value) in declared {
        if !live.contains_key(key) && !declares_nothing(place, key, value) {
            out.insert(key.clone(), value.clone());
        }
    }
    Value::Object(out)
}

/// `items`: the place of the list's items in the kind's table.
fn overlay_list(
    live: &[Value],
    declared: &[Value],
    list_name: Option<&str>,
    items: Option<Place>,
) -> Value {
    let keys = merge_key_for(list_name, declared.iter(), live.iter()).and_then(|key| {
        Some((
            element_keys(key, declared.iter())?,
            element_keys(key, live.iter())?,
        ))
    });
    let Some((declared_keys, live_keys)) = keys else {
        // A list of scalars, or one whose elements lack a unique key: compared whole.
        return Value::Array(declared.to_vec());
    };
    let declared_at: HashMap<&str, usize> = declared_keys
        .iter()
        .enumerate()
        .map(|(i, k)| (k.as_ref(), i))
        .collect();
    let mut out = Vec::with_capacity(live.len() + declared.len());
    for (item, key) in live.iter().zip(&live_keys) {
        match declared_at.get(key.as_ref()) {
            Some(&i) => out.push(overlay(Some(item), &declared[i], None, items)),
            None => out.push(item.clone()),
        }
    }
    let live_set: std::collections::HashSet<&str> = live_keys.iter().map(|k| k.as_ref()).collect();
    for (i, key) in declared_keys.iter().enumerate() {
        if !live_set.contains(key.as_ref()) && !is_absent(&declared[i]) {
            // At its declared position, so that the change names the element's declared index;
            // inserting never changes the relative order of the live elements.
            out.insert(i.min(out.len()), declared[i].clone());
        }
    }
    Value::Array(out)
}

/// The declared fields of `live` whose value differs from `declared`, within `scope`, with
/// `descend` (the rule's `mutable`) looking inside added or removed maps as at admission.
/// `old` is the declared value and `new` the live one. A declared zero that the kind leaves
/// out (`zeros`: `paused: false`) equals its absence live, and still differs from any other
/// live value (`paused: true`).
pub fn changes(
    declared: &Value,
    live: &Value,
    scope: &Scope,
    descend: &[PathPattern],
    zeros: OmittedZeros,
) -> Vec<Change<'static>> {
    let expected = expected(declared, live, zeros);
    diff::diff(&expected, live, scope, descend, zeros)
        .into_iter()
        .map(Change::into_owned)
        .collect()
}

/// Whether the declared state says anything about the live field at `path`: the baseline
/// declares it (followed through keyed lists by merge key; a zero the kind's defaulting
/// replaces declares nothing), or it lies in a list the baseline declares whole (a list of
/// scalars or without keys), which [`changes`] compares whole.
pub fn declares(
    declared: &Value,
    live: &Value,
    path: &[crate::path::PathSegment],
    zeros: OmittedZeros,
) -> bool {
    use crate::path::PathSegment;
    let (mut d, mut l) = (declared, Some(live));
    let mut list_name: Option<&str> = None;
    let mut place = zeros.defaulted_root();
    for segment in path {
        match segment {
            PathSegment::Key(key) => {
                let Some(next) = diff::field(d, key).filter(|v| !declares_nothing(place, key, v))
                else {
                    return false;
                };
                d = next;
                l = l.and_then(|l| diff::field(l, key));
                list_name = Some(key);
                place = place_below(place, key, next);
            }
            PathSegment::Index(index) => {
                let (Some(declared_items), Some(live_items)) =
                    (d.as_array(), l.and_then(Value::as_array))
                else {
                    return false;
                };
                let Some(item) = live_items.get(*index) else {
                    return false;
                };
                let key = merge_key_for(list_name, declared_items.iter(), live_items.iter())
                    .filter(|&key| {
                        element_keys(key, declared_items.iter()).is_some()
                            && element_keys(key, live_items.iter()).is_some()
                    });
                let Some(key) = key else {
                    return true; // compared whole
                };
                let wanted = diff::element_key(key, item);
                let Some(next) = declared_items
                    .iter()
                    .find(|e| wanted.is_some() && diff::element_key(key, *e) == wanted)
                else {
                    return false;
                };
                d = next;
                l = Some(item);
                list_name = None;
                place = place.and_then(Place::items);
            }
        }
    }
    true
}

#[cfg(test)]
mod tests;
