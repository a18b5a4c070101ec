//! reference §5 and §6 timeouts through the real binary: a request the write timeout answers is
//! recorded as nothing but a timeout; `/healthz` and `/readyz` answer within the kubelet's probe
//! timeout while decisions run; the read-header timeout bounds silent connections and request
//! heads over HTTP/1 and HTTP/2 alike, and spares keep-alive connections waiting for their next
//! request; HTTP/2 pings do not keep a connection open past the idle timeout.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use drift_testkit::objects::args_review;
use serde_json::Value;
use support::{Agent, IMAGE_RULE as RULE, plain_client, post, rule_config_map};

fn offline(dir: &std::path::Path, extra: &[&str]) -> Agent {
    let rules = dir.join("rules.yaml");
    std::fs::write(&rules, rule_config_map("ops", "strict", RULE)).unwrap();
    let mut args = vec!["--rules", rules.to_str().unwrap()];
    args.extend_from_slice(extra);
    Agent::start(&args, false)
}

fn metrics(agent: &Agent) -> String {
    plain_client()
        .get(format!("{}/metrics", agent.base))
        .send()
        .unwrap()
        .text()
        .unwrap()
}

#[test]
fn a_timed_out_request_is_answered_500_and_recorded_as_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let topics = dir.path().join("topics");
    let connection = dir.path().join("connection.yaml");
    let config = format!("{{path: {:?}}}", topics.display().to_string());
    std::fs::write(&connection, support::connection_yaml(&config)).unwrap();
    let agent = offline(
        dir.path(),
        &[
            "--write-timeout",
            "1ms",
            "--enable-admission-violation-export",
            "--connection",
            connection.to_str().unwrap(),
        ],
    );
    // 200,000 changed items take far longer than a millisecond to parse and judge.
    let (code, body) = post(
        &plain_client(),
        &format!("{}/validate", agent.base),
        &args_review("slow-1", 200_000),
    );
    assert_eq!(code, 500, "{body}");
    assert_eq!(
        body["response"]["uid"], "slow-1",
        "the uid is echoed: {body}"
    );
    assert_eq!(body["response"]["status"]["code"], 500);
    assert!(
        body["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .contains("write timeout")
    );
    // Give a late evaluation every chance to record something it must not.
    std::thread::sleep(Duration::from_secs(3));
    let text = metrics(&agent);
    assert!(
        text.contains("drift_sentinel_admission_requests_total{namespace=\"\",resource=\"\",result=\"timeout\"} 1"),
        "{text}"
    );
    assert!(!text.contains("result=\"denied\""), "{text}");
    assert!(!text.contains("drift_sentinel_violations_total{"), "{text}");
    let decisions: Vec<String> = agent
        .logs()
        .into_iter()
        .filter(|l| l.contains("\"admission decision") && l.contains("slow-1"))
        .collect();
    assert_eq!(decisions.len(), 1, "{decisions:#?}");
    assert!(
        decisions[0].contains("\"result\":\"timeout\""),
        "{decisions:#?}"
    );
    let records: usize = std::fs::read_dir(topics.join("audit-channel"))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| {
                    std::fs::read_to_string(e.path())
                        .unwrap_or_default()
                        .lines()
                        .count()
                })
                .sum()
        })
        .unwrap_or(0);
    assert_eq!(records, 0, "a timed-out request is never exported");
}

