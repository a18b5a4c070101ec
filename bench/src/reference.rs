//! The reference server: parse-and-answer in the agent's own serving stack. `POST /validate`
//! reads the body exactly as the agent does (JSON only, at most 8 MiB, within the read
//! timeout), parses it into a `serde_json::Value` and answers `allowed` with the request's
//! uid. No rules, no decision, no metrics, no log line: what the agent does beyond this is
//! what the benchmark's ratio prices.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde_json::{Value, json};

use drift_sentinel::webhook::MAX_BODY_BYTES;

#[derive(Clone, Copy)]
struct Config {
    read_timeout: Duration,
}

/// The reference's router: `validate_path` only.
pub fn router(validate_path: &str, read_timeout: Duration) -> Router {
    Router::new()
        .route(validate_path, post(validate))
        .with_state(Arc::new(Config { read_timeout }))
}

async fn validate(State(config): State<Arc<Config>>, request: Request) -> Response {
    let body = match read_body(&config, request).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let review: Value = match serde_json::from_slice(&body) {
        Ok(review) => review,
        Err(e) => return plain(StatusCode::BAD_REQUEST, format!("not JSON: {e}")),
    };
    let uid = review
        .get("request")
        .and_then(|r| r.get("uid"))
        .cloned()
        .unwrap_or_else(|| Value::String(String::new()));
    let answer = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": true}
    });
    let mut response = Response::new(Body::from(answer.to_string()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The agent's reading of a review body (`webhook::read_review_body`): the same checks, in
/// the same order, with the same limit.
async fn read_body(config: &Config, request: Request) -> Result<bytes::Bytes, Response> {
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return Err(plain(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/json",
        ));
    }
    let declared_length = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared_length.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    let body = Limited::new(request.into_body(), MAX_BODY_BYTES);
    match tokio::time::timeout(config.read_timeout, body.collect()).await {
        Err(_) => Err(plain(
            StatusCode::REQUEST_TIMEOUT,
            "request body not received within the read timeout",
        )),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large()),
        Ok(Err(e)) => Err(plain(
            StatusCode::BAD_REQUEST,
            format!("cannot read request body: {e}"),
        )),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
    }
}

fn too_large() -> Response {
    plain(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body is larger than {MAX_BODY_BYTES} bytes"),
    )
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
