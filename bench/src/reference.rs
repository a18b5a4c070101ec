//! The reference server: parse-and-answer in the agent's own serving stack. `POST /validate`
//! reads the body with the agent's own `read_review_body` (JSON only, at most 8 MiB, within the
//! read timeout; see [`crate::serve_reference`]), parses it into a `serde_json::Value` and
//! answers `allowed` with the request's uid. No rules, no decision, no metrics, no log line:
//! what the agent does beyond this is what the benchmark's ratio prices.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use drift_sentinel::webhook::plain;

/// The answer to a review `body` (see the module).
pub fn answer(body: &[u8]) -> Response {
    let review: Value = match serde_json::from_slice(body) {
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
