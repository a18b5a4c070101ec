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

use std::collections::{BTreeMap, BTreeSet};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::{Inner, Kind, Target, header, json_response, key, lock, status};

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

/// Metadata fields an apply can set on the main resource; the rest of `metadata` is the
/// server's.
const APPLIED_METADATA: &[&str] = &["labels", "annotations", "finalizers", "ownerReferences"];

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
fn field_set(kind: Kind, config: &Map<String, Value>) -> Result<FieldSet, String> {
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

fn get_at<'v>(value: &'v Value, path: &[Seg]) -> Option<&'v Value> {
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

fn remove_at(value: &mut Value, path: &[Seg]) {
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
fn merge(kind: Kind, live: &mut Value, config: &Value, schema: &mut Vec<String>) {
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
fn conflicts(
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
fn disown(fields: &mut FieldSet, path: &[Seg]) {
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

fn conflict_response(
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

fn same_ownership(a: &[Manager], b: &[Manager]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.name == y.name
                && x.subresource == y.subresource
                && x.api_version == y.api_version
                && x.fields == y.fields
        })
}

fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "" | "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        _ => None,
    }
}

fn without_managed_fields(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    object
}

/// `PATCH` with `application/apply-patch+yaml`.
pub(super) fn apply(
    inner: &Inner,
    target: &Target,
    name: &str,
    query: &BTreeMap<String, String>,
    body: &[u8],
) -> Response {
    let kind = target.kind;
    let manager = query.get("fieldManager").map_or("", String::as_str);
    if manager.is_empty() {
        return status(
            422,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        );
    }
    if manager.len() > 128 {
        return status(
            422,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Too long: may not be more than 128 bytes",
        );
    }
    let Some(force) = parse_bool(query.get("force").map_or("", String::as_str)) else {
        return status(
            400,
            "BadRequest",
            "invalid value for force: expected true or false",
        );
    };
    let dry_run = query.get("dryRun").is_some_and(|d| d == "All");
    let subresource = match target.subresource.as_deref() {
        None => None,
        Some("status") => Some("status"),
        Some(other) => {
            return status(
                404,
                "NotFound",
                &format!("the server could not find the requested resource ({other})"),
            );
        }
    };
    let body: Value = match serde_json::from_slice(body) {
        Ok(body) => body,
        Err(e) => {
            return status(
                400,
                "BadRequest",
                &format!(
                    "the API server double reads apply bodies as JSON only (as kube-rs sends them): {e}"
                ),
            );
        }
    };
    let Some(fields) = body.as_object() else {
        return status(400, "BadRequest", "the apply body is not an object");
    };
    let expected_api_version = kind.api_version();
    let api_version = match fields.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => {
            return status(
                400,
                "BadRequest",
                "Object 'apiVersion' is missing in the apply body",
            );
        }
        Some(v) if v != expected_api_version => {
            return status(
                400,
                "BadRequest",
                &format!(
                    "the API version in the data ({v}) does not match the expected API version ({expected_api_version})"
                ),
            );
        }
        Some(v) => v.to_owned(),
    };
    match fields.get("kind").and_then(Value::as_str) {
        None | Some("") => {
            return status(
                400,
                "BadRequest",
                "Object 'Kind' is missing in the apply body",
            );
        }
        Some(k) if k != kind.kind => {
            return status(
                400,
                "BadRequest",
                &format!(
                    "the kind in the data ({k}) does not match the expected kind ({})",
                    kind.kind
                ),
            );
        }
        Some(_) => {}
    }
    let metadata = fields
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if let Some(body_name) = metadata.get("name").and_then(Value::as_str)
        && body_name != name
    {
        return status(
            400,
            "BadRequest",
            &format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            ),
        );
    }
    if let Some(namespace) = metadata.get("namespace").and_then(Value::as_str)
        && kind.namespaced
        && !namespace.is_empty()
        && namespace != target.namespace
    {
        return status(
            400,
            "BadRequest",
            "the namespace of the provided object does not match the namespace sent on the request",
        );
    }
    if metadata.get("managedFields").is_some_and(|m| !m.is_null()) {
        return status(400, "BadRequest", "metadata.managedFields must be nil");
    }
    let sent_rv = metadata
        .get("resourceVersion")
        .and_then(Value::as_str)
        .filter(|rv| !rv.is_empty());

    // What this apply manages: `status` through /status, everything else (and a few
    // metadata fields) through the main resource.
    let mut config = Map::new();
    match subresource {
        Some(_) => {
            if let Some(status) = fields.get("status").filter(|s| !s.is_null()) {
                config.insert("status".to_owned(), status.clone());
            }
        }
        None => {
            for (field, value) in fields {
                match field.as_str() {
                    "apiVersion" | "kind" | "status" => {}
                    "metadata" => {
                        let applied: Map<String, Value> = metadata
                            .iter()
                            .filter(|(k, v)| APPLIED_METADATA.contains(&k.as_str()) && !v.is_null())
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect();
                        if !applied.is_empty() {
                            config.insert(field.clone(), Value::Object(applied));
                        }
                    }
                    _ => {
                        config.insert(field.clone(), value.clone());
                    }
                }
            }
        }
    }
    let applied = match field_set(kind, &config) {
        Ok(applied) => applied,
        Err(e) => {
            return status(
                422,
                "Invalid",
                &format!(
                    "failed to create typed patch object ({}/{name}; {expected_api_version}, Kind={}): {e}",
                    target.namespace, kind.kind
                ),
            );
        }
    };
    let config = Value::Object(config);

    let mut store = lock(&inner.store);
    let k = key(kind, &target.namespace, name);
    let existing = store.objects.get(&k).cloned();
    let object_name = format!("{}.{}", kind.plural, kind.group);
    let object_name = object_name.trim_end_matches('.');
    if let (Some(existing), Some(sent_rv)) = (&existing, sent_rv)
        && existing["metadata"]["resourceVersion"].as_str() != Some(sent_rv)
    {
        return status(
            409,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on {object_name} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
            ),
        );
    }
    let mut live = match &existing {
        Some(object) => without_managed_fields(object),
        None if subresource.is_some() => {
            return status(
                404,
                "NotFound",
                &format!("{object_name} \"{name}\" not found"),
            );
        }
        None => json!({
            "apiVersion": expected_api_version,
            "kind": kind.kind,
            "metadata": {"name": name},
        }),
    };
    let before = store.managers.get(&k).cloned().unwrap_or_default();
    let mut managers = before.clone();
    let me = managers
        .iter()
        .position(|m| m.name == manager && m.subresource.as_deref() == subresource);

    let found = conflicts(&applied, &config, &live, &managers, me);
    if !found.is_empty() {
        if !force {
            return conflict_response(&found, &managers, name);
        }
        for (path, index) in &found {
            if let Some(other) = managers.get_mut(*index) {
                disown(&mut other.fields, path);
            }
        }
    }

    // Remove what this manager owned before, no longer applies, and nobody else owns.
    let previous = me
        .and_then(|i| managers.get(i))
        .map(|m| m.fields.clone())
        .unwrap_or_default();
    let others: BTreeSet<&FieldPath> = managers
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != me)
        .flat_map(|(_, m)| m.fields.keys())
        .collect();
    for (path, entry) in previous.iter().rev() {
        if applied.contains_key(path) || others.contains(path) {
            continue;
        }
        let remove = match entry {
            Entry::Leaf | Entry::Item => true,
            // A map or list goes only once nothing is left in it.
            Entry::Map | Entry::List => get_at(&live, path).is_some_and(|v| match v {
                Value::Object(m) => m.is_empty(),
                Value::Array(a) => a.is_empty(),
                _ => true,
            }),
        };
        if remove {
            remove_at(&mut live, path);
        }
    }
    merge(kind, &mut live, &config, &mut Vec::new());

    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let record = Manager {
        name: manager.to_owned(),
        subresource: subresource.map(str::to_owned),
        api_version,
        time: now.clone(),
        fields: applied,
    };
    match (me, record.fields.is_empty()) {
        (Some(i), true) => {
            managers.remove(i);
        }
        (Some(i), false) => {
            if let Some(slot) = managers.get_mut(i) {
                *slot = record;
            }
        }
        (None, true) => {}
        (None, false) => managers.push(record),
    }
    managers.retain(|m| !m.fields.is_empty());

    let unchanged = existing
        .as_ref()
        .is_some_and(|old| without_managed_fields(old) == live)
        && same_ownership(&before, &managers);
    if unchanged && let Some(existing) = existing {
        // A no-op apply writes nothing: no new resourceVersion, no watch event.
        return json_response(StatusCode::OK, &existing);
    }
    // Other managers keep their times; this one was just written. (A manager that the
    // changed fields were forced away from keeps its time, as a simplification.)
    let code = if existing.is_some() {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    if dry_run {
        if !managers.is_empty() {
            live["metadata"]["managedFields"] = render_managed_fields(&managers);
        }
        return json_response(code, &live);
    }
    if managers.is_empty() {
        store.managers.remove(&k);
    } else {
        store.managers.insert(k, managers);
    }
    let stored = store.upsert(inner, kind, &target.namespace, live);
    json_response(code, &stored)
}
