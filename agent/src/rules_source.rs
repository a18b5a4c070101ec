//! Where rules and namespaces come from when the agent runs offline: files given with
//! `--rules` and `--namespaces` (re-read when they change), or the built-in default rule.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use drift_engine::manifests;
use drift_engine::{RuleId, RuleSet, RuleSource};
use tokio::sync::watch;

use crate::state::{Shared, Snapshot, SourceError, SourceKind};

/// `data.spec` of the built-in default rule (the chart ships the same file).
pub const DEFAULT_RULE_SPEC: &str =
    include_str!("../../charts/drift-sentinel/files/default-rule.yaml");

/// Identity of the built-in default rule.
pub fn default_rule_id() -> RuleId {
    RuleId {
        namespace: "built-in".into(),
        name: "default-rule".into(),
    }
}

/// The snapshot that serves only the built-in default rule.
pub fn builtin_snapshot() -> Snapshot {
    let source = RuleSource {
        id: default_rule_id(),
        spec: Some(DEFAULT_RULE_SPEC.to_owned()),
        origin: Some("built-in".into()),
    };
    let mut specs = BTreeMap::new();
    specs.insert(source.id.clone(), source.spec.clone());
    Snapshot {
        rules: RuleSet::build([source]),
        specs,
        ..Snapshot::empty(SourceKind::BuiltIn)
    }
}

/// Rule and namespace files.
#[derive(Debug, Clone)]
pub struct FileSource {
    pub rules: Vec<PathBuf>,
    pub namespaces: Vec<PathBuf>,
}

/// The text of every file of a source, read at one moment.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Contents {
    rules: Vec<(PathBuf, Result<String, String>)>,
    namespaces: Vec<(PathBuf, Result<String, String>)>,
}

impl Contents {
    /// Changes whenever any file's content (or readability) changes.
    pub fn fingerprint(&self) -> u64 {
        let mut hasher = DefaultHasher::new();
        self.rules.hash(&mut hasher);
        self.namespaces.hash(&mut hasher);
        hasher.finish()
    }
}

impl FileSource {
    /// At startup: every configured path must exist, so that a typo is an error, not an empty
    /// rule set.
    pub fn check(&self) -> Result<(), String> {
        for path in self.rules.iter().chain(&self.namespaces) {
            if let Err(e) = std::fs::metadata(path) {
                return Err(format!("cannot read {}: {e}", path.display()));
            }
        }
        Ok(())
    }

    pub fn kind(&self) -> SourceKind {
        SourceKind::Files {
            rules: self.rules.iter().map(|p| p.display().to_string()).collect(),
            namespaces: self
                .namespaces
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
        }
    }

    pub fn read(&self) -> Contents {
        Contents {
            rules: read_all(&self.rules),
            namespaces: read_all(&self.namespaces),
        }
    }

    /// Compiles what was read. A file that cannot be read or parsed is a source error; its
    /// rules are not applied, the other files' rules are.
    pub fn build(&self, contents: &Contents) -> Snapshot {
        let mut source_errors = Vec::new();
        let mut sources = Vec::new();
        for (path, text) in &contents.rules {
            let origin = path.display().to_string();
            match documents(&origin, text) {
                Ok(documents) => sources.extend(manifests::rule_sources(&documents, &origin)),
                Err(e) => source_errors.push(e),
            }
        }
        let mut namespaces = manifests::Namespaces::new();
        for (path, text) in &contents.namespaces {
            let origin = path.display().to_string();
            match documents(&origin, text) {
                Ok(documents) => namespaces.extend(manifests::namespaces(&documents)),
                Err(e) => source_errors.push(e),
            }
        }
        if self.rules.is_empty() {
            // Namespace files only: the built-in default rule applies.
            let builtin = builtin_snapshot();
            return Snapshot {
                namespaces,
                source_errors,
                kind: self.kind(),
                ..builtin
            };
        }
        build_snapshot(sources, namespaces, source_errors, self.kind())
    }
}

