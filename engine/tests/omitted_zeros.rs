//! Zero values the API server leaves out (reference §4, §8 step 2), for every built-in kind the
//! rules select: a manifest that spells them out (`paused: false`, `readOnly: false`,
//! `value: ""` …) is clean against the object the API server stores from it, in the audit and
//! at admission; a real change beside them — to or from a non-zero value, or of a pointer field
//! whose zero the API server keeps — is drift, at its own path. Zeros its defaulting replaces,
//! and empty lists and maps, declare nothing. And, where issue 41 is silent: applying the same
//! manifest again makes a finding go away only with its drift.

use std::time::SystemTime;

use drift_engine::apply::{self, Patch};
use drift_engine::review::{AdmissionRequest, parse_review_raw};
use drift_engine::{
    AuditContext, Context, DEFAULT_DRIFT_MANAGERS, Detail, RuleId, RuleSet, RuleSource, SpecText,
    Step, audit, evaluate,
};
use proptest::prelude::*;
use serde_json::{Value, json};

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

const KINDS: [&str; 4] = ["Deployment", "StatefulSet", "DaemonSet", "Rollout"];

fn rules() -> RuleSet {
    let spec = "mode: enforce\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: '*'}, {apiGroup: argoproj.io, kind: Rollout}]\nmutable: [spec.replicas]\n";
    let rules = RuleSet::build([RuleSource {
        id: RuleId {
            namespace: "ops".into(),
            name: "workloads".into(),
        },
        spec: SpecText::Yaml(spec.into()),
        origin: None,
    }]);
    assert!(rules.invalid().is_empty(), "{:?}", rules.invalid());
    rules
}

