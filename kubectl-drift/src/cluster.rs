//! What `status` and `tail` need of a cluster: the kube client chosen as kubectl chooses it
//! (`--kubeconfig`, else `KUBECONFIG` or `~/.kube/config`, else the in-cluster service
//! account; `--context` or the current one), the agent pods (by the chart's selector labels),
//! and port-forwarding to their admin API through the API server — `pods/NAME/portforward`,
//! the WebSocket protocol (`v4.channel.k8s.io`) that kube-rs speaks, as `kubectl port-forward`
//! does.
//!
//! `status` asks each pod's admin API once, over a forward of its own ([`admin_get`]). `tail`
//! listens on one loopback port per agent pod and forwards each connection made to it to that
//! pod's admin port ([`tail`]); when a forward fails because the pod went away (or its admin
//! port does not answer), the pods are listed again and the port is given to a pod that no other
//! port follows, so the reconnecting stream finds the replacement.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::Verdict;
use crate::cli::TailArgs;

/// The namespace the chart is installed in, by the documentation's habit.
pub const DEFAULT_NAMESPACE: &str = "drift-sentinel";
/// The chart's selector labels of the agent (webhook) pods, less the release name
/// (`charts/drift-sentinel/templates/_helpers.tpl`, `drift-sentinel.selectorLabels`).
pub const DEFAULT_SELECTOR: &str =
    "app.kubernetes.io/name=drift-sentinel,app.kubernetes.io/component=webhook";
/// The agent's `--admin-address` port.
pub const DEFAULT_ADMIN_PORT: u16 = 9090;
/// How long one API request or one admin request through a forward may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// A connected cluster.
#[derive(Clone)]
pub struct Cluster {
    pub client: Client,
    /// The kubeconfig context's namespace, else `default` (in a pod: the pod's).
    pub default_namespace: String,
    /// The API server's URL, for messages.
    pub server: String,
}

/// The cluster of `--kubeconfig` and `--context`, as kubectl would choose it. `offline_hint`
/// ends the message when no cluster is configured (what to do instead, e.g. "or work offline
/// with --rules PATH").
pub async fn connect(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
    offline_hint: &str,
) -> anyhow::Result<Cluster> {
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..KubeConfigOptions::default()
    };
    let with_context = |what: String| match context {
        Some(context) => format!("{what} (context {context:?})"),
        None => what,
    };
    let mut config = match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(file, &options)
                .await
                .with_context(|| with_context(format!("invalid kubeconfig {}", path.display())))?
        }
        None if context.is_some() => Config::from_kubeconfig(&options)
            .await
            .with_context(|| with_context("cannot load the kubeconfig".to_owned()))?,
        None => Config::infer().await.map_err(|e| {
            // The kubeconfig's failure is the one a person can act on.
            let kubeconfig = std::error::Error::source(&e)
                .map_or_else(|| e.to_string(), ToString::to_string);
            anyhow!(
                "no cluster configured: no usable kubeconfig ({kubeconfig}) and not in a pod; pass --kubeconfig or set KUBECONFIG{offline_hint}"
            )
        })?,
    };
    if config.read_timeout.is_none() {
        config.read_timeout = Some(REQUEST_TIMEOUT);
    }
    let server = config
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_owned();
    let default_namespace = config.default_namespace.clone();
    let client = Client::try_from(config).context("cannot build the Kubernetes client")?;
    Ok(Cluster {
        client,
        default_namespace,
        server,
    })
}

/// One line for a failed request: the API server's Status message, or the transport's
/// innermost error.
pub fn describe(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if !status.message.is_empty() => {
            format!("{} ({})", status.message, status.code)
        }
        other => {
            let mut cause: &dyn std::error::Error = other;
            let mut text = other.to_string();
            while let Some(next) = cause.source() {
                text = next.to_string();
                cause = next;
            }
            text
        }
    }
}

/// Runs an API request with [`REQUEST_TIMEOUT`].
pub async fn timed<T>(request: impl Future<Output = Result<T, kube::Error>>) -> Result<T, String> {
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(describe(&e)),
        Err(_) => Err(format!("no answer within {}s", REQUEST_TIMEOUT.as_secs())),
    }
}

/// An agent pod as `status` shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AgentPod {
    pub name: String,
    pub phase: String,
    /// The pod's `Ready` condition.
    pub ready: bool,
    pub restarts: i32,
    pub created: Option<String>,
    /// Being deleted (`metadata.deletionTimestamp`).
    pub deleting: bool,
    pub node: Option<String>,
}

