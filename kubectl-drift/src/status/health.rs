//! What is healthy, stale or a problem: the [`Report`] made of the [`Facts`] `status` read.
//! Pure: no I/O, the time given — tested without a cluster.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use drift_api::Connection;
use drift_api::status::AgentStatus;
use drift_api::violation::parse_rfc3339;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingWebhook, ValidatingWebhookConfiguration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;

use super::fetch::{AdminAnswer, CHART_LABEL, Facts};
use super::report::{
    AdminReport, ConnectionReport, PodEntry, PodReport, Report, SourceEntry, SourceState,
    WebhookConfigReport, WebhookReport, invalid_rules, stale_rules, stale_text,
};
use super::time::ago;
use crate::plan::Status;

/// A source whose last success is older than this is stale (when it has been attempted since).
pub(super) const STALE_AFTER: Duration = Duration::from_secs(120);

/// The report of what was read, as of `now`.
pub(super) fn report_of(facts: Facts, plan: &Status, now: SystemTime) -> Report {
    let agents = facts.agents.clone();
    let port = agents.port;
    let pods: Vec<PodReport> = facts
        .pods
        .into_iter()
        .zip(facts.admins)
        .map(|(pod, answer)| PodReport {
            pod,
            admin: answer.map(|a| admin_answer(a, port)),
        })
        .collect();
    let connection = connection_report(&plan.connection, facts.connection.as_ref(), &pods, now);
    let webhook_configurations = facts
        .webhook_configurations
        .iter()
        .map(|c| webhook_report(c, &agents.namespace))
        .collect();
    let (audit, audit_problems, audit_warnings) = super::audit::audit_health(
        &plan.audit_selector,
        &agents.namespace,
        facts.audit_pods,
        facts.audit_admins,
        now,
    );
    let mut report = Report {
        namespace: agents.namespace.clone(),
        selector: agents.selector.clone(),
        healthy: true,
        problems: Vec::new(),
        warnings: Vec::new(),
        pods,
        connection,
        webhook_configurations,
        audit,
    };
    let mut findings = Findings::default();
    pod_findings(&report, port, &mut findings);
    connection_findings(&report, now, &mut findings);
    webhook_findings(&report, plan.webhook.as_deref(), &mut findings);
    findings.problems.extend(audit_problems);
    findings.warnings.extend(audit_warnings);
    report.healthy = findings.problems.is_empty();
    report.problems = findings.problems;
    report.warnings = findings.warnings;
    report
}

/// What is wrong (each makes the exit code 1), and what is worth knowing.
#[derive(Default)]
struct Findings {
    problems: Vec<String>,
    warnings: Vec<String>,
}