/// A workload of `kind` as the API server stores it: nothing it leaves out, the zeros it keeps
/// (pointer fields, map values, list elements) and a default or two it adds.
fn stored(kind: &str) -> Value {
    let template = json!({
        "metadata": {"labels": {"app": "web"}, "annotations": {"note": ""}},
        "spec": {
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "securityContext": {"runAsUser": 0},
            "nodeSelector": {"zone": ""},
            "containers": [{
                "name": "app",
                "image": "web:1",
                "args": ["--a", ""],
                "ports": [{"containerPort": 80, "name": "http", "protocol": "TCP"}],
                "env": [
                    {"name": "A", "value": "1"},
                    {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k", "optional": false}}},
                    {"name": "C"}
                ],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                "readinessProbe": {"tcpSocket": {"port": 80}, "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
                "securityContext": {"allowPrivilegeEscalation": false, "runAsUser": 0},
                "imagePullPolicy": "IfNotPresent",
                "terminationMessagePath": "/dev/termination-log"
            }],
            "initContainers": [{"name": "init", "image": "busybox:1"}],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "dnsPolicy": "ClusterFirst",
            "restartPolicy": "Always"
        }
    });
    let selector = json!({"matchLabels": {"app": "web"}});
    let (api_version, spec) = match kind {
        "Deployment" => (
            "apps/v1",
            json!({"replicas": 2, "selector": selector, "template": template, "progressDeadlineSeconds": 600}),
        ),
        "StatefulSet" => (
            "apps/v1",
            json!({"replicas": 2, "serviceName": "web", "selector": selector, "template": template,
                "volumeClaimTemplates": [{"metadata": {"name": "claim"}, "spec": {
                    "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                    "resources": {"requests": {"storage": "1Gi"}}}}]}),
        ),
        "DaemonSet" => (
            "apps/v1",
            json!({"selector": selector, "template": template}),
        ),
        "Rollout" => (
            "argoproj.io/v1alpha1",
            json!({"replicas": 2, "selector": selector, "template": template,
                "strategy": {"canary": {"steps": [{"setWeight": 20}, {"pause": {}}]}}}),
        ),
        other => panic!("{other}"),
    };
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "web", "namespace": "shop", "uid": "u-1", "resourceVersion": "7", "generation": 1},
        "spec": spec
    })
}

const POD: &str = "/spec/template/spec";
const APP: &str = "/spec/template/spec/containers/0";

/// A field the API server leaves out at zero: where, for which kinds, and a non-zero value.
struct Omitted {
    at: String,
    kinds: &'static [&'static str],
    zero: Value,
    other: Value,
}

fn omitted_fields() -> Vec<Omitted> {
    let all: &'static [&'static str] = &KINDS;
    let row = |at: String, kinds, zero: Value, other: Value| Omitted {
        at,
        kinds,
        zero,
        other,
    };
    vec![
        // The workload's own spec.
        row("/spec/minReadySeconds".into(), all, json!(0), json!(10)),
        row(
            "/spec/paused".into(),
            &["Deployment", "Rollout"],
            json!(false),
            json!(true),
        ),
        row(
            "/spec/progressDeadlineAbort".into(),
            &["Rollout"],
            json!(false),
            json!(true),
        ),
        row(
            "/spec/strategy/canary/dynamicStableScale".into(),
            &["Rollout"],
            json!(false),
            json!(true),
        ),
        row(
            "/spec/volumeClaimTemplates/0/spec/volumeName".into(),
            &["StatefulSet"],
            json!(""),
            json!("pv-1"),
        ),
        // The pod template.
        row(format!("{POD}/hostNetwork"), all, json!(false), json!(true)),
        row(format!("{POD}/hostPID"), all, json!(false), json!(true)),
        row(format!("{POD}/hostIPC"), all, json!(false), json!(true)),
        row(
            format!("{POD}/priorityClassName"),
            all,
            json!(""),
            json!("high"),
        ),
        row(format!("{POD}/subdomain"), all, json!(""), json!("web")),
        row(
            format!("{POD}/securityContext/seLinuxOptions/level"),
            all,
            json!(""),
            json!("s0:c1"),
        ),
        row(
            format!("{POD}/volumes/0/emptyDir/medium"),
            all,
            json!(""),
            json!("Memory"),
        ),
        row(
            format!("{POD}/tolerations/0/effect"),
            all,
            json!(""),
            json!("NoSchedule"),
        ),
        row(
            format!("{POD}/initContainers/0/stdinOnce"),
            all,
            json!(false),
            json!(true),
        ),
        // A container, its ports, env, volume mounts, probe and security context.
        row(format!("{APP}/tty"), all, json!(false), json!(true)),
        row(format!("{APP}/stdin"), all, json!(false), json!(true)),
        row(format!("{APP}/workingDir"), all, json!(""), json!("/srv")),
        row(
            format!("{APP}/ports/0/hostPort"),
            all,
            json!(0),
            json!(8080),
        ),
        row(format!("{APP}/env/2/value"), all, json!(""), json!("set")),
        row(
            format!("{APP}/volumeMounts/0/readOnly"),
            all,
            json!(false),
            json!(true),
        ),
        row(
            format!("{APP}/volumeMounts/0/subPath"),
            all,
            json!(""),
            json!("sub"),
        ),
        row(
            format!("{APP}/readinessProbe/initialDelaySeconds"),
            all,
            json!(0),
            json!(5),
        ),
        row(
            format!("{APP}/readinessProbe/tcpSocket/host"),
            all,
            json!(""),
            json!("localhost"),
        ),
        row(
            format!("{APP}/securityContext/seLinuxOptions/user"),
            all,
            json!(""),
            json!("system_u"),
        ),
    ]
}

/// Zeros the API server keeps (pointer fields, map values, list elements): in [`stored`] as
/// declared. Their absence, or another value, is a change.
fn kept_zeros(kind: &str) -> Vec<(String, Value)> {
    let mut kept = vec![
        (format!("{POD}/automountServiceAccountToken"), json!(false)),
        (format!("{POD}/enableServiceLinks"), json!(false)),
        (format!("{POD}/securityContext/runAsUser"), json!(0)),
        (format!("{POD}/nodeSelector/zone"), json!("")),
        ("/spec/template/metadata/annotations/note".into(), json!("")),
        (format!("{APP}/args/1"), json!("")),
        (
            format!("{APP}/securityContext/allowPrivilegeEscalation"),
            json!(false),
        ),
        (format!("{APP}/securityContext/runAsUser"), json!(0)),
        (
            format!("{APP}/env/1/valueFrom/configMapKeyRef/optional"),
            json!(false),
        ),
    ];
    if kind == "StatefulSet" {
        kept.push((
            "/spec/volumeClaimTemplates/0/spec/storageClassName".into(),
            json!(""),
        ));
    }
    kept
}

/// Sets the value at a JSON pointer, making the objects on the way.
fn set(object: &mut Value, pointer: &str, value: Value) {
    let (parent, last) = pointer.rsplit_once('/').expect("a pointer");
    let last = last.replace("~1", "/");
    let mut at = object;
    for key in parent.split('/').skip(1) {
        at = match at {
            Value::Array(items) => &mut items[key.parse::<usize>().expect("an index")],
            _ => at
                .as_object_mut()
                .expect("an object")
                .entry(key)
                .or_insert_with(|| json!({})),
        };
    }
    match at {
        Value::Array(items) => items[last.parse::<usize>().expect("an index")] = value,
        _ => {
            at.as_object_mut().expect("an object").insert(last, value);
        }
    }
}

fn remove(object: &mut Value, pointer: &str) {
    let (parent, last) = pointer.rsplit_once('/').expect("a pointer");
    match object.pointer_mut(parent).expect("the parent") {
        Value::Array(items) => {
            items.remove(last.parse::<usize>().expect("an index"));
        }
        map => {
            map.as_object_mut().expect("an object").remove(last);
        }
    }
}

/// The path as the engine renders it.
fn rendered(pointer: &str) -> String {
    let mut out = String::new();
    for key in pointer.split('/').skip(1) {
        if key.parse::<usize>().is_ok() {
            out.push_str(&format!("[{key}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(key);
        }
    }
    out
}

/// The rendered path of the first object on the way to `pointer` that `object` lacks (or holds
/// as `{}`, absent to §4), or of `pointer` itself.
fn first_missing(object: &Value, pointer: &str) -> String {
    fn absent(value: &Value) -> bool {
        match value {
            Value::Null => true,
            Value::Array(items) => items.is_empty(),
            Value::Object(map) => map.values().all(absent),
            _ => false,
        }
    }
    let mut prefix = String::new();
    for key in pointer.split('/').skip(1) {
        prefix = format!("{prefix}/{key}");
        if object.pointer(&prefix).is_none_or(absent) {
            break;
        }
    }
    rendered(&prefix)
}

/// The manifest of `kind` with every zero the API server leaves out spelled out, as a chart
/// renders `hostNetwork: {{ .Values.hostNetwork }}`.
fn manifest(kind: &str) -> Value {
    let mut manifest = stored(kind);
    for field in omitted_fields().iter().filter(|f| f.kinds.contains(&kind)) {
        set(&mut manifest, &field.at, field.zero.clone());
    }
    let metadata = manifest["metadata"].as_object_mut().unwrap();
    for server_field in ["uid", "resourceVersion", "generation"] {
        metadata.remove(server_field);
    }
    manifest
}

/// The live object: `live` carrying `declared` as its baseline.
fn with_baseline(mut live: Value, declared: &Value) -> Value {
    set(
        &mut live,
        &format!("/metadata/annotations/{}", LAST_APPLIED.replace('/', "~1")),
        json!(declared.to_string()),
    );
    live
}

/// What the audit of `live` found: its drifted paths (`None` when clean) and every change as
/// `path: old → new` (the values as JSON, `-` when absent).
fn audited(live: &Value) -> (Option<Vec<String>>, Vec<String>) {
    let rules = rules();
    let managers: Vec<String> = DEFAULT_DRIFT_MANAGERS
        .iter()
        .map(|m| m.to_string())
        .collect();
    let context = AuditContext {
        namespace_mode: None,
        drift_managers: &managers,
        now: SystemTime::UNIX_EPOCH,
    };
    let audited = audit(&rules, live, &context, Detail::Verdict);
    assert!(
        matches!(audited.result_label(), "clean" | "drifted"),
        "{}",
        audited.result_label()
    );
    let show = |v: Option<std::borrow::Cow<'_, Value>>| v.map_or("-".into(), |v| v.to_string());
    let changes = audited
        .changes()
        .iter()
        .map(|c| {
            let change = &c.change;
            format!(
                "{}: {} → {}",
                c.path,
                show(change.old_value()),
                show(change.new_value())
            )
        })
        .collect();
    (audited.drift().map(|d| d.denied.clone()), changes)
}

fn drift(live: &Value) -> Option<Vec<String>> {
    audited(live).0
}

#[test]
fn a_manifest_spelling_out_zeros_is_clean_against_what_the_server_stores() {
    for kind in KINDS {
        let live = with_baseline(stored(kind), &manifest(kind));
        assert_eq!(drift(&live), None, "{kind}");
    }
}

#[test]
fn a_zero_changed_to_another_value_is_drift_at_its_path() {
    for kind in KINDS {
        for field in omitted_fields().iter().filter(|f| f.kinds.contains(&kind)) {
            let mut live = stored(kind);
            set(&mut live, &field.at, field.other.clone());
            let live = with_baseline(live, &manifest(kind));
            let path = rendered(&field.at);
            assert_eq!(drift(&live), Some(vec![path.clone()]), "{kind} {path}");
            // Reported as declared → live, the declared zero shown as written.
            assert_eq!(
                audited(&live).1,
                [format!("{path}: {} → {}", field.zero, field.other)],
                "{kind}"
            );
        }
    }
}

#[test]
fn a_non_zero_declared_value_left_out_live_is_drift() {
    for kind in KINDS {
        for field in omitted_fields().iter().filter(|f| f.kinds.contains(&kind)) {
            // Declared non-zero, and the server stores the zero as nothing: someone set it back.
            let mut declared = manifest(kind);
            set(&mut declared, &field.at, field.other.clone());
            let live = with_baseline(stored(kind), &declared);
            let path = rendered(&field.at);
            let found = drift(&live).unwrap_or_default();
            // A field inside an object that only it makes exist live is reported at the object.
            assert!(
                found.len() == 1 && path.starts_with(&found[0]),
                "{kind} {path}: {found:?}"
            );
        }
    }
}

#[test]
fn a_zero_the_server_keeps_is_compared_as_any_value() {
    for kind in KINDS {
        for (at, zero) in kept_zeros(kind) {
            let path = rendered(&at);
            let declared = manifest(kind);
            assert_eq!(declared.pointer(&at), Some(&zero), "{kind} {path}");
            let mut gone = stored(kind);
            remove(&mut gone, &at);
            let gone = with_baseline(gone, &declared);
            let found = drift(&gone).unwrap_or_default();
            assert!(
                found.len() == 1 && path.starts_with(&found[0]),
                "{kind} {path} removed: {found:?}"
            );
            let mut changed = stored(kind);
            set(&mut changed, &at, json!(7));
            let changed = with_baseline(changed, &declared);
            assert_eq!(
                drift(&changed),
                Some(vec![path.clone()]),
                "{kind} {path} changed"
            );
        }
    }
}

/// Zeros kube-apiserver's defaulting replaces with a value of its own: declared, they say
/// nothing about what is stored ([`stored`] holds those defaults).
fn defaulted_zeros() -> Vec<(String, Value)> {
    vec![
        (format!("{APP}/imagePullPolicy"), json!("")),
        (format!("{APP}/terminationMessagePath"), json!("")),
        (format!("{APP}/ports/0/protocol"), json!("")),
        (format!("{APP}/readinessProbe/timeoutSeconds"), json!(0)),
        (format!("{APP}/readinessProbe/periodSeconds"), json!(0)),
        (format!("{POD}/dnsPolicy"), json!("")),
        (format!("{POD}/restartPolicy"), json!("")),
    ]
}

#[test]
fn a_zero_the_server_defaults_declares_nothing() {
    for kind in KINDS {
        let mut declared = manifest(kind);
        for (at, zero) in defaulted_zeros() {
            set(&mut declared, &at, zero);
        }
        let live = with_baseline(stored(kind), &declared);
        if kind == "Rollout" {
            // A custom resource is stored as sent, not defaulted: the live value was set since.
            let mut want: Vec<String> = defaulted_zeros()
                .iter()
                .map(|(at, _)| rendered(at))
                .collect();
            want.sort();
            assert_eq!(drift(&live), Some(want), "{kind}");
            continue;
        }
        assert_eq!(drift(&live), None, "{kind}");
        // Changed since, it is drift only as an imperative edit, as any undeclared field.
        let mut changed = stored(kind);
        set(
            &mut changed,
            &format!("{APP}/imagePullPolicy"),
            json!("Always"),
        );
        assert_eq!(
            drift(&with_baseline(changed.clone(), &declared)),
            None,
            "{kind}"
        );
        changed["metadata"]["managedFields"] = json!([{
            "manager": "kubectl-edit", "operation": "Update", "time": "2026-12-01T00:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {
                "k:{\"name\":\"app\"}": {"f:imagePullPolicy": {}}}}}}}
        }]);
        let path = rendered(&format!("{APP}/imagePullPolicy"));
        assert_eq!(
            drift(&with_baseline(changed, &declared)),
            Some(vec![path.clone()]),
            "{kind}"
        );
    }
}

