//! The admin API's `GET /violations` (reference §6): the exported records of the channel directory as
//! NDJSON, oldest first, optionally filtered by source (`?source=webhook|audit`) and time
//! (`?since=<RFC 3339>`), and with `?follow=true` new records as they are written.
//!
//! The stream only reads: it never deletes, renames, locks or writes a file, so it can run beside
//! the writers, the retention cleanup and a reader sidecar that deletes what it consumed. A
//! [`Cursor`] remembers how far each segment was emitted; a segment is known by its name without
//! extension, so that the writer's `.open` → `.log` (or audit `.txt` → `.log`) rename does not
//! emit its records again. A line is emitted only once its newline has been written, except the
//! last line of a completed (`.log`) file, which can no longer grow.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use drift_api::violation::{
    ADMISSION_EVENT, AUDIT_EVENT, Source, ViolationsQuery as Query, parse_rfc3339,
};
use serde::Deserialize;

use super::spool::{PREFIX as ADMISSION_PREFIX, created_at as admission_created_at};
use tokio::sync::watch;

/// The `eventType` of a source's violation records.
fn event_type_of(source: Source) -> &'static str {
    match source {
        Source::Webhook => ADMISSION_EVENT,
        Source::Audit => AUDIT_EVENT,
    }
}

/// One file of the channel directory, as listed.
#[derive(Debug, Clone)]
struct Segment {
    path: PathBuf,
    /// The name without extension: stable across the completing rename.
    key: String,
    /// `.log`: nothing more will be written to it.
    complete: bool,
    /// Admission segments: the time in the name; audit runs: the modification time.
    time: SystemTime,
}

#[derive(Debug, Clone, Copy)]
struct Progress {
    /// Bytes of the segment consumed (emitted or filtered out), always at a line boundary.
    offset: u64,
    /// Consecutive listings that did not show the segment.
    absent: u8,
}

/// A segment absent from this many consecutive listings is forgotten. More than one, because a
/// directory listing that races with a rename may show neither name.
const FORGET_AFTER: u8 = 3;

/// What to look at in a record line; every other field is skipped (but still checked to be
/// JSON).
#[derive(Deserialize)]
struct Probe {
    #[serde(rename = "eventType", default)]
    event_type: Option<serde_json::Value>,
    #[serde(default)]
    timestamp: Option<serde_json::Value>,
}

/// How far the stream has read a channel directory.
#[derive(Debug)]
pub struct Cursor {
    dir: PathBuf,
    source: Option<Source>,
    since: Option<SystemTime>,
    progress: HashMap<String, Progress>,
    skipped: usize,
}

impl Cursor {
    pub fn new(dir: PathBuf, query: &Query) -> Self {
        Self {
            dir,
            source: query.source,
            since: query.since,
            progress: HashMap::new(),
            skipped: 0,
        }
    }

    /// The channel directory it reads.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Lines skipped because they are not a JSON object.
    pub fn skipped(&self) -> usize {
        self.skipped
    }

    /// Every matching record line completed since the last poll (each with its `'\n'`), oldest
    /// first: segments by time, then by position.
    pub fn poll(&mut self) -> io::Result<Vec<Bytes>> {
        self.poll_budget(usize::MAX).map(|(lines, _)| lines)
    }

    /// Like [`Cursor::poll`], but stops after the line that reaches `budget` bytes; the flag
    /// tells that there may be more to read right away.
    fn poll_budget(&mut self, budget: usize) -> io::Result<(Vec<Bytes>, bool)> {
        let segments = self.list()?;
        self.read_listed(&segments, budget)
    }

