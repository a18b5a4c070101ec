//! Decision latency on realistic objects. `decide` and `decide_and_respond` are measured after
//! JSON parsing (the request is parsed once, outside the timed loop); targets: (a) and (b)
//! ≤ 10 µs, (c) ≤ 300 µs, (d) ≤ 2× (a). `body_to_answer` times what the agent does with a body
//! — parse, decide, encode the answer — once with the objects parsed whole into documents (the
//! agent before issue 12) and once read lazily from the body's text (the agent now), side by
//! side; `worst_case` times reference §5's worst reviews on the agent's path.

mod fixtures;

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use drift_engine::json::Document;
use drift_engine::review::{ParsedReview, parse_review, parse_review_raw};
use drift_engine::{
    AdmissionRequest, Context, Detail, RuleId, RuleSet, RuleSource, SpecText, Step, evaluate,
};
use fixtures::{apply_change, image_change, replicas_change, sidecar_insert};
use serde_json::{Value, json};

fn rules(specs: &[(String, String)]) -> RuleSet {
    let set = RuleSet::build(specs.iter().map(|(name, spec)| RuleSource {
        id: RuleId {
            namespace: "drift-sentinel".into(),
            name: name.clone(),
        },
        spec: SpecText::Yaml(spec.clone()),
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
    let context = Context::at(std::time::SystemTime::UNIX_EPOCH);

    let cases: [(&str, &RuleSet, AdmissionRequest, Step); 4] = [
        (
            "a_image_only_change",
            &one_rule,
            request(image_change()),
            Step::OnlyMutable,
        ),
        (
            "b_replicas_change",
            &one_rule,
            request(replicas_change()),
            Step::Violation,
        ),
        (
            "c_200_env_sidecar_at_0",
            &one_rule,
            request(sidecar_insert()),
            Step::Violation,
        ),
        (
            "d_50_rules_last_matches",
            &fifty_rules,
            request(image_change()),
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

/// Parse, decide and encode, as the agent does with a body: `raw` reads the objects lazily from
/// the text, otherwise they are parsed whole.
fn answer(rules: &RuleSet, body: &[u8], raw: bool) -> String {
    if raw {
        respond(rules, parse_review_raw(body).expect("a review"))
    } else {
        respond(rules, parse_review(body).expect("a review"))
    }
}

/// Decides the request of `parsed` and encodes the answer.
fn respond<O: Document>(rules: &RuleSet, parsed: ParsedReview<O>) -> String {
    let context = Context::at(std::time::SystemTime::UNIX_EPOCH);
    let request = parsed.request.expect("a request");
    let evaluation = evaluate(rules, &request, &context, Detail::Verdict);
    evaluation
        .response(&request.uid)
        .into_review(parsed.version)
        .to_string()
}

fn body_to_answer(c: &mut Criterion) {
    let fifty_rules = rules(&fixtures::many_rule_specs());
    let one_rule = rules(&[("production".into(), fixtures::RULE_SPEC.into())]);
    let body = |(old, new): (Value, Value)| fixtures::review("bench", &old, &new).to_string();
    let cases = [
        ("image_50_rules", &fifty_rules, body(image_change())),
        ("replicas_50_rules", &fifty_rules, body(replicas_change())),
        ("sidecar_200_env", &one_rule, body(sidecar_insert())),
        ("apply_image_one_rule", &one_rule, body(apply_change())),
    ];
    let mut group = c.benchmark_group("body_to_answer");
    for (name, rules, body) in &cases {
        // Both paths must give the same answer for the comparison to mean anything.
        assert_eq!(
            answer(rules, body.as_bytes(), false),
            answer(rules, body.as_bytes(), true)
        );
        for (path, raw) in [("whole", false), ("raw", true)] {
            group.bench_function(format!("{name}/{path}"), |b| {
                b.iter(|| black_box(answer(rules, black_box(body.as_bytes()), raw)))
            });
        }
    }
    group.finish();
}

/// reference §5's worst reviews: 200,000 changed container args (~800 KB) and 2,000,000 changed
/// list items (~8 MB), each to be decided in at most 0.5 s.
fn worst_case(c: &mut Criterion) {
    let rules = rules(&[(
        "production".into(),
        "mode: enforce\nnamespaces: [\"*\"]\nselectors: [{apiGroup: apps, kind: Deployment}]\nmutable: [\"spec.template.spec.containers[*].image\"]\n".into(),
    )]);
    let deployment = |list: &str, items: Vec<Value>| {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "prod"},
            "spec": {"template": {"spec": {"containers": [
                {"name": "app", "image": "app:1", list: items}
            ]}}}
        })
    };
    // As `drift-bench-fixtures` writes them: one-character args, one-digit items, each changed.
    let args = |shift: usize| {
        (0..200_000)
            .map(|i| Value::from(char::from(b'a' + ((i + shift) % 26) as u8).to_string()))
            .collect()
    };
    let items = |shift: usize| {
        (0..2_000_000)
            .map(|i| Value::from(((i + shift) % 10) as u64))
            .collect()
    };
    let cases = [
        (
            "args_200k",
            deployment("args", args(0)),
            deployment("args", args(1)),
        ),
        (
            "items_2m",
            deployment("args", items(0)),
            deployment("args", items(1)),
        ),
    ];
    let mut group = c.benchmark_group("worst_case");
    group.sample_size(10);
    for (name, old, new) in &cases {
        let body = fixtures::review("bench", old, new).to_string();
        assert!(answer(&rules, body.as_bytes(), true).len() <= 64 * 1024);
        group.bench_function(*name, |b| {
            b.iter(|| black_box(answer(&rules, black_box(body.as_bytes()), true)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench, body_to_answer, worst_case);
criterion_main!(benches);
