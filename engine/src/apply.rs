//! What `kubectl apply -f FILE` makes of a live object: client-side apply's three-way merge.
//!
//! kubectl apply does not send the file as written. It computes a patch from three objects —
//! the *original* (the live object's `kubectl.kubernetes.io/last-applied-configuration`
//! annotation: what the previous apply sent), the *modified* (the file, carrying its own
//! serialisation as the new annotation) and the *live* object — and the API server applies
//! that patch to the live object. So:
//!
//! - a field the file sets replaces the live one; maps merge key by key, recursively;
//! - a list of objects with a merge key merges element by element, with the keys of the diff's
//!   alignment (`containers`, `env`, `volumes`, … by `name`; `volumeMounts` by `mountPath`;
//!   `ports` by port and protocol; see [`crate::diff`]) — when every element on both sides has
//!   its key and no key repeats; any other list (of scalars, `tolerations`, …) is replaced whole;
//! - a field the file leaves out stays as it is (a value the server defaulted, a field another
//!   client manages) — unless the previous apply set it (it is in the original) and the file no
//!   longer has it: that is how apply deletes, a map key as a list element;
//! - a `null` in the file removes the field;
//! - the result carries the new last-applied annotation: the file's content ([`last_applied`]).
//!
//! Kinds served by Kubernetes itself get a strategic merge patch; for any other kind (custom
//! resources) kubectl sends a JSON merge patch, which has no merge keys: every list is replaced
//! whole ([`Patch`]).
//!
//! Not modelled: the server's own work after the patch (defaulting, mutating webhooks),
//! `retainKeys` (which clears the other members of a union such as a volume's source or
//! `strategy.rollingUpdate` when the file sets the union — the server usually defaults them back),
//! and merging of primitive lists with the merge strategy (`finalizers`): they are replaced.

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::diff;

/// The annotation in which `kubectl apply` keeps what it applied.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The API groups Kubernetes serves itself (the core group is `""`): kubectl sends them a
/// strategic merge patch.
const BUILT_IN_GROUPS: &[&str] = &[
    "",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "apps",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "extensions",
    "flowcontrol.apiserver.k8s.io",
    "imagepolicy.k8s.io",
    "internal.apiserver.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
    "storagemigration.k8s.io",
];

/// The kind of patch kubectl apply sends, which decides how lists merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Patch {
    /// Strategic merge patch (Kubernetes' own kinds): lists of objects merge by merge key.
    Strategic,
    /// JSON merge patch (custom resources): every list is replaced whole.
    JsonMerge,
}

impl Patch {
    /// The patch kubectl apply sends to objects of `api_version` (`apps/v1`, `v1`,
    /// `argoproj.io/v1alpha1`): strategic for Kubernetes' built-in API groups, JSON merge for
    /// any other group (custom resources, which do not accept a strategic merge patch).
    pub fn for_api_version(api_version: &str) -> Self {
        let group = api_version
            .rsplit_once('/')
            .map_or("", |(group, _version)| group);
        if BUILT_IN_GROUPS.contains(&group) {
            Patch::Strategic
        } else {
            Patch::JsonMerge
        }
    }
}

/// The object `kubectl apply` of `file` would leave when the live object is `live`: the
/// original is `live`'s last-applied annotation (none when it is missing or not JSON: then
/// nothing is deleted, as kubectl does for an object it never applied), and the result carries
/// the file as its new last-applied annotation.
pub fn apply(live: &Value, file: &Value, patch: Patch) -> Value {
    let original = original_of(live);
    let mut modified = file.clone();
    set_annotation(&mut modified, LAST_APPLIED_ANNOTATION, last_applied(file));
    three_way_merge(original.as_ref(), &modified, live, patch)
}

/// The last-applied configuration `live` carries, parsed; `None` when it has none, or one that
/// is not a JSON object.
pub fn original_of(live: &Value) -> Option<Value> {
    let text = live
        .get("metadata")?
        .get("annotations")?
        .get(LAST_APPLIED_ANNOTATION)?
        .as_str()?;
    serde_json::from_str::<Value>(text)
        .ok()
        .filter(Value::is_object)
}

