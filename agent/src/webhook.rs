//! The HTTP surface of the webhook listener: `POST /validate` (SPEC §5), liveness, readiness
//! and metrics. The handler reads the body, hands it to the engine against the active rule
//! snapshot, and answers; it never panics the server and never waits on a rule rebuild.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use drift_engine::review::{AdmissionResponse, ParsedReview, ReviewVersion, parse_review};
use drift_engine::{Context, Detail, Evaluation, evaluate};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use crate::state::Shared;

/// Largest AdmissionReview accepted (413 beyond).
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;
/// Bodies larger than this are judged on the blocking pool, under the write timeout.
const INLINE_BODY_BYTES: usize = 1024 * 1024;

/// Paths and timeouts of the webhook listener.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    pub validate_path: String,
    pub health_path: String,
    pub ready_path: String,
    pub metrics_path: String,
    pub read_timeout: Duration,
    pub write_timeout: Duration,
}

#[derive(Clone)]
struct AppState {
    shared: Arc<Shared>,
    config: Arc<WebhookConfig>,
}

pub fn router(shared: Arc<Shared>, config: WebhookConfig) -> Router {
    let state = AppState {
        shared,
        config: Arc::new(config.clone()),
    };
    Router::new()
        .route(&config.validate_path, post(validate))
        .route(&config.health_path, get(|| async { "ok\n" }))
        .route(&config.ready_path, get(ready))
        .route(&config.metrics_path, get(metrics))
        .with_state(state)
}

/// Health, readiness and metrics only: the listener of the audit process, which answers no
/// admission request.
pub fn probe_router(shared: Arc<Shared>, config: WebhookConfig) -> Router {
    let state = AppState {
        shared,
        config: Arc::new(config.clone()),
    };
    Router::new()
        .route(&config.health_path, get(|| async { "ok\n" }))
        .route(&config.ready_path, get(ready))
        .route(&config.metrics_path, get(metrics))
        .with_state(state)
}

async fn ready(State(state): State<AppState>) -> Response {
    if state.shared.is_ready() {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        plain(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}", state.shared.not_ready_reason()),
        )
    }
}

async fn metrics(State(state): State<AppState>) -> Response {
    match state.shared.metrics.render() {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            )],
            text,
        )
            .into_response(),
        Err(e) => plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot render metrics: {e}"),
        ),
    }
}

fn plain(status: StatusCode, message: impl Into<String>) -> Response {
    let mut text = message.into();
    text.push('\n');
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text,
    )
        .into_response()
}

fn is_json(content_type: Option<&HeaderValue>) -> bool {
    let Some(value) = content_type.and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
}

async fn validate(State(state): State<AppState>, request: Request) -> Response {
    let started = Instant::now();
    let content_type = request.headers().get(header::CONTENT_TYPE);
    if !is_json(content_type) {
        let got = content_type.and_then(|v| v.to_str().ok()).unwrap_or("none");
        return plain(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("Content-Type must be application/json (got {got})"),
        );
    }
    let declared_length = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared_length.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return too_large();
    }
    let body = Limited::new(request.into_body(), MAX_BODY_BYTES);
    let body = match tokio::time::timeout(state.config.read_timeout, body.collect()).await {
        Err(_) => {
            return plain(
                StatusCode::REQUEST_TIMEOUT,
                "request body not received within the read timeout",
            );
        }
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => return too_large(),
        Ok(Err(e)) => {
            return plain(
                StatusCode::BAD_REQUEST,
                format!("cannot read request body: {e}"),
            );
        }
        Ok(Ok(collected)) => collected.to_bytes(),
    };

    let shared = state.shared.clone();
    let answer = if body.len() <= INLINE_BODY_BYTES {
        match parse_review(&body) {
            Err(e) => Answer::NotAReview(e.0),
            Ok(parsed) => {
                let parent_labels = scaled_object_labels(&shared, &parsed).await;
                judge_guarded(&shared, parsed, parent_labels.as_ref(), started)
            }
        }
    } else {
        // Large bodies are parsed and judged on the blocking pool. (A `/scale` review is small:
        // it never takes this path, so it needs no parent labels here.)
        let task = tokio::task::spawn_blocking(move || match parse_review(&body) {
            Err(e) => Answer::NotAReview(e.0),
            Ok(parsed) => judge_guarded(&shared, parsed, None, started),
        });
        match tokio::time::timeout(state.config.write_timeout, task).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Answer::Internal("the decision task failed".into()),
            Err(_) => Answer::Internal("no decision within the write timeout".into()),
        }
    };
    match answer {
        Answer::NotAReview(message) => {
            count_error(&state.shared);
            plain(StatusCode::BAD_REQUEST, message)
        }
        Answer::Review(body) => json(body),
        Answer::Internal(message) => {
            tracing::error!(reason = %message, "internal failure while deciding a request");
            count_error(&state.shared);
            // HTTP 500: the API server treats the call as failed, so the webhook's
            // failurePolicy decides, and it quotes this reason. The body says the same.
            let review = AdmissionResponse::internal_error(
                "",
                format!("Drift Sentinel internal error: {message}"),
            )
            .into_review(ReviewVersion::V1);
            let mut response = json(Bytes::from(review.to_string()));
            *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            response
        }
    }
}

