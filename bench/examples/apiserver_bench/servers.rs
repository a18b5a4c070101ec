//! The webhook servers a run compares, each a process on its own port with its own serving CA:
//! the agent, the agent with client authentication, the floor, and optionally a baseline build.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::Context;
use drift_testkit::free_port;
use drift_testkit::pki::Ca;

use crate::NAMESPACE;

/// The setups compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Setup {
    NoWebhook,
    Floor,
    Agent,
    AgentClientAuth,
    /// The `BASELINE` build of the agent, run as [`Setup::Agent`] is.
    Baseline,
}

impl Setup {
    pub const ALL: [Setup; 5] = [
        Setup::NoWebhook,
        Setup::Floor,
        Setup::Agent,
        Setup::AgentClientAuth,
        Setup::Baseline,
    ];

    pub fn label(self) -> &'static str {
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
pub struct WebhookServer {
    child: Child,
    pub url: String,
    pub rule: Option<String>,
}

impl Drop for WebhookServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl WebhookServer {
    /// CPU seconds (user + system) the process has used.
    pub fn cpu_seconds(&self) -> f64 {
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

    pub fn peak_rss_mib(&self) -> f64 {
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
) -> anyhow::Result<WebhookServer> {
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
    Ok(WebhookServer {
        child,
        url: format!("https://{host}:{port}/validate"),
        rule: Some(format!("drift-sentinel/{name}")),
    })
}

/// The floor of the serving stack (`drift-floor`: reads the body, finds the uid, answers
/// allowed) as a webhook: what any webhook on this stack costs an UPDATE at the least.
fn start_floor(binary: &Path, work: &Path, host: &str) -> anyhow::Result<WebhookServer> {
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
    Ok(WebhookServer {
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
pub fn webhook_host() -> String {
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
/// The servers of one run, started once and kept until it ends.
pub struct Servers {
    work: PathBuf,
    plain: WebhookServer,
    authenticated: WebhookServer,
    floor: WebhookServer,
    baseline: Option<WebhookServer>,
}

impl Servers {
    /// Starts the agent with and without client authentication (`client_ca` the CA of the API
    /// server's webhook client certificate), the floor, and `baseline` (another build of the
    /// agent) when given, all listening on `host`.
    pub fn start(
        agent: &Path,
        floor: &Path,
        baseline: Option<&Path>,
        work: &Path,
        host: &str,
        client_ca: &Path,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            work: work.to_owned(),
            plain: start_agent(agent, work, host, Setup::Agent, None)?,
            authenticated: start_agent(agent, work, host, Setup::AgentClientAuth, Some(client_ca))?,
            floor: start_floor(floor, work, host)?,
            baseline: match baseline {
                Some(path) => Some(
                    start_agent(path, work, host, Setup::Baseline, None)
                        .with_context(|| format!("BASELINE={}", path.display()))?,
                ),
                None => None,
            },
        })
    }

    /// The setups this run compares: every one, the baseline only when it was given.
    pub fn setups(&self) -> Vec<Setup> {
        Setup::ALL
            .into_iter()
            .filter(|s| *s != Setup::Baseline || self.baseline.is_some())
            .collect()
    }

    /// The server of a setup; none for no webhook.
    pub fn of(&self, setup: Setup) -> Option<&WebhookServer> {
        match setup {
            Setup::NoWebhook => None,
            Setup::Floor => Some(&self.floor),
            Setup::Agent => Some(&self.plain),
            Setup::AgentClientAuth => Some(&self.authenticated),
            Setup::Baseline => self.baseline.as_ref(),
        }
    }

    /// The serving CA (PEM) the API server is to trust for a setup; none for no webhook.
    pub fn ca(&self, setup: Setup) -> anyhow::Result<Option<String>> {
        let dir = match setup {
            Setup::NoWebhook => return Ok(None),
            Setup::AgentClientAuth => "bench-client-auth",
            Setup::Floor => "bench-floor",
            Setup::Baseline => "bench-baseline",
            Setup::Agent => "bench-plain",
        };
        let path = self.work.join(dir).join("ca.crt");
        std::fs::read_to_string(&path)
            .map(Some)
            .with_context(|| format!("read {}", path.display()))
    }
}