// Admission: the API server sends objects as its Go types write them, so a real UPDATE never
// spells out such a zero; a review built from manifests (preview, `drift-sentinel review`, a
// custom resource stored as sent) may, and is judged the same.

fn request(old: &Value, new: &Value) -> Value {
    let kind = new["kind"].as_str().unwrap();
    let (group, version) = new["apiVersion"].as_str().unwrap().split_once('/').unwrap();
    json!({
        "uid": "req-1",
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": format!("{}s", kind.to_lowercase())},
        "name": "web",
        "namespace": "shop",
        "operation": "UPDATE",
        "userInfo": {"username": "alice"},
        "object": new,
        "oldObject": old,
    })
}

/// The step and denied paths of an UPDATE from `old` to `new`, read both from documents and
/// from the raw text of the review, which must agree.
fn admit(old: &Value, new: &Value) -> (Step, Vec<String>) {
    let rules = rules();
    let context = Context::at(SystemTime::UNIX_EPOCH);
    let request = request(old, new);
    let parsed: AdmissionRequest = serde_json::from_value(request.clone()).unwrap();
    let from_values = evaluate(&rules, &parsed, &context, Detail::Verdict);
    let body =
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
            .to_string();
    let review = parse_review_raw(body.as_bytes()).unwrap();
    let raw = review.request.unwrap();
    let from_text = evaluate(&rules, &raw, &context, Detail::Verdict);
    assert_eq!(from_values.step(), from_text.step());
    assert_eq!(from_values.denied_paths(), from_text.denied_paths());
    (from_text.step(), from_text.denied_paths().to_vec())
}

