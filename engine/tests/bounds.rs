//! reference §5 "Bounded answers": however many changes a review holds, the admission evaluation
//! keeps only what an answer can show — the first changes and the first uncovered ones in byte
//! order of their path — and counts them all; what it keeps is exactly the beginning of what
//! the unbounded evaluation (the plugin's) finds.

use drift_engine::evaluation::MAX_KEPT_CHANGES;
use drift_engine::json::RawDocument;
use drift_engine::review::{AdmissionRequest, parse_review_raw};
use drift_engine::{Context, Detail, Evaluation, RuleId, RuleSet, RuleSource, SpecText, evaluate};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::time::UNIX_EPOCH;

const RULE: &str = r#"
mode: enforce
namespaces: ["*"]
selectors: [{apiGroup: apps, kind: Deployment}]
mutable: ["spec.template.spec.containers[*].image", "spec.template.spec.containers[*].env"]
"#;

fn rules() -> RuleSet {
    rules_from(RULE)
}

/// [`RULE`] with two single args mutable too: a rule whose mutable patterns name list indices,
/// so that items of one list are not all judged alike.
fn rules_naming_indices() -> RuleSet {
    let spec = RULE.replace(
        "containers[*].env\"]",
        "containers[*].env\", \"spec.template.spec.containers[0].args[7]\", \"spec.template.spec.containers[0].args[150]\"]",
    );
    assert_ne!(spec, RULE);
    rules_from(&spec)
}

fn rules_from(spec: &str) -> RuleSet {
    let set = RuleSet::build([RuleSource {
        id: RuleId {
            namespace: "platform".into(),
            name: "rule".into(),
        },
        spec: SpecText::Yaml(spec.into()),
        origin: None,
    }]);
    assert!(set.invalid().is_empty(), "{:?}", set.invalid());
    set
}

/// A Deployment whose one container has `args` and `env` (name, value) pairs.
fn deployment(args: &[String], env: &[(String, String)]) -> Value {
    let env: Vec<Value> = env
        .iter()
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect();
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "prod"},
        "spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "app:1", "args": args, "env": env}
        ]}}}
    })
}

fn review(old: &Value, new: &Value) -> String {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u", "operation": "UPDATE", "name": "web", "namespace": "prod",
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "userInfo": {"username": "alice"},
            "object": new, "oldObject": old
        }
    })
    .to_string()
}

fn judged(evaluation: &Evaluation<'_>) -> Vec<(String, bool)> {
    evaluation
        .changes()
        .iter()
        .map(|c| (c.path.clone(), c.mutable))
        .collect()
}

/// The request of the review `body`, its objects read from the text (as the agent reads them).
fn request_of(body: &str) -> AdmissionRequest<RawDocument<'_>> {
    let raw = parse_review_raw(body.as_bytes()).expect("review");
    raw.request.expect("request")
}

/// The evaluation of `request` at the epoch, with `detail`.
fn judge<'a>(
    rules: &'a RuleSet,
    request: &'a AdmissionRequest<RawDocument<'_>>,
    detail: Detail,
) -> Evaluation<'a> {
    evaluate(rules, request, &Context::at(UNIX_EPOCH), detail)
}

/// The bounded evaluation of `body` agrees with the unbounded one, as the module says.
fn check_bounded(body: &str, rules: &RuleSet) -> Result<(), TestCaseError> {
    let request = request_of(body);
    let bounded = judge(rules, &request, Detail::Verdict);
    let full = judge(rules, &request, Detail::Full);
    let all = judged(&full);
    // The first changes and the first uncovered ones, each change once.
    let mut kept: Vec<usize> = (0..all.len()).take(MAX_KEPT_CHANGES).collect();
    kept.extend((0..all.len()).filter(|&i| !all[i].1).take(MAX_KEPT_CHANGES));
    kept.sort();
    kept.dedup();
    let mut want: Vec<(String, bool)> = kept.into_iter().map(|i| all[i].clone()).collect();
    want.sort();
    let mut got = judged(&bounded);
    got.sort();
    prop_assert_eq!(got, want);
    let (b, f) = (
        bounded.comparison().expect("compared"),
        full.comparison().expect("compared"),
    );
    prop_assert_eq!(b.changed_count, all.len());
    prop_assert_eq!(b.changed_count, f.changed_count);
    prop_assert_eq!(b.uncovered_count, f.uncovered_count);
    prop_assert_eq!(bounded.verdict(), full.verdict());
    if let (Some(bv), Some(fv)) = (bounded.violation(), full.violation()) {
        prop_assert_eq!(bv.denied_count, fv.denied.len());
        prop_assert_eq!(bounded.reason(), full.reason());
        prop_assert_eq!(&bv.denied[..], &fv.denied[..bv.denied.len()]);
        prop_assert_eq!(
            bounded.denied_paths_annotation(),
            full.denied_paths_annotation()
        );
    }
    Ok(())
}

