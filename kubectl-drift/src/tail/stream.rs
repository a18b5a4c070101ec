//! Reading `GET /violations?follow=true` of one admin API on a background thread, reconnecting
//! with backoff when the stream ends or fails (the pod restarted, the port-forward broke) and
//! resuming with `since=` the last record's time. Each stream is one thread sending [`Event`]s
//! to the display, which merges the streams by time and drops records seen twice.

use std::io::{self, BufRead, BufReader};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use reqwest::Url;

use super::record::{Record, Source};

/// The first wait before reconnecting; doubled after each failure up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A reconnection asks for records from this long before the last one seen: records are
/// written in time order per segment, not strictly across writers, and the repeats are
/// dropped by id and timestamp.
const RESUME_MARGIN: Duration = Duration::from_secs(10);
/// A line longer than this is not a record of the export (records are at most 64 KiB).
const MAX_LINE_BYTES: usize = 1024 * 1024;

/// What one stream asks for.
#[derive(Debug, Clone)]
pub struct StreamSpec {
    /// What the header and messages call it: the URL, or the pod's name.
    pub label: String,
    /// The admin API's base URL (`http://127.0.0.1:9090`).
    pub base: Url,
    /// `?source=`; `None` for both.
    pub source: Option<Source>,
    /// `?since=` of the first request.
    pub since: Option<SystemTime>,
}

impl StreamSpec {
    /// The URL that follows the records from `since` on.
    pub fn url(&self, since: Option<SystemTime>) -> Url {
        let mut url = self.base.clone();
        let path = url.path().trim_end_matches('/').to_owned();
        url.set_path(&format!("{path}/violations"));
        url.set_query(None);
        {
            let mut query = url.query_pairs_mut();
            query.append_pair("follow", "true");
            if let Some(source) = self.source {
                query.append_pair("source", source.as_str());
            }
            if let Some(since) = since {
                query.append_pair(
                    "since",
                    &humantime::format_rfc3339_micros(since).to_string(),
                );
            }
        }
        url
    }

    /// `since=` of a reconnection, given the time of the last record seen.
    pub fn resume_since(&self, last: Option<SystemTime>) -> Option<SystemTime> {
        let resumed = last.map(|t| t.checked_sub(RESUME_MARGIN).unwrap_or(t));
        match (self.since, resumed) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The connection of one stream, as the header shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnState {
    Connecting,
    Connected,
    /// Waiting `after` before the next attempt, because of `reason`.
    Reconnecting {
        after: Duration,
        reason: String,
    },
    /// Given up: the server refuses the request itself (not an admin API, a bad query).
    Failed(String),
}

impl std::fmt::Display for ConnState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnState::Connecting => f.write_str("connecting"),
            ConnState::Connected => f.write_str("connected"),
            ConnState::Reconnecting { after, reason } => {
                write!(
                    f,
                    "reconnecting in {}: {reason}",
                    humantime::format_duration(Duration::from_millis(after.as_millis() as u64))
                )
            }
            ConnState::Failed(reason) => write!(f, "failed: {reason}"),
        }
    }
}

/// What a stream thread reports. `stream` is the index of its [`StreamSpec`].
#[derive(Debug)]
pub enum Event {
    /// A record, with its line as received (without the newline).
    Record {
        stream: usize,
        line: String,
        record: Box<Record>,
    },
    /// A line that is not a JSON object.
    Skipped {
        stream: usize,
    },
    State {
        stream: usize,
        state: ConnState,
    },
}

/// Starts the thread of stream `index`; it ends when `stop` is set (checked between reads and
/// while waiting to reconnect) or when `events` has no receiver left.
pub fn spawn(
    index: usize,
    spec: StreamSpec,
    events: Sender<Event>,
    stop: Arc<AtomicBool>,
) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("tail-{index}"))
        .spawn(move || follow(index, &spec, &events, &stop))
}