/// An UPDATE from the object as stored to `spelled`, and back, changes nothing.
fn no_change_either_way(kind: &str, spelled: &Value) {
    let stored = stored(kind);
    assert_eq!(admit(&stored, spelled), (Step::NoChanges, vec![]), "{kind}");
    assert_eq!(admit(spelled, &stored), (Step::NoChanges, vec![]), "{kind}");
}

#[test]
fn an_update_spelling_out_zeros_is_no_change() {
    for kind in KINDS {
        let mut spelled = stored(kind);
        for field in omitted_fields().iter().filter(|f| f.kinds.contains(&kind)) {
            set(&mut spelled, &field.at, field.zero.clone());
        }
        no_change_either_way(kind, &spelled);
        for field in omitted_fields().iter().filter(|f| f.kinds.contains(&kind)) {
            let mut changed = stored(kind);
            set(&mut changed, &field.at, field.other.clone());
            let path = rendered(&field.at);
            assert_eq!(
                admit(&spelled, &changed),
                (Step::Violation, vec![path.clone()]),
                "{kind} {path}"
            );
        }
        for (at, _) in kept_zeros(kind) {
            let mut gone = stored(kind);
            remove(&mut gone, &at);
            let (step, denied) = admit(&stored(kind), &gone);
            let path = rendered(&at);
            assert_eq!(step, Step::Violation, "{kind} {path}");
            assert!(
                denied.len() == 1 && path.starts_with(&denied[0]),
                "{kind} {path}: {denied:?}"
            );
        }
    }
}

