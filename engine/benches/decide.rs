//! Decision latency on realistic objects, measured after JSON parsing (the request is parsed
//! once, outside the timed loop). Targets: (a) and (b) ≤ 10 µs, (c) ≤ 300 µs, (d) ≤ 2× (a).

mod fixtures;

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use drift_engine::review::parse_review;
use drift_engine::{
    AdmissionRequest, Context, Detail, RuleId, RuleSet, RuleSource, Step, evaluate,
};
use serde_json::Value;

fn rules(specs: &[(String, String)]) -> RuleSet {
    let set = RuleSet::build(specs.iter().map(|(name, spec)| RuleSource {
        id: RuleId {
            namespace: "drift-sentinel".into(),
            name: name.clone(),
        },
        spec: Some(spec.clone()),
        origin: None,
    }));
    assert!(set.invalid().is_empty(), "{:?}", set.invalid());
    set
}

fn request(pair: (Value, Value)) -> AdmissionRequest {
    let body = fixtures::review("bench", &pair.0, &pair.1).to_string();
    parse_review(body.as_bytes())
        .expect("fixture is a review")
        .request
        .expect("fixture has a request")
}

fn bench(c: &mut Criterion) {
    let one_rule = rules(&[("production".into(), fixtures::RULE_SPEC.into())]);
    let fifty_rules = rules(&fixtures::many_rule_specs());
    let context = Context::default();

    let cases: [(&str, &RuleSet, AdmissionRequest, Step); 4] = [
        (
            "a_image_only_change",
            &one_rule,
            request(fixtures::image_change()),
            Step::OnlyMutable,
        ),
        (
            "b_replicas_change",
            &one_rule,
            request(fixtures::replicas_change()),
            Step::Violation,
        ),
        (
            "c_200_env_sidecar_at_0",
            &one_rule,
            request(fixtures::sidecar_insert()),
            Step::Violation,
        ),
        (
            "d_50_rules_last_matches",
            &fifty_rules,
            request(fixtures::image_change()),
            Step::OnlyMutable,
        ),
    ];
    // The targets are for the decision itself; the second group adds building the response,
    // the rest of the engine's work on the admission path.
    let mut group = c.benchmark_group("decide");
    for (name, rules, request, expected) in &cases {
        // The benchmark measures the right thing only if the decision is the expected one.
        let evaluation = evaluate(rules, request, &context, Detail::Verdict);
        assert_eq!(
            evaluation.step(),
            *expected,
            "{name}: {}",
            evaluation.reason()
        );
        group.bench_function(*name, |b| {
            b.iter(|| {
                black_box(evaluate(
                    black_box(rules),
                    black_box(request),
                    &context,
                    Detail::Verdict,
                ))
            })
        });
    }
    group.finish();
    let mut group = c.benchmark_group("decide_and_respond");
    for (name, rules, request, _) in &cases {
        group.bench_function(*name, |b| {
            b.iter(|| {
                let evaluation = evaluate(
                    black_box(rules),
                    black_box(request),
                    &context,
                    Detail::Verdict,
                );
                black_box(evaluation.response("bench"));
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
