//! The benchmarks' cases (shared with the agent's black-box tests, and with the load benchmark
//! of drift-bench for its rules): the realistic Deployment of `drift_testkit::objects` at
//! ~10 KB, its image-only and replicas changes, one with 200 environment variables and a sidecar
//! inserted, and rule sets.
#![allow(dead_code)]

use serde_json::{Value, json};

// Each file that includes this module uses its own part of it (drift-bench only the rules).
#[allow(unused_imports)]
pub use drift_testkit::objects::{IMAGES, NEW_IMAGES, deployment_with, review, with_last_applied};

/// The realistic Deployment: 36 variables in its main container (~10 KB of JSON).
pub fn deployment(images: [&str; 3], replicas: i64) -> Value {
    deployment_with(images, replicas, 36)
}

/// (a) an image-only change of the realistic Deployment.
pub fn image_change() -> (Value, Value) {
    (deployment(IMAGES, 3), deployment(NEW_IMAGES, 3))
}

/// The image-only change as a client-side `kubectl apply` sends it: the last-applied
/// annotation, the manifest as escaped JSON, rewritten with the image on each side.
pub fn apply_change() -> (Value, Value) {
    (
        with_last_applied(deployment(IMAGES, 3)),
        with_last_applied(deployment(NEW_IMAGES, 3)),
    )
}

/// (b) a `spec.replicas` change of the realistic Deployment (the last-applied annotation
/// changes with it, as under `kubectl apply`).
pub fn replicas_change() -> (Value, Value) {
    (deployment(IMAGES, 3), deployment(IMAGES, 5))
}

/// (c) 200 variables in the main container and a sidecar inserted at index 0.
pub fn sidecar_insert() -> (Value, Value) {
    let old = deployment_with(IMAGES, 3, 200);
    let mut new = old.clone();
    if let Some(containers) = new
        .pointer_mut("/spec/template/spec/containers")
        .and_then(Value::as_array_mut)
    {
        containers.insert(0, json!({"name": "istio-proxy", "image": "istio/proxyv2:1.22.0", "args": ["proxy", "sidecar"]}));
    }
    (old, new)
}

/// The rule of the benchmarks and tests: Deployments in `prod-*`, images and the apply
/// annotation mutable.
pub const RULE_SPEC: &str = r#"mode: enforce
priority: 10
namespaces: ["prod-*"]
selectors:
  - apiGroup: apps
    kind: Deployment
mutable:
  - "spec.template.spec.containers[*].image"
  - "spec.template.spec.initContainers[*].image"
  - "metadata.annotations['kubectl.kubernetes.io/last-applied-configuration']"
"#;

/// A rule of team `i` that selects Deployments in its own namespaces (`team-NN-*`,
/// `staging-NN`), never the realistic Deployment's, at priority 100 + `i`.
pub fn team_rule_spec(i: usize) -> String {
    format!(
        "mode: enforce\npriority: {}\nnamespaces: [\"team-{i:02}-*\", \"staging-{i:02}\"]\nselectors:\n  - apiGroup: apps\n    kind: Deployment\nmutable: [\"spec.template.spec.containers[*].image\"]\n",
        100 + i
    )
}

/// (d) 50 rules of which only the last (lowest priority) matches the realistic Deployment:
/// the first 49 select the same kind in other namespaces.
pub fn many_rule_specs() -> Vec<(String, String)> {
    let mut specs: Vec<(String, String)> = (0..49)
        .map(|i| (format!("team-{i:02}"), team_rule_spec(i)))
        .collect();
    specs.push(("production".into(), RULE_SPEC.into()));
    specs
}
