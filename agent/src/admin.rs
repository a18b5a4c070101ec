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
use drift_api::status::{AgentStatus, ExportState, InvalidRule, LoadedRule, QueueDepth};
use tokio::sync::watch;

use crate::export::stream::Unavailable;
use crate::state::{AuditRuns, ExportHandle, ServeState, Shared};

/// Idle timeout of admin connections: `/violations?follow=true` streams for as long as the
/// client wants while the client sends nothing, so the listeners' usual read-idle timeout
/// would cut it. The listener is loopback only.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// How often a `follow` stream looks for new records.
const FOLLOW_POLL: Duration = Duration::from_millis(250);

#[derive(Clone)]
struct AdminState {
    shared: Arc<Shared>,
    /// What the process adds to `/status`.
    process: Process,
    shutdown: watch::Receiver<bool>,
}

/// The process the admin API reports on.
#[derive(Clone)]
enum Process {
    Serve(Arc<ServeState>),
    Audit(Arc<AuditRuns>),
}

/// The admin API of the webhook: `/status` with its export, `/violations` of its channel
/// directory.
pub fn router(
    shared: Arc<Shared>,
    serving: Arc<ServeState>,
    shutdown: watch::Receiver<bool>,
) -> Router {
    Router::new()
        .route("/status", get(status))
        .route("/violations", get(violations))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(AdminState {
            shared,
            process: Process::Serve(serving),
            shutdown,
        })
}

/// The admin API of the audit process: `/status` with its last run, and `/violations` of the
/// channel directory its last run wrote to (`?source=audit` streams the runs' records), when it
/// `exports`.
pub fn audit_router(
    shared: Arc<Shared>,
    runs: Arc<AuditRuns>,
    dir: Arc<arc_swap::ArcSwapOption<std::path::PathBuf>>,
    exports: bool,
    shutdown: watch::Receiver<bool>,
) -> Router {
    Router::new()
        .route("/status", get(status))
        .route(
            "/violations",
            get(move |State(state): State<AdminState>, uri: Uri| {
                let dir = match dir.load_full() {
                    Some(dir) => Ok(dir.as_ref().clone()),
                    None if exports => Err(Unavailable::NoAuditRun),
                    None => Err(Unavailable::AuditExportOff),
                };
                async move {
                    crate::export::stream::response(
                        dir,
                        uri.query(),
                        FOLLOW_POLL,
                        state.shutdown.clone(),
                    )
                }
            }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(AdminState {
            shared,
            process: Process::Audit(runs),
            shutdown,
        })
}

/// `/violations` of the webhook: its channel directory, when it exports.
async fn violations(State(state): State<AdminState>, uri: Uri) -> Response {
    let export = match &state.process {
        Process::Serve(serving) => serving.export.as_ref(),
        Process::Audit(_) => None,
    };
    let dir = match export {
        None => Err(Unavailable::WebhookExportOff),
        Some(export) => export
            .exporter
            .channel_dir()
            .ok_or(Unavailable::NoConnection),
    };
    crate::export::stream::response(dir, uri.query(), FOLLOW_POLL, state.shutdown.clone())
}

async fn status(State(state): State<AdminState>) -> Response {
    Json(status_document(&state.shared, &state.process)).into_response()
}

/// The `export` part of `/status`: this pod's Connection status entry and the queue.
fn export_state(export: Option<&ExportHandle>) -> ExportState {
    let Some(export) = export else {
        return ExportState::default();
    };
    let (messages, bytes) = export.exporter.queue_depth();
    ExportState {
        enabled: true,
        connection: Some(export.connection.clone()),
        channel_directory: export
            .exporter
            .channel_dir()
            .map(|d| d.display().to_string()),
        queue: Some(QueueDepth { messages, bytes }),
        by_pod: Some(export.status.entry()),
    }
}

/// The `/status` document.
fn status_document(shared: &Shared, process: &Process) -> AgentStatus {
    let (export, runs) = match process {
        Process::Serve(serving) => (serving.export.as_ref(), None),
        Process::Audit(runs) => (None, Some(runs)),
    };
    let snapshot = shared.snapshot();
    let rules = snapshot
        .rules
        .rules()
        .iter()
        .map(|rule| LoadedRule {
            rule: rule.id.to_string(),
            mode: rule.mode.as_str().to_owned(),
            priority: rule.priority,
            tier: rule.tier.as_str().to_owned(),
            origin: rule.origin.clone(),
        })
        .collect();
    let invalid_rules = snapshot
        .rules
        .invalid()
        .iter()
        .map(|error| InvalidRule {
            rule: format!("{}/{}", error.namespace, error.name),
            namespace: error.namespace.clone(),
            name: error.name.clone(),
            origin: error.origin.clone(),
            field: error.field.clone(),
            line: error.line,
            column: error.column,
            reason: error.reason.clone(),
            message: error.to_string(),
        })
        .collect();
    AgentStatus {
        ready: shared.is_ready(),
        source: snapshot.kind.clone(),
        loaded_at: humantime::format_rfc3339_seconds(snapshot.loaded_at).to_string(),
        rules_loaded: snapshot.rules.rules().len(),
        rules_invalid: snapshot.invalid_count(),
        rules,
        invalid_rules,
        source_errors: snapshot.source_errors.clone(),
        stale_sources: snapshot.stale_sources.clone(),
        stale_rules: snapshot.stale_rules.clone(),
        cluster_rule_namespaces: Some(shared.tier_policy().cluster_namespace_globs()),
        namespaces_known: snapshot.namespaces.len(),
        export: export_state(export),
        audit: runs.and_then(|r| r.last()),
        audit_interval_seconds: runs.and_then(|r| r.interval()).map(|i| i.as_secs_f64()),
        record_signing: match process {
            Process::Serve(serving) => serving.record_signing.as_ref(),
            Process::Audit(runs) => runs.record_signing(),
        }
        .map(crate::record_key::SigningStatus::status),
    }
}
