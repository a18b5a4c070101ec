//! The audit's export files (reference §7–§8, the Gatekeeper seed's disk driver for audit): each run
//! is written to `<channel dir>/<run id>.txt` — a control record `{"id":…,"message":"audit is
//! started"}`, one `violation_audited` record per drifted object, `{"id":…,"message":"audit is
//! completed"}` — and renamed to `<run id>.log` after the completion record, so a reader that
//! consumes only `.log` files never sees a partial run. At most `maxAuditResults` completed runs
//! are kept, oldest removed first; admission segments (`admission-*`) are never touched.
//!
//! A failed write aborts the run: the file is closed and its removal attempted; the next run
//! starts a new file, and first removes an abandoned `.txt` (from an aborted run, or a process
//! that died) — failing until that removal succeeds. A `.txt` locked by a live writer is left
//! alone.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::export::spool::{FreeSpace, PREFIX as ADMISSION_PREFIX};

/// The message of the control record that opens a run.
pub const STARTED: &str = "audit is started";
/// The message of the control record that completes a run.
pub const COMPLETED: &str = "audit is completed";
/// Free space kept on the file system (the seed's reserve).
pub const FREE_SPACE_RESERVE: u64 = 16 * 1024 * 1024;
/// Free space is measured again after this many records.
const FREE_SPACE_EVERY: u64 = 256;

/// Why a run's file could not be written. The text before the first colon is the class the
/// Connection status shows.
#[derive(Debug, thiserror::Error)]
pub enum AuditFileError {
    #[error("cannot remove an abandoned audit file {file}: {source}")]
    Abandoned { file: String, source: io::Error },
    #[error("cannot {action} the audit run file {file}: {source}")]
    Io {
        action: &'static str,
        file: String,
        source: io::Error,
    },
    #[error("free space in {dir} is below the {reserve}-byte reserve: {available} bytes available")]
    DiskFull {
        dir: String,
        available: u64,
        reserve: u64,
    },
}

/// The channel directory the audit writes to.
pub struct AuditFiles {
    dir: PathBuf,
    max_results: usize,
    free: std::sync::Arc<dyn FreeSpace>,
}

/// The file of a run in progress.
pub struct RunFile {
    id: String,
    path: PathBuf,
    file: Option<File>,
    records: u64,
    dir: PathBuf,
    free: std::sync::Arc<dyn FreeSpace>,
}

fn control(id: &str, message: &str) -> Vec<u8> {
    let mut line = serde_json::json!({"id": id, "message": message})
        .to_string()
        .into_bytes();
    line.push(b'\n');
    line
}

/// Whether a file name is an audit run's (`.txt` or `.log`), never an admission segment's.
fn audit_file(path: &Path, extension: &str) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    path.extension().and_then(|e| e.to_str()) == Some(extension)
        && !name.starts_with(ADMISSION_PREFIX)
        && !name.starts_with('.')
}