    /// The segments of the directory that the query selects, oldest first. A missing directory
    /// has none.
    fn list(&self) -> io::Result<Vec<Segment>> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut segments: HashMap<String, Segment> = HashMap::new();
        for entry in entries {
            let Ok(entry) = entry else { continue };
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some((stem, extension)) = name.rsplit_once('.') else {
                continue;
            };
            let admission = stem.starts_with(ADMISSION_PREFIX);
            let complete = match (admission, extension) {
                (_, "log") => true,
                (true, "open") | (false, "txt") => false,
                _ => continue, // `.deleting` and anything else
            };
            let source = if admission {
                Source::Webhook
            } else {
                Source::Audit
            };
            if self.source.is_some_and(|wanted| wanted != source) {
                continue;
            }
            // Vanished since the listing: nothing to read.
            let Ok(metadata) = entry.metadata() else {
                continue;
            };
            if !metadata.is_file() {
                continue;
            }
            let named = if admission {
                admission_created_at(Path::new(stem))
            } else {
                None
            };
            let time = named
                .or_else(|| metadata.modified().ok())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            let segment = Segment {
                path: entry.path(),
                key: stem.to_owned(),
                complete,
                time,
            };
            // A listing racing with the rename may show both names: keep the completed one.
            match segments.get(stem) {
                Some(listed) if listed.complete => {}
                _ => {
                    segments.insert(stem.to_owned(), segment);
                }
            }
        }
        let mut segments: Vec<Segment> = segments.into_values().collect();
        segments.sort_by(|a, b| a.time.cmp(&b.time).then_with(|| a.key.cmp(&b.key)));
        Ok(segments)
    }

    fn read_listed(
        &mut self,
        segments: &[Segment],
        budget: usize,
    ) -> io::Result<(Vec<Bytes>, bool)> {
        for progress in self.progress.values_mut() {
            progress.absent = progress.absent.saturating_add(1);
        }
        for segment in segments {
            self.progress
                .entry(segment.key.clone())
                .or_insert(Progress {
                    offset: 0,
                    absent: 0,
                })
                .absent = 0;
        }
        self.progress.retain(|_, p| p.absent < FORGET_AFTER);

        let mut lines = Vec::new();
        let mut emitted = 0;
        for segment in segments {
            if emitted >= budget {
                return Ok((lines, true));
            }
            let mut offset = self.progress.get(&segment.key).map_or(0, |p| p.offset);
            let result = open_segment(segment).and_then(|opened| match opened {
                Some((file, complete)) => self.read_segment(
                    file,
                    complete,
                    &mut offset,
                    budget,
                    &mut emitted,
                    &mut lines,
                ),
                None => Ok(()),
            });
            // What was read is accounted for even when the read then failed.
            if let Some(progress) = self.progress.get_mut(&segment.key) {
                progress.offset = offset;
            }
            if let Err(e) = result {
                if lines.is_empty() {
                    return Err(e);
                }
                // Hand over what was read; the next poll meets the error again.
                return Ok((lines, true));
            }
        }
        // Stopped at the budget in the last segment: there may be more of it.
        Ok((lines, emitted >= budget))
    }

    /// Reads the complete lines of `file` from `offset`, keeping the matching ones; `offset`
    /// follows the last line consumed.
    fn read_segment(
        &mut self,
        mut file: File,
        complete: bool,
        offset: &mut u64,
        budget: usize,
        emitted: &mut usize,
        lines: &mut Vec<Bytes>,
    ) -> io::Result<()> {
        if file.metadata()?.len() <= *offset {
            return Ok(());
        }
        file.seek(SeekFrom::Start(*offset))?;
        let mut reader = BufReader::with_capacity(64 * 1024, file);
        let mut line = Vec::new();
        while *emitted < budget {
            line.clear();
            let read = reader.read_until(b'\n', &mut line)?;
            if read == 0 {
                break;
            }
            if line.last() != Some(&b'\n') {
                if !complete {
                    // The writer has not finished this record yet.
                    break;
                }
                line.push(b'\n');
            }
            *offset += read as u64;
            if self.selects(&line) {
                *emitted += line.len();
                lines.push(Bytes::copy_from_slice(&line));
            }
        }
        Ok(())
    }

    /// Whether a record line is a violation the query asks for. Lines that are not a JSON
    /// object are counted as skipped; blank lines and records without an `eventType` (the audit
    /// run's control records) are left out silently.
    fn selects(&mut self, line: &[u8]) -> bool {
        let text = line.trim_ascii();
        if text.is_empty() {
            return false;
        }
        // A struct also deserializes from a JSON array: insist on an object. A line nested
        // deeper than any record is skipped like one that is not JSON (reference §5).
        let probe = match text.first() {
            Some(b'{') if drift_engine::nesting::check_json(text).is_ok() => {
                serde_json::from_slice::<Probe>(text).ok()
            }
            _ => None,
        };
        let Some(probe) = probe else {
            self.skipped += 1;
            return false;
        };
        let Some(serde_json::Value::String(event_type)) = probe.event_type else {
            return false;
        };
        if let Some(source) = self.source
            && event_type != event_type_of(source)
        {
            return false;
        }
        if let Some(since) = self.since {
            let time = match &probe.timestamp {
                Some(serde_json::Value::String(text)) => parse_rfc3339(text),
                _ => None,
            };
            if time.is_none_or(|time| time < since) {
                return false;
            }
        }
        true
    }
}

