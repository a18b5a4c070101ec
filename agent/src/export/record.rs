//! The admission violation record (reference §7): the engine's evaluation of a violating request
//! rendered as a [`ViolationRecord`] (`drift-api`), which borrows from the request and the
//! evaluation. Every field is documented in `docs/export.md`; a test pins the field set, so a
//! change here is a change of the export format.

use std::borrow::Cow;
use std::time::SystemTime;

use drift_api::violation::{
    ADMISSION_EVENT, BypassFields, Details, RequestFields, ViolationRecord, format_rfc3339,
};
use drift_engine::bypass;
use drift_engine::evaluation::Settled;
use drift_engine::json::{Document, Node};
use drift_engine::record::{details, enforcement_action};
use drift_engine::{AdmissionRequest, Evaluation};
use serde_json::{Map, Value};

/// `metadata.labels` of the request's object (or old object): borrowed from a parsed
/// document, read from the raw text of one.
fn labels_of<O: Document>(request: &AdmissionRequest<O>) -> Cow<'_, Map<String, Value>> {
    let labels = request
        .object
        .as_ref()
        .or(request.old_object.as_ref())
        .and_then(|o| o.node().get("metadata")?.get("labels"))
        .map(Node::to_value);
    match labels {
        Some(Cow::Borrowed(Value::Object(map))) => Cow::Borrowed(map),
        Some(Cow::Owned(Value::Object(map))) => Cow::Owned(map),
        _ => Cow::Owned(Map::new()),
    }
}

/// The record of a violating request, or of an edit a bypass allowed (`enforcementAction`
/// `bypass`, its end in `bypass`); `None` for any other evaluation, and in mode `off`.
pub fn admission_record<'a, O: Document>(
    request: &'a AdmissionRequest<O>,
    evaluation: &'a Evaluation<'a>,
    at: SystemTime,
) -> Option<ViolationRecord<'a>> {
    let matched = evaluation.matched()?;
    let mode_action = enforcement_action(matched.winner.mode)?;
    let (action, details, bypass) = match (&matched.settled, evaluation.violation()) {
        (Settled::Bypassed(honoured), _) => {
            let fields = BypassFields {
                end_state: Cow::Borrowed(bypass::end_of(&Ok(*honoured)).as_str()),
                end: honoured
                    .end
                    .map(|end| Cow::Owned(drift_engine::time::format_rfc3339_seconds(end))),
                value: Cow::Owned(drift_engine::truncate::truncate_chars(
                    matched.bypass_value.as_deref().unwrap_or(""),
                    64,
                )),
                set_by: None,
                since: None,
                user: None,
                user_unknown: None,
            };
            ("bypass", Details::default(), Some(fields))
        }
        (_, Some(violation)) => {
            let details = details(
                &violation.denied,
                evaluation.changes(),
                violation.denied_count,
                evaluation.comparison().map_or(0, |c| c.changed_count),
            );
            (mode_action, details, None)
        }
        _ => return None,
    };
    let rule = matched.winner.rule;
    let kind = &request.kind;
    let resource_api_version = if kind.group.is_empty() {
        Cow::Borrowed(kind.version.as_str())
    } else {
        Cow::Owned(format!("{}/{}", kind.group, kind.version))
    };
    Some(ViolationRecord {
        event_type: Cow::Borrowed(ADMISSION_EVENT),
        id: Cow::Borrowed(&request.uid),
        timestamp: Cow::Owned(format_rfc3339(at)),
        request: Some(RequestFields {
            operation: Cow::Borrowed(&request.operation),
            dry_run: request.dry_run.unwrap_or(false),
            user_name: Cow::Borrowed(&request.user_info.username),
            user_uid: Cow::Borrowed(&request.user_info.uid),
            user_groups: Cow::Borrowed(&request.user_info.groups),
        }),
        resource: Cow::Borrowed(&request.resource.resource),
        sub_resource: Cow::Borrowed(request.sub_resource()),
        resource_api_version,
        resource_kind: Cow::Borrowed(&kind.kind),
        resource_namespace: Cow::Borrowed(request.namespace()),
        resource_name: Cow::Borrowed(request.name()),
        resource_labels: labels_of(request),
        rule_name: Cow::Borrowed(&rule.id.name),
        rule_namespace: Cow::Borrowed(&rule.id.namespace),
        mode: Cow::Borrowed(matched.winner.mode.as_str()),
        enforcement_action: Cow::Borrowed(action),
        message: Cow::Owned(match bypass {
            Some(_) => evaluation.warnings().join("; "),
            None => evaluation.status_message(),
        }),
        details,
        bypass,
        who: Vec::new(),
    })
}