/// The snapshot of a set of rule sources: the one path from any source to the rule set.
pub fn build_snapshot(
    sources: Vec<RuleSource>,
    namespaces: manifests::Namespaces,
    source_errors: Vec<SourceError>,
    kind: SourceKind,
) -> Snapshot {
    let specs = sources
        .iter()
        .map(|s| (s.id.clone(), s.spec.clone()))
        .collect();
    Snapshot {
        rules: RuleSet::build(sources),
        namespaces,
        source_errors,
        kind,
        loaded_at: SystemTime::now(),
        specs,
    }
}

fn documents(
    origin: &str,
    text: &Result<String, String>,
) -> Result<Vec<serde_json::Value>, SourceError> {
    let text = text.as_ref().map_err(|reason| SourceError {
        source: origin.to_owned(),
        line: None,
        column: None,
        reason: reason.clone(),
    })?;
    manifests::parse_documents(text, origin).map_err(|e| SourceError {
        source: origin.to_owned(),
        line: Some(e.line),
        column: Some(e.column),
        reason: format!("not valid YAML: {}", e.reason),
    })
}

/// Files named by `paths`: a file itself, or a directory's `*.yaml`/`*.yml` files (hidden
/// entries skipped, as in a mounted ConfigMap volume), in name order.
fn read_all(paths: &[PathBuf]) -> Vec<(PathBuf, Result<String, String>)> {
    let mut out = Vec::new();
    for path in paths {
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => match list_yaml(path) {
                Ok(files) => out.extend(files.into_iter().map(|f| {
                    let text = read_text(&f);
                    (f, text)
                })),
                Err(e) => out.push((path.clone(), Err(e))),
            },
            Ok(_) => out.push((path.clone(), read_text(path))),
            Err(e) => out.push((path.clone(), Err(format!("cannot read: {e}")))),
        }
    }
    out
}

fn list_yaml(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot list directory: {e}"))?;
    let mut files: Vec<PathBuf> = entries
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

fn read_text(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))
}

/// Re-reads the files every `interval`, installing a new snapshot whenever their contents
/// change, until `shutdown` fires.
/// `installed` is the fingerprint of the contents the active snapshot was built from, so that a
/// change made while the agent started is not missed.
pub async fn watch_files(
    source: FileSource,
    installed: u64,
    shared: Arc<Shared>,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut last = installed;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.changed() => return,
        }
        let reader = source.clone();
        let Ok((contents, fingerprint)) = tokio::task::spawn_blocking(move || {
            let contents = reader.read();
            let fingerprint = contents.fingerprint();
            (contents, fingerprint)
        })
        .await
        else {
            continue;
        };
        if fingerprint != last {
            last = fingerprint;
            tracing::info!("rule files changed; reloading");
            shared.install(source.build(&contents));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_rule_is_valid() {
        let snapshot = builtin_snapshot();
        assert!(
            snapshot.rules.invalid().is_empty(),
            "{:?}",
            snapshot.rules.invalid()
        );
        assert_eq!(snapshot.rules.rules().len(), 1);
    }

    #[test]
    fn reads_directories_and_reports_broken_files() {
        let dir = tempfile::tempdir().unwrap();
        let good = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: good\n  namespace: ops\n  annotations:\n    drift-sentinel.k8s.io/rule: \"true\"\ndata:\n  spec: |\n    mode: enforce\n    namespaces: ['*']\n    selectors: [{apiGroup: apps, kind: Deployment}]\n";
        std::fs::write(dir.path().join("a.yaml"), good).unwrap();
        std::fs::write(dir.path().join("b.yml"), "kind: [broken\n").unwrap();
        std::fs::write(dir.path().join("c.txt"), "ignored").unwrap();
        std::fs::write(dir.path().join(".hidden.yaml"), "kind: [broken\n").unwrap();
        let source = FileSource {
            rules: vec![dir.path().to_owned()],
            namespaces: vec![],
        };
        source.check().unwrap();
        let snapshot = source.build(&source.read());
        assert_eq!(snapshot.rules.rules().len(), 1);
        assert_eq!(snapshot.source_errors.len(), 1);
        assert!(snapshot.source_errors[0].source.ends_with("b.yml"));
        assert_eq!(snapshot.invalid_count(), 1);

        let missing = FileSource {
            rules: vec![dir.path().join("nope.yaml")],
            namespaces: vec![],
        };
        assert!(missing.check().unwrap_err().contains("nope.yaml"));
    }
}
