//! Where rules and namespaces come from when the agent runs offline: files given with
//! `--rules` and `--namespaces` (re-read when they change; see `rule_files` for how a file being
//! rewritten is handled), or the built-in default rule.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use drift_api::status::RuleSourceKind;
use drift_engine::manifests;
use drift_engine::{RuleId, RuleSet, RuleSource, SpecText};
use tokio::sync::watch;

use crate::rule_files::{Observation, Read, TrackedFiles, fingerprint};
use crate::state::{Shared, Snapshot, SourceError};

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
        spec: SpecText::Yaml(DEFAULT_RULE_SPEC.to_owned()),
        origin: Some("built-in".into()),
    };
    let mut specs = BTreeMap::new();
    specs.insert(source.id.clone(), source.spec.clone());
    Snapshot {
        rules: RuleSet::build([source]),
        specs,
        ..Snapshot::empty(RuleSourceKind::BuiltIn)
    }
}

/// Rule and namespace files.
#[derive(Debug, Clone)]
pub struct FileSource {
    pub rules: Vec<PathBuf>,
    pub namespaces: Vec<PathBuf>,
    /// Which rules are cluster rules (offline: every one, unless --cluster-rule-namespaces).
    pub tier_policy: drift_engine::rule::TierPolicy,
}

/// What the agent holds of every file of a source, kept between polls.
#[derive(Debug)]
pub struct FileState {
    rules: TrackedFiles,
    namespaces: TrackedFiles,
}

/// How many polls a file may keep changing before it is reported stale (at least a second).
const SETTLE_POLLS: u32 = 5;

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

    pub fn kind(&self) -> RuleSourceKind {
        RuleSourceKind::Files {
            rules: self.rules.iter().map(|p| p.display().to_string()).collect(),
            namespaces: self
                .namespaces
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
        }
    }

    /// Reads every file as it is now, for the first snapshot. `interval` is the poll period
    /// of [`watch_files`].
    pub fn load(&self, interval: Duration) -> FileState {
        let settle_limit = (interval * SETTLE_POLLS).max(Duration::from_secs(1));
        let mut state = FileState {
            rules: TrackedFiles::new(settle_limit, rules_compile),
            namespaces: TrackedFiles::new(settle_limit, |_, _| Ok(())),
        };
        state.rules.load_initial(read_all(&self.rules));
        state.namespaces.load_initial(read_all(&self.namespaces));
        state
    }

    /// Reads every file again; returns whether the snapshot must be rebuilt.
    fn poll(&self, state: &mut FileState, reads: Reads, now: SystemTime) -> bool {
        let rules = state.rules.update(reads.rules, now);
        let namespaces = state.namespaces.update(reads.namespaces, now);
        rules || namespaces
    }

    /// The snapshot of what is in force. A file that provides nothing is a source error; its
    /// rules are not applied, the other files' rules are.
    pub fn build(&self, state: &FileState) -> Snapshot {
        let mut sources = Vec::new();
        for (path, documents) in state.rules.documents() {
            let origin = path.display().to_string();
            sources.extend(manifests::rule_sources(documents, &origin));
        }
        let mut namespaces = manifests::Namespaces::new();
        for (_, documents) in state.namespaces.documents() {
            namespaces.extend(manifests::namespaces(documents));
        }
        let mut source_errors = state.rules.errors();
        source_errors.extend(state.namespaces.errors());
        let mut stale_sources = state.rules.stale();
        stale_sources.extend(state.namespaces.stale());
        if self.rules.is_empty() {
            // Namespace files only: the built-in default rule applies.
            let builtin = builtin_snapshot();
            return Snapshot {
                namespaces,
                source_errors,
                stale_sources,
                kind: self.kind(),
                ..builtin
            };
        }
        Snapshot {
            stale_sources,
            ..build_snapshot(
                sources,
                namespaces,
                source_errors,
                self.kind(),
                &self.tier_policy,
            )
        }
    }
}

