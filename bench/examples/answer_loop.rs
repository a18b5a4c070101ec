//! Answers one review body N times without a server, for `valgrind --tool=callgrind` or `perf`:
//! the per-request work of the agent (`agent`: the raw parse, the evaluation against a rules
//! directory, the encoded answer) or of the reference (`reference`: parse into
//! `serde_json::Value`, answer allowed), side by side on the same body. `documents` is the agent's
//! work with its objects read into documents first ([`parse_review`]) instead of compared as
//! text: what the lazy comparison saves.
//!
//!   cargo run --release -p drift-bench --example answer_loop -- agent|documents|reference BODY RULES_DIR N
use std::path::PathBuf;

use anyhow::bail;
use drift_engine::json::Document;
use drift_engine::manifests;
use drift_engine::review::{ParsedReview, parse_review, parse_review_raw};
use drift_engine::{Context, Detail, RuleSet, evaluate};
use serde_json::{Value, json};

/// The rules of a directory of rule ConfigMaps, read as the agent's `--rules` reads them.
fn rules(dir: &PathBuf) -> anyhow::Result<RuleSet> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.retain(|path| drift_load::is_listed(path, drift_load::YAML));
    files.sort();
    let mut sources = Vec::new();
    for path in files {
        let origin = path.display().to_string();
        let documents = manifests::parse_documents(&std::fs::read_to_string(&path)?, &origin)?;
        sources.extend(manifests::rule_sources(&documents, &origin));
    }
    let set = RuleSet::build(sources);
    if !set.invalid().is_empty() {
        bail!("invalid rules: {:?}", set.invalid());
    }
    Ok(set)
}

/// The agent's answer to a parsed review: evaluated, then encoded (both modes time this; they
/// differ in how the review was parsed).
fn answer<O: Document>(rules: &RuleSet, parsed: ParsedReview<O>) -> anyhow::Result<Vec<u8>> {
    let request = parsed.request.map_err(|e| anyhow::anyhow!(e))?;
    let evaluation = evaluate(
        rules,
        &request,
        &Context::at(std::time::SystemTime::now()),
        Detail::Verdict,
    );
    Ok(evaluation
        .response(&request.uid)
        .encode_review(parsed.version))
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, who, body, dir, n] = args.as_slice() else {
        bail!("usage: answer_loop agent|documents|reference BODY RULES_DIR N");
    };
    let body = std::fs::read(body)?;
    let rules = rules(&PathBuf::from(dir))?;
    let n: usize = n.parse()?;
    let mut bytes = 0;
    for _ in 0..n {
        let answer = match who.as_str() {
            "agent" => answer(
                &rules,
                parse_review_raw(&body).map_err(|e| anyhow::anyhow!(e.0))?,
            )?,
            "documents" => answer(
                &rules,
                parse_review(&body).map_err(|e| anyhow::anyhow!(e.0))?,
            )?,
            "reference" => {
                let review: Value = serde_json::from_slice(&body)?;
                let uid = review["request"]["uid"].clone();
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "response": {"uid": uid, "allowed": true}})
                .to_string()
                .into_bytes()
            }
            other => bail!("unknown {other}"),
        };
        bytes += std::hint::black_box(answer).len();
    }
    println!("{bytes}");
    Ok(())
}
