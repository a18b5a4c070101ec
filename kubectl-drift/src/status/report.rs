//! What `status` found: the [`Report`], as `-o json|yaml` prints it, and the rules the pods
//! report, each with the pods that report it (for the findings and the text).

use drift_api::status::{InvalidRule, LoadedRule, StaleRule};
use serde::{Serialize, Serializer};
use serde_json::{Value, json};

use super::audit::AuditReport;
use crate::cluster::pods::AgentPod;

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
    pub audit: AuditReport,
}

impl Report {
    /// The agent pods read whose admin API says violation export is on: the ones that need
    /// the Connection.
    pub fn exporting_pods(&self) -> impl Iterator<Item = &str> {
        self.pods
            .iter()
            .filter(|p| {
                p.admin
                    .as_ref()
                    .is_some_and(|a| a.export_enabled == Some(true))
            })
            .map(|p| p.pod.name.as_str())
    }
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
    /// Shown by their rule and message ([`shown_invalid`]).
    #[serde(serialize_with = "shown_invalid")]
    pub invalid_rules: Vec<InvalidRule>,
    /// The rules in force, each with its tier ([`shown_loaded`]).
    #[serde(serialize_with = "shown_loaded")]
    pub rules: Vec<LoadedRule>,
    /// Rules served in their last valid version: their ConfigMap now holds an invalid one.
    pub stale_rules: Vec<StaleRule>,
    /// The agent's cluster rule namespaces (`["*"]`: every rule is a cluster rule); `None` from
    /// an agent that does not report them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_rule_namespaces: Option<Vec<String>>,
    pub source_errors: Vec<String>,
    pub export_enabled: Option<bool>,
    /// Whether the webhook signs its records and has published its public key (reference §8
    /// "Trust"); `None` from an agent that does not say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record_signing: Option<drift_api::status::RecordSigning>,
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

/// The invalid rules that the pods report, each with the pods that report it, in order (the
/// same rule with another message is listed twice).
pub(super) fn invalid_rules(pods: &[PodReport]) -> Vec<(&InvalidRule, Vec<&str>)> {
    grouped(pods, |a| &a.invalid_rules, |r| (&r.rule, &r.message))
}

/// The rules the pods serve, each with the pods that serve it, in order (the same rule served
/// differently by two pods — another tier, mode or priority — is listed twice).
pub(super) fn loaded_rules(pods: &[PodReport]) -> Vec<(&LoadedRule, Vec<&str>)> {
    grouped(
        pods,
        |a| &a.rules,
        |r| (&r.rule, &r.tier, &r.mode, r.priority),
    )
}

/// The stale rules that the pods report, each with the pods that report it, in order.
pub(super) fn stale_rules(pods: &[PodReport]) -> Vec<(&StaleRule, Vec<&str>)> {
    grouped(pods, |a| &a.stale_rules, |r| r)
}

/// The items of every pod's admin report, each with the pods that report it, in order; items
/// with the same `key` are one.
fn grouped<'p, T, K: PartialEq>(
    pods: &'p [PodReport],
    items: impl Fn(&'p AdminReport) -> &'p [T],
    key: impl Fn(&'p T) -> K,
) -> Vec<(&'p T, Vec<&'p str>)> {
    let mut found: Vec<(&T, Vec<&str>)> = Vec::new();
    for p in pods {
        for item in p.admin.iter().flat_map(|a| items(a).iter()) {
            match found.iter_mut().find(|(i, _)| key(i) == key(item)) {
                Some((_, names)) => names.push(&p.pod.name),
                None => found.push((item, vec![&p.pod.name])),
            }
        }
    }
    found
}

/// What a stale rule is, in one line.
pub(super) fn stale_text(stale: &StaleRule) -> String {
    let since = stale
        .since
        .as_deref()
        .map(|s| format!(" since {s}"))
        .unwrap_or_default();
    format!(
        "its last valid version (resourceVersion {}) is served{since}, not the current {}: {}",
        stale.served_resource_version, stale.resource_version, stale.reason
    )
}

/// The invalid rules of a pod as `status -o json|yaml` shows them: the rule and the message.
fn shown_invalid<S: Serializer>(rules: &[InvalidRule], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(
        rules
            .iter()
            .map(|r| json!({"rule": r.rule, "message": r.message})),
    )
}

/// The rules a pod serves as `status -o json|yaml` shows them: the rule, its tier, mode and
/// priority.
fn shown_loaded<S: Serializer>(rules: &[LoadedRule], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(
        rules.iter().map(
            |r| json!({"rule": r.rule, "tier": r.tier, "mode": r.mode, "priority": r.priority}),
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rules_of_an_admin_report_are_shown_by_what_status_names() {
        let admin = AdminReport {
            reachable: true,
            invalid_rules: vec![InvalidRule {
                rule: "ops/broken".into(),
                namespace: "ops".into(),
                name: "broken".into(),
                origin: Some("configmap ops/broken".into()),
                field: Some("mdoe".into()),
                line: Some(3),
                column: Some(1),
                reason: "unknown field `mdoe`".into(),
                message: "ops/broken: unknown field `mdoe`".into(),
            }],
            rules: vec![LoadedRule {
                rule: "team-a/own".into(),
                mode: "warn".into(),
                priority: 0,
                tier: "namespace".into(),
                origin: Some("configmap team-a/own".into()),
            }],
            stale_rules: vec![StaleRule {
                rule: "ops/platform".into(),
                reason: "bad".into(),
                since: None,
                served_resource_version: "7".into(),
                resource_version: "9".into(),
            }],
            ..AdminReport::default()
        };
        assert_eq!(
            serde_json::to_string(&admin).unwrap(),
            concat!(
                r#"{"reachable":true,"ready":null,"rulesLoaded":null,"rulesInvalid":null,"#,
                r#""invalidRules":[{"rule":"ops/broken","message":"ops/broken: unknown field `mdoe`"}],"#,
                r#""rules":[{"rule":"team-a/own","tier":"namespace","mode":"warn","priority":0}],"#,
                r#""staleRules":[{"rule":"ops/platform","reason":"bad","servedResourceVersion":"7","resourceVersion":"9"}],"#,
                r#""sourceErrors":[],"exportEnabled":null}"#
            )
        );
    }
}
