//! The admin API: a second listener, loopback only, reached through `kubectl port-forward`.
//! `GET /status` tells which rules are loaded and which are invalid and why. It never changes
//! anything.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use serde_json::{Value, json};

use crate::state::Shared;

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/status", get(status))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(shared)
}

async fn status(State(shared): State<Arc<Shared>>) -> Response {
    Json(status_document(&shared)).into_response()
}

/// The `/status` document.
pub fn status_document(shared: &Shared) -> Value {
    let snapshot = shared.snapshot();
    let rules: Vec<Value> = snapshot
        .rules
        .rules()
        .iter()
        .map(|rule| {
            json!({
                "rule": rule.id.to_string(),
                "mode": rule.mode.as_str(),
                "priority": rule.priority,
                "origin": rule.origin,
            })
        })
        .collect();
    let invalid: Vec<Value> = snapshot
        .rules
        .invalid()
        .iter()
        .map(|error| {
            let mut entry = serde_json::to_value(error).unwrap_or(Value::Null);
            if let Value::Object(map) = &mut entry {
                map.insert(
                    "rule".into(),
                    json!(format!("{}/{}", error.namespace, error.name)),
                );
                map.insert("message".into(), json!(error.to_string()));
            }
            entry
        })
        .collect();
    json!({
        "ready": shared.is_ready(),
        "source": snapshot.kind,
        "loadedAt": humantime::format_rfc3339_seconds(snapshot.loaded_at).to_string(),
        "rulesLoaded": snapshot.rules.rules().len(),
        "rulesInvalid": snapshot.invalid_count(),
        "rules": rules,
        "invalidRules": invalid,
        "sourceErrors": snapshot.source_errors,
        "namespacesKnown": snapshot.namespaces.len(),
    })
}
