//! Following `GET /violations?follow=true` of one admin API as a task, reconnecting with
//! backoff when the stream ends or fails (the pod restarted, the port-forward broke) and
//! resuming with `since=` the last record's time. Each stream sends [`Event`]s to the display,
//! which merges the streams by time and drops records seen twice.

use std::time::{Duration, SystemTime};

use drift_api::violation::{Source, ViolationsQuery};
use drift_engine::truncate::truncate_chars;
use tokio::sync::mpsc::Sender;

use super::admin::{Admin, Opened};
use super::record::Record;
use crate::cluster::forward::{self, ForwardError};
use crate::http::{self, Line, LineSplitter};

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
pub(crate) struct StreamSpec {
    /// Where the admin API is.
    pub admin: Admin,
    /// `?source=`; `None` for both.
    pub source: Option<Source>,
    /// `?since=` of the first request.
    pub since: Option<SystemTime>,
    /// The limit of connecting and of the answer's head; `None` for none.
    pub timeout: Option<Duration>,
}

impl StreamSpec {
    /// The query that follows the records from `since` on.
    pub(crate) fn query(&self, since: Option<SystemTime>) -> String {
        ViolationsQuery {
            source: self.source,
            since,
            follow: true,
        }
        .to_query_string()
    }

    /// `since=` of a reconnection, given the time of the last record seen.
    pub(crate) fn resume_since(&self, last: Option<SystemTime>) -> Option<SystemTime> {
        let resumed = last.map(|t| t.checked_sub(RESUME_MARGIN).unwrap_or(t));
        match (self.since, resumed) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The connection of one stream, as the header shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ConnState {
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

/// What a stream task reports. `stream` is the index of its [`StreamSpec`].
#[derive(Debug)]
pub(crate) enum Event {
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
    /// The stream follows another pod from now on: `why` the previous one was left.
    Moved {
        stream: usize,
        from: String,
        to: String,
        why: String,
    },
}

/// How one attempt ended.
enum Attempt {
    /// The stream ended or failed; reconnect after a wait.
    Retry(String),
    /// Reconnect at once (the stream follows another pod now).
    Again,
    /// The server refuses the request: give up.
    Refused(String),
    /// Nobody listens any more.
    Closed,
}

/// Follows stream `index` until nobody listens (or the server refuses it).
pub(crate) async fn follow(index: usize, spec: StreamSpec, events: Sender<Event>) {
    let send_state = |state: ConnState| {
        let events = events.clone();
        async move {
            events
                .send(Event::State {
                    stream: index,
                    state,
                })
                .await
                .is_ok()
        }
    };
    let mut last: Option<SystemTime> = None;
    let mut backoff = MIN_BACKOFF;
    loop {
        if !send_state(ConnState::Connecting).await {
            return;
        }
        let why = match attempt(index, &spec, &events, &mut last, &mut backoff).await {
            Attempt::Retry(why) => why,
            Attempt::Again => continue,
            Attempt::Refused(why) => {
                send_state(ConnState::Failed(why)).await;
                return;
            }
            Attempt::Closed => return,
        };
        let state = ConnState::Reconnecting {
            after: backoff,
            reason: why,
        };
        if !send_state(state).await {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Connects (within the timeout), then reads records until the stream ends.
async fn attempt(
    index: usize,
    spec: &StreamSpec,
    events: &Sender<Event>,
    last: &mut Option<SystemTime>,
    backoff: &mut Duration,
) -> Attempt {
    let target = spec
        .admin
        .target("/violations", &spec.query(spec.resume_since(*last)));
    let connect = async {
        let Opened {
            io,
            authority,
            mut failed,
            guard,
        } = spec.admin.open().await?;
        if let Some(message) = forward::unreachable_port(&mut failed).await {
            return Err(ForwardError::Port(message));
        }
        let response = tokio::select! {
            response = http::get(io, &authority, &target) => match response {
                Ok(response) => response,
                Err(e) => match forward::port_message(&mut failed).await {
                    Some(message) => return Err(ForwardError::Port(message)),
                    None => return Err(ForwardError::Http(e.0)),
                },
            },
            Some(message) = &mut failed => return Err(ForwardError::Port(message)),
        };
        Ok((response, failed, guard))
    };
    let connected = match spec.timeout {
        Some(limit) => match tokio::time::timeout(limit, connect).await {
            Ok(connected) => connected,
            Err(_) => Err(ForwardError::Http(format!(
                "no answer within {} (see --request-timeout)",
                humantime::format_duration(limit)
            ))),
        },
        None => connect.await,
    };
    let (mut response, mut failed, _guard) = match connected {
        Ok(connected) => connected,
        Err(ForwardError::Http(why)) => return Attempt::Retry(why),
        Err(why) => return moved_or_retry(index, spec, events, why).await,
    };
    if response.status != 200 {
        return refused(response).await;
    }
    let connected = Event::State {
        stream: index,
        state: ConnState::Connected,
    };
    if events.send(connected).await.is_err() {
        return Attempt::Closed;
    }
    *backoff = MIN_BACKOFF;
    let mut lines = LineSplitter::new(MAX_LINE_BYTES);
    loop {
        let chunk = tokio::select! {
            chunk = response.chunk() => chunk,
            Some(message) = &mut failed => {
                return moved_or_retry(index, spec, events, ForwardError::Port(message)).await;
            }
        };
        let chunk = match chunk {
            None => return Attempt::Retry("the stream ended".to_owned()),
            Some(Err(e)) => return Attempt::Retry(e.0),
            Some(Ok(chunk)) => chunk,
        };
        for line in lines.push(&chunk) {
            let Some(event) = event_of(index, line, last) else {
                continue;
            };
            if events.send(event).await.is_err() {
                return Attempt::Closed;
            }
        }
    }
}

/// After a forward failed: on at once when the stream moved to another pod, else retried.
async fn moved_or_retry(
    index: usize,
    spec: &StreamSpec,
    events: &Sender<Event>,
    why: ForwardError,
) -> Attempt {
    match spec.admin.failed(&why).await {
        Ok((from, to)) => {
            let moved = Event::Moved {
                stream: index,
                from,
                to,
                why: why.to_string(),
            };
            if events.send(moved).await.is_err() {
                return Attempt::Closed;
            }
            Attempt::Again
        }
        Err(text) => Attempt::Retry(text),
    }
}

/// An answer other than 200: a client error is for good, anything else is retried.
async fn refused(response: http::Response) -> Attempt {
    let status = response.status;
    let body = response.bytes(64 * 1024).await.unwrap_or_default();
    let body = String::from_utf8_lossy(&body);
    let first = body.lines().next().unwrap_or_default().trim();
    let reason = hyper::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .map_or(format!("HTTP {status}"), |r| format!("HTTP {status} {r}"));
    // The agent's own word that it exports nothing (it names the flag and the chart value).
    if status == 404 && first.starts_with(drift_api::violation::EXPORT_NOT_ENABLED) {
        return Attempt::Refused(truncate_chars(first, 300));
    }
    let text = if first.is_empty() {
        reason
    } else {
        format!("{reason}: {}", truncate_chars(first, 200))
    };
    if matches!(status, 400 | 401 | 403 | 404 | 405) {
        let hint = if status == 404 {
            " (is this a Drift Sentinel admin API, e.g. port 9090 of an agent pod?)"
        } else {
            ""
        };
        return Attempt::Refused(format!("{text}{hint}"));
    }
    Attempt::Retry(text)
}

/// The event of one line; `None` for an empty one.
fn event_of(index: usize, line: Line, last: &mut Option<SystemTime>) -> Option<Event> {
    let text = match line {
        Line::TooLong => return Some(Event::Skipped { stream: index }),
        Line::Text(text) if text.trim().is_empty() => return None,
        Line::Text(text) => text,
    };
    Some(match Record::parse(&text) {
        Some(record) => {
            if let Some(time) = record.time() {
                *last = Some(last.map_or(time, |l| l.max(time)));
            }
            Event::Record {
                stream: index,
                line: text,
                record: Box::new(record),
            }
        }
        None => Event::Skipped { stream: index },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::AdminUrl;

    fn spec(base: &str) -> StreamSpec {
        StreamSpec {
            admin: Admin::Url(AdminUrl::parse(base).unwrap()),
            source: None,
            since: None,
            timeout: None,
        }
    }

    #[test]
    fn query_of_the_followed_stream() {
        let at = humantime::parse_rfc3339("2027-01-15T08:00:00.000001Z").unwrap();
        let mut s = spec("http://127.0.0.1:9090/prefix/");
        assert_eq!(s.query(None), "follow=true");
        s.source = Some(Source::Audit);
        assert_eq!(
            s.admin.target("/violations", &s.query(Some(at))),
            "/prefix/violations?source=audit&since=2027-01-15T08%3A00%3A00.000001Z&follow=true"
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

    #[test]
    fn lines_become_records_or_skips() {
        let mut last = None;
        let record =
            r#"{"eventType":"violation_admission","id":"1","timestamp":"2027-01-15T08:00:00Z"}"#;
        assert!(matches!(
            event_of(0, Line::Text(record.into()), &mut last),
            Some(Event::Record { .. })
        ));
        assert_eq!(
            last,
            Some(humantime::parse_rfc3339("2027-01-15T08:00:00Z").unwrap())
        );
        assert!(matches!(
            event_of(0, Line::Text("not json".into()), &mut last),
            Some(Event::Skipped { .. })
        ));
        assert!(event_of(0, Line::Text("  ".into()), &mut last).is_none());
        assert!(matches!(
            event_of(0, Line::TooLong, &mut last),
            Some(Event::Skipped { .. })
        ));
    }
}
