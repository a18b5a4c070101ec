use drift_api::status::RuleSourceKind;
use drift_engine::RuleSet;
use serde_json::json;

use super::*;
use crate::state::Snapshot;

/// A warn-mode rule on Deployments: a changed `spec.replicas` is allowed and makes a finding.
fn warn_rules() -> RuleSet {
    let rules = RuleSet::build([drift_engine::RuleSource {
        id: drift_engine::RuleId {
            namespace: "ops".into(),
            name: "web".into(),
        },
        spec: drift_engine::SpecText::Yaml(
            "mode: warn\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\n"
                .into(),
        ),
        origin: None,
    }]);
    assert!(rules.invalid().is_empty(), "{:?}", rules.invalid());
    rules
}

fn deployment(replicas: u32) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "uid": "u-1"},
        "spec": {"replicas": replicas}})
}

/// c9ccb3a: the decision thread gives the answer first and only then makes the Events'
/// findings (97cdbe1 keeps the export record before the answer). Through the real path: the
/// findings go to a real [`crate::events::EventSink`], whose queue is looked at the moment the
/// answer is given (empty) and after the decision (the warned edit's one finding).
#[test]
fn the_events_findings_are_made_after_the_answer_is_given() {
    let mut snapshot = Snapshot::empty(RuleSourceKind::BuiltIn);
    snapshot.rules = warn_rules();
    let metrics = crate::metrics::Metrics::new().unwrap();
    let (sink, mut writer_side) = crate::events::EventSink::unwritten(
        crate::events::Reporter {
            controller: drift_api::events::WEBHOOK_CONTROLLER,
            instance: "test".into(),
            signing_key: None,
        },
        &metrics,
    );
    let shared = Shared::new(metrics, drift_engine::rule::TierPolicy::default(), snapshot);
    let serving = ServeState {
        parents: None,
        export: None,
        decisions: crate::decisions::DecisionPool::new(1).unwrap(),
        events: Some(sink),
        record_signing: None,
    };
    let review = drift_engine::review::update_review(deployment(3), deployment(5), "alice", "r-1")
        .unwrap()
        .to_string();
    let parsed = parse_review_raw(review.as_bytes()).unwrap();
    let mut given = None;
    evaluate_and_record(
        &shared,
        &serving,
        parsed,
        None,
        Instant::now(),
        &Race::default(),
        |answer| given = Some((answer, writer_side.take())),
    );
    let (answer, findings_before_the_answer) = given.expect("the decision gave no answer");
    assert!(
        matches!(answer, Answer::Review(_)),
        "the decision gave no review"
    );
    assert_eq!(
        findings_before_the_answer, 0,
        "the Events' findings were made before the answer was given"
    );
    assert_eq!(writer_side.take(), 1, "the warned edit makes one finding");
}
