//! Load benchmark of the webhook with violation export off and on (SPEC §7: exporting must not
//! delay admission responses; the bar is export-on latency within 10 % of export-off).
//!
//! Starts the real agent binary, then drives it from several keep-alive clients over loopback
//! HTTP with violating UPDATE reviews (every request produces a record when export is on).
//! Off and on runs alternate, so that drift of this machine's speed hits both alike.
//!
//!   cargo bench -p drift-sentinel --bench export_load
//!
//! Environment: LOAD_CLIENTS (default 4), LOAD_REQUESTS per client and run (default 2000),
//! LOAD_ROUNDS (default 3).

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(dir: &Path, export: bool) -> (Agent, String) {
    let port = free_port();
    let admin = free_port();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut command = Command::new(env!("CARGO_BIN_EXE_drift-sentinel"));
    command
        .env_clear()
        .arg("--rules")
        .arg(repo.join("docs/examples/rule-strict.yaml"))
        .args(["--address", &format!("127.0.0.1:{port}")])
        .args(["--admin-address", &format!("127.0.0.1:{admin}")])
        .args(["--log-level", "ERROR"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if export {
        let connection = dir.join("connection.yaml");
        std::fs::write(
            &connection,
            format!(
                "apiVersion: connection.drift-sentinel.io/v1alpha1\nkind: Connection\nmetadata: {{name: audit-connection}}\nspec: {{driver: disk, config: {{path: {}}}}}\n",
                dir.join("topics").display()
            ),
        )
        .expect("write the Connection");
        command
            .arg("--enable-admission-violation-export")
            .arg("--connection")
            .arg(&connection);
    }
    let agent = Agent(command.spawn().expect("start the agent"));
    let url = format!("http://127.0.0.1:{port}");
    let client = reqwest::blocking::Client::new();
    for _ in 0..200 {
        if client
            .get(format!("{url}/readyz"))
            .send()
            .is_ok_and(|r| r.status().is_success())
        {
            return (agent, url);
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("the agent did not become ready");
}

fn review() -> String {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let output = Command::new(env!("CARGO_BIN_EXE_drift-sentinel"))
        .arg("review")
        .arg("--old")
        .arg(repo.join("docs/examples/deployment-before.yaml"))
        .arg("--new")
        .arg(repo.join("docs/examples/deployment-after.yaml"))
        .output()
        .expect("drift-sentinel review");
    String::from_utf8(output.stdout).expect("UTF-8 review")
}

/// Per-request latencies of `clients` × `requests` violating reviews, and the wall time.
fn drive(url: &str, body: &str, clients: usize, requests: usize) -> (Vec<Duration>, Duration) {
    let started = Instant::now();
    let handles: Vec<_> = (0..clients)
        .map(|_| {
            let url = format!("{url}/validate");
            let body = body.to_owned();
            std::thread::spawn(move || {
                let client = reqwest::blocking::Client::new();
                let mut latencies = Vec::with_capacity(requests);
                for _ in 0..requests {
                    let sent = Instant::now();
                    let response = client
                        .post(&url)
                        .header("Content-Type", "application/json")
                        .body(body.clone())
                        .send()
                        .expect("request");
                    let text = response.text().expect("response body");
                    latencies.push(sent.elapsed());
                    assert!(text.contains("\"allowed\":false"), "{text}");
                }
                latencies
            })
        })
        .collect();
    let mut all = Vec::new();
    for handle in handles {
        all.extend(handle.join().expect("client thread"));
    }
    (all, started.elapsed())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` would too: run only for bench.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let clients = env_or("LOAD_CLIENTS", 4);
    let requests = env_or("LOAD_REQUESTS", 2000);
    let rounds = env_or("LOAD_ROUNDS", 3);
    let body = review();
    let mut summary: Vec<(bool, Duration, Duration, f64)> = Vec::new();
    for round in 0..rounds {
        for export in [false, true] {
            let dir = tempfile::tempdir().expect("temp dir");
            let (agent, url) = start(dir.path(), export);
            drive(&url, &body, clients, 200); // warm-up: connections, caches
            let (mut latencies, wall) = drive(&url, &body, clients, requests);
            latencies.sort();
            let p50 = percentile(&latencies, 0.50);
            let p99 = percentile(&latencies, 0.99);
            let rate = latencies.len() as f64 / wall.as_secs_f64();
            let records: usize = if export {
                std::thread::sleep(Duration::from_millis(500));
                count_records(&dir.path().join("topics/audit-channel"))
            } else {
                0
            };
            println!(
                "round {round} export {:<3} p50 {:>7.1} µs  p99 {:>7.1} µs  {:>7.0} req/s  records on disk {records}",
                if export { "on" } else { "off" },
                p50.as_secs_f64() * 1e6,
                p99.as_secs_f64() * 1e6,
                rate
            );
            summary.push((export, p50, p99, rate));
            drop(agent);
        }
    }
    let median = |export: bool, pick: fn(&(bool, Duration, Duration, f64)) -> f64| {
        let mut values: Vec<f64> = summary.iter().filter(|s| s.0 == export).map(pick).collect();
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let p50 = |s: &(bool, Duration, Duration, f64)| s.1.as_secs_f64() * 1e6;
    let p99 = |s: &(bool, Duration, Duration, f64)| s.2.as_secs_f64() * 1e6;
    let rate = |s: &(bool, Duration, Duration, f64)| s.3;
    println!(
        "median over {rounds} rounds: p50 off {:.1} µs on {:.1} µs ({:+.1} %); p99 off {:.1} µs on {:.1} µs ({:+.1} %); throughput off {:.0} on {:.0} req/s",
        median(false, p50),
        median(true, p50),
        (median(true, p50) / median(false, p50) - 1.0) * 100.0,
        median(false, p99),
        median(true, p99),
        (median(true, p99) / median(false, p99) - 1.0) * 100.0,
        median(false, rate),
        median(true, rate),
    );
}

/// Lines in every admission segment of `dir` (completed and open).
fn count_records(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("admission-"))
                .filter_map(|e| std::fs::read(e.path()).ok())
                .map(|bytes| bytes.iter().filter(|&&b| b == b'\n').count())
                .sum()
        })
        .unwrap_or(0)
}
