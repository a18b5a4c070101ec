//! The admission violation record (SPEC §7): one JSON object per violation, written as one line
//! of an admission segment. Every field is documented in `docs/export.md`; a test pins the
//! field set, so a change here is a change of the export format.

use std::time::SystemTime;

use drift_engine::rule::Mode;
use drift_engine::{AdmissionRequest, Decision};
use serde::Serialize;
use serde_json::{Map, Value};

/// `eventType` of admission records.
pub const ADMISSION_EVENT: &str = "violation_admission";
/// Values in `details.changes` are cut to this many characters.
pub const MAX_CHANGE_VALUE_CHARS: usize = 256;

/// An admission violation, borrowing from the request and the decision.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRecord<'a> {
    pub event_type: &'static str,
    /// The admission request's uid.
    pub id: &'a str,
    /// When the request was judged (RFC 3339, UTC, microseconds).
    pub timestamp: String,
    pub operation: &'a str,
    pub dry_run: bool,
    pub user_name: &'a str,
    #[serde(rename = "userUID")]
    pub user_uid: &'a str,
    pub user_groups: &'a [String],
    /// The resource's plural name (`deployments`).
    pub resource: &'a str,
    /// `scale`, or empty.
    pub sub_resource: &'a str,
    #[serde(rename = "resourceAPIVersion")]
    pub resource_api_version: String,
    pub resource_kind: &'a str,
    pub resource_namespace: &'a str,
    pub resource_name: &'a str,
    /// Labels of the object after the change (before it, when the request has no new object).
    pub resource_labels: &'a Map<String, Value>,
    pub rule_name: &'a str,
    pub rule_namespace: &'a str,
    /// The effective mode: `enforce`, `warn` or `dry-run`.
    pub mode: &'static str,
    /// What the webhook did: `deny`, `warn` or `dryrun`.
    pub enforcement_action: &'static str,
    /// The message the webhook returned, warned or logged.
    pub message: String,
    pub details: Details<'a>,
}

/// The changed paths of the violation.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Details<'a> {
    /// Uncovered paths, byte order, without repeats.
    pub denied_paths: &'a [String],
    /// Every changed path (covered or not), byte order.
    pub changed_paths: Vec<&'a str>,
    /// Each denied path with its old and new value.
    pub changes: Vec<ChangeValues<'a>>,
}

/// One denied path's values as compact JSON text, cut to [`MAX_CHANGE_VALUE_CHARS`]
/// characters (the last being `…` when cut); `null` when that side is absent.
#[derive(Debug, Serialize)]
pub struct ChangeValues<'a> {
    pub path: &'a str,
    pub old: Option<String>,
    pub new: Option<String>,
}

fn enforcement_action(mode: Mode) -> Option<&'static str> {
    match mode {
        Mode::Enforce => Some("deny"),
        Mode::Warn => Some("warn"),
        Mode::DryRun => Some("dryrun"),
        Mode::Off => None,
    }
}

fn change_value(value: Option<&Value>) -> Option<String> {
    value.map(|v| drift_engine::decision::truncate_chars(&v.to_string(), MAX_CHANGE_VALUE_CHARS))
}

static NO_LABELS: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);

fn labels_of(request: &AdmissionRequest) -> &Map<String, Value> {
    request
        .object
        .as_ref()
        .or(request.old_object.as_ref())
        .and_then(|o| o.pointer("/metadata/labels"))
        .and_then(Value::as_object)
        .unwrap_or(&NO_LABELS)
}

impl<'a> AdmissionRecord<'a> {
    /// The record of a violating decision; `None` when the decision is not a violation an
    /// export records (no violation, or mode `off`).
    pub fn new(
        request: &'a AdmissionRequest,
        decision: &'a Decision<'a>,
        at: SystemTime,
    ) -> Option<Self> {
        if !decision.is_violation() {
            return None;
        }
        let mode = decision.mode?;
        let action = enforcement_action(mode)?;
        let rule = decision.rule?;
        let kind = &request.kind;
        let resource_api_version = if kind.group.is_empty() {
            kind.version.clone()
        } else {
            format!("{}/{}", kind.group, kind.version)
        };
        let changes = decision
            .changes
            .iter()
            .filter(|c| !c.mutable)
            .map(|c| ChangeValues {
                path: &c.path,
                old: change_value(c.change.old.as_deref()),
                new: change_value(c.change.new.as_deref()),
            })
            .collect();
        Some(Self {
            event_type: ADMISSION_EVENT,
            id: &request.uid,
            timestamp: humantime::format_rfc3339_micros(at).to_string(),
            operation: &request.operation,
            dry_run: request.dry_run.unwrap_or(false),
            user_name: &request.user_info.username,
            user_uid: &request.user_info.uid,
            user_groups: &request.user_info.groups,
            resource: &request.resource.resource,
            sub_resource: request.sub_resource(),
            resource_api_version,
            resource_kind: &kind.kind,
            resource_namespace: request.namespace(),
            resource_name: request.name(),
            resource_labels: labels_of(request),
            rule_name: &rule.id.name,
            rule_namespace: &rule.id.namespace,
            mode: mode.as_str(),
            enforcement_action: action,
            message: decision.status_message(),
            details: Details {
                denied_paths: &decision.denied_paths,
                changed_paths: decision.changes.iter().map(|c| c.path.as_str()).collect(),
                changes,
            },
        })
    }