/// The last-applied annotation `kubectl apply` writes for `file`: the file without that
/// annotation and with `metadata.annotations` present (`{}` when it has none), as compact JSON
/// with keys sorted and `<`, `>`, `&` escaped, and a trailing newline — as kubectl's Go encoder
/// writes it.
pub fn last_applied(file: &Value) -> String {
    let mut object = file.clone();
    if let Some(annotations) = annotations_mut(&mut object) {
        annotations.shift_remove(LAST_APPLIED_ANNOTATION);
    }
    let text = sorted(&object).to_string();
    let mut out = String::with_capacity(text.len() + 1);
    // These characters only occur inside JSON strings, where Go writes them escaped.
    for c in text.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.push('\n');
    out
}

/// The three-way merge of client-side apply: `modified` applied to `live`, deleting what
/// `original` had and `modified` no longer has (see the module's documentation).
pub fn three_way_merge(
    original: Option<&Value>,
    modified: &Value,
    live: &Value,
    patch: Patch,
) -> Value {
    merge_value(None, original, modified, Some(live), patch).unwrap_or(Value::Null)
}

/// The merged value of one field (`field` is its key, which names a list's merge key);
/// `None` removes the field.
fn merge_value(
    field: Option<&str>,
    original: Option<&Value>,
    modified: &Value,
    live: Option<&Value>,
    patch: Patch,
) -> Option<Value> {
    match (modified, live) {
        (Value::Null, _) => None,
        (Value::Object(modified), Some(Value::Object(live))) => Some(Value::Object(merge_maps(
            original.and_then(Value::as_object),
            modified,
            live,
            patch,
        ))),
        (Value::Array(modified), Some(Value::Array(live))) if patch == Patch::Strategic => {
            Some(merge_lists(
                field,
                original.and_then(Value::as_array).map(Vec::as_slice),
                modified,
                live,
                patch,
            ))
        }
        // A scalar, a list replaced whole, a new field or one whose type changes: the file's
        // value — the live one when they are equal, so that nothing changes needlessly.
        (modified, Some(live)) if diff::value_eq(modified, live) => Some(live.clone()),
        (modified, _) => Some(without_nulls(modified)),
    }
}

fn merge_maps(
    original: Option<&Map<String, Value>>,
    modified: &Map<String, Value>,
    live: &Map<String, Value>,
    patch: Patch,
) -> Map<String, Value> {
    let mut out = live.clone();
    for (key, value) in modified {
        let original = original.and_then(|o| o.get(key));
        match merge_value(Some(key), original, value, live.get(key), patch) {
            Some(merged) => {
                out.insert(key.clone(), merged);
            }
            None => {
                out.shift_remove(key);
            }
        }
    }
    // What the previous apply set and this one no longer does is deleted.
    for key in original.into_iter().flat_map(Map::keys) {
        if !modified.contains_key(key) {
            out.shift_remove(key);
        }
    }
    out
}

