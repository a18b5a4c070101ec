//! The records of an evaluation (reference §7): what the agent and the plugin write of the
//! engine's one evaluation, in the wire types of `drift_api::violation` — a violation's
//! details and values, the audit's records of drifted and bypassed objects — and the audit's
//! counts by result. Pure: the time is passed in.

use std::borrow::Cow;
use std::time::SystemTime;

use drift_api::status::AuditCounts;
use drift_api::violation::{
    AUDIT_EVENT, BYPASS_EVENT, BypassFields, ChangeRecord, Details, MAX_CHANGE_VALUE_BYTES,
    MAX_DETAILED_CHANGES, ViolationRecord, format_rfc3339,
};
use serde_json::Value;

use crate::Audit;
use crate::audit::{AuditResult, AuditedObject};
use crate::evaluation::JudgedChange;
use crate::json::LazyValue;
use crate::rule::Mode;

/// The details of one evaluation (admission or audit): its first denied and changed paths,
/// the uncovered changes with their values (and who made them, where the audit knows), and
/// the counts of all.
pub fn details<'a>(
    denied: &'a [String],
    changes: &'a [JudgedChange<'_>],
    denied_count: usize,
    changed_count: usize,
) -> Details<'a> {
    let first = |paths: &mut dyn Iterator<Item = &'a str>| {
        paths
            .take(MAX_DETAILED_CHANGES)
            .map(Cow::Borrowed)
            .collect::<Vec<_>>()
    };
    Details {
        denied_paths: first(&mut denied.iter().map(String::as_str)),
        changed_paths: first(&mut changes.iter().map(|c| c.path.as_str())),
        changes: changes
            .iter()
            .filter(|c| !c.mutable)
            .take(MAX_DETAILED_CHANGES)
            .map(|c| {
                let mut record = change(
                    c.path.as_str(),
                    c.change.old.as_ref(),
                    c.change.new.as_ref(),
                );
                if let Some(edit) = &c.edit {
                    record.manager = Some(Cow::Borrowed(edit.manager.as_ref()));
                    record.time = edit.time.as_deref().map(Cow::Borrowed);
                }
                record
            })
            .collect(),
        denied_count,
        changed_count,
    }
}

/// A change with both sides encoded as the record format says.
pub fn change<'a>(
    path: impl Into<Cow<'a, str>>,
    old: Option<&'a LazyValue<'_>>,
    new: Option<&'a LazyValue<'_>>,
) -> ChangeRecord<'a> {
    let (old, old_cut) = record_value(old);
    let (new, new_cut) = record_value(new);
    ChangeRecord {
        path: path.into(),
        old,
        new,
        truncated: old_cut || new_cut,
        manager: None,
        time: None,
    }
}

/// A side of a change as a record holds it, and whether it was cut. Only the first bytes of
/// the encoding are written (reference §5: a value is never built whole to be cut); a value
/// is read whole only when its encoding fits.
fn record_value<'a>(value: Option<&'a LazyValue<'_>>) -> (Option<Cow<'a, Value>>, bool) {
    let Some(value) = value else {
        return (None, false);
    };
    let encoded = value.encoded(MAX_CHANGE_VALUE_BYTES);
    if encoded.complete {
        return (Some(value.value()), false);
    }
    let ellipsis = '…';
    let mut end = MAX_CHANGE_VALUE_BYTES - ellipsis.len_utf8();
    while !encoded.text.is_char_boundary(end) {
        end -= 1;
    }
    let mut cut = encoded.text[..end].to_owned();
    cut.push(ellipsis);
    (Some(Cow::Owned(Value::String(cut))), true)
}

/// What `enforcementAction` a mode records: what the webhook does (or would do) in it.
pub fn enforcement_action(mode: Mode) -> Option<&'static str> {
    match mode {
        Mode::Enforce => Some("deny"),
        Mode::Warn => Some("warn"),
        Mode::DryRun => Some("dryrun"),
        Mode::Off => None,
    }
}

