//! Imperative edits from `metadata.managedFields` (reference §8 step 3).
//!
//! Every write to an object records, per field manager, the set of fields that manager owns, in
//! the `FieldsV1` encoding: a tree whose keys are `f:<name>` (a map field), `k:<json>` (the
//! element of a keyed list whose key fields have these values), `v:<json>` (the element of a set
//! with this value), `i:<n>` (a list index) and `.` (the node itself). The fields that a manager
//! named in `--audit-drift-managers` owns through an `Update` operation were changed
//! imperatively (`kubectl edit`, `patch`, `set`, `scale` …): this module finds them and maps each
//! to its concrete path in the live object. Server-side apply (`Apply`) is never an imperative
//! edit.

use serde_json::{Map, Value};

use crate::diff::{field, value_eq};
use crate::path::{FieldPath, PathSegment};

/// A field of the live object owned by an imperative edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedField<'v> {
    pub path: FieldPath,
    pub manager: &'v str,
    /// The entry's `time`, when it has one (`kubectl scale` writes none).
    pub time: Option<&'v str>,
}

/// Most owned fields reported for one object: an object is bounded by the API server, but a
/// field set can name every element of a long list; this keeps the work per object bounded.
pub const MAX_OWNED_FIELDS: usize = 10_000;

/// The fields of `object` owned through `Update` by one of `managers`, in the order of the
/// managedFields entries, each at the most specific path that names it: a list element a manager
/// created (`.` on a `k:`/`v:`/`i:` node) whole, otherwise the leaves. Fields no longer present
/// in the live object are left out.
pub fn imperative_fields<'v, S: AsRef<str>>(
    object: &'v Value,
    managers: &[S],
) -> Vec<OwnedField<'v>> {
    let mut out = Vec::new();
    let Some(entries) = field(object, "metadata")
        .and_then(|m| field(m, "managedFields"))
        .and_then(Value::as_array)
    else {
        return out;
    };
    for entry in entries {
        let Some(manager) = field(entry, "manager").and_then(Value::as_str) else {
            continue;
        };
        let is_update = field(entry, "operation").and_then(Value::as_str) == Some("Update");
        let fields_v1 = field(entry, "fieldsType")
            .and_then(Value::as_str)
            .is_none_or(|t| t == "FieldsV1");
        if !is_update || !fields_v1 || !managers.iter().any(|m| m.as_ref() == manager) {
            continue;
        }
        let Some(set) = field(entry, "fieldsV1").and_then(Value::as_object) else {
            continue;
        };
        let time = field(entry, "time").and_then(Value::as_str);
        let mut path = Vec::new();
        walk(set, object, &mut path, &mut |path| {
            if out.len() < MAX_OWNED_FIELDS {
                out.push(OwnedField {
                    path: FieldPath::from(path.to_vec()),
                    manager,
                    time,
                });
            }
        });
    }
    out
}

/// Who last wrote the annotation `key` of `object`, by any operation: the managedFields entry
/// that owns `metadata.annotations[key]` (the latest by `time` when several share it). How the
/// audit tells since when an object is bypassed.
pub fn annotation_owner<'v>(object: &'v Value, key: &str) -> Option<(&'v str, Option<&'v str>)> {
    let entries = field(object, "metadata")
        .and_then(|m| field(m, "managedFields"))
        .and_then(Value::as_array)?;
    let owned_key = format!("f:{key}");
    entries
        .iter()
        .filter(|entry| {
            field(entry, "fieldsV1")
                .and_then(|set| field(set, "f:metadata"))
                .and_then(|m| field(m, "f:annotations"))
                .and_then(|a| field(a, &owned_key))
                .is_some()
        })
        .filter_map(|entry| {
            let manager = field(entry, "manager").and_then(Value::as_str)?;
            Some((manager, field(entry, "time").and_then(Value::as_str)))
        })
        // RFC 3339 times in UTC, as the API server writes them, order as text.
        .max_by(|a, b| a.1.cmp(&b.1))
}

fn walk(
    set: &Map<String, Value>,
    live: &Value,
    path: &mut Vec<PathSegment>,
    emit: &mut dyn FnMut(&[PathSegment]),
) {
    for (key, child) in set {
        if key == "." {
            continue;
        }
        let Some((segment, live_child)) = resolve(key, live) else {
            continue; // not in the live object any more (or not a key this code knows)
        };
        let child_set = child.as_object();
        let has_children = child_set.is_some_and(|c| c.keys().any(|k| k != "."));
        let whole_element =
            !key.starts_with("f:") && child_set.is_some_and(|c| c.contains_key("."));
        path.push(segment);
        match child_set {
            Some(child_set) if has_children && !whole_element => {
                walk(child_set, live_child, path, emit)
            }
            _ => emit(path),
        }
        path.pop();
    }
}

