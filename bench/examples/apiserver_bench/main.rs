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
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use drift_testkit::cluster::{Cluster, ClusterOptions};
use drift_testkit::free_port;
use drift_testkit::objects::deployment_with;
use drift_testkit::pki::Ca;
use serde_json::{Value, json};

mod support;
use support::{Histogram, Quantiles, difference, env_number, median, quantiles};

const NAMESPACE: &str = "bench";
const WEBHOOK: &str = "drift-bench";

/// The setups compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Setup {
    NoWebhook,
    Floor,
    Agent,
    AgentClientAuth,
    /// The `BASELINE` build of the agent, run as [`Setup::Agent`] is.
    Baseline,
}

impl Setup {
    const ALL: [Setup; 5] = [
        Setup::NoWebhook,
        Setup::Floor,
        Setup::Agent,
        Setup::AgentClientAuth,
        Setup::Baseline,
    ];

    fn label(self) -> &'static str {
        match self {
            Setup::NoWebhook => "no webhook",
            Setup::Floor => "floor (uid only, TLS)",
            Setup::Agent => "agent (URL, TLS)",
            Setup::AgentClientAuth => "agent + client auth",
            Setup::Baseline => "baseline agent (URL, TLS)",
        }
    }
}

/// One webhook server process on its own port: an agent with its own rule (named after the
/// setup, so that a denial says which agent answered), or the floor (`rule` none).
struct Agent {
    child: Child,
    url: String,
    rule: Option<String>,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Agent {
    /// CPU seconds (user + system) the process has used.
    fn cpu_seconds(&self) -> f64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // Fields after the command's closing parenthesis: utime is the 12th, stime the 13th.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        (ticks(11) + ticks(12)) / 100.0
    }

    fn peak_rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    }
}

fn rule_file(dir: &Path, name: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(
        dir.join("rule.yaml"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: drift-sentinel\n  annotations:\n    drift-sentinel.k8s.io/rule: \"true\"\ndata:\n  spec: |\n    mode: enforce\n    namespaces: [\"{NAMESPACE}\"]\n    selectors:\n      - apiGroup: apps\n        kind: Deployment\n    mutable:\n      - \"spec.template.spec.containers[*].image\"\n      - \"metadata.annotations['kubectl.kubernetes.io/last-applied-configuration']\"\n"
        ),
    )?;
    Ok(())
}

fn start_agent(
    binary: &Path,
    work: &Path,
    host: &str,
    setup: Setup,
    client_ca: Option<&Path>,
) -> anyhow::Result<Agent> {
    let name = match setup {
        Setup::AgentClientAuth => "bench-client-auth",
        Setup::Baseline => "bench-baseline",
        _ => "bench-plain",
    };
    let dir = work.join(name);
    rule_file(&dir.join("rules"), name)?;
    let serving = Ca::new(name);
    let (cert, key) = serving.serving(&[host]).write(&dir, "tls");
    std::fs::write(dir.join("ca.crt"), serving.cert_pem())?;
    let port = free_port();
    let mut command = Command::new(binary);
    command
        .args(["serve", "--address", &format!("{host}:{port}")])
        .arg("--tls-cert-file")
        .arg(&cert)
        .arg("--tls-key-file")
        .arg(&key)
        .arg("--rules")
        .arg(dir.join("rules"))
        .args(["--admin-address", &format!("127.0.0.1:{}", free_port())])
        .args(["--log-level", "INFO"])
        .stdout(Stdio::from(std::fs::File::create(dir.join("agent.log"))?))
        .stderr(Stdio::from(std::fs::File::create(dir.join("agent.err"))?));
    if let Some(ca) = client_ca {
        command.arg("--client-ca-file").arg(ca);
    }
    let child = command.spawn().context("start the agent")?;
    Ok(Agent {
        child,
        url: format!("https://{host}:{port}/validate"),
        rule: Some(format!("drift-sentinel/{name}")),
    })
}

