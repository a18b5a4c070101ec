//! What an UPDATE waits for through a real kube-apiserver, with and without the webhook
//! (`scripts/apiserver-bench.sh` builds and runs it; see there for what it prints).
//!
//! A control plane from `.ci/build-cluster` (etcd and kube-apiserver, no controller manager),
//! 40 realistic Deployments applied with `kubectl apply`, and three setups compared in one run,
//! in rotating rounds: no webhook registered; the agent registered by URL over TLS; the agent
//! with client authentication (`--client-ca-file`, the API server presenting its webhook
//! client certificate). Each phase drives UPDATEs at a fixed rate from keep-alive clients:
//! merge patches as a client-side `kubectl apply` sends them (the change and the rewritten
//! `last-applied-configuration`), half an image change (allowed), half a replicas change
//! (denied under the enforce rule).
//!
//! A fourth setup, the floor (`drift-floor` registered the same way: it reads the body, finds
//! the uid and allows), shows what any webhook on this serving stack costs an UPDATE at the
//! least: the API server's own encoding of two objects, the call and the answer.
//!
//!   cargo run --release -p drift-bench --example apiserver_bench -- AGENT FLOOR WORK_DIR
//!
//! After the medians of the rounds, a second table pools every round's UPDATEs and gives what each
//! setup adds to no webhook and to the floor with a 90 % interval (rounds drawn again).
//!
//! With `BASELINE=PATH` (another build of the agent, say of the commit before a change), a fifth
//! setup runs it like the agent, and the pooled table gives what the agent adds over it.
//!
//! Environment: ROUNDS=12 PHASE_SECONDS=6 CLIENTS=8 RATES=50,max MAX_FRACTION=0.5 DEPLOYMENTS=40
//! BASELINE (unset: no fifth setup) WEBHOOK_HOST (the address the webhooks listen on and are
//! registered at; unset: this machine's address on its default route, so that the API server
//! calls them over HTTP/1.1 as in a cluster; at a loopback address it uses HTTP/2)
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use anyhow::{Context, bail};
use drift_testkit::cluster::{Cluster, ClusterOptions};
use serde_json::{Value, json};

mod report;
mod servers;
mod support;
mod traffic;
use report::{Phase, Results};
use servers::Servers;
use support::{env_number, quantiles};
use traffic::{Api, closed_loop, drive, manifest, register};

const NAMESPACE: &str = "bench";
const WEBHOOK: &str = "drift-bench";

/// The run's settings, read once from the environment.
struct Options {
    rounds: usize,
    phase_seconds: f64,
    clients: usize,
    deployments: usize,
    /// `RATES`: UPDATEs per second, `max` for the highest rate this machine sustains.
    rates: String,
    /// The highest rate as a fraction of the closed-loop rate without a webhook.
    max_fraction: f64,
    baseline: Option<PathBuf>,
}

impl Options {
    fn from_env() -> anyhow::Result<Self> {
        Ok(Self {
            rounds: env_number("ROUNDS", 12)?,
            phase_seconds: env_number("PHASE_SECONDS", 6)? as f64,
            clients: env_number("CLIENTS", 8)?,
            deployments: env_number("DEPLOYMENTS", 40)?,
            rates: std::env::var("RATES").unwrap_or_else(|_| "50,max".into()),
            max_fraction: std::env::var("MAX_FRACTION")
                .unwrap_or_else(|_| "0.5".into())
                .parse()
                .ok()
                .filter(|f: &f64| *f > 0.0 && *f <= 1.0)
                .context("MAX_FRACTION must be a number in (0, 1]")?,
            baseline: std::env::var_os("BASELINE").map(PathBuf::from),
        })
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, binary, floor_binary, work] = args.as_slice() else {
        bail!("usage: apiserver_bench AGENT_BINARY FLOOR_BINARY WORK_DIR");
    };
    let work = PathBuf::from(work);
    let options = Options::from_env()?;
    let cluster = Cluster::start(ClusterOptions {
        controller_manager: false,
        ..ClusterOptions::default()
    });
    apply_deployments(&cluster, options.deployments);

    let client_ca = work.join("webhook-client-ca.crt");
    std::fs::write(&client_ca, cluster.webhook_client_ca().cert_pem())?;
    let host = servers::webhook_host();
    let protocol = match host.parse::<std::net::IpAddr>() {
        Ok(ip) if ip.is_loopback() => "HTTP/2",
        _ if host == "localhost" => "HTTP/2",
        _ => "HTTP/1.1",
    };
    println!("webhooks listen on {host}: the API server calls them over {protocol}");
    let servers = Servers::start(
        Path::new(binary),
        Path::new(floor_binary),
        options.baseline.as_deref(),
        &work,
        &host,
        &client_ca,
    )?;
    let setups = servers.setups();
    let api = Arc::new(Api::new(&cluster)?);
    let counter = Arc::new(AtomicU64::new(0));
    let rates = resolve_rates(&options, &cluster, &api, &counter).await?;