impl AuditFiles {
    pub fn new(dir: PathBuf, max_results: usize, free: std::sync::Arc<dyn FreeSpace>) -> Self {
        Self {
            dir,
            max_results: max_results.max(1),
            free,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn listed(&self, extension: &str) -> io::Result<Vec<PathBuf>> {
        let mut found = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file() && audit_file(&entry.path(), extension) {
                found.push(entry.path());
            }
        }
        Ok(found)
    }

    /// Removes `.txt` files no live writer holds. Fails while one cannot be removed.
    pub fn remove_abandoned(&self) -> Result<usize, AuditFileError> {
        let io_error = |source| AuditFileError::Io {
            action: "list the directory of",
            file: self.dir.display().to_string(),
            source,
        };
        let mut removed = 0;
        for path in self.listed("txt").map_err(io_error)? {
            let Ok(file) = OpenOptions::new().read(true).write(true).open(&path) else {
                continue; // gone meanwhile
            };
            if file.try_lock().is_err() {
                continue; // a live writer's
            }
            fs::remove_file(&path).map_err(|source| AuditFileError::Abandoned {
                file: path.display().to_string(),
                source,
            })?;
            tracing::warn!(file = %path.display(), "removed the file of an audit run that did not complete");
            removed += 1;
        }
        Ok(removed)
    }

    /// Starts the file of run `id` (a `.txt`, locked), after removing abandoned ones, with its
    /// opening control record.
    pub fn start(&self, id: &str) -> Result<RunFile, AuditFileError> {
        self.remove_abandoned()?;
        let path = self.dir.join(format!("{id}.txt"));
        let io_error = |action| {
            let file = path.display().to_string();
            move |source| AuditFileError::Io {
                action,
                file,
                source,
            }
        };
        let file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(io_error("create"))?;
        file.lock().map_err(io_error("lock"))?;
        let mut run = RunFile {
            id: id.to_owned(),
            path: path.clone(),
            file: Some(file),
            records: 0,
            dir: self.dir.clone(),
            free: self.free.clone(),
        };
        run.check_free_space()?;
        run.write_line(&control(id, STARTED))?;
        Ok(run)
    }

    /// Completed runs (`.log`) beyond `maxAuditResults`, oldest first, are removed.
    pub fn enforce_retention(&self) -> io::Result<usize> {
        let mut runs: Vec<(SystemTime, PathBuf)> = self
            .listed("log")?
            .into_iter()
            .map(|p| {
                let modified = fs::metadata(&p)
                    .and_then(|m| m.modified())
                    .unwrap_or(SystemTime::UNIX_EPOCH);
                (modified, p)
            })
            .collect();
        runs.sort();
        let excess = runs.len().saturating_sub(self.max_results);
        for (_, path) in runs.iter().take(excess) {
            fs::remove_file(path)?;
        }
        Ok(excess)
    }

    /// A run id not used in the directory yet: `base`, or `base-2`, `base-3` …
    pub fn unused_id(&self, base: &str) -> String {
        let taken = |id: &str| {
            self.dir.join(format!("{id}.txt")).exists()
                || self.dir.join(format!("{id}.log")).exists()
        };
        if !taken(base) {
            return base.to_owned();
        }
        (2..)
            .map(|n| format!("{base}-{n}"))
            .find(|id| !taken(id))
            .unwrap_or_else(|| base.to_owned())
    }
}

impl RunFile {
    fn io_error(&self, action: &'static str) -> impl FnOnce(io::Error) -> AuditFileError + use<> {
        let file = self.path.display().to_string();
        move |source| AuditFileError::Io {
            action,
            file,
            source,
        }
    }

    fn check_free_space(&self) -> Result<(), AuditFileError> {
        let available = self
            .free
            .available(&self.dir)
            .map_err(self.io_error("measure free space for"))?;
        if available < FREE_SPACE_RESERVE {
            return Err(AuditFileError::DiskFull {
                dir: self.dir.display().to_string(),
                available,
                reserve: FREE_SPACE_RESERVE,
            });
        }
        Ok(())
    }

    fn write_line(&mut self, line: &[u8]) -> Result<(), AuditFileError> {
        let error = self.io_error("write");
        match self.file.as_mut() {
            Some(file) => file.write_all(line).map_err(error),
            None => Err(error(io::Error::other("the run was aborted"))),
        }
    }

    /// Writes one record (JSON without the newline), as one write.
    pub fn write_record(&mut self, record: &[u8]) -> Result<(), AuditFileError> {
        self.records += 1;
        if self.records.is_multiple_of(FREE_SPACE_EVERY) {
            self.check_free_space()?;
        }
        let mut line = Vec::with_capacity(record.len() + 1);
        line.extend_from_slice(record);
        line.push(b'\n');
        self.write_line(&line)
    }

    /// Writes the completion record, syncs, and publishes the run as `<id>.log`. On failure the
    /// run is aborted (the `.txt` removed, or left for the next run to remove).
    pub fn complete(mut self) -> Result<PathBuf, AuditFileError> {
        let finished = (|| {
            self.write_line(&control(&self.id.clone(), COMPLETED))?;
            if let Some(file) = &self.file {
                file.sync_all().map_err(self.io_error("sync"))?;
            }
            let target = self.path.with_extension("log");
            fs::rename(&self.path, &target).map_err(self.io_error("rename"))?;
            Ok(target)
        })();
        match finished {
            Ok(target) => {
                self.file = None; // unlocks
                Ok(target)
            }
            Err(e) => {
                self.abort();
                Err(e)
            }
        }
    }

    /// Closes the file and attempts to remove it; a file that cannot be removed is removed by
    /// the next run's start.
    pub fn abort(&mut self) {
        if self.file.take().is_some()
            && let Err(e) = fs::remove_file(&self.path)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(file = %self.path.display(), error = %e, "cannot remove the file of an aborted audit run; the next run retries");
        }
    }
}

