//! Regression tests for what fuzzing and the bounds checks of issue 13 found (fuzz/, and
//! tests/common/admission_bounds.rs). Each test names the target and the finding; they run on
//! stable with the normal test suite.

#[path = "common/admission_bounds.rs"]
mod admission_bounds;

use drift_engine::review::parse_review;
use serde_json::json;

fn check(body: &[u8]) {
    admission_bounds::check_body(&admission_bounds::rules(), body);
}

/// A string of `n` bytes.
fn big(n: usize) -> String {
    "x".repeat(n)
}

/// Bounds (SPEC §5): a malformed request's reason quoted a wrong-typed value whole (serde's
/// "invalid type: string \"…\"" names the string), so a 100 KiB `kind` string gave a 100 KiB
/// answer.
#[test]
fn malformed_request_reason_is_bounded() {
    for request in [
        json!({"uid": "u", "operation": "UPDATE", "kind": big(100_000)}),
        json!({"uid": "u", "operation": big(100_000).len(), "kind": {"kind": "Pod"}}),
        json!({"uid": "u", "operation": "UPDATE", "userInfo": {"groups": big(100_000)}}),
        json!({"uid": "u", "operation": "UPDATE", "dryRun": big(100_000)}),
    ] {
        let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
        let body = body.to_string();
        let parsed = parse_review(body.as_bytes()).expect("a review");
        assert!(parsed.request.is_err());
        check(body.as_bytes());
    }
}

/// Bounds (SPEC §5): a body that is not an AdmissionReview is answered with a plain 400 that
/// quoted its `kind` or `apiVersion` whole.
#[test]
fn not_a_review_message_is_bounded() {
    for body in [
        json!({"apiVersion": "admission.k8s.io/v1", "kind": big(100_000)}),
        json!({"apiVersion": big(100_000), "kind": "AdmissionReview"}),
    ] {
        check(body.to_string().as_bytes());
    }
}

/// Envelopes the API server never sends but a client could are answered within the bounds and
/// alike by the raw and the whole evaluation: a `null` request, keys in any order, repeated keys
/// in the envelope (refused as malformed) and in the objects (the last one counts).
#[test]
fn unusual_envelopes_are_answered_as_the_whole_parse_answers() {
    let request = r#"{"uid":"u","kind":{"group":"apps","version":"v1","kind":"Deployment"},"resource":{"group":"apps","version":"v1","resource":"deployments"},"name":"x","namespace":"prod-eu","operation":"UPDATE","userInfo":{"username":"alice"},"object":{"spec":{"replicas":2,"replicas":3}},"oldObject":{"spec":{"replicas":3}}}"#;
    for body in [
        r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}"#
            .to_owned(),
        format!(
            r#"{{"request":{request},"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}}"#
        ),
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"Pod","kind":"AdmissionReview","request":{request}}}"#
        ),
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null,"request":{request}}}"#
        ),
    ] {
        check(body.as_bytes());
    }
}
