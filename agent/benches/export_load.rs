//! Load benchmark of the webhook with violation export off and on (reference §7: exporting must not
//! delay admission responses; the bar is export-on latency within 10 % of export-off).
//!
//! Starts the real agent binary, then drives it from several keep-alive clients over loopback
//! HTTP with violating UPDATE reviews (every request produces a record when export is on), at
//! a fixed total rate — an API server sends admission requests as they come, it does not wait
//! for the webhook to be idle — and measures each request's latency from the moment it was due
//! (so a slow response also delays, and is charged to, the requests behind it). A second phase
//! sends as fast as the clients can, for the throughput at saturation. Off and on runs
//! alternate, so that drift of this machine's speed hits both alike.
//!
//!   cargo bench -p drift-sentinel --bench export_load
//!
//! Environment: LOAD_CLIENTS (default 4), LOAD_RATE total requests per second of the paced
//! phase (default 1000), LOAD_SECONDS per paced run (default 5), LOAD_REQUESTS per client in
//! the saturation phase (default 1000), LOAD_ROUNDS (default 3).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use drift_testkit::free_port;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
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

/// Per-request latencies of `clients` × `requests` violating reviews, and the wall time. With
/// a `rate`, each client sends on a fixed schedule and latency counts from the scheduled time.
fn drive(
    url: &str,
    body: &str,
    clients: usize,
    requests: usize,
    rate: Option<f64>,
) -> (Vec<Duration>, Duration) {
    let started = Instant::now();
    let interval = rate.map(|r| Duration::from_secs_f64(clients as f64 / r));
    let handles: Vec<_> = (0..clients)
        .map(|client_index| {
            let url = format!("{url}/validate");
            let body = body.to_owned();
            std::thread::spawn(move || {
                let client = reqwest::blocking::Client::new();
                let mut latencies = Vec::with_capacity(requests);
                // Clients start spread over one interval, not all at once.
                let offset = interval.map_or(Duration::ZERO, |i| {
                    i.mul_f64(client_index as f64 / clients as f64)
                });
                let mut due = Instant::now() + offset;
                for _ in 0..requests {
                    if interval.is_some() {
                        let now = Instant::now();
                        if due > now {
                            std::thread::sleep(due - now);
                        }
                    } else {
                        due = Instant::now();
                    }
                    let response = client
                        .post(&url)
                        .header("Content-Type", "application/json")
                        .body(body.clone())
                        .send()
                        .expect("request");
                    let text = response.text().expect("response body");
                    latencies.push(due.elapsed());
                    assert!(text.contains("\"allowed\":false"), "{text}");
                    if let Some(interval) = interval {
                        due += interval;
                    }
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

struct Run {
    export: bool,
    p50: f64,
    p90: f64,
    p99: f64,
    saturated_rate: f64,
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: run only for bench.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let clients = env_or("LOAD_CLIENTS", 4);
    let rate = env_or("LOAD_RATE", 1000) as f64;
    let seconds = env_or("LOAD_SECONDS", 5);
    let saturation_requests = env_or("LOAD_REQUESTS", 1000);
    let rounds = env_or("LOAD_ROUNDS", 3);
    let paced_requests = (rate * seconds as f64 / clients as f64) as usize;
    let body = review();
    let mut runs: Vec<Run> = Vec::new();
    for round in 0..rounds {
        for export in [false, true] {
            let dir = tempfile::tempdir().expect("temp dir");
            let (agent, url) = start(dir.path(), export);
            drive(&url, &body, clients, 200, None); // warm-up: connections, caches
            let (mut latencies, _) = drive(&url, &body, clients, paced_requests, Some(rate));
            latencies.sort();
            let (_, wall) = drive(&url, &body, clients, saturation_requests, None);
            let run = Run {
                export,
                p50: micros(percentile(&latencies, 0.50)),
                p90: micros(percentile(&latencies, 0.90)),
                p99: micros(percentile(&latencies, 0.99)),
                saturated_rate: (clients * saturation_requests) as f64 / wall.as_secs_f64(),
            };
            let records = if export {
                std::thread::sleep(Duration::from_millis(500));
                count_records(&dir.path().join("topics/audit-channel"))
            } else {
                0
            };
            println!(
                "round {round} export {:<3} at {rate:.0} req/s: p50 {:>6.1} µs p90 {:>6.1} µs p99 {:>7.1} µs | saturated {:>5.0} req/s | records on disk {records}",
                if export { "on" } else { "off" },
                run.p50,
                run.p90,
                run.p99,
                run.saturated_rate,
            );
            runs.push(run);
            drop(agent);
        }
    }
    let median = |export: bool, pick: fn(&Run) -> f64| {
        let mut values: Vec<f64> = runs
            .iter()
            .filter(|r| r.export == export)
            .map(pick)
            .collect();
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let line = |name: &str, pick: fn(&Run) -> f64| {
        let (off, on) = (median(false, pick), median(true, pick));
        println!(
            "  {name:<22} off {off:>8.1}  on {on:>8.1}  ({:+.1} %)",
            (on / off - 1.0) * 100.0
        );
    };
    println!("median over {rounds} rounds, {clients} clients:");
    line("p50 latency (µs)", |r| r.p50);
    line("p90 latency (µs)", |r| r.p90);
    line("p99 latency (µs)", |r| r.p99);
    line("saturated (req/s)", |r| r.saturated_rate);
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
