//! `drift-sentinel reader --path DIR`: the demonstration admission reader (the seed's reader
//! sidecar). Every pass writes the records of each completed admission segment
//! (`admission-*.log`, oldest first) to standard output, one per line, then deletes the segment.
//! It shows how to consume the spool; it is not an archive.
//!
//! It touches nothing else: not the `.open` segment a writer holds, not the audit runs that
//! share the channel directory, not the `.deleting` files of retention.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;

use super::spool::PREFIX;

/// What one pass consumed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassReport {
    /// Segments read in full, written out and deleted.
    pub segments: usize,
    /// Record lines written.
    pub records: usize,
    /// Of those, lines that are not JSON (written anyway, with a warning on standard error).
    pub not_json: usize,
}

/// Runs passes over `path` every `interval` until killed, or one pass with `once`.
pub fn run(path: &Path, interval: Duration, once: bool) -> anyhow::Result<()> {
    if once {
        if !path.is_dir() {
            anyhow::bail!(
                "violation directory {} does not exist (or is not a directory)",
                path.display()
            );
        }
        let report = read_pass(path, &mut io::stdout().lock())
            .with_context(|| format!("cannot consume {}", path.display()))?;
        eprintln!(
            "drift-sentinel reader: {} segments, {} records",
            report.segments, report.records
        );
        return Ok(());
    }
    let mut waiting = false;
    loop {
        if path.is_dir() {
            waiting = false;
            match read_pass(path, &mut io::stdout().lock()) {
                Ok(_) => {}
                // Nobody reads our output any more: stop instead of deleting unread segments.
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                    return Err(e).context("cannot write to standard output");
                }
                // Transient (a permission being fixed, the directory re-created): try again.
                Err(e) => eprintln!("drift-sentinel reader: {}: {e}", path.display()),
            }
        } else if !waiting {
            eprintln!(
                "drift-sentinel reader: waiting for {} to be created",
                path.display()
            );
            waiting = true;
        }
        std::thread::sleep(interval);
    }
}

/// One pass over `dir`: each completed admission segment, oldest first, is read in full, its
/// record lines written to `out` as they are (blank lines dropped, a newline added to an
/// unterminated last line), `out` flushed, and only then the segment deleted. A segment that
/// vanishes meanwhile (retention removed it) is skipped. Fails on a missing directory, on a
/// write error, and on a read or delete error (the segment is then kept, to be retried).
pub fn read_pass(dir: &Path, out: &mut impl Write) -> io::Result<PassReport> {
    let mut report = PassReport::default();
    for path in completed_segments(dir)? {
        let content = match fs::read(&path) {
            Ok(content) => content,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(annotate(e, "cannot read", &path)),
        };
        for (index, line) in content.split_inclusive(|&b| b == b'\n').enumerate() {
            let record = line.strip_suffix(b"\n").unwrap_or(line);
            if record.trim_ascii().is_empty() {
                continue;
            }
            if serde_json::from_slice::<serde::de::IgnoredAny>(record).is_err() {
                eprintln!(
                    "drift-sentinel reader: warning: {} line {}: not JSON, written as is",
                    path.display(),
                    index + 1
                );
                report.not_json += 1;
            }
            out.write_all(record)?;
            out.write_all(b"\n")?;
            report.records += 1;
        }
        out.flush()?;
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(annotate(e, "cannot delete", &path)),
        }
        report.segments += 1;
    }
    Ok(report)
}

/// `admission-*.log` regular files, oldest first (the names begin with the creation time in a
/// sortable format).
fn completed_segments(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let entries = fs::read_dir(dir).map_err(|e| annotate(e, "cannot list", dir))?;
    let mut segments = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| annotate(e, "cannot list", dir))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !(name.starts_with(PREFIX) && name.ends_with(".log")) {
            continue;
        }
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            segments.push(entry.path());
        }
    }
    segments.sort();
    Ok(segments)
}

fn annotate(error: io::Error, action: &str, path: &Path) -> io::Error {
    io::Error::new(
        error.kind(),
        format!("{action} {}: {error}", path.display()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: u32) -> String {
        format!("{{\"eventType\":\"violation_admission\",\"id\":\"{id}\"}}\n")
    }

    use drift_testkit::file_names as names;

    #[test]
    fn consumes_only_completed_admission_segments_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let second = "admission-20270115T080100.000000Z-00000000000000bb.log";
        let first = "admission-20270115T080000.000000Z-00000000000000aa.log";
        fs::write(d.join(second), record(3) + &record(4)).unwrap();
        fs::write(d.join(first), record(1) + &record(2)).unwrap();
        let kept = [
            "admission-20270115T080200.000000Z-00000000000000cc.open",
            "admission-20270115T075900.000000Z-00000000000000dd.deleting",
            "2027-01-15T08:00:00Z.log",
            "2027-01-15T08:05:00Z.txt",
            "admissionlike.log",
        ];
        for name in kept {
            fs::write(d.join(name), record(9)).unwrap();
        }
        fs::create_dir(d.join("admission-dir.log")).unwrap();

        let mut out = Vec::new();
        let report = read_pass(d, &mut out).unwrap();
        assert_eq!(
            report,
            PassReport {
                segments: 2,
                records: 4,
                not_json: 0
            }
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            record(1) + &record(2) + &record(3) + &record(4)
        );
        let mut expected: Vec<String> = kept.iter().map(|s| s.to_string()).collect();
        expected.push("admission-dir.log".into());
        expected.sort();
        assert_eq!(names(d), expected);
        for name in kept {
            assert_eq!(fs::read_to_string(d.join(name)).unwrap(), record(9));
        }

        // Nothing left to consume.
        let mut out = Vec::new();
        assert_eq!(read_pass(d, &mut out).unwrap(), PassReport::default());
        assert!(out.is_empty());
    }

    #[test]
    fn lines_are_written_as_they_are_and_non_json_is_flagged() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let content = [
            record(1),
            "not json at all\n".into(),
            "\n".into(),
            "{\"id\":\"unterminated\"}".into(),
        ]
        .concat();
        fs::write(
            d.join("admission-20270115T080000.000000Z-00000000000000aa.log"),
            content,
        )
        .unwrap();
        let mut out = Vec::new();
        let report = read_pass(d, &mut out).unwrap();
        assert_eq!(report.records, 3);
        assert_eq!(report.not_json, 1);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            record(1) + "not json at all\n{\"id\":\"unterminated\"}\n"
        );
    }

    /// A sink that fails after `limit` bytes.
    struct Failing {
        written: usize,
        limit: usize,
    }

    impl Write for Failing {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.written + buf.len() > self.limit {
                return Err(io::Error::new(io::ErrorKind::BrokenPipe, "closed"));
            }
            self.written += buf.len();
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_segment_is_kept_when_writing_fails() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let first = d.join("admission-20270115T080000.000000Z-00000000000000aa.log");
        let second = d.join("admission-20270115T080100.000000Z-00000000000000bb.log");
        fs::write(&first, record(1)).unwrap();
        fs::write(&second, record(2) + &record(3)).unwrap();
        let mut out = Failing {
            written: 0,
            limit: record(1).len() + 5,
        };
        let error = read_pass(d, &mut out).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::BrokenPipe);
        assert!(!first.exists());
        assert!(second.exists());
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("audit-channel");
        let error = read_pass(&missing, &mut Vec::new()).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
        assert!(error.to_string().contains("audit-channel"), "{error}");

        let error = run(&missing, Duration::from_secs(1), true)
            .unwrap_err()
            .to_string();
        assert!(error.contains("audit-channel"), "{error}");
    }
}
