//! The disk driver of violation export (reference §7, the Gatekeeper seed's disk driver): JSONL
//! segments `admission-<timestamp>-<random>.open`, locked by their writer, flushed, closed and
//! renamed to `.log` when full (1 MiB, 1,000 records) or old (1 minute); retention of completed
//! segments by count, total size and age; a free-space reserve; and recovery of segments left
//! `.open` by a writer that died. A reader that consumes only `.log` files never sees a partial
//! record.
//!
//! The clock and the free-space probe are injected, so that tests control time and disk space.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The fixed limits of the seed's table.
#[derive(Debug, Clone)]
pub struct Limits {
    pub segment_bytes: u64,
    pub segment_records: usize,
    pub segment_age: Duration,
    pub retained_segments: usize,
    pub retained_bytes: u64,
    pub retained_age: Duration,
    pub free_space_reserve: u64,
    pub record_bytes: usize,
    /// Completed segments removed per cleanup pass, at most.
    pub cleanup_batch: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            segment_bytes: 1024 * 1024,
            segment_records: 1000,
            segment_age: Duration::from_secs(60),
            retained_segments: 20,
            retained_bytes: 20 * 1024 * 1024,
            retained_age: Duration::from_secs(24 * 3600),
            free_space_reserve: 16 * 1024 * 1024,
            record_bytes: 64 * 1024,
            cleanup_batch: 256,
        }
    }
}

/// Time, injectable.
pub trait Clock: Send + Sync {
    fn now(&self) -> SystemTime;
}

/// The system clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// Free bytes on the spool's file system, injectable.
pub trait FreeSpace: Send + Sync {
    fn available(&self, dir: &Path) -> io::Result<u64>;
}

/// Why a record was not written. The text before the first colon names the class of the
/// problem (the Connection status coalesces errors to it), so it never holds a file name that
/// changes from one segment to the next.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("record of {size} bytes is over the {limit}-byte limit")]
    TooLarge { size: usize, limit: usize },
    #[error("free space in {dir} is below the {reserve}-byte reserve: {available} bytes available")]
    DiskFull {
        dir: String,
        available: u64,
        reserve: u64,
    },
    #[error("cannot {action} in spool directory {dir}: {source}")]
    Io {
        action: &'static str,
        dir: String,
        source: io::Error,
    },
}

/// The statvfs(2) free-space probe: bytes available to an unprivileged writer.
pub struct StatvfsFreeSpace;

impl FreeSpace for StatvfsFreeSpace {
    fn available(&self, dir: &Path) -> io::Result<u64> {
        let stat = rustix::fs::statvfs(dir).map_err(io::Error::from)?;
        Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
    }
}

/// Sizes of the spool, for metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SpoolStats {
    /// Completed segments.
    pub segments: usize,
    /// Bytes of completed segments and the open one.
    pub bytes: u64,
}

struct OpenSegment {
    path: PathBuf,
    file: File,
    /// Bytes of complete records: the file is cut back to this before it is published, so a
    /// failed write never leaves a partial line in a `.log`.
    bytes: u64,
    records: usize,
    opened_at: SystemTime,
    /// Takes no more records (full, or a write failed); completed as soon as the rename
    /// succeeds, retried on every tick.
    sealed: bool,
}

/// One writer's spool directory.
pub struct Spool {
    dir: PathBuf,
    limits: Limits,
    clock: Arc<dyn Clock>,
    free: Arc<dyn FreeSpace>,
    open: Option<OpenSegment>,
    /// Start time of the last segment: names must sort in creation order even when the clock
    /// stands still or steps back.
    last_start: Option<SystemTime>,
    /// Completed segments and their bytes as of the last directory scan plus what this writer
    /// completed since. Others (a reader) only ever remove segments, so this is an upper
    /// bound: while it is within the limits, appending needs no directory scan.
    completed: SpoolStats,
    /// Whether any admission file was seen by the last scan (the janitor runs only then).
    has_files: bool,
    /// A problem after a record was written (completing its segment failed): the record is
    /// safe, the problem is reported through [`Spool::take_deferred_error`].
    deferred_error: Option<SpoolError>,
    /// Free bytes as last measured, less what was written since: the file system is asked
    /// once per batch, not once per record.
    free_estimate: Option<u64>,
    /// The record being written, with its newline (reused).
    line: Vec<u8>,
}

