//! The offline commands (`preview --rules --old --new`, `explain --rules -f`) and the rules,
//! namespaces and objects they read from files. A file that cannot be read or parsed is an
//! error that names it; invalid rules are kept and shown. Every rule file is a cluster rule
//! unless `--cluster-rule-namespaces` is given (SPEC §2 "Who may write a rule"); then a
//! ConfigMap outside those namespaces is a namespace rule, as the agent would load it.
//!
//! `explain --rules` also lints the rules as the agent's `/validate-rule` webhook does
//! (`drift_engine::lint`, with the built-in kinds' shapes), so a pipeline sees the errors and
//! warnings `kubectl apply` would print before the rule reaches a cluster; an invalid rule makes
//! it exit 2.
//!
//! Files are listed and read by `drift_load`, as the agent lists its rule directories.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use drift_engine::lint::{LintContext, lint};
use drift_engine::manifests::{self, Namespaces};
use drift_engine::rule::TierPolicy;
use drift_engine::{RuleSet, RuleSource};
use serde_json::Value;

use crate::plan::{OfflineExplain, OfflinePreview, OfflineRules, Print};
use crate::{Verdict, judge, render, request_for};

/// The compiled rules.
pub(crate) struct LoadedRules {
    pub set: RuleSet,
}

/// A warning of the rule linter about one valid rule.
pub(crate) struct RuleWarning {
    /// `namespace/name`.
    pub rule: String,
    /// The file it came from.
    pub origin: Option<String>,
    /// As the `/validate-rule` webhook words it, and `kubectl apply` prints it after `Warning: `.
    pub warning: String,
}

impl LoadedRules {
    /// The linter's warnings about the valid rules, as the agent's `/validate-rule` gives them
    /// (`agent/src/validate_rule.rs`): the built-in kinds' shapes; the namespaces that exist
    /// are not known offline.
    pub(crate) fn lint_warnings(&self) -> Vec<RuleWarning> {
        let context = LintContext {
            shapes: Some(drift_api::shapes::built_in()),
            namespaces: None,
        };
        let mut warnings = Vec::new();
        let mut rules: Vec<_> = self.set.rules().iter().collect();
        rules.sort_by(|a, b| (&a.origin, &a.id).cmp(&(&b.origin, &b.id)));
        for rule in rules {
            for warning in lint(rule, &context) {
                warnings.push(RuleWarning {
                    rule: rule.id.to_string(),
                    origin: rule.origin.clone(),
                    warning: format!("Drift Sentinel: rule {}: {warning}", rule.id),
                });
            }
        }
        warnings
    }
}

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
    let judged = judge(&rules, &request, namespace_mode, print);
    render::emit(print, &judged.document, |_| judged.screen)?;
    Ok(judged.verdict)
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
    let warnings = rules.lint_warnings();
    render::explain(print, &request, namespace_mode, &rules, &warnings)?;
    // A pipeline fails on a rule the webhook would refuse (warnings alone do not fail it).
    let invalid = rules.set.invalid();
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

fn load(files: &OfflineRules) -> anyhow::Result<(LoadedRules, Namespaces)> {
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

fn yaml_files(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    Ok(drift_load::files(&[path.to_owned()], drift_load::YAML)?)
}

fn documents(path: &Path) -> anyhow::Result<Vec<Value>> {
    Ok(drift_load::read_documents(path)?)
}

pub(crate) fn load_rules(paths: &[PathBuf], tiers: &TierPolicy) -> anyhow::Result<LoadedRules> {
    let mut sources: Vec<RuleSource> = Vec::new();
    for path in paths {
        for file in yaml_files(path)? {
            let origin = file.display().to_string();
            sources.extend(manifests::rule_sources(&documents(&file)?, &origin));
        }
    }
    if sources.is_empty() {
        bail!(
            "no rule ConfigMaps (annotated drift-sentinel.k8s.io/rule: \"true\") found in {}",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(LoadedRules {
        set: RuleSet::build_with(sources, tiers),
    })
}

pub(crate) fn load_namespaces(path: Option<&Path>) -> anyhow::Result<Namespaces> {
    let Some(path) = path else {
        return Ok(Namespaces::new());
    };
    let mut namespaces = Namespaces::new();
    for file in yaml_files(path)? {
        namespaces.extend(manifests::namespaces(&documents(&file)?));
    }
    Ok(namespaces)
}

pub(crate) fn read_object(path: &Path) -> anyhow::Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let object = manifests::single_object(&text, &path.display().to_string())?;
    if !object.is_object() {
        bail!("{} is not a Kubernetes object", path.display());
    }
    Ok(object)
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
