//! What `status` asks the cluster: the agent pods and the audit pods, each running pod's admin
//! `/status` (through a port-forward of its own, all at once), the Connection and the webhook configurations. Every
//! request is bounded by the request timeout. Nothing here judges what it read.

use anyhow::{Context as _, anyhow};
use drift_api::Connection;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::Api;
use kube::api::ListParams;

use crate::cluster::forward::{self, ForwardError};
use crate::cluster::pods::{self, AgentPod, Located};
use crate::cluster::{self, Cluster};
use crate::plan::Status;

/// The label the chart puts on its objects, the webhook configuration included.
pub(super) const CHART_LABEL: &str = "app.kubernetes.io/name=drift-sentinel";

/// A pod's admin `GET /status`: the HTTP status and body, or why it could not be read.
pub(super) type AdminAnswer = Result<(u16, Vec<u8>), ForwardError>;

/// Everything `status` read, as read.
pub(super) struct Facts {
    pub pods: Vec<AgentPod>,
    /// By pod; `None` for a pod that is not running (not asked).
    pub admins: Vec<Option<AdminAnswer>>,
    /// `None` when it does not exist.
    pub connection: Option<Connection>,
    pub webhook_configurations: Vec<ValidatingWebhookConfiguration>,
    /// The audit pods (the chart's audit Deployment) and, by pod, their admin `/status`.
    pub audit_pods: Vec<AgentPod>,
    pub audit_admins: Vec<Option<AdminAnswer>>,
    /// Where the agent was found.
    pub agents: Located,
}

pub(super) async fn fetch(plan: &Status) -> anyhow::Result<Facts> {
    let cluster = cluster::connect(&plan.kube, "").await?;
    let agents = &pods::locate(&cluster, &plan.agents).await?;
    let (pods, audit_pods) = tokio::join!(
        pods::agent_pods(&cluster, &agents.namespace, &agents.selector),
        pods::agent_pods(&cluster, &agents.namespace, &plan.audit_selector),
    );
    let (pods, audit_pods) = (pods?, audit_pods?);
    let (connection, webhook_configurations, admins, audit_admins) = tokio::join!(
        read_connection(&cluster, &agents.namespace, &plan.connection),
        read_webhooks(&cluster, plan.webhook.as_deref()),
        ask_admins(&cluster, agents, &pods),
        ask_admins(&cluster, agents, &audit_pods),
    );
    Ok(Facts {
        pods,
        admins,
        connection: connection?,
        webhook_configurations: webhook_configurations?,
        audit_pods,
        audit_admins,
        agents: agents.clone(),
    })
}

/// Every running pod's admin `/status`, at once.
async fn ask_admins(
    cluster: &Cluster,
    agents: &Located,
    pods: &[AgentPod],
) -> Vec<Option<AdminAnswer>> {
    let asks = pods.iter().map(|pod| async move {
        if !pod.reachable() {
            return None;
        }
        Some(
            forward::admin_get(
                cluster,
                &agents.namespace,
                &pod.name,
                agents.port,
                "/status",
            )
            .await,
        )
    });
    futures::future::join_all(asks).await
}

/// The Connection, or `None` when it does not exist.
async fn read_connection(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Option<Connection>> {
    let api: Api<Connection> = Api::namespaced(cluster.client.clone(), namespace);
    match cluster.timed(api.get_opt(name)).await {
        Ok(object) => Ok(object),
        // The CRD is not installed: no Connection either.
        Err(e) if e.code() == Some(404) => Ok(None),
        Err(e) => Err(anyhow!(
            "cannot read Connection {namespace}/{name} at {}: {e}",
            cluster.server
        )),
    }
}

/// The webhook configuration named by `--webhook`, else the chart's: labelled
/// `app.kubernetes.io/name=drift-sentinel`, else any with a webhook named like the chart's.
async fn read_webhooks(
    cluster: &Cluster,
    name: Option<&str>,
) -> anyhow::Result<Vec<ValidatingWebhookConfiguration>> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(cluster.client.clone());
    let failed = |what: &str| {
        format!(
            "cannot read {what} (ValidatingWebhookConfiguration) at {}",
            cluster.server
        )
    };
    if let Some(name) = name {
        let found = cluster
            .timed(api.get_opt(name))
            .await
            .with_context(|| failed(&format!("the webhook configuration {name}")))?;
        return Ok(found.into_iter().collect());
    }
    let labelled = cluster
        .timed(api.list(&ListParams::default().labels(CHART_LABEL)))
        .await
        .with_context(|| failed("the webhook configurations"))?;
    if !labelled.items.is_empty() {
        return Ok(labelled.items);
    }
    let all = cluster
        .timed(api.list(&ListParams::default()))
        .await
        .with_context(|| failed("the webhook configurations"))?;
    Ok(all
        .items
        .into_iter()
        .filter(|c| {
            c.webhooks
                .iter()
                .flatten()
                .any(|w| w.name == crate::verdict::WEBHOOK_NAME)
        })
        .collect())
}