/// The floor of the serving stack (`drift-floor`: reads the body, finds the uid, answers
/// allowed) as a webhook: what any webhook on this stack costs an UPDATE at the least.
fn start_floor(binary: &Path, work: &Path, host: &str) -> anyhow::Result<Agent> {
    let dir = work.join("bench-floor");
    std::fs::create_dir_all(&dir)?;
    let serving = Ca::new("bench-floor");
    let (cert, key) = serving.serving(&[host]).write(&dir, "tls");
    std::fs::write(dir.join("ca.crt"), serving.cert_pem())?;
    let port = free_port();
    let child = Command::new(binary)
        .args(["--address", &format!("{host}:{port}")])
        .arg("--tls-cert-file")
        .arg(&cert)
        .arg("--tls-key-file")
        .arg(&key)
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(dir.join("floor.err"))?))
        .spawn()
        .context("start the floor")?;
    Ok(Agent {
        child,
        url: format!("https://{host}:{port}/validate"),
        rule: None,
    })
}

/// The address the webhooks listen on and are registered at: `WEBHOOK_HOST`, or this machine's
/// address on its default route. The API server calls admission webhooks over HTTP/1.1 only,
/// as in a cluster, except those at a loopback URL, which it calls over HTTP/2
/// (`k8s.io/apiserver` `pkg/util/webhook`, v0.37.2): a loopback registration would measure a
/// protocol that clusters do not use. Falls back to loopback, saying so, when there is no
/// other address.
fn webhook_host() -> String {
    if let Ok(host) = std::env::var("WEBHOOK_HOST") {
        return host;
    }
    // Connecting a UDP socket sends nothing; it only picks the route's source address.
    let routed = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|socket| {
            socket.connect("203.0.113.1:9")?;
            socket.local_addr()
        })
        .map(|address| address.ip())
        .ok()
        .filter(|ip| !ip.is_loopback() && !ip.is_unspecified());
    match routed {
        Some(ip) => ip.to_string(),
        None => {
            println!("no address besides loopback: the webhooks listen on 127.0.0.1");
            "127.0.0.1".to_owned()
        }
    }
}

/// The manifest of Deployment `i` as a user keeps it: the testkit's realistic Deployment
/// without what the server writes.
fn manifest(i: usize, image_tag: u64, replicas: i64) -> Value {
    let mut d = deployment_with(
        [
            &format!("registry.example.com/api:{image_tag}"),
            "registry.example.com/worker:2.0.1",
            "registry.example.com/proxy:1.25.3",
        ],
        replicas,
        24,
    );
    let metadata = &mut d["metadata"];
    metadata["name"] = json!(format!("api-{i:02}"));
    metadata["namespace"] = json!(NAMESPACE);
    if let Some(m) = metadata.as_object_mut() {
        for key in [
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "managedFields",
            "annotations",
        ] {
            m.remove(key);
        }
    }
    if let Some(m) = d.as_object_mut() {
        m.remove("status");
    }
    // An init container may not have probes (the API server refuses them).
    if let Some(init) = d["spec"]["template"]["spec"]["initContainers"][0].as_object_mut() {
        init.remove("livenessProbe");
        init.remove("readinessProbe");
    }
    d
}

/// A client-side `kubectl apply` of a changed manifest: the change and the new
/// last-applied-configuration, as a merge patch.
fn apply_patch(manifest: &Value, change: Value) -> Value {
    let mut patch = change;
    patch["metadata"] = json!({"annotations": {
        "kubectl.kubernetes.io/last-applied-configuration": manifest.to_string()
    }});
    patch
}

struct Api {
    client: reqwest::Client,
    server: String,
}

impl Api {
    fn new(cluster: &Cluster) -> anyhow::Result<Self> {
        let admin = cluster.ca().client("bench-admin", &["system:masters"]);
        let identity = format!("{}{}", admin.cert_pem, admin.key_pem);
        let client = reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(
                cluster.ca().cert_pem().as_bytes(),
            )?)
            .identity(reqwest::Identity::from_pem(identity.as_bytes())?)
            .http1_only()
            .pool_max_idle_per_host(64)
            .timeout(Duration::from_secs(30))
            .build()?;
        Ok(Self {
            client,
            server: cluster.server(),
        })
    }

    async fn patch(
        &self,
        name: &str,
        patch: &Value,
        dry_run: bool,
    ) -> anyhow::Result<(u16, String)> {
        let mut url = format!(
            "{}/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{name}",
            self.server
        );
        if dry_run {
            url.push_str("?dryRun=All");
        }
        let response = self
            .client
            .patch(url)
            .header("Content-Type", "application/merge-patch+json")
            .body(patch.to_string())
            .send()
            .await?;
        let status = response.status().as_u16();
        Ok((status, response.text().await.unwrap_or_default()))
    }

    /// The API server's histogram of the bench webhook's admission duration.
    async fn webhook_histogram(&self) -> anyhow::Result<Histogram> {
        let text = self
            .client
            .get(format!("{}/metrics", self.server))
            .send()
            .await?
            .text()
            .await?;
        Ok(Histogram::parse(
            &text,
            "apiserver_admission_webhook_admission_duration_seconds_bucket",
            &format!("name=\"{WEBHOOK}.drift-sentinel.k8s.io\""),
        ))
    }
}

