//! Stable-toolchain guard for the fuzz target `review` (issue 13): property tests that feed
//! arbitrary JSON through what the agent does with an admission body — `parse_review`,
//! `evaluate` against a fixed realistic rule set, `response()` and its encoding — and check
//! that nothing panics and that reference §5's bounds hold (the checks are shared with the fuzz
//! target: tests/common/admission_bounds.rs).

#[path = "common/admission_bounds.rs"]
mod admission_bounds;

use std::sync::LazyLock;

use drift_engine::RuleSet;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

static RULES: LazyLock<RuleSet> = LazyLock::new(admission_bounds::rules);

/// Keys that the rules and the diff care about, and some that need quoting when rendered.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "metadata", "spec", "status", "labels", "annotations", "name", "containers",
            "initContainers", "image", "env", "value", "ports", "port", "containerPort",
            "protocol", "volumeMounts", "mountPath", "replicas", "template", "data", "team",
            "tier", "drift-sentinel.k8s.io/bypass", "example.com/skip", "managedFields",
            "resourceVersion", "deployment.kubernetes.io/revision", "ignored.key",
        ])
        .prop_map(str::to_owned),
        1 => "[a-z.'\\\\/ *\\[\\]]{0,6}",
        1 => any::<String>(),
    ]
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        prop::sample::select(vec![
            "true", "TCP", "UDP", "app:1", "app:2", "payments", "", "1"
        ])
        .prop_map(Value::from),
        any::<String>().prop_map(Value::from),
    ]
}

/// Any JSON value, with the keys above.
fn json_value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(5, 96, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..8)
                .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// An edit of a value: most of it kept, so the diff has aligned lists and kept elements.
fn edited(value: Value) -> impl Strategy<Value = Value> {
    (any::<u64>(), json_value()).prop_map(move |(seed, replacement)| {
        let mut value = value.clone();
        mutate(&mut value, seed, replacement);
        value
    })
}

fn mutate(value: &mut Value, seed: u64, replacement: Value) {
    let choice = seed % 7;
    match value {
        Value::Object(map) if !map.is_empty() && choice < 5 => {
            let index = (seed / 7) as usize % map.len();
            let key = map.keys().nth(index).cloned().unwrap();
            match choice {
                0 => {
                    map.shift_remove(&key);
                }
                1 => {
                    map.insert(key, replacement);
                }
                _ => mutate(map.get_mut(&key).unwrap(), seed / 7, replacement),
            }
        }
        Value::Array(items) if !items.is_empty() && choice < 5 => {
            let index = (seed / 7) as usize % items.len();
            match choice {
                0 => {
                    items.remove(index);
                }
                1 => items.insert(index, replacement),
                2 => items.swap(0, index),
                _ => mutate(&mut items[index], seed / 7, replacement),
            }
        }
        _ => *value = replacement,
    }
}

/// A Deployment-like object with random parts in the places rules look at.
fn object() -> impl Strategy<Value = Value> {
    (
        json_value(),
        json_value(),
        prop::collection::vec(json_value(), 0..4),
        prop::collection::vec(("[a-z]{1,3}", json_value()), 0..30),
    )
        .prop_map(|(labels, annotations, containers, env)| {
            let env: Vec<Value> = env
                .into_iter()
                .map(|(name, value)| json!({"name": name, "value": value}))
                .collect();
            let mut containers: Vec<Value> = containers;
            containers.push(json!({"name": "app", "image": "app:1", "env": env}));
            json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "web", "labels": labels, "annotations": annotations},
                "spec": {"replicas": 2, "template": {"spec": {"containers": containers}}},
                "data": {"k": "v"},
            })
        })
}

fn pair() -> impl Strategy<Value = (Value, Value)> {
    object().prop_flat_map(|old| {
        let o = old.clone();
        (Just(o), edited(old).prop_flat_map(edited))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// An UPDATE of any kind, namespace and user, with related objects: no panic, bounds hold.
    #[test]
    fn updates_are_decided_within_bounds(selector in any::<u8>(), (old, new) in pair()) {
        admission_bounds::check_body(&RULES, &admission_bounds::update_body(selector, old, new));
    }

    /// Unrelated objects (any JSON on either side, objects or not).
    #[test]
    fn any_objects_are_decided_within_bounds(selector in any::<u8>(), old in json_value(), new in json_value()) {
        admission_bounds::check_body(&RULES, &admission_bounds::update_body(selector, old, new));
    }

    /// A review whose request is any JSON, with some fields of the right names.
    #[test]
    fn any_request_is_answered_within_bounds(
        request in json_value(),
        uid in prop_oneof![Just(Value::from("u")), json_value()],
        operation in prop_oneof![Just(Value::from("UPDATE")), json_value()],
        kind in json_value(),
        version in prop::sample::select(vec!["admission.k8s.io/v1", "admission.k8s.io/v1beta1", "v1"]),
    ) {
        let mut request = request;
        if let Value::Object(map) = &mut request {
            map.insert("uid".into(), uid);
            map.insert("operation".into(), operation);
            map.insert("kind".into(), kind);
        }
        let body = json!({"apiVersion": version, "kind": "AdmissionReview", "request": request});
        admission_bounds::check_body(&RULES, body.to_string().as_bytes());
    }

    /// Any bytes, and any JSON document, as a body.
    #[test]
    fn any_body_is_answered(bytes in prop::collection::vec(any::<u8>(), 0..512), document in json_value()) {
        admission_bounds::check_body(&RULES, &bytes);
        admission_bounds::check_body(&RULES, document.to_string().as_bytes());
    }
}

/// Many changed paths (far over the 20 named), long keys and long values: the reason, the
/// annotation and the body stay bounded.
#[test]
fn wide_diffs_stay_bounded() {
    let long = "k".repeat(5000);
    let old: Map<String, Value> = (0..500)
        .map(|i| (format!("{long}{i}"), Value::from(i)))
        .collect();
    let new: Map<String, Value> = (0..500)
        .map(|i| (format!("{long}{i}"), Value::from("x".repeat(10_000))))
        .collect();
    for selector in [0u8, 5, 10, 15, 35, 40] {
        let body = admission_bounds::update_body(
            selector,
            json!({"spec": Value::Object(old.clone())}),
            json!({"spec": Value::Object(new.clone())}),
        );
        admission_bounds::check_body(&RULES, &body);
    }
}
