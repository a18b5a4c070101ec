//! What an answer shows (reference §3 and §5): the reason and the response of a denial, values
//! truncated and counted, every answer bounded whatever the diff, and the values of a raw body
//! read only where an answer shows them.

use drift_engine::diff::Change;
use drift_engine::review::AdmissionRequest;
use drift_engine::{Context, Detail, Evaluation, evaluate};
use serde_json::{Value, json};
use std::time::SystemTime;

#[path = "common/requests.rs"]
mod requests;
use requests::{deployment, update, update_json};
#[path = "common/decisions.rs"]
mod decisions;
use decisions::{IMAGE_ONLY, decide, ops_rule};

#[test]
fn violation_message_and_response_shapes() {
    let rules = ops_rule(IMAGE_ONLY);
    let mut new = deployment("nginx:1", 5);
    new["spec"]["template"]["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({"name": "sidecar", "image": "envoy"}));
    let request = update(deployment("nginx:1", 3), new);
    let decision = decide(&rules, &request);
    assert_eq!(
        decision.denied_paths(),
        ["spec.replicas", "spec.template.spec.containers[0]"]
    );
    let message = decision.response("x").status.message;
    assert!(
        message.starts_with(
            "Drift Sentinel: immutable fields changed: spec.replicas, spec.template.spec.containers[0]; spec.replicas: 3 → 5; spec.template.spec.containers[0]: <absent> → "
        ),
        "{message}"
    );
    assert!(
        message
            .contains("rule ops/r allows changes only to: spec.template.spec.containers[*].image"),
        "{message}"
    );
    assert!(
        message.contains("drift-sentinel.k8s.io/bypass"),
        "{message}"
    );
    let review = decision
        .response("x")
        .into_review(drift_engine::ReviewVersion::V1);
    assert_eq!(review["response"]["status"]["code"], 403);
    assert_eq!(review["response"]["auditAnnotations"]["result"], "denied");
    assert_eq!(
        review["response"]["auditAnnotations"]["denied-paths"],
        "spec.replicas, spec.template.spec.containers[0]"
    );
}

#[test]
fn values_in_messages_are_truncated_and_counted() {
    let rules = ops_rule(
        "mode: warn\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\n",
    );
    let mut old = deployment("nginx:1", 3);
    let mut new = deployment("nginx:1", 3);
    for i in 0..15 {
        old["metadata"]["annotations"][format!("k{i:02}")] = json!("x".repeat(200));
        new["metadata"]["annotations"][format!("k{i:02}")] = json!("y".repeat(200));
    }
    let request = update(old, new);
    let decision = decide(&rules, &request);
    assert_eq!(decision.denied_paths().len(), 15);
    assert!(
        decision.reason().contains("and 5 more"),
        "{}",
        decision.reason()
    );
    let shown = format!("\"{}…", "x".repeat(62));
    assert!(decision.reason().contains(&shown), "{}", decision.reason());
    assert!(!decision.reason().contains(&"x".repeat(64)));
    let warning = &decision.warnings()[0];
    assert!(warning.len() <= 512, "{}", warning.len());
    assert!(warning.ends_with('…'));
    assert!(warning.starts_with("Drift Sentinel: immutable fields changed: "));
}

/// reference §5 bounded answers: 20 paths named in the reason and in `denied-paths`, values for 10,
/// a denial's status carries `reason: Forbidden`, and the response stays under 64 KiB whatever
/// the size of the diff.
#[test]
fn answers_are_bounded_and_denials_are_forbidden() {
    let rules = ops_rule(IMAGE_ONLY);
    let mut new = deployment("nginx:1", 3);
    let labels: serde_json::Map<String, Value> = (0..25)
        .map(|i| (format!("l{i:02}"), json!("x".repeat(200))))
        .collect();
    new["metadata"]["labels"] = Value::Object(labels);
    let request = update(deployment("nginx:1", 3), new);
    let evaluation = decide(&rules, &request);
    assert_eq!(
        evaluation.denied_paths().len(),
        27,
        "25 added labels, app and team removed"
    );
    let response = evaluation.response("u");
    assert_eq!(response.status.code, 403);
    assert_eq!(response.status.reason, Some("Forbidden"));
    let message = &response.status.message;
    let named: Vec<String> = evaluation.denied_paths()[..20].to_vec();
    assert!(
        message.starts_with(&format!(
            "Drift Sentinel: immutable fields changed: {} … and 7 more; ",
            named.join(", ")
        )),
        "{message}"
    );
    assert!(message.contains("; and 17 more; rule ops/r"), "{message}");
    assert_eq!(
        response.audit_annotations["denied-paths"],
        format!("{}, … (7 more)", named.join(", "))
    );

    // 200,000 changed list items: the answer stays small.
    let old = deployment("nginx:1", 3);
    let mut big = old.clone();
    big["spec"]["template"]["spec"]["containers"][0]["args"] =
        json!((0..200_000).map(|i| format!("a{i}")).collect::<Vec<_>>());
    let mut before = old.clone();
    before["spec"]["template"]["spec"]["containers"][0]["args"] =
        json!((0..200_000).map(|i| format!("b{i}")).collect::<Vec<_>>());
    let request = update(before, big);
    let evaluation = decide(&rules, &request);
    let body = evaluation
        .response("u")
        .into_review(drift_engine::ReviewVersion::V1)
        .to_string();
    assert!(body.len() <= 64 * 1024, "{} bytes", body.len());
    let allowed = decide(
        &rules,
        &update(deployment("nginx:1", 3), deployment("nginx:2", 3)),
    )
    .response("u");
    assert_eq!(allowed.status.reason, None);
}

/// A client-side `kubectl apply` rewrites the `last-applied-configuration` annotation on every
/// edit: a long string of escaped JSON on each side. The agent's raw parse keeps such values
/// as the body's text, read only when an answer shows them, and the evaluation is the same as
/// over parsed documents.
#[test]
fn values_of_a_body_are_read_only_when_shown() {
    const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
    let spec = IMAGE_ONLY.replace(
        "mutable: [",
        &format!("mutable: [\"metadata.annotations['{LAST_APPLIED}']\", "),
    );
    let rules = ops_rule(&spec);
    assert!(rules.invalid().is_empty(), "{:?}", rules.invalid());
    let applied = |image: &str, replicas: i64| {
        drift_testkit::objects::with_last_applied(deployment(image, replicas))
    };
    for (name, new, allowed) in [
        ("image edit", applied("web:2", 3), true),
        ("replicas edit", applied("web:1", 5), false),
    ] {
        let request = update_json(applied("web:1", 3), new);
        let parsed_request: AdmissionRequest = serde_json::from_value(request.clone()).expect(name);
        let body = json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": request,
        })
        .to_string();
        let raw = drift_engine::review::parse_review_raw(body.as_bytes()).expect(name);
        let raw_request = raw.request.expect(name);
        let context = Context::at(SystemTime::UNIX_EPOCH);
        let from_text = evaluate(&rules, &raw_request, &context, Detail::Verdict);
        let from_values = decide(&rules, &parsed_request);
        assert_eq!(from_text.allowed(), allowed, "{name}");
        fn judged(e: &Evaluation<'_>) -> Vec<(String, Change<'static>, bool)> {
            e.changes()
                .iter()
                .map(|c| (c.path.clone(), c.change.clone().into_owned(), c.mutable))
                .collect()
        }
        assert_eq!(judged(&from_text), judged(&from_values), "{name}");
        assert_eq!(
            from_text
                .response("u")
                .encode_review(drift_engine::ReviewVersion::V1),
            from_values
                .response("u")
                .encode_review(drift_engine::ReviewVersion::V1),
            "{name}"
        );
        let annotation = from_text
            .changes()
            .iter()
            .find(|c| c.path.contains(LAST_APPLIED))
            .unwrap_or_else(|| panic!("{name}: the annotation's change"));
        assert!(annotation.mutable, "{name}");
        // Kept as the body's text, not decoded.
        let Some(drift_engine::json::LazyValue::Text(text)) = &annotation.change.new else {
            panic!("{name}: {:?}", annotation.change.new);
        };
        assert!(text.starts_with('"') && text.contains("\\\""), "{name}");
        assert_eq!(
            annotation.change.new_value().as_deref(),
            Some(
                &parsed_request.object.as_ref().expect(name)["metadata"]["annotations"]
                    [LAST_APPLIED]
            ),
            "{name}"
        );
    }
}
