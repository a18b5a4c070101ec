//! The admission checks shared by the fuzz target `review` (fuzz/, nightly) and the stable
//! property and regression tests (engine/tests/review_props.rs, engine/tests/fuzz_regressions.rs):
//! a body goes through what the agent does with it (`parse_review_raw`, `evaluate`, `response`,
//! the encoded AdmissionReview) against one fixed, realistic rule set, and the answer must keep
//! the bounds of reference §5 and be the answer `parse_review` (the objects parsed whole) gives. Any
//! panic, or a failed assertion, is a finding.
//!
//! Included by path (`#[path = …] mod admission_bounds;`), so it uses only `drift_engine` and
//! `serde_json`.

#![allow(dead_code)]

use drift_engine::json::{Document, Node};
use drift_engine::message::{
    MAX_ANNOTATED_PATHS, MAX_PATHS_NAMED, MAX_WARNING_BYTES, VIOLATION_PREFIX,
};
use drift_engine::review::{
    AdmissionRequest, AdmissionResponse, ParsedReview, parse_review, parse_review_raw, peek_uid,
};
use drift_engine::{Context, Detail, RuleId, RuleSet, RuleSource, SpecText, evaluate};
use serde_json::{Map, Value};

/// The whole response body (reference §5), the echoed `uid` included: a uid longer than 128 bytes
/// is refused, not echoed (the API server's are 36).
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The fixed rule set: every mode, globs, labels, users, exempt users, include/exclude,
/// mutable patterns with wildcards and quoted keys, a custom bypass, both tiers' priorities.
pub const RULES: &[(&str, &str)] = &[
    (
        "strict",
        r#"
mode: enforce
priority: 300
namespaces: ["prod-*"]
selectors:
  - {apiGroup: apps, kind: Deployment}
  - {apiGroup: apps, kind: StatefulSet}
mutable:
  - "metadata.annotations['deployment.kubernetes.io/revision']"
  - "spec.template.metadata.annotations['kubectl.kubernetes.io/restartedAt']"
"#,
    ),
    (
        "relaxed",
        r#"
mode: warn
priority: 100
namespaces: ["staging-*", "dev", "mode-*"]
selectors:
  - {apiGroup: apps, kind: "*"}
  - {apiGroup: argoproj.io, kind: Rollout}
exemptUsers: ["system:serviceaccount:flux-system:*"]
mutable:
  - spec.replicas
  - "spec.template.spec.containers[*].image"
  - "spec.template.spec.containers[*].resources"
  - "spec.template.spec.containers[*].env"
  - "spec.template.metadata.annotations"
  - metadata.annotations
  - metadata.labels
"#,
    ),
    (
        "labelled",
        r#"
mode: dry-run
priority: 50
namespaces: ["*"]
selectors:
  - {kind: ConfigMap}
  - {apiGroup: "*", kind: "*"}
labels: ["team=payments", "tier"]
users: ["alice", "bob"]
include: ["spec", "data", "metadata.labels"]
exclude: ["spec.template.spec.containers[0].env", "data['ignored.key']"]
mutable: ["spec.replicas", "data.*", "spec.ports[*]"]
bypass: example.com/skip
"#,
    ),
    (
        "catch-all",
        r#"
mode: enforce
priority: 0
namespaces: ["*"]
selectors:
  - {apiGroup: "*", kind: "*"}
mutable: ["spec.replicas", "metadata.*", "spec.template.spec.containers[*].image"]
"#,
    ),
    (
        "off",
        r#"
mode: "off"
priority: 1000
namespaces: ["kube-*"]
selectors:
  - {apiGroup: "*", kind: "*"}
mutable: []
"#,
    ),
];

/// The fixed rule set, compiled (every rule valid).
pub fn rules() -> RuleSet {
    let set = RuleSet::build(RULES.iter().map(|(name, spec)| RuleSource {
        id: RuleId {
            namespace: "drift-sentinel".into(),
            name: (*name).into(),
        },
        spec: SpecText::Yaml((*spec).into()),
        origin: None,
    }));
    assert!(set.invalid().is_empty(), "{:?}", set.invalid());
    set
}

/// The namespace mode annotation the fixed cluster has: `mode-<m>` namespaces carry `<m>`
/// (so also invalid values).
fn namespace_mode(namespace: &str) -> Option<&str> {
    namespace.strip_prefix("mode-")
}

