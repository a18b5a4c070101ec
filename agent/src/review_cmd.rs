//! `drift-sentinel review`: builds the AdmissionReview that the API server would send for an
//! UPDATE of one manifest into another, so that a person can try the webhook with `curl`.

use std::path::Path;

use anyhow::Context as _;
use serde_json::Value;

use crate::cli::ReviewArgs;

fn read_object(path: &Path) -> anyhow::Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(drift_engine::manifests::single_object(
        &text,
        &path.display().to_string(),
    )?)
}

pub fn build(args: &ReviewArgs) -> anyhow::Result<Value> {
    let old = read_object(&args.old)?;
    let new = read_object(&args.new)?;
    Ok(drift_engine::review::update_review(
        old, new, &args.user, &args.uid,
    )?)
}

pub fn run(args: &ReviewArgs) -> anyhow::Result<()> {
    let review = build(args)?;
    println!("{}", serde_json::to_string_pretty(&review)?);
    Ok(())
}
