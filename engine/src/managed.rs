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

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::diff::{field, value_eq};
use crate::json::{MapView, Node};
use crate::path::{FieldPath, PathSegment};

/// A field of the live object and the managedFields entry that owns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedField<'v> {
    pub path: FieldPath,
    pub manager: &'v str,
    /// `Update` or `Apply` (server-side apply).
    pub operation: &'v str,
    /// The entry's subresource (`scale`, `status`), when it was written through one.
    pub subresource: Option<&'v str>,
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
    fields_where(
        object,
        |manager, update| update && managers.iter().any(|m| m.as_ref() == manager),
        Granularity::WholeElements,
    )
}

/// The fields of `object` every managedFields entry owns (any manager, `Update` or `Apply`),
/// as [`imperative_fields`] finds them: where the audit looks up who owns a drifted field now
/// (reference §8 "Who and why").
pub fn owned_fields(object: &Value) -> Vec<OwnedField<'_>> {
    fields_where(object, |_, _| true, Granularity::WholeElements)
}

/// The fields of `object` every managedFields entry owns, each at the path of the field itself:
/// a list element's fields apart from the element (whose own `.` names only its existence, and
/// is left out when the entry names fields of it). Where `kubectl drift blame` finds who owns
/// each field ([`leaf_owner`]).
pub fn owned_leaves(object: &Value) -> Vec<OwnedField<'_>> {
    fields_where(object, |_, _| true, Granularity::Leaves)
}

/// The entry that owns the field at `path` among `owned` ([`owned_leaves`]): of the entries
/// owning the field itself or a whole it is part of (an atomic map or list), the one naming the
/// longest path, then the latest by `time` (co-owners of an applied value; an entry without a
/// time counts as oldest).
pub fn leaf_owner<'o, 'v>(
    owned: &'o [OwnedField<'v>],
    path: &[PathSegment],
) -> Option<&'o OwnedField<'v>> {
    owned
        .iter()
        .filter(|f| path.starts_with(f.path.segments()))
        .max_by(|a, b| (a.path.segments().len(), a.time).cmp(&(b.path.segments().len(), b.time)))
}

/// How finely [`fields_where`] names what an entry owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Granularity {
    /// A list element the entry created (`.`) whole: what an imperative edit added.
    WholeElements,
    /// Every field at its own path.
    Leaves,
}

/// The entry that wrote `path` last among `owned`: the latest by `time` of those owning the
/// path, a part of it or a whole it is part of (an entry without a time counts as oldest).
pub fn owner_of<'o, 'v>(
    owned: &'o [OwnedField<'v>],
    path: &[PathSegment],
) -> Option<&'o OwnedField<'v>> {
    owned
        .iter()
        .filter(|f| {
            let owned_path = f.path.segments();
            owned_path.starts_with(path) || path.starts_with(owned_path)
        })
        .max_by(|a, b| a.time.cmp(&b.time))
}

fn fields_where<'v>(
    object: &'v Value,
    keep: impl Fn(&str, bool) -> bool,
    granularity: Granularity,
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
        let operation = field(entry, "operation")
            .and_then(Value::as_str)
            .unwrap_or("");
        let is_update = operation == "Update";
        let subresource = field(entry, "subresource")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let fields_v1 = field(entry, "fieldsType")
            .and_then(Value::as_str)
            .is_none_or(|t| t == "FieldsV1");
        if !fields_v1 || !keep(manager, is_update) {
            continue;
        }
        let Some(set) = field(entry, "fieldsV1").and_then(Value::as_object) else {
            continue;
        };
        let time = field(entry, "time").and_then(Value::as_str);
        let mut path = Vec::new();
        walk(set, object, &mut path, granularity, &mut |path| {
            if out.len() < MAX_OWNED_FIELDS {
                out.push(OwnedField {
                    path: FieldPath::from(path.to_vec()),
                    manager,
                    operation,
                    subresource,
                    time,
                });
            }
        });
    }
    out
}

