//! `kubectl drift status` (SPEC §9): is Drift Sentinel healthy in this cluster?
//!
//! - the agent pods (the chart's selector labels) and their readiness;
//! - each pod's admin `/status`, through port-forwarding: rules loaded and invalid, export on;
//! - the Connection's `status.byPod`: per pod and source, active, last attempt, last success,
//!   errors — a source whose last success is more than 2 minutes old is flagged stale: a
//!   problem while it is still being attempted (or no longer succeeding), a warning when
//!   nothing was attempted since (idle);
//! - the ValidatingWebhookConfiguration: caBundle present, failurePolicy, namespaceSelector.
//!
//! Exit 0 when healthy, 1 when something is not (each problem is named), 2 when the cluster
//! cannot be asked.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, anyhow};
use drift_api::Connection;
use drift_api::status::AgentStatus;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingWebhook, ValidatingWebhookConfiguration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::ListParams;
use kube::{Api, Client};
use serde::Serialize;
use serde_json::Value;

use crate::Verdict;
use crate::cli::{Output, StatusArgs};
use crate::cluster::{self, AgentPod, Cluster};

/// A source whose last success is older than this is stale (when it has been attempted since).
pub const STALE_AFTER: Duration = Duration::from_secs(120);
/// The label the chart puts on its objects, the webhook configuration included.
const CHART_LABEL: &str = "app.kubernetes.io/name=drift-sentinel";

/// What `status` found, as `-o json|yaml` prints it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
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
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodReport {
    #[serde(flatten)]
    pub pod: AgentPod,
    /// The pod's admin `/status`, through port-forwarding; `None` when the pod is not running.
    pub admin: Option<AdminReport>,
}