/// Decisions run on a few threads: more slow requests at once than there are threads leaves
/// some waiting for one, and the write timeout answers for those too.
#[test]
fn requests_waiting_for_a_decision_thread_are_answered_by_the_write_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let agent = offline(dir.path(), &["--write-timeout", "1ms"]);
    let threads: usize = agent
        .logs()
        .iter()
        .find(|l| l.contains("\"message\":\"listening\""))
        .and_then(|l| serde_json::from_str::<Value>(l).ok())
        .and_then(|l| l["decision_threads"].as_u64())
        .expect("the listening line names the decision threads") as usize;
    let callers = 3 * threads;
    let url = format!("{}/validate", agent.base);
    let answers: Vec<(u16, Value)> = std::thread::scope(|scope| {
        let calls: Vec<_> = (0..callers)
            .map(|n| {
                let url = &url;
                scope.spawn(move || {
                    post(
                        &plain_client(),
                        url,
                        &args_review(&format!("queued-{n}"), 200_000),
                    )
                })
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    for (n, (code, body)) in answers.iter().enumerate() {
        assert_eq!(*code, 500, "{body}");
        assert_eq!(body["response"]["uid"], format!("queued-{n}"), "{body}");
    }
    std::thread::sleep(Duration::from_secs(2));
    let text = metrics(&agent);
    let timeouts = format!(
        "drift_sentinel_admission_requests_total{{namespace=\"\",resource=\"\",result=\"timeout\"}} {callers}"
    );
    assert!(text.contains(&timeouts), "{text}");
    assert!(!text.contains("result=\"denied\""), "{text}");
}

/// The kubelet's default probe timeout (`timeoutSeconds: 1`); the chart's probes allow 2 s
/// (readiness) and 3 s (liveness). How fast the probes are answered under this load is measured
/// by `bench/examples/probe_latency.rs`, not asserted here: a loaded machine slows them.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

#[test]
fn probes_are_answered_within_the_kubelets_timeout_while_decisions_run() {
    let dir = tempfile::tempdir().unwrap();
    let agent = offline(dir.path(), &[]);
    let url = format!("{}/validate", agent.base);
    // Under 1 MiB each: bodies that small were once judged on the async workers themselves.
    let body = args_review("load", 40_000).to_string();
    assert!(body.len() < 1024 * 1024);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load: Vec<_> = (0..4)
        .map(|_| {
            let (url, body, stop) = (url.clone(), body.clone(), stop.clone());
            std::thread::spawn(move || {
                let client = plain_client();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = client
                        .post(&url)
                        .header("Content-Type", "application/json")
                        .body(body.clone())
                        .send();
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    // As the kubelet probes: a new connection each time, given up after the timeout.
    let probe = reqwest::blocking::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(PROBE_TIMEOUT)
        .build()
        .unwrap();
    let mut late = Vec::new();
    for n in 0..40 {
        let path = if n % 2 == 0 { "/healthz" } else { "/readyz" };
        let started = Instant::now();
        let answered = probe
            .get(format!("{}{path}", agent.base))
            .send()
            .is_ok_and(|r| r.status().is_success());
        let took = started.elapsed();
        if !answered || took >= PROBE_TIMEOUT {
            late.push((path, took));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for thread in load {
        let _ = thread.join();
    }
    assert!(
        late.is_empty(),
        "probes not answered within the kubelet's {PROBE_TIMEOUT:?}: {late:?}"
    );
}

/// Whether the server closed `stream` within `limit` (a read returns EOF or an error).
fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    stream.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 1024];
    let started = Instant::now();
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return false;
            }
            Err(_) => return started.elapsed() <= limit,
        }
    }
}

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// An empty SETTINGS frame.
const H2_SETTINGS: &[u8] = &[0, 0, 0, 4, 0, 0, 0, 0, 0];

#[test]
fn the_read_header_timeout_holds_for_silent_connections_and_slow_heads() {
    let dir = tempfile::tempdir().unwrap();
    let agent = offline(
        dir.path(),
        &["--read-header-timeout", "1s", "--idle-timeout", "30s"],
    );
    let connect = || TcpStream::connect(("127.0.0.1", agent.port)).unwrap();

    // A connection that sends nothing.
    let mut silent = connect();
    assert!(
        closed_within(&mut silent, Duration::from_secs(3)),
        "silent connection kept"
    );

    // HTTP/1: a request head sent in pieces, one every 300 ms.
    let mut slow = connect();
    let started = Instant::now();
    let head = b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Slow: aaaaaaaaaaaa\r\n";
    let mut cut = false;
    for piece in head.chunks(8) {
        if slow.write_all(piece).is_err() {
            cut = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
        if started.elapsed() > Duration::from_secs(6) {
            break;
        }
    }
    assert!(
        cut || closed_within(&mut slow, Duration::from_secs(1)),
        "HTTP/1 slow head kept"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "HTTP/1 slow head lasted {:?}",
        started.elapsed()
    );

    // HTTP/2 (prior knowledge): the preface and settings, then a HEADERS frame never finished.
    let mut h2 = connect();
    h2.write_all(H2_PREFACE).unwrap();
    h2.write_all(H2_SETTINGS).unwrap();
    // HEADERS on stream 1 without END_HEADERS, announcing more than is sent.
    h2.write_all(&[0, 0, 10, 1, 0, 0, 0, 0, 1, 0x82, 0x86])
        .unwrap();
    let started = Instant::now();
    assert!(
        closed_within(&mut h2, Duration::from_secs(3)),
        "HTTP/2 slow head kept"
    );
    assert!(started.elapsed() < Duration::from_secs(3));

    // HTTP/2 PINGs are not requests: they do not keep a connection open.
    let mut pinging = connect();
    pinging.write_all(H2_PREFACE).unwrap();
    pinging.write_all(H2_SETTINGS).unwrap();
    let started = Instant::now();
    let mut open = true;
    while started.elapsed() < Duration::from_secs(5) {
        let ping = [0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
        if pinging.write_all(&ping).is_err() {
            open = false;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        !open || closed_within(&mut pinging, Duration::from_millis(500)),
        "pings kept the connection open for 5 s"
    );
}

/// Sends `GET /healthz` on `stream` and reads its whole answer (a keep-alive HTTP/1.1 response
/// with a Content-Length); the status line, or why there was none.
fn health_on(stream: &mut TcpStream) -> Result<String, String> {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .map_err(|e| format!("write: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let text = String::from_utf8_lossy(&answer).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap())
                })
                .unwrap_or(0);
            if body.len() >= length {
                return Ok(head.lines().next().unwrap_or_default().to_owned());
            }
        }
        match stream.read(&mut buf) {
            Ok(0) => return Err(format!("closed after {text:?}")),
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

/// A keep-alive connection waiting for its next request is idle, not reading a head: only the
/// idle timeout closes it (the API server reuses its pooled connections; one closed under it
/// fails an admission). A head that begins on it must still be read within the read-header
/// timeout.
#[test]
fn the_read_header_timeout_spares_idle_keep_alive_connections() {
    let dir = tempfile::tempdir().unwrap();
    let agent = offline(
        dir.path(),
        &["--read-header-timeout", "1s", "--idle-timeout", "30s"],
    );
    let mut kept = TcpStream::connect(("127.0.0.1", agent.port)).unwrap();
    for round in 0..2 {
        let status = health_on(&mut kept).unwrap_or_else(|e| panic!("request {round}: {e}"));
        assert!(status.contains(" 200 "), "request {round}: {status}");
        // Three read-header timeouts of quiet.
        std::thread::sleep(Duration::from_secs(3));
    }

    // On a connection that has answered a request, a later head sent in pieces.
    let mut slow = TcpStream::connect(("127.0.0.1", agent.port)).unwrap();
    let status = health_on(&mut slow).unwrap();
    assert!(status.contains(" 200 "), "{status}");
    let started = Instant::now();
    let mut cut = false;
    for piece in
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaa\r\n".chunks(4)
    {
        if slow.write_all(piece).is_err() {
            cut = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(
        cut || closed_within(&mut slow, Duration::from_secs(1)),
        "a slow head on a kept connection was kept"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "a slow head on a kept connection lasted {:?}",
        started.elapsed()
    );
}