/// The managedFields entry an UPDATE wrote, as the API server shows it to admission webhooks:
/// the object's `managedFields` are brought up to date before validating admission, so the
/// entry (manager, operation, subresource) that the new object has and the old one has not,
/// or has with another `time`, is the request's. The latest by `time` when several are (a
/// mutating webhook's `admission` entry besides the request's). This is the key that joins the
/// webhook's record of an edit with the field's owner the audit finds later.
///
/// Run for every finding of the webhook, so made cheap: an entry the request left alone is the
/// same text in both objects (the API server writes both), found beside its place without
/// reading it; only the others are read, each in one pass, borrowed, and only the one returned
/// is copied.
pub fn request_entry<'v, N: Node<'v>>(old: N, new: N) -> Option<EntryStamp> {
    let entries = |object: N| {
        object
            .get("metadata")
            .and_then(|m| m.get("managedFields"))
            .and_then(Node::items)
            .into_iter()
            .flatten()
            .take(MAX_ENTRIES)
    };
    let before: Vec<N> = entries(old).collect();
    // Read only when an entry is not found unchanged.
    let mut before_stamps: Option<Vec<Stamp<'v>>> = None;
    let mut latest: Option<Stamp<'v>> = None;
    for (at, entry) in entries(new).enumerate() {
        if unchanged_near(&before, at, entry) {
            continue;
        }
        let Some(stamp) = Stamp::of(entry) else {
            continue;
        };
        let before_stamps = before_stamps
            .get_or_insert_with(|| before.iter().copied().filter_map(Stamp::of).collect());
        // The last of the latest, as `Iterator::max_by` picks.
        if !before_stamps.contains(&stamp)
            && latest.as_ref().is_none_or(|found| stamp.time >= found.time)
        {
            latest = Some(stamp);
        }
    }
    latest.map(Stamp::into_owned)
}

/// Whether the entry at `at` of the new object is, as text, the old object's entry at the same
/// place, or one place on or back: the API server keeps the entries sorted by operation and
/// time, so the one a request wrote moves to the end of its operation's, and the entries after
/// where it was (or where a new one went) move by one. Known equal text has an equal stamp; an
/// entry found elsewhere or not at all is compared by its stamp. `false` says nothing.
fn unchanged_near<'v, N: Node<'v>>(before: &[N], at: usize, entry: N) -> bool {
    [Some(at), at.checked_add(1), at.checked_sub(1)]
        .into_iter()
        .flatten()
        .filter_map(|i| before.get(i))
        .any(|old| old.identical(entry))
}

/// Most managedFields entries read from one object for [`request_entry`] (the API server
/// keeps one per manager, operation and subresource: a handful).
const MAX_ENTRIES: usize = 256;

/// One managedFields entry without its field set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryStamp {
    pub manager: String,
    pub operation: String,
    pub subresource: String,
    pub time: Option<String>,
}

/// An [`EntryStamp`] borrowed from the object's text where it can be, each part cut to
/// [`MAX_STAMP_BYTES`].
#[derive(Debug, PartialEq, Eq)]
struct Stamp<'v> {
    manager: Cow<'v, str>,
    operation: Cow<'v, str>,
    subresource: Cow<'v, str>,
    time: Option<Cow<'v, str>>,
}

impl<'v> Stamp<'v> {
    /// The stamp of an entry with a `manager`, its members read once.
    fn of<N: Node<'v>>(entry: N) -> Option<Self> {
        let members = entry.as_map()?;
        let text = |key: &str| {
            members
                .get(key)
                .and_then(Node::as_str)
                .map(|t| crate::truncate::bytes_within(t, MAX_STAMP_BYTES))
        };
        Some(Self {
            manager: text("manager")?,
            operation: text("operation").unwrap_or_default(),
            subresource: text("subresource").unwrap_or_default(),
            time: text("time"),
        })
    }

    fn into_owned(self) -> EntryStamp {
        EntryStamp {
            manager: self.manager.into_owned(),
            operation: self.operation.into_owned(),
            subresource: self.subresource.into_owned(),
            time: self.time.map(Cow::into_owned),
        }
    }
}

/// Longest manager, operation, subresource or time kept from an entry (the API server takes a
/// manager of at most 128 characters).
const MAX_STAMP_BYTES: usize = 256;

/// Who last wrote the annotation `key` of `object`, by any operation: the managedFields entry
/// that owns `metadata.annotations[key]` (the latest by `time` when several share it). How the
/// audit tells since when an object is bypassed, and how the webhook tells that a bypass
/// annotation was not rewritten since the edit it saw set it (the same entry owns it still).
pub fn annotation_owner<'v, N: Node<'v>>(object: N, key: &str) -> Option<AnnotationOwner<'v>> {
    let entries = object
        .get("metadata")
        .and_then(|m| m.get("managedFields"))
        .and_then(Node::items)?;
    let owned_key = format!("f:{key}");
    entries
        .take(MAX_ENTRIES)
        .filter(|entry| {
            entry
                .get("fieldsV1")
                .and_then(|set| set.get("f:metadata"))
                .and_then(|m| m.get("f:annotations"))
                .and_then(|a| a.get(&owned_key))
                .is_some()
        })
        .filter_map(Stamp::of)
        // RFC 3339 times in UTC, as the API server writes them, order as text.
        .max_by(|a, b| a.time.cmp(&b.time))
        .map(AnnotationOwner)
}