/// A list of the strategic merge patch: merged element by element when it has a merge key
/// on both sides, else replaced whole.
fn merge_lists(
    field: Option<&str>,
    original: Option<&[Value]>,
    modified: &[Value],
    live: &[Value],
    patch: Patch,
) -> Value {
    let keyed = diff::merge_key_for(field, live.iter(), modified.iter()).and_then(|key| {
        Some((
            key,
            diff::element_keys(key, live.iter())?,
            diff::element_keys(key, modified.iter())?,
        ))
    });
    let Some((key, live_keys, modified_keys)) = keyed else {
        let unchanged = modified.len() == live.len()
            && modified.iter().zip(live).all(|(m, l)| diff::value_eq(m, l));
        return if unchanged {
            Value::Array(live.to_vec())
        } else {
            Value::Array(modified.iter().map(without_nulls).collect())
        };
    };
    // The previous apply's elements that can be told apart; others cannot be deleted.
    let original: Vec<(Cow<'_, str>, &Value)> = original
        .unwrap_or_default()
        .iter()
        .filter(|element| element.is_object())
        .filter_map(|element| Some((diff::element_key(key, element)?, element)))
        .collect();
    let original_element = |k: &str| original.iter().find(|(o, _)| o == k).map(|(_, e)| *e);

    // The file's elements, in the file's order, each with its place in the live list.
    let from_file: Vec<(Option<usize>, Value)> = modified
        .iter()
        .zip(&modified_keys)
        .map(|(element, k)| {
            let at = live_keys.iter().position(|l| l == k);
            let merged = merge_value(
                None,
                original_element(k),
                element,
                at.map(|i| &live[i]),
                patch,
            );
            (at, merged.unwrap_or(Value::Null))
        })
        .collect();
    // The live elements the file does not name and the previous apply did not set: kept.
    let live_only: Vec<(usize, &Value)> = live
        .iter()
        .zip(&live_keys)
        .enumerate()
        .filter(|(_, (_, k))| !modified_keys.contains(k) && original_element(k).is_none())
        .map(|(i, (element, _))| (i, element))
        .collect();
    Value::Array(interleave(live_only, from_file))
}

/// Merges the kept live-only elements into the file's elements as strategic merge patch
/// orders them (`mergeSortedSlice`): each list keeps its own order; a live-only element goes
/// before a file element that comes after it in the live list.
fn interleave(
    live_only: Vec<(usize, &Value)>,
    from_file: Vec<(Option<usize>, Value)>,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(live_only.len() + from_file.len());
    let mut left = live_only.into_iter().peekable();
    let mut right = from_file.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((l, _)), Some((r, _))) => r.is_some_and(|r| *l < r),
        };
        if take_left {
            if let Some((_, element)) = left.next() {
                out.push(element.clone());
            }
        } else if let Some((_, element)) = right.next() {
            out.push(element);
        }
    }
    out
}

/// A copy without the `null` entries of its maps (at any depth): a `null` in a patch removes a
/// field, and there is none to remove in a new value.
fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// A copy with every map's keys in byte order, as Go's encoder writes maps.
fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.clone(), sorted(v)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// `metadata.annotations` of an object, created (`{}`) when missing or not a map.
fn annotations_mut(object: &mut Value) -> Option<&mut Map<String, Value>> {
    let object = object.as_object_mut()?;
    let metadata = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !metadata.is_object() {
        *metadata = Value::Object(Map::new());
    }
    let annotations = metadata
        .as_object_mut()?
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    if !annotations.is_object() {
        *annotations = Value::Object(Map::new());
    }
    annotations.as_object_mut()
}