/// Decides `body` as the agent does and checks the answer: the agent's raw parse and the whole
/// parse must give the same answers, and each must keep the bounds. Panics on a broken bound.
pub fn check_body(rules: &RuleSet, body: &[u8]) {
    let peeked = peek_uid(body);
    let (parsed, raw) = match (parse_review(body), parse_review_raw(body)) {
        (Err(not_a_review), Err(raw_not_a_review)) => {
            // Answered with HTTP 400 and this plain message.
            let text = not_a_review.to_string();
            assert!(!text.is_empty());
            assert!(
                text.len() <= MAX_BODY_BYTES,
                "plain 400 message of {} bytes",
                text.len()
            );
            assert!(raw_not_a_review.to_string().len() <= MAX_BODY_BYTES);
            return;
        }
        (Ok(parsed), Ok(raw)) => (parsed, raw),
        (parsed, raw) => panic!(
            "the parsers disagree on whether this is a review: whole {:?}, raw {:?}",
            parsed.map(|p| p.uid),
            raw.map(|r| r.uid)
        ),
    };
    if let Some(peeked) = &peeked {
        // The uid answered on a timeout is the one the decision would have answered with.
        if parsed.request.is_ok() {
            assert_eq!(peeked, &parsed.uid, "peek_uid disagrees with parse_review");
        }
    }
    // The whole parse builds serde_json documents, which stop at 128 levels (on purpose: a
    // document is dropped recursively); the agent's raw parse decides up to 10,000 levels
    // (reference §5). Deeper than the documents go, only the agent's answers are checked.
    // Nor do they hold a number beyond a double (`1e9223372036854775808`): the whole parse
    // refuses it, the agent compares it as text, exactly (reference §4).
    if matches!(&parsed.request, Err(reason) if reason.contains("recursion limit exceeded") || reason.contains("number out of range"))
    {
        answers(rules, raw);
        return;
    }
    let whole = answers(rules, parsed);
    let agent = answers(rules, raw);
    assert_eq!(
        whole.iter().map(without_position).collect::<Vec<_>>(),
        agent.iter().map(without_position).collect::<Vec<_>>(),
        "the raw parse answers differently from the whole parse"
    );
}

/// An answer without the ` at line L column C` serde adds when it reads text (the raw parse
/// reads the request's text, the whole parse a document): the same error either way.
fn without_position(review: &Value) -> Value {
    let mut review = review.clone();
    if let Some(Value::String(message)) = review.pointer_mut("/response/status/message")
        && let Some(at) = message.rfind(" at line ")
        && let Some((line, column)) = message[at + " at line ".len()..].split_once(" column ")
        && line.bytes().all(|b| b.is_ascii_digit())
        && column.bytes().all(|b| b.is_ascii_digit())
    {
        message.truncate(at);
    }
    review
}

/// The encoded answers to a parsed review, one per [`Detail`], each checked against the bounds.
pub fn answers<O: Document>(rules: &RuleSet, parsed: ParsedReview<O>) -> Vec<Value> {
    let request = match parsed.request {
        Err(reason) => {
            let review =
                AdmissionResponse::bad_request(&parsed.uid, reason).into_review(parsed.version);
            check_encoded(&review, &parsed.uid, false);
            return vec![review];
        }
        Ok(request) => request,
    };
    let labels = object_labels(&request);
    let context = Context {
        namespace_mode: namespace_mode(request.namespace()),
        parent_labels: labels.as_ref(),
        now: std::time::SystemTime::UNIX_EPOCH,
    };
    let mut reviews = Vec::new();
    for detail in [Detail::Verdict, Detail::Full] {
        let evaluation = evaluate(rules, &request, &context, detail);
        let response = evaluation.response(&request.uid);
        assert_eq!(response.allowed, evaluation.allowed());
        assert_eq!(response.allowed, response.status.code == 200);
        assert_eq!(response.uid, request.uid);
        for warning in &response.warnings {
            assert!(
                warning.len() <= MAX_WARNING_BYTES,
                "warning of {} bytes",
                warning.len()
            );
        }
        if let Some(violation) = evaluation.violation() {
            let denied = evaluation.denied_paths();
            assert!(!denied.is_empty(), "a violation names no path");
            assert!(violation.denied_count >= denied.len());
            check_named_paths(&evaluation.reason(), denied, violation.denied_count);
            let annotation = evaluation.denied_paths_annotation();
            check_annotation(&annotation, denied, violation.denied_count);
            // Rendered once, the same every time it is shown.
            assert_eq!(evaluation.reason(), evaluation.reason());
        }
        let _ = evaluation.status_message();
        let review = response.into_review(parsed.version);
        check_encoded(&review, &request.uid, true);
        reviews.push(review);
    }
    reviews
}

/// The labels of the request's new object, as the fixed cluster's parent labels.
fn object_labels<O: Document>(request: &AdmissionRequest<O>) -> Option<Map<String, Value>> {
    let object = request.object.as_ref()?.node().to_value();
    object.get("metadata")?.get("labels")?.as_object().cloned()
}

