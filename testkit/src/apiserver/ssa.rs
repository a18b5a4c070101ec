//! Server-side apply: every field manager's last applied configuration, kept per object as the set
//! of fields it owns, list-map items told apart by their keys.
//!
//! An apply by manager M (for the main resource or for `/status`, each a separate manager entry)
//! checks that no other manager owns a field M sets to a different value (409 Conflict, unless
//! `force=true`, which transfers the fields to M), removes from the live object what M owned
//! before and no longer applies unless another manager owns it too, and merges M's configuration
//! in: maps field by field, list-maps item by item on their keys, anything else (scalars,
//! atomic lists) replaced whole.
//!
//! Not modelled: ownership by non-apply writers (`operation: Update`); a PUT or merge patch
//! changes the object but nobody's ownership.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::{Kind, header};

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Seg {
    Field(String),
    /// An item of a list-map: its key fields as (name, value as JSON), sorted by name.
    Key(Vec<(String, String)>),
}

pub(super) type FieldPath = Vec<Seg>;

/// What a manager owns at a path. Sets hold every ancestor of what they hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Entry {
    /// A scalar or an atomic list, owned whole.
    Leaf,
    Map,
    List,
    /// A list-map item.
    Item,
}

pub(super) type FieldSet = BTreeMap<FieldPath, Entry>;

/// A field manager's entry for one object.
#[derive(Debug, Clone)]
pub(super) struct Manager {
    pub(super) name: String,
    pub(super) subresource: Option<String>,
    pub(super) api_version: String,
    pub(super) time: String,
    pub(super) fields: FieldSet,
}

/// The keys of the list-maps of a kind (`x-kubernetes-list-type: map`), by path from the
/// object's root with list items left out. Lists not named here are atomic.
fn list_map_keys(kind: Kind, path: &[String]) -> Option<&'static [&'static str]> {
    const NAME: &[&str] = &["name"];
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    let pod_spec = |rest: &[&str]| match rest {
        ["containers" | "initContainers" | "ephemeralContainers" | "volumes"]
        | [
            "containers" | "initContainers" | "ephemeralContainers",
            "env",
        ] => Some(NAME),
        _ => None,
    };
    match (kind.group, kind.plural, path.as_slice()) {
        ("connection.drift-sentinel.io", "connections", ["status", "byPod"]) => Some(&["id"]),
        ("connection.drift-sentinel.io", "connections", ["status", "byPod", "publishStatuses"]) => {
            Some(&["source"])
        }
        (_, _, ["metadata", "ownerReferences"]) => Some(&["uid"]),
        (_, _, ["status", "conditions"]) => Some(&["type"]),
        ("", "pods", ["spec", rest @ ..]) => pod_spec(rest),
        ("apps" | "argoproj.io", _, ["spec", "template", "spec", rest @ ..]) => pod_spec(rest),
        _ => None,
    }
}

fn item_key(item: &Value, keys: &[&str]) -> Option<Vec<(String, String)>> {
    let object = item.as_object()?;
    let mut key = keys
        .iter()
        .map(|k| {
            object
                .get(*k)
                .filter(|v| !v.is_null())
                .map(|v| ((*k).to_owned(), v.to_string()))
        })
        .collect::<Option<Vec<_>>>()?;
    key.sort();
    Some(key)
}

fn matches_key(item: &Value, key: &[(String, String)]) -> bool {
    key.iter().all(|(name, value)| {
        item.get(name)
            .is_some_and(|v| serde_json::to_string(v).is_ok_and(|text| text == *value))
    })
}

/// A path as the API server writes it in conflict messages: `.status.byPod[id="a"].connectionUID`.
pub(super) fn render_path(path: &[Seg]) -> String {
    let mut text = String::new();
    for seg in path {
        match seg {
            Seg::Field(name) => {
                text.push('.');
                text.push_str(name);
            }
            Seg::Key(key) => {
                let fields: Vec<String> = key.iter().map(|(n, v)| format!("{n}={v}")).collect();
                text.push('[');
                text.push_str(&fields.join(","));
                text.push(']');
            }
        }
    }
    text
}

/// The fields an applied configuration sets.
pub(super) fn field_set(kind: Kind, config: &Map<String, Value>) -> Result<FieldSet, String> {
    let mut out = FieldSet::new();
    collect_fields(kind, config, &mut Vec::new(), &mut Vec::new(), &mut out)?;
    Ok(out)
}

fn collect_fields(
    kind: Kind,
    map: &Map<String, Value>,
    schema: &mut Vec<String>,
    path: &mut FieldPath,
    out: &mut FieldSet,
) -> Result<(), String> {
    for (name, value) in map {
        schema.push(name.clone());
        path.push(Seg::Field(name.clone()));
        let result = collect_value(kind, value, schema, path, out);
        schema.pop();
        path.pop();
        result?;
    }
    Ok(())
}

