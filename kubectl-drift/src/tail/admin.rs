//! Where a `tail` stream reads from: an admin API given with `--url` (plain TCP), or an agent
//! pod of the cluster through a port-forward made for each connection. A pod that goes away
//! (its forward refused, or its admin port failing) is replaced by a running agent pod that no
//! other stream follows, so the reconnecting stream finds the replacement.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use anyhow::bail;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::cluster::Cluster;
use crate::cluster::forward::{self, ForwardError, ForwardGuard, PortFailure};
use crate::cluster::pods::{AgentPod, Located, agent_pods};
use crate::http::AdminUrl;
use crate::plan::Agents;

/// A byte stream to an admin API.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A connection to an admin API, ready for one request.
pub(crate) struct Opened {
    pub io: Box<dyn Io>,
    /// The `Host` of the request.
    pub authority: String,
    /// Resolves when a forwarded port fails (never for TCP).
    pub failed: PortFailure,
    /// Keeps a forward open.
    pub guard: Option<ForwardGuard>,
}

/// One stream's admin API.
pub(crate) enum Admin {
    Url(AdminUrl),
    Pod { pods: Arc<Pods>, slot: usize },
}

impl Admin {
    /// What the header and messages call it: the URL, or `pod/NAME`.
    pub(crate) fn label(&self) -> String {
        match self {
            Admin::Url(url) => url.to_string(),
            Admin::Pod { pods, slot } => format!("pod/{}", pods.pod_of(*slot)),
        }
    }

    /// The request target of `path` with `query`.
    pub(crate) fn target(&self, path: &str, query: &str) -> String {
        match self {
            Admin::Url(url) => url.target(path, query),
            Admin::Pod { .. } => crate::http::target("", path, query),
        }
    }

    pub(crate) async fn open(&self) -> Result<Opened, ForwardError> {
        match self {
            Admin::Url(url) => {
                let stream = url
                    .connect()
                    .await
                    .map_err(|e| ForwardError::Http(crate::http::innermost(&e)))?;
                Ok(Opened {
                    io: Box::new(stream),
                    authority: url.authority(),
                    failed: Box::pin(std::future::pending()),
                    guard: None,
                })
            }
            Admin::Pod { pods, slot } => {
                let pod = pods.pod_of(*slot);
                let port = pods.agents.port;
                let opened =
                    forward::open(&pods.cluster, &pods.agents.namespace, &pod, port).await?;
                Ok(Opened {
                    io: Box::new(opened.stream),
                    authority: format!("localhost:{port}"),
                    failed: opened.failed,
                    guard: Some(opened.guard),
                })
            }
        }
    }

    /// After a failed forward: whether the stream moved to another pod, as (from, to) labels.
    pub(crate) async fn failed(&self, why: &ForwardError) -> Result<(String, String), String> {
        match self {
            Admin::Url(_) => Err(why.to_string()),
            Admin::Pod { pods, slot } => pods.reassign(*slot, why).await,
        }
    }
}

/// The agent pods the streams follow, one per stream (slot).
pub(crate) struct Pods {
    cluster: Cluster,
    agents: Located,
    /// The pod of each slot.
    assigned: Mutex<Vec<String>>,
}

impl Pods {
    /// The running agent pods, one slot each; none running is an error naming what was found.
    pub(crate) async fn find(cluster: Cluster, agents: Agents) -> anyhow::Result<Arc<Pods>> {
        let agents = crate::cluster::pods::locate(&cluster, &agents).await?;
        let pods = agent_pods(&cluster, &agents.namespace, &agents.selector).await?;
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
                "no running agent pods in namespace {} match the selector {}{seen} (see --agent-namespace, --selector)",
                agents.namespace,
                agents.selector
            );
        }
        Ok(Arc::new(Pods {
            cluster,
            agents,
            assigned: Mutex::new(running),
        }))
    }

    pub(crate) fn slots(&self) -> usize {
        self.assigned.lock().map(|a| a.len()).unwrap_or_default()
    }

    fn pod_of(&self, slot: usize) -> String {
        self.assigned
            .lock()
            .map(|a| a[slot].clone())
            .unwrap_or_default()
    }

    /// Lists the agent pods again and gives `slot` a pod: its own when it is still there and
    /// running, else one that no other slot follows, else any running one. `Ok` with the
    /// labels when the slot's pod changed; else why not, for the message.
    async fn reassign(&self, slot: usize, why: &ForwardError) -> Result<(String, String), String> {
        let current = self.pod_of(slot);
        let agents = &self.agents;
        let pods = agent_pods(&self.cluster, &agents.namespace, &agents.selector)
            .await
            .map_err(|e| format!("{why}; {e:#}"))?;
        let running: Vec<&AgentPod> = pods.iter().filter(|p| p.reachable()).collect();
        let Ok(mut assigned) = self.assigned.lock() else {
            return Err(why.to_string());
        };
        let others: BTreeSet<&String> = assigned
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != slot)
            .map(|(_, p)| p)
            .collect();
        let choice = choose(&running, &current, &others, why);
        match choice {
            Some(next) if next != current => {
                assigned[slot] = next.clone();
                Ok((format!("pod/{current}"), format!("pod/{next}")))
            }
            _ if running.is_empty() => Err(format!(
                "{why}; no running agent pods in namespace {} match {}",
                agents.namespace, agents.selector
            )),
            _ => Err(why.to_string()),
        }
    }
}

/// The pod a slot following `current` moves to, if any. A pod that is still there keeps its
/// slot unless its admin port itself failed and another pod is free; ready pods first.
fn choose(
    running: &[&AgentPod],
    current: &str,
    others: &BTreeSet<&String>,
    why: &ForwardError,
) -> Option<String> {
    let still_there = running.iter().any(|p| p.name == current);
    if still_there && !matches!(why, ForwardError::Port(_)) {
        return None;
    }
    running
        .iter()
        .filter(|p| p.name != current && !others.contains(&p.name))
        .min_by_key(|p| (!p.ready, p.name.clone()))
        .or_else(|| (!still_there).then(|| running.first()).flatten())
        .map(|p| p.name.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, ready: bool) -> AgentPod {
        AgentPod::running(name, ready)
    }

    #[test]
    fn a_slot_moves_to_a_free_pod_ready_ones_first() {
        let (a, b, c) = (pod("a", true), pod("b", false), pod("c", true));
        let gone = ForwardError::Api("pods \"x\" not found (404)".into());
        let port = ForwardError::Port("connection refused".into());
        let others: BTreeSet<&String> = BTreeSet::new();
        // The pod is gone: the ready free pod c before the unready b.
        assert_eq!(choose(&[&b, &c], "x", &others, &gone), Some("c".into()));
        // Still there and only the API hiccuped: it keeps its pod.
        assert_eq!(choose(&[&a, &c], "a", &others, &gone), None);
        // Its admin port failed: another free pod.
        assert_eq!(choose(&[&a, &c], "a", &others, &port), Some("c".into()));
        // Every other pod is followed: a gone pod is replaced by any running one.
        let c_name = "c".to_owned();
        let taken: BTreeSet<&String> = [&c_name].into_iter().collect();
        assert_eq!(choose(&[&c], "x", &taken, &gone), Some("c".into()));
        assert_eq!(choose(&[&a, &c], "a", &taken, &port), None);
        assert_eq!(choose(&[], "x", &others, &gone), None);
    }
}
