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

/// Bounds (reference §5): a malformed request's reason quoted a wrong-typed value whole (serde's
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

/// Bounds (reference §5): a body that is not an AdmissionReview is answered with a plain 400 that
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

/// rule_compile (fuzz, this stop): a rule whose YAML has lone carriage returns was reported at
/// a line past the end of the text — serde_yaml counts a lone `\r` as a line break, while every
/// other place in a rule error (and an editor) counts `\n` only — e.g. "data.spec line 35" of a
/// 20-line spec. The inputs are the two files the fuzzer left, kept byte for byte.
#[test]
fn yaml_errors_are_placed_by_newlines_only() {
    use drift_engine::rule::compile;
    use drift_engine::{RuleId, RuleSource, SpecText};

    let found =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_found/rule_compile");
    let mut inputs: Vec<(String, String)> = std::fs::read_dir(&found)
        .expect("the fuzz inputs")
        .map(|entry| {
            let path = entry.expect("an entry").path();
            let text = std::fs::read_to_string(&path).expect("UTF-8 input");
            (path.display().to_string(), text)
        })
        .collect();
    // And a small one written out: a lone `\r` ends the second line, `\n`s end the others.
    inputs.push((
        "written".into(),
        "mode: enforce\nnamespaces: ['*']\rselectors: [{apiGroup: apps, kind: Deployment}]\nmutabel: [x]\n".into(),
    ));
    assert!(inputs.len() >= 3, "{inputs:?}");
    for (name, text) in inputs {
        let source = RuleSource {
            id: RuleId {
                namespace: "fuzz".into(),
                name: "rule".into(),
            },
            spec: SpecText::Yaml(text.clone()),
            origin: None,
        };
        let error = compile(&source).expect_err(&name);
        let line = error.line.expect("a line");
        assert!(
            (1..=text.lines().count() + 1).contains(&line),
            "{name}: line {line} of {} lines: {error}",
            text.lines().count()
        );
        if name == "written" {
            // `mutabel` starts the third `\n`-line.
            assert_eq!((error.line, error.column), (Some(3), Some(1)), "{error}");
        }
    }
}

/// review (issue 23 seeds): a review whose objects nest 10,000 levels is decided by the raw
/// parse while the whole parse's documents stop at 128 levels; the bounds check compared the
/// two and failed. Past the documents' depth only the agent's answers are compared with the
/// bounds (and one level past 10,000 both refuse alike).
#[test]
fn reviews_deeper_than_documents_are_checked_on_the_agents_answers() {
    for (depth, maps) in [
        (10_000, false),
        (5_000, true),
        (200, false),
        (10_001, false),
    ] {
        check(drift_testkit::objects::deep_review("deep", depth, maps).as_bytes());
    }
}

/// rule_compile (issue 23 seeds): a rule nested 10,000 YAML flow levels timed out (libyaml
/// looks at every open level for every token, twice: the nesting check, then serde_yaml).
/// YAML is now read to 128 levels, serde_yaml's own limit, and refused past it at once.
#[test]
fn deep_rule_yaml_is_refused_at_once() {
    use drift_engine::{RuleId, RuleSource, SpecText};
    let spec = format!(
        "mode: enforce\nnamespaces: ['*']\nselectors: [{{apiGroup: apps, kind: Deployment}}]\nmutable: {}spec.replicas{}\n",
        "[".repeat(9_999),
        "]".repeat(9_999)
    );
    let source = RuleSource {
        id: RuleId {
            namespace: "team-a".into(),
            name: "deep".into(),
        },
        spec: SpecText::Yaml(spec),
        origin: None,
    };
    let started = std::time::Instant::now();
    let error = drift_engine::rule::compile(&source).expect_err("refused");
    assert!(
        error.to_string().contains("nested deeper than 128 levels"),
        "{error}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
}

/// review (issue 40's seeds): numbers beyond a double (`1e9223372036854775807` →
/// `1e9223372036854775808`, an exponent of 3,000 digits) are compared exactly by the agent's raw
/// parse, which denies the change; the whole parse's documents cannot hold them (it answers
/// "number out of range"), so the bounds check compares the two parses only where documents
/// reach, as it does past 128 levels.
#[test]
fn numbers_beyond_a_double_are_judged_exactly() {
    let body = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fuzz/seeds/review/huge-exponents.json"
    ))
    .unwrap();
    check(&body);
    let raw = drift_engine::review::parse_review_raw(&body).expect("a review");
    let answers = admission_bounds::answers(&admission_bounds::rules(), raw);
    let message = answers[0]["response"]["status"]["message"]
        .as_str()
        .unwrap();
    assert!(message.contains("spec.replicas"), "{message}");
}
