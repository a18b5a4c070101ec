//! Black-box tests of reference §5, "Memory": each input of the webhook's serving side that an
//! attacker on the pod network (or anyone who may edit a workload) controls, entering where it
//! enters, with the agent's peak memory (VmHWM) measured before and after, the answers given
//! within the webhook's timeout, the agent alive and the next legitimate review still judged.

mod support;

use std::time::{Duration, Instant};

use drift_testkit::peak_rss;
use serde_json::Value;
use support::{Agent, assert_still_judging, plain_client, post_text, post_timed, replicas_review};

const MIB: u64 = 1024 * 1024;
/// The API server's longest webhook timeout is 30 s; the chart's is 10 s.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// POSTs `body` to `/validate`, timed: (status, answer, took).
fn validate(agent: &Agent, body: String) -> (u16, String, Duration) {
    post_timed(&format!("{}/validate", agent.base), body)
}

/// A user, name, namespace or resource of 2 MiB is logged cut to 16 KiB with a marker of its
/// length; a uid of 2 MiB is refused (400, a short answer, nothing echoed) rather than echoed
/// in a 2 MiB answer.
#[test]
fn long_request_fields_are_cut_in_the_log_and_a_long_uid_is_refused() {
    let agent = Agent::start(&[], false);
    let long = "x".repeat(2 << 20);
    let pointers = [
        "/request/userInfo/username",
        "/request/name",
        "/request/namespace",
        "/request/resource/resource",
    ];
    for pointer in pointers {
        let mut review = replicas_review("shop");
        *review.pointer_mut(pointer).unwrap() = Value::String(long.clone());
        let body = review.to_string();
        let (before, length) = (peak_rss(agent.pid()), body.len() as u64);
        let (status, answer, took) = validate(&agent, body);
        assert_eq!(
            status,
            200,
            "{pointer}: {}",
            &answer[..answer.len().min(300)]
        );
        assert!(took < WEBHOOK_TIMEOUT, "{pointer}: {took:?}");
        assert!(answer.len() <= 64 * 1024, "{pointer}: {}", answer.len());
        // One request raises the peak by at most 4x its body plus 1 MiB (reference §5).
        let rise = peak_rss(agent.pid()).saturating_sub(before);
        assert!(
            rise <= 4 * length + MIB,
            "{pointer}: peak rose {} KiB",
            rise / 1024
        );
    }
    let decisions: Vec<String> = agent
        .logs()
        .into_iter()
        .filter(|l| l.contains("\"admission decision\""))
        .collect();
    assert_eq!(decisions.len(), pointers.len(), "{decisions:?}");
    for line in &decisions {
        assert!(line.len() < 64 * 1024, "a log line of {} bytes", line.len());
        assert!(
            line.contains("…(cut from 20971"),
            "{}",
            &line[..line.len().min(500)]
        );
    }

    let mut review = replicas_review("shop");
    review["request"]["uid"] = Value::String(long.clone());
    let before = peak_rss(agent.pid());
    let (status, answer, took) = validate(&agent, review.to_string());
    assert_eq!(status, 400, "{}", &answer[..answer.len().min(300)]);
    assert!(took < WEBHOOK_TIMEOUT);
    assert!(
        answer.contains("request.uid is 2097152 bytes long; at most 128 are answered"),
        "{answer}"
    );
    assert!(answer.len() < 1024, "{}", answer.len());

    let rise = peak_rss(agent.pid()).saturating_sub(before);
    assert!(rise <= 4 * 2 * MIB + MIB, "peak rose {} KiB", rise / 1024);
    assert_still_judging(&agent, &replicas_review("after"), false);
}

/// The lines of `/metrics` of one family's series.
fn series<'m>(metrics: &'m str, family: &str) -> Vec<&'m str> {
    let prefix = format!("{family}{{");
    metrics.lines().filter(|l| l.starts_with(&prefix)).collect()
}