/// The reason names at most [`MAX_PATHS_NAMED`] paths, then `… and N more`.
fn check_named_paths(reason: &str, denied: &[String], denied_count: usize) {
    let Some(rest) = reason.strip_prefix(VIOLATION_PREFIX) else {
        panic!("violation reason without its prefix: {reason:?}");
    };
    let named = &denied[..denied.len().min(MAX_PATHS_NAMED)];
    let mut expected = named.join(", ");
    if denied_count > named.len() {
        expected.push_str(&format!(" … and {} more", denied_count - named.len()));
    }
    // The reason is cut to a fixed size (ending in `…`): what is left must be the head.
    if !rest.starts_with(&expected) {
        let kept = rest.strip_suffix('…').unwrap_or_else(|| {
            panic!(
                "the reason does not name exactly the first {} of {} denied paths: {reason:?}",
                named.len(),
                denied.len()
            )
        });
        assert!(
            expected.starts_with(kept),
            "the cut reason names other paths than the first denied ones: {reason:?}"
        );
    }
}

/// The `denied-paths` annotation holds at most [`MAX_ANNOTATED_PATHS`] paths, then `, … (N more)`.
fn check_annotation(annotation: &str, denied: &[String], denied_count: usize) {
    let named = &denied[..denied.len().min(MAX_ANNOTATED_PATHS)];
    let mut expected = named.join(", ");
    if denied_count > named.len() {
        expected.push_str(&format!(", … ({} more)", denied_count - named.len()));
    }
    if annotation != expected {
        let kept = annotation
            .strip_suffix('…')
            .unwrap_or_else(|| panic!("denied-paths {annotation:?}, expected {expected:?}"));
        assert!(expected.starts_with(kept), "denied-paths {annotation:?}");
    }
}

/// The encoded AdmissionReview: at most 64 KiB, valid JSON, uid echoed.
fn check_encoded(review: &Value, uid: &str, _decided: bool) {
    let body = review.to_string();
    assert!(
        uid.len() <= drift_engine::review::MAX_UID_BYTES,
        "uid of {} bytes",
        uid.len()
    );
    assert!(
        body.len() <= MAX_BODY_BYTES,
        "response body of {} bytes (uid {} bytes): over 64 KiB",
        body.len(),
        uid.len()
    );
    let back: Value = serde_json::from_str(&body).expect("the answer is JSON");
    assert_eq!(back["response"]["uid"].as_str(), Some(uid));
    assert_eq!(back["kind"], "AdmissionReview");
}

/// Builds a body from two values and a selector byte: an UPDATE review of a kind and namespace
/// chosen by `selector`, with `old` and `new` as the objects. Lets a fuzzer or a generator reach
/// the diff with any values (the fuzz target uses it for inputs that are not JSON documents).
pub fn update_body(selector: u8, old: Value, new: Value) -> Vec<u8> {
    const KINDS: &[(&str, &str, &str)] = &[
        ("apps", "Deployment", "deployments"),
        ("apps", "StatefulSet", "statefulsets"),
        ("", "ConfigMap", "configmaps"),
        ("argoproj.io", "Rollout", "rollouts"),
        ("", "Service", "services"),
    ];
    const NAMESPACES: &[&str] = &[
        "prod-eu",
        "staging-1",
        "dev",
        "mode-warn",
        "mode-off",
        "mode-dry-run",
        "mode-bogus",
        "kube-system",
        "",
        "other",
    ];
    const USERS: &[&str] = &[
        "alice",
        "carol",
        "system:serviceaccount:flux-system:kustomize",
    ];
    let (group, kind, resource) = KINDS[usize::from(selector) % KINDS.len()];
    let namespace = NAMESPACES[usize::from(selector / 5) % NAMESPACES.len()];
    let user = USERS[usize::from(selector / 50) % USERS.len()];
    let sub_resource = if selector >= 250 { Some("scale") } else { None };
    let mut request = serde_json::json!({
        "uid": format!("fuzz-{selector}"),
        "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": resource},
        "name": "x",
        "namespace": namespace,
        "operation": "UPDATE",
        "userInfo": {"username": user, "groups": ["system:authenticated"]},
        "object": new,
        "oldObject": old,
        "dryRun": selector.is_multiple_of(2),
    });
    if let Some(sub) = sub_resource {
        request["subResource"] = Value::from(sub);
    }
    serde_json::json!({
        "apiVersion": if selector.is_multiple_of(3) { "admission.k8s.io/v1beta1" } else { "admission.k8s.io/v1" },
        "kind": "AdmissionReview",
        "request": request,
    })
    .to_string()
    .into_bytes()
}

/// The fuzz input as a body: JSON documents (`{…`) are bodies as they are; anything else is
/// `selector byte, old JSON, 0xff, new JSON` (each side any JSON, a non-JSON side being the
/// string of its bytes) wrapped by [`update_body`].
pub fn body_of(data: &[u8]) -> Vec<u8> {
    match data.split_first() {
        None => Vec::new(),
        Some((b'{', _)) => data.to_vec(),
        Some((&selector, rest)) => {
            let (old, new) = match rest.iter().position(|&b| b == 0xff) {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => (rest, &rest[..0]),
            };
            let value = |bytes: &[u8]| {
                serde_json::from_slice::<Value>(bytes)
                    .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
            };
            update_body(selector, value(old), value(new))
        }
    }
}