impl Drop for RunFile {
    fn drop(&mut self) {
        // A run dropped without completing (an error, a panic) never leaves a `.txt` behind
        // that looks alive: it is removed as an aborted run's.
        self.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    struct Plenty;
    impl FreeSpace for Plenty {
        fn available(&self, _: &Path) -> io::Result<u64> {
            Ok(u64::MAX)
        }
    }
    struct Full;
    impl FreeSpace for Full {
        fn available(&self, _: &Path) -> io::Result<u64> {
            Ok(1024)
        }
    }

    use drift_testkit::file_names as names;

    #[test]
    fn a_run_is_published_with_its_control_records_and_retention_keeps_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let files = AuditFiles::new(dir.path().to_path_buf(), 2, Arc::new(Plenty));
        fs::write(
            dir.path().join("admission-20270115T080000.000000Z-aa.log"),
            "x\n",
        )
        .unwrap();
        for (i, id) in ["r1", "r2", "r3"].iter().enumerate() {
            let mut run = files.start(id).unwrap();
            assert!(names(dir.path()).contains(&format!("{id}.txt")));
            run.write_record(
                format!("{{\"eventType\":\"violation_audited\",\"n\":{i}}}").as_bytes(),
            )
            .unwrap();
            let done = run.complete().unwrap();
            assert_eq!(done, dir.path().join(format!("{id}.log")));
            std::thread::sleep(std::time::Duration::from_millis(20));
            files.enforce_retention().unwrap();
        }
        assert_eq!(
            names(dir.path()),
            [
                "admission-20270115T080000.000000Z-aa.log",
                "r2.log",
                "r3.log"
            ]
        );
        let text = fs::read_to_string(dir.path().join("r3.log")).unwrap();
        assert_eq!(
            text,
            "{\"id\":\"r3\",\"message\":\"audit is started\"}\n{\"eventType\":\"violation_audited\",\"n\":2}\n{\"id\":\"r3\",\"message\":\"audit is completed\"}\n"
        );
        assert_eq!(files.unused_id("r3"), "r3-2");
        assert_eq!(files.unused_id("r9"), "r9");
    }

    #[test]
    fn an_aborted_run_leaves_nothing_and_abandoned_files_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let files = AuditFiles::new(dir.path().to_path_buf(), 3, Arc::new(Plenty));
        let mut run = files.start("r1").unwrap();
        run.abort();
        assert!(names(dir.path()).is_empty());
        assert!(
            run.write_record(b"{}").is_err(),
            "an aborted run takes no more records"
        );

        // A run file left by a writer that died (not locked) is removed by the next start; one
        // that a live writer holds is not.
        fs::write(dir.path().join("dead.txt"), "{\"id\":\"dead\"}\n").unwrap();
        let live = files.start("live").unwrap();
        let next = AuditFiles::new(dir.path().to_path_buf(), 3, Arc::new(Plenty));
        let other = next.start("r2").unwrap();
        assert_eq!(names(dir.path()), ["live.txt", "r2.txt"]);
        drop(other);
        drop(live);
        assert!(names(dir.path()).is_empty());
    }

    #[test]
    fn free_space_below_the_reserve_aborts() {
        let dir = tempfile::tempdir().unwrap();
        let files = AuditFiles::new(dir.path().to_path_buf(), 3, Arc::new(Full));
        let error = files.start("r1").err().expect("disk full");
        assert!(error.to_string().starts_with("free space in"), "{error}");
        assert!(names(dir.path()).is_empty());
    }

    #[test]
    fn a_failed_write_aborts_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let files = AuditFiles::new(dir.path().to_path_buf(), 3, Arc::new(Plenty));
        let run = files.start("r1").unwrap();
        // The file vanishes under the writer: completing cannot rename it.
        fs::remove_file(dir.path().join("r1.txt")).unwrap();
        let error = run.complete().expect_err("rename fails");
        assert!(
            error
                .to_string()
                .starts_with("cannot rename the audit run file"),
            "{error}"
        );
        assert!(names(dir.path()).is_empty());
        let _ = run_after(&files);
    }

    fn run_after(files: &AuditFiles) -> PathBuf {
        files.start("r2").unwrap().complete().unwrap()
    }
}