#[derive(Debug, Clone, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct AdminReport {
    pub reachable: bool,
    /// Why it could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The agent's own readiness (rules synced).
    pub ready: Option<bool>,
    pub rules_loaded: Option<u64>,
    pub rules_invalid: Option<u64>,
    pub invalid_rules: Vec<InvalidRule>,
    pub source_errors: Vec<String>,
    pub export_enabled: Option<bool>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct InvalidRule {
    pub rule: String,
    pub message: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionReport {
    pub name: String,
    pub found: bool,
    pub by_pod: Vec<PodEntry>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodEntry {
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
pub struct SourceEntry {
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
pub enum SourceState {
    Ok,
    Idle,
    Stale,
    Errors,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookConfigReport {
    pub name: String,
    pub webhooks: Vec<WebhookReport>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookReport {
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

pub fn run(args: &StatusArgs) -> anyhow::Result<Verdict> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let report = runtime.block_on(gather(args, SystemTime::now()))?;
    runtime.shutdown_background();
    let mut out = std::io::stdout().lock();
    print(&report, args.output, &mut out)?;
    // Unhealthy exits 1, like "would be denied".
    Ok(if report.healthy {
        Verdict::Allowed
    } else {
        Verdict::Denied
    })
}

fn print(report: &Report, output: Output, out: &mut impl std::io::Write) -> anyhow::Result<()> {
    match output {
        Output::Json => writeln!(out, "{}", serde_json::to_string_pretty(report)?)?,
        Output::Yaml => write!(out, "{}", serde_yaml::to_string(report)?)?,
        Output::Text => write!(out, "{}", text(report, SystemTime::now()))?,
    }
    Ok(())
}

async fn gather(args: &StatusArgs, now: SystemTime) -> anyhow::Result<Report> {
    let cluster = cluster::connect(args.kubeconfig.as_deref(), args.context.as_deref(), "").await?;
    let namespace = args.namespace.clone();
    let selector = args.agents.selector.clone();
    let pods = cluster::agent_pods(&cluster, &namespace, &selector).await?;
    let connection = read_connection(&cluster, &namespace, &args.connection).await?;
    let configurations = read_webhooks(&cluster, args.webhook.as_deref()).await?;

    // Every running pod's admin /status, at once.
    let mut asks = tokio::task::JoinSet::new();
    for (index, pod) in pods.iter().enumerate() {
        if !pod.reachable() {
            continue;
        }
        let client = cluster.client.clone();
        let (namespace, name, port) = (namespace.clone(), pod.name.clone(), args.agents.admin_port);
        asks.spawn(async move { (index, admin_status(&client, &namespace, &name, port).await) });
    }
    let mut admins: Vec<Option<AdminReport>> = vec![None; pods.len()];
    while let Some(done) = asks.join_next().await {
        let (index, admin) = done.context("an admin request failed")?;
        admins[index] = Some(admin);
    }
    let pods: Vec<PodReport> = pods
        .into_iter()
        .zip(admins)
        .map(|(pod, admin)| PodReport { pod, admin })
        .collect();
    let connection = judge_connection(&args.connection, connection.as_ref(), &pods, now);
    let webhook_configurations = configurations
        .iter()
        .map(|c| webhook_report(c, &namespace))
        .collect();
    let mut report = Report {
        namespace,
        selector,
        healthy: true,
        problems: Vec::new(),
        warnings: Vec::new(),
        pods,
        connection,
        webhook_configurations,
    };
    judge(&mut report, args, now);
    Ok(report)
}

/// The Connection, or `None` when it does not exist.
async fn read_connection(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Option<Connection>> {
    let api: Api<Connection> = Api::namespaced(cluster.client.clone(), namespace);
    match tokio::time::timeout(Duration::from_secs(20), api.get_opt(name)).await {
        Ok(Ok(object)) => Ok(object),
        // The CRD is not installed: no Connection either.
        Ok(Err(kube::Error::Api(status))) if status.code == 404 => Ok(None),
        Ok(Err(e)) => Err(anyhow!(
            "cannot read Connection {namespace}/{name} at {}: {}",
            cluster.server,
            cluster::describe(&e)
        )),
        Err(_) => Err(anyhow!(
            "cannot read Connection {namespace}/{name} at {}: no answer within 20s",
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
    let failed = |what: &str, e: String| {
        anyhow!(
            "cannot read {what} (ValidatingWebhookConfiguration) at {}: {e}",
            cluster.server
        )
    };
    if let Some(name) = name {
        return match cluster::timed(api.get_opt(name)).await {
            Ok(found) => Ok(found.into_iter().collect()),
            Err(e) => Err(failed(&format!("the webhook configuration {name}"), e)),
        };
    }
    let labelled = cluster::timed(api.list(&ListParams::default().labels(CHART_LABEL)))
        .await
        .map_err(|e| failed("the webhook configurations", e))?;
    if !labelled.items.is_empty() {
        return Ok(labelled.items);
    }
    let all = cluster::timed(api.list(&ListParams::default()))
        .await
        .map_err(|e| failed("the webhook configurations", e))?;
    Ok(all
        .items
        .into_iter()
        .filter(|c| {
            c.webhooks
                .iter()
                .flatten()
                .any(|w| w.name == crate::WEBHOOK_NAME)
        })
        .collect())
}

async fn admin_status(client: &Client, namespace: &str, pod: &str, port: u16) -> AdminReport {
    let unreachable = |error: String| AdminReport {
        reachable: false,
        error: Some(error),
        ..AdminReport::default()
    };
    let (status, body) = match cluster::admin_get(client, namespace, pod, port, "/status").await {
        Ok(answer) => answer,
        Err(e) => return unreachable(e.to_string()),
    };
    if status != 200 {
        let text = String::from_utf8_lossy(&body);
        let first = text.lines().next().unwrap_or_default().trim();
        return unreachable(format!(
            "GET /status answered HTTP {status}{}{first} (is port {port} the agent's admin port? see --admin-port)",
            if first.is_empty() { "" } else { ": " }
        ));
    }
    let document: AgentStatus = match serde_json::from_slice(&body) {
        Ok(document) => document,
        Err(e) => {
            return unreachable(format!(
                "GET /status did not answer the agent's status document ({e}) (is port {port} the agent's admin port? see --admin-port)"
            ));
        }
    };
    admin_report(&document)
}

fn admin_report(document: &AgentStatus) -> AdminReport {
    let invalid_rules = document
        .invalid_rules
        .iter()
        .map(|rule| InvalidRule {
            rule: rule.rule.clone(),
            message: rule.message.clone(),
        })
        .collect();
    AdminReport {
        reachable: true,
        error: None,
        ready: Some(document.ready),
        rules_loaded: Some(document.rules_loaded as u64),
        rules_invalid: Some(document.rules_invalid as u64),
        invalid_rules,
        // Each error's text, as the agent's log gives it: file, line and column, reason.
        source_errors: document
            .source_errors
            .iter()
            .map(ToString::to_string)
            .collect(),
        export_enabled: Some(document.export.enabled),
    }
}

/// How old `time` is at `now` (zero for a time in the future).
fn age(time: &str, now: SystemTime) -> Option<Duration> {
    let at = crate::tail::record::parse_rfc3339(time)?;
    Some(now.duration_since(at).unwrap_or_default())
}

fn source_state(
    active: bool,
    last_attempt: Option<&str>,
    last_success: Option<&str>,
    errors: &[String],
    now: SystemTime,
) -> SourceState {
    if !errors.is_empty() {
        return SourceState::Errors;
    }
    let parse = |t: Option<&str>| t.and_then(crate::tail::record::parse_rfc3339);
    let (attempt, success) = (parse(last_attempt), parse(last_success));
    let Some(success) = success else {
        // Attempted and never succeeded; with no attempt either there is nothing to judge.
        return if attempt.is_some() {
            SourceState::Stale
        } else {
            SourceState::Ok
        };
    };
    let old = now.duration_since(success).unwrap_or_default() > STALE_AFTER;
    if !old {
        return SourceState::Ok;
    }
    // The agent writes its entry only for windows with publish attempts: a last attempt that
    // succeeded, long ago, is a source with nothing to export since.
    let attempted_since = attempt.is_some_and(|a| a > success);
    if active && !attempted_since {
        SourceState::Idle
    } else {
        SourceState::Stale
    }
}

fn judge_connection(
    name: &str,
    connection: Option<&Connection>,
    pods: &[PodReport],
    now: SystemTime,
) -> ConnectionReport {
    let Some(connection) = connection else {
        return ConnectionReport {
            name: name.to_owned(),
            found: false,
            by_pod: Vec::new(),
        };
    };
    let status = connection.status.clone().unwrap_or_default();
    let names: BTreeSet<&str> = pods.iter().map(|p| p.pod.name.as_str()).collect();
    let by_pod = status
        .by_pod
        .iter()
        .map(|entry| PodEntry {
            pod: entry.id.clone(),
            pod_found: names.contains(entry.id.as_str()),
            connection_uid: entry.connection_uid.clone(),
            connection_errors: entry
                .connection_errors
                .iter()
                .map(|e| e.message.clone())
                .collect(),
            sources: entry
                .publish_statuses
                .iter()
                .map(|s| {
                    let errors: Vec<String> = s.errors.iter().map(|e| e.message.clone()).collect();
                    SourceEntry {
                        state: source_state(
                            s.active,
                            s.last_attempt_time.as_deref(),
                            s.last_success_time.as_deref(),
                            &errors,
                            now,
                        ),
                        source: s.source.clone(),
                        active: s.active,
                        last_attempt_time: s.last_attempt_time.clone(),
                        last_success_time: s.last_success_time.clone(),
                        errors,
                    }
                })
                .collect(),
        })
        .collect();
    ConnectionReport {
        name: name.to_owned(),
        found: true,
        by_pod,
    }
}

/// A label selector in one line, as `kubectl describe` writes it.
fn selector_text(selector: Option<&LabelSelector>) -> String {
    let Some(selector) = selector else {
        return "(all namespaces)".to_owned();
    };
    let mut terms: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for e in selector.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default().join(",");
        terms.push(match e.operator.as_str() {
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            op => format!("{} {} ({values})", e.key, op.to_ascii_lowercase()),
        });
    }
    if terms.is_empty() {
        "(all namespaces)".to_owned()
    } else {
        terms.join(", ")
    }
}

/// Whether a namespace with only its name label matches `selector`.
fn selects_namespace(selector: Option<&LabelSelector>, namespace: &str) -> bool {
    let Some(selector) = selector else {
        return true;
    };
    let label = |key: &str| (key == "kubernetes.io/metadata.name").then_some(namespace);
    let labels_match = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| label(k) == Some(v.as_str()));
    let expressions_match = selector.match_expressions.iter().flatten().all(|e| {
        let value = label(&e.key);
        let values = e.values.clone().unwrap_or_default();
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
            "NotIn" => !value.is_some_and(|v| values.iter().any(|x| x == v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => true,
        }
    });
    labels_match && expressions_match
}

fn webhook_target(webhook: &ValidatingWebhook) -> String {
    let config = &webhook.client_config;
    if let Some(service) = &config.service {
        format!(
            "service {}/{}:{}{}",
            service.namespace,
            service.name,
            service.port.unwrap_or(443),
            service.path.as_deref().unwrap_or("")
        )
    } else if let Some(url) = &config.url {
        url.clone()
    } else {
        "(none)".to_owned()
    }
}

fn webhook_report(
    configuration: &ValidatingWebhookConfiguration,
    agent_namespace: &str,
) -> WebhookConfigReport {
    WebhookConfigReport {
        name: configuration.metadata.name.clone().unwrap_or_default(),
        webhooks: configuration
            .webhooks
            .iter()
            .flatten()
            .map(|w| WebhookReport {
                name: w.name.clone(),
                ca_bundle: w
                    .client_config
                    .ca_bundle
                    .as_ref()
                    .is_some_and(|b| !b.0.is_empty()),
                // The API server's default.
                failure_policy: w
                    .failure_policy
                    .clone()
                    .unwrap_or_else(|| "Fail".to_owned()),
                namespace_selector: w
                    .namespace_selector
                    .as_ref()
                    .and_then(|s| serde_json::to_value(s).ok())
                    .unwrap_or(Value::Null),
                namespace_selector_text: selector_text(w.namespace_selector.as_ref()),
                target: webhook_target(w),
                intercepts_agent_namespace: selects_namespace(
                    w.namespace_selector.as_ref(),
                    agent_namespace,
                ),
            })
            .collect(),
    }
}

fn ago(time: Option<&str>, now: SystemTime) -> String {
    match time {
        None => "never".to_owned(),
        Some(t) => match age(t, now) {
            Some(age) => format!("{} ago", short_duration(age)),
            None => t.to_owned(),
        },
    }
}

/// `45s`, `3m`, `2h5m`, `4d` — kubectl's way.
fn short_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..120 => format!("{s}s"),
        120..3600 => format!("{}m", s / 60),
        3600..86400 if s % 3600 >= 60 && s < 8 * 3600 => {
            format!("{}h{}m", s / 3600, (s % 3600) / 60)
        }
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// The invalid rules that the pods report, each with the pods that report it, in order.
fn invalid_rules(pods: &[PodReport]) -> Vec<(&InvalidRule, Vec<&str>)> {
    let mut rules: Vec<(&InvalidRule, Vec<&str>)> = Vec::new();
    for p in pods {
        for rule in p.admin.iter().flat_map(|a| a.invalid_rules.iter()) {
            match rules.iter_mut().find(|(r, _)| *r == rule) {
                Some((_, names)) => names.push(&p.pod.name),
                None => rules.push((rule, vec![&p.pod.name])),
            }
        }
    }
    rules
}

/// Fills `problems`, `warnings` and `healthy`.
fn judge(report: &mut Report, args: &StatusArgs, now: SystemTime) {
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let port = args.agents.admin_port;
    if report.pods.is_empty() {
        problems.push(format!(
            "no agent pods in namespace {} match the selector {} (see -n, --selector)",
            report.namespace, report.selector
        ));
    }
    for p in &report.pods {
        let pod = &p.pod;
        if pod.deleting {
            warnings.push(format!("pod {} is terminating", pod.name));
        } else if !pod.ready {
            problems.push(format!(
                "pod {} is not ready (phase {})",
                pod.name, pod.phase
            ));
        }
        let Some(admin) = &p.admin else {
            continue;
        };
        if let Some(error) = &admin.error {
            problems.push(format!(
                "pod {}: cannot read the admin API (port {port}) through port-forwarding: {error}",
                pod.name
            ));
            continue;
        }
        if admin.ready == Some(false) {
            problems.push(format!(
                "pod {}: the agent is not ready (its rules are not synced)",
                pod.name
            ));
        }
        // Invalid rules are named below, once for all the pods that report them.
        if admin.invalid_rules.is_empty() && admin.rules_invalid.unwrap_or(0) > 0 {
            let count = admin.rules_invalid.unwrap_or_default();
            problems.push(format!(
                "pod {}: {count} invalid rule{}",
                pod.name,
                if count == 1 { "" } else { "s" },
            ));
        }
        if !admin.source_errors.is_empty() {
            problems.push(format!(
                "pod {}: rule source errors: {}",
                pod.name,
                admin.source_errors.join("; ")
            ));
        }
        if admin.rules_loaded == Some(0) {
            warnings.push(format!(
                "pod {} has no rules loaded: it allows every edit",
                pod.name
            ));
        }
    }

    for (rule, pods) in invalid_rules(&report.pods) {
        problems.push(format!(
            "invalid rule {} (pod {}): {}",
            rule.rule,
            pods.join(", "),
            rule.message
        ));
    }

    let export_on: Vec<&str> = report
        .pods
        .iter()
        .filter(|p| {
            p.admin
                .as_ref()
                .is_some_and(|a| a.export_enabled == Some(true))
        })
        .map(|p| p.pod.name.as_str())
        .collect();
    let connection = &report.connection;
    let connection_name = format!("{}/{}", report.namespace, connection.name);
    if !connection.found {
        if !export_on.is_empty() {
            problems.push(format!(
                "Connection {connection_name} not found, but export is enabled on pod {}",
                export_on.join(", ")
            ));
        } else {
            warnings.push(format!(
                "Connection {connection_name} not found (export is not enabled on the agent pods read; see --connection)"
            ));
        }
    }
    for entry in &connection.by_pod {
        if !entry.pod_found {
            continue;
        }
        if !entry.connection_errors.is_empty() {
            problems.push(format!(
                "pod {}: Connection errors: {}",
                entry.pod,
                entry.connection_errors.join("; ")
            ));
        }
        for source in &entry.sources {
            match source.state {
                SourceState::Ok => {}
                // Flagged, not failed: the agent writes its entry only when it has something to
                // publish, so a quiet cluster looks like this too.
                SourceState::Idle => warnings.push(format!(
                    "pod {} source {}: stale: last success {} (more than {} minutes ago) and no publish attempt since — nothing to export, or the pod stopped reporting",
                    entry.pod,
                    source.source,
                    ago(source.last_success_time.as_deref(), now),
                    STALE_AFTER.as_secs() / 60,
                )),
                SourceState::Stale => problems.push(format!(
                    "pod {} source {}: stale: last success {} (more than {} minutes ago), last attempt {}",
                    entry.pod,
                    source.source,
                    ago(source.last_success_time.as_deref(), now),
                    STALE_AFTER.as_secs() / 60,
                    ago(source.last_attempt_time.as_deref(), now),
                )),
                SourceState::Errors => problems.push(format!(
                    "pod {} source {}: {} publish error{}: {}",
                    entry.pod,
                    source.source,
                    source.errors.len(),
                    if source.errors.len() == 1 { "" } else { "s" },
                    source.errors.join("; ")
                )),
            }
        }
    }
    let found: BTreeSet<&str> = connection.by_pod.iter().map(|e| e.pod.as_str()).collect();
    if connection.found {
        for name in &export_on {
            if !found.contains(name) {
                warnings.push(format!(
                    "pod {name} has no entry in the status of Connection {connection_name} yet"
                ));
            }
        }
    }

    if report.webhook_configurations.is_empty() {
        problems.push(match &args.webhook {
            Some(name) => format!("ValidatingWebhookConfiguration {name} not found"),
            None => format!(
                "no ValidatingWebhookConfiguration of Drift Sentinel found (labelled {CHART_LABEL}, or with a webhook named {}); name it with --webhook",
                crate::WEBHOOK_NAME
            ),
        });
    }
    for configuration in &report.webhook_configurations {
        for webhook in &configuration.webhooks {
            let which = format!("webhook {} of {}", webhook.name, configuration.name);
            if !webhook.ca_bundle && webhook.target.starts_with("service ") {
                problems.push(format!(
                    "{which} has no caBundle: the API server cannot verify the agent's certificate"
                ));
            }
            if webhook.intercepts_agent_namespace {
                warnings.push(format!(
                    "{which} may intercept the agent's own namespace {} (namespaceSelector: {})",
                    report.namespace, webhook.namespace_selector_text
                ));
            }
        }
    }
    report.healthy = problems.is_empty();
    report.problems = problems;
    report.warnings = warnings;
}

/// Columns separated by two spaces, each as wide as its widest cell.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let last = cells.len().saturating_sub(1);
        let mut text = String::new();
        for (i, cell) in cells.into_iter().enumerate() {
            text.push_str(&cell);
            if i < last {
                let pad = widths[i] - cell.chars().count() + 2;
                text.push_str(&" ".repeat(pad));
            }
        }
        text.trim_end().to_owned() + "\n"
    };
    let mut out = line(header.iter().map(|h| (*h).to_owned()).collect());
    for row in rows {
        out.push_str(&line(row.clone()));
    }
    out
}

fn yes(value: bool) -> String {
    if value { "yes" } else { "no" }.to_owned()
}

fn text(report: &Report, now: SystemTime) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "Agent pods (namespace {}, selector {}):\n",
        report.namespace, report.selector
    ));
    if report.pods.is_empty() {
        out.push_str("  none\n");
    } else {
        let rows: Vec<Vec<String>> = report
            .pods
            .iter()
            .map(|p| {
                let admin = p.admin.as_ref();
                let number = |v: Option<u64>| v.map_or("-".to_owned(), |n| n.to_string());
                let reachable = admin.is_some_and(|a| a.reachable);
                vec![
                    p.pod.name.clone(),
                    yes(p.pod.ready),
                    if p.pod.deleting {
                        "Terminating".to_owned()
                    } else {
                        p.pod.phase.clone()
                    },
                    p.pod.restarts.to_string(),
                    p.pod
                        .created
                        .as_deref()
                        .and_then(|t| age(t, now))
                        .map_or("-".to_owned(), short_duration),
                    match admin {
                        None => "-".to_owned(),
                        Some(a) if !a.reachable => "unreachable".to_owned(),
                        Some(a) => match a.ready {
                            Some(true) => "ready".to_owned(),
                            Some(false) => "not ready".to_owned(),
                            None => "?".to_owned(),
                        },
                    },
                    number(admin.filter(|_| reachable).and_then(|a| a.rules_loaded)),
                    number(admin.filter(|_| reachable).and_then(|a| a.rules_invalid)),
                    match admin.and_then(|a| a.export_enabled) {
                        Some(true) => "on".to_owned(),
                        Some(false) => "off".to_owned(),
                        None => "-".to_owned(),
                    },
                ]
            })
            .collect();
        out.push_str(&table(
            &[
                "POD", "READY", "STATUS", "RESTARTS", "AGE", "AGENT", "RULES", "INVALID", "EXPORT",
            ],
            &rows,
        ));
    }
    let invalid = invalid_rules(&report.pods);
    if !invalid.is_empty() {
        out.push_str("\nInvalid rules:\n");
        for (rule, pods) in invalid {
            out.push_str(&format!(
                "  {} (pod {}): {}\n",
                rule.rule,
                pods.join(", "),
                rule.message
            ));
        }
    }

    let connection = &report.connection;
    out.push_str(&format!(
        "\nConnection {}/{}",
        report.namespace, connection.name
    ));
    if !connection.found {
        out.push_str(": not found\n");
    } else if connection.by_pod.is_empty() {
        out.push_str(": no status by pod yet\n");
    } else {
        out.push_str(", status by pod:\n");
        let mut rows = Vec::new();
        for entry in &connection.by_pod {
            let pod = if entry.pod_found {
                entry.pod.clone()
            } else {
                format!("{} (gone)", entry.pod)
            };
            if entry.sources.is_empty() {
                rows.push(vec![
                    pod.clone(),
                    "-".into(),
                    "-".into(),
                    "never".into(),
                    "never".into(),
                    entry.connection_errors.len().to_string(),
                    if entry.connection_errors.is_empty() {
                        "no publish yet".into()
                    } else {
                        "CONNECTION ERRORS".into()
                    },
                ]);
            }
            for source in &entry.sources {
                let state = match (source.state, entry.pod_found) {
                    (_, false) => "-".to_owned(),
                    (SourceState::Ok, _) => "ok".to_owned(),
                    (SourceState::Idle, _) => "stale (idle)".to_owned(),
                    (SourceState::Stale, _) => "STALE".to_owned(),
                    (SourceState::Errors, _) => "ERRORS".to_owned(),
                };
                rows.push(vec![
                    pod.clone(),
                    source.source.clone(),
                    source.active.to_string(),
                    ago(source.last_attempt_time.as_deref(), now),
                    ago(source.last_success_time.as_deref(), now),
                    (source.errors.len() + entry.connection_errors.len()).to_string(),
                    state,
                ]);
            }
        }
        out.push_str(&table(
            &[
                "POD",
                "SOURCE",
                "ACTIVE",
                "LAST ATTEMPT",
                "LAST SUCCESS",
                "ERRORS",
                "STATE",
            ],
            &rows,
        ));
    }

    if report.webhook_configurations.is_empty() {
        out.push_str("\nValidatingWebhookConfiguration: none found\n");
    }
    for configuration in &report.webhook_configurations {
        out.push_str(&format!(
            "\nValidatingWebhookConfiguration {}:\n",
            configuration.name
        ));
        let rows: Vec<Vec<String>> = configuration
            .webhooks
            .iter()
            .map(|w| {
                vec![
                    w.name.clone(),
                    if w.ca_bundle { "present" } else { "MISSING" }.to_owned(),
                    w.failure_policy.clone(),
                    w.target.clone(),
                    w.namespace_selector_text.clone(),
                ]
            })
            .collect();
        out.push_str(&table(
            &[
                "WEBHOOK",
                "CABUNDLE",
                "FAILURE POLICY",
                "CALLS",
                "NAMESPACE SELECTOR",
            ],
            &rows,
        ));
    }

    if !report.warnings.is_empty() {
        out.push_str("\nWarnings:\n");
        for warning in &report.warnings {
            out.push_str(&format!("  - {warning}\n"));
        }
    }
    if report.healthy {
        out.push_str("\nHealthy.\n");
    } else {
        out.push_str(&format!(
            "\nUnhealthy ({} problem{}):\n",
            report.problems.len(),
            if report.problems.len() == 1 { "" } else { "s" }
        ));
        for problem in &report.problems {
            out.push_str(&format!("  - {problem}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t(text: &str) -> SystemTime {
        humantime::parse_rfc3339(text).unwrap()
    }

    #[test]
    fn stale_idle_and_errors() {
        let now = t("2027-01-15T08:10:00Z");
        let state = |active, attempt: Option<&str>, success: Option<&str>, errors: &[&str]| {
            let errors: Vec<String> = errors.iter().map(|e| (*e).to_owned()).collect();
            source_state(active, attempt, success, &errors, now)
        };
        let recent = Some("2027-01-15T08:09:30Z");
        let old = Some("2027-01-15T08:00:00Z");
        assert_eq!(state(true, recent, recent, &[]), SourceState::Ok);
        // Exactly 2 minutes is not yet stale.
        let two = Some("2027-01-15T08:08:00Z");
        assert_eq!(state(false, two, two, &[]), SourceState::Ok);
        assert_eq!(state(false, recent, old, &[]), SourceState::Stale);
        assert_eq!(state(true, recent, old, &[]), SourceState::Stale);
        assert_eq!(state(false, old, old, &[]), SourceState::Stale);
        assert_eq!(state(false, recent, None, &[]), SourceState::Stale);
        // Nothing attempted since a success long ago: nothing to export, not stale.
        assert_eq!(state(true, old, old, &[]), SourceState::Idle);
        assert_eq!(state(true, recent, recent, &["boom"]), SourceState::Errors);
        assert_eq!(state(false, None, None, &[]), SourceState::Ok);
    }

    fn selector(value: Value) -> LabelSelector {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn namespace_selectors() {
        let chart = selector(json!({"matchExpressions": [
            {"key": "drift-sentinel.k8s.io/enabled", "operator": "NotIn", "values": ["false"]},
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
             "values": ["drift-sentinel", "kube-system"]}]}));
        assert_eq!(
            selector_text(Some(&chart)),
            "drift-sentinel.k8s.io/enabled notin (false), kubernetes.io/metadata.name notin (drift-sentinel,kube-system)"
        );
        assert!(!selects_namespace(Some(&chart), "drift-sentinel"));
        assert!(selects_namespace(Some(&chart), "prod"));
        assert!(selects_namespace(None, "drift-sentinel"));
        assert_eq!(selector_text(None), "(all namespaces)");
        let labels = selector(json!({"matchLabels": {"team": "a"},
            "matchExpressions": [{"key": "x", "operator": "Exists"}]}));
        assert_eq!(selector_text(Some(&labels)), "team=a, x");
        assert!(!selects_namespace(Some(&labels), "drift-sentinel"));
    }

    #[test]
    fn durations_as_kubectl_writes_them() {
        let d = Duration::from_secs;
        assert_eq!(short_duration(d(45)), "45s");
        assert_eq!(short_duration(d(119)), "119s");
        assert_eq!(short_duration(d(600)), "10m");
        assert_eq!(short_duration(d(3600 + 300)), "1h5m");
        assert_eq!(short_duration(d(10 * 3600)), "10h");
        assert_eq!(short_duration(d(3 * 86400)), "3d");
    }

    #[test]
    fn tables_align_columns() {
        let text = table(
            &["POD", "READY"],
            &[
                vec!["agent-long-name".into(), "yes".into()],
                vec!["a".into(), "no".into()],
            ],
        );
        assert_eq!(
            text,
            "POD              READY\nagent-long-name  yes\na                no\n"
        );
    }

    #[test]
    fn admin_status_documents() {
        let document: AgentStatus = serde_json::from_value(json!({
            "ready": true, "source": {"kind": "cluster"}, "loadedAt": "2026-07-28T12:00:00Z",
            "rulesLoaded": 2, "rulesInvalid": 1,
            "invalidRules": [{"rule": "ops/broken", "namespace": "ops", "name": "broken",
                              "reason": "unknown field `mdoe`",
                              "message": "ops/broken: unknown field `mdoe`"}],
            "sourceErrors": [{"source": "rules/x.yaml", "line": 3, "column": 1, "reason": "bad"}],
            "namespacesKnown": 1, "export": {"enabled": true}
        }))
        .unwrap();
        let report = admin_report(&document);
        // Source errors are shown as their text, not as JSON.
        assert_eq!(report.source_errors, ["rules/x.yaml: line 3 column 1: bad"]);
        assert!(report.reachable);
        assert_eq!(report.rules_loaded, Some(2));
        assert_eq!(report.rules_invalid, Some(1));
        assert_eq!(
            report.invalid_rules,
            [InvalidRule {
                rule: "ops/broken".into(),
                message: "ops/broken: unknown field `mdoe`".into()
            }]
        );
        assert_eq!(report.export_enabled, Some(true));
    }
}