impl AgentPod {
    pub fn of(pod: &Pod) -> Self {
        let status = pod.status.as_ref();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|conditions| {
                conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            });
        let restarts = status
            .and_then(|s| s.container_statuses.as_ref())
            .map_or(0, |containers| {
                containers.iter().map(|c| c.restart_count).sum()
            });
        AgentPod {
            name: pod.metadata.name.clone().unwrap_or_default(),
            phase: status
                .and_then(|s| s.phase.clone())
                .unwrap_or_else(|| "Unknown".to_owned()),
            ready,
            restarts,
            created: pod
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string()),
            deleting: pod.metadata.deletion_timestamp.is_some(),
            node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        }
    }

    /// Whether its admin API can be reached: running and not being deleted.
    pub fn reachable(&self) -> bool {
        self.phase == "Running" && !self.deleting
    }
}

/// The agent pods of `namespace` matching `selector`, by name.
pub async fn agent_pods(
    cluster: &Cluster,
    namespace: &str,
    selector: &str,
) -> anyhow::Result<Vec<AgentPod>> {
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), namespace);
    let list = timed(pods.list(&ListParams::default().labels(selector)))
        .await
        .map_err(|e| {
            anyhow!(
                "cannot list the agent pods (namespace {namespace}, selector {selector}) at {}: {e}",
                cluster.server
            )
        })?;
    let mut pods: Vec<AgentPod> = list.items.iter().map(AgentPod::of).collect();
    pods.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(pods)
}

/// A forward that could not be made or that failed.
#[derive(Debug)]
pub enum ForwardError {
    /// The API server refused the forward (the pod does not exist: 404, …) or could not be
    /// reached.
    Api(String),
    /// The forward was made but the port could not be reached (the error channel's message).
    Port(String),
    /// The admin API answered something unexpected, or not in time.
    Http(String),
}

impl std::fmt::Display for ForwardError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ForwardError::Api(text) | ForwardError::Port(text) | ForwardError::Http(text) => {
                f.write_str(text)
            }
        }
    }
}

/// `GET path` of the admin API on `port` of pod `namespace/pod`, through a forward of its own.
/// Returns the HTTP status and the body.
pub async fn admin_get(
    client: &Client,
    namespace: &str,
    pod: &str,
    port: u16,
    path: &str,
) -> Result<(u16, Vec<u8>), ForwardError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut forward = timed(pods.portforward(pod, &[port]))
        .await
        .map_err(ForwardError::Api)?;
    let (Some(mut stream), Some(error)) = (forward.take_stream(port), forward.take_error(port))
    else {
        return Err(ForwardError::Api("the forward has no stream".to_owned()));
    };
    let exchange = async {
        let request = format!(
            "GET {path} HTTP/1.1\r\nhost: localhost:{port}\r\nuser-agent: kubectl-drift/{}\r\naccept: application/json\r\nconnection: close\r\n\r\n",
            env!("CARGO_PKG_VERSION")
        );
        stream.write_all(request.as_bytes()).await?;
        // `connection: close`: the admin API closes after its answer, which ends the forward
        // (the channel protocol has no end-of-stream of its own for one port).
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    tokio::pin!(error);
    let raw = tokio::select! {
        raw = tokio::time::timeout(REQUEST_TIMEOUT, exchange) => match raw {
            Ok(Ok(raw)) => raw,
            Ok(Err(e)) => return Err(ForwardError::Http(format!("the forwarded connection failed: {e}"))),
            Err(_) => return Err(ForwardError::Http(format!(
                "no answer from the admin API within {}s", REQUEST_TIMEOUT.as_secs()
            ))),
        },
        Some(message) = &mut error => return Err(ForwardError::Port(message)),
    };
    forward.abort();
    parse_http_response(&raw).map_err(|e| {
        // An empty answer: the port's error message, when the forward failed, says why.
        ForwardError::Http(e)
    })
}

/// Status and body of an HTTP/1.1 response read to its end (`connection: close`):
/// `content-length`, chunked, or up to the end.
fn parse_http_response(raw: &[u8]) -> Result<(u16, Vec<u8>), String> {
    if raw.is_empty() {
        return Err("the admin API closed the connection without answering".to_owned());
    }
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("the admin API's answer is not HTTP")?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .filter(|_| status_line.starts_with("HTTP/1."))
        .ok_or_else(|| format!("the admin API's answer is not HTTP: {status_line:?}"))?;
    let mut chunked = false;
    let mut length: Option<usize> = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
        if name == "transfer-encoding" && value.to_ascii_lowercase().contains("chunked") {
            chunked = true;
        } else if name == "content-length" {
            length = value.parse().ok();
        }
    }
    let body = &raw[end + 4..];
    if chunked {
        let mut out = Vec::new();
        let mut rest = body;
        loop {
            let line_end = rest
                .windows(2)
                .position(|w| w == b"\r\n")
                .ok_or("a chunked answer cut short")?;
            let size_text = String::from_utf8_lossy(&rest[..line_end]);
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| format!("a chunk size that is not one: {size_text:?}"))?;
            rest = &rest[line_end + 2..];
            if size == 0 {
                return Ok((status, out));
            }
            if rest.len() < size + 2 {
                return Err("a chunked answer cut short".to_owned());
            }
            out.extend_from_slice(&rest[..size]);
            rest = &rest[size + 2..];
        }
    }
    match length {
        Some(length) if body.len() < length => Err(format!(
            "the answer was cut short ({} of {length} bytes)",
            body.len()
        )),
        Some(length) => Ok((status, body[..length].to_vec())),
        None => Ok((status, body.to_vec())),
    }
}