fn set_annotation(object: &mut Value, key: &str, value: String) {
    if let Some(annotations) = annotations_mut(object) {
        annotations.insert(key.to_owned(), Value::String(value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::{Scope, diff, value_eq};
    use crate::omitted::OmittedZeros;
    use proptest::prelude::*;
    use serde_json::json;

    fn changed(old: &Value, new: &Value) -> Vec<String> {
        let mut paths: Vec<String> = diff(old, new, &Scope::everything(), &[], OmittedZeros::NONE)
            .into_iter()
            .map(|c| c.path.to_string())
            .collect();
        paths.sort();
        paths
    }

    /// A hand-written Deployment.
    fn manifest(replicas: u32, image: &str, env: Value) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "prod", "labels": {"app": "web"}},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "app", "image": image, "env": env,
                        "ports": [{"containerPort": 8080}]}]}
                }
            }
        })
    }

    /// `file` as the API server keeps it after an apply: defaulted, with server metadata.
    fn stored(file: &Value) -> Value {
        let mut live = apply(&json!({}), file, Patch::Strategic);
        live["metadata"]["uid"] = json!("u1");
        live["metadata"]["resourceVersion"] = json!("7");
        live["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = json!("1");
        live["spec"]["revisionHistoryLimit"] = json!(10);
        live["spec"]["strategy"] = json!({"type": "RollingUpdate"});
        let pod = &mut live["spec"]["template"]["spec"];
        pod["dnsPolicy"] = json!("ClusterFirst");
        let container = &mut pod["containers"][0];
        container["imagePullPolicy"] = json!("IfNotPresent");
        container["ports"][0]["protocol"] = json!("TCP");
        live["status"] = json!({"replicas": 2});
        live
    }

    fn env() -> Value {
        json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
    }

    #[test]
    fn defaulted_fields_stay_and_set_fields_replace() {
        let live = stored(&manifest(2, "nginx:1", env()));
        let applied = apply(&live, &manifest(5, "nginx:2", env()), Patch::Strategic);
        assert_eq!(
            changed(&live, &applied),
            [
                format!("metadata.annotations['{LAST_APPLIED_ANNOTATION}']"),
                "spec.replicas".to_owned(),
                "spec.template.spec.containers[0].image".to_owned(),
            ]
        );
        assert_eq!(applied["status"], json!({"replicas": 2}));
        assert_eq!(
            applied["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
            "IfNotPresent"
        );
        // Applying the same file again changes nothing.
        assert_eq!(
            apply(&applied, &manifest(5, "nginx:2", env()), Patch::Strategic),
            applied
        );
    }

    #[test]
    fn what_the_last_apply_set_and_the_file_lacks_is_removed() {
        let mut file = manifest(2, "nginx:1", env());
        file["metadata"]["labels"]["tier"] = json!("web");
        let mut live = stored(&file);
        // Added by someone else: not in the last-applied configuration.
        live["metadata"]["labels"]["owner"] = json!("ops");
        live["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "INJECTED", "value": "x"}));

        let mut next = manifest(2, "nginx:1", json!([{"name": "A", "value": "1"}]));
        next["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("tier");
        let applied = apply(&live, &next, Patch::Strategic);
        assert_eq!(
            changed(&live, &applied),
            [
                format!("metadata.annotations['{LAST_APPLIED_ANNOTATION}']"),
                "metadata.labels.tier".to_owned(),
                "spec.template.spec.containers[0].env[1]".to_owned(),
            ]
        );
        assert_eq!(applied["metadata"]["labels"]["owner"], "ops");
        assert_eq!(
            applied["spec"]["template"]["spec"]["containers"][0]["env"],
            json!([{"name": "A", "value": "1"}, {"name": "INJECTED", "value": "x"}])
        );
    }

    #[test]
    fn without_a_last_applied_configuration_nothing_is_deleted() {
        let mut live = stored(&manifest(2, "nginx:1", env()));
        live["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove(LAST_APPLIED_ANNOTATION);
        let applied = apply(&live, &manifest(2, "nginx:1", json!([])), Patch::Strategic);
        assert_eq!(
            changed(&live, &applied),
            [format!("metadata.annotations['{LAST_APPLIED_ANNOTATION}']")]
        );
        // Not JSON: as if missing.
        live["metadata"]["annotations"][LAST_APPLIED_ANNOTATION] = json!("{not json");
        assert_eq!(original_of(&live), None);
        let applied = apply(&live, &manifest(2, "nginx:1", json!([])), Patch::Strategic);
        assert_eq!(
            applied["spec"]["template"]["spec"]["containers"][0]["env"],
            env()
        );
    }

    #[test]
    fn a_null_in_the_file_removes_the_field() {
        let live = stored(&manifest(2, "nginx:1", env()));
        let mut file = manifest(2, "nginx:1", env());
        file["spec"]["revisionHistoryLimit"] = Value::Null;
        file["spec"]["paused"] = Value::Null;
        let applied = apply(&live, &file, Patch::Strategic);
        assert!(applied["spec"].get("revisionHistoryLimit").is_none());
        assert!(applied["spec"].get("paused").is_none());
    }

    #[test]
    fn the_new_annotation_is_the_file_as_kubectl_writes_it() {
        let file = json!({"kind": "ConfigMap", "apiVersion": "v1",
            "metadata": {"name": "c", "annotations": {LAST_APPLIED_ANNOTATION: "old", "z": "1"}},
            "data": {"b": "<a & b>", "a": "x"}});
        assert_eq!(
            last_applied(&file),
            "{\"apiVersion\":\"v1\",\"data\":{\"a\":\"x\",\"b\":\"\\u003ca \\u0026 b\\u003e\"},\"kind\":\"ConfigMap\",\"metadata\":{\"annotations\":{\"z\":\"1\"},\"name\":\"c\"}}\n"
        );
        // Without annotations, kubectl writes an empty map.
        let bare = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        assert_eq!(
            last_applied(&bare),
            "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"annotations\":{},\"name\":\"c\"}}\n"
        );
        let applied = apply(&json!({"metadata": {"name": "c"}}), &bare, Patch::Strategic);
        assert_eq!(
            applied["metadata"]["annotations"][LAST_APPLIED_ANNOTATION],
            json!(last_applied(&bare))
        );
        // Parsed back, it is the file.
        let mut expected = bare.clone();
        expected["metadata"]["annotations"] = json!({});
        assert_eq!(original_of(&applied), Some(expected));
    }

    #[test]
    fn keyed_lists_merge_by_their_keys_in_the_file_s_order() {
        let lists = |env: Value, mounts: Value, ports: Value| {
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app",
                "env": env, "volumeMounts": mounts, "ports": ports}]}})
        };
        let live = lists(
            json!([{"name": "A", "value": "1"}, {"name": "X", "value": "server"}, {"name": "B", "value": "2"}]),
            json!([{"name": "data", "mountPath": "/data", "readOnly": true}]),
            json!([{"containerPort": 80, "protocol": "TCP", "name": "http"}]),
        );
        let file = lists(
            json!([{"name": "B", "value": "3"}, {"name": "A", "value": "1"}, {"name": "C", "value": "4"}]),
            json!([{"name": "data2", "mountPath": "/data"}]),
            json!([{"containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}]),
        );
        let applied = apply(&live, &file, Patch::Strategic);
        let container = &applied["spec"]["containers"][0];
        // The file's order; the live-only X before B, which followed it in the live list.
        assert_eq!(
            container["env"],
            json!([{"name": "X", "value": "server"}, {"name": "B", "value": "3"},
                {"name": "A", "value": "1"}, {"name": "C", "value": "4"}])
        );
        // A new element goes where the file puts it; a live-only element after the file's
        // elements that followed it in the live list.
        let live = json!({"env": [{"name": "A"}, {"name": "X"}]});
        let file = json!({"env": [{"name": "N"}, {"name": "A", "value": "1"}]});
        assert_eq!(
            apply(&live, &file, Patch::Strategic)["env"],
            json!([{"name": "N"}, {"name": "A", "value": "1"}, {"name": "X"}])
        );
        // volumeMounts by mountPath: the same mount, renamed; readOnly kept.
        assert_eq!(
            container["volumeMounts"],
            json!([{"name": "data2", "mountPath": "/data", "readOnly": true}])
        );
        // ports by (containerPort, protocol), a missing protocol being TCP.
        assert_eq!(
            container["ports"],
            json!([{"containerPort": 80, "protocol": "TCP", "name": "http"},
                {"containerPort": 53, "protocol": "UDP"}])
        );
    }

    #[test]
    fn lists_without_a_merge_key_are_replaced_whole() {
        let pod = |tolerations: Value, args: Value| {
            json!({"metadata": {"name": "p"}, "spec": {"tolerations": tolerations,
                "containers": [{"name": "app", "args": args}]}})
        };
        let live = pod(
            json!([{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}]),
            json!(["--x", "--y"]),
        );
        let file = pod(json!([{"key": "c", "operator": "Exists"}]), json!(["--z"]));
        let applied = apply(&live, &file, Patch::Strategic);
        assert_eq!(
            applied["spec"]["tolerations"],
            json!([{"key": "c", "operator": "Exists"}])
        );
        assert_eq!(applied["spec"]["containers"][0]["args"], json!(["--z"]));
        // A repeated key: replaced whole too.
        let live = json!({"items": [{"name": "a", "v": 1}, {"name": "a", "v": 2}]});
        let file = json!({"items": [{"name": "a", "v": 3}]});
        assert_eq!(
            apply(&live, &file, Patch::Strategic)["items"],
            json!([{"name": "a", "v": 3}])
        );
    }

    #[test]
    fn custom_resources_get_a_json_merge_patch() {
        let live = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
            "metadata": {"name": "r"},
            "spec": {"strategy": {"canary": {"maxSurge": "25%"}},
                "template": {"spec": {"containers": [
                    {"name": "app", "image": "a", "imagePullPolicy": "Always"},
                    {"name": "sidecar", "image": "s"}]}}}});
        let file = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
            "metadata": {"name": "r"},
            "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "b"}]}}}});
        let patch = Patch::for_api_version("argoproj.io/v1alpha1");
        assert_eq!(patch, Patch::JsonMerge);
        let applied = apply(&live, &file, patch);
        // Maps still merge; the list is the file's.
        assert_eq!(applied["spec"]["strategy"], live["spec"]["strategy"]);
        assert_eq!(
            applied["spec"]["template"]["spec"]["containers"],
            json!([{"name": "app", "image": "b"}])
        );
        let strategic = apply(&live, &file, Patch::Strategic);
        assert_eq!(
            strategic["spec"]["template"]["spec"]["containers"],
            json!([{"name": "app", "image": "b", "imagePullPolicy": "Always"},
                {"name": "sidecar", "image": "s"}])
        );
    }

    #[test]
    fn built_in_groups_are_strategic() {
        for api_version in [
            "v1",
            "apps/v1",
            "batch/v1",
            "networking.k8s.io/v1",
            "policy/v1",
        ] {
            assert_eq!(
                Patch::for_api_version(api_version),
                Patch::Strategic,
                "{api_version}"
            );
        }
        for api_version in [
            "argoproj.io/v1alpha1",
            "gateway.networking.k8s.io/v1",
            "example.com/v1",
        ] {
            assert_eq!(
                Patch::for_api_version(api_version),
                Patch::JsonMerge,
                "{api_version}"
            );
        }
    }

    #[test]
    fn three_way_merge_without_an_annotation_is_a_two_way_patch() {
        // kubectl edit's patch: what was shown (original) against what was saved, on live.
        let live = json!({"metadata": {"name": "a", "uid": "u"}, "spec": {"x": 1, "y": 2}});
        let shown = json!({"metadata": {"name": "a"}, "spec": {"x": 1, "y": 2}});
        let saved = json!({"metadata": {"name": "a"}, "spec": {"x": 3}});
        assert_eq!(
            three_way_merge(Some(&shown), &saved, &live, Patch::Strategic),
            json!({"metadata": {"name": "a", "uid": "u"}, "spec": {"x": 3}})
        );
    }

    /// Values over a few keys, so that the live object and the file share fields; lists are
    /// often lists of named objects (merged by name, or replaced when a name repeats).
    fn arb_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-3i64..3).prop_map(|n| json!(n)),
            (-2.0f64..2.0).prop_map(|n| json!(n)),
            "[ab]{0,2}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 40, 5, |inner| {
            let key = "(a|b|c|env|image)";
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::vec(("[abc]", inner.clone()), 0..4).prop_map(|items| {
                    Value::Array(
                        items
                            .into_iter()
                            .map(|(name, value)| json!({"name": name, "value": value}))
                            .collect(),
                    )
                }),
                proptest::collection::btree_map(key, inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn arb_object() -> impl Strategy<Value = Value> {
        (arb_value(), arb_value(), proptest::option::of("[a-z]{0,4}")).prop_map(
            |(spec, status, annotation)| {
                let mut object = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "web"}, "spec": spec, "status": status});
                if let Some(annotation) = annotation {
                    object["metadata"]["annotations"] = json!({"team": annotation});
                }
                object
            },
        )
    }

    fn strip_last_applied(object: &Value) -> Value {
        let mut object = object.clone();
        if let Some(annotations) = object["metadata"]["annotations"].as_object_mut() {
            annotations.shift_remove(LAST_APPLIED_ANNOTATION);
        }
        object
    }

    proptest! {
        /// An object applied from a file, applied the same file again (its own last-applied
        /// configuration): nothing changes.
        #[test]
        fn applying_the_last_applied_configuration_changes_nothing(
            previous in arb_object(),
            earlier in proptest::option::of(arb_object()),
            file in arb_object(),
            patch in prop_oneof![Just(Patch::Strategic), Just(Patch::JsonMerge)],
        ) {
            let previous = match earlier {
                Some(earlier) => apply(&previous, &earlier, patch),
                None => previous,
            };
            let live = apply(&previous, &file, patch);
            // The annotation is the file (numbers read back as the JSON parser reads them).
            let mut expected = file.clone();
            if expected["metadata"].get("annotations").is_none() {
                expected["metadata"]["annotations"] = json!({});
            }
            let expected: Value = serde_json::from_str(&expected.to_string()).unwrap();
            prop_assert_eq!(original_of(&live), Some(expected));
            let again = apply(&live, &file, patch);
            prop_assert!(value_eq(&again, &live), "{again:#}\n!=\n{live:#}");
            prop_assert!(diff(&live, &again, &Scope::everything(), &[], OmittedZeros::NONE).is_empty());
        }

        /// Applied to an object with nothing of its own, the file is the result.
        #[test]
        fn applying_to_an_empty_object_gives_the_file(file in arb_object()) {
            let applied = apply(&json!({}), &file, Patch::Strategic);
            let mut expected = file.clone();
            expected["metadata"]["annotations"][LAST_APPLIED_ANNOTATION] =
                json!(last_applied(&file));
            prop_assert!(value_eq(&applied, &expected), "{applied:#}\n!=\n{expected:#}");
        }

        /// A field the last apply set and the next file drops is removed; one the file never
        /// set stays.
        #[test]
        fn dropping_a_field_from_the_file_removes_it(
            live in arb_object(),
            file in arb_object(),
            patch in prop_oneof![Just(Patch::Strategic), Just(Patch::JsonMerge)],
        ) {
            let applied = apply(&live, &file, patch);
            let mut next = file.clone();
            next.as_object_mut().unwrap().shift_remove("spec");
            let again = apply(&applied, &next, patch);
            prop_assert!(again.get("spec").is_none());
            let mut untouched = file.clone();
            untouched.as_object_mut().unwrap().shift_remove("spec");
            let kept = apply(&apply(&live, &untouched, patch), &untouched, patch);
            prop_assert_eq!(kept.get("spec"), live.get("spec"));
        }

        /// The live object applied to itself (`kubectl get -o yaml | kubectl apply -f -`):
        /// nothing changes but the last-applied annotation, which becomes the object.
        #[test]
        fn applying_the_live_object_to_itself_changes_nothing(
            live in arb_object(),
            original in proptest::option::of(arb_object()),
            patch in prop_oneof![Just(Patch::Strategic), Just(Patch::JsonMerge)],
        ) {
            let mut live = live;
            if let Some(original) = original {
                live["metadata"]["annotations"][LAST_APPLIED_ANNOTATION] =
                    json!(last_applied(&original));
            }
            let applied = apply(&live, &live, patch);
            prop_assert!(value_eq(&strip_last_applied(&applied), &strip_last_applied(&live)));
            prop_assert_eq!(
                &applied["metadata"]["annotations"][LAST_APPLIED_ANNOTATION],
                &json!(last_applied(&live))
            );
        }
    }
}