/// The `violation_audited` record of a drifted object (reference §8): `id` is the run's id, there is
/// no request, and each change carries `old` (declared), `new` (live) and, for imperative edits,
/// `manager` and `time`, and `who` who made each drifted field and why (reference §8 "Who and
/// why"). `None` when the object did not drift (or its mode exports nothing).
pub fn audited<'a>(
    run_id: &'a str,
    object: &AuditedObject<'a>,
    audit: &'a Audit<'a>,
    who: Vec<drift_api::events::FieldAttribution>,
    at: SystemTime,
) -> Option<ViolationRecord<'a>> {
    let drift = audit.drift()?;
    let action = enforcement_action(audit.mode()?)?;
    let changes = audit.changes();
    let details = details(
        &drift.denied,
        changes,
        drift.denied_count,
        audit.comparison().map_or(0, |c| c.changed_count),
    );
    Some(ViolationRecord {
        enforcement_action: Cow::Borrowed(action),
        message: Cow::Owned(audit.reason()),
        details,
        who,
        ..of_audited(AUDIT_EVENT, run_id, object, audit, at)?
    })
}

/// The [`BYPASS_EVENT`] record of an object carrying the bypass annotation: its end, who
/// set it and since when, and (as `message`) what it means at the run's time. `None`
/// without the annotation.
pub fn bypass_listed<'a>(
    run_id: &'a str,
    object: &AuditedObject<'a>,
    audit: &'a Audit<'a>,
    at: SystemTime,
) -> Option<ViolationRecord<'a>> {
    let finding = audit.bypass.as_ref()?;
    Some(ViolationRecord {
        enforcement_action: Cow::Borrowed(if finding.read.is_ok() {
            "bypass"
        } else {
            "none"
        }),
        message: Cow::Owned(finding.to_string()),
        details: Details::default(),
        bypass: Some(BypassFields {
            end_state: Cow::Borrowed(finding.end().as_str()),
            end: finding
                .end_time()
                .map(|end| Cow::Owned(crate::time::format_rfc3339_seconds(end))),
            value: Cow::Owned(crate::truncate::truncate_chars(&finding.value, 64)),
            set_by: finding.set_by.as_ref().map(|edit| edit.manager.clone()),
            since: finding.set_by.as_ref().and_then(|edit| edit.time.clone()),
            user: finding.user.clone().map(Cow::Owned),
            user_unknown: finding.user_unknown.clone().map(Cow::Owned),
        }),
        ..of_audited(BYPASS_EVENT, run_id, object, audit, at)?
    })
}

/// What every record of an audited object says, of `event_type`: the run, its time, the
/// object, and the rule it is judged under and its mode (`None` when no rule matched). No
/// request (an audit has none), and what was done about the object (action, message,
/// details, bypass) left empty for the caller.
fn of_audited<'a>(
    event_type: &'static str,
    run_id: &'a str,
    object: &AuditedObject<'a>,
    audit: &Audit<'a>,
    at: SystemTime,
) -> Option<ViolationRecord<'a>> {
    let rule = audit.rule()?;
    let mode = audit.mode()?;
    Some(ViolationRecord {
        event_type: Cow::Borrowed(event_type),
        id: Cow::Borrowed(run_id),
        timestamp: Cow::Owned(format_rfc3339(at)),
        request: None,
        resource: Cow::Borrowed(object.resource),
        sub_resource: Cow::Borrowed(""),
        resource_api_version: Cow::Borrowed(object.api_version),
        resource_kind: Cow::Borrowed(object.kind),
        resource_namespace: Cow::Borrowed(object.namespace),
        resource_name: Cow::Borrowed(object.name),
        resource_labels: Cow::Borrowed(object.labels),
        rule_name: Cow::Borrowed(&rule.id.name),
        rule_namespace: Cow::Borrowed(&rule.id.namespace),
        mode: Cow::Borrowed(mode.as_str()),
        enforcement_action: Cow::Borrowed(""),
        message: Cow::Borrowed(""),
        details: Details::default(),
        bypass: None,
        who: Vec::new(),
    })
}

