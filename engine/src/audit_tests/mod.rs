//! The audit evaluation's tests, by concern; the fixtures they share are here.

use super::*;
use crate::evaluation::ModeSource;
use crate::rule::{RuleId, RuleSource, TierPolicy};
use proptest::prelude::*;
use serde_json::json;

mod bypass;
mod imperative;
mod results;
mod selection;
mod texts;

fn rule_source(namespace: &str, name: &str, spec: &str) -> RuleSource {
    RuleSource {
        id: RuleId {
            namespace: namespace.into(),
            name: name.into(),
        },
        spec: crate::SpecText::Yaml(spec.into()),
        origin: None,
    }
}

fn rules(specs: &[(&str, &str)]) -> RuleSet {
    RuleSet::build(
        specs
            .iter()
            .map(|(name, spec)| rule_source("ops", name, spec)),
    )
}

const WEB: &str = "mode: enforce\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\nmutable: [spec.replicas]\n";

fn managers() -> Vec<String> {
    DEFAULT_DRIFT_MANAGERS
        .iter()
        .map(|m| m.to_string())
        .collect()
}

fn declared(image: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "app", "image": image}]}}}
    })
}

/// A live Deployment applied from `applied`, now running `image` with `replicas`.
fn live(applied: &Value, image: &str, replicas: i64, managed: Value) -> Value {
    let mut live = declared(image, replicas);
    live["metadata"]["annotations"] = json!({LAST_APPLIED_ANNOTATION: applied.to_string(), "deployment.kubernetes.io/revision": "2"});
    live["metadata"]["managedFields"] = managed;
    live["metadata"]["uid"] = json!("u");
    live["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = json!("IfNotPresent");
    live["status"] = json!({"replicas": replicas});
    live
}

/// A live Deployment running what was last applied: `image` with `replicas`.
fn live_as_applied(image: &str, replicas: i64, managed: Value) -> Value {
    live(&declared(image, replicas), image, replicas, managed)
}

fn set_image_entry() -> Value {
    json!({"manager": "kubectl-set", "operation": "Update", "time": "2026-07-28T12:00:00Z",
        "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {
            "k:{\"name\":\"app\"}": {"f:image": {}}}}}}}})
}

/// The time the tests' runs judge at.
const NOW: std::time::SystemTime = std::time::SystemTime::UNIX_EPOCH;

fn run<'a>(rules: &'a RuleSet, object: &'a Value, managers: &'a [String]) -> Audit<'a> {
    audit(
        rules,
        object,
        &AuditContext {
            namespace_mode: None,
            drift_managers: managers,
            now: NOW,
        },
        Detail::Verdict,
    )
}
