//! The HTTP surface of the webhook listener: `POST /validate` (reference §5), liveness, readiness
//! and metrics. The handler reads the body, hands it to the engine against the active rule
//! snapshot, and answers; it never panics the server and never waits on a rule rebuild.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{FromRef, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;

use crate::client_auth::{ClientAuth, PeerCertificates, Refusal};
use crate::state::{ServeState, Shared};

mod admission;
mod intake;
mod response;

pub use intake::{BODY_BUDGET, Intake, MAX_BODY_BYTES};
use response::json;
pub use response::plain;

/// Paths, timeouts and intake of the webhook listener.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    pub validate_path: String,
    pub validate_rule_path: String,
    pub probes: ProbePaths,
    pub read_timeout: Duration,
    pub write_timeout: Duration,
    /// The admission requests and body bytes held at once.
    pub intake: Intake,
}

/// Paths of liveness, readiness and metrics: what every listener of the agent answers, the
/// audit's included.
#[derive(Debug, Clone)]
pub struct ProbePaths {
    pub health: String,
    pub ready: String,
    pub metrics: String,
}

impl Default for ProbePaths {
    /// The paths the chart's probes and scrape configuration use.
    fn default() -> Self {
        Self {
            health: "/healthz".into(),
            ready: "/readyz".into(),
            metrics: "/metrics".into(),
        }
    }
}

#[derive(Clone)]
struct AppState {
    shared: Arc<Shared>,
    serving: Arc<ServeState>,
    config: Arc<WebhookConfig>,
    /// Set under client authentication: the admission paths then refuse other callers.
    client_auth: Option<Arc<ClientAuth>>,
}

pub fn router(
    shared: Arc<Shared>,
    serving: Arc<ServeState>,
    config: WebhookConfig,
    client_auth: Option<Arc<ClientAuth>>,
) -> Router {
    let state = AppState {
        shared,
        serving,
        config: Arc::new(config.clone()),
        client_auth,
    };
    let routes = Router::new()
        .route(&config.validate_path, post(validate))
        .route(&config.validate_rule_path, post(validate_rule));
    with_probes(routes, &config.probes).with_state(state)
}

/// The state the probes read: the rules' readiness and the metrics.
impl FromRef<AppState> for Arc<Shared> {
    fn from_ref(state: &AppState) -> Self {
        state.shared.clone()
    }
}

/// `routes` with liveness, readiness and metrics added, for any listener whose state holds the
/// rules.
fn with_probes<S>(routes: Router<S>, paths: &ProbePaths) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Arc<Shared>: FromRef<S>,
{
    routes
        .route(&paths.health, get(|| async { "ok\n" }))
        .route(&paths.ready, get(ready))
        .route(&paths.metrics, get(metrics))
}

/// `POST /validate-rule`: judges a rule ConfigMap before it is stored (reference §2, "A typo
/// never opens a hole"); see [`crate::validate_rule`].
async fn validate_rule(State(state): State<AppState>, request: Request) -> Response {
    // The place in the intake is held until the answer.
    let (_admitted, body) = match admit_body(&state, request).await {
        Ok(admitted) => admitted,
        Err(response) => return response,
    };
    // Compiling a rule reads YAML a tenant wrote: on the decision threads, like a decision,
    // so that the threads answering the probes never wait on it.
    let shared = state.shared.clone();
    let answered = state
        .serving
        .decisions
        .run(move || crate::validate_rule::answer(&shared, &body))
        .await;
    match answered {
        Ok(Ok(review)) => json(Bytes::from(review.to_string())),
        Ok(Err(message)) => plain(StatusCode::BAD_REQUEST, message),
        Err(e) => plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the rule check failed: {e}"),
        ),
    }
}

/// Health, readiness and metrics only: the listener of the audit process, which answers no
/// admission request.
pub fn probe_router(shared: Arc<Shared>, paths: &ProbePaths) -> Router {
    with_probes(Router::new(), paths).with_state(shared)
}

async fn ready(State(shared): State<Arc<Shared>>) -> Response {
    if shared.is_ready() {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        plain(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}", shared.not_ready_reason()),
        )
    }
}

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    match shared.metrics.render_for_scrape().await {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            )],
            text,
        )
            .into_response(),
        Err(e @ crate::metrics::ScrapeError::Busy) => {
            plain(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
        }
        Err(e) => plain(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

fn is_json(content_type: Option<&HeaderValue>) -> bool {
    let Some(value) = content_type.and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
}

/// Reads the body of an AdmissionReview POST: JSON only, at most [`MAX_BODY_BYTES`], within
/// `read_timeout` and `intake`'s budget of body bytes; otherwise the plain answer to give.
/// (Public for the load benchmark's reference server, which reads bodies exactly so.)
pub async fn read_review_body(
    request: Request,
    read_timeout: Duration,
    intake: &Intake,
) -> Result<Bytes, Response> {
    let content_type = request.headers().get(header::CONTENT_TYPE);
    if !is_json(content_type) {
        let got = content_type.and_then(|v| v.to_str().ok()).unwrap_or("none");
        return Err(plain(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("Content-Type must be application/json (got {got})"),
        ));
    }
    let declared_length = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared_length.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(intake::too_large());
    }
    intake
        .read_body(request, declared_length, read_timeout)
        .await
}

/// What both admission paths do first: refuse a caller client authentication does not accept,
/// take a place in the intake (the guard, held by the caller until it answers), read the body.
async fn admit_body(
    state: &AppState,
    request: Request,
) -> Result<(intake::Admitted, Bytes), Response> {
    if let Some(refused) = refuse_caller(state, &request) {
        return Err(refused);
    }
    let admitted = state
        .config
        .intake
        .admit()
        .map_err(IntoResponse::into_response)?;
    let body = read_review_body(request, state.config.read_timeout, &state.config.intake).await?;
    Ok((admitted, body))
}

async fn validate(State(state): State<AppState>, request: Request) -> Response {
    let started = Instant::now();
    // The place in the intake is held until the answer.
    let (_admitted, body) = match admit_body(&state, request).await {
        Ok(admitted) => admitted,
        Err(response) => return response,
    };
    admission::answer(
        &state.shared,
        &state.serving,
        body,
        started,
        state.config.write_timeout,
    )
    .await
}

/// Under client authentication (reference §6, "Who may call"), the 401 for a caller whose
/// connection presented no accepted certificate, before its body is read: nothing of it is
/// recorded but the refusal's count and a rate-limited WARN.
fn refuse_caller(state: &AppState, request: &Request) -> Option<Response> {
    let auth = state.client_auth.as_ref()?;
    let refusal = match request.extensions().get::<Arc<PeerCertificates>>() {
        Some(connection) => {
            let refusal = auth.refusal(connection)?;
            auth.log_refusal(&refusal, Some(connection.peer));
            refusal
        }
        // A connection without TLS cannot carry a certificate.
        None => {
            auth.log_refusal(&Refusal::NoCertificate, None);
            Refusal::NoCertificate
        }
    };
    state
        .shared
        .metrics
        .webhook_refused
        .with_label_values(&[refusal.reason()])
        .inc();
    Some(plain(
        StatusCode::UNAUTHORIZED,
        refusal.message(auth.names()),
    ))
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