    /// The record as one JSON line's content (no newline).
    pub fn encode(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drift_engine::review::parse_review;
    use drift_engine::{Context, RuleSet, decide};
    use serde_json::json;

    const RULE: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n  namespace: shop\n  annotations:\n    drift-sentinel.k8s.io/rule: \"true\"\ndata:\n  spec: |\n    namespaces: [\"*\"]\n    selectors:\n    - apiGroup: apps\n      kind: Deployment\n    mutable: [spec.replicas]\n    mode: MODE\n";

    fn rules(mode: &str) -> RuleSet {
        let text = RULE.replace("MODE", mode);
        let documents = drift_engine::manifests::parse_documents(&text, "rule.yaml").unwrap();
        RuleSet::build(drift_engine::manifests::rule_sources(
            &documents,
            "rule.yaml",
        ))
    }

    fn review(old_image: &str, new_image: &str) -> Value {
        let object = |image: &str| {
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"},
                    "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"huge\":true}"}},
                "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "web", "image": image}]}}}
            })
        };
        json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u-1", "operation": "UPDATE",
                "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
                "name": "web", "namespace": "shop",
                "userInfo": {"username": "alice", "uid": "a-1", "groups": ["dev", "system:authenticated"]},
                "object": object(new_image), "oldObject": object(old_image), "dryRun": false
            }
        })
    }

    fn record_of(mode: &str, old: &str, new: &str) -> Option<Value> {
        let rules = rules(mode);
        let body = review(old, new).to_string();
        let parsed = parse_review(body.as_bytes()).unwrap();
        let request = parsed.request.unwrap();
        let decision = decide(&rules, &request, &Context::default());
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_micros(1_800_000_000_000_001);
        AdmissionRecord::new(&request, &decision, at)
            .map(|r| serde_json::from_slice(&r.encode().unwrap()).unwrap())
    }

    #[test]
    fn a_denied_change_has_every_field() {
        let record = record_of("enforce", "web:1", "web:2").unwrap();
        let keys: Vec<&str> = record
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "eventType",
                "id",
                "timestamp",
                "operation",
                "dryRun",
                "userName",
                "userUID",
                "userGroups",
                "resource",
                "subResource",
                "resourceAPIVersion",
                "resourceKind",
                "resourceNamespace",
                "resourceName",
                "resourceLabels",
                "ruleName",
                "ruleNamespace",
                "mode",
                "enforcementAction",
                "message",
                "details"
            ]
        );
        assert_eq!(record["eventType"], "violation_admission");
        assert_eq!(record["id"], "u-1");
        assert_eq!(record["timestamp"], "2027-01-15T08:00:00.000001Z");
        assert_eq!(record["userGroups"], json!(["dev", "system:authenticated"]));
        assert_eq!(record["resourceAPIVersion"], "apps/v1");
        assert_eq!(record["resourceLabels"], json!({"app": "web"}));
        assert_eq!(record["ruleName"], "web");
        assert_eq!(record["ruleNamespace"], "shop");
        assert_eq!(record["enforcementAction"], "deny");
        let path = "spec.template.spec.containers[0].image";
        assert_eq!(record["details"]["deniedPaths"], json!([path]));
        assert_eq!(
            record["details"]["changes"],
            json!([{"path": path, "old": "\"web:1\"", "new": "\"web:2\""}])
        );
        assert!(
            !record.to_string().contains("last-applied"),
            "the last-applied annotation never goes into a record"
        );
    }

    #[test]
    fn modes_map_to_enforcement_actions() {
        let cases = [
            ("enforce", Some("deny")),
            ("warn", Some("warn")),
            ("dry-run", Some("dryrun")),
            ("off", None),
        ];
        for (mode, action) in cases {
            let record = record_of(mode, "web:1", "web:2");
            assert_eq!(
                record.as_ref().map(|r| r["enforcementAction"].clone()),
                action.map(Value::from),
                "{mode}"
            );
        }
        assert!(record_of("enforce", "web:1", "web:1").is_none());
    }

    #[test]
    fn change_values_are_cut_to_256_characters() {
        let long = "x".repeat(1000);
        let record = record_of("enforce", "web:1", &long).unwrap();
        let new = record["details"]["changes"][0]["new"].as_str().unwrap();
        assert_eq!(new.chars().count(), MAX_CHANGE_VALUE_CHARS);
        assert!(new.ends_with('…'));
    }
}
