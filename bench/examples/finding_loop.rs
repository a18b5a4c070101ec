//! What an Events finding costs per request, in instructions (`valgrind --tool=callgrind`):
//! judges the load benchmark's review N times as the agent does (the raw parse, the evaluation
//! against its 20 rules, the encoded answer) under the rules of `scripts/events-bench.sh` (the
//! matching one in mode `warn`, so that `replicas.json` is a warned edit every time), and with
//! `on` also makes the request's Events findings and hands them to a queue and on into their
//! series as the writer task does (everything that runs per finding but the Event writes,
//! which are one per series every 10 s). `off` is the agent with `--events=false`.
//!
//!   cargo run --release -p drift-bench --example finding_loop -- on|off N [BODY]
//!
//! The instructions of one request: (instructions at N=201 − at N=1) / 200.
use anyhow::{Context as _, bail};
use drift_engine::manifests;
use drift_engine::review::parse_review_raw;
use drift_engine::{Context, Detail, RuleSet, evaluate};
use drift_sentinel::UnwrittenFindings;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (events, n, body) = match args.as_slice() {
        [_, events, n] => (
            events,
            n,
            drift_bench::fixtures::replicas_review().into_bytes(),
        ),
        [_, events, n, body] => (events, n, std::fs::read(body).context("the body")?),
        _ => bail!("usage: finding_loop on|off N [BODY]"),
    };
    let events = match events.as_str() {
        "on" => true,
        "off" => false,
        other => bail!("on or off, not {other}"),
    };
    let n: usize = n.parse()?;
    let mut sources = Vec::new();
    for (file, manifest) in drift_bench::fixtures::warn_rule_files() {
        sources.extend(manifests::rule_sources(
            &manifests::parse_documents(&manifest, &file)?,
            &file,
        ));
    }
    let rules = RuleSet::build(sources);
    if !rules.invalid().is_empty() {
        bail!("invalid rules: {:?}", rules.invalid());
    }
    let mut unwritten = UnwrittenFindings::new("finding-loop")?;
    let (mut bytes, mut findings) = (0, 0);
    for _ in 0..n {
        let parsed = parse_review_raw(&body).map_err(|e| anyhow::anyhow!(e.0))?;
        let request = parsed.request.map_err(|e| anyhow::anyhow!(e))?;
        let now = std::time::SystemTime::now();
        let evaluation = evaluate(&rules, &request, &Context::at(now), Detail::Verdict);
        let answer = evaluation
            .response(&request.uid)
            .encode_review(parsed.version);
        bytes += std::hint::black_box(answer).len();
        if events {
            findings += unwritten.find(&request, &evaluation, now);
        }
    }
    println!("{bytes} bytes answered, {findings} findings");
    if events && findings < n {
        bail!("{findings} findings of {n} requests: the review is no warned edit");
    }
    Ok(())
}
