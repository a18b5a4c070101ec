//! The offline commands (`preview --rules --old --new`, `explain --rules -f`) and the rules,
//! namespaces and objects they read from files. A file that cannot be read or parsed is an
//! error that names it; invalid rules are kept and shown.
//!
//! The agent lists a rule directory the same way (`agent/src/rules_source.rs`, `list_yaml`);
//! the engine does no I/O, so the listing cannot live there.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use drift_engine::manifests::{self, Namespaces};
use drift_engine::{RuleSet, RuleSource};
use serde_json::Value;

use crate::plan::{OfflineExplain, OfflinePreview, OfflineRules, Print};
use crate::{Verdict, judge, render, request_for};

/// The compiled rules.
pub(crate) struct LoadedRules {
    pub set: RuleSet,
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
    render::explain(print, &request, namespace_mode, &rules)?;
    Ok(Verdict::Allowed)
}

fn load(files: &OfflineRules) -> anyhow::Result<(LoadedRules, Namespaces)> {
    let rules = load_rules(&files.rules)?;
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
    let meta =
        std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("cannot list {}", path.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            !name.starts_with('.')
                && (name.ends_with(".yaml") || name.ends_with(".yml"))
                && p.is_file()
        })
        .collect();
    files.sort();
    Ok(files)
}

fn documents(path: &Path) -> anyhow::Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(manifests::parse_documents(
        &text,
        &path.display().to_string(),
    )?)
}

pub(crate) fn load_rules(paths: &[PathBuf]) -> anyhow::Result<LoadedRules> {
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
        set: RuleSet::build(sources),
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
