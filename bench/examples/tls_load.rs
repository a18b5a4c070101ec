//! A keep-alive HTTPS load of one review body, optionally presenting a client certificate
//! (wrk cannot): `C` connections, each sending the body again as soon as it is answered, for
//! `SECONDS`. Prints one line: requests/s, p50 and p99 in ms, and the statuses seen.
//! `scripts/client-auth-bench.sh` runs the agent with client authentication on and off under it,
//! side by side.
//!
//!   cargo run --release -p drift-bench --example tls_load -- URL BODY CA_PEM CONNECTIONS SECONDS [CLIENT_PEM]
//!
//! CLIENT_PEM holds the client certificate and its key.
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (url, body, ca, connections, seconds, identity) = match args.as_slice() {
        [_, url, body, ca, c, s] => (url, body, ca, c, s, None),
        [_, url, body, ca, c, s, id] => (url, body, ca, c, s, Some(id)),
        _ => bail!("usage: tls_load URL BODY CA_PEM CONNECTIONS SECONDS [CLIENT_PEM]"),
    };
    let body = bytes_of(body)?;
    let connections: usize = connections.parse().context("CONNECTIONS")?;
    let duration = Duration::from_secs(seconds.parse().context("SECONDS")?);
    let mut clients = Vec::new();
    for _ in 0..connections {
        // One client per task: each keeps its own keep-alive connection.
        let mut builder = reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(&bytes_of(ca)?)?)
            .http1_only()
            .pool_max_idle_per_host(1)
            .timeout(Duration::from_secs(10));
        if let Some(identity) = identity {
            builder = builder.identity(reqwest::Identity::from_pem(&bytes_of(identity)?)?);
        }
        clients.push(builder.build()?);
    }
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::new();
    for client in clients {
        let (url, body) = (url.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut statuses = std::collections::BTreeMap::<u16, u64>::new();
            while Instant::now() < deadline {
                let sent = Instant::now();
                let response = client
                    .post(&url)
                    .header("Content-Type", "application/json")
                    .body(body.clone())
                    .send()
                    .await;
                let status = match response {
                    Ok(response) => {
                        let status = response.status().as_u16();
                        let _ = response.bytes().await;
                        status
                    }
                    Err(_) => 0,
                };
                latencies.push(sent.elapsed());
                *statuses.entry(status).or_default() += 1;
            }
            (latencies, statuses)
        }));
    }
    let mut latencies = Vec::new();
    let mut statuses = std::collections::BTreeMap::<u16, u64>::new();
    for task in tasks {
        let (l, s) = task.await?;
        latencies.extend(l);
        for (k, v) in s {
            *statuses.entry(k).or_default() += v;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort();
    let at = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    println!(
        "rps {:.0} p50_ms {:.3} p99_ms {:.3} statuses {:?}",
        latencies.len() as f64 / elapsed,
        at(0.5),
        at(0.99),
        statuses
    );
    Ok(())
}

fn bytes_of(path: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {path}"))
}
