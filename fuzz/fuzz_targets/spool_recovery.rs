//! (e) The spool's recovery of an abandoned segment: the input is written as an `.open`
//! segment a dead writer left; opening the spool must publish it as a `.log` holding exactly
//! its complete lines (up to the last newline), or remove it when it has none, and leave no
//! `.open` file behind; the reader then passes every line on without panicking.
#![no_main]

use std::io;
use std::path::Path;
use std::sync::Arc;

use drift_sentinel::export::reader::read_pass;
use drift_sentinel::export::spool::{FreeSpace, Limits, Spool, SystemClock};
use libfuzzer_sys::fuzz_target;

/// A disk with room to spare.
struct Roomy;

impl FreeSpace for Roomy {
    fn available(&self, _dir: &Path) -> io::Result<u64> {
        Ok(u64::MAX / 2)
    }
}

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("temp dir");
    // A name as the writer makes them, dated now (so retention keeps it).
    let stamp = humantime_now();
    let name = format!("admission-{stamp}-00000000deadbeef.open");
    std::fs::write(dir.path().join(&name), data).expect("write segment");
    let (spool, recovery) = Spool::open(
        dir.path().to_path_buf(),
        Limits::default(),
        Arc::new(SystemClock),
        Arc::new(Roomy),
    )
    .expect("spool opens");
    drop(spool);
    let complete = data.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut logs = Vec::new();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_str().unwrap().to_owned();
        assert!(!file.ends_with(".open"), "{file} left behind");
        if file.ends_with(".log") {
            logs.push(std::fs::read(&path).unwrap());
        }
    }
    if complete == 0 {
        assert_eq!(recovery.removed, 1);
        assert!(logs.is_empty(), "a segment without a complete line was published");
    } else {
        assert_eq!(recovery.published, 1);
        assert_eq!(logs.len(), 1);
        assert_eq!(logs[0], &data[..complete], "the .log is not the complete lines");
        assert!(logs[0].ends_with(b"\n"));
    }
    let mut out = Vec::new();
    let report = read_pass(dir.path(), &mut out).expect("reader pass");
    assert_eq!(report.segments, logs.len());
    if !out.is_empty() {
        assert!(out.ends_with(b"\n"));
    }
});

/// `20270115T080000.000000Z`, as the spool names its segments.
fn humantime_now() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    // Civil date from days since the epoch (Howard Hinnant's algorithm).
    let secs = now.as_secs();
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}.{:06}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        now.subsec_micros()
    )
}