/// Registers the webhook at `agent` (or none), and waits until a dry-run replicas change is
/// settled by it: denied naming its rule, or allowed with no webhook.
async fn register(
    cluster: &Cluster,
    api: &Api,
    agent: Option<&Agent>,
    ca: Option<&str>,
) -> anyhow::Result<()> {
    let _ = cluster.kubectl(&[
        "delete",
        "validatingwebhookconfiguration",
        WEBHOOK,
        "--ignore-not-found",
    ]);
    if let (Some(agent), Some(ca)) = (agent, ca) {
        use base64::Engine as _;
        let config = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": WEBHOOK},
            "webhooks": [{
                "name": format!("{WEBHOOK}.drift-sentinel.k8s.io"),
                "clientConfig": {"url": agent.url, "caBundle": base64::engine::general_purpose::STANDARD.encode(ca)},
                "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["deployments"]}],
                "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 10
            }]
        });
        cluster.apply(&config.to_string());
    }
    let started = Instant::now();
    loop {
        let calls_before = api.webhook_histogram().await?.count();
        let (status, body) = api
            .patch("api-00", &json!({"spec": {"replicas": 99}}), true)
            .await?;
        let called = api.webhook_histogram().await?.count() > calls_before;
        let settled = match agent.map(|a| a.rule.as_deref()) {
            Some(Some(rule)) => status == 403 && body.contains(rule),
            // The floor allows everything: settled once the edit reaches a webhook and passes.
            Some(None) => status == 200 && called,
            None => status == 200 && !called,
        };
        if settled {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!("the webhook change did not take effect in 60 s (last answer {status}: {body})");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What one phase measured.
#[derive(Debug, Clone, Default)]
struct Phase {
    sent: usize,
    seconds: f64,
    client: Quantiles,
    webhook: Quantiles,
    statuses: BTreeMap<u16, usize>,
    agent_cpu_us_per_request: Option<f64>,
    /// The webhook server's CPU seconds in the phase and the API server's calls to it: summed
    /// over rounds, a CPU per call finer than one round's (the kernel counts CPU in 10 ms ticks,
    /// a few per cent of a 6 s round at 50/s).
    agent_cpu_and_calls: Option<(f64, f64)>,
    /// Every UPDATE's client latency (ms), for the table pooled over rounds.
    latencies: Vec<f64>,
}

/// Drives UPDATEs at `rate` per second for `seconds` from `clients` workers, each sending on
/// its own schedule (open loop: a late answer does not delay the next send; latency is counted
/// from the scheduled time, so that queueing shows).
async fn drive(
    api: &Arc<Api>,
    deployments: usize,
    rate: f64,
    seconds: f64,
    clients: usize,
    counter: &Arc<std::sync::atomic::AtomicU64>,
) -> (Vec<f64>, BTreeMap<u16, usize>) {
    let start = Instant::now() + Duration::from_millis(50);
    let total = (rate * seconds) as usize;
    let mut tasks = Vec::new();
    for worker in 0..clients {
        let api = Arc::clone(api);
        let counter = Arc::clone(counter);
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut statuses = BTreeMap::new();
            let mut k = worker;
            while k < total {
                let due = start + Duration::from_secs_f64(k as f64 / rate);
                tokio::time::sleep_until(due.into()).await;
                let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let i = k % deployments;
                // Half allowed (a new image), half denied (a new replica count).
                let (manifest, change) = if k % 2 == 0 {
                    (manifest(i, 1000 + n, 2), json!({"spec": {"template": {"spec": {"containers": [
                        {"name": "api", "image": format!("registry.example.com/api:{}", 1000 + n)}]}}}}))
                } else {
                    (manifest(i, 1, 3 + (n % 50) as i64), json!({"spec": {"replicas": 3 + (n % 50)}}))
                };
                let status = match api.patch(&format!("api-{i:02}"), &apply_patch(&manifest, change), false).await {
                    Ok((status, _)) => status,
                    Err(_) => 0,
                };
                latencies.push(due.elapsed().as_secs_f64() * 1000.0);
                *statuses.entry(status).or_insert(0) += 1;
                k += clients;
            }
            (latencies, statuses)
        }));
    }
    let mut latencies = Vec::new();
    let mut statuses = BTreeMap::new();
    for task in tasks {
        if let Ok((l, s)) = task.await {
            latencies.extend(l);
            for (status, count) in s {
                *statuses.entry(status).or_insert(0) += count;
            }
        }
    }
    (latencies, statuses)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, binary, floor_binary, work] = args.as_slice() else {
        bail!("usage: apiserver_bench AGENT_BINARY FLOOR_BINARY WORK_DIR");
    };
    let (binary, work) = (PathBuf::from(binary), PathBuf::from(work));
    let max_fraction: f64 = std::env::var("MAX_FRACTION")
        .unwrap_or_else(|_| "0.5".into())
        .parse()
        .ok()
        .filter(|f: &f64| *f > 0.0 && *f <= 1.0)
        .context("MAX_FRACTION must be a number in (0, 1]")?;
    let rounds = env_number("ROUNDS", 12)?;
    let phase_seconds = env_number("PHASE_SECONDS", 6)? as f64;
    let clients = env_number("CLIENTS", 8)?;
    let deployments = env_number("DEPLOYMENTS", 40)?;
    let rates_spec = std::env::var("RATES").unwrap_or_else(|_| "50,max".into());

    let cluster = Cluster::start(ClusterOptions {
        controller_manager: false,
    });
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

    let client_ca = work.join("webhook-client-ca.crt");
    std::fs::write(&client_ca, cluster.webhook_client_ca().cert_pem())?;
    let host = webhook_host();
    let protocol = match host.parse::<std::net::IpAddr>() {
        Ok(ip) if ip.is_loopback() => "HTTP/2",
        _ if host == "localhost" => "HTTP/2",
        _ => "HTTP/1.1",
    };
    println!("webhooks listen on {host}: the API server calls them over {protocol}");
    let plain = start_agent(&binary, &work, &host, Setup::Agent, None)?;
    let authenticated = start_agent(
        &binary,
        &work,
        &host,
        Setup::AgentClientAuth,
        Some(&client_ca),
    )?;
    let floor = start_floor(Path::new(floor_binary), &work, &host)?;
    let baseline = match std::env::var_os("BASELINE") {
        Some(path) => Some(
            start_agent(Path::new(&path), &work, &host, Setup::Baseline, None)
                .with_context(|| format!("BASELINE={}", Path::new(&path).display()))?,
        ),
        None => None,
    };
    let setups: Vec<Setup> = Setup::ALL
        .into_iter()
        .filter(|s| *s != Setup::Baseline || baseline.is_some())
        .collect();
    let server_of = |setup: Setup| match setup {
        Setup::NoWebhook => None,
        Setup::Floor => Some(&floor),
        Setup::Agent => Some(&plain),
        Setup::AgentClientAuth => Some(&authenticated),
        Setup::Baseline => baseline.as_ref(),
    };
    let ca_of = |setup: Setup| {
        std::fs::read_to_string(work.join(match setup {
            Setup::AgentClientAuth => "bench-client-auth/ca.crt",
            Setup::Floor => "bench-floor/ca.crt",
            Setup::Baseline => "bench-baseline/ca.crt",
            _ => "bench-plain/ca.crt",
        }))
    };
    let api = Arc::new(Api::new(&cluster)?);
    let counter = Arc::new(std::sync::atomic::AtomicU64::new(0));

    // The highest rate: a fraction (MAX_FRACTION, 0.5) of what the clients sustain closed-loop
    // without a webhook; at the closed-loop rate itself queues grow in every setup.
    let mut rates = Vec::new();
    for rate in rates_spec.split(',') {
        if rate == "max" {
            register(&cluster, &api, None, None).await?;
            let probe = closed_loop(&api, deployments, clients, 5.0, &counter).await;
            let max = (probe * max_fraction).floor();
            println!(
                "closed loop without a webhook: {probe:.0} UPDATEs/s; the highest rate is {max_fraction} × that: {max:.0}/s"
            );
            rates.push(max);
        } else {
            rates.push(
                rate.parse::<f64>()
                    .with_context(|| format!("RATES: {rate} is not a number or max"))?,
            );
        }
    }

    let mut results: BTreeMap<(u64, Setup), Vec<Phase>> = BTreeMap::new();
    for round in 0..rounds {
        for &rate in &rates {
            let mut order = setups.clone();
            order.rotate_left(round % setups.len());
            for setup in order {
                let agent = server_of(setup);
                let ca = match setup {
                    Setup::NoWebhook => None,
                    s => Some(ca_of(s)?),
                };
                register(&cluster, &api, agent, ca.as_deref()).await?;
                let before = api.webhook_histogram().await?;
                let cpu_before = agent.map(Agent::cpu_seconds);
                let started = Instant::now();
                let (latencies, statuses) =
                    drive(&api, deployments, rate, phase_seconds, clients, &counter).await;
                let seconds = started.elapsed().as_secs_f64();
                let after = api.webhook_histogram().await?;
                let calls = after.count() - before.count();
                let cpu = agent.zip(cpu_before).map(|(a, b)| a.cpu_seconds() - b);
                let phase = Phase {
                    sent: latencies.len(),
                    seconds,
                    client: quantiles(&latencies),
                    webhook: after.since(&before).quantiles_ms(),
                    statuses,
                    agent_cpu_us_per_request: cpu.filter(|_| calls > 0.0).map(|c| c * 1e6 / calls),
                    agent_cpu_and_calls: cpu.map(|c| (c, calls)),
                    latencies,
                };
                println!(
                    "  round {} at {rate:.0}/s, {:<20} {} UPDATEs in {:.1} s: client p50 {:.2} ms p99 {:.2} ms; webhook p50 {:.2} ms p99 {:.2} ms; agent CPU {}; statuses {:?}",
                    round + 1,
                    setup.label(),
                    phase.sent,
                    phase.seconds,
                    phase.client.p50,
                    phase.client.p99,
                    phase.webhook.p50,
                    phase.webhook.p99,
                    phase
                        .agent_cpu_us_per_request
                        .map_or("-".into(), |c| format!("{c:.0} µs/request")),
                    phase.statuses
                );
                results.entry((rate as u64, setup)).or_default().push(phase);
            }
        }
    }
    println!();
    println!(
        "medians over {rounds} rounds ({phase_seconds:.0} s phases, {clients} keep-alive clients, half the UPDATEs denied):"
    );
    println!(
        "| rate | setup | UPDATE p50 | UPDATE p99 | webhook p50 | webhook p99 | agent CPU per request | agent peak RSS |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for &rate in &rates {
        let base = results
            .get(&(rate as u64, Setup::NoWebhook))
            .cloned()
            .unwrap_or_default();
        let (base50, base99) = (
            median(base.iter().map(|p| p.client.p50)),
            median(base.iter().map(|p| p.client.p99)),
        );
        for &setup in &setups {
            let phases = results
                .get(&(rate as u64, setup))
                .cloned()
                .unwrap_or_default();
            let p50 = median(phases.iter().map(|p| p.client.p50));
            let p99 = median(phases.iter().map(|p| p.client.p99));
            let (w50, w99) = (
                median(phases.iter().map(|p| p.webhook.p50)),
                median(phases.iter().map(|p| p.webhook.p99)),
            );
            let cpu = median(phases.iter().filter_map(|p| p.agent_cpu_us_per_request));
            let rss = server_of(setup).map(Agent::peak_rss_mib);
            if setup == Setup::NoWebhook {
                println!(
                    "| {rate:.0}/s | {} | {p50:.2} ms | {p99:.2} ms | — | — | — | — |",
                    setup.label()
                );
            } else {
                println!(
                    "| {rate:.0}/s | {} | {p50:.2} ms ({:+.2}) | {p99:.2} ms ({:+.2}, {:.2}×) | {w50:.2} ms | {w99:.2} ms | {cpu:.0} µs | {:.1} MiB |",
                    setup.label(),
                    p50 - base50,
                    p99 - base99,
                    p99 / base99,
                    rss.unwrap_or(0.0)
                );
            }
        }
    }
    print_pooled(&results, &rates, &setups);
    drop(baseline);
    drop(plain);
    drop(authenticated);
    drop(floor);
    drop(cluster);
    Ok(())
}