/// A request answered without a decision (not a review, malformed, internal failure).
fn count_error(shared: &Shared) {
    shared
        .metrics
        .admission_requests
        .with_label_values(&["", "", "error"])
        .inc();
}

fn too_large() -> Response {
    plain(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body is larger than {MAX_BODY_BYTES} bytes"),
    )
}

fn json(body: Bytes) -> Response {
    let mut response = Response::new(Body::from(body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

enum Answer {
    NotAReview(String),
    Review(Bytes),
    Internal(String),
}

/// In cluster mode, the labels of the object a `/scale` UPDATE scales — read only when a rule
/// with label selectors could need them.
async fn scaled_object_labels(
    shared: &Shared,
    parsed: &ParsedReview,
) -> Option<serde_json::Map<String, serde_json::Value>> {
    let request = parsed.request.as_ref().ok()?;
    if request.sub_resource() != "scale" || request.operation != "UPDATE" {
        return None;
    }
    let lookup = shared.parent_lookup()?;
    let any_labels = shared
        .snapshot()
        .rules
        .rules()
        .iter()
        .any(|r| !r.labels.is_empty());
    if !any_labels {
        return None;
    }
    lookup.labels(request).await
}

/// Judges a parsed review; a panic anywhere inside becomes an internal-error answer.
fn judge_guarded(
    shared: &Shared,
    parsed: ParsedReview,
    parent_labels: Option<&serde_json::Map<String, serde_json::Value>>,
    started: Instant,
) -> Answer {
    match std::panic::catch_unwind(AssertUnwindSafe(|| {
        judge(shared, parsed, parent_labels, started)
    })) {
        Ok(answer) => answer,
        Err(panic) => {
            let detail = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".into());
            Answer::Internal(detail)
        }
    }
}

fn judge(
    shared: &Shared,
    parsed: ParsedReview,
    parent_labels: Option<&serde_json::Map<String, serde_json::Value>>,
    started: Instant,
) -> Answer {
    let request = match parsed.request {
        Ok(request) => request,
        Err(reason) => {
            tracing::warn!(uid = %parsed.uid, reason = %reason, "malformed AdmissionReview");
            count_error(shared);
            let review =
                AdmissionResponse::bad_request(&parsed.uid, reason).into_review(parsed.version);
            return Answer::Review(Bytes::from(review.to_string()));
        }
    };
    let snapshot = shared.snapshot();
    let namespace_mode = snapshot
        .namespaces
        .get(request.namespace())
        .and_then(|n| n.mode_annotation.as_deref());
    let context = Context {
        namespace_mode,
        parent_labels,
    };
    let evaluation = evaluate(&snapshot.rules, &request, &context, Detail::Verdict);
    let review = evaluation
        .response(&request.uid)
        .into_review(parsed.version);
    let encoded = Bytes::from(review.to_string());
    record(shared, &request, &evaluation, started.elapsed());
    if let Some(export) = shared.export() {
        // Whatever happens to the record, the response stands.
        let exported = std::panic::catch_unwind(AssertUnwindSafe(|| {
            export.exporter.export_admission(&request, &evaluation);
        }));
        if exported.is_err() {
            tracing::error!(uid = %request.uid, "exporting the violation record failed (panic); the response is unchanged");
        }
    }
    Answer::Review(encoded)
}

/// How many changed (and denied) fields a decision log line lists; the counts are always there.
const MAX_LOGGED_FIELDS: usize = 50;

/// The metric label `resource`: `group/version/resource` as the original Go agent writes it
/// (`apps/v1/deployments`), `/scale` appended for the subresource; the core group is left out
/// (`v1/pods`).
fn resource_label(request: &drift_engine::AdmissionRequest) -> String {
    let gvr = &request.resource;
    let mut label = String::with_capacity(64);
    if !gvr.group.is_empty() {
        label.push_str(&gvr.group);
        label.push('/');
    }
    label.push_str(&gvr.version);
    label.push('/');
    label.push_str(&gvr.resource);
    if !request.sub_resource().is_empty() {
        label.push('/');
        label.push_str(request.sub_resource());
    }
    label
}

/// Metrics and the decision log line, rendered from the evaluation.
fn record(
    shared: &Shared,
    request: &drift_engine::AdmissionRequest,
    evaluation: &Evaluation<'_>,
    elapsed: Duration,
) {
    let metrics = &shared.metrics;
    let resource = resource_label(request);
    let result = match (evaluation.verdict(), evaluation.allowed()) {
        (Some(verdict), _) => verdict.as_str(),
        (None, true) => "allowed",
        (None, false) => "error",
    };
    metrics
        .admission_requests
        .with_label_values(&[request.namespace(), &resource, result])
        .inc();
    metrics.admission_duration.observe(elapsed.as_secs_f64());
    let changes = evaluation.changes();
    if let (Some(_), Some(mode)) = (evaluation.violation(), evaluation.mode()) {
        // One count per field and request, whatever the number of indices it changed at.
        let fields: std::collections::BTreeSet<String> = changes
            .iter()
            .filter(|c| !c.mutable)
            .map(|c| c.change.path.to_wildcard_string())
            .collect();
        for field in fields {
            metrics
                .violations
                .with_label_values(&[request.namespace(), &resource, &field, mode.as_str()])
                .inc();
        }
    }
    let listed = |paths: &mut dyn Iterator<Item = &str>| {
        paths.take(MAX_LOGGED_FIELDS).collect::<Vec<_>>().join(", ")
    };
    let denied = evaluation.denied_paths();
    let rule = evaluation.rule();
    tracing::info!(
        uid = %request.uid,
        operation = %request.operation,
        namespace = request.namespace(),
        resource = %resource,
        name = request.name(),
        user = %request.user_info.username,
        rule = rule.map(|r| r.id.to_string()).unwrap_or_default(),
        tier = rule.map(|r| r.tier.as_str()).unwrap_or(""),
        mode = evaluation.mode().map(|m| m.as_str()).unwrap_or(""),
        step = ?evaluation.step(),
        result = result,
        reason = %evaluation.status_message(),
        changed_fields = %listed(&mut changes.iter().map(|c| c.path.as_str())),
        changed_count = changes.len(),
        denied_fields = %listed(&mut denied.iter().map(String::as_str)),
        denied_count = denied.len(),
        dry_run = request.dry_run.unwrap_or(false),
        latency_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
        "admission decision"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types() {
        let cases = [
            ("application/json", true),
            ("application/json; charset=utf-8", true),
            ("Application/JSON", true),
            ("text/plain", false),
            ("application/x-www-form-urlencoded", false),
        ];
        for (value, want) in cases {
            assert_eq!(
                is_json(Some(&HeaderValue::from_static(value))),
                want,
                "{value}"
            );
        }
        assert!(!is_json(None));
    }
}