/// Every rule of a rule file compiles (the engine decides; the first error is the reason).
fn rules_compile(path: &Path, documents: &[serde_json::Value]) -> Result<(), String> {
    let origin = path.display().to_string();
    for source in manifests::rule_sources(documents, &origin) {
        drift_engine::rule::compile(&source).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The snapshot of a set of rule sources: the one path from any source to the rule set.
pub fn build_snapshot(
    sources: Vec<RuleSource>,
    namespaces: manifests::Namespaces,
    source_errors: Vec<SourceError>,
    kind: RuleSourceKind,
    policy: &drift_engine::rule::TierPolicy,
) -> Snapshot {
    let specs = sources
        .iter()
        .map(|s| (s.id.clone(), s.spec.clone()))
        .collect();
    Snapshot {
        rules: RuleSet::build_with(sources, policy),
        namespaces,
        source_errors,
        stale_sources: Vec::new(),
        stale_rules: Vec::new(),
        kind,
        loaded_at: SystemTime::now(),
        specs,
    }
}

/// One poll's reads of both kinds of files.
struct Reads {
    rules: Vec<(PathBuf, Read)>,
    namespaces: Vec<(PathBuf, Read)>,
}

/// Files named by `paths`: a file itself, or a directory's `*.yaml`/`*.yml` files (hidden
/// entries skipped, as in a mounted ConfigMap volume), in name order.
fn read_all(paths: &[PathBuf]) -> Vec<(PathBuf, Read)> {
    let mut out = Vec::new();
    for path in paths {
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => match list_yaml(path) {
                Ok(files) => out.extend(files.into_iter().filter_map(|f| match read_file(&f) {
                    // Listed, then removed before it was read: removed.
                    Read::Missing(_) => None,
                    read => Some((f, read)),
                })),
                Err(e) => out.push((path.clone(), Read::Failed(e))),
            },
            _ => out.push((path.clone(), read_file(path))),
        }
    }
    out
}

fn list_yaml(dir: &Path) -> Result<Vec<PathBuf>, String> {
    drift_load::list_dir(dir, drift_load::YAML).map_err(|e| match e {
        // The path is the file's own name in /status and the logs.
        drift_load::LoadError::List { error, .. } => format!("cannot list directory: {error}"),
        other => other.to_string(),
    })
}

/// Reads one file with its metadata before and after, so that a read overlapping a write is
/// known as such.
fn read_file(path: &Path) -> Read {
    use std::os::unix::fs::MetadataExt as _;
    let failed = |e: std::io::Error| {
        let reason = format!("cannot read: {e}");
        if e.kind() == std::io::ErrorKind::NotFound {
            Read::Missing(reason)
        } else {
            Read::Failed(reason)
        }
    };
    let stamp = |m: &std::fs::Metadata| (m.len(), m.modified().ok(), m.ino());
    let before = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) => return failed(e),
    };
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => return failed(e),
    };
    let after = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) => return failed(e),
    };
    let racing = stamp(&before) != stamp(&after) || text.len() as u64 != after.len();
    Read::Text {
        observation: Observation {
            fingerprint: fingerprint(&text),
            len: after.len(),
            modified: after.modified().ok(),
            inode: after.ino(),
        },
        racing,
        text,
    }
}

/// Re-reads the files every `interval`, installing a new snapshot whenever what is in force
/// (or stale) changes, until `shutdown` fires.
pub async fn watch_files(
    source: FileSource,
    mut state: FileState,
    shared: Arc<Shared>,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.changed() => return,
        }
        let reader = source.clone();
        let Ok(reads) = tokio::task::spawn_blocking(move || Reads {
            rules: read_all(&reader.rules),
            namespaces: read_all(&reader.namespaces),
        })
        .await
        else {
            continue;
        };
        if source.poll(&mut state, reads, SystemTime::now()) {
            tracing::info!("rule files changed; reloading");
            shared.install(source.build(&state));
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
            tier_policy: Default::default(),
        };
        source.check().unwrap();
        let snapshot = source.build(&source.load(Duration::from_secs(1)));
        assert_eq!(snapshot.rules.rules().len(), 1);
        assert_eq!(snapshot.source_errors.len(), 1);
        assert!(snapshot.source_errors[0].source.ends_with("b.yml"));
        assert_eq!(snapshot.invalid_count(), 1);

        let missing = FileSource {
            rules: vec![dir.path().join("nope.yaml")],
            namespaces: vec![],
            tier_policy: Default::default(),
        };
        assert!(missing.check().unwrap_err().contains("nope.yaml"));
    }
}