/// Every round's UPDATEs pooled per setup, and what each setup adds to no webhook and to the
/// floor with a 90 % interval from drawing rounds again (`support::difference`): whether a
/// difference is the setup's or the machine's.
fn print_pooled(results: &BTreeMap<(u64, Setup), Vec<Phase>>, rates: &[f64], setups: &[Setup]) {
    println!();
    println!(
        "pooled over the rounds; differences in ms with 90 % intervals from drawing the rounds again:"
    );
    println!(
        "| rate | setup | UPDATE p50 | UPDATE p99 | p50 − no webhook | p99 − no webhook | p50 − floor | p99 − floor | server CPU per call |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let rounds_of = |rate: f64, setup: Setup| -> Vec<Vec<f64>> {
        results
            .get(&(rate as u64, setup))
            .map(|phases| phases.iter().map(|p| p.latencies.clone()).collect())
            .unwrap_or_default()
    };
    for &rate in rates {
        let (none, floor) = (
            rounds_of(rate, Setup::NoWebhook),
            rounds_of(rate, Setup::Floor),
        );
        for &setup in setups {
            let rounds = rounds_of(rate, setup);
            let pooled = quantiles(&rounds.concat());
            let over = |base: &[Vec<f64>]| {
                let [p50, p99] = difference(&rounds, base);
                format!("{p50} | {p99}")
            };
            let (over_none, over_floor) = match setup {
                Setup::NoWebhook => ("— | —".to_string(), "— | —".to_string()),
                Setup::Floor => (over(&none), "— | —".to_string()),
                Setup::Agent | Setup::AgentClientAuth | Setup::Baseline => {
                    (over(&none), over(&floor))
                }
            };
            let (cpu, calls) = results
                .get(&(rate as u64, setup))
                .into_iter()
                .flatten()
                .filter_map(|p| p.agent_cpu_and_calls)
                .fold((0.0, 0.0), |(c, n), (pc, pn)| (c + pc, n + pn));
            let cpu = if calls > 0.0 {
                format!("{:.0} µs", cpu * 1e6 / calls)
            } else {
                "—".to_owned()
            };
            println!(
                "| {rate:.0}/s | {} | {:.2} ms | {:.2} ms | {over_none} | {over_floor} | {cpu} |",
                setup.label(),
                pooled.p50,
                pooled.p99
            );
        }
    }
    if setups.contains(&Setup::Baseline) {
        println!();
        println!("the agent against the baseline build (ms, 90 % intervals):");
        for &rate in rates {
            let [p50, p99] = difference(
                &rounds_of(rate, Setup::Agent),
                &rounds_of(rate, Setup::Baseline),
            );
            println!("  at {rate:.0}/s: p50 agent − baseline {p50}, p99 {p99}");
        }
    }
}

/// UPDATEs per second that `clients` closed-loop workers sustain for `seconds`.
async fn closed_loop(
    api: &Arc<Api>,
    deployments: usize,
    clients: usize,
    seconds: f64,
    counter: &Arc<std::sync::atomic::AtomicU64>,
) -> f64 {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for worker in 0..clients {
        let api = Arc::clone(api);
        let counter = Arc::clone(counter);
        tasks.push(tokio::spawn(async move {
            let mut done = 0usize;
            while Instant::now() < deadline {
                let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let i = (worker + done * clients) % deployments;
                let manifest = manifest(i, 1000 + n, 2);
                let change = json!({"spec": {"template": {"spec": {"containers": [
                    {"name": "api", "image": format!("registry.example.com/api:{}", 1000 + n)}]}}}});
                let _ = api.patch(&format!("api-{i:02}"), &apply_patch(&manifest, change), false).await;
                done += 1;
            }
            done
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap_or(0);
    }
    total as f64 / seconds
}
