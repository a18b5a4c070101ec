//! Rule and namespace files as they are rewritten (reference §6 Sources): a file's new content is
//! taken only once it has settled — read twice, a poll apart, with the same bytes, size,
//! modification time and inode, and not changing while it was read — so a file rewritten in
//! place (truncated, then written in pieces) is never loaded half-written. A settled file that
//! is empty or no longer parses keeps the documents last loaded from it, and so does a file
//! that never settles: such a file is *stale* (WARN naming it and why, `/status`, gauge). A file
//! that is removed removes its documents.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use drift_engine::manifests;
use serde_json::Value;

use crate::state::{SourceError, StaleSource};

/// What identifies one version of a file without keeping its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    pub fingerprint: u64,
    pub len: u64,
    pub modified: Option<SystemTime>,
    pub inode: u64,
}

/// One poll's read of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    Text {
        text: String,
        observation: Observation,
        /// The file changed while it was read (its metadata differed before and after).
        racing: bool,
    },
    /// The file is not there (a configured path that does not exist).
    Missing(String),
    /// It is there but cannot be read.
    Failed(String),
}

#[derive(Debug, Clone)]
struct Loaded {
    fingerprint: u64,
    documents: Vec<Value>,
}

#[derive(Debug, Clone, Default)]
struct Tracked {
    /// The previous poll's observation, to tell whether the file has settled.
    last_seen: Option<Observation>,
    /// The documents last loaded: what is in force.
    loaded: Option<Loaded>,
    /// The first poll of the current run of polls that saw the file changing.
    unsettled_since: Option<SystemTime>,
    /// Why the loaded documents are kept instead of what the file holds.
    stale: Option<StaleSource>,
    /// Why the file has no documents at all (never loaded).
    error: Option<SourceError>,
}

/// Checks the documents of a file beyond YAML (rule files: every rule compiles).
pub type Validate = fn(&Path, &[Value]) -> Result<(), String>;

/// A file's content is taken only once its modification time is at least this old (besides
/// being unchanged since the previous poll), so a writer that pauses briefly mid-file is not
/// taken for one that is done.
pub const MIN_AGE: Duration = Duration::from_secs(1);

/// The files of one kind (rule files, or namespace files), each tracked by path.
#[derive(Debug)]
pub struct TrackedFiles {
    files: BTreeMap<PathBuf, Tracked>,
    /// How long a file may keep changing before it is reported stale.
    settle_limit: Duration,
    validate: Validate,
}

