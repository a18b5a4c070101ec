//! The webhook's answers that carry no decision of their own — plain text, a JSON body — and
//! the count of requests answered without a decision. Shared by the listener's handlers and
//! the admission path.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use crate::state::Shared;

/// A plain-text answer (the webhook's answer to what is not an AdmissionReview at all).
pub fn plain(status: StatusCode, message: impl Into<String>) -> Response {
    let mut text = message.into();
    text.push('\n');
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text,
    )
        .into_response()
}

/// A JSON body (an AdmissionReview) with its content type.
pub(super) fn json(body: Bytes) -> Response {
    let mut response = Response::new(Body::from(body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A request answered without a decision (not a review, malformed, internal failure).
pub(super) fn count_error(shared: &Shared) {
    shared.metrics.admission_requests.inc(["", "", "error"]);
}
