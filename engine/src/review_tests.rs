//! Reading AdmissionReviews: both versions, what is not a review, malformed requests, and the
//! one-pass read of the agent's hot path against serde_json's.

use super::*;

#[test]
fn parses_v1_and_v1beta1() {
    for (api, version) in [
        ("admission.k8s.io/v1", ReviewVersion::V1),
        ("admission.k8s.io/v1beta1", ReviewVersion::V1Beta1),
    ] {
        let body = serde_json::json!({
            "apiVersion": api, "kind": "AdmissionReview",
            "request": {"uid": "u1", "operation": "UPDATE",
                "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                "userInfo": {"username": "alice", "groups": ["g"]},
                "object": {"a": 1}, "oldObject": {"a": 2}, "dryRun": true}
        });
        let parsed = parse_review(body.to_string().as_bytes()).unwrap();
        assert_eq!(parsed.version, version);
        let request = parsed.request.unwrap();
        assert_eq!(request.uid, "u1");
        assert_eq!(request.kind.kind, "Deployment");
        assert_eq!(request.user_info.username, "alice");
        assert_eq!(request.dry_run, Some(true));
    }
}

#[test]
fn rejects_what_is_not_a_review() {
    let cases: &[(&str, &str)] = &[
        ("not json", "not valid JSON"),
        ("[1]", "expected a JSON object"),
        (r#"{"kind": "Pod"}"#, "kind is \"Pod\""),
        (
            r#"{"kind": "AdmissionReview", "apiVersion": "v2"}"#,
            "unsupported",
        ),
    ];
    for (body, fragment) in cases {
        let err = parse_review(body.as_bytes()).expect_err(body);
        assert!(err.0.contains(fragment), "{body}: {err}");
    }
}

#[test]
fn missing_or_malformed_request_is_reported_inside_the_review() {
    let parsed =
        parse_review(br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}"#).unwrap();
    assert_eq!(
        parsed.request.unwrap_err(),
        "AdmissionReview has no request"
    );
    let parsed = parse_review(
        br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"x","operation":7}}"#,
    )
    .unwrap();
    assert_eq!(parsed.uid, "x");
    assert!(parsed.request.unwrap_err().contains("malformed"));
}

/// The one-pass read of a well-formed review gives exactly what reading it in parts gives.
#[test]
fn one_pass_and_in_parts_agree() {
    let bodies = [
        r#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u","operation":"UPDATE","kind":{"group":"apps","version":"v1","kind":"Deployment"},"object":{"a":[1,{"b":"]"}]},"oldObject":{"a":[2]},"dryRun":false}}"#,
        r#" { "request" : { "uid" : "u2" , "operation" : "DELETE" } , "apiVersion" : "admission.k8s.io/v1beta1" , "kind" : "AdmissionReview" } "#,
        r#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u3","operation":"UPDATE","object":null,"oldObject":{}},"extra":[1]}"#,
    ];
    for body in bodies {
        let one_pass = parse_review_raw(body.as_bytes()).expect(body);
        let in_parts = parse_review_in_parts(body.as_bytes()).expect(body);
        assert_eq!(one_pass.version, in_parts.version, "{body}");
        assert_eq!(one_pass.uid, in_parts.uid, "{body}");
        assert_eq!(one_pass.request, in_parts.request, "{body}");
        assert!(one_pass.request.is_ok(), "{body}");
    }
}