/// 1,000 denied UPDATEs posted directly, each adding 100 annotations of new names in a
/// namespace and resource of their own (300,000 series of `violations_total` before the
/// bound, and 1,000 of `admission_requests_total`): the families stay within their number of
/// series, the rest counted under `_other`, `/metrics` stays small and so does the memory.
#[test]
fn label_values_from_callers_are_bounded_in_series() {
    let agent = Agent::start(&[], false);
    let client = plain_client();
    let url = format!("{}/validate", agent.base);
    let before = peak_rss(agent.pid());
    let started = Instant::now();
    for n in 0..1_000 {
        let mut review = replicas_review(&format!("tenant-{n}"));
        review["request"]["resource"]["resource"] = Value::String(format!("kind{n}s"));
        let annotations: serde_json::Map<String, Value> = (0..100)
            .map(|a| (format!("example.com/note-{n}-{a}"), Value::from("x")))
            .collect();
        review["request"]["object"]["metadata"]["annotations"] = Value::Object(annotations);
        let (status, answer) = post_text(&client, &url, review.to_string());
        assert_eq!(status, 200, "{answer}");
    }
    let took = started.elapsed();
    let metrics = agent.metrics();
    let violations = series(&metrics, "drift_sentinel_violations_total");
    let requests = series(&metrics, "drift_sentinel_admission_requests_total");
    // 2,000 exact, 500 with the field `_other`, one per mode with everything `_other`.
    assert!(violations.len() <= 2_000 + 500 + 3, "{}", violations.len());
    assert!(requests.len() <= 1_000 + 7, "{}", requests.len());
    let other = r#"drift_sentinel_violations_total{field="_other",mode="enforce",namespace="_other",resource="_other"}"#;
    assert!(metrics.contains(other), "no {other}");
    assert!(
        metrics.contains(
            r#"drift_sentinel_metric_series_limited_total{metric="drift_sentinel_violations_total"}"#
        ),
        "the limited observations are counted"
    );
    assert!(
        metrics.len() < 1024 * 1024,
        "/metrics is {} bytes",
        metrics.len()
    );
    assert!(
        agent
            .logs()
            .iter()
            .any(|l| l.contains("metric series limit reached")),
        "the limit is logged"
    );
    let rise = peak_rss(agent.pid()).saturating_sub(before);
    eprintln!(
        "1,000 reviews in {took:?}; peak memory +{} KiB; /metrics {} bytes, {} violation series",
        rise / 1024,
        metrics.len(),
        violations.len()
    );
    assert!(rise < 32 * MIB, "peak memory rose {} MiB", rise / MIB);
    assert_still_judging(&agent, &replicas_review("after"), false);
}

/// Raises this test process's own limit of open files to its hard limit, for the many
/// connections it opens.
fn raise_own_file_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let raised = rustix::process::Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    setrlimit(Resource::Nofile, raised).expect("raise the test's open files");
}

/// GET `/healthz` on a fresh connection: how long it took to answer 200.
fn probe(client: &reqwest::blocking::Client, base: &str) -> Duration {
    let started = Instant::now();
    let response = client
        .get(format!("{base}/healthz"))
        .timeout(Duration::from_secs(5))
        .send()
        .expect("/healthz answers");
    assert!(response.status().is_success(), "{}", response.status());
    started.elapsed()
}

/// The kubelet's probe timeout: its default, 1 s (the chart's is 3 s).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// A fresh client per probe, as the kubelet connects anew each time.
fn fresh_client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

