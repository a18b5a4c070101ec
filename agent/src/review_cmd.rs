//! `drift-sentinel review`: builds the AdmissionReview that the API server would send for an
//! UPDATE of one manifest into another, so that a person can try the webhook with `curl`.

use std::path::Path;

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

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

/// Plural resource names of the kinds the chart intercepts by default.
fn resource_of(kind: &str) -> String {
    match kind {
        "Deployment" => "deployments".into(),
        "StatefulSet" => "statefulsets".into(),
        "DaemonSet" => "daemonsets".into(),
        "ReplicaSet" => "replicasets".into(),
        "Rollout" => "rollouts".into(),
        other => format!("{}s", other.to_ascii_lowercase()),
    }
}

pub fn build(args: &ReviewArgs) -> anyhow::Result<Value> {
    let old = read_object(&args.old)?;
    let new = read_object(&args.new)?;
    let text = |v: &Value, pointer: &str| {
        v.pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let api_version = text(&new, "/apiVersion");
    let kind = text(&new, "/kind");
    if kind.is_empty() || api_version.is_empty() {
        bail!("{} has no apiVersion or kind", args.new.display());
    }
    if text(&old, "/kind") != kind {
        bail!(
            "the old object is a {:?} and the new one a {kind:?}",
            text(&old, "/kind")
        );
    }
    let (group, version) = match api_version.split_once('/') {
        Some((group, version)) => (group.to_owned(), version.to_owned()),
        None => (String::new(), api_version.clone()),
    };
    let gvk = json!({"group": group, "version": version, "kind": kind});
    let gvr = json!({"group": group, "version": version, "resource": resource_of(&kind)});
    Ok(json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": args.uid,
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": text(&new, "/metadata/name"),
            "namespace": text(&new, "/metadata/namespace"),
            "operation": "UPDATE",
            "userInfo": {"username": args.user, "groups": ["system:authenticated"]},
            "object": new,
            "oldObject": old,
            "dryRun": false
        }
    }))
}

pub fn run(args: &ReviewArgs) -> anyhow::Result<()> {
    let review = build(args)?;
    println!("{}", serde_json::to_string_pretty(&review)?);
    Ok(())
}