#[test]
fn two_hundred_thousand_changed_args_keep_a_bounded_answer() {
    let old: Vec<String> = (0..200_000).map(|i| format!("a{i}")).collect();
    let new: Vec<String> = (0..200_000).map(|i| format!("b{i}")).collect();
    let body = review(&deployment(&old, &[]), &deployment(&new, &[]));
    let request = request_of(&body);
    let rules = rules();
    let evaluation = judge(&rules, &request, Detail::Verdict);
    let comparison = evaluation.comparison().expect("compared");
    assert_eq!(comparison.changed_count, 200_000);
    assert!(comparison.changes.len() <= 2 * MAX_KEPT_CHANGES);
    let violation = evaluation.violation().expect("violation");
    assert_eq!(violation.denied_count, 200_000);
    // The first paths in byte order of the rendered path (`]` sorts after the digits).
    let mut every: Vec<String> = (0..200_000)
        .map(|i| format!("spec.template.spec.containers[0].args[{i}]"))
        .collect();
    every.sort();
    assert_eq!(violation.denied[..], every[..violation.denied.len()]);
    assert_eq!(violation.denied.len(), MAX_KEPT_CHANGES);
    assert_eq!(
        violation.denied[1],
        "spec.template.spec.containers[0].args[100000]"
    );
    assert!(
        evaluation.reason().contains("… and 199980 more"),
        "{}",
        evaluation.reason()
    );
    assert!(
        evaluation
            .denied_paths_annotation()
            .ends_with(", … (199980 more)")
    );
    let response = serde_json::to_string(&evaluation.response("u")).expect("response");
    assert!(response.len() < 64 * 1024, "{}", response.len());
}

/// A removed and an added element at one index are two changes at one path: counted once as a
/// denied path, twice as changes.
#[test]
fn a_path_changed_twice_is_one_denied_path() {
    let old = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "prod"},
        "spec": {"volumes": [{"name": "a"}, {"name": "b"}]}});
    let new = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "prod"},
        "spec": {"volumes": [{"name": "a"}, {"name": "c"}]}});
    let body = review(&old, &new);
    check_bounded(&body, &rules()).expect("bounded agrees");
    let request = request_of(&body);
    let rules = rules();
    let evaluation = judge(&rules, &request, Detail::Verdict);
    let comparison = evaluation.comparison().expect("compared");
    assert_eq!(comparison.changed_count, 2);
    assert_eq!(evaluation.violation().expect("violation").denied_count, 1);
    assert_eq!(evaluation.denied_paths(), ["spec.volumes[1]"]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Around the limit (fewer, as many, more changes than kept), covered and uncovered changes
    /// mixed: the bounded evaluation keeps exactly the beginning of the full one.
    #[test]
    fn the_bounded_evaluation_is_the_beginning_of_the_full_one(
        args in 0usize..260,
        changed_args in proptest::collection::vec(any::<bool>(), 260),
        env in 0usize..260,
        changed_env in proptest::collection::vec(any::<bool>(), 260),
        naming_indices in any::<bool>(),
    ) {
        let arg = |i: usize, new: bool| if new && changed_args[i] { format!("new{i}") } else { format!("old{i}") };
        let var = |i: usize, new: bool| (format!("V{i}"), if new && changed_env[i] { "new".into() } else { "old".into() });
        let old = deployment(
            &(0..args).map(|i| arg(i, false)).collect::<Vec<_>>(),
            &(0..env).map(|i| var(i, false)).collect::<Vec<_>>(),
        );
        let new = deployment(
            &(0..args).map(|i| arg(i, true)).collect::<Vec<_>>(),
            &(0..env).map(|i| var(i, true)).collect::<Vec<_>>(),
        );
        let rules = if naming_indices { rules_naming_indices() } else { rules() };
        check_bounded(&review(&old, &new), &rules)?;
    }
}