#[test]
fn a_kind_without_a_table_keeps_every_zero() {
    // A custom resource the table does not know: `paused: false` against nothing is a change.
    let mut old = stored("Deployment");
    old["apiVersion"] = json!("example.com/v1");
    let mut new = old.clone();
    set(&mut new, "/spec/paused", json!(false));
    let rules = RuleSet::build([RuleSource {
        id: RuleId {
            namespace: "ops".into(),
            name: "any".into(),
        },
        spec: SpecText::Yaml(
            "mode: enforce\nnamespaces: ['*']\nselectors: [{apiGroup: example.com, kind: Deployment}]\n"
                .into(),
        ),
        origin: None,
    }]);
    let parsed: AdmissionRequest = serde_json::from_value(request(&old, &new)).unwrap();
    let evaluation = evaluate(
        &rules,
        &parsed,
        &Context::at(SystemTime::UNIX_EPOCH),
        Detail::Verdict,
    );
    assert_eq!(evaluation.denied_paths(), ["spec.paused"]);
}

proptest! {
    /// Spelling out any set of omitted zeros on either side never changes what is reported:
    /// exactly the real changes made beside them.
    #[test]
    fn spelled_zeros_never_change_the_verdict(
        kind in prop::sample::select(KINDS.to_vec()),
        spell_old in prop::collection::vec(any::<bool>(), 24),
        spell_new in prop::collection::vec(any::<bool>(), 24),
        change in prop::collection::vec(any::<bool>(), 24),
    ) {
        let fields: Vec<Omitted> = omitted_fields().into_iter().filter(|f| f.kinds.contains(&kind)).collect();
        let (mut old, mut new) = (stored(kind), stored(kind));
        for (i, field) in fields.iter().enumerate() {
            if spell_old[i] {
                set(&mut old, &field.at, field.zero.clone());
            }
        }
        let (mut admission, mut declared) = (Vec::new(), Vec::new());
        for (i, field) in fields.iter().enumerate() {
            if change[i] {
                set(&mut new, &field.at, field.other.clone());
                // An object that appears with the change is reported whole (§4).
                admission.push(first_missing(&old, &field.at));
                // A list without a merge key is declared whole (§8 step 2): any change in it
                // is drift, declared zero or not.
                let whole = ["/tolerations/", "/volumeClaimTemplates/"];
                if spell_old[i] || whole.iter().any(|list| field.at.contains(list)) {
                    declared.push(rendered(&field.at));
                }
            } else if spell_new[i] {
                set(&mut new, &field.at, field.zero.clone());
            }
        }
        admission.sort();
        declared.sort();
        let (step, denied) = admit(&old, &new);
        prop_assert_eq!(&denied, &admission);
        prop_assert_eq!(step, if admission.is_empty() { Step::NoChanges } else { Step::Violation });
        // The audit, with `old` as the declared manifest: drift where it declared the zero (a
        // field it does not declare is never drift, §8 step 2).
        let live = with_baseline(new.clone(), &old);
        prop_assert_eq!(drift(&live).unwrap_or_default(), declared);
    }
}