/// The managedFields entry that owns an annotation ([`annotation_owner`]), borrowed from the
/// object where it can be.
#[derive(Debug, PartialEq, Eq)]
pub struct AnnotationOwner<'v>(Stamp<'v>);

impl<'v> AnnotationOwner<'v> {
    pub fn manager(&self) -> &Cow<'v, str> {
        &self.0.manager
    }

    pub fn time(&self) -> Option<&Cow<'v, str>> {
        self.0.time.as_ref()
    }

    pub fn into_owned(self) -> EntryStamp {
        self.0.into_owned()
    }
}

fn walk(
    set: &Map<String, Value>,
    live: &Value,
    path: &mut Vec<PathSegment>,
    granularity: Granularity,
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
        let whole_element = granularity == Granularity::WholeElements
            && !key.starts_with("f:")
            && child_set.is_some_and(|c| c.contains_key("."));
        path.push(segment);
        match child_set {
            Some(child_set) if has_children && !whole_element => {
                walk(child_set, live_child, path, granularity, emit)
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
    use crate::json::Document as _;
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
    fn every_field_has_its_own_owner() {
        let o = json!({
            "metadata": {"name": "web", "labels": {"app": "web"}, "managedFields": [
                {"manager": "kustomize-controller", "operation": "Apply", "time": "2026-01-03T00:00:00Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
                        "k:{\"name\":\"app\"}": {".": {}, "f:name": {}, "f:resources": {}}}}}}}},
                {"manager": "kubectl-edit", "operation": "Update", "time": "2026-01-02T00:00:00Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {
                        "k:{\"name\":\"app\"}": {"f:image": {}}}}}}}},
                {"manager": "kubectl", "operation": "Update", "subresource": "scale",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
                {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status",
                 "time": "2026-01-04T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:replicas": {}}}}
            ]},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [
                {"name": "app", "image": "a:2", "terminationMessagePath": "/dev/termination-log",
                 "resources": {"limits": {"cpu": "1"}}}]}}},
            "status": {"replicas": 3}
        });
        let owned = owned_leaves(&o);
        assert!(
            !owned
                .iter()
                .any(|f| f.path.to_string() == "spec.template.spec.containers[0]"),
            "an element whose fields are named is not owned whole"
        );
        for (path, expected) in [
            // The edit took the image from the apply (an Update takes a field from its other
            // owners), which owns the element and its other fields.
            (
                "spec.template.spec.containers[0].image",
                Some(("kubectl-edit", "Update", None)),
            ),
            (
                "spec.template.spec.containers[0].name",
                Some(("kustomize-controller", "Apply", None)),
            ),
            // An atomic field owns what is under it.
            (
                "spec.template.spec.containers[0].resources.limits.cpu",
                Some(("kustomize-controller", "Apply", None)),
            ),
            // Defaulted by the API server: nobody's.
            (
                "spec.template.spec.containers[0].terminationMessagePath",
                None,
            ),
            // Co-owned: the entry with a time is the latest.
            (
                "spec.replicas",
                Some(("kustomize-controller", "Apply", None)),
            ),
            (
                "status.replicas",
                Some(("kube-controller-manager", "Update", Some("status"))),
            ),
            (
                "metadata.labels.app",
                Some(("kustomize-controller", "Apply", None)),
            ),
        ] {
            let found = leaf_owner(&owned, FieldPath::parse(path).unwrap().segments())
                .map(|f| (f.manager, f.operation, f.subresource));
            assert_eq!(found, expected, "{path}");
        }
        // The whole-element view, as the audit reads imperative edits, is unchanged.
        assert!(
            owned_fields(&o)
                .iter()
                .any(|f| f.path.to_string() == "spec.template.spec.containers[0]")
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

    #[test]
    fn the_entry_a_request_wrote_is_the_one_it_changed() {
        let entry = |manager: &str, operation: &str, time: &str| json!({"manager": manager, "operation": operation, "time": time, "fieldsV1": {}});
        let with = |entries: Vec<Value>| json!({"metadata": {"managedFields": entries}});
        let old = with(vec![
            entry(
                "kubectl-client-side-apply",
                "Update",
                "2026-01-01T00:00:00Z",
            ),
            entry("kubectl-edit", "Update", "2026-01-02T00:00:00Z"),
        ]);
        let stamp = |new: &Value| request_entry(&old, new).map(|e| (e.manager, e.time));
        // An entry whose time moved.
        let edited = with(vec![
            entry(
                "kubectl-client-side-apply",
                "Update",
                "2026-01-01T00:00:00Z",
            ),
            entry("kubectl-edit", "Update", "2026-01-03T00:00:00Z"),
        ]);
        assert_eq!(
            stamp(&edited),
            Some(("kubectl-edit".into(), Some("2026-01-03T00:00:00Z".into())))
        );
        // A new entry; the latest of two new ones.
        let patched = with(vec![
            entry(
                "kubectl-client-side-apply",
                "Update",
                "2026-01-01T00:00:00Z",
            ),
            entry("kubectl-edit", "Update", "2026-01-02T00:00:00Z"),
            entry("kubectl-patch", "Update", "2026-01-04T00:00:00Z"),
            entry("before-admission", "Update", "2026-01-03T00:00:00Z"),
        ]);
        assert_eq!(
            stamp(&patched),
            Some(("kubectl-patch".into(), Some("2026-01-04T00:00:00Z".into())))
        );
        // Nothing changed, or no managedFields at all.
        assert_eq!(stamp(&old), None);
        assert_eq!(stamp(&json!({"metadata": {}})), None);
        // The owner of a path: the latest entry that owns it, a part of it or a whole around it.
        let o = object(json!([
            {"manager": "kubectl-client-side-apply", "operation": "Update", "time": "2026-01-01T00:00:00Z",
             "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
                 "k:{\"name\":\"app\"}": {".": {}, "f:image": {}}}}}}}},
            {"manager": "kubectl-set", "operation": "Update", "time": "2026-01-02T00:00:00Z",
             "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {
                 "k:{\"name\":\"app\"}": {"f:image": {}}}}}}}},
        ]));
        let owned = owned_fields(&o);
        let owner = |path: &str| {
            owner_of(
                &owned,
                crate::path::FieldPath::parse(path).unwrap().segments(),
            )
            .map(|f| f.manager)
        };
        assert_eq!(
            owner("spec.template.spec.containers[0].image"),
            Some("kubectl-set")
        );
        assert_eq!(
            owner("spec.template.spec.containers[0]"),
            Some("kubectl-set")
        );
        assert_eq!(owner("spec.replicas"), Some("kubectl-client-side-apply"));
        assert_eq!(owner("spec.paused"), None);
    }

    /// [`request_entry`] over parsed documents and over their text (the agent's, where unchanged
    /// entries are found by their text), case by case: both give the expected entry.
    #[test]
    fn the_entry_a_request_wrote_from_documents_and_from_text() {
        let entry = |manager: &str, time: &str| {
            json!({"manager": manager, "operation": "Update", "apiVersion": "apps/v1", "time": time,
                   "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}})
        };
        let (a, b, c) = (
            entry("kubectl-client-side-apply", "2026-01-01T00:00:00Z"),
            entry("kubectl-edit", "2026-01-02T00:00:00Z"),
            entry("kube-controller-manager", "2026-01-03T00:00:00Z"),
        );
        let long = |tail: &str| format!("{}{tail}", "m".repeat(MAX_STAMP_BYTES));
        let cut = format!("{}…", "m".repeat(MAX_STAMP_BYTES - '…'.len_utf8()));
        let t = |s: &str| Some(s.to_owned());
        let with = |entries: Vec<Value>| json!({"kind": "Deployment", "metadata": {"name": "web", "managedFields": entries}, "spec": {"replicas": 3}});
        // The entry found: its manager and time.
        type Found = Option<(String, Option<String>)>;
        let cases: Vec<(&str, Value, Value, Found)> = vec![
            (
                "no managedFields",
                json!({"metadata": {}}),
                json!({"metadata": {}}),
                None,
            ),
            ("no metadata", json!({}), json!({"spec": {}}), None),
            (
                "one entry, unchanged",
                with(vec![a.clone()]),
                with(vec![a.clone()]),
                None,
            ),
            (
                "entries unchanged",
                with(vec![a.clone(), b.clone()]),
                with(vec![a.clone(), b.clone()]),
                None,
            ),
            (
                "a new entry",
                with(vec![a.clone()]),
                with(vec![a.clone(), b.clone()]),
                Some(("kubectl-edit".into(), t("2026-01-02T00:00:00Z"))),
            ),
            (
                "a new entry before the others",
                with(vec![a.clone(), c.clone()]),
                with(vec![b.clone(), a.clone(), c.clone()]),
                Some(("kubectl-edit".into(), t("2026-01-02T00:00:00Z"))),
            ),
            (
                "the first entry",
                json!({"metadata": {}}),
                with(vec![a.clone()]),
                Some((
                    "kubectl-client-side-apply".into(),
                    t("2026-01-01T00:00:00Z"),
                )),
            ),
            (
                "several new, the latest by time",
                with(vec![a.clone()]),
                with(vec![a.clone(), c.clone(), b.clone()]),
                Some(("kube-controller-manager".into(), t("2026-01-03T00:00:00Z"))),
            ),
            (
                "several new at one time, the last",
                with(vec![]),
                with(vec![
                    entry("x", "2026-01-01T00:00:00Z"),
                    entry("y", "2026-01-01T00:00:00Z"),
                ]),
                Some(("y".into(), t("2026-01-01T00:00:00Z"))),
            ),
            (
                "an entry without a time is the oldest",
                with(vec![]),
                with(vec![
                    json!({"manager": "kubectl", "operation": "Update", "subresource": "scale"}),
                    a.clone(),
                ]),
                Some((
                    "kubectl-client-side-apply".into(),
                    t("2026-01-01T00:00:00Z"),
                )),
            ),
            (
                "only one without a time",
                with(vec![a.clone()]),
                with(vec![
                    a.clone(),
                    json!({"manager": "kubectl", "operation": "Update", "subresource": "scale"}),
                ]),
                Some(("kubectl".into(), None)),
            ),
            // Written again and moved to the end of the entries sorted by time.
            (
                "an entry moved by its new time",
                with(vec![a.clone(), b.clone(), c.clone()]),
                with(vec![
                    a.clone(),
                    c.clone(),
                    entry("kubectl-edit", "2026-01-04T00:00:00Z"),
                ]),
                Some(("kubectl-edit".into(), t("2026-01-04T00:00:00Z"))),
            ),
            (
                "entries in another order, unchanged",
                with(vec![a.clone(), b.clone(), c.clone()]),
                with(vec![c.clone(), b.clone(), a.clone()]),
                None,
            ),
            // Its field set changed, its manager, operation, subresource and time did not.
            (
                "only the field set changed",
                with(vec![a.clone()]),
                with(vec![
                    json!({"manager": "kubectl-client-side-apply", "operation": "Update", "time": "2026-01-01T00:00:00Z", "fieldsV1": {}}),
                ]),
                None,
            ),
            (
                "entries without a manager, and no entries",
                with(vec![
                    json!({"operation": "Update", "time": "2026-01-05T00:00:00Z"}),
                ]),
                with(vec![
                    json!({"operation": "Update", "time": "2026-01-06T00:00:00Z"}),
                    json!(7),
                    json!("x"),
                ]),
                None,
            ),
            (
                "an oversized manager, cut",
                with(vec![a.clone()]),
                with(vec![a.clone(), entry(&long("x"), "2026-01-05T00:00:00Z")]),
                Some((cut.clone(), t("2026-01-05T00:00:00Z"))),
            ),
            (
                "managers that differ past the cut are one",
                with(vec![entry(&long("x"), "2026-01-05T00:00:00Z")]),
                with(vec![entry(&long("y"), "2026-01-05T00:00:00Z")]),
                None,
            ),
        ];
        let mut cases: Vec<_> = cases
            .into_iter()
            .map(|(case, old, new, expected)| (case, old.to_string(), new.to_string(), expected))
            .collect();
        // One manager spelt two ways: the same stamp.
        cases.push((
            "an escaped manager is the same manager",
            r#"{"metadata": {"managedFields": [{"manager": "kubectl-edit", "time": "2026-01-02T00:00:00Z"}]}}"#.into(),
            r#"{"metadata": {"managedFields": [{"manager": "kubectl\u002dedit", "time": "2026-01-02T00:00:00Z"}]}}"#.into(),
            None,
        ));
        for (case, old_text, new_text, expected) in cases {
            let (old, new): (Value, Value) = (
                serde_json::from_str(&old_text).unwrap(),
                serde_json::from_str(&new_text).unwrap(),
            );
            let found = request_entry(&old, &new).map(|e| (e.manager, e.time));
            assert_eq!(found, expected, "{case} (documents)");
            let old_raw: &serde_json::value::RawValue = serde_json::from_str(&old_text).unwrap();
            let new_raw: &serde_json::value::RawValue = serde_json::from_str(&new_text).unwrap();
            let (old_doc, new_doc) = (
                crate::json::RawDocument::new(old_raw),
                crate::json::RawDocument::new(new_raw),
            );
            let found = request_entry(old_doc.node(), new_doc.node()).map(|e| (e.manager, e.time));
            assert_eq!(found, expected, "{case} (text)");
        }
    }
}
