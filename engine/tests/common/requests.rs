//! Requests and rules for the engine's black-box tests, written as the API server and a rule
//! ConfigMap would: a Deployment `prod/web` with one container, and an UPDATE of it by `alice`.

use drift_engine::review::AdmissionRequest;
use drift_engine::{RuleId, RuleSource, SpecText};
use serde_json::{Value, json};

/// A rule `namespace/name` with the spec `spec`.
pub fn rule(namespace: &str, name: &str, spec: &str) -> RuleSource {
    RuleSource {
        id: RuleId {
            namespace: namespace.into(),
            name: name.into(),
        },
        spec: SpecText::Yaml(spec.into()),
        origin: None,
    }
}

/// Deployment `prod/web` running `image` with `replicas`.
pub fn deployment(image: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web", "namespace": "prod", "labels": {"app": "web", "team": "a"},
            "resourceVersion": "10", "generation": 3, "uid": "u-1",
            "managedFields": [{"manager": "kubectl"}]
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": image, "ports": [{"containerPort": 80}]}]}
            }
        },
        "status": {"replicas": replicas}
    })
}

/// An UPDATE from `old` to `new` by user `alice`.
pub fn update(old: Value, new: Value) -> AdmissionRequest {
    serde_json::from_value(update_json(old, new)).expect("test request")
}

/// The request of [`update`] as JSON, as an AdmissionReview carries it.
pub fn update_json(old: Value, new: Value) -> Value {
    let namespace = new["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    json!({
        "uid": "req-1",
        "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "name": "web",
        "namespace": namespace,
        "operation": "UPDATE",
        "userInfo": {"username": "alice"},
        "object": new,
        "oldObject": old,
    })
}
