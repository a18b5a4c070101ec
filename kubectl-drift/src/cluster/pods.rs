//! The agent pods: found by the chart's selector labels in the agent's namespace, as `status`
//! shows them and `tail` follows them.

use anyhow::anyhow;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use serde::Serialize;

use super::Cluster;
use crate::plan::Agents;
use crate::verdict::WEBHOOK_NAME;

/// The agent pods found: [`Agents`] with its namespace known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Located {
    pub namespace: String,
    pub selector: String,
    pub port: u16,
}

/// The annotation Helm puts on what it installs: the release's namespace.
const HELM_RELEASE_NAMESPACE: &str = "meta.helm.sh/release-namespace";

/// Where the agent runs: `--agent-namespace`, else where the cluster's
/// `validate.drift-sentinel.k8s.io` webhook points — its Service's namespace, else the
/// namespace of the Helm release that installed its configuration (a webhook called by URL).
/// When that cannot be told (no such webhook, a URL without a release, several answers), the
/// error says so: the plugin never guesses, since the namespace decides the rule tiers.
pub(crate) async fn locate(cluster: &Cluster, agents: &Agents) -> anyhow::Result<Located> {
    let namespace = match &agents.namespace {
        Some(namespace) => namespace.clone(),
        None => webhook_namespace(cluster).await?,
    };
    Ok(Located {
        namespace,
        selector: agents.selector.clone(),
        port: agents.port,
    })
}

async fn webhook_namespace(cluster: &Cluster) -> anyhow::Result<String> {
    let configurations = cluster
        .list(
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            false,
        )
        .await
        .map_err(|e| {
            anyhow!(
                "cannot tell the agent's namespace: cannot list the ValidatingWebhookConfigurations at {} ({e}); give --agent-namespace",
                cluster.server
            )
        })?;
    namespace_of_webhook(&configurations)
}

/// The agent's namespace from the ValidatingWebhookConfigurations of a cluster.
pub(crate) fn namespace_of_webhook(configurations: &[serde_json::Value]) -> anyhow::Result<String> {
    let text = |v: &serde_json::Value, pointer: &str| {
        v.pointer(pointer)
            .and_then(serde_json::Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let mut found: Vec<(String, String)> = Vec::new();
    let mut unknown: Vec<String> = Vec::new();
    for configuration in configurations {
        let name = text(configuration, "/metadata/name").unwrap_or_default();
        let webhooks = configuration
            .get("webhooks")
            .and_then(serde_json::Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for webhook in webhooks {
            if text(webhook, "/name").as_deref() != Some(WEBHOOK_NAME) {
                continue;
            }
            let release = configuration
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(HELM_RELEASE_NAMESPACE))
                .and_then(serde_json::Value::as_str)
                .filter(|s| !s.is_empty());
            match text(webhook, "/clientConfig/service/namespace").or(release.map(str::to_owned)) {
                Some(namespace) if !found.iter().any(|(n, _)| *n == namespace) => {
                    found.push((namespace, name.clone()))
                }
                Some(_) => {}
                None => unknown.push(name.clone()),
            }
        }
    }
    match (found.as_slice(), unknown.as_slice()) {
        ([(namespace, _)], []) => Ok(namespace.clone()),
        ([], []) => Err(anyhow!(
            "cannot tell the agent's namespace: no ValidatingWebhookConfiguration has the webhook {WEBHOOK_NAME} (is Drift Sentinel installed?); give --agent-namespace"
        )),
        ([], [name, ..]) => Err(anyhow!(
            "cannot tell the agent's namespace: the ValidatingWebhookConfiguration {name} calls {WEBHOOK_NAME} by URL and names no Helm release ({HELM_RELEASE_NAMESPACE}); give --agent-namespace"
        )),
        _ => {
            let mut places: Vec<String> = found
                .iter()
                .map(|(namespace, name)| format!("{namespace} ({name})"))
                .collect();
            places.extend(unknown.iter().map(|name| format!("a URL ({name})")));
            Err(anyhow!(
                "cannot tell the agent's namespace: {WEBHOOK_NAME} is served from several places: {}; give --agent-namespace",
                places.join(", ")
            ))
        }
    }
}

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

#[cfg(test)]
impl AgentPod {
    /// A running pod of the tests, ready or not.
    pub(crate) fn running(name: &str, ready: bool) -> Self {
        AgentPod {
            name: name.into(),
            phase: "Running".into(),
            ready,
            restarts: 0,
            created: None,
            deleting: false,
            node: None,
        }
    }
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

    #[test]
    fn the_agent_namespace_is_where_the_webhook_points() {
        let service = |ns: &str| {
            serde_json::json!({"metadata": {"name": "drift-sentinel"}, "webhooks": [
            {"name": "rules.drift-sentinel.k8s.io", "clientConfig": {"service": {"namespace": "elsewhere"}}},
            {"name": "validate.drift-sentinel.k8s.io", "clientConfig": {"service": {"namespace": ns, "name": "drift-sentinel"}}}]})
        };
        let by_url = |annotations: serde_json::Value| {
            serde_json::json!({"metadata": {"name": "by-url", "annotations": annotations},
            "webhooks": [{"name": "validate.drift-sentinel.k8s.io", "clientConfig": {"url": "https://10.0.0.1:8443/validate"}}]})
        };
        let other = serde_json::json!({"metadata": {"name": "kyverno"}, "webhooks": [{"name": "validate.kyverno.svc", "clientConfig": {"service": {"namespace": "kyverno"}}}]});
        assert_eq!(
            namespace_of_webhook(&[other.clone(), service("security")]).unwrap(),
            "security"
        );
        assert_eq!(
            namespace_of_webhook(&[by_url(
                serde_json::json!({"meta.helm.sh/release-namespace": "platform"})
            )])
            .unwrap(),
            "platform"
        );
        // The same namespace twice is one answer.
        assert_eq!(
            namespace_of_webhook(&[service("a"), service("a")]).unwrap(),
            "a"
        );
        for (configurations, says) in [
            (
                vec![other],
                "no ValidatingWebhookConfiguration has the webhook validate.drift-sentinel.k8s.io",
            ),
            (
                vec![by_url(serde_json::json!({}))],
                "the ValidatingWebhookConfiguration by-url calls validate.drift-sentinel.k8s.io by URL and names no Helm release",
            ),
            (
                vec![service("a"), service("b")],
                "served from several places: a (drift-sentinel), b (drift-sentinel)",
            ),
        ] {
            let error = namespace_of_webhook(&configurations)
                .unwrap_err()
                .to_string();
            assert!(
                error.starts_with("cannot tell the agent's namespace: "),
                "{error}"
            );
            assert!(error.contains(says), "{error}");
            assert!(error.ends_with("give --agent-namespace"), "{error}");
        }
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
