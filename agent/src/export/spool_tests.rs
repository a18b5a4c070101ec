//! Unit tests of `spool` (a file of their own, to keep the module's code short).

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
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + self.0.load(Ordering::SeqCst))
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
