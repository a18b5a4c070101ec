//! Unit tests of `health` (a file of their own, to keep the module's code short).

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
            "namespacesKnown": 1, "export": {"enabled": true}
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
}

fn pod(name: &str, ready: bool) -> crate::cluster::pods::AgentPod {
    crate::cluster::pods::AgentPod {
        name: name.into(),
        phase: "Running".into(),
        ready,
        restarts: 0,
        created: None,
        deleting: false,
        node: None,
    }
}

fn plan() -> Status {
    Status {
        kube: crate::plan::Kube::default(),
        agents: crate::plan::Agents {
            namespace: "drift-sentinel".into(),
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
        audit_admins: vec![Some(Ok((
            200,
            serde_json::to_vec(&json!({
                "ready": true, "source": {"kind": "cluster"}, "loadedAt": "2027-01-15T08:00:00Z",
                "rulesLoaded": 1, "rulesInvalid": 0, "namespacesKnown": 1,
                "export": {"enabled": false}, "auditIntervalSeconds": 60.0,
                "audit": {"id": "2027-01-15T08:09:30Z", "start": "2027-01-15T08:09:30Z",
                    "durationSeconds": 0.5, "lastCompleted": "2027-01-15T08:09:30Z",
                    "counts": {"drifted": 1, "clean": 2, "noBaseline": 0, "skipped": 0}}
            }))
            .unwrap(),
        )))],
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
