//! The disk driver of violation export (SPEC §7, the Gatekeeper seed's disk driver): JSONL
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
        // alone (0700). One that exists keeps its mode (SPEC §7: never change the mode of a
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
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[derive(Clone, Default)]
    struct TestClock(Arc<AtomicU64>);

    impl TestClock {
        fn advance(&self, by: Duration) {
            self.0.fetch_add(by.as_secs(), Ordering::SeqCst);
        }
    }

    impl Clock for TestClock {
        fn now(&self) -> SystemTime {
            SystemTime::UNIX_EPOCH
                + Duration::from_secs(1_800_000_000 + self.0.load(Ordering::SeqCst))
        }
    }

    #[derive(Clone)]
    struct TestDisk(Arc<AtomicU64>);

    impl FreeSpace for TestDisk {
        fn available(&self, _: &Path) -> io::Result<u64> {
            Ok(self.0.load(Ordering::SeqCst))
        }
    }

    fn spool(dir: &Path, limits: Limits) -> (Spool, TestClock, TestDisk) {
        let clock = TestClock::default();
        let disk = TestDisk(Arc::new(AtomicU64::new(u64::MAX / 2)));
        let (spool, _) = Spool::open(
            dir.to_owned(),
            limits,
            Arc::new(clock.clone()),
            Arc::new(disk.clone()),
        )
        .unwrap();
        (spool, clock, disk)
    }

    fn files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().ends_with(suffix))
            .collect();
        found.sort();
        found
    }

    fn record(i: usize) -> Vec<u8> {
        format!("{{\"eventType\":\"violation_admission\",\"id\":\"{i}\"}}").into_bytes()
    }

    #[test]
    fn segment_names_carry_a_parseable_time() {
        let time = SystemTime::UNIX_EPOCH + Duration::from_micros(1_800_000_000_123_456);
        let name = format!("{PREFIX}{}-abc.log", timestamp(time));
        assert_eq!(created_at(Path::new(&name)), Some(time));
        assert_eq!(created_at(Path::new("admission-x.log")), None);
    }

    #[test]
    fn retention_by_age() {
        let dir = tempfile::tempdir().unwrap();
        let (mut spool, clock, _) = spool(
            dir.path(),
            Limits {
                segment_records: 1,
                ..Limits::default()
            },
        );
        spool.append(&record(1)).unwrap();
        clock.advance(Duration::from_secs(12 * 3600));
        spool.append(&record(2)).unwrap();
        clock.advance(Duration::from_secs(12 * 3600 + 1));
        spool.tick().unwrap();
        let logs = files(dir.path(), ".log");
        assert_eq!(logs.len(), 1);
        assert!(
            fs::read_to_string(&logs[0])
                .unwrap()
                .contains("\"id\":\"2\"")
        );
    }

    #[test]
    fn rotates_at_the_record_limit_and_writes_complete_lines() {
        let dir = tempfile::tempdir().unwrap();
        let (mut spool, _, _) = spool(
            dir.path(),
            Limits {
                segment_records: 3,
                ..Limits::default()
            },
        );
        for i in 0..7 {
            spool.append(&record(i)).unwrap();
        }
        let logs = files(dir.path(), ".log");
        assert_eq!(logs.len(), 2);
        for log in &logs {
            let text = fs::read_to_string(log).unwrap();
            assert_eq!(text.lines().count(), 3);
            assert!(text.ends_with('\n'));
        }
        assert_eq!(files(dir.path(), ".open").len(), 1);
        use std::os::unix::fs::PermissionsExt;
        // A directory the spool makes is 0700; one that existed keeps its mode.
        let made = dir.path().join("made-here");
        let (_made, _, _) = self::spool(&made, Limits::default());
        assert_eq!(
            fs::metadata(&made).unwrap().permissions().mode() & 0o777,
            0o700
        );
        let existing = fs::metadata(dir.path()).unwrap().permissions().mode() & 0o777;
        let (_again, _, _) = self::spool(dir.path(), Limits::default());
        assert_eq!(
            fs::metadata(dir.path()).unwrap().permissions().mode() & 0o777,
            existing
        );
        assert_eq!(
            fs::metadata(&logs[0]).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn rotates_at_the_size_limit_and_the_age_limit() {
        let dir = tempfile::tempdir().unwrap();
        let (mut spool, clock, _) = spool(
            dir.path(),
            Limits {
                segment_bytes: 100,
                ..Limits::default()
            },
        );
        for i in 0..5 {
            spool.append(&record(i)).unwrap(); // ~44 bytes each: two fit in 100
        }
        assert_eq!(files(dir.path(), ".log").len(), 2);
        for log in files(dir.path(), ".log") {
            assert!(fs::metadata(log).unwrap().len() <= 100);
        }
        clock.advance(Duration::from_secs(59));
        spool.tick().unwrap();
        assert_eq!(files(dir.path(), ".open").len(), 1);
        clock.advance(Duration::from_secs(1));
        spool.tick().unwrap();
        assert_eq!(files(dir.path(), ".open").len(), 0);
        assert_eq!(files(dir.path(), ".log").len(), 3);
    }

    #[test]
    fn retention_keeps_the_newest_segments() {
        let dir = tempfile::tempdir().unwrap();
        let (mut spool, _, _) = spool(
            dir.path(),
            Limits {
                segment_records: 1,
                retained_segments: 4,
                ..Limits::default()
            },
        );
        for i in 0..10 {
            spool.append(&record(i)).unwrap();
        }
        spool.tick().unwrap();
        let logs = files(dir.path(), ".log");
        assert_eq!(logs.len(), 4);
        let newest = fs::read_to_string(logs.last().unwrap()).unwrap();
        assert!(newest.contains("\"id\":\"9\""), "{newest}");
        assert!(files(dir.path(), ".deleting").is_empty());
    }

    #[test]
    fn retention_by_total_bytes_counts_the_open_segment() {
        let dir = tempfile::tempdir().unwrap();
        let (mut spool, _, _) = spool(
            dir.path(),
            Limits {
                segment_records: 2,
                retained_bytes: 300,
                ..Limits::default()
            },
        );
        for i in 0..20 {
            spool.append(&record(i)).unwrap();
        }
        let total: u64 = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert!(total <= 300, "{total}");
    }

    #[test]
    fn oversized_records_and_a_full_disk_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (mut spool, _, disk) = spool(dir.path(), Limits::default());
        let big = vec![b'x'; 64 * 1024 + 1];
        assert!(matches!(
            spool.append(&big),
            Err(SpoolError::TooLarge { .. })
        ));
        disk.0.store(16 * 1024 * 1024, Ordering::SeqCst);
        spool.tick().unwrap(); // the free space is measured again after each batch
        assert!(matches!(
            spool.append(&record(1)),
            Err(SpoolError::DiskFull { .. })
        ));
        disk.0.store(17 * 1024 * 1024, Ordering::SeqCst);
        spool.tick().unwrap();
        spool.append(&record(2)).unwrap();
    }

    #[test]
    fn recovery_publishes_complete_records_of_an_abandoned_segment() {
        let dir = tempfile::tempdir().unwrap();
        let partial = dir
            .path()
            .join("admission-20270115T075900.000000Z-dead.open");
        fs::write(
            &partial,
            b"{\"id\":\"1\"}\n{\"id\":\"2\"}\n{\"id\":\"3\",\"trunc",
        )
        .unwrap();
        let empty = dir
            .path()
            .join("admission-20270115T075901.000000Z-empty.open");
        fs::write(&empty, b"{\"half").unwrap();
        fs::write(dir.path().join("admission-x.deleting"), b"old").unwrap();
        // A segment still locked by a live writer is left alone.
        let live = dir
            .path()
            .join("admission-20270115T075902.000000Z-live.open");
        let holder = File::create(&live).unwrap();
        holder.lock().unwrap();
        let (_spool, recovery) = Spool::open(
            dir.path().to_owned(),
            Limits::default(),
            Arc::new(TestClock::default()),
            Arc::new(TestDisk(Arc::new(AtomicU64::new(u64::MAX / 2)))),
        )
        .unwrap();
        assert_eq!(
            recovery,
            Recovery {
                published: 1,
                removed: 2,
                locked: 1
            }
        );
        let recovered = fs::read_to_string(partial.with_extension("log")).unwrap();
        assert_eq!(recovered, "{\"id\":\"1\"}\n{\"id\":\"2\"}\n");
        assert!(live.exists());
        assert!(!empty.exists());
    }

    #[derive(Debug, Clone)]
    enum Step {
        Append(usize),
        Tick,
        Advance(u64),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            6 => (1usize..400).prop_map(Step::Append),
            1 => Just(Step::Tick),
            1 => (1u64..4000).prop_map(Step::Advance),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Whatever the sequence of records, ticks and clock steps: every `.log` holds only
        /// complete JSON lines within the segment limits, every record written is on disk until
        /// retention removes whole segments (oldest first), and after a tick the spool is within
        /// its count and byte limits.
        #[test]
        fn segments_hold_complete_records_within_the_limits(steps in proptest::collection::vec(step(), 1..120)) {
            let dir = tempfile::tempdir().unwrap();
            let limits = Limits {
                segment_bytes: 2_000,
                segment_records: 7,
                segment_age: Duration::from_secs(60),
                retained_segments: 5,
                retained_bytes: 9_000,
                retained_age: Duration::from_secs(3_600),
                ..Limits::default()
            };
            let (mut spool, clock, _) = spool(dir.path(), limits.clone());
            let mut written = 0usize;
            for step in steps {
                match step {
                    Step::Append(padding) => {
                        let line = format!("{{\"id\":{written},\"pad\":\"{}\"}}", "x".repeat(padding));
                        spool.append(line.as_bytes()).unwrap();
                        written += 1;
                    }
                    Step::Tick => {
                        spool.tick().unwrap();
                        let logs = files(dir.path(), ".log");
                        let total: u64 = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
                        proptest::prop_assert!(logs.len() <= limits.retained_segments);
                        proptest::prop_assert!(total <= limits.retained_bytes, "{} bytes", total);
                    }
                    Step::Advance(seconds) => clock.advance(Duration::from_secs(seconds)),
                }
            }
            drop(spool);
            let mut ids = Vec::new();
            for log in files(dir.path(), ".log") {
                let text = fs::read_to_string(&log).unwrap();
                proptest::prop_assert!(text.ends_with('\n'));
                proptest::prop_assert!(text.len() as u64 <= limits.segment_bytes);
                proptest::prop_assert!(text.lines().count() <= limits.segment_records);
                for line in text.lines() {
                    let value: serde_json::Value = serde_json::from_str(line).unwrap();
                    ids.push(value["id"].as_u64().unwrap() as usize);
                }
            }
            proptest::prop_assert!(files(dir.path(), ".open").is_empty());
            // What survives is the newest records, in order, without a gap.
            let expected: Vec<usize> = (written - ids.len()..written).collect();
            proptest::prop_assert_eq!(ids, expected);
        }
    }
}