/// Counts one judged object under its result, and under its bypass annotation's end when it
/// carries one.
pub fn count(counts: &mut AuditCounts, audit: &Audit<'_>) {
    *match audit.result {
        AuditResult::Drifted(_) => &mut counts.drifted,
        AuditResult::Clean(_) => &mut counts.clean,
        AuditResult::NoBaseline => &mut counts.no_baseline,
        AuditResult::Skipped(_) => &mut counts.skipped,
    } += 1;
    if let Some(bypass) = &audit.bypass {
        counts.bypassed.add(bypass.end());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::parse_rfc3339;
    use serde_json::json;

    const RULE: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n  namespace: ops\n  annotations: {drift-sentinel.k8s.io/rule: \"true\"}\ndata:\n  spec: |\n    mode: enforce\n    namespaces: [\"*\"]\n    selectors: [{apiGroup: apps, kind: Deployment}]\n";

    /// The rule set of [`RULE`], as read from its file.
    fn rules() -> crate::RuleSet {
        let documents = crate::manifests::parse_documents(RULE, "rule.yaml").unwrap();
        crate::RuleSet::build(crate::manifests::rule_sources(&documents, "rule.yaml"))
    }

    #[test]
    fn a_drifted_object_as_record_text_and_count() {
        let rules = rules();
        let namespaces = crate::manifests::Namespaces::new();
        let managers = vec!["kubectl".to_owned()];
        let object = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{\"replicas\":2}}"}},
            "spec": {"replicas": 5}
        });
        let audit = crate::audit::audit_object(
            &rules,
            &namespaces,
            &object,
            &managers,
            SystemTime::UNIX_EPOCH,
        )
        .unwrap();
        let mut counts = AuditCounts::default();
        count(&mut counts, &audit);
        assert_eq!((counts.drifted, counts.total()), (1, 1));
        let identity = AuditedObject::of(&object, "deployments");
        assert_eq!(
            crate::message::drift_text(&identity, &audit, &[]),
            "drifted apps/v1 Deployment shop/web (rule ops/web, enforce)\n  spec.replicas: 2 → 5\n"
        );
        let record = audited(
            "run-1",
            &identity,
            &audit,
            Vec::new(),
            SystemTime::UNIX_EPOCH,
        )
        .unwrap();
        assert_eq!(record.details.denied_paths, ["spec.replicas"]);
        assert_eq!(record.enforcement_action, "deny");
        assert_eq!(record.event_type, AUDIT_EVENT);
        assert_eq!(record.timestamp, "1970-01-01T00:00:00.000000Z");
    }

    #[test]
    fn a_bypassed_object_as_record_and_text() {
        let rules = rules();
        let namespaces = crate::manifests::Namespaces::new();
        let now = parse_rfc3339("2026-12-04T12:00:00Z").unwrap();
        let object = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop",
                "annotations": {"drift-sentinel.k8s.io/bypass": "2026-12-04T16:00:00Z"},
                "managedFields": [{"manager": "kubectl-drift", "operation": "Update", "time": "2026-12-04T11:00:00Z",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {"f:drift-sentinel.k8s.io/bypass": {}}}}}]},
            "spec": {"replicas": 5}
        });
        let audit = crate::audit::audit_object(&rules, &namespaces, &object, &[], now).unwrap();
        let mut counts = AuditCounts::default();
        count(&mut counts, &audit);
        assert_eq!((counts.skipped, counts.bypassed.active), (1, 1));
        let identity = AuditedObject::of(&object, "deployments");
        assert_eq!(
            crate::message::bypass_text(&identity, &audit).unwrap(),
            "bypass apps/v1 Deployment shop/web (rule ops/web): bypass until 2026-12-04T16:00:00Z (set by kubectl-drift at 2026-12-04T11:00:00Z)\n"
        );
        let record = bypass_listed("run-1", &identity, &audit, now).unwrap();
        assert_eq!(record.event_type, BYPASS_EVENT);
        assert_eq!(record.enforcement_action, "bypass");
        let bypass = record.bypass.as_ref().unwrap();
        assert_eq!(bypass.end_state, "active");
        assert_eq!(bypass.end.as_deref(), Some("2026-12-04T16:00:00Z"));
        assert_eq!(bypass.set_by.as_deref(), Some("kubectl-drift"));
        assert_eq!(bypass.since.as_deref(), Some("2026-12-04T11:00:00Z"));
        assert_eq!(bypass.user, None);
        let line = String::from_utf8(record.encode().unwrap()).unwrap();
        assert_eq!(ViolationRecord::parse(&line).unwrap(), record);
        // The user who set it, when the audit knows it.
        let mut audit = audit;
        if let Some(finding) = audit.bypass.as_mut() {
            finding.user = Some("carol".into());
        }
        let record = bypass_listed("run-1", &identity, &audit, now).unwrap();
        assert_eq!(
            record.bypass.as_ref().unwrap().user.as_deref(),
            Some("carol")
        );
        let line = String::from_utf8(record.encode().unwrap()).unwrap();
        assert!(line.contains(r#""user":"carol""#), "{line}");
        assert_eq!(ViolationRecord::parse(&line).unwrap(), record);
        // An object without the annotation has no bypass record; a violation record has no
        // bypass field.
        let plain = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"}, "spec": {"replicas": 5}});
        let audit = crate::audit::audit_object(&rules, &namespaces, &plain, &[], now).unwrap();
        let identity = AuditedObject::of(&plain, "deployments");
        assert!(bypass_listed("run-1", &identity, &audit, now).is_none());
    }

    /// Reference §3, §8 step 1: when no record names who set a bypass, the export's `bypass`
    /// record says why in `bypass.userUnknown`, as the audit's attribution (`RunEvidence`)
    /// found it, and reads back the same.
    #[test]
    fn a_bypass_whose_setter_is_not_known_says_why_in_the_record() {
        let rules = rules();
        let namespaces = crate::manifests::Namespaces::new();
        let now = parse_rfc3339("2026-12-04T12:00:00Z").unwrap();
        let object = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "uid": "u-1",
                "annotations": {"drift-sentinel.k8s.io/bypass": "true"},
                "managedFields": [{"manager": "kubectl-patch", "operation": "Update", "time": "2026-12-04T11:00:00Z",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {"f:drift-sentinel.k8s.io/bypass": {}}}}}]},
            "spec": {"replicas": 5}
        });
        let identity = AuditedObject::of(&object, "deployments");
        let scope = crate::who::WebhookScope::Unknown("not read".into());
        // Records read (since before the edit), none of the annotation's entry; and records
        // that could not be read.
        let read = crate::attribution::Coverage {
            since: parse_rfc3339("2026-12-04T10:00:00Z").unwrap(),
            read_at: now,
        };
        for (coverage, why) in [
            (Ok(read), "no record"),
            (
                Err("forbidden".to_owned()),
                "the webhook's records of edits could not be read: forbidden",
            ),
        ] {
            let mut audit =
                crate::audit::audit_object(&rules, &namespaces, &object, &[], now).unwrap();
            let mut run = crate::who::RunEvidence::new(
                drift_api::events::Records::default(),
                coverage,
                crate::who::Memory::default(),
                scope.clone(),
            );
            run.judge(&object, &identity, &mut audit);
            let record = bypass_listed("run-1", &identity, &audit, now).unwrap();
            let bypass = record.bypass.as_ref().unwrap();
            assert_eq!(bypass.user, None);
            let unknown = bypass.user_unknown.as_deref().unwrap_or_default();
            assert!(unknown.contains(why), "{unknown}");
            let line = String::from_utf8(record.encode().unwrap()).unwrap();
            let written: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(written["bypass"]["userUnknown"], unknown, "{line}");
            assert!(written["bypass"].get("user").is_none(), "{line}");
            assert_eq!(ViolationRecord::parse(&line).unwrap(), record);
        }
    }

    #[test]
    fn large_values_are_cut_and_marked() {
        let big = LazyValue::from(json!({"args": vec!["x".repeat(50); 20]}));
        let cut_change = change("spec.args", Some(&big), None);
        let Some(Cow::Owned(Value::String(cut))) = &cut_change.old else {
            panic!("{cut_change:?}");
        };
        assert!(
            cut.len() <= MAX_CHANGE_VALUE_BYTES && cut.ends_with('…'),
            "{}",
            cut.len()
        );
        assert!(cut_change.truncated);
        assert!(cut_change.new.is_none());
        let small = LazyValue::from(json!({"a": 1}));
        assert!(!change("a", Some(&small), Some(&small)).truncated);
        // Text is cut as its value would be, without reading it whole.
        let text = format!("[{}]", vec!["0"; 100_000].join(", "));
        let long = LazyValue::Text(&text);
        let cut_change = change("spec.args", None, Some(&long));
        let Some(Cow::Owned(Value::String(cut))) = &cut_change.new else {
            panic!("{cut_change:?}");
        };
        assert_eq!(cut.len(), MAX_CHANGE_VALUE_BYTES);
        assert!(cut.starts_with("[0,0,0,") && cut.ends_with('…'), "{cut}");
    }
}
