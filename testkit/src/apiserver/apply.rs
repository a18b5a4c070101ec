//! `PATCH` with `application/apply-patch+yaml`, as the API server answers it: the options
//! (`fieldManager`, `force`, `dryRun`, the `/status` subresource) and the body checked, the
//! configuration it applies, then the object and its managers changed by [`super::ssa`].

use std::collections::{BTreeMap, BTreeSet};

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use super::ssa::{
    Entry, FieldPath, FieldSet, Manager, conflict_response, conflicts, disown, field_set, get_at,
    merge, remove_at, render_managed_fields,
};
use super::{Inner, Kind, Target, json_response, key, lock, status};

/// Metadata fields an apply can set on the main resource; the rest of `metadata` is the
/// server's.
const APPLIED_METADATA: &[&str] = &["labels", "annotations", "finalizers", "ownerReferences"];

/// Why an apply is refused: the Status the server answers (code, reason, message).
struct Refused(u16, &'static str, String);

fn refused(code: u16, reason: &'static str, message: &str) -> Refused {
    Refused(code, reason, message.to_owned())
}

impl Refused {
    fn answer(self) -> Response {
        status(self.0, self.1, &self.2)
    }
}

/// The options of an apply, from its query and path.
struct Options<'q> {
    manager: &'q str,
    force: bool,
    dry_run: bool,
    /// `Some("status")` through `/status`.
    subresource: Option<&'static str>,
}

/// The options of an apply, or the answer refusing them.
fn options<'q>(
    query: &'q BTreeMap<String, String>,
    target: &Target,
) -> Result<Options<'q>, Refused> {
    let manager = query.get("fieldManager").map_or("", String::as_str);
    if manager.is_empty() {
        return Err(refused(
            422,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        ));
    }
    if manager.len() > 128 {
        return Err(refused(
            422,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Too long: may not be more than 128 bytes",
        ));
    }
    let Some(force) = parse_bool(query.get("force").map_or("", String::as_str)) else {
        return Err(refused(
            400,
            "BadRequest",
            "invalid value for force: expected true or false",
        ));
    };
    let dry_run = query.get("dryRun").is_some_and(|d| d == "All");
    let subresource = match target.subresource.as_deref() {
        None => None,
        Some("status") => Some("status"),
        Some(other) => {
            return Err(refused(
                404,
                "NotFound",
                &format!("the server could not find the requested resource ({other})"),
            ));
        }
    };
    Ok(Options {
        manager,
        force,
        dry_run,
        subresource,
    })
}

/// An apply body the server accepts: its fields, its apiVersion, its metadata and the
/// `resourceVersion` it was sent with (if any).
struct Body {
    fields: Map<String, Value>,
    api_version: String,
    metadata: Map<String, Value>,
    sent_rv: Option<String>,
}

/// The apply body for `name` of `target`, or the answer refusing it.
fn body(body: &[u8], target: &Target, name: &str) -> Result<Body, Refused> {
    let kind = target.kind;
    let body: Value = serde_json::from_slice(body).map_err(|e| {
        refused(
            400,
            "BadRequest",
            &format!(
                "the API server double reads apply bodies as JSON only (as kube-rs sends them): {e}"
            ),
        )
    })?;
    let Value::Object(fields) = body else {
        return Err(refused(
            400,
            "BadRequest",
            "the apply body is not an object",
        ));
    };
    let expected_api_version = kind.api_version();
    let api_version = match fields.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => {
            return Err(refused(
                400,
                "BadRequest",
                "Object 'apiVersion' is missing in the apply body",
            ));
        }
        Some(v) if v != expected_api_version => {
            return Err(refused(
                400,
                "BadRequest",
                &format!(
                    "the API version in the data ({v}) does not match the expected API version ({expected_api_version})"
                ),
            ));
        }
        Some(v) => v.to_owned(),
    };
    match fields.get("kind").and_then(Value::as_str) {
        None | Some("") => {
            return Err(refused(
                400,
                "BadRequest",
                "Object 'Kind' is missing in the apply body",
            ));
        }
        Some(k) if k != kind.kind => {
            return Err(refused(
                400,
                "BadRequest",
                &format!(
                    "the kind in the data ({k}) does not match the expected kind ({})",
                    kind.kind
                ),
            ));
        }
        Some(_) => {}
    }
    let metadata = fields
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    check_metadata(&metadata, kind, target, name)?;
    let sent_rv = metadata
        .get("resourceVersion")
        .and_then(Value::as_str)
        .filter(|rv| !rv.is_empty())
        .map(str::to_owned);
    Ok(Body {
        fields,
        api_version,
        metadata,
        sent_rv,
    })
}