/// The hash of a file's text, to compare versions without keeping them.
pub fn fingerprint(text: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

fn source_error(
    path: &Path,
    line: Option<usize>,
    column: Option<usize>,
    reason: String,
) -> SourceError {
    SourceError {
        source: path.display().to_string(),
        line,
        column,
        reason,
    }
}

fn yaml_error(path: &Path, e: manifests::ManifestError) -> SourceError {
    source_error(
        path,
        Some(e.line),
        Some(e.column),
        format!("not valid YAML: {}", e.reason),
    )
}

/// Parses a file's text; an empty file (only blanks and comments) is an error too, since a
/// file caught between truncation and its first write is empty.
fn parse(path: &Path, text: &str) -> Result<Vec<Value>, SourceError> {
    let origin = path.display().to_string();
    let documents = manifests::parse_documents(text, &origin).map_err(|e| yaml_error(path, e))?;
    if documents.iter().all(Value::is_null) {
        return Err(source_error(path, None, None, "the file is empty".into()));
    }
    Ok(documents)
}

impl TrackedFiles {
    pub fn new(settle_limit: Duration, validate: Validate) -> Self {
        Self {
            files: BTreeMap::new(),
            settle_limit,
            validate,
        }
    }

    /// At startup: every file as it is now (there is nothing older to keep).
    pub fn load_initial(&mut self, reads: Vec<(PathBuf, Read)>) {
        for (path, read) in reads {
            let mut tracked = Tracked::default();
            match read {
                Read::Text {
                    text, observation, ..
                } => {
                    tracked.last_seen = Some(observation);
                    match manifests::parse_documents(&text, &path.display().to_string()) {
                        Ok(documents) => {
                            tracked.loaded = Some(Loaded {
                                fingerprint: observation.fingerprint,
                                documents,
                            });
                        }
                        Err(e) => tracked.error = Some(yaml_error(&path, e)),
                    }
                }
                Read::Missing(reason) | Read::Failed(reason) => {
                    tracked.error = Some(source_error(&path, None, None, reason));
                }
            }
            self.files.insert(path, tracked);
        }
    }

    /// One poll: the reads of every file there is now. Returns whether what a snapshot shows
    /// (documents, errors, stale files) changed.
    pub fn update(&mut self, reads: Vec<(PathBuf, Read)>, now: SystemTime) -> bool {
        let present: std::collections::BTreeSet<&PathBuf> = reads.iter().map(|(p, _)| p).collect();
        let before = self.files.len();
        // A file no longer listed (removed from its directory) takes its documents with it.
        self.files.retain(|path, _| present.contains(path));
        let mut changed = self.files.len() != before;
        for (path, read) in reads {
            let mut tracked = self.files.remove(&path).unwrap_or_default();
            changed |= update_one(&path, &mut tracked, read, now, self);
            self.files.insert(path, tracked);
        }
        changed
    }

    /// The documents in force, by file, in path order.
    pub fn documents(&self) -> impl Iterator<Item = (&Path, &[Value])> {
        self.files.iter().filter_map(|(path, tracked)| {
            tracked
                .loaded
                .as_ref()
                .map(|l| (path.as_path(), l.documents.as_slice()))
        })
    }

    /// Files that provide nothing and why.
    pub fn errors(&self) -> Vec<SourceError> {
        self.files
            .values()
            .filter_map(|t| t.error.clone())
            .collect()
    }

    /// Files whose last loaded documents are kept, since when and why.
    pub fn stale(&self) -> Vec<StaleSource> {
        self.files
            .values()
            .filter_map(|t| t.stale.clone())
            .collect()
    }
}

/// Applies one read to one file's state; returns whether what a snapshot shows changed.
fn update_one(
    path: &Path,
    tracked: &mut Tracked,
    read: Read,
    now: SystemTime,
    files: &TrackedFiles,
) -> bool {
    let settle_limit = files.settle_limit;
    let (text, observation, racing) = match read {
        Read::Text {
            text,
            observation,
            racing,
        } => (text, observation, racing),
        Read::Missing(reason) => {
            // Removed: its documents go.
            let error = Some(source_error(path, None, None, reason));
            let changed = tracked.loaded.is_some() || tracked.error != error;
            *tracked = Tracked {
                error,
                ..Tracked::default()
            };
            return changed;
        }
        Read::Failed(reason) => {
            tracked.last_seen = None;
            if tracked.loaded.is_some() {
                return mark_stale(path, tracked, reason, now);
            }
            let error = Some(source_error(path, None, None, reason));
            let changed = tracked.error != error;
            tracked.error = error;
            return changed;
        }
    };
    let old_enough = observation
        .modified
        // A modification time in the future cannot be aged: equality across polls decides.
        .is_none_or(|m| now.duration_since(m).map_or(true, |age| age >= MIN_AGE));
    let settled = !racing && old_enough && tracked.last_seen == Some(observation);
    tracked.last_seen = Some(observation);
    if !settled {
        // Being written: what is in force stays; after a while the file is stale.
        let since = *tracked.unsettled_since.get_or_insert(now);
        let changing_for = now.duration_since(since).unwrap_or_default();
        if changing_for >= settle_limit && tracked.stale.is_none() && tracked.loaded.is_some() {
            let reason = format!(
                "being rewritten: it has not stayed unchanged for {}",
                humantime::format_duration(settle_limit)
            );
            return mark_stale(path, tracked, reason, now);
        }
        return false;
    }
    tracked.unsettled_since = None;
    if tracked
        .loaded
        .as_ref()
        .is_some_and(|l| l.fingerprint == observation.fingerprint)
    {
        // Back to what is loaded.
        return tracked.stale.take().is_some();
    }
    let parsed =
        parse(path, &text).and_then(|documents| match (files.validate)(path, &documents) {
            // A file that loaded before and now holds a rule that does not compile keeps what it
            // had, as a file that does not parse does: it may be half-written.
            Err(reason) if tracked.loaded.is_some() => Err(source_error(path, None, None, reason)),
            _ => Ok(documents),
        });
    match parsed {
        Ok(documents) => {
            tracked.loaded = Some(Loaded {
                fingerprint: observation.fingerprint,
                documents,
            });
            tracked.error = None;
            if tracked.stale.take().is_some() {
                tracing::info!(file = %path.display(), "rule file loads again");
            }
            true
        }
        Err(error) if tracked.loaded.is_some() => mark_stale(path, tracked, error.to_string(), now),
        // Never loaded: nothing to keep. An empty new file simply has no documents.
        Err(error) => {
            let error = manifests::parse_documents(&text, "")
                .is_err()
                .then_some(error);
            let changed = tracked.error != error;
            tracked.error = error;
            changed
        }
    }
}

/// Keeps the loaded documents of a file that cannot be loaded now; a WARN when it becomes stale
/// or the reason changes.
fn mark_stale(path: &Path, tracked: &mut Tracked, reason: String, now: SystemTime) -> bool {
    if tracked.stale.as_ref().is_some_and(|s| s.reason == reason) {
        return false;
    }
    let since = tracked.stale.as_ref().map_or_else(
        || humantime::format_rfc3339_seconds(now).to_string(),
        |s| s.since.clone(),
    );
    tracing::warn!(
        file = %path.display(),
        error = %reason,
        "rule file cannot be loaded; keeping what was last loaded from it"
    );
    tracked.stale = Some(StaleSource {
        source: path.display().to_string(),
        since,
        reason,
    });
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: r\n  namespace: ops\n  annotations:\n    drift-sentinel.k8s.io/rule: \"true\"\ndata:\n  spec: |\n    mode: enforce\n    namespaces: ['*']\n    selectors: [{kind: Deployment}]\n";

    fn no_check(_: &Path, _: &[Value]) -> Result<(), String> {
        Ok(())
    }

    fn files() -> TrackedFiles {
        TrackedFiles::new(Duration::from_secs(1), no_check)
    }

    fn text(body: &str, modified_ms: u64) -> Read {
        Read::Text {
            text: body.to_owned(),
            observation: Observation {
                fingerprint: fingerprint(body),
                len: body.len() as u64,
                modified: Some(SystemTime::UNIX_EPOCH + Duration::from_millis(modified_ms)),
                inode: 1,
            },
            racing: false,
        }
    }

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + seconds)
    }

    fn path() -> PathBuf {
        PathBuf::from("/rules/r.yaml")
    }

    fn names(files: &TrackedFiles) -> Vec<usize> {
        files.documents().map(|(_, d)| d.len()).collect()
    }

    fn loaded_text(files: &TrackedFiles) -> Option<u64> {
        files
            .files
            .get(&path())
            .and_then(|t| t.loaded.as_ref())
            .map(|l| l.fingerprint)
    }

    #[test]
    fn a_change_is_taken_once_it_has_settled() {
        let mut files = files();
        files.load_initial(vec![(path(), text(RULE, 1))]);
        assert_eq!(names(&files), [1]);
        let edited = RULE.replace("enforce", "warn");
        // First seen: not yet.
        assert!(!files.update(vec![(path(), text(&edited, 2))], at(0)));
        assert_eq!(loaded_text(&files), Some(fingerprint(RULE)));
        // The same on the next poll: taken.
        assert!(files.update(vec![(path(), text(&edited, 2))], at(1)));
        assert_eq!(loaded_text(&files), Some(fingerprint(&edited)));
        assert!(files.stale().is_empty());
    }

    #[test]
    fn half_written_empty_or_broken_content_keeps_what_was_loaded() {
        let mut files = files();
        files.load_initial(vec![(path(), text(RULE, 1))]);
        // Prefixes seen while a writer rewrites the file: each differs from the last poll.
        for (i, cut) in [0, 40, 120, 200].into_iter().enumerate() {
            let read = text(&RULE[..cut], 10 + i as u64);
            files.update(
                vec![(path(), read)],
                at(0) + Duration::from_millis(100 * i as u64),
            );
            assert_eq!(loaded_text(&files), Some(fingerprint(RULE)), "cut at {cut}");
        }
        // Still changing after the settle limit: stale, documents kept.
        let changed = files.update(vec![(path(), text(&RULE[..60], 20))], at(2));
        assert!(changed);
        let stale = files.stale();
        assert_eq!(stale.len(), 1, "{stale:?}");
        assert!(stale[0].reason.contains("being rewritten"), "{stale:?}");
        assert_eq!(loaded_text(&files), Some(fingerprint(RULE)));

        // Settled on an empty file: stale (empty), kept.
        files.update(vec![(path(), text("", 30))], at(3));
        assert!(files.update(vec![(path(), text("", 30))], at(4)));
        assert!(
            files.stale()[0].reason.contains("empty"),
            "{:?}",
            files.stale()
        );
        // Since when: from the first time it went stale.
        let since = files.stale()[0].since.clone();
        assert_eq!(since, humantime::format_rfc3339_seconds(at(2)).to_string());
        // Settled on YAML that does not parse: stale with the parse error.
        files.update(vec![(path(), text("kind: [broken\n", 40))], at(5));
        files.update(vec![(path(), text("kind: [broken\n", 40))], at(6));
        assert!(
            files.stale()[0].reason.contains("not valid YAML"),
            "{:?}",
            files.stale()
        );
        assert_eq!(names(&files), [1]);
        assert!(files.errors().is_empty());

        // Settled on a good version again: loaded, not stale.
        let good = RULE.replace("enforce", "dry-run");
        files.update(vec![(path(), text(&good, 50))], at(7));
        assert!(files.update(vec![(path(), text(&good, 50))], at(8)));
        assert!(files.stale().is_empty());
        assert_eq!(loaded_text(&files), Some(fingerprint(&good)));
    }

    #[test]
    fn a_file_modified_less_than_a_second_ago_is_not_settled() {
        let mut files = files();
        files.load_initial(vec![(path(), text(RULE, 1))]);
        let now = SystemTime::UNIX_EPOCH + Duration::from_millis(1_500);
        let edited = RULE.replace("enforce", "warn");
        files.update(vec![(path(), text(&edited, 1_000))], now);
        files.update(vec![(path(), text(&edited, 1_000))], now);
        assert_eq!(loaded_text(&files), Some(fingerprint(RULE)));
        files.update(
            vec![(path(), text(&edited, 1_000))],
            now + Duration::from_millis(500),
        );
        assert_eq!(loaded_text(&files), Some(fingerprint(&edited)));
    }

    #[test]
    fn a_loaded_file_whose_rules_no_longer_validate_keeps_what_it_had() {
        fn check(_: &Path, documents: &[Value]) -> Result<(), String> {
            match documents.iter().any(|d| d.to_string().contains("typo")) {
                true => Err("rule ConfigMap ops/r: unknown field typo".into()),
                false => Ok(()),
            }
        }
        let mut files = TrackedFiles::new(Duration::from_secs(1), check);
        let other = PathBuf::from("/rules/new.yaml");
        files.load_initial(vec![(path(), text(RULE, 1))]);
        let typo = format!("{RULE}    typo: 1\n");
        files.update(
            vec![(path(), text(&typo, 2)), (other.clone(), text(&typo, 2))],
            at(0),
        );
        files.update(
            vec![(path(), text(&typo, 2)), (other, text(&typo, 2))],
            at(1),
        );
        assert_eq!(loaded_text(&files), Some(fingerprint(RULE)));
        assert!(files.stale()[0].reason.contains("unknown field typo"));
        // A new file is loaded as it is (its invalid rule is reported like any other).
        assert_eq!(names(&files), [1, 1]);
        assert!(files.errors().is_empty());
    }

    #[test]
    fn a_read_racing_a_write_is_not_settled() {
        let mut files = TrackedFiles::new(Duration::from_secs(60), no_check);
        files.load_initial(vec![(path(), text(RULE, 1))]);
        let mut racing = text(&RULE[..50], 2);
        if let Read::Text { racing: r, .. } = &mut racing {
            *r = true;
        }
        files.update(vec![(path(), racing.clone())], at(0));
        files.update(vec![(path(), racing)], at(1));
        assert_eq!(loaded_text(&files), Some(fingerprint(RULE)));
    }

    #[test]
    fn removed_files_take_their_documents_and_new_broken_files_are_errors() {
        let mut files = files();
        let other = PathBuf::from("/rules/other.yaml");
        files.load_initial(vec![
            (path(), text(RULE, 1)),
            (other.clone(), text(RULE, 1)),
        ]);
        assert_eq!(names(&files), [1, 1]);
        // other.yaml gone from the directory; r.yaml unchanged.
        assert!(files.update(vec![(path(), text(RULE, 1))], at(0)));
        assert_eq!(names(&files), [1]);
        // A configured file removed: its documents go, and it is an error.
        assert!(files.update(
            vec![(path(), Read::Missing("cannot read: gone".into()))],
            at(1)
        ));
        assert!(names(&files).is_empty());
        assert_eq!(files.errors().len(), 1);
        // A new file that never parsed: an error, nothing to keep.
        let broken = PathBuf::from("/rules/broken.yaml");
        files.update(vec![(broken.clone(), text("kind: [x\n", 1))], at(2));
        files.update(vec![(broken, text("kind: [x\n", 1))], at(3));
        assert!(
            files
                .errors()
                .iter()
                .any(|e| e.source.ends_with("broken.yaml"))
        );
        assert!(files.stale().is_empty());
    }
}
