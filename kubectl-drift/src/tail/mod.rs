//! `kubectl drift tail` (SPEC §9): the exported violations, live, from the agents' admin APIs
//! (`GET /violations?follow=true`), merged by time — as a terminal UI, or as NDJSON with
//! `--no-tui`.
//!
//! Each admin API is one [`stream::StreamSpec`] read by its own thread, which reconnects when the
//! stream ends (the pod restarted) and resumes from the last record's time; the records of all
//! streams are merged by `timestamp` and deduplicated by `id` and `timestamp`. `--url` gives the
//! admin APIs directly; without it, [`crate::cluster::tail`] port-forwards to the agent pods of
//! the cluster and gives [`follow`] one loopback URL per pod.

pub mod app;
pub mod record;
pub mod stream;
mod terminal;
pub mod ui;

use std::io::{self, IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use crossterm::event::Event as CtEvent;

use anyhow::{Context as _, bail};
use reqwest::Url;

use crate::Verdict;
use crate::cli::{TailArgs, TailSource};
use app::{App, Filters, SourceFilter};
use record::{Dedupe, Source};
use stream::{ConnState, Event, StreamSpec};

pub fn run(args: &TailArgs) -> anyhow::Result<Verdict> {
    if args.url.is_empty() {
        // The cluster's agent pods, through port-forwarding.
        return crate::cluster::tail(args);
    }
    let admins = args
        .url
        .iter()
        .map(|u| Ok((u.trim_end_matches('/').to_owned(), admin_base(u)?)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    follow(args, admins)
}

/// Follows the admin APIs `admins` — each a label for the header and messages (the URL, or a
/// pod's name) and its base URL — with the options of `args` other than `--url`. The cluster
/// mode calls this with one port-forwarded URL per agent pod.
pub fn follow(args: &TailArgs, admins: Vec<(String, Url)>) -> anyhow::Result<Verdict> {
    let since = args
        .since
        .as_deref()
        .map(|s| parse_since(s, SystemTime::now()))
        .transpose()?;
    let source = args.source.map(|s| match s {
        TailSource::Webhook => Source::Webhook,
        TailSource::Audit => Source::Audit,
    });
    let specs: Vec<StreamSpec> = admins
        .into_iter()
        .map(|(label, base)| StreamSpec {
            label,
            base,
            source,
            since,
        })
        .collect();
    let filters = Filters {
        namespace: args.namespace.clone().unwrap_or_default(),
        rule: args.rule.clone().unwrap_or_default(),
        source: source.map_or(SourceFilter::All, SourceFilter::Only),
        text: String::new(),
    };
    if args.no_tui {
        ndjson(&specs, &filters, &mut io::stdout().lock())?;
    } else {
        tui(&specs, filters)?;
    }
    Ok(Verdict::Allowed)
}

/// The admin API's base URL from `--url`: `http(s)://host:port[/prefix]`; a trailing
/// `/violations` is taken off.
pub fn admin_base(text: &str) -> anyhow::Result<Url> {
    let mut url = Url::parse(text)
        .with_context(|| format!("--url {text:?} is not a URL like http://127.0.0.1:9090"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        bail!("--url {text:?} is not an http:// or https:// URL like http://127.0.0.1:9090");
    }
    let path = url.path().trim_end_matches('/');
    let path = path.strip_suffix("/violations").unwrap_or(path).to_owned();
    url.set_path(&path);
    url.set_query(None);
    url.set_fragment(None);
    Ok(url)
}

/// `--since`: a duration before `now` (`10m`, `1h30m`, `2d`) or an RFC 3339 time.
pub fn parse_since(text: &str, now: SystemTime) -> anyhow::Result<SystemTime> {
    if let Some(time) = record::parse_rfc3339(text) {
        return Ok(time);
    }
    let duration = humantime::parse_duration(text.trim()).map_err(|_| {
        anyhow::anyhow!(
            "--since {text:?} is neither a duration (10m, 1h30m) nor an RFC 3339 time (2027-01-15T08:00:00Z)"
        )
    })?;
    Ok(now.checked_sub(duration).unwrap_or(SystemTime::UNIX_EPOCH))
}

/// The streams' threads; they stop when dropped (and end anyway with the process).
struct Streams {
    events: mpsc::Receiver<Event>,
    stop: Arc<AtomicBool>,
}

impl Streams {
    fn start(specs: &[StreamSpec]) -> anyhow::Result<Streams> {
        let (tx, events) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        for (index, spec) in specs.iter().enumerate() {
            stream::spawn(index, spec.clone(), tx.clone(), stop.clone())
                .context("cannot start a reader thread")?;
        }
        Ok(Streams { events, stop })
    }
}

impl Drop for Streams {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// `--no-tui`: each new record that the filters let through, as received, one line each, until
/// interrupted (or until every stream failed for good). Connection changes go to stderr.
fn ndjson(specs: &[StreamSpec], filters: &Filters, out: &mut impl Write) -> anyhow::Result<()> {
    let streams = Streams::start(specs)?;
    let mut dedupe = Dedupe::new(100_000);
    let mut states: Vec<Option<ConnState>> = vec![None; specs.len()];
    let mut failed = vec![false; specs.len()];
    let mut last_said: Vec<String> = vec![String::new(); specs.len()];
    for event in streams.events.iter() {
        match event {
            Event::Record { line, record, .. } => {
                if !dedupe.first_time(&record) || !filters.matches(&record) {
                    continue;
                }
                let written = writeln!(out, "{line}").and_then(|()| out.flush());
                match written {
                    Ok(()) => {}
                    // Read by `head` or the like, which has seen enough.
                    Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
                    Err(e) => return Err(e).context("cannot write to stdout"),
                }
            }
            Event::Skipped { stream } => {
                eprintln!(
                    "kubectl-drift: {}: skipped a line that is not a record",
                    specs[stream].label
                );
            }
            Event::State { stream, state } => {
                // Say what changed, not every attempt of a retry loop.
                let text = match &state {
                    ConnState::Connecting => None,
                    ConnState::Connected => states[stream]
                        .as_ref()
                        .is_some_and(|s| matches!(s, ConnState::Reconnecting { .. }))
                        .then(|| "connected again".to_owned()),
                    ConnState::Reconnecting { reason, .. } => {
                        Some(format!("reconnecting: {reason}"))
                    }
                    ConnState::Failed(reason) => Some(format!("gave up: {reason}")),
                };
                if let Some(text) = text
                    && text != last_said[stream]
                {
                    eprintln!("kubectl-drift: {}: {text}", specs[stream].label);
                    last_said[stream] = text;
                }
                if let ConnState::Failed(reason) = &state {
                    failed[stream] = true;
                    if failed.iter().all(|f| *f) {
                        bail!("cannot follow {}: {reason}", specs[stream].url(None));
                    }
                }
                if !matches!(state, ConnState::Connecting) {
                    states[stream] = Some(state);
                }
            }
        }
    }
    Ok(())
}

/// Reads the terminal's events on a thread of its own. crossterm spins inside its read when the
/// terminal goes away (EOF or EIO on a hung-up tty), so the event loop must not wait in it: it
/// waits on this channel instead and can always see signals and a terminal that is gone.
fn spawn_input(stop: Arc<AtomicBool>) -> anyhow::Result<mpsc::Receiver<io::Result<CtEvent>>> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("tail-input".to_owned())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let event = match crossterm::event::poll(Duration::from_millis(200)) {
                    Ok(true) => crossterm::event::read(),
                    Ok(false) => continue,
                    Err(e) => Err(e),
                };
                let failed = event.is_err();
                if tx.send(event).is_err() || failed {
                    return;
                }
            }
        })
        .context("cannot start the input thread")?;
    Ok(rx)
}

/// The terminal UI, until `q`, Esc, Ctrl-C, a termination signal, or the terminal going away.
fn tui(specs: &[StreamSpec], filters: Filters) -> anyhow::Result<()> {
    if !io::stdout().is_terminal() {
        bail!("tail shows a terminal UI and needs a terminal; use --no-tui to print NDJSON");
    }
    let urls = specs.iter().map(|s| s.label.clone()).collect();
    let mut app = App::new(urls, filters);
    let streams = Streams::start(specs)?;
    let guard = terminal::Guard::enter().context("cannot set up the terminal")?;
    let mut terminal =
        ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(io::stdout()))
            .context("cannot set up the terminal")?;
    terminal.clear()?;
    let input = spawn_input(streams.stop.clone())?;
    let mut view = ui::ListView::default();
    let mut dirty = true;
    let mut checked = Instant::now();
    loop {
        // Everything that arrived, bounded so that keys stay responsive under a flood.
        for event in streams.events.try_iter().take(5_000) {
            app.on_event(event);
            dirty = true;
        }
        if dirty {
            terminal.draw(|frame| ui::draw(frame, &app, &mut view))?;
            dirty = false;
        }
        match input.recv_timeout(Duration::from_millis(100)) {
            Ok(Ok(CtEvent::Key(key))) => {
                // Debug builds only: lets the tests check that a panic restores the terminal.
                if cfg!(debug_assertions)
                    && key.code == crossterm::event::KeyCode::Char('!')
                    && std::env::var_os("KUBECTL_DRIFT_TAIL_TEST_PANIC").is_some()
                {
                    panic!("test panic requested with KUBECTL_DRIFT_TAIL_TEST_PANIC");
                }
                app.on_key(key);
                dirty = true;
            }
            Ok(Ok(CtEvent::Resize(..))) => dirty = true,
            Ok(Ok(_)) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Ok(Err(e)) => return Err(e).context("cannot read the terminal"),
            Err(mpsc::RecvTimeoutError::Disconnected) => bail!("the terminal's input ended"),
        }
        if app.quit || guard.signalled() {
            break;
        }
        if terminal::panicked() {
            drop(guard);
            bail!("internal error (see the panic message above)");
        }
        // A terminal that went away without a SIGHUP: nothing left to show on.
        if checked.elapsed() >= Duration::from_secs(1) {
            checked = Instant::now();
            if !io::stdout().is_terminal() {
                break;
            }
        }
    }
    drop(streams);
    drop(guard);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_as_a_duration_or_a_time() {
        let now = humantime::parse_rfc3339("2027-01-15T08:00:00Z").unwrap();
        let t = |s: &str| humantime::parse_rfc3339(s).unwrap();
        assert_eq!(parse_since("10m", now).unwrap(), t("2027-01-15T07:50:00Z"));
        assert_eq!(
            parse_since("1h 30m", now).unwrap(),
            t("2027-01-15T06:30:00Z")
        );
        assert_eq!(
            parse_since("2027-01-15T09:00:00+01:00", now).unwrap(),
            t("2027-01-15T08:00:00Z")
        );
        assert_eq!(
            parse_since("2027-01-14T08:00:00.5Z", now).unwrap(),
            t("2027-01-14T08:00:00.5Z")
        );
        let error = parse_since("yesterday", now).unwrap_err().to_string();
        assert!(error.contains("--since \"yesterday\""), "{error}");
    }

    #[test]
    fn admin_base_urls() {
        assert_eq!(
            admin_base("http://127.0.0.1:9090").unwrap().as_str(),
            "http://127.0.0.1:9090/"
        );
        assert_eq!(
            admin_base("http://127.0.0.1:9090/violations?follow=true")
                .unwrap()
                .as_str(),
            "http://127.0.0.1:9090/"
        );
        assert_eq!(
            admin_base("https://h/prefix/").unwrap().as_str(),
            "https://h/prefix"
        );
        assert!(admin_base("127.0.0.1:9090").is_err());
        assert!(admin_base("ftp://h").is_err());
    }

    /// A fake admin API: answers each connection in turn with the next of `answers` (status
    /// line and body, the body ended by closing the connection) and reports the request lines.
    fn fake_admin(answers: Vec<(&'static str, String)>) -> (Url, mpsc::Receiver<String>) {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, requests) = mpsc::channel();
        std::thread::spawn(move || {
            for (status, body) in answers {
                let Ok((stream, _)) = listener.accept() else {
                    return;
                };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request_line = String::new();
                reader.read_line(&mut request_line).unwrap();
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).unwrap() == 0 || header == "\r\n" {
                        break;
                    }
                }
                let _ = tx.send(request_line.trim_end().to_owned());
                let mut stream = stream;
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\ncontent-type: application/x-ndjson\r\nconnection: close\r\n\r\n{body}"
                );
            }
        });
        (
            admin_base(&format!("http://127.0.0.1:{port}")).unwrap(),
            requests,
        )
    }

    fn line(id: &str, time: &str, namespace: &str) -> String {
        format!(
            "{{\"eventType\":\"violation_admission\",\"id\":\"{id}\",\"timestamp\":\"{time}\",\"resourceNamespace\":\"{namespace}\"}}\n"
        )
    }

    #[test]
    fn ndjson_resumes_with_since_and_prints_each_record_once() {
        let one = line("1", "2027-01-15T08:00:20.5Z", "prod");
        let two = line("2", "2027-01-15T08:00:30Z", "prod");
        let other = line("3", "2027-01-15T08:00:31Z", "other");
        let three = line("4", "2027-01-15T08:00:40Z", "prod");
        let (base, requests) = fake_admin(vec![
            ("200 OK", format!("{one}not json\n{two}")),
            // After the reconnection: from 10 s before the last record, repeats included.
            ("200 OK", format!("{two}{other}{three}{one}")),
            ("404 Not Found", "no\n".to_owned()),
        ]);
        let spec = StreamSpec {
            label: "fake".to_owned(),
            base,
            source: Some(Source::Webhook),
            since: Some(humantime::parse_rfc3339("2027-01-15T08:00:00Z").unwrap()),
        };
        let filters = Filters {
            namespace: "prod".to_owned(),
            ..Filters::default()
        };
        let mut out = Vec::new();
        let error = ndjson(&[spec], &filters, &mut out).unwrap_err().to_string();
        assert!(error.contains("HTTP 404"), "{error}");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("{one}{two}{three}")
        );
        let requests: Vec<String> = requests.try_iter().collect();
        assert_eq!(
            requests,
            [
                "GET /violations?follow=true&source=webhook&since=2027-01-15T08%3A00%3A00.000000Z HTTP/1.1",
                "GET /violations?follow=true&source=webhook&since=2027-01-15T08%3A00%3A20.000000Z HTTP/1.1",
                "GET /violations?follow=true&source=webhook&since=2027-01-15T08%3A00%3A30.000000Z HTTP/1.1",
            ]
        );
    }

    #[test]
    fn ndjson_of_a_stream_that_fails_for_good() {
        // Nothing listens on port 1 of a URL that answers 404? Use a listener that answers 404.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            for stream in listener.incoming().take(1) {
                let mut stream = stream.unwrap();
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                let _ = stream.write_all(
                    b"HTTP/1.1 404 Not Found\r\ncontent-length: 10\r\nconnection: close\r\n\r\nnot found\n",
                );
            }
        });
        let spec = StreamSpec {
            label: "test".to_owned(),
            base: admin_base(&format!("http://127.0.0.1:{port}")).unwrap(),
            source: None,
            since: None,
        };
        let mut out = Vec::new();
        let error = ndjson(&[spec], &Filters::default(), &mut out)
            .unwrap_err()
            .to_string();
        assert!(error.contains("HTTP 404 Not Found: not found"), "{error}");
        assert!(error.contains("/violations?follow=true"), "{error}");
        assert!(out.is_empty());
    }
}
