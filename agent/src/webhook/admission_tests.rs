use std::sync::atomic::AtomicUsize;
use std::sync::mpsc;

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

/// c9ccb3a: the decision thread answers first and only then builds the Events' findings (97cdbe1
/// keeps the export record before the answer). The findings here are built by a builder that
/// waits until the caller has received the answer: built before the answer, it would wait for
/// an answer that cannot come until it returns, and fail when its wait runs out.
#[test]
fn the_events_findings_are_built_after_the_caller_has_the_answer() {
    let mut snapshot = Snapshot::empty(RuleSourceKind::BuiltIn);
    snapshot.rules = warn_rules();
    let shared = Shared::new(
        crate::metrics::Metrics::new().unwrap(),
        drift_engine::rule::TierPolicy::default(),
        snapshot,
    );
    let serving = ServeState {
        parents: None,
        export: None,
        decisions: crate::decisions::DecisionPool::new(1).unwrap(),
        events: None,
    };
    let review = drift_engine::review::update_review(deployment(3), deployment(5), "alice", "r-1")
        .unwrap()
        .to_string();
    let race = Race::default();
    let (early, answered) = tokio::sync::oneshot::channel();
    let (caller_has_it, has_it) = mpsc::channel::<()>();
    let findings = AtomicUsize::new(usize::MAX);
    let (shared, serving, race, review, findings) = (&shared, &serving, &race, &review, &findings);
    std::thread::scope(|scope| {
        let decision = scope.spawn(move || {
            let parsed = parse_review_raw(review.as_bytes()).unwrap();
            evaluate_and_record(
                shared,
                serving,
                parsed,
                None,
                Instant::now(),
                race,
                early,
                |request, evaluation, now| {
                    let waited = has_it.recv_timeout(Duration::from_secs(10));
                    assert!(
                        waited.is_ok(),
                        "the Events' findings were built before the caller had the answer"
                    );
                    let intents = crate::events::admission::intents_of(request, evaluation, now);
                    findings.store(intents.len(), Ordering::SeqCst);
                },
            );
        });
        // The request's task: it waits for the answer, then has it.
        let answer = answered.blocking_recv().ok();
        if answer.is_some() {
            caller_has_it.send(()).unwrap();
        }
        if let Err(panic) = decision.join() {
            std::panic::resume_unwind(panic);
        }
        assert!(
            matches!(answer, Some(Answer::Review(_))),
            "the decision gave no review"
        );
    });
    // The builder ran, on a decision with a finding to make.
    assert_eq!(findings.load(Ordering::SeqCst), 1);
}
