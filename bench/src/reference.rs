//! The reference server: parse-and-answer in the agent's own serving stack. `POST /validate`
//! reads the body with the agent's own `read_review_body` (JSON only, at most 8 MiB, within the
//! read timeout), parses it into a `serde_json::Value` and answers `allowed` with the request's
//! uid. No rules, no decision, no metrics, no log line: what the agent does beyond this is
//! what the benchmark's ratio prices.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use drift_sentinel::webhook::{plain, read_review_body};

use crate::ReadTimeout;

/// `POST /validate` (see the module).
pub async fn validate(
    State(ReadTimeout(read_timeout)): State<ReadTimeout>,
    request: Request,
) -> Response {
    let body = match read_review_body(request, read_timeout).await {
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