/// Empty lists and maps a chart renders (`command: []`, `limits: {}` …), at several depths:
/// absent to §4 on either side, so they declare nothing. Each with a non-empty value, and the
/// field (or element) `kubectl edit` of that value owns.
struct Empty {
    at: String,
    empty: Value,
    other: Value,
    owned: String,
}

fn empty_fields() -> Vec<Empty> {
    let row = |at: String, empty: Value, other: Value, owned: String| Empty {
        at,
        empty,
        other,
        owned,
    };
    vec![
        row(
            format!("{POD}/imagePullSecrets"),
            json!([]),
            json!([{"name": "registry"}]),
            format!("{POD}/imagePullSecrets/0"),
        ),
        row(
            format!("{POD}/securityContext/supplementalGroups"),
            json!([]),
            json!([1000]),
            format!("{POD}/securityContext/supplementalGroups"),
        ),
        row(
            format!("{APP}/command"),
            json!([]),
            json!(["sh"]),
            format!("{APP}/command"),
        ),
        row(
            format!("{APP}/resources/limits"),
            json!({}),
            json!({"cpu": "1"}),
            format!("{APP}/resources/limits/cpu"),
        ),
        row(
            format!("{APP}/securityContext/capabilities/drop"),
            json!([]),
            json!(["ALL"]),
            format!("{APP}/securityContext/capabilities/drop"),
        ),
        row(
            format!("{APP}/lifecycle/preStop/exec/command"),
            json!([]),
            json!(["sleep", "5"]),
            format!("{APP}/lifecycle/preStop/exec/command"),
        ),
    ]
}

/// The `FieldsV1` set of the field at `pointer` in `object`, as the API server writes it for
/// the manager that set it: list elements by their merge key.
fn fields_v1(object: &Value, pointer: &str) -> Value {
    let mut set = json!({});
    let mut at = &mut set;
    let mut value = object;
    for key in pointer.split('/').skip(1) {
        let (step, next) = match value {
            Value::Array(items) => {
                let item = &items[key.parse::<usize>().expect("an index")];
                let mut merge_key = serde_json::Map::new();
                if let Some(port) = item.get("containerPort") {
                    merge_key.insert("containerPort".into(), port.clone());
                    let protocol = item.get("protocol").cloned();
                    merge_key.insert("protocol".into(), protocol.unwrap_or(json!("TCP")));
                } else {
                    let name = ["name", "mountPath"]
                        .into_iter()
                        .find(|k| item.get(k).is_some())
                        .expect("a keyed element");
                    merge_key.insert(name.into(), item[name].clone());
                }
                (format!("k:{}", Value::Object(merge_key)), item)
            }
            _ => (format!("f:{key}"), &value[key]),
        };
        value = next;
        at = at
            .as_object_mut()
            .expect("a set")
            .entry(step)
            .or_insert_with(|| json!({}));
    }
    set
}

/// `object` with the field at `pointer` owned by `kubectl edit`.
fn edited_by_kubectl(mut object: Value, pointer: &str) -> Value {
    let fields = fields_v1(&object, pointer);
    object["metadata"]["managedFields"] = json!([{
        "manager": "kubectl-edit", "operation": "Update", "time": "2026-12-01T00:00:00Z",
        "fieldsType": "FieldsV1", "fieldsV1": fields
    }]);
    object
}

