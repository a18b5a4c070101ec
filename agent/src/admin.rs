//! The admin API: a second listener, loopback only, reached through `kubectl port-forward`.
//! `GET /status` tells which rules are loaded, which are invalid and why, and how export
//! fares; `GET /violations` streams exported records (NDJSON). It never changes anything.

use std::sync::Arc;

use axum::Router;
use std::time::Duration;

use axum::extract::State;
use axum::http::Uri;
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::state::Shared;

/// How often a `follow` stream looks for new records.
const FOLLOW_POLL: Duration = Duration::from_millis(250);

#[derive(Clone)]
struct AdminState {
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
}

pub fn router(shared: Arc<Shared>, shutdown: watch::Receiver<bool>) -> Router {
    Router::new()
        .route("/status", get(status))
        .route("/violations", get(violations))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(AdminState { shared, shutdown })
}

async fn violations(State(state): State<AdminState>, uri: Uri) -> Response {
    let dir = state
        .shared
        .export()
        .and_then(|export| export.exporter.channel_dir());
    crate::export::stream::response(dir, uri.query(), FOLLOW_POLL, state.shutdown.clone())
}

async fn status(State(state): State<AdminState>) -> Response {
    Json(status_document(&state.shared)).into_response()
}

/// The `export` part of `/status`: this pod's Connection status entry and the queue.
fn export_document(shared: &Shared) -> Value {
    let Some(export) = shared.export() else {
        return json!({"enabled": false});
    };
    let (messages, bytes) = export.exporter.queue_depth();
    json!({
        "enabled": true,
        "connection": export.connection,
        "channelDirectory": export.exporter.channel_dir().map(|d| d.display().to_string()),
        "queue": {"messages": messages, "bytes": bytes},
        "byPod": export.status.entry(),
    })
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
        "staleSources": snapshot.stale_sources,
        "staleRules": snapshot.stale_rules,
        "namespacesKnown": snapshot.namespaces.len(),
        "export": export_document(shared),
    })
}