    let mut results = Results::new();
    for round in 0..options.rounds {
        for &rate in &rates {
            let mut order = setups.clone();
            order.rotate_left(round % setups.len());
            for setup in order {
                register(
                    &cluster,
                    &api,
                    servers.of(setup),
                    servers.ca(setup)?.as_deref(),
                )
                .await?;
                let phase = run_phase(&options, &api, &counter, servers.of(setup), rate).await?;
                report::print_phase(round + 1, rate, setup, &phase);
                results.entry((rate as u64, setup)).or_default().push(phase);
            }
        }
    }
    println!();
    println!(
        "medians over {} rounds ({:.0} s phases, {} keep-alive clients, half the UPDATEs denied):",
        options.rounds, options.phase_seconds, options.clients
    );
    report::print_medians(&results, &rates, &servers);
    report::print_pooled(&results, &rates, &setups);
    drop(servers);
    drop(cluster);
    Ok(())
}

/// Creates the namespace and the Deployments with `kubectl apply`, and says how large they are.
fn apply_deployments(cluster: &Cluster, deployments: usize) {
    println!(
        "control plane: kube-apiserver {} (etcd, no controller manager); {} cores",
        String::from_utf8_lossy(&cluster.kubectl(&["version", "-o", "json"]).stdout)
            .lines()
            .find(|l| l.contains("gitVersion"))
            .unwrap_or("")
            .trim(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    cluster.apply(
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
            .to_string(),
    );
    let items: Vec<Value> = (0..deployments).map(|i| manifest(i, 1, 2)).collect();
    let size = items.first().map_or(0, |d| d.to_string().len());
    cluster.apply(&json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string());
    let stored = cluster
        .get(&[
            "-n",
            NAMESPACE,
            "deployment",
            "api-00",
            "-o",
            "json",
            "--show-managed-fields",
        ])
        .map_or(0, |d| d.to_string().len());
    println!(
        "{deployments} Deployments applied with kubectl apply: manifest {size} B, stored object {stored} B (what the webhook receives twice)"
    );
}

/// The rates of `RATES`. The highest (`max`) is a fraction (`MAX_FRACTION`, 0.5) of what the
/// clients sustain closed-loop without a webhook: at the closed-loop rate itself queues grow in
/// every setup.
async fn resolve_rates(
    options: &Options,
    cluster: &Cluster,
    api: &Arc<Api>,
    counter: &Arc<AtomicU64>,
) -> anyhow::Result<Vec<f64>> {
    let mut rates = Vec::new();
    for rate in options.rates.split(',') {
        if rate == "max" {
            register(cluster, api, None, None).await?;
            let probe = closed_loop(api, options.deployments, options.clients, 5.0, counter).await;
            let max = (probe * options.max_fraction).floor();
            println!(
                "closed loop without a webhook: {probe:.0} UPDATEs/s; the highest rate is {} × that: {max:.0}/s",
                options.max_fraction
            );
            rates.push(max);
        } else {
            rates.push(
                rate.parse::<f64>()
                    .with_context(|| format!("RATES: {rate} is not a number or max"))?,
            );
        }
    }
    Ok(rates)
}

/// One phase: UPDATEs at `rate` with the webhook registered at `server` (or none), and what
/// they waited, what the API server's histogram says, and the server's CPU.
async fn run_phase(
    options: &Options,
    api: &Arc<Api>,
    counter: &Arc<AtomicU64>,
    server: Option<&servers::WebhookServer>,
    rate: f64,
) -> anyhow::Result<Phase> {
    let before = api.webhook_histogram().await?;
    let cpu_before = server.map(servers::WebhookServer::cpu_seconds);
    let started = Instant::now();
    let (latencies, statuses) = drive(
        api,
        options.deployments,
        rate,
        options.phase_seconds,
        options.clients,
        counter,
    )
    .await;
    let seconds = started.elapsed().as_secs_f64();
    let after = api.webhook_histogram().await?;
    let calls = after.count() - before.count();
    let cpu = server.zip(cpu_before).map(|(a, b)| a.cpu_seconds() - b);
    Ok(Phase {
        sent: latencies.len(),
        seconds,
        client: quantiles(&latencies),
        webhook: after.since(&before).quantiles_ms(),
        statuses,
        agent_cpu_us_per_request: cpu.filter(|_| calls > 0.0).map(|c| c * 1e6 / calls),
        agent_cpu_and_calls: cpu.map(|c| (c, calls)),
        latencies,
    })
}