/// A pod's admin answer: its `/status` document, or why it could not be read.
fn admin_answer(answer: AdminAnswer, port: u16) -> AdminReport {
    let unreachable = |error: String| AdminReport {
        reachable: false,
        error: Some(error),
        ..AdminReport::default()
    };
    let (status, body) = match answer {
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
    match serde_json::from_slice::<AgentStatus>(&body) {
        Ok(document) => admin_report(&document),
        Err(e) => unreachable(format!(
            "GET /status did not answer the agent's status document ({e}) (is port {port} the agent's admin port? see --admin-port)"
        )),
    }
}

fn admin_report(document: &AgentStatus) -> AdminReport {
    AdminReport {
        reachable: true,
        error: None,
        ready: Some(document.ready),
        rules_loaded: Some(document.rules_loaded as u64),
        rules_invalid: Some(document.rules_invalid as u64),
        invalid_rules: document.invalid_rules.clone(),
        rules: document.rules.clone(),
        stale_rules: document.stale_rules.clone(),
        cluster_rule_namespaces: document.cluster_rule_namespaces.clone(),
        // Each error's text, as the agent's log gives it: file, line and column, reason.
        source_errors: document
            .source_errors
            .iter()
            .map(ToString::to_string)
            .collect(),
        export_enabled: Some(document.export.enabled),
        record_signing: document.record_signing.clone(),
    }
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
    let parse = |t: Option<&str>| t.and_then(parse_rfc3339);
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

fn connection_report(
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

/// The pods: readiness, admin API, rules.
fn pod_findings(report: &Report, port: u16, found: &mut Findings) {
    let Findings { problems, warnings } = found;
    if report.pods.is_empty() {
        problems.push(format!(
            "no agent pods in namespace {} match the selector {} (see --agent-namespace, --selector)",
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
        if let Some(concern) = admin.record_signing.as_ref().and_then(|s| s.concern(false)) {
            warnings.push(format!("pod {}: {concern}", pod.name));
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
    // Still enforced, but not as its ConfigMap now says: fix or delete it.
    for (stale, pods) in stale_rules(&report.pods) {
        problems.push(format!(
            "stale rule {} (pod {}): {}",
            stale.rule,
            pods.join(", "),
            stale_text(stale)
        ));
    }
}

/// The Connection: found when export is on, each current pod's entry and sources.
fn connection_findings(report: &Report, now: SystemTime, found: &mut Findings) {
    let export_on: Vec<&str> = report.exporting_pods().collect();
    let connection = &report.connection;
    let connection_name = format!("{}/{}", report.namespace, connection.name);
    // Without export nothing needs a Connection (the chart renders none): its absence is
    // shown, not flagged.
    if !connection.found && !export_on.is_empty() {
        found.problems.push(format!(
            "Connection {connection_name} not found, but export is enabled on pod {}",
            export_on.join(", ")
        ));
    }
    for entry in connection.by_pod.iter().filter(|e| e.pod_found) {
        if !entry.connection_errors.is_empty() {
            found.problems.push(format!(
                "pod {}: Connection errors: {}",
                entry.pod,
                entry.connection_errors.join("; ")
            ));
        }
        for source in &entry.sources {
            source_finding(&entry.pod, source, now, found);
        }
    }
    let entries: BTreeSet<&str> = connection.by_pod.iter().map(|e| e.pod.as_str()).collect();
    if connection.found {
        for name in export_on.iter().filter(|name| !entries.contains(*name)) {
            found.warnings.push(format!(
                "pod {name} has no entry in the status of Connection {connection_name} yet"
            ));
        }
    }
}

/// One source of one pod's Connection entry.
fn source_finding(pod: &str, source: &SourceEntry, now: SystemTime, found: &mut Findings) {
    let minutes = STALE_AFTER.as_secs() / 60;
    let success = ago(source.last_success_time.as_deref(), now);
    match source.state {
        SourceState::Ok => {}
        // Flagged, not failed: the agent writes its entry only when it has something to
        // publish, so a quiet cluster looks like this too.
        SourceState::Idle => found.warnings.push(format!(
            "pod {pod} source {}: stale: last success {success} (more than {minutes} minutes ago) and no publish attempt since — nothing to export, or the pod stopped reporting",
            source.source,
        )),
        SourceState::Stale => found.problems.push(format!(
            "pod {pod} source {}: stale: last success {success} (more than {minutes} minutes ago), last attempt {}",
            source.source,
            ago(source.last_attempt_time.as_deref(), now),
        )),
        SourceState::Errors => found.problems.push(format!(
            "pod {pod} source {}: {} publish error{}: {}",
            source.source,
            source.errors.len(),
            if source.errors.len() == 1 { "" } else { "s" },
            source.errors.join("; ")
        )),
    }
}

/// The webhook configurations: found, caBundle, the agent's own namespace left alone.
fn webhook_findings(report: &Report, named: Option<&str>, found: &mut Findings) {
    if report.webhook_configurations.is_empty() {
        found.problems.push(match named {
            Some(name) => format!("ValidatingWebhookConfiguration {name} not found"),
            None => format!(
                "no ValidatingWebhookConfiguration of Drift Sentinel found (labelled {CHART_LABEL}, or with a webhook named {}); name it with --webhook",
                crate::verdict::WEBHOOK_NAME
            ),
        });
    }
    for configuration in &report.webhook_configurations {
        for webhook in &configuration.webhooks {
            let which = format!("webhook {} of {}", webhook.name, configuration.name);
            if !webhook.ca_bundle && webhook.target.starts_with("service ") {
                found.problems.push(format!(
                    "{which} has no caBundle: the API server cannot verify the agent's certificate"
                ));
            }
            // A lockout needs a webhook that fails closed there: one that would block updates
            // of the agent's own objects while no agent answers. `Ignore` (the chart's rule
            // webhook, which must see the rule ConfigMaps of that namespace) cannot.
            if webhook.intercepts_agent_namespace && webhook.failure_policy != "Ignore" {
                found.warnings.push(format!(
                    "{which} may intercept the agent's own namespace {} with failurePolicy {} (namespaceSelector: {}): while no agent answers, updates there are refused",
                    report.namespace, webhook.failure_policy, webhook.namespace_selector_text
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drift_api::status::{InvalidRule, LoadedRule};
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
    fn admin_status_documents() {
        let document: AgentStatus = serde_json::from_value(json!({
                "ready": true, "source": {"kind": "cluster"}, "loadedAt": "2026-07-28T12:00:00Z",
                "rulesLoaded": 2, "rulesInvalid": 1,
                "invalidRules": [{"rule": "ops/broken", "namespace": "ops", "name": "broken",
                                  "reason": "unknown field `mdoe`",
                                  "message": "ops/broken: unknown field `mdoe`"}],
                "sourceErrors": [{"source": "rules/x.yaml", "line": 3, "column": 1, "reason": "bad"}],
                "rules": [{"rule": "drift-sentinel/platform", "mode": "enforce", "priority": 10, "tier": "cluster"},
                          {"rule": "team-a/own", "mode": "warn", "priority": 0, "tier": "namespace"}],
                "staleRules": [{"rule": "drift-sentinel/platform", "reason": "unknown field `mutabel`",
                                "since": "2026-07-28T12:01:00Z", "servedResourceVersion": "7", "resourceVersion": "9"}],
                "clusterRuleNamespaces": ["drift-sentinel"],
                "namespacesKnown": 1, "export": {"enabled": true},
                "recordSigning": {"signed": true, "publicKey": {"state": "failing",
                    "configMap": "drift-system/drift-sentinel-record-key", "attempts": 2,
                    "lastError": "configmaps \"drift-sentinel-record-key\" is forbidden"}}
            }))
            .unwrap();
        let report = admin_report(&document);
        assert_eq!(
            report.rules[1],
            LoadedRule {
                rule: "team-a/own".into(),
                tier: "namespace".into(),
                mode: "warn".into(),
                priority: 0,
                origin: None,
            }
        );
        assert_eq!(report.stale_rules[0].served_resource_version, "7");
        assert_eq!(
            stale_text(&report.stale_rules[0]),
            "its last valid version (resourceVersion 7) is served since 2026-07-28T12:01:00Z, not the current 9: unknown field `mutabel`"
        );
        assert_eq!(
            report.cluster_rule_namespaces.as_deref(),
            Some(&["drift-sentinel".to_owned()][..])
        );
        // Source errors are shown as their text, not as JSON.
        assert_eq!(report.source_errors, ["rules/x.yaml: line 3 column 1: bad"]);
        assert!(report.reachable);
        assert_eq!(report.rules_loaded, Some(2));
        assert_eq!(report.rules_invalid, Some(1));
        assert_eq!(
            report.invalid_rules,
            [InvalidRule {
                rule: "ops/broken".into(),
                namespace: "ops".into(),
                name: "broken".into(),
                origin: None,
                field: None,
                line: None,
                column: None,
                reason: "unknown field `mdoe`".into(),
                message: "ops/broken: unknown field `mdoe`".into()
            }]
        );
        assert_eq!(report.export_enabled, Some(true));
        // The public key not published: said with the error.
        let concern = report
            .record_signing
            .as_ref()
            .and_then(|s| s.concern(false));
        assert!(
            concern.as_deref().is_some_and(|c| c.contains(
                "ConfigMap drift-system/drift-sentinel-record-key (2 attempts, retried): configmaps \"drift-sentinel-record-key\" is forbidden"
            )),
            "{concern:?}"
        );
    }

    use crate::cluster::pods::AgentPod;

    fn pod(name: &str, ready: bool) -> AgentPod {
        AgentPod::running(name, ready)
    }

    /// The audit pod's `/status`: a run every minute, the last completed at 08:09:30 with
    /// `drifted` drifted objects.
    fn audit_status(drifted: u32) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "ready": true, "source": {"kind": "cluster"}, "loadedAt": "2027-01-15T08:00:00Z",
            "rulesLoaded": 1, "rulesInvalid": 0, "namespacesKnown": 1,
            "export": {"enabled": false}, "auditIntervalSeconds": 60.0,
            "audit": {"id": "2027-01-15T08:09:30Z", "start": "2027-01-15T08:09:30Z",
                "durationSeconds": 0.5, "lastCompleted": "2027-01-15T08:09:30Z",
                "counts": {"drifted": drifted, "clean": 2, "noBaseline": 0, "skipped": 0}}
        }))
        .unwrap()
    }

    fn plan() -> Status {
        Status {
            kube: crate::plan::Kube::default(),
            agents: crate::plan::Agents {
                namespace: None,
                selector: "app=agent".into(),
                port: 9090,
            },
            audit_selector: "app=audit".into(),
            connection: "audit-connection".into(),
            webhook: None,
        }
    }

    /// The whole judgement of what was read, without a cluster.
    #[test]
    fn facts_become_problems_and_warnings() {
        use crate::cluster::forward::ForwardError;
        let now = t("2027-01-15T08:10:00Z");
        let status = |ready: bool, invalid: usize| {
            serde_json::to_vec(&json!({
                "ready": ready, "source": {"kind": "cluster"}, "loadedAt": "2027-01-15T08:00:00Z",
                "rulesLoaded": 1, "rulesInvalid": invalid, "namespacesKnown": 1,
                "export": {"enabled": true}
            }))
            .unwrap()
        };
        let connection: Connection = serde_json::from_value(json!({
                "apiVersion": "connection.drift-sentinel.io/v1alpha1", "kind": "Connection",
                "metadata": {"name": "audit-connection", "namespace": "drift-sentinel"},
                "spec": {"driver": "disk", "config": {"path": "tmp/violations/topics"}},
                "status": {"byPod": [
                    {"id": "a", "publishStatuses": [{"source": "webhook", "active": true,
                        "lastAttemptTime": "2027-01-15T08:09:00Z", "lastSuccessTime": "2027-01-15T08:00:00Z"}]},
                    {"id": "gone", "publishStatuses": [{"source": "webhook", "active": false,
                        "lastAttemptTime": "2027-01-15T07:00:00Z"}]}]}
            }))
            .unwrap();
        let facts = Facts {
            agents: crate::cluster::pods::Located {
                namespace: "drift-sentinel".into(),
                selector: "app=agent".into(),
                port: 9090,
            },
            pods: vec![
                pod("a", true),
                pod("b", false),
                pod("c", true),
                pod("d", true),
            ],
            admins: vec![
                Some(Ok((200, status(true, 0)))),
                Some(Ok((200, status(false, 2)))),
                Some(Err(ForwardError::Http(
                    "the admin API's answer: invalid chunk size".into(),
                ))),
                Some(Ok((404, b"404 page not found\n".to_vec()))),
            ],
            connection: Some(connection),
            webhook_configurations: Vec::new(),
            // An audit that completed 30 s ago, every minute: healthy, nothing said.
            audit_pods: vec![pod("audit-0", true)],
            audit_admins: vec![Some(Ok((200, audit_status(1))))],
        };
        let report = report_of(facts, &plan(), now);
        assert!(!report.healthy);
        let problems = report.problems.join("\n");
        for expected in [
            "pod b is not ready (phase Running)",
            "pod b: the agent is not ready (its rules are not synced)",
            "pod b: 2 invalid rules",
            "pod c: cannot read the admin API (port 9090) through port-forwarding: the admin API's answer: invalid chunk size",
            "pod d: cannot read the admin API (port 9090) through port-forwarding: GET /status answered HTTP 404: 404 page not found (is port 9090 the agent's admin port? see --admin-port)",
            "pod a source webhook: stale: last success 10m ago (more than 2 minutes ago), last attempt 60s ago",
            "no ValidatingWebhookConfiguration of Drift Sentinel found",
        ] {
            assert!(problems.contains(expected), "{expected:?} in\n{problems}");
        }
        // The entry of a pod that is gone is shown, not judged.
        assert!(!problems.contains("gone"), "{problems}");
        assert_eq!(
            report.warnings,
            ["pod b has no entry in the status of Connection drift-sentinel/audit-connection yet"]
        );
        assert_eq!(
            report.connection.by_pod[0].sources[0].state,
            SourceState::Stale
        );
        assert!(!report.connection.by_pod[1].pod_found);
    }

    /// The chart's defaults (issue 42): export off and no Connection; the admission webhook
    /// leaves the agent's namespace alone, the rule webhook (`Ignore`) sees the rule ConfigMaps
    /// there. Nothing to warn about. A webhook that fails closed in that namespace is.
    #[test]
    fn a_default_install_reads_clean() {
        let now = t("2027-01-15T08:10:00Z");
        let webhook = |name: &str, policy: &str, selector: Value| {
            json!({"name": name, "failurePolicy": policy, "sideEffects": "None",
                "admissionReviewVersions": ["v1"], "namespaceSelector": selector,
                "clientConfig": {"caBundle": "Y2E=", "service":
                    {"name": "drift-sentinel", "namespace": "drift-sentinel", "path": "/validate"}}})
        };
        let configuration = |rule_policy: &str| -> ValidatingWebhookConfiguration {
            serde_json::from_value(json!({
                "metadata": {"name": "drift-sentinel"},
                "webhooks": [
                    webhook("validate.drift-sentinel.k8s.io", "Fail", json!({"matchExpressions": [
                        {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                         "values": ["drift-sentinel", "kube-system"]}]})),
                    webhook("rules.drift-sentinel.k8s.io", rule_policy, json!({}))]
            }))
            .unwrap()
        };
        let facts = |rule_policy: &str| {
            Facts {
            agents: crate::cluster::pods::Located {
                namespace: "drift-sentinel".into(),
                selector: "app=agent".into(),
                port: 9090,
            },
            pods: vec![pod("a", true)],
            admins: vec![Some(Ok((
                200,
                serde_json::to_vec(&json!({
                    "ready": true, "source": {"kind": "cluster"}, "loadedAt": "2027-01-15T08:00:00Z",
                    "rulesLoaded": 1, "rulesInvalid": 0, "namespacesKnown": 1,
                    "export": {"enabled": false}
                }))
                .unwrap(),
            )))],
            connection: None,
            webhook_configurations: vec![configuration(rule_policy)],
            audit_pods: vec![pod("audit-0", true)],
            audit_admins: vec![Some(Ok((
                200,
                audit_status(0),
            )))],
        }
        };
        let report = report_of(facts("Ignore"), &plan(), now);
        assert!(!report.connection.found);
        assert_eq!(
            (report.problems.as_slice(), report.warnings.as_slice()),
            (&[][..], &[][..]),
            "{report:#?}"
        );
        assert!(report.healthy);

        let report = report_of(facts("Fail"), &plan(), now);
        assert!(
            report.warnings.iter().any(|w| w
                == "webhook rules.drift-sentinel.k8s.io of drift-sentinel may intercept the agent's own namespace drift-sentinel with failurePolicy Fail (namespaceSelector: (all namespaces)): while no agent answers, updates there are refused"),
            "{:#?}",
            report.warnings
        );
    }
}