/// What recovery found at startup.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Abandoned `.open` segments published as `.log` (truncated to complete records).
    pub published: usize,
    /// Empty abandoned segments and `.deleting` remnants removed.
    pub removed: usize,
    /// Segments skipped because a live writer holds their lock.
    pub locked: usize,
}

/// Every admission segment's name starts with it (audit files never do).
pub const PREFIX: &str = "admission-";

/// `20270115T080000.000000Z`: RFC 3339 basic format, sortable, file-name safe.
fn timestamp(time: SystemTime) -> String {
    humantime::format_rfc3339_micros(time)
        .to_string()
        .replace([':', '-'], "")
}

/// The creation time a segment's name records (the writer's clock, not the file's mtime).
pub fn created_at(path: &Path) -> Option<SystemTime> {
    let name = path.file_name()?.to_str()?.strip_prefix(PREFIX)?;
    let stamp = name.split('-').next()?;
    if stamp.len() < 16 || !stamp.is_ascii() {
        return None;
    }
    let text = format!(
        "{}-{}-{}T{}:{}:{}",
        &stamp[0..4],
        &stamp[4..6],
        &stamp[6..8],
        &stamp[9..11],
        &stamp[11..13],
        &stamp[13..]
    );
    humantime::parse_rfc3339(&text).ok()
}

fn random_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    format!("{:016x}", hasher.finish())
}