#[test]
fn an_empty_list_or_map_declares_nothing_and_is_no_change() {
    for kind in KINDS {
        let mut declared = manifest(kind);
        for field in empty_fields() {
            set(&mut declared, &field.at, field.empty.clone());
        }
        // As applied: the API server stores none of them.
        assert_eq!(
            drift(&with_baseline(stored(kind), &declared)),
            None,
            "{kind}"
        );
        let mut spelled = stored(kind);
        for field in empty_fields() {
            set(&mut spelled, &field.at, field.empty.clone());
        }
        no_change_either_way(kind, &spelled);
        for field in empty_fields() {
            let mut changed = stored(kind);
            set(&mut changed, &field.at, field.other.clone());
            // At admission a real change, reported where it appears (§4: an object that
            // appears with the change is reported whole).
            let (step, denied) = admit(&spelled, &changed);
            assert_eq!(
                (step, denied),
                (Step::Violation, vec![first_missing(&spelled, &field.at)]),
                "{kind} {}",
                field.at
            );
            // In the audit, a field the baseline does not declare: drift as an imperative edit
            // (§8 step 3), never by the baseline.
            assert_eq!(
                drift(&with_baseline(changed.clone(), &declared)),
                None,
                "{kind} {}",
                field.at
            );
            let edited = with_baseline(edited_by_kubectl(changed, &field.owned), &declared);
            assert_eq!(
                drift(&edited),
                Some(vec![rendered(&field.owned)]),
                "{kind} {}",
                field.at
            );
        }
    }
}

// Where issue 41 is silent: no finding may go away when the user applies the same manifest
// again while its drift remains.

/// `object` as a built-in kind's Go types write it: without the zeros [`omitted_fields`] and
/// [`empty_fields`] list. (The Rollout's controller writes it back so too.)
fn through_go_types(kind: &str, mut object: Value) -> Value {
    for field in omitted_fields().iter().filter(|f| f.kinds.contains(&kind)) {
        if object.pointer(&field.at) == Some(&field.zero) {
            remove(&mut object, &field.at);
        }
    }
    for field in empty_fields() {
        if object.pointer(&field.at) == Some(&field.empty) {
            remove(&mut object, &field.at);
        }
    }
    object
}

/// `value` without the map entries §4 reads as absent: `null`, and `{}` and `[]` (also once
/// pruned).
fn pruned(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(key, value)| (key, pruned(value)))
                .filter(|(_, value)| {
                    !(value.is_null()
                        || value.as_object().is_some_and(|m| m.is_empty())
                        || value.as_array().is_some_and(|a| a.is_empty()))
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(pruned).collect()),
        other => other,
    }
}

/// What the API server stores of `sent`, the object a patch made: a built-in kind through its
/// Go types, its defaulting replacing the zeros of [`defaulted_zeros`] as [`stored`] holds them;
/// a custom resource (the Rollout) as sent.
fn store(kind: &str, sent: Value) -> Value {
    if kind == "Rollout" {
        return sent;
    }
    let mut object = through_go_types(kind, sent);
    for (at, zero) in defaulted_zeros() {
        if object.pointer(&at) == Some(&zero) {
            let default = stored(kind).pointer(&at).expect("a default").clone();
            set(&mut object, &at, default);
        }
    }
    object
}