fn collect_value(
    kind: Kind,
    value: &Value,
    schema: &mut Vec<String>,
    path: &mut FieldPath,
    out: &mut FieldSet,
) -> Result<(), String> {
    match (value, list_map_keys(kind, schema)) {
        (Value::Object(map), _) => {
            out.insert(path.clone(), Entry::Map);
            collect_fields(kind, map, schema, path, out)
        }
        (Value::Array(items), Some(keys)) => {
            out.insert(path.clone(), Entry::List);
            for (index, item) in items.iter().enumerate() {
                let (Some(key), Some(fields)) = (item_key(item, keys), item.as_object()) else {
                    return Err(format!(
                        "{}: element {index}: associative list with keys has an element that omits key field {} (and doesn't have default value)",
                        render_path(path),
                        keys.iter()
                            .map(|k| format!("{k:?}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                };
                path.push(Seg::Key(key));
                if out.insert(path.clone(), Entry::Item).is_some() {
                    let message = match path.split_last() {
                        Some((last, parent)) => format!(
                            "{}: duplicate entries for key {}",
                            render_path(parent),
                            render_path(std::slice::from_ref(last))
                        ),
                        None => "duplicate entries".to_owned(),
                    };
                    path.pop();
                    return Err(message);
                }
                let result = collect_fields(kind, fields, schema, path, out);
                path.pop();
                result?;
            }
            Ok(())
        }
        _ => {
            out.insert(path.clone(), Entry::Leaf);
            Ok(())
        }
    }
}

pub(super) fn get_at<'v>(value: &'v Value, path: &[Seg]) -> Option<&'v Value> {
    path.iter().try_fold(value, |current, seg| match seg {
        Seg::Field(name) => current.as_object()?.get(name),
        Seg::Key(key) => current.as_array()?.iter().find(|i| matches_key(i, key)),
    })
}

fn get_at_mut<'v>(value: &'v mut Value, path: &[Seg]) -> Option<&'v mut Value> {
    path.iter().try_fold(value, |current, seg| match seg {
        Seg::Field(name) => current.as_object_mut()?.get_mut(name),
        Seg::Key(key) => current
            .as_array_mut()?
            .iter_mut()
            .find(|i| matches_key(i, key)),
    })
}

pub(super) fn remove_at(value: &mut Value, path: &[Seg]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    match (get_at_mut(value, parent), last) {
        (Some(Value::Object(map)), Seg::Field(name)) => {
            map.remove(name);
        }
        (Some(Value::Array(items)), Seg::Key(key)) => items.retain(|i| !matches_key(i, key)),
        _ => {}
    }
}

/// Merges an applied configuration into the live object: maps by field, list-maps by item
/// key, everything else replaced.
pub(super) fn merge(kind: Kind, live: &mut Value, config: &Value, schema: &mut Vec<String>) {
    match (config, list_map_keys(kind, schema)) {
        (Value::Object(fields), _) => {
            if !live.is_object() {
                *live = Value::Object(Map::new());
            }
            if let Value::Object(live_fields) = live {
                for (name, value) in fields {
                    schema.push(name.clone());
                    let slot = live_fields.entry(name.clone()).or_insert(Value::Null);
                    merge(kind, slot, value, schema);
                    schema.pop();
                }
            }
        }
        (Value::Array(items), Some(keys)) => {
            if !live.is_array() {
                *live = Value::Array(Vec::new());
            }
            if let Value::Array(live_items) = live {
                for item in items {
                    let existing = item_key(item, keys)
                        .and_then(|key| live_items.iter_mut().find(|l| matches_key(l, &key)));
                    match existing {
                        Some(slot) => merge(kind, slot, item, schema),
                        None => live_items.push(item.clone()),
                    }
                }
            }
        }
        _ => *live = config.clone(),
    }
}

/// Fields of `applied` (with its configuration `config`) that another manager owns and
/// `applied` would change: (path, index of the other manager).
pub(super) fn conflicts(
    applied: &FieldSet,
    config: &Value,
    live: &Value,
    managers: &[Manager],
    me: Option<usize>,
) -> Vec<(FieldPath, usize)> {
    let mut found = Vec::new();
    for (index, other) in managers.iter().enumerate() {
        if Some(index) == me {
            continue;
        }
        for (path, entry) in applied {
            let conflict = match (entry, other.fields.get(path)) {
                // Both set the value: a conflict only if this apply changes it.
                (Entry::Leaf, Some(Entry::Leaf)) => {
                    get_at(live, path).is_some_and(|v| Some(v) != get_at(config, path))
                }
                // One sets a value where the other has structure (or the reverse).
                (Entry::Leaf, Some(_)) | (_, Some(Entry::Leaf)) => true,
                _ => false,
            };
            if conflict {
                found.push((path.clone(), index));
            }
        }
    }
    found
}

/// Takes `path` (and what lies under it) away from a manager, and the maps and lists above
/// it that held nothing else.
pub(super) fn disown(fields: &mut FieldSet, path: &[Seg]) {
    let under: Vec<FieldPath> = fields
        .range(path.to_vec()..)
        .take_while(|(p, _)| p.starts_with(path))
        .map(|(p, _)| p.clone())
        .collect();
    for p in under {
        fields.remove(&p);
    }
    let mut ancestor = path.to_vec();
    while ancestor.pop().is_some() && !ancestor.is_empty() {
        let empty = fields
            .range(ancestor.clone()..)
            .nth(1)
            .is_none_or(|(p, _)| !p.starts_with(&ancestor));
        match fields.get(&ancestor) {
            Some(Entry::Map | Entry::List) if empty => {
                fields.remove(&ancestor);
            }
            _ => break,
        }
    }
}

pub(super) fn conflict_response(
    conflicts: &[(FieldPath, usize)],
    managers: &[Manager],
    object: &str,
) -> Response {
    let describe = |m: &Manager, plural: bool| {
        let mut text = format!(
            "conflict{} with {:?}",
            if plural { "s" } else { "" },
            m.name
        );
        if let Some(sub) = &m.subresource {
            text.push_str(&format!(" with subresource {sub:?}"));
        }
        text.push_str(&format!(" using {}", m.api_version));
        text
    };
    let mut by_manager: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (path, index) in conflicts {
        by_manager
            .entry(*index)
            .or_default()
            .push(render_path(path));
    }
    let mut parts = Vec::new();
    let mut causes = Vec::new();
    for (index, paths) in &by_manager {
        let Some(manager) = managers.get(*index) else {
            continue;
        };
        for path in paths {
            causes.push(json!({
                "reason": "FieldManagerConflict",
                "message": describe(manager, false),
                "field": path,
            }));
        }
        parts.push(match paths.as_slice() {
            [one] => format!("{}: {one}", describe(manager, false)),
            many => format!(
                "{}:\n{}",
                describe(manager, true),
                many.iter()
                    .map(|p| format!("- {p}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
        });
    }
    let count = conflicts.len();
    let message = format!(
        "Apply failed with {count} conflict{}: {}",
        if count == 1 { "" } else { "s" },
        parts.join("\n")
    );
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": "Conflict", "code": 409,
        "details": {"name": object, "causes": causes},
    });
    (
        StatusCode::CONFLICT,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// `fieldsV1` as the API server writes it: `f:<field>`, `k:<key JSON>` for list-map items
/// (with `.` for the item itself).
fn fields_v1(fields: &FieldSet) -> Value {
    let mut root = Map::new();
    'paths: for (path, entry) in fields {
        let mut node = &mut root;
        for seg in path {
            let name = match seg {
                Seg::Field(name) => format!("f:{name}"),
                Seg::Key(key) => {
                    let parts: Vec<String> = key
                        .iter()
                        .map(|(n, v)| format!("{}:{v}", Value::String(n.clone())))
                        .collect();
                    format!("k:{{{}}}", parts.join(","))
                }
            };
            let child = node
                .entry(name)
                .or_insert_with(|| Value::Object(Map::new()));
            let Value::Object(child) = child else {
                continue 'paths;
            };
            node = child;
        }
        if *entry == Entry::Item {
            node.insert(".".to_owned(), json!({}));
        }
    }
    Value::Object(root)
}

pub(super) fn render_managed_fields(managers: &[Manager]) -> Value {
    Value::Array(
        managers
            .iter()
            .map(|m| {
                let mut entry = json!({
                    "manager": m.name,
                    "operation": "Apply",
                    "apiVersion": m.api_version,
                    "time": m.time,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": fields_v1(&m.fields),
                });
                if let Some(sub) = &m.subresource {
                    entry["subresource"] = json!(sub);
                }
                entry
            })
            .collect(),
    )
}

/// The fields a manager owns for [`crate::ManagedFields`]: values and list-map items.
pub(super) fn owned_paths(manager: &Manager) -> Vec<String> {
    manager
        .fields
        .iter()
        .filter(|(_, e)| matches!(e, Entry::Leaf | Entry::Item))
        .map(|(p, _)| render_path(p))
        .collect()
}
