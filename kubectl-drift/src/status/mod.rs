//! `kubectl drift status` (SPEC §9): is Drift Sentinel healthy in this cluster?
//!
//! - the agent pods (the chart's selector labels) and their readiness;
//! - each pod's admin `/status`, through port-forwarding: rules loaded (each with its tier,
//!   cluster or namespace rule) and invalid, rules served in their last valid version (stale,
//!   with the reason), the cluster rule namespaces, export on;
//! - the Connection's `status.byPod`: per pod and source, active, last attempt, last success,
//!   errors — a source whose last success is more than 2 minutes old is flagged stale: a
//!   problem while it is still being attempted (or no longer succeeding), a warning when
//!   nothing was attempted since (idle);
//! - the ValidatingWebhookConfiguration: caBundle present, failurePolicy, namespaceSelector;
//! - the audit pods (the chart's audit Deployment) and their last run: an audit that has not
//!   completed within 3 intervals is a problem ([`audit`]).
//!
//! Three steps: [`fetch`] asks the cluster (the only I/O), [`judge`] decides what is healthy,
//! stale or a problem (pure, tested without a cluster), [`render`] prints the [`Report`] as
//! text, JSON or YAML. Exit 0 when healthy, 1 when something is not (each problem is named),
//! 2 when the cluster cannot be asked.

mod audit;
mod fetch;
mod judge;
mod render;

use std::time::SystemTime;

use serde::Serialize;
use serde_json::Value;

use crate::cluster::pods::AgentPod;
use crate::plan::{Print, Status};
use crate::verdict::Verdict;

/// What `status` found, as `-o json|yaml` prints it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Report {
    pub namespace: String,
    pub selector: String,
    pub healthy: bool,
    /// What is wrong: each makes the exit code 1.
    pub problems: Vec<String>,
    /// Worth knowing, not unhealthy.
    pub warnings: Vec<String>,
    pub pods: Vec<PodReport>,
    pub connection: ConnectionReport,
    pub webhook_configurations: Vec<WebhookConfigReport>,
    pub audit: audit::AuditReport,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PodReport {
    #[serde(flatten)]
    pub pod: AgentPod,
    /// The pod's admin `/status`, through port-forwarding; `None` when the pod is not running.
    pub admin: Option<AdminReport>,
}

#[derive(Debug, Clone, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AdminReport {
    pub reachable: bool,
    /// Why it could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The agent's own readiness (rules synced).
    pub ready: Option<bool>,
    pub rules_loaded: Option<u64>,
    pub rules_invalid: Option<u64>,
    pub invalid_rules: Vec<InvalidRule>,
    /// The rules in force, each with its tier.
    pub rules: Vec<LoadedRule>,
    /// Rules served in their last valid version: their ConfigMap now holds an invalid one.
    pub stale_rules: Vec<StaleRule>,
    /// The agent's cluster rule namespaces (`["*"]`: every rule is a cluster rule); `None` from
    /// an agent that does not report them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_rule_namespaces: Option<Vec<String>>,
    pub source_errors: Vec<String>,
    pub export_enabled: Option<bool>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct InvalidRule {
    pub rule: String,
    pub message: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct LoadedRule {
    pub rule: String,
    /// `cluster` or `namespace`.
    pub tier: String,
    pub mode: String,
    pub priority: i64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StaleRule {
    pub rule: String,
    /// Why its newest version is not served.
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    pub served_resource_version: String,
    pub resource_version: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ConnectionReport {
    pub name: String,
    pub found: bool,
    pub by_pod: Vec<PodEntry>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PodEntry {
    /// `status.byPod[].id`: the pod's name.
    pub pod: String,
    /// Whether the pod is one of the agent pods found now (entries of pods that are gone stay
    /// on the Connection; they are shown, not judged).
    pub pod_found: bool,
    #[serde(rename = "connectionUID")]
    pub connection_uid: Option<String>,
    pub connection_errors: Vec<String>,
    pub sources: Vec<SourceEntry>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SourceEntry {
    pub source: String,
    pub active: bool,
    pub last_attempt_time: Option<String>,
    pub last_success_time: Option<String>,
    pub errors: Vec<String>,
    /// `ok`, `idle` (nothing attempted since the last success), `stale`, or `errors`.
    pub state: SourceState,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum SourceState {
    Ok,
    Idle,
    Stale,
    Errors,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WebhookConfigReport {
    pub name: String,
    pub webhooks: Vec<WebhookReport>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WebhookReport {
    pub name: String,
    pub ca_bundle: bool,
    pub failure_policy: String,
    pub namespace_selector: Value,
    /// The selector in one line.
    pub namespace_selector_text: String,
    /// `namespace/name:port/path` of the Service it calls, or its URL.
    pub target: String,
    /// Whether the selector would let the webhook intercept the agent's own namespace.
    pub intercepts_agent_namespace: bool,
}

/// Fetches, judges and prints; unhealthy exits 1, like "would be denied".
pub(crate) async fn run(plan: &Status, print: Print) -> anyhow::Result<Verdict> {
    let facts = fetch::fetch(plan).await?;
    let now = SystemTime::now();
    let report = judge::judge(facts, plan, now);
    let mut out = std::io::stdout().lock();
    render::print(&report, print, now, &mut out)?;
    Ok(if report.healthy {
        Verdict::Allowed
    } else {
        Verdict::Denied
    })
}