#[test]
fn the_uid_is_read_without_the_rest() {
    let body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-42","object":{"metadata":{"uid":"not-this"}}}}"#;
    assert_eq!(peek_uid(body).as_deref(), Some("u-42"));
    // Not even the rest of the body needs to be valid.
    assert_eq!(
        peek_uid(br#"{"kind":"AdmissionReview","request":{"uid":"u-1","object":{"#).as_deref(),
        Some("u-1")
    );
    assert_eq!(peek_uid(br#"{"request":{"kind":{}}}"#), None);
    assert_eq!(peek_uid(b"not json"), None);
    assert_eq!(peek_uid(br#"{"request":{"uid":7}}"#), None);
}

/// A uid is echoed whole or not at all: one too long to answer with is refused (both reads,
/// either version, a malformed request's too), and never peeked.
#[test]
fn a_uid_longer_than_the_limit_is_refused() {
    let at_limit = "u".repeat(MAX_UID_BYTES);
    let past = "u".repeat(MAX_UID_BYTES + 1);
    let body = |uid: &str, operation: &str| {
        format!(
            r#"{{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{{"uid":"{uid}","operation":{operation}}}}}"#
        )
    };
    let answered = body(&at_limit, "\"DELETE\"");
    assert_eq!(parse_review_raw(answered.as_bytes()).unwrap().uid, at_limit);
    assert_eq!(
        peek_uid(body(&at_limit, "7").as_bytes()),
        Some(at_limit.clone())
    );
    for operation in ["\"DELETE\"", "7"] {
        let refused = parse_review(body(&past, operation).as_bytes()).unwrap_err();
        assert_eq!(
            refused.0,
            format!(
                "request.uid is {} bytes long; at most 128 are answered (the API server sends a 36-character UUID)",
                MAX_UID_BYTES + 1
            )
        );
        assert_eq!(peek_uid(body(&past, operation).as_bytes()), None);
    }
    // 2 MiB of uid: refused with a message of its own size, not the uid's.
    let huge = body(&"u".repeat(2 << 20), "\"UPDATE\"");
    assert!(parse_review_raw(huge.as_bytes()).unwrap_err().0.len() < 200);
}

#[test]
fn response_shape() {
    let review = AdmissionResponse::bad_request("u", "nope").into_review(ReviewVersion::V1Beta1);
    assert_eq!(
        review,
        serde_json::json!({
            "apiVersion": "admission.k8s.io/v1beta1",
            "kind": "AdmissionReview",
            "response": {"uid": "u", "allowed": false, "status": {"status": "Failure", "code": 400, "reason": "BadRequest", "message": "nope"}}
        })
    );
}

/// Bodies of every shape a review's read must settle.
fn bodies() -> Vec<String> {
    let review = |request: &str| {
        format!(
            r#"{{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{request}}}"#
        )
    };
    let objects = r#""object":{"a":[1,{"b":"]"}],"c":{}},"oldObject":{"a":[2]}"#;
    vec![
        review(&format!(r#"{{"uid":"u","operation":"UPDATE",{objects}}}"#)),
        review(&format!(r#"{{"uid":"u","operation":"UPDATE",{objects}}}"#)) + "\n",
        format!(
            " \n{}\t",
            review(&format!(r#"{{"uid":"u","operation":"UPDATE",{objects}}}"#))
        ),
        review(r#"{"uid":"u","operation":"UPDATE","object":null,"oldObject":{}}"#),
        review(r#"{"uid":"u","operation":"CREATE","object":{"x":1}}"#),
        review(r#"{"uid":"u","operation":"UPDATE","object":"text","oldObject":[1]}"#),
        review(r#"{"uid":"u","operation":"UPDATE","object":{"a":1},"object":{"a":2}}"#),
        review(r#"{"uid":"u","operation":"UPDATE","obj\u0065ct":{"a":1}}"#),
        review(r#"{"uid":"u","uid":"v","operation":"UPDATE"}"#),
        review(r#"{"uid":"u","operation":7,"object":{}}"#),
        review(r#"{"operation":"UPDATE","object":{}}"#),
        review(r#""not a request""#),
        review("null"),
        format!(
            r#"{{"request":{{"uid":"u","operation":"UPDATE"}},"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1beta1","extra":[{{}}]}}"#
        ),
        format!(
            r#"{{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{{"uid":"u","operation":"UPDATE"}},"request":{{"uid":"v","operation":"UPDATE"}}}}"#
        ),
        format!(
            r#"{{"kind":"Pod","apiVersion":"admission.k8s.io/v1","request":{{"uid":"u","operation":"UPDATE"}}}}"#
        ),
        format!(
            r#"{{"kind":"AdmissionReview","apiVersion":"v9","request":{{"uid":"u","operation":"UPDATE"}}}}"#
        ),
        format!(
            r#"{{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{{"uid":"u","operation":"UPDATE","userInfo":{{"username":"a","groups":["g"],"extra":{{"k":["v"]}}}},"subResource":null,"dryRun":null}}}}"#
        ),
    ]
}

/// What a read gave, to compare two reads (the objects by their text).
fn settled(read: Result<ParsedReview<RawDocument<'_>>, NotAReview>) -> String {
    match read {
        Ok(parsed) => {
            let request = parsed.request.map(|r| {
                let text = |d: &Option<RawDocument<'_>>| d.as_ref().map(|d| d.text().to_owned());
                (text(&r.object), text(&r.old_object), r.without_objects())
            });
            format!("{:?} {:?} {request:?}", parsed.version, parsed.uid)
        }
        Err(e) => format!("not a review: {e}"),
    }
}

/// A held review reads as the review it was read from: the same request, the objects the same
/// text.
#[test]
fn a_held_review_reads_as_the_review_it_holds() {
    for body in bodies() {
        let want = settled(parse_review_raw(body.as_bytes()));
        if let Ok(parsed) = parse_review_raw(body.as_bytes()) {
            assert_eq!(settled(Ok(parsed.hold().review())), want, "{body}");
        }
    }
}

proptest::proptest! {
    /// Reviews with any objects, white space and extra keys, whole or cut short: a whole one is
    /// read, and held reads as it was read.
    #[test]
    fn any_review_is_read_and_held_alike(
        object in proptest::option::of(any_value()),
        old_object in proptest::option::of(any_value()),
        extra in proptest::option::of(any_value()),
        pretty in proptest::bool::ANY,
        cut in proptest::option::of(0usize..4096),
    ) {
        let mut request = serde_json::json!({"uid": "u", "operation": "UPDATE"});
        if let Some(object) = object { request["object"] = object; }
        if let Some(old_object) = old_object { request["oldObject"] = old_object; }
        let mut review = serde_json::json!({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request});
        if let Some(extra) = extra { review["extra"] = extra; }
        let mut body = if pretty { serde_json::to_string_pretty(&review).unwrap() } else { review.to_string() };
        if let Some(cut) = cut {
            let mut at = cut % (body.len() + 1);
            while !body.is_char_boundary(at) { at -= 1; }
            body.truncate(at);
        }
        match parse_review_raw(body.as_bytes()) {
            Ok(parsed) => {
                let want = settled(parse_review_raw(body.as_bytes()));
                proptest::prop_assert_eq!(settled(Ok(parsed.hold().review())), want);
            }
            Err(e) => proptest::prop_assert!(cut.is_some(), "a whole review is read: {} {}", body, e),
        }
    }
}

fn any_value() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        "[a-c\"\\\\é ]{0,4}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(("[a-c]{0,2}", inner), 0..4)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

#[test]
fn an_encoded_review_is_the_text_of_the_review_document() {
    let mut denied =
        AdmissionResponse::bad_request("u-1", "spec.replicas: \"quoted\" and ünïcode\n");
    denied.warnings = vec!["a warning".into(), "another".into()];
    denied
        .audit_annotations
        .insert("drift-sentinel.k8s.io/changed".into(), "spec".into());
    let responses = [
        denied,
        AdmissionResponse::internal_error("u-2", "no decision within the write timeout"),
    ];
    for response in responses {
        for version in [ReviewVersion::V1, ReviewVersion::V1Beta1] {
            let encoded = response.encode_review(version);
            let document = response.clone().into_review(version).to_string();
            assert_eq!(String::from_utf8(encoded).unwrap(), document);
        }
    }
}
