//! The offline commands (`preview --rules --old --new`, `explain --rules -f`): rules, namespaces
//! and objects from files ([`crate::files`]). Every rule file is a cluster rule unless
//! `--cluster-rule-namespaces` is given (reference §2 "Who may write a rule"); then a ConfigMap
//! outside those namespaces is a namespace rule, as the agent would load it.
//!
//! `explain --rules` also lints the rules ([`crate::lint`]), so a pipeline sees the errors and
//! warnings `kubectl apply` would print before the rule reaches a cluster; an invalid rule makes
//! it exit 2.

use std::path::Path;

use anyhow::{Context as _, bail};
use drift_engine::RuleSet;
use drift_engine::manifests::Namespaces;
use serde_json::Value;

use crate::files::{load_namespaces, load_rules, read_object};
use crate::lint::lint_warnings;
use crate::plan::{OfflineExplain, OfflinePreview, OfflineRules, Print};
use crate::render::{self, Style};
use crate::verdict::{Verdict, evaluate_update, request_for};

/// `preview --rules PATH --old FILE --new FILE`.
pub(crate) fn preview(plan: &OfflinePreview, print: Print) -> anyhow::Result<Verdict> {
    let (rules, namespaces) = load(&plan.rules)?;
    let mut old = read_object(&plan.old)?;
    let mut new = read_object(&plan.new)?;
    let namespace = plan.namespace.as_deref();
    set_namespace(&mut old, namespace, &plan.old)?;
    set_namespace(&mut new, namespace, &plan.new)?;
    let request = request_for(old, new, &plan.user).with_context(|| {
        format!(
            "cannot compare {} with {}",
            plan.old.display(),
            plan.new.display()
        )
    })?;
    let namespace_mode = namespaces
        .get(request.namespace())
        .and_then(|n| n.mode_annotation.as_deref());
    let evaluation = evaluate_update(&rules, &request, namespace_mode);
    let verdict = Verdict::of(&evaluation);
    let style = Style::new(print.colour);
    let parts = render::preview_parts(&request, &evaluation, &rules, verdict, &style);
    render::emit(print, &parts.document, |_| parts.screen)?;
    Ok(verdict)
}

/// `explain --rules PATH -f FILE`: explaining an object is explaining an edit of it that
/// changes nothing.
pub(crate) fn explain(plan: &OfflineExplain, print: Print) -> anyhow::Result<Verdict> {
    let (rules, namespaces) = load(&plan.rules)?;
    let mut object = read_object(&plan.file)?;
    set_namespace(&mut object, plan.namespace.as_deref(), &plan.file)?;
    let request = request_for(object.clone(), object, &plan.user)
        .with_context(|| format!("cannot read {} as a Kubernetes object", plan.file.display()))?;
    let namespace_mode = namespaces
        .get(request.namespace())
        .and_then(|n| n.mode_annotation.as_deref());
    let warnings = lint_warnings(&rules);
    let evaluation = evaluate_update(&rules, &request, namespace_mode);
    render::explain(
        print,
        &request,
        &evaluation,
        namespace_mode,
        &rules,
        &warnings,
    )?;
    // A pipeline fails on a rule the webhook would refuse (warnings alone do not fail it).
    let invalid = rules.invalid();
    if let Some(first) = invalid.first() {
        bail!(
            "{} invalid rule{} (the /validate-rule webhook refuses {}): {first}",
            invalid.len(),
            if invalid.len() == 1 { "" } else { "s" },
            if invalid.len() == 1 { "it" } else { "them" }
        );
    }
    Ok(Verdict::Allowed)
}

fn load(files: &OfflineRules) -> anyhow::Result<(RuleSet, Namespaces)> {
    let rules = load_rules(&files.rules, &files.tiers)?;
    let namespaces = load_namespaces(files.namespace_file.as_deref())?;
    Ok((rules, namespaces))
}

/// `-n` offline, as kubectl has it with a file: the object's namespace when it has none; its
/// own namespace differing is an error.
fn set_namespace(object: &mut Value, namespace: Option<&str>, path: &Path) -> anyhow::Result<()> {
    let Some(namespace) = namespace else {
        return Ok(());
    };
    let own = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    if own.is_empty() {
        if !object["metadata"].is_object() {
            object["metadata"] = Value::Object(serde_json::Map::new());
        }
        object["metadata"]["namespace"] = Value::from(namespace);
    } else if own != namespace {
        bail!(
            "the namespace from {} ({own:?}) does not match the namespace {namespace:?}; pass --namespace={own} or remove the object's namespace",
            path.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_namespace_flag_fills_in_or_must_agree() {
        let path = Path::new("o.yaml");
        let mut object = json!({"kind": "Deployment", "metadata": {"name": "web"}});
        set_namespace(&mut object, Some("prod"), path).unwrap();
        assert_eq!(object["metadata"]["namespace"], "prod");
        set_namespace(&mut object, Some("prod"), path).unwrap();
        let error = set_namespace(&mut object, Some("dev"), path).unwrap_err();
        assert!(error.to_string().contains("--namespace=prod"), "{error}");
        let mut untouched = json!({"metadata": {"name": "web"}});
        set_namespace(&mut untouched, None, path).unwrap();
        assert_eq!(untouched, json!({"metadata": {"name": "web"}}));
    }
}
