//! Rules, namespaces and objects read from files, for the offline commands. A file that cannot
//! be read or parsed is an error that names it; invalid rules are kept and shown.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use drift_engine::manifests::{self, Namespaces};
use drift_engine::{RuleSet, RuleSource};
use serde_json::Value;

/// The compiled rules.
pub struct LoadedRules {
    pub set: RuleSet,
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

pub fn load_rules(paths: &[PathBuf]) -> anyhow::Result<LoadedRules> {
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

pub fn load_namespaces(path: Option<&Path>) -> anyhow::Result<Namespaces> {
    let Some(path) = path else {
        return Ok(Namespaces::new());
    };
    let mut namespaces = Namespaces::new();
    for file in yaml_files(path)? {
        namespaces.extend(manifests::namespaces(&documents(&file)?));
    }
    Ok(namespaces)
}

pub fn read_object(path: &Path) -> anyhow::Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let object = manifests::single_object(&text, &path.display().to_string())?;
    if !object.is_object() {
        bail!("{} is not a Kubernetes object", path.display());
    }
    Ok(object)
}
