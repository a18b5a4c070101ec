//! `kubectl drift tail` (reference §9): the exported violations, live, from the agents' admin APIs
//! (`GET /violations?follow=true`), merged by time — as a terminal UI, or as lines with
//! `--no-tui` (`-o json`: NDJSON as received, `-o yaml`, `-o text`).
//!
//! Each admin API is one [`stream::StreamSpec`] followed by a task of its own, which
//! reconnects when the stream ends (the pod restarted) and resumes from the last record's time;
//! the records of all streams are merged by `timestamp` and deduplicated by `id` and
//! `timestamp`. `--url` gives the admin APIs directly; without it every running agent pod is
//! followed through port-forwarding ([`admin`]).

mod admin;
mod app;
mod filters;
mod record;
mod stats;
mod stream;
mod terminal;
mod ui;

use std::io::{self, IsTerminal, Write};
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, bail};
use crossterm::event::Event as CtEvent;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::cli::Output;
use crate::cluster;
use crate::plan::{Admins, Tail, TailView};
use crate::verdict::Verdict;
use admin::{Admin, Pods};
use app::App;
use filters::Filters;
use record::Dedupe;
use stream::{ConnState, Event, StreamSpec};

pub(crate) async fn run(plan: Tail) -> anyhow::Result<Verdict> {
    let (admins, timeout) = match plan.admins {
        Admins::Urls { urls, timeout } => (urls.into_iter().map(Admin::Url).collect(), timeout),
        Admins::Cluster { kube, agents } => {
            let pods = async {
                let cluster =
                    cluster::connect(&kube, ", or name an agent's admin API with --url").await?;
                Pods::find(cluster, agents).await
            };
            let pods = pods.await.context(
                "cannot follow the agent pods of the cluster (or name an agent's admin API with --url)",
            )?;
            let admins = (0..pods.slots())
                .map(|slot| Admin::Pod {
                    pods: pods.clone(),
                    slot,
                })
                .collect::<Vec<_>>();
            (admins, kube.timeout)
        }
    };
    let specs: Vec<StreamSpec> = admins
        .into_iter()
        .map(|admin| StreamSpec {
            admin,
            source: plan.filters.source,
            since: plan.since,
            timeout,
        })
        .collect();
    let filters = Filters::of(&plan.filters);
    match plan.view {
        TailView::Lines(output) => {
            let print = LinePrint {
                output,
                colour: plan.colour,
            };
            lines(specs, &filters, print, &mut io::stdout().lock()).await?;
        }
        TailView::Tui => tui(specs, filters, plan.colour).await?,
    }
    Ok(Verdict::Allowed)
}

/// The streams' tasks; they stop when dropped.
struct Streams {
    events: mpsc::Receiver<Event>,
    labels: Vec<String>,
    _tasks: JoinSet<()>,
}

impl Streams {
    fn start(specs: Vec<StreamSpec>) -> Streams {
        let (tx, events) = mpsc::channel(4096);
        let labels = specs.iter().map(|s| s.admin.label()).collect();
        let mut tasks = JoinSet::new();
        for (index, spec) in specs.into_iter().enumerate() {
            tasks.spawn(stream::follow(index, spec, tx.clone()));
        }
        Streams {
            events,
            labels,
            _tasks: tasks,
        }
    }
}

/// How `--no-tui` prints a record.
#[derive(Debug, Clone, Copy)]
struct LinePrint {
    output: Output,
    colour: bool,
}

impl LinePrint {
    /// `line` as received (JSON), as a YAML document, or as one line of text.
    fn record(&self, line: &str, record: &record::Record) -> anyhow::Result<String> {
        Ok(match self.output {
            Output::Json => format!("{line}\n"),
            Output::Yaml => {
                let value: serde_json::Value = serde_json::from_str(line)?;
                format!("---\n{}", serde_yaml::to_string(&value)?)
            }
            Output::Text => {
                let mut cells = ui::row_cells(record);
                if self.colour {
                    let style = crate::render::Style::new(true);
                    cells[4] = match cells[4].as_str() {
                        "deny" => style.red(&cells[4]),
                        "warn" => style.yellow(&cells[4]),
                        "bypass" => style.magenta(&cells[4]),
                        _ => cells[4].clone(),
                    };
                }
                // Lines of both sources mix in one output: each says which it is, after the time.
                let source = record.source().map_or("?", |s| s.as_str());
                format!("{}  {source}  {}\n", cells[0], cells[1..].join("  "))
            }
        })
    }
}

