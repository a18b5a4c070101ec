//! `drift-sentinel review`: builds the AdmissionReview that the API server would send for an
//! UPDATE of one manifest into another, so that a person can try the webhook with `curl`.

use std::path::Path;

use anyhow::{Context as _, bail};
use serde_json::Value;

use crate::cli::ReviewArgs;

fn read_object(path: &Path) -> anyhow::Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let origin = path.display().to_string();
    let mut documents = drift_engine::manifests::parse_documents(&text, &origin)?;
    match documents.len() {
        1 => Ok(documents.remove(0)),
        0 => bail!("{origin} holds no object"),
        n => bail!("{origin} holds {n} objects; give one object per file"),
    }
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