impl Spool {
    /// Opens (creating, mode 0700) the spool directory and recovers what a dead writer left.
    pub fn open(
        dir: PathBuf,
        limits: Limits,
        clock: Arc<dyn Clock>,
        free: Arc<dyn FreeSpace>,
    ) -> io::Result<(Self, Recovery)> {
        // Records hold identities and policy data: a directory made here is the writer's
        // alone (0700). One that exists keeps its mode (reference §7: never change the mode of a
        // directory the agent did not create), and is never reached through a link.
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        if fs::symlink_metadata(&dir)?.file_type().is_symlink() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is a symbolic link: not used for export files",
                    dir.display()
                ),
            ));
        }
        let spool = Self {
            dir,
            limits,
            clock,
            free,
            open: None,
            last_start: None,
            completed: SpoolStats::default(),
            has_files: false,
            deferred_error: None,
            free_estimate: None,
            line: Vec::new(),
        };
        let mut spool = spool;
        let recovery = spool.recover()?;
        spool.enforce_retention(0)?;
        Ok((spool, recovery))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn entries(&self, suffix: &str) -> io::Result<Vec<PathBuf>> {
        let mut paths: Vec<PathBuf> = fs::read_dir(&self.dir)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(PREFIX) && n.ends_with(suffix))
            })
            .collect();
        paths.sort();
        Ok(paths)
    }

    fn recover(&self) -> io::Result<Recovery> {
        let mut recovery = Recovery::default();
        for path in self.entries(".deleting")? {
            fs::remove_file(&path)?;
            recovery.removed += 1;
        }
        for path in self.entries(".open")? {
            let file = OpenOptions::new().read(true).write(true).open(&path)?;
            if file.try_lock().is_err() {
                recovery.locked += 1;
                continue;
            }
            let content = fs::read(&path)?;
            let complete = content
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            if complete == 0 {
                fs::remove_file(&path)?;
                recovery.removed += 1;
                continue;
            }
            file.set_len(complete as u64)?;
            file.sync_all()?;
            fs::rename(&path, path.with_extension("log"))?;
            recovery.published += 1;
        }
        Ok(recovery)
    }

    fn start_segment(&mut self) -> io::Result<()> {
        let now = self.clock.now();
        let mut named = now;
        if let Some(last) = self.last_start
            && named <= last
        {
            named = last + Duration::from_micros(1);
        }
        self.last_start = Some(named);
        let name = format!("{PREFIX}{}-{}.open", timestamp(named), random_suffix());
        let path = self.dir.join(name);
        let file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .open(&path)?;
        file.lock()?;
        self.open = Some(OpenSegment {
            path,
            file,
            bytes: 0,
            records: 0,
            opened_at: now,
            sealed: false,
        });
        Ok(())
    }

    /// Writes records (JSON without the newline). Each is checked against the size limit and
    /// the free-space reserve; the segment rotates when full.
    pub fn append(&mut self, record: &[u8]) -> Result<(), SpoolError> {
        self.append_inner(record)
    }

    /// A problem that happened after a record was written (its segment could not be
    /// completed yet), once.
    pub fn take_deferred_error(&mut self) -> Option<SpoolError> {
        self.deferred_error.take()
    }

    fn io_error(&self, action: &'static str) -> impl FnOnce(io::Error) -> SpoolError + use<> {
        let dir = self.dir.display().to_string();
        move |source| SpoolError::Io {
            action,
            dir,
            source,
        }
    }

    fn append_inner(&mut self, record: &[u8]) -> Result<(), SpoolError> {
        if record.len() > self.limits.record_bytes {
            return Err(SpoolError::TooLarge {
                size: record.len(),
                limit: self.limits.record_bytes,
            });
        }
        let available = match self.free_estimate {
            Some(estimate) => estimate,
            None => {
                let measured = self
                    .free
                    .available(&self.dir)
                    .map_err(self.io_error("measure free space"))?;
                self.free_estimate = Some(measured);
                measured
            }
        };
        if available < self.limits.free_space_reserve + record.len() as u64 + 1 {
            return Err(SpoolError::DiskFull {
                dir: self.dir.display().to_string(),
                available,
                reserve: self.limits.free_space_reserve,
            });
        }
        let needs_rotation = self.open.as_ref().is_some_and(|s| {
            s.sealed || s.bytes + record.len() as u64 + 1 > self.limits.segment_bytes
        });
        if needs_rotation {
            self.finish_segment()
                .map_err(self.io_error("complete a segment"))?;
        }
        // Room for the pending record within the retained total, oldest segments first. The
        // directory is scanned only when the cached upper bound says a limit may be reached.
        let pending = record.len() as u64 + 1;
        let open_bytes = self.open.as_ref().map_or(0, |s| s.bytes);
        if self.completed.bytes + open_bytes + pending > self.limits.retained_bytes
            || self.completed.segments > self.limits.retained_segments
        {
            self.enforce_retention(pending)
                .map_err(self.io_error("remove old segments"))?;
        }
        if self.open.is_none() {
            self.start_segment()
                .map_err(self.io_error("create a segment"))?;
        }
        let Some(segment) = self.open.as_mut() else {
            return Ok(());
        };
        // One write per record: the line and its newline together.
        self.line.clear();
        self.line.extend_from_slice(record);
        self.line.push(b'\n');
        let written = segment.file.write_all(&self.line);
        if let Err(source) = written {
            // Possibly a partial line: no more records here; completing the segment cuts it.
            segment.sealed = true;
            let _ = self.finish_segment();
            return Err(SpoolError::Io {
                action: "write a record",
                dir: self.dir.display().to_string(),
                source,
            });
        }
        segment.bytes += pending;
        segment.records += 1;
        self.has_files = true;
        self.free_estimate = self.free_estimate.map(|e| e.saturating_sub(pending));
        if segment.records >= self.limits.segment_records {
            segment.sealed = true;
            if let Err(e) = self.finish_segment() {
                self.deferred_error = Some(self.io_error("complete a segment")(e));
            }
        }
        Ok(())
    }

    /// Whether the spool holds admission files (as of the last scan or write).
    pub fn has_files(&self) -> bool {
        self.has_files || self.open.is_some()
    }

    /// Completed segments and bytes (the open segment's included) as of the last scan.
    pub fn stats(&self) -> SpoolStats {
        SpoolStats {
            segments: self.completed.segments,
            bytes: self.completed.bytes + self.open.as_ref().map_or(0, |s| s.bytes),
        }
    }

    /// After a batch: completes the open segment when it is full or older than the segment
    /// age; the next batch measures free space afresh. Cheap: no directory scan.
    pub fn after_batch(&mut self) -> Result<(), SpoolError> {
        self.free_estimate = None;
        self.rotate_if_due()
            .map_err(self.io_error("complete a segment"))
    }

    /// The janitor, every second while admission files exist: rotation by age, retention by
    /// count, bytes and age (a directory scan, which also notices segments a reader removed),
    /// and a fresh free-space measurement for the next records.
    pub fn tick(&mut self) -> Result<(), SpoolError> {
        self.free_estimate = None;
        self.rotate_if_due()
            .map_err(self.io_error("complete a segment"))?;
        self.enforce_retention(0)
            .map_err(self.io_error("remove old segments"))
    }

    fn rotate_if_due(&mut self) -> io::Result<()> {
        let now = self.clock.now();
        let due = self.open.as_ref().is_some_and(|s| {
            s.sealed
                || now.duration_since(s.opened_at).unwrap_or_default() >= self.limits.segment_age
        });
        if due {
            self.finish_segment()?;
        }
        Ok(())
    }

    /// Completes the open segment: cut to its complete records, sync, rename to `.log`, close.
    /// On failure the segment stays open (sealed), to be completed by a later tick.
    pub fn finish_segment(&mut self) -> io::Result<()> {
        let Some(segment) = self.open.as_mut() else {
            return Ok(());
        };
        segment.sealed = true;
        if segment.records == 0 {
            fs::remove_file(&segment.path)?;
            self.open = None;
            return Ok(());
        }
        segment.file.set_len(segment.bytes)?;
        segment.file.sync_all()?;
        // Renamed while still open and locked: no one sees a `.log` that is still written,
        // and no recovery takes an `.open` whose writer is alive.
        fs::rename(&segment.path, segment.path.with_extension("log"))?;
        let bytes = segment.bytes;
        self.open = None;
        self.completed.segments += 1;
        self.completed.bytes += bytes;
        Ok(())
    }

    /// Removes the oldest completed segments while there are more than allowed, they (with the
    /// open segment and `pending` bytes) take more room than allowed, or they are too old.
    fn enforce_retention(&mut self, pending: u64) -> io::Result<()> {
        let now = self.clock.now();
        let mut segments: Vec<(PathBuf, u64, SystemTime)> = Vec::new();
        for path in self.entries(".log")? {
            // A reader may remove a segment at any time.
            let meta = match fs::metadata(&path) {
                Ok(meta) => meta,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let created = created_at(&path)
                .or_else(|| meta.modified().ok())
                .unwrap_or(now);
            segments.push((path, meta.len(), created));
        }
        let open_bytes = self.open.as_ref().map_or(0, |s| s.bytes);
        let mut completed_bytes: u64 = segments.iter().map(|s| s.1).sum();
        let mut count = segments.len();
        for (path, size, created) in segments.iter().take(self.limits.cleanup_batch) {
            let too_many = count > self.limits.retained_segments;
            let too_big = completed_bytes + open_bytes + pending > self.limits.retained_bytes;
            let too_old =
                now.duration_since(*created).unwrap_or_default() > self.limits.retained_age;
            if !(too_many || too_big || too_old) {
                break;
            }
            // Rename first, so that no reader opens a file that is being removed.
            let deleting = path.with_extension("deleting");
            match fs::rename(path, &deleting) {
                Ok(()) => fs::remove_file(&deleting)?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            completed_bytes -= size;
            count -= 1;
        }
        self.completed = SpoolStats {
            segments: count,
            bytes: completed_bytes,
        };
        self.has_files = count > 0 || !self.entries(".open")?.is_empty();
        Ok(())
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        let _ = self.finish_segment();
    }
}

#[cfg(test)]
#[path = "spool_tests.rs"]
mod tests;
