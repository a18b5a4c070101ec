//! The rules, namespaces and objects the plugin reads from files (`--rules`, `--namespace-file`,
//! `--old`, `--new`, `-f`), for the offline commands ([`crate::offline`], `audit --rules`) and
//! for `explain -f` and `preview -f` against the cluster. A file that cannot be read or parsed
//! is an error that names it; invalid rules are kept (in the rule set) and shown.
//! Files are listed and read by `drift_load`, as the agent lists its rule directories.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use drift_engine::manifests::{self, Namespaces};
use drift_engine::rule::TierPolicy;
use drift_engine::{RuleSet, RuleSource};
use serde_json::Value;

/// The rule and Namespace files of `path`: the file itself, or the directory's YAML files.
fn yaml_files(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    Ok(drift_load::files(&[path.to_owned()], drift_load::YAML)?)
}

fn documents(path: &Path) -> anyhow::Result<Vec<Value>> {
    Ok(drift_load::read_documents(path)?)
}

/// The rule ConfigMaps of `paths` (files or directories), compiled in `tiers`; none at all is
/// an error.
pub(crate) fn load_rules(paths: &[PathBuf], tiers: &TierPolicy) -> anyhow::Result<RuleSet> {
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
    Ok(RuleSet::build_with(sources, tiers))
}

/// The Namespaces of `--namespace-file` (none without it), for their mode annotation.
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

/// The one Kubernetes object of the file at `path`.
pub(crate) fn read_object(path: &Path) -> anyhow::Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let object = manifests::single_object(&text, &path.display().to_string())?;
    if !object.is_object() {
        bail!("{} is not a Kubernetes object", path.display());
    }
    Ok(object)
}