/// The path step a `FieldsV1` key names in `live`, and the live value there.
fn resolve<'v>(key: &str, live: &'v Value) -> Option<(PathSegment, &'v Value)> {
    if let Some(name) = key.strip_prefix("f:") {
        let value = field(live, name)?;
        return Some((PathSegment::Key(name.to_owned()), value));
    }
    let items = live.as_array()?;
    let index = if let Some(json) = key.strip_prefix("k:") {
        let wanted: Map<String, Value> = serde_json::from_str(json).ok()?;
        items.iter().position(|item| {
            wanted
                .iter()
                .all(|(k, v)| field(item, k).is_some_and(|found| value_eq(found, v)))
        })?
    } else if let Some(json) = key.strip_prefix("v:") {
        let wanted: Value = serde_json::from_str(json).ok()?;
        items.iter().position(|item| value_eq(item, &wanted))?
    } else if let Some(number) = key.strip_prefix("i:") {
        number.parse::<usize>().ok().filter(|&i| i < items.len())?
    } else {
        return None;
    };
    Some((PathSegment::Index(index), &items[index]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(object: &Value, managers: &[&str]) -> Vec<(String, String, Option<String>)> {
        imperative_fields(object, managers)
            .into_iter()
            .map(|f| {
                (
                    f.path.to_string(),
                    f.manager.to_owned(),
                    f.time.map(str::to_owned),
                )
            })
            .collect()
    }

    fn object(managed: Value) -> Value {
        json!({
            "metadata": {"name": "web", "labels": {"app": "web", "tier": "x"}, "managedFields": managed,
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "spec": {"replicas": 3, "template": {"spec": {
                "containers": [
                    {"name": "app", "image": "a:2", "ports": [{"containerPort": 80, "protocol": "TCP"}],
                     "env": [{"name": "A", "value": "1"}]},
                    {"name": "sidecar", "image": "s:1"}
                ]}}},
            "metadata_finalizers": null
        })
    }

    #[test]
    fn decodes_fields_keys_values_and_indices() {
        let o = object(json!([
            {"manager": "kubectl-client-side-apply", "operation": "Update", "time": "2026-01-01T00:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": "kubectl-set", "operation": "Update", "time": "2026-01-02T00:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {
                "k:{\"name\":\"app\"}": {"f:image": {}, "f:env": {"k:{\"name\":\"A\"}": {".": {}, "f:name": {}, "f:value": {}}}},
                "k:{\"name\":\"gone\"}": {"f:image": {}}
             }}}}}},
            {"manager": "kubectl-edit", "operation": "Update", "time": "2026-01-03T00:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:tier": {}}},
                "f:spec": {"f:template": {"f:spec": {"f:containers": {
                    "k:{\"name\":\"sidecar\"}": {".": {}, "f:image": {}, "f:name": {}},
                    "k:{\"name\":\"app\"}": {"f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}}
                }}}}}},
            {"manager": "kubectl", "operation": "Update", "subresource": "scale",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": "kubectl", "operation": "Apply", "time": "2026-01-04T00:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
        ]));
        let found = paths(&o, &["kubectl-set", "kubectl-edit", "kubectl"]);
        let t = |s: &str| Some(s.to_owned());
        assert_eq!(
            found,
            vec![
                (
                    "spec.template.spec.containers[0].image".into(),
                    "kubectl-set".into(),
                    t("2026-01-02T00:00:00Z")
                ),
                (
                    "spec.template.spec.containers[0].env[0]".into(),
                    "kubectl-set".into(),
                    t("2026-01-02T00:00:00Z")
                ),
                (
                    "metadata.labels.tier".into(),
                    "kubectl-edit".into(),
                    t("2026-01-03T00:00:00Z")
                ),
                (
                    "spec.template.spec.containers[1]".into(),
                    "kubectl-edit".into(),
                    t("2026-01-03T00:00:00Z")
                ),
                (
                    "spec.template.spec.containers[0].ports[0]".into(),
                    "kubectl-edit".into(),
                    t("2026-01-03T00:00:00Z")
                ),
                ("spec.replicas".into(), "kubectl".into(), None),
            ]
        );
    }

    #[test]
    fn set_values_and_indices_resolve_against_the_live_list() {
        let o = json!({
            "metadata": {"finalizers": ["a", "b"], "managedFields": [
                {"manager": "kubectl-patch", "operation": "Update",
                 "fieldsV1": {"f:metadata": {"f:finalizers": {".": {}, "v:\"b\"": {}, "v:\"zzz\"": {}}},
                              "f:spec": {"f:args": {"i:1": {}, "i:9": {}}}}}
            ]},
            "spec": {"args": ["x", "y"]}
        });
        assert_eq!(
            paths(&o, &["kubectl-patch"])
                .into_iter()
                .map(|p| p.0)
                .collect::<Vec<_>>(),
            ["metadata.finalizers[1]", "spec.args[1]"]
        );
    }

    #[test]
    fn malformed_entries_are_skipped() {
        let o = json!({"metadata": {"managedFields": [
            {"manager": "kubectl-edit", "operation": "Update", "fieldsV1": "nope"},
            {"operation": "Update", "fieldsV1": {"f:spec": {}}},
            {"manager": "kubectl-edit", "operation": "Update", "fieldsType": "FieldsV9", "fieldsV1": {"f:spec": {}}},
            {"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {"k:{bad": {}, "x:y": {}}},
            7
        ]}, "spec": {}});
        assert!(paths(&o, &["kubectl-edit"]).is_empty());
        assert!(
            paths(
                &json!({"metadata": {"managedFields": 3}}),
                &["kubectl-edit"]
            )
            .is_empty()
        );
        assert!(paths(&json!("scalar"), &["kubectl-edit"]).is_empty());
    }
}
