//! The agent pods: found by the chart's selector labels in the agent's namespace, as `status`
//! shows them and `tail` follows them.

use anyhow::anyhow;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use serde::Serialize;

use super::Cluster;

/// An agent pod as `status` shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AgentPod {
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
    pub(crate) fn of(pod: &Pod) -> Self {
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
    pub(crate) fn reachable(&self) -> bool {
        self.phase == "Running" && !self.deleting
    }
}

/// The agent pods of `namespace` matching `selector`, by name.
pub(crate) async fn agent_pods(
    cluster: &Cluster,
    namespace: &str,
    selector: &str,
) -> anyhow::Result<Vec<AgentPod>> {
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), namespace);
    let list = cluster
        .timed(pods.list(&ListParams::default().labels(selector)))
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

#[cfg(test)]
mod tests {
    use super::*;

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
