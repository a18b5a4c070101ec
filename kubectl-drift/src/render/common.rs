//! What the screens of `preview` and `explain` both show: the object, and where the mode came
//! from.

use drift_engine::Evaluation;
use drift_engine::evaluation::ModeSource;
use drift_engine::review::AdmissionRequest;
use serde_json::{Value, json};

/// The object, for `-o json|yaml`: apiVersion, kind, namespace and name.
pub(super) fn object_summary(request: &AdmissionRequest) -> Value {
    json!({
        "apiVersion": if request.kind.group.is_empty() { request.kind.version.clone() } else { format!("{}/{}", request.kind.group, request.kind.version) },
        "kind": request.kind.kind,
        "namespace": request.namespace(),
        "name": request.name(),
    })
}

/// The object, for `-o text`: `Kind namespace/name`.
pub(super) fn object_line(request: &AdmissionRequest) -> String {
    match request.namespace() {
        "" => format!("{} {}", request.kind.kind, request.name()),
        ns => format!("{} {ns}/{}", request.kind.kind, request.name()),
    }
}

/// Where the mode in force came from.
pub(super) fn mode_source(evaluation: &Evaluation<'_>) -> &'static str {
    match evaluation.matched().map(|m| m.winner.mode_source) {
        Some(ModeSource::NamespaceAnnotation) => "namespace annotation drift-sentinel.k8s.io/mode",
        Some(ModeSource::Rule) => "the rule",
        None => "",
    }
}