/// Opens a listed segment. One that was renamed since the listing is found under its completed
/// name; one that is gone (consumed by a reader, removed by retention) is `None`.
fn open_segment(segment: &Segment) -> io::Result<Option<(File, bool)>> {
    match File::open(&segment.path) {
        Ok(file) => return Ok(Some((file, segment.complete))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    if segment.complete {
        return Ok(None);
    }
    match File::open(segment.path.with_extension("log")) {
        Ok(file) => Ok(Some((file, true))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Bytes read per step of the response, so that a large backlog is sent in pieces instead of
/// being held in memory at once.
const CHUNK_BYTES: usize = 256 * 1024;

/// Why `GET /violations` has no channel directory to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unavailable {
    /// The webhook runs without `--enable-admission-violation-export`: 404, for good.
    WebhookExportOff,
    /// The audit runs without `--enable-violation-export`: 404, for good.
    AuditExportOff,
    /// Export is on but there is no usable Connection yet: 503, ask again.
    NoConnection,
    /// The audit exports, but no run has written its file yet: 503, ask again.
    NoAuditRun,
}

impl Unavailable {
    fn answer(self) -> (StatusCode, String) {
        use drift_api::violation::EXPORT_NOT_ENABLED;
        match self {
            Unavailable::WebhookExportOff => (
                StatusCode::NOT_FOUND,
                format!(
                    "{EXPORT_NOT_ENABLED} on this agent: start it with --enable-admission-violation-export (the chart's enableAdmissionViolationExport=true)\n"
                ),
            ),
            Unavailable::AuditExportOff => (
                StatusCode::NOT_FOUND,
                format!(
                    "{EXPORT_NOT_ENABLED} on this audit: start it with --enable-violation-export (the chart's enableViolationExport=true)\n"
                ),
            ),
            Unavailable::NoConnection => (
                StatusCode::SERVICE_UNAVAILABLE,
                "violation export has no usable Connection yet: see the Connection's status and the errors in /status\n".to_owned(),
            ),
            Unavailable::NoAuditRun => (
                StatusCode::SERVICE_UNAVAILABLE,
                "no audit run has written its violations yet\n".to_owned(),
            ),
        }
    }
}

/// `GET /violations`: 400 for a bad query, 404 or 503 when there is nothing to read from
/// ([`Unavailable`]), otherwise 200 with an NDJSON body.
pub fn response(
    dir: Result<PathBuf, Unavailable>,
    query_string: Option<&str>,
    poll_interval: Duration,
    shutdown: watch::Receiver<bool>,
) -> Response {
    let text_plain = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    let query = match Query::parse(query_string) {
        Ok(query) => query,
        Err(e) => return (StatusCode::BAD_REQUEST, text_plain, format!("{e}\n")).into_response(),
    };
    let dir = match dir {
        Ok(dir) => dir,
        Err(why) => {
            let (status, text) = why.answer();
            return (status, text_plain, text).into_response();
        }
    };
    let state = StreamState {
        cursor: Some(Cursor::new(dir, &query)),
        follow: query.follow,
        interval: poll_interval,
        shutdown,
        started: false,
        more: false,
    };
    (
        [
            (header::CONTENT_TYPE, "application/x-ndjson"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Body::from_stream(records(state)),
    )
        .into_response()
}

struct StreamState {
    /// `None` once the stream failed.
    cursor: Option<Cursor>,
    follow: bool,
    interval: Duration,
    shutdown: watch::Receiver<bool>,
    started: bool,
    /// The last poll stopped at the chunk budget.
    more: bool,
}

/// The body: one chunk per non-empty poll. The stream ends after the backlog unless following;
/// when following, it ends at shutdown, or when the client goes away (the server drops the body).
fn records(state: StreamState) -> impl futures::Stream<Item = io::Result<Bytes>> + Send + 'static {
    futures::stream::unfold(state, |mut state| async move {
        loop {
            if *state.shutdown.borrow() {
                return None;
            }
            if state.started && !state.more {
                if !state.follow {
                    return None;
                }
                tokio::select! {
                    _ = tokio::time::sleep(state.interval) => {}
                    // Shutdown requested, or its sender gone (the process is stopping).
                    _ = state.shutdown.wait_for(|stop| *stop) => return None,
                }
            }
            state.started = true;
            let mut cursor = state.cursor.take()?;
            let skipped_before = cursor.skipped();
            // Reading files blocks (a slow or network volume, a large backlog): off the async
            // workers, on the blocking pool. A poll is bounded by CHUNK_BYTES, so one request
            // never holds a blocking thread for long, and polls are `interval` apart.
            let (cursor, result) = tokio::task::spawn_blocking(move || {
                let result = cursor.poll_budget(CHUNK_BYTES);
                (cursor, result)
            })
            .await
            .ok()?;
            if cursor.skipped() > skipped_before {
                tracing::warn!(
                    dir = %cursor.dir.display(),
                    skipped = cursor.skipped() - skipped_before,
                    "violation records that are not JSON objects were skipped"
                );
            }
            match result {
                Ok((lines, more)) => {
                    state.cursor = Some(cursor);
                    state.more = more;
                    if lines.is_empty() {
                        continue;
                    }
                    let mut chunk = Vec::with_capacity(lines.iter().map(Bytes::len).sum());
                    for line in &lines {
                        chunk.extend_from_slice(line);
                    }
                    return Some((Ok(Bytes::from(chunk)), state));
                }
                Err(e) => {
                    // Abort the body: the client must not take a truncated stream for a
                    // complete one.
                    tracing::warn!(dir = %cursor.dir.display(), error = %e, "cannot read the violation directory");
                    return Some((Err(e), state));
                }
            }
        }
    })
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