/// `live` after `kubectl apply` of `declared` again, the manifest it was applied from: the
/// engine's model of kubectl's three-way merge ([`apply::apply`]: the manifest did not change,
/// so nothing is deleted, and every declared value that differs live is sent, a zero too),
/// then stored by the API server ([`store`]).
fn reapplied(kind: &str, live: &Value, declared: &Value) -> Value {
    let patch = Patch::for_api_version(declared["apiVersion"].as_str().expect("apiVersion"));
    let mut merged = apply::apply(&with_baseline(live.clone(), declared), declared, patch);
    merged["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("annotations");
    store(kind, merged)
}

/// `drift-engine`'s rendering of a path as a JSON pointer.
fn pointer_of(path: &str) -> String {
    path.split('.')
        .flat_map(|part| match part.split_once('[') {
            Some((key, index)) => vec![key.to_owned(), index.trim_end_matches(']').to_owned()],
            None => vec![part.to_owned()],
        })
        .fold(String::new(), |pointer, part| format!("{pointer}/{part}"))
}

/// One way an object drifts from its manifest: the manifest, the object as the API server
/// stored it from that manifest, the object now, the field `kubectl edit` owns (if it made the
/// change), and whether applying the manifest again leaves the drift (kubectl sends nothing
/// that undoes it).
struct Drifted {
    what: String,
    declared: Value,
    as_applied: Value,
    live: Value,
    owned: Option<String>,
    stays: bool,
}

fn drifted_objects(kind: &str) -> Vec<Drifted> {
    let mut declared = manifest(kind);
    if kind != "Rollout" {
        for (at, zero) in defaulted_zeros() {
            set(&mut declared, &at, zero);
        }
    }
    for field in empty_fields() {
        set(&mut declared, &field.at, field.empty.clone());
    }
    let drifted = |what: String, live: Value, owned: Option<String>, stays| Drifted {
        what,
        declared: declared.clone(),
        as_applied: stored(kind),
        live,
        owned,
        stays,
    };
    let mut out = Vec::new();
    for field in omitted_fields().iter().filter(|f| f.kinds.contains(&kind)) {
        // A declared zero set to another value.
        let mut live = stored(kind);
        set(&mut live, &field.at, field.other.clone());
        out.push(drifted(format!("{} set", field.at), live, None, false));
        // A declared non-zero value set back to the zero, which is stored as nothing.
        let mut other = declared.clone();
        set(&mut other, &field.at, field.other.clone());
        let mut as_applied = stored(kind);
        set(&mut as_applied, &field.at, field.other.clone());
        out.push(Drifted {
            what: format!("{} zeroed", field.at),
            declared: other,
            as_applied,
            live: stored(kind),
            owned: None,
            stays: false,
        });
    }
    for (at, _) in kept_zeros(kind) {
        let mut gone = stored(kind);
        remove(&mut gone, &at);
        out.push(drifted(format!("{at} removed"), gone, None, false));
        let mut changed = stored(kind);
        set(&mut changed, &at, json!(7));
        out.push(drifted(format!("{at} changed"), changed, None, false));
    }
    if kind != "Rollout" {
        // A zero the API server defaulted (declaring nothing), edited.
        let at = format!("{APP}/imagePullPolicy");
        let mut live = stored(kind);
        set(&mut live, &at, json!("Always"));
        out.push(drifted(format!("{at} edited"), live, Some(at), false));
    }
    for field in empty_fields() {
        let mut live = stored(kind);
        set(&mut live, &field.at, field.other.clone());
        // kubectl's strategic merge patch sends a declared empty map as nothing, and an empty
        // list it merges by key; a custom resource's JSON merge patch replaces a list that
        // differs whole (`containers`, `imagePullSecrets`), and with it the edit.
        let stays = kind != "Rollout"
            && (field.empty == json!({}) || field.at.ends_with("/imagePullSecrets"));
        out.push(drifted(
            format!("{} edited", field.at),
            live,
            Some(field.owned.clone()),
            stays,
        ));
    }
    // Fields and elements the manifest does not declare, added by kubectl edit.
    let mut live = stored(kind);
    set(&mut live, &format!("{POD}/hostname"), json!("web-0"));
    out.push(drifted(
        "hostname added".into(),
        live,
        Some(format!("{POD}/hostname")),
        true,
    ));
    let mut live = stored(kind);
    live.pointer_mut(&format!("{APP}/env"))
        .and_then(Value::as_array_mut)
        .expect("env")
        .push(json!({"name": "D", "value": "x"}));
    // A custom resource's JSON merge patch replaces `containers` whole, and so removes it.
    out.push(drifted(
        "env element added".into(),
        live,
        Some(format!("{APP}/env/3")),
        kind != "Rollout",
    ));
    out
}

#[test]
fn applying_the_same_manifest_again_removes_a_finding_only_with_its_drift() {
    let (mut gone, mut kept) = (0, 0);
    for kind in KINDS {
        for case in drifted_objects(kind) {
            let what = format!("{kind}: {}", case.what);
            let owned_by_edit = |object: Value| match &case.owned {
                Some(owned) => edited_by_kubectl(object, owned),
                None => object,
            };
            let before = drift(&with_baseline(
                owned_by_edit(case.live.clone()),
                &case.declared,
            ))
            .unwrap_or_else(|| panic!("{what}: no drift to begin with"));
            let after = reapplied(kind, &case.live, &case.declared);
            // A field kubectl's apply changed is its own from then on, no longer kubectl edit's.
            let after = match &case.owned {
                Some(owned) if after.pointer(owned) == case.live.pointer(owned) => {
                    owned_by_edit(after)
                }
                _ => after,
            };
            let found = drift(&with_baseline(after.clone(), &case.declared)).unwrap_or_default();
            let (now, applied) = (
                pruned(through_go_types(kind, after.clone())),
                pruned(through_go_types(kind, case.as_applied.clone())),
            );
            for path in &before {
                if !found.contains(path) {
                    let pointer = pointer_of(path);
                    assert_eq!(
                        now.pointer(&pointer),
                        applied.pointer(&pointer),
                        "{what}: the finding at {path} went away while its field still differs"
                    );
                }
            }
            // And the model is no vacuous one: what kubectl undoes goes, what it leaves stays.
            if case.stays {
                assert_eq!(found, before, "{what}");
                kept += 1;
            } else {
                assert_eq!(found, Vec::<String>::new(), "{what}");
                gone += 1;
            }
        }
    }
    assert!(gone > 50 && kept > 10, "{gone} undone, {kept} left");
}