fn client() -> reqwest::Result<reqwest::blocking::Client> {
    reqwest::blocking::Client::builder()
        // The admin API is reached on loopback (directly or through kubectl port-forward):
        // never through a proxy of the environment.
        .no_proxy()
        .connect_timeout(Duration::from_secs(5))
        // A followed stream is quiet for as long as nothing is denied.
        .timeout(None)
        .tcp_keepalive(Duration::from_secs(30))
        .user_agent(concat!("kubectl-drift/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// The innermost cause of an error, which is the one worth showing
/// ("Connection refused (os error 111)" rather than "error sending request").
fn reason(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

fn follow(index: usize, spec: &StreamSpec, events: &Sender<Event>, stop: &AtomicBool) {
    let send_state = |state: ConnState| {
        events
            .send(Event::State {
                stream: index,
                state,
            })
            .is_ok()
    };
    let client = match client() {
        Ok(client) => client,
        Err(e) => {
            send_state(ConnState::Failed(reason(&e)));
            return;
        }
    };
    let mut last: Option<SystemTime> = None;
    let mut backoff = MIN_BACKOFF;
    while !stop.load(Ordering::Relaxed) {
        if !send_state(ConnState::Connecting) {
            return;
        }
        let url = spec.url(spec.resume_since(last));
        let why = match client.get(url).send() {
            Err(e) => reason(&e),
            Ok(response) if response.status().is_success() => {
                if !send_state(ConnState::Connected) {
                    return;
                }
                backoff = MIN_BACKOFF;
                match read(index, response, events, stop, &mut last) {
                    Ok(true) => "the stream ended".to_owned(),
                    Ok(false) => return,
                    Err(e) => reason(&e),
                }
            }
            Ok(response) => {
                let status = response.status();
                let body = response.text().unwrap_or_default();
                let first = body.lines().next().unwrap_or_default().trim();
                let text = if first.is_empty() {
                    format!("HTTP {status}")
                } else {
                    format!("HTTP {status}: {}", truncate(first, 200))
                };
                if matches!(status.as_u16(), 400 | 401 | 403 | 404 | 405) {
                    let hint = if status.as_u16() == 404 {
                        " (is this a Drift Sentinel admin API, e.g. port 9090 of an agent pod?)"
                    } else {
                        ""
                    };
                    send_state(ConnState::Failed(format!("{text}{hint}")));
                    return;
                }
                text
            }
        };
        if stop.load(Ordering::Relaxed)
            || !send_state(ConnState::Reconnecting {
                after: backoff,
                reason: why,
            })
        {
            return;
        }
        // Wait in small steps so that stopping is prompt.
        let until = std::time::Instant::now() + backoff;
        while std::time::Instant::now() < until {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut cut: String = text.chars().take(max).collect();
        cut.push('…');
        cut
    }
}

/// Reads records until the stream ends (`Ok(true)`) or nobody listens any more (`Ok(false)`).
fn read(
    index: usize,
    response: reqwest::blocking::Response,
    events: &Sender<Event>,
    stop: &AtomicBool,
    last: &mut Option<SystemTime>,
) -> io::Result<bool> {
    let mut reader = BufReader::with_capacity(64 * 1024, response);
    let mut buf = Vec::new();
    loop {
        if stop.load(Ordering::Relaxed) {
            return Ok(false);
        }
        let event = match next_line(&mut reader, &mut buf, MAX_LINE_BYTES)? {
            Line::Eof => return Ok(true),
            Line::TooLong => Event::Skipped { stream: index },
            Line::Complete => {
                let text = String::from_utf8_lossy(&buf);
                let text = text.trim_end_matches('\r');
                if text.trim().is_empty() {
                    continue;
                }
                match Record::parse(text) {
                    Some(record) => {
                        if let Some(time) = record.time() {
                            *last = Some(last.map_or(time, |l| l.max(time)));
                        }
                        Event::Record {
                            stream: index,
                            line: text.to_owned(),
                            record: Box::new(record),
                        }
                    }
                    None => Event::Skipped { stream: index },
                }
            }
        };
        if events.send(event).is_err() {
            return Ok(false);
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// A complete line is in the buffer (without its newline).
    Complete,
    /// A line over the limit was read and dropped.
    TooLong,
    /// The stream ended; an unterminated last piece (a connection cut mid-record) is dropped.
    Eof,
}

/// The next `\n`-terminated line into `buf`, holding at most `max` bytes of it.
fn next_line(reader: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> io::Result<Line> {
    buf.clear();
    let mut too_long = false;
    loop {
        let available = match reader.fill_buf() {
            Ok(available) => available,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(Line::Eof);
        }
        let (piece, end) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        if !too_long {
            if buf.len() + piece.len() > max {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(piece);
            }
        }
        let consumed = end.unwrap_or(available.len());
        reader.consume(consumed);
        if end.is_some() {
            return Ok(if too_long {
                Line::TooLong
            } else {
                Line::Complete
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(base: &str) -> StreamSpec {
        StreamSpec {
            label: base.to_owned(),
            base: Url::parse(base).unwrap(),
            source: None,
            since: None,
        }
    }

    #[test]
    fn url_of_the_followed_stream() {
        let at = humantime::parse_rfc3339("2027-01-15T08:00:00.000001Z").unwrap();
        assert_eq!(
            spec("http://127.0.0.1:9090").url(None).as_str(),
            "http://127.0.0.1:9090/violations?follow=true"
        );
        let mut s = spec("http://127.0.0.1:9090/prefix/");
        s.source = Some(Source::Audit);
        assert_eq!(
            s.url(Some(at)).as_str(),
            "http://127.0.0.1:9090/prefix/violations?follow=true&source=audit&since=2027-01-15T08%3A00%3A00.000001Z"
        );
    }

    #[test]
    fn resumes_a_margin_before_the_last_record_but_never_before_since() {
        let t = |s: &str| humantime::parse_rfc3339(s).unwrap();
        let mut s = spec("http://x");
        assert_eq!(s.resume_since(None), None);
        assert_eq!(
            s.resume_since(Some(t("2027-01-15T08:00:10Z"))),
            Some(t("2027-01-15T08:00:00Z"))
        );
        s.since = Some(t("2027-01-15T08:00:05Z"));
        assert_eq!(s.resume_since(None), Some(t("2027-01-15T08:00:05Z")));
        assert_eq!(
            s.resume_since(Some(t("2027-01-15T08:00:10Z"))),
            Some(t("2027-01-15T08:00:05Z"))
        );
        assert_eq!(
            s.resume_since(Some(t("2027-01-15T09:00:00Z"))),
            Some(t("2027-01-15T08:59:50Z"))
        );
    }

    #[test]
    fn lines_are_split_capped_and_a_cut_last_piece_dropped() {
        let data = b"one\r\ntwo\n\nthis line is too long\nthree\npartial";
        // A tiny buffer, so that lines span several reads.
        let mut reader = BufReader::with_capacity(4, &data[..]);
        let mut buf = Vec::new();
        let mut seen = Vec::new();
        loop {
            match next_line(&mut reader, &mut buf, 10).unwrap() {
                Line::Eof => break,
                Line::TooLong => seen.push("<too long>".to_owned()),
                Line::Complete => seen.push(String::from_utf8(buf.clone()).unwrap()),
            }
        }
        assert_eq!(seen, ["one\r", "two", "", "<too long>", "three"]);
    }

    #[test]
    fn state_texts() {
        assert_eq!(
            ConnState::Reconnecting {
                after: Duration::from_millis(500),
                reason: "Connection refused".into()
            }
            .to_string(),
            "reconnecting in 500ms: Connection refused"
        );
        assert_eq!(ConnState::Failed("x".into()).to_string(), "failed: x");
    }
}