/// `--no-tui`: each new record that the filters let through, as received, until interrupted
/// (or until every stream failed for good). Connection changes go to stderr.
async fn lines(
    specs: Vec<StreamSpec>,
    filters: &Filters,
    print: LinePrint,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let mut streams = Streams::start(specs);
    let count = streams.labels.len();
    let mut dedupe = Dedupe::new(100_000);
    let mut states: Vec<Option<ConnState>> = vec![None; count];
    let mut failed: Vec<Option<String>> = vec![None; count];
    let mut last_said: Vec<String> = vec![String::new(); count];
    while let Some(event) = streams.events.recv().await {
        match event {
            Event::Record { line, record, .. } => {
                if !dedupe.first_time(&record) || !filters.matches(&record) {
                    continue;
                }
                let text = print.record(&line, &record)?;
                match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                    Ok(()) => {}
                    // Read by `head` or the like, which has seen enough.
                    Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
                    Err(e) => return Err(e).context("cannot write to stdout"),
                }
            }
            Event::Skipped { stream } => eprintln!(
                "kubectl-drift: {}: skipped a line that is not a record",
                streams.labels[stream]
            ),
            Event::Moved {
                stream,
                from,
                to,
                why,
            } => {
                eprintln!("kubectl-drift: {from}: {why}; following {to} instead");
                streams.labels[stream] = to;
            }
            Event::State { stream, state } => {
                // Say what changed, not every attempt of a retry loop.
                if let Some(text) = state_change(states[stream].as_ref(), &state)
                    && text != last_said[stream]
                {
                    eprintln!("kubectl-drift: {}: {text}", streams.labels[stream]);
                    last_said[stream] = text;
                }
                if let ConnState::Failed(reason) = &state {
                    failed[stream] = Some(reason.clone());
                    if let Some(all) = all_failed(&streams.labels, &failed) {
                        bail!(all);
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

/// When every stream has given up (`failed`: each one's reason, or `None`), the error to end
/// with: the reason once when all share it (export off on every agent), else each stream's.
fn all_failed(labels: &[String], failed: &[Option<String>]) -> Option<String> {
    let reasons: Vec<&str> = failed.iter().map(Option::as_deref).collect::<Option<_>>()?;
    let first = *reasons.first()?;
    Some(if reasons.iter().all(|r| *r == first) {
        format!("cannot follow {}: {first}", labels.join(", "))
    } else {
        let each: Vec<String> = labels
            .iter()
            .zip(&reasons)
            .map(|(label, reason)| format!("{label}: {reason}"))
            .collect();
        format!("cannot follow any agent: {}", each.join("; "))
    })
}

/// What to say on stderr when a stream's state becomes `state`.
fn state_change(before: Option<&ConnState>, state: &ConnState) -> Option<String> {
    match state {
        ConnState::Connecting => None,
        ConnState::Connected => before
            .is_some_and(|s| matches!(s, ConnState::Reconnecting { .. }))
            .then(|| "connected again".to_owned()),
        ConnState::Reconnecting { reason, .. } => Some(format!("reconnecting: {reason}")),
        ConnState::Failed(reason) => Some(format!("gave up: {reason}")),
    }
}

/// Reads the terminal's events on a thread of its own. crossterm spins inside its read when the
/// terminal goes away (EOF or EIO on a hung-up tty) — its async `EventStream` too, whose waker
/// thread loops on that read — so the event loop must not wait in it: it waits on this
/// channel instead and can always see signals and a terminal that is gone. The thread ends
/// when the channel closes (checked every 200 ms) or the terminal fails.
fn spawn_input() -> anyhow::Result<mpsc::Receiver<io::Result<CtEvent>>> {
    let (tx, rx) = mpsc::channel(64);
    std::thread::Builder::new()
        .name("tail-input".to_owned())
        .spawn(move || {
            while !tx.is_closed() {
                let event = match crossterm::event::poll(Duration::from_millis(200)) {
                    Ok(true) => crossterm::event::read(),
                    Ok(false) => continue,
                    Err(e) => Err(e),
                };
                let failed = event.is_err();
                if tx.blocking_send(event).is_err() || failed {
                    return;
                }
            }
        })
        .context("cannot start the input thread")?;
    Ok(rx)
}

/// The terminal UI, until `q`, Esc, Ctrl-C, a termination signal, or the terminal going away.
async fn tui(specs: Vec<StreamSpec>, filters: Filters, colour: bool) -> anyhow::Result<()> {
    if !io::stdout().is_terminal() {
        bail!("tail shows a terminal UI and needs a terminal; use --no-tui to print NDJSON");
    }
    let mut streams = Streams::start(specs);
    let mut app = App::new(streams.labels.clone(), filters);
    let mut signals = terminal::Signals::new().context("cannot watch for signals")?;
    let guard = terminal::Guard::enter().context("cannot set up the terminal")?;
    let mut terminal =
        ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(io::stdout()))
            .context("cannot set up the terminal")?;
    terminal.clear()?;
    let mut input = spawn_input()?;
    let mut view = ui::ListView::default();
    // The sparkline moves on with the clock; the terminal may go away without a SIGHUP.
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut dirty = true;
    loop {
        if dirty {
            let now = SystemTime::now();
            terminal.draw(|frame| ui::draw(frame, &app, &mut view, now, colour))?;
            dirty = false;
        }
        tokio::select! {
            Some(event) = streams.events.recv() => {
                app.on_event(event);
                // Everything else that arrived, bounded so that keys stay responsive.
                for _ in 0..5_000 {
                    let Ok(event) = streams.events.try_recv() else { break };
                    app.on_event(event);
                }
                dirty = true;
            }
            event = input.recv() => {
                match event {
                    Some(Ok(CtEvent::Key(key))) => {
                        // Debug builds only: lets the tests check that a panic restores the
                        // terminal.
                        if cfg!(debug_assertions)
                            && key.code == crossterm::event::KeyCode::Char('!')
                            && std::env::var_os("KUBECTL_DRIFT_TAIL_TEST_PANIC").is_some()
                        {
                            panic!("test panic requested with KUBECTL_DRIFT_TAIL_TEST_PANIC");
                        }
                        app.on_key(key);
                        dirty = true;
                    }
                    Some(Ok(CtEvent::Resize(..))) => dirty = true,
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(e).context("cannot read the terminal"),
                    None => bail!("the terminal's input ended"),
                }
            }
            () = signals.recv() => break,
            _ = tick.tick() => {
                dirty = true;
                if !io::stdout().is_terminal() {
                    break;
                }
            }
        }
        if app.quit {
            break;
        }
        // Nothing will ever arrive (export off on every agent, not an admin API): say so.
        let (labels, failed): (Vec<String>, Vec<Option<String>>) = app
            .streams
            .iter()
            .map(|s| match &s.state {
                ConnState::Failed(reason) => (s.url.clone(), Some(reason.clone())),
                _ => (s.url.clone(), None),
            })
            .unzip();
        if let Some(all) = all_failed(&labels, &failed) {
            drop(streams);
            drop(guard);
            bail!(all);
        }
        if terminal::panicked() {
            drop(guard);
            bail!("internal error (see the panic message above)");
        }
    }
    drop(streams);
    drop(guard);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::AdminUrl;
    use drift_api::violation::Source;
    use filters::Pattern;

    /// A fake admin API: answers each connection in turn with the next of `answers` (status
    /// line and body, the body ended by closing the connection) and reports the request lines.
    fn fake_admin(
        answers: Vec<(&'static str, String)>,
    ) -> (AdminUrl, std::sync::mpsc::Receiver<String>) {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, requests) = std::sync::mpsc::channel();
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
            AdminUrl::parse(&format!("http://127.0.0.1:{port}")).unwrap(),
            requests,
        )
    }

    fn line(id: &str, time: &str, namespace: &str) -> String {
        format!(
            "{{\"eventType\":\"violation_admission\",\"id\":\"{id}\",\"timestamp\":\"{time}\",\"resourceNamespace\":\"{namespace}\"}}\n"
        )
    }

    const JSON: LinePrint = LinePrint {
        output: Output::Json,
        colour: false,
    };

    #[tokio::test]
    async fn lines_resume_with_since_and_print_each_record_once() {
        let one = line("1", "2027-01-15T08:00:20.5Z", "prod");
        let two = line("2", "2027-01-15T08:00:30Z", "prod");
        let other = line("3", "2027-01-15T08:00:31Z", "other");
        let three = line("4", "2027-01-15T08:00:40Z", "prod");
        let (url, requests) = fake_admin(vec![
            ("200 OK", format!("{one}not json\n{two}")),
            // After the reconnection: from 10 s before the last record, repeats included.
            ("200 OK", format!("{two}{other}{three}{one}")),
            ("404 Not Found", "no\n".to_owned()),
        ]);
        let spec = StreamSpec {
            admin: Admin::Url(url),
            source: Some(Source::Webhook),
            since: Some(humantime::parse_rfc3339("2027-01-15T08:00:00Z").unwrap()),
            timeout: Some(Duration::from_secs(5)),
        };
        let filters = Filters {
            namespace: Pattern::from("prod"),
            ..Filters::default()
        };
        let mut out = Vec::new();
        let error = lines(vec![spec], &filters, JSON, &mut out)
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("HTTP 404"), "{error}");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("{one}{two}{three}")
        );
        let requests: Vec<String> = requests.try_iter().collect();
        assert_eq!(
            requests,
            [
                "GET /violations?source=webhook&since=2027-01-15T08%3A00%3A00.000000Z&follow=true HTTP/1.1",
                "GET /violations?source=webhook&since=2027-01-15T08%3A00%3A20.000000Z&follow=true HTTP/1.1",
                "GET /violations?source=webhook&since=2027-01-15T08%3A00%3A30.000000Z&follow=true HTTP/1.1",
            ]
        );
    }

    #[tokio::test]
    async fn lines_of_a_stream_that_fails_for_good() {
        let (url, _) = fake_admin(vec![("404 Not Found", "not found\n".to_owned())]);
        let label = url.to_string();
        let spec = StreamSpec {
            admin: Admin::Url(url),
            source: None,
            since: None,
            timeout: None,
        };
        let mut out = Vec::new();
        let error = lines(vec![spec], &Filters::default(), JSON, &mut out)
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("HTTP 404 Not Found: not found"), "{error}");
        assert!(error.contains(&label), "{error}");
        assert!(out.is_empty());
    }

    #[test]
    fn records_as_yaml_and_text_lines() {
        let text = line("1", "2027-01-15T08:00:20Z", "prod");
        let text = text.trim_end();
        let record = record::Record::parse(text).unwrap();
        let yaml = LinePrint {
            output: Output::Yaml,
            colour: false,
        };
        assert_eq!(
            yaml.record(text, &record).unwrap(),
            "---\neventType: violation_admission\nid: '1'\ntimestamp: 2027-01-15T08:00:20Z\nresourceNamespace: prod\n"
        );
        let plain = LinePrint {
            output: Output::Text,
            colour: false,
        };
        let line = plain.record(text, &record).unwrap();
        // The source follows the time: admission and audit lines mix in one output.
        assert!(line.starts_with("01-15 08:00:20  webhook  prod/"), "{line}");
    }

    #[test]
    fn an_edit_a_bypass_allowed_is_marked() {
        let text = r#"{"eventType":"violation_admission","id":"2","timestamp":"2027-01-15T08:00:21Z","operation":"UPDATE","resourceNamespace":"prod","resourceName":"web","resourceKind":"Deployment","ruleName":"r","ruleNamespace":"ops","mode":"enforce","enforcementAction":"bypass","message":"Drift Sentinel: bypass until 2027-01-15T12:00:00Z, in 3h59m: rule ops/r","bypass":{"endState":"active","end":"2027-01-15T12:00:00Z","value":"2027-01-15T12:00:00Z"}}"#;
        let record = record::Record::parse(text).unwrap();
        let coloured = LinePrint {
            output: Output::Text,
            colour: true,
        };
        let line = coloured.record(text, &record).unwrap();
        assert!(line.contains("\x1b[35mbypass\x1b[0m"), "{line}");
        assert!(
            line.trim_end()
                .ends_with("bypass until 2027-01-15T12:00:00Z"),
            "{line}"
        );
    }

    #[test]
    fn what_is_said_of_state_changes() {
        let reconnecting = ConnState::Reconnecting {
            after: Duration::from_secs(1),
            reason: "the stream ended".into(),
        };
        assert_eq!(
            state_change(None, &reconnecting).as_deref(),
            Some("reconnecting: the stream ended")
        );
        assert_eq!(
            state_change(Some(&reconnecting), &ConnState::Connected).as_deref(),
            Some("connected again")
        );
        assert_eq!(state_change(None, &ConnState::Connected), None);
        assert_eq!(state_change(None, &ConnState::Connecting), None);
    }

    #[test]
    fn tail_ends_only_when_every_stream_gave_up() {
        let labels = ["pod/a".to_owned(), "pod/b".to_owned()];
        let off = || Some("violation export is not enabled on this agent".to_owned());
        for (failed, expected) in [
            (vec![None, None], None),
            // One agent still followed: keep going.
            (vec![off(), None], None),
            (
                vec![off(), off()],
                Some("cannot follow pod/a, pod/b: violation export is not enabled on this agent"),
            ),
            (
                vec![off(), Some("HTTP 403 Forbidden".to_owned())],
                Some(
                    "cannot follow any agent: pod/a: violation export is not enabled on this agent; pod/b: HTTP 403 Forbidden",
                ),
            ),
        ] {
            assert_eq!(
                all_failed(&labels, &failed).as_deref(),
                expected,
                "{failed:?}"
            );
        }
        assert_eq!(all_failed(&[], &[]), None);
    }
}