/// 48 connections each send 8 MiB − 1 byte of an 8 MiB body and wait (399 MiB before the
/// bound): four take the shared budget, the others are answered 503 within 5 s; meanwhile the
/// probes answer, and a review of ordinary size is judged (it draws on the reserve).
#[test]
fn bodies_held_open_take_a_budget_not_the_memory() {
    use std::io::{Read as _, Write as _};
    let agent = Agent::start(&["--read-timeout", "8s"], false);
    let before = peak_rss(agent.pid());
    let size = 8 * 1024 * 1024;
    let port = agent.port;
    let started = Instant::now();
    let senders: Vec<_> = (0..48)
        .map(|_| {
            std::thread::spawn(move || {
                let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
                stream
                    .set_write_timeout(Some(Duration::from_secs(12)))
                    .unwrap();
                stream
                    .set_read_timeout(Some(Duration::from_secs(20)))
                    .unwrap();
                let head = format!(
                    "POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {size}\r\n\r\n"
                );
                // The answer is read as it comes, while the body is still being sent.
                let mut reading = stream.try_clone().unwrap();
                let reader = std::thread::spawn(move || {
                    let mut answer = Vec::new();
                    let _ = reading.read_to_end(&mut answer);
                    (String::from_utf8_lossy(&answer).into_owned(), started.elapsed())
                });
                let _ = stream.write_all(head.as_bytes());
                let chunk = vec![b' '; 64 * 1024];
                let mut sent = 0;
                while sent < size - 1 {
                    let n = chunk.len().min(size - 1 - sent);
                    if stream.write_all(&chunk[..n]).is_err() {
                        break;
                    }
                    sent += n;
                }
                reader.join().unwrap()
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let slowest = (0..3)
        .map(|_| probe(&fresh_client(), &agent.base))
        .max()
        .unwrap();
    assert!(slowest < PROBE_TIMEOUT, "/healthz took {slowest:?}");
    let (status, body, took) = validate(&agent, replicas_review("during").to_string());
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("spec.replicas"), "{body}");
    assert!(took < WEBHOOK_TIMEOUT, "{took:?}");
    let mut refused = 0;
    for sender in senders {
        let (answer, when) = sender.join().unwrap();
        let status_line = answer.lines().next().unwrap_or("").to_owned();
        assert!(
            when < WEBHOOK_TIMEOUT,
            "answered after {when:?}: {status_line}"
        );
        if status_line.contains(" 503 ") {
            assert!(
                answer.contains("MiB of request bodies, its limit"),
                "{answer}"
            );
            refused += 1;
        } else {
            assert!(status_line.contains(" 408 "), "{answer}");
        }
    }
    assert!(refused >= 44, "{refused} refused");
    let rise = peak_rss(agent.pid()).saturating_sub(before);
    eprintln!("48 bodies held: peak memory +{} KiB", rise / 1024);
    // The shared budget and the reserve (40 MiB), and the connections.
    assert!(rise < 64 * MIB, "peak memory rose {} MiB", rise / MIB);
    assert_still_judging(&agent, &replicas_review("after"), false);
}

/// With the open-files limit of a default container (1,024), 1,142 silent connections (which
/// made `/healthz` time out before the bound) and then 3,000 half-open TLS handshakes: the
/// connections stay within `--max-connections` (the quietest closed for each newcomer), the
/// probes answer within the kubelet's timeout, a review is judged, and memory stays bounded.
#[test]
fn silent_connections_and_half_open_handshakes_leave_the_probes_room() {
    raise_own_file_limit();
    let dir = tempfile::tempdir().unwrap();
    let ca = drift_testkit::pki::Ca::new("memory");
    let agent = support::https_agent(dir.path(), &ca, &[]);
    // As a container's default: the agent may not raise it further.
    let limit = rustix::process::Rlimit {
        current: Some(1024),
        maximum: Some(1024),
    };
    let pid = rustix::process::Pid::from_raw(agent.pid() as i32);
    rustix::process::prlimit(pid, rustix::process::Resource::Nofile, limit)
        .expect("limit the agent's open files");
    let client = || {
        reqwest::blocking::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(ca.cert_pem().as_bytes()).unwrap())
            .pool_max_idle_per_host(0)
            .build()
            .unwrap()
    };
    let before = peak_rss(agent.pid());
    let connect = || std::net::TcpStream::connect(("127.0.0.1", agent.port)).unwrap();
    let silent: Vec<_> = (0..1_142).map(|_| connect()).collect();
    std::thread::sleep(Duration::from_millis(500));
    for _ in 0..3 {
        let took = probe(&client(), &agent.base);
        assert!(
            took < PROBE_TIMEOUT,
            "/healthz took {took:?} among silent connections"
        );
    }
    // A ClientHello's record header announcing 512 bytes, and the first 100 of them.
    let mut hello = vec![
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
    ];
    hello.resize(105, 0x2a);
    let half_open: Vec<_> = (0..3_000)
        .map(|_| {
            use std::io::Write as _;
            let mut stream = connect();
            let _ = stream.write_all(&hello);
            stream
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    for _ in 0..3 {
        let took = probe(&client(), &agent.base);
        assert!(
            took < PROBE_TIMEOUT,
            "/healthz took {took:?} among half-open handshakes"
        );
    }
    let response = client()
        .post(format!("{}/validate", agent.base))
        .header("Content-Type", "application/json")
        .body(replicas_review("during").to_string())
        .send()
        .expect("a review");
    assert_eq!(response.status(), 200);
    assert!(response.text().unwrap().contains("spec.replicas"));
    let metrics = client()
        .get(format!("{}/metrics", agent.base))
        .send()
        .and_then(|r| r.text())
        .unwrap();
    let open: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("drift_sentinel_connections "))
        .and_then(|v| v.parse().ok())
        .expect("drift_sentinel_connections");
    assert!(open <= 512.0, "{open} connections open");
    assert!(
        metrics.contains(r#"drift_sentinel_connections_closed_total{reason="evicted"}"#),
        "evictions are counted"
    );
    let rise = peak_rss(agent.pid()).saturating_sub(before);
    eprintln!(
        "{} silent and {} half-open connections: peak memory +{} KiB",
        silent.len(),
        half_open.len(),
        rise / 1024
    );
    // 512 connections of at most ~50 KiB each.
    assert!(rise < 32 * MIB, "peak memory rose {} MiB", rise / MIB);
    drop((silent, half_open));
    assert!(probe(&client(), &agent.base) < PROBE_TIMEOUT);
}
