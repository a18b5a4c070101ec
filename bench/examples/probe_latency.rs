//! How fast the agent answers the kubelet's probes while decisions run (reference §6
//! "Timeouts"): the figure behind the requirement that `agent/tests/timeouts.rs` asserts (every
//! probe answered within the kubelet's probe timeout).
//!
//! Starts the release agent over HTTPS on loopback (a certificate of a test CA, one rule that
//! every review violates). `LOADERS` threads post a review of `ITEMS` changed list items back to
//! back on keep-alive connections, as `agent/tests/timeouts.rs` does; every 100 ms a probe GETs
//! `/healthz` or `/readyz` (in turn) on a new connection, as the kubelet does (a TLS handshake
//! each time). After `SECONDS` it prints the probes' p50, p99 and max, how many took more than
//! the kubelet's default timeout (1 s), and how many reviews were decided meanwhile.
//!
//!   cargo build --release -p drift-sentinel
//!   cargo run --release -p drift-bench --example probe_latency -- [SECONDS=20] [LOADERS=4] [ITEMS=40000]
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use drift_testkit::objects::args_review;

/// The kubelet's default `timeoutSeconds` of a probe.
const KUBELET_TIMEOUT: Duration = Duration::from_secs(1);

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize, default: u64| -> anyhow::Result<u64> {
        args.get(i)
            .map_or(Ok(default), |a| a.parse())
            .with_context(|| format!("argument {} must be a number", i + 1))
    };
    let (seconds, loaders, items) = (number(0, 20)?, number(1, 4)?, number(2, 40_000)?);
    if args.len() > 3 {
        bail!("usage: probe_latency [SECONDS] [LOADERS] [ITEMS]");
    }

    let dir = std::env::temp_dir().join(format!("probe-latency-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let ca = drift_testkit::pki::Ca::new("probe-latency-ca");
    let (cert, key) = ca.loopback_serving().write(&dir, "tls");
    let rules = dir.join("rules.yaml");
    std::fs::write(
        &rules,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: images, namespace: ops, annotations: {drift-sentinel.k8s.io/rule: \"true\"}}\ndata:\n  spec: |\n    mode: enforce\n    namespaces: ['*']\n    selectors: [{apiGroup: apps, kind: Deployment}]\n    mutable: ['spec.template.spec.containers[*].image']\n",
    )?;
    let (port, admin) = (drift_testkit::free_port(), drift_testkit::free_port());
    let agent = Agent(
        Command::new(drift_testkit::agent::agent_bin())
            .env_clear()
            .args(["serve", "--rules"])
            .arg(&rules)
            .arg("--tls-cert-file")
            .arg(&cert)
            .arg("--tls-key-file")
            .arg(&key)
            .args(["--address", &format!("127.0.0.1:{port}")])
            .args(["--admin-address", &format!("127.0.0.1:{admin}")])
            .args(["--log-level", "WARN"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .context("start drift-sentinel")?,
    );
    let ready = drift_testkit::wait_for(Duration::from_secs(20), || {
        drift_testkit::client()
            .get(format!("http://127.0.0.1:{admin}/status"))
            .send()
            .ok()
            .filter(|r| r.status().is_success())
    });
    if ready.is_none() {
        bail!("the agent did not start");
    }

    let client = |keep_alive: bool| -> anyhow::Result<reqwest::blocking::Client> {
        let mut builder = reqwest::blocking::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(ca.cert_pem().as_bytes())?)
            .timeout(Duration::from_secs(30));
        if !keep_alive {
            builder = builder.pool_max_idle_per_host(0);
        }
        Ok(builder.build()?)
    };
    let base = format!("https://localhost:{port}");
    let body = args_review("load", items as usize).to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let decided = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..loaders)
        .map(|_| {
            let (client, url, body) = (client(true)?, format!("{base}/validate"), body.clone());
            let (stop, decided) = (stop.clone(), decided.clone());
            Ok(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let answered = client
                        .post(&url)
                        .header("Content-Type", "application/json")
                        .body(body.clone())
                        .send()
                        .is_ok_and(|r| r.status().is_success());
                    if answered {
                        decided.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }))
        })
        .collect::<anyhow::Result<_>>()?;
    // Let the decision threads fill up first.
    std::thread::sleep(Duration::from_millis(500));
    let probe = client(false)?;
    let started = Instant::now();
    let mut latencies = Vec::new();
    let mut failed = 0;
    for n in 0.. {
        if started.elapsed() >= Duration::from_secs(seconds) {
            break;
        }
        let path = if n % 2 == 0 { "/healthz" } else { "/readyz" };
        let sent = Instant::now();
        match probe.get(format!("{base}{path}")).send() {
            Ok(r) if r.status().is_success() => latencies.push(sent.elapsed()),
            _ => failed += 1,
        }
        std::thread::sleep(Duration::from_millis(100).saturating_sub(sent.elapsed()));
    }
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        let _ = thread.join();
    }
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);

    latencies.sort();
    let at = |q: f64| {
        let i = ((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1));
        latencies.get(i).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    let over = latencies.iter().filter(|l| **l > KUBELET_TIMEOUT).count();
    let decided = decided.load(Ordering::Relaxed);
    println!(
        "probes {} failed {failed} p50_ms {:.1} p99_ms {:.1} max_ms {:.1} over_1s {over} | {loaders} loaders, {items} items: {decided} reviews decided ({:.1}/s)",
        latencies.len(),
        at(0.5),
        at(0.99),
        at(1.0),
        decided as f64 / started.elapsed().as_secs_f64(),
    );
    Ok(())
}

/// The agent, killed when dropped.
struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