/// The fields of an admission record in order: the list the black-box tests check records by.
#[cfg(test)]
#[path = "../../tests/support/record.rs"]
mod record_fields;

#[cfg(test)]
mod tests {
    use super::record_fields::{ADMISSION_RECORD_FIELDS, keys};
    use super::*;
    use drift_engine::review::parse_review;
    use drift_engine::{Context, Detail, RuleSet, evaluate};
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
        let evaluation = evaluate(
            &rules,
            &request,
            &Context::at(std::time::SystemTime::UNIX_EPOCH),
            Detail::Verdict,
        );
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_micros(1_800_000_000_000_001);
        admission_record(&request, &evaluation, at)
            .map(|r| serde_json::from_slice(&r.encode().unwrap()).unwrap())
    }

    #[test]
    fn a_denied_change_has_every_field() {
        let record = record_of("enforce", "web:1", "web:2").unwrap();
        // The names and their order, pinned once for this test and the black-box export tests.
        assert_eq!(keys(&record), ADMISSION_RECORD_FIELDS);
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
        assert_eq!(record["details"]["deniedCount"], 1);
        assert_eq!(record["details"]["changedCount"], 1);
        assert_eq!(
            record["details"]["changes"],
            json!([{"path": path, "old": "web:1", "new": "web:2"}])
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
    fn change_values_are_cut_to_256_bytes_and_marked() {
        let long = "x".repeat(1000);
        let record = record_of("enforce", "web:1", &long).unwrap();
        let change = &record["details"]["changes"][0];
        let new = change["new"].as_str().unwrap();
        assert!(
            new.len() <= drift_api::violation::MAX_CHANGE_VALUE_BYTES,
            "{}",
            new.len()
        );
        assert!(new.ends_with('…'));
        assert_eq!(change["old"], "web:1", "a short value stays itself");
        assert_eq!(change["truncated"], true);
    }

    #[test]
    fn an_edit_a_bypass_allowed_is_recorded_with_its_end() {
        let rules = rules("enforce");
        let mut body = review("web:1", "web:2");
        body["request"]["object"]["metadata"]["annotations"]["drift-sentinel.k8s.io/bypass"] =
            json!("2027-01-15T12:00:00Z");
        let body = body.to_string();
        let parsed = parse_review(body.as_bytes()).unwrap();
        let request = parsed.request.unwrap();
        let now = drift_engine::time::parse_rfc3339("2027-01-15T08:00:00Z").unwrap();
        let evaluation = evaluate(&rules, &request, &Context::at(now), Detail::Verdict);
        let record: Value = serde_json::from_slice(
            &admission_record(&request, &evaluation, now)
                .unwrap()
                .encode()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(record["enforcementAction"], "bypass");
        assert_eq!(record["eventType"], ADMISSION_EVENT);
        assert_eq!(
            record["bypass"],
            json!({"endState": "active", "end": "2027-01-15T12:00:00Z", "value": "2027-01-15T12:00:00Z"})
        );
        assert!(
            record["message"].as_str().unwrap().starts_with(
                "Drift Sentinel: bypass until 2027-01-15T12:00:00Z, in 4h: rule shop/web"
            ),
            "{record}"
        );
        assert_eq!(record["details"]["deniedPaths"], json!([]));
        // A bypass past its end is no bypass: the violation is recorded as one.
        let later = now + std::time::Duration::from_secs(5 * 3600);
        let evaluation = evaluate(&rules, &request, &Context::at(later), Detail::Verdict);
        let record = admission_record(&request, &evaluation, later).unwrap();
        assert_eq!(record.enforcement_action, "deny");
        assert!(record.bypass.is_none());
    }
}
