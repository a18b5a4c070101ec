//! Runs one benchmark case in a loop, for profilers that count instructions (callgrind) and
//! for `perf`: `cargo run --release --example decide_loop -- a 100000`. `dump` prints the
//! realistic Deployment instead.
#[path = "../benches/fixtures.rs"]
mod fixtures;

use drift_engine::{Context, Detail, RuleId, RuleSet, RuleSource, evaluate, review};

fn main() {
    let mut args = std::env::args().skip(1);
    let case = args.next().unwrap_or_else(|| "a".into());
    let iterations: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let pair = match case.as_str() {
        "b" => fixtures::replicas_change(),
        "c" => fixtures::sidecar_insert(),
        "dump" => {
            println!("{}", fixtures::image_change().0);
            return;
        }
        _ => fixtures::image_change(),
    };
    let specs = if case == "d" {
        fixtures::many_rule_specs()
    } else {
        vec![("production".to_owned(), fixtures::RULE_SPEC.to_owned())]
    };
    let rules = RuleSet::build(specs.into_iter().map(|(name, spec)| RuleSource {
        id: RuleId {
            namespace: "drift-sentinel".into(),
            name,
        },
        spec: Some(spec),
        origin: None,
    }));
    let body = fixtures::review("loop", &pair.0, &pair.1).to_string();
    let Ok(parsed) = review::parse_review(body.as_bytes()) else {
        return;
    };
    let Ok(request) = parsed.request else { return };
    let started = std::time::Instant::now();
    let mut denied = 0usize;
    for _ in 0..iterations {
        let evaluation = evaluate(&rules, &request, &Context::default(), Detail::Verdict);
        denied += usize::from(!evaluation.allowed());
    }
    let per = started.elapsed() / u32::try_from(iterations.max(1)).unwrap_or(u32::MAX);
    println!("case {case}: {iterations} decisions, {per:?} each, {denied} denied");
}