/// Carries one local connection to `port` of `pod` and back, until either side ends.
async fn pipe(
    pods: &Api<Pod>,
    pod: &str,
    port: u16,
    mut local: TcpStream,
) -> Result<(), (ForwardError, Option<TcpStream>)> {
    let mut forward = match timed(pods.portforward(pod, &[port])).await {
        Ok(forward) => forward,
        // Nothing was read from the local connection yet: it can be given to another pod.
        Err(e) => return Err((ForwardError::Api(e), Some(local))),
    };
    let (Some(mut remote), Some(error)) = (forward.take_stream(port), forward.take_error(port))
    else {
        return Err((
            ForwardError::Api("the forward has no stream".to_owned()),
            None,
        ));
    };
    tokio::pin!(error);
    let failed = tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut local, &mut remote) => None,
        Some(message) = &mut error => Some(message),
    };
    drop(remote);
    drop(local);
    // A forward whose port failed ends right after its error message.
    let failed = match failed {
        Some(message) => Some(message),
        None => tokio::time::timeout(Duration::from_millis(500), error)
            .await
            .ok()
            .flatten(),
    };
    forward.abort();
    match failed {
        Some(message) => Err((ForwardError::Port(message), None)),
        None => Ok(()),
    }
}

/// The loopback ports of `tail` and the pod each one forwards to.
struct Slots {
    pods: Api<Pod>,
    cluster: Cluster,
    namespace: String,
    selector: String,
    port: u16,
    /// The pod of each slot.
    assigned: Mutex<Vec<String>>,
    /// Say on stderr when a slot moves to another pod (not under the terminal UI).
    say: bool,
}

impl Slots {
    fn pod_of(&self, slot: usize) -> String {
        self.assigned
            .lock()
            .map(|a| a[slot].clone())
            .unwrap_or_default()
    }

    /// Lists the agent pods again and gives `slot` a pod: its own when it is still there and
    /// running, else one that no other slot follows, else any running one. Returns whether the
    /// slot's pod changed.
    async fn reassign(&self, slot: usize, why: &ForwardError) -> bool {
        let current = self.pod_of(slot);
        let pods = match agent_pods(&self.cluster, &self.namespace, &self.selector).await {
            Ok(pods) => pods,
            Err(e) => {
                if self.say {
                    eprintln!("kubectl-drift: pod/{current}: {why}; {e:#}");
                }
                return false;
            }
        };
        let running: Vec<&AgentPod> = pods.iter().filter(|p| p.reachable()).collect();
        let Ok(mut assigned) = self.assigned.lock() else {
            return false;
        };
        let others: BTreeSet<&String> = assigned
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != slot)
            .map(|(_, p)| p)
            .collect();
        let still_there = running.iter().any(|p| p.name == current);
        // A pod that is still there keeps its slot unless its admin port itself failed and
        // another pod is free.
        let keep = still_there && !matches!(why, ForwardError::Port(_));
        let choice = if keep {
            None
        } else {
            running
                .iter()
                .filter(|p| p.name != current && !others.contains(&p.name))
                // Ready pods first.
                .min_by_key(|p| (!p.ready, p.name.clone()))
                .or_else(|| (!still_there).then(|| running.first()).flatten())
                .map(|p| p.name.clone())
        };
        match choice {
            Some(next) if next != current => {
                if self.say {
                    eprintln!("kubectl-drift: pod/{current}: {why}; following pod/{next} instead");
                }
                assigned[slot] = next;
                true
            }
            _ => {
                if self.say {
                    let what = if running.is_empty() {
                        format!(
                            "no running agent pods in namespace {} match {}",
                            self.namespace, self.selector
                        )
                    } else {
                        "retrying".to_owned()
                    };
                    eprintln!("kubectl-drift: pod/{current}: {why}; {what}");
                }
                false
            }
        }
    }

    /// Serves one connection to slot `slot`'s loopback port.
    async fn serve(self: Arc<Self>, slot: usize, local: TcpStream) {
        let mut local = Some(local);
        // Once with the slot's pod, once more with its replacement when the first forward
        // could not even be made (nothing was read from the local connection then).
        for _ in 0..2 {
            let Some(connection) = local.take() else {
                return;
            };
            let pod = self.pod_of(slot);
            match pipe(&self.pods, &pod, self.port, connection).await {
                Ok(()) => return,
                Err((why, unused)) => {
                    let moved = self.reassign(slot, &why).await;
                    if !moved {
                        return;
                    }
                    local = unused;
                }
            }
        }
    }
}