/// The body's name and namespace agree with the URL's, and it sends no managedFields.
fn check_metadata(
    metadata: &Map<String, Value>,
    kind: Kind,
    target: &Target,
    name: &str,
) -> Result<(), Refused> {
    if let Some(body_name) = metadata.get("name").and_then(Value::as_str)
        && body_name != name
    {
        return Err(refused(
            400,
            "BadRequest",
            &format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            ),
        ));
    }
    if let Some(namespace) = metadata.get("namespace").and_then(Value::as_str)
        && kind.namespaced
        && !namespace.is_empty()
        && namespace != target.namespace
    {
        return Err(refused(
            400,
            "BadRequest",
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    if metadata.get("managedFields").is_some_and(|m| !m.is_null()) {
        return Err(refused(
            400,
            "BadRequest",
            "metadata.managedFields must be nil",
        ));
    }
    Ok(())
}

/// What an apply manages: `status` through /status, everything else (and a few metadata
/// fields) through the main resource.
fn configuration(body: &Body, subresource: Option<&str>) -> Map<String, Value> {
    let mut config = Map::new();
    match subresource {
        Some(_) => {
            if let Some(status) = body.fields.get("status").filter(|s| !s.is_null()) {
                config.insert("status".to_owned(), status.clone());
            }
        }
        None => {
            for (field, value) in &body.fields {
                match field.as_str() {
                    "apiVersion" | "kind" | "status" => {}
                    "metadata" => {
                        let applied: Map<String, Value> = body
                            .metadata
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
    config
}

/// Removes from `live` what manager `me` owned before, no longer applies, and nobody else owns.
fn remove_dropped(live: &mut Value, managers: &[Manager], me: Option<usize>, applied: &FieldSet) {
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
            Entry::Map | Entry::List => get_at(live, path).is_some_and(|v| match v {
                Value::Object(m) => m.is_empty(),
                Value::Array(a) => a.is_empty(),
                _ => true,
            }),
        };
        if remove {
            remove_at(live, path);
        }
    }
}

/// `record` takes the place of manager `me` (or joins the managers); a manager owning nothing
/// is no manager.
fn record_manager(managers: &mut Vec<Manager>, me: Option<usize>, record: Manager) {
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
    let (options, body) = match options(query, target)
        .and_then(|options| Ok((options, self::body(body, target, name)?)))
    {
        Ok(checked) => checked,
        Err(refused) => return refused.answer(),
    };
    let config = configuration(&body, options.subresource);
    let applied = match field_set(kind, &config) {
        Ok(applied) => applied,
        Err(e) => {
            return status(
                422,
                "Invalid",
                &format!(
                    "failed to create typed patch object ({}/{name}; {}, Kind={}): {e}",
                    target.namespace,
                    kind.api_version(),
                    kind.kind
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
    if let (Some(existing), Some(sent_rv)) = (&existing, &body.sent_rv)
        && existing["metadata"]["resourceVersion"].as_str() != Some(sent_rv.as_str())
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
        None if options.subresource.is_some() => {
            return status(
                404,
                "NotFound",
                &format!("{object_name} \"{name}\" not found"),
            );
        }
        None => json!({
            "apiVersion": kind.api_version(),
            "kind": kind.kind,
            "metadata": {"name": name},
        }),
    };
    let before = store.managers.get(&k).cloned().unwrap_or_default();
    let mut managers = before.clone();
    let me = managers
        .iter()
        .position(|m| m.name == options.manager && m.subresource.as_deref() == options.subresource);

    let found = conflicts(&applied, &config, &live, &managers, me);
    if !found.is_empty() {
        if !options.force {
            return conflict_response(&found, &managers, name);
        }
        for (path, index) in &found {
            if let Some(other) = managers.get_mut(*index) {
                disown(&mut other.fields, path);
            }
        }
    }
    remove_dropped(&mut live, &managers, me, &applied);
    merge(kind, &mut live, &config, &mut Vec::new());

    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let record = Manager {
        name: options.manager.to_owned(),
        subresource: options.subresource.map(str::to_owned),
        api_version: body.api_version,
        time: now,
        fields: applied,
    };
    record_manager(&mut managers, me, record);

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
    if options.dry_run {
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