/// `kubectl drift tail` without `--url`: a loopback port per running agent pod, forwarded to
/// its admin port, followed by [`crate::tail::follow`].
pub fn tail(args: &TailArgs) -> anyhow::Result<Verdict> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("port-forward")
        .enable_all()
        .build()
        .context("cannot start the port-forwarding runtime")?;
    let admins = runtime.block_on(async {
        let cluster = connect(
            args.kubeconfig.as_deref(),
            args.context.as_deref(),
            ", or name an agent's admin API with --url",
        )
        .await?;
        let namespace = args.agent_namespace.clone();
        let selector = args.agents.selector.clone();
        let pods = agent_pods(&cluster, &namespace, &selector).await?;
        let running: Vec<String> = pods
            .iter()
            .filter(|p| p.reachable())
            .map(|p| p.name.clone())
            .collect();
        if running.is_empty() {
            let seen = if pods.is_empty() {
                String::new()
            } else {
                let names: Vec<String> = pods
                    .iter()
                    .map(|p| format!("{} ({})", p.name, p.phase))
                    .collect();
                format!("; found, not running: {}", names.join(", "))
            };
            bail!(
                "no running agent pods in namespace {namespace} match the selector {selector}{seen} (see --agent-namespace, --selector)"
            );
        }
        let slots = Arc::new(Slots {
            pods: Api::namespaced(cluster.client.clone(), &namespace),
            cluster,
            namespace,
            selector,
            port: args.agents.admin_port,
            assigned: Mutex::new(running.clone()),
            say: args.no_tui,
        });
        let mut admins = Vec::new();
        for (slot, pod) in running.iter().enumerate() {
            let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
                .await
                .context("cannot listen on a loopback port for the port-forward")?;
            let local = listener.local_addr()?;
            let slots = slots.clone();
            tokio::spawn(async move {
                while let Ok((connection, _)) = listener.accept().await {
                    let _ = connection.set_nodelay(true);
                    tokio::spawn(slots.clone().serve(slot, connection));
                }
            });
            let url = reqwest::Url::parse(&format!("http://{local}"))?;
            admins.push((format!("pod/{pod}"), url));
        }
        Ok::<_, anyhow::Error>(admins)
    })
    .context("cannot follow the agent pods of the cluster (or name an agent's admin API with --url)")?;
    let result = crate::tail::follow(args, admins);
    runtime.shutdown_background();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_answers_by_length_chunks_or_end() {
        assert_eq!(
            parse_http_response(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}").unwrap(),
            (200, b"{}".to_vec())
        );
        assert_eq!(
            parse_http_response(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n4;x=y\r\n\":1}\r\n0\r\n\r\n"
            )
            .unwrap(),
            (200, b"{\"a\":1}".to_vec())
        );
        assert_eq!(
            parse_http_response(b"HTTP/1.0 404 Not Found\r\n\r\nnope").unwrap(),
            (404, b"nope".to_vec())
        );
        assert!(
            parse_http_response(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n{}")
                .unwrap_err()
                .contains("cut short")
        );
        assert!(
            parse_http_response(b"")
                .unwrap_err()
                .contains("without answering")
        );
        assert!(parse_http_response(b"SSH-2.0\r\n\r\n").is_err());
    }

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn agent_pods_readiness_and_restarts() {
        let p = AgentPod::of(&pod(serde_json::json!({
            "metadata": {"name": "a", "creationTimestamp": "2027-01-15T08:00:00Z"},
            "spec": {"containers": [], "nodeName": "n1"},
            "status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [
                    {"name": "x", "image": "i", "imageID": "", "ready": true, "restartCount": 2},
                    {"name": "y", "image": "i", "imageID": "", "ready": true, "restartCount": 1}]}
        })));
        assert!(p.ready && p.reachable());
        assert_eq!(p.restarts, 3);
        assert_eq!(p.node.as_deref(), Some("n1"));
        let p = AgentPod::of(&pod(serde_json::json!({
            "metadata": {"name": "b", "deletionTimestamp": "2027-01-15T08:00:00Z"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
        })));
        assert!(!p.ready && p.deleting && !p.reachable());
        let p = AgentPod::of(&pod(serde_json::json!({"metadata": {"name": "c"}})));
        assert_eq!(p.phase, "Unknown");
        assert!(!p.reachable());
    }
}
