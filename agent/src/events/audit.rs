//! The audit's findings as Events (reference §6 "Events", §8): `DriftDetected` on a drifted
//! object, naming its drifted fields (declared → live), who changed them imperatively (the field
//! manager and time) and, when the audit knows them, the user and why the webhook let the edit
//! through. Its annotation keeps what the audit attributed from records (the same entries as
//! the Report's `whoRecorded`), so that a restarted audit without Reports remembers them after
//! the webhook's Events expire. `Bypassed` on an object under an honoured bypass whose setter
//! the audit knows keeps who set it the same way (the Report's `bypassSetter`). Pure: the
//! audited object, its audit and attributions, and the time in.

use std::time::SystemTime;

use drift_api::events::{FieldAttribution, reason};
use drift_engine::audit::AuditedObject;

use super::series::{EventType, Intent, Note, Regarding};

/// How many drifted fields a note shows.
const MAX_NOTED_FIELDS: usize = 10;

/// The `DriftDetected` Event of a drifted object; `None` when it is not drifted or has no uid.
pub fn drift_detected(
    identity: &AuditedObject<'_>,
    uid: &str,
    audit: &drift_engine::Audit<'_>,
    who: &[FieldAttribution],
    memory: Option<String>,
    at: SystemTime,
) -> Option<Intent> {
    let rule = audit.rule()?;
    audit.drift()?;
    if uid.is_empty() {
        return None;
    }
    let drifted: Vec<_> = audit.changes().iter().filter(|c| !c.mutable).collect();
    let mut fields: Vec<String> = drifted
        .iter()
        .take(MAX_NOTED_FIELDS)
        .map(|change| {
            let mut text = change.text();
            if let Some(found) = who.iter().find(|w| w.path == change.path) {
                text.push_str(&format!(", {}", found.attribution));
            }
            text
        })
        .collect();
    if drifted.len() > MAX_NOTED_FIELDS {
        fields.push(format!("… ({} more)", drifted.len() - MAX_NOTED_FIELDS));
    }
    let note = format!(
        "drift from the declared state (rule {}, mode {}): {}",
        rule.id,
        audit.mode().map_or("", |m| m.as_str()),
        fields.join("; ")
    );
    Some(Intent {
        regarding: regarding(identity, uid),
        type_: EventType::Warning,
        reason: reason::DRIFT_DETECTED,
        action: "Audit",
        // A note cannot change: another drift is another Event.
        distinct: Some(drift_engine::truncate::truncate_bytes(
            &note,
            super::series::MAX_NOTE_BYTES,
        )),
        note: Note::Latest(note),
        user: String::new(),
        rule: rule.id.to_string(),
        record: None,
        bypass: None,
        memory,
        at,
    })
}

/// The `Bypassed` Event of an object skipped under an honoured bypass whose setter the audit
/// knows (from a record, or remembered for the same managedFields entry): its note names the
/// bypass's end and who set it, in absolute times only, and its annotation keeps the setter
/// ([`drift_api::events::BYPASS_SETTER_ANNOTATION`], the Report's `bypassSetter`) for a
/// restarted audit. `None` otherwise, or without a uid.
pub fn bypassed(
    identity: &AuditedObject<'_>,
    audit: &drift_engine::Audit<'_>,
    at: SystemTime,
) -> Option<Intent> {
    let finding = audit.honoured_bypass()?;
    let rule = audit.rule()?;
    let memory = drift_api::events::bypass_setter_text(&finding.setter()?)?;
    if identity.uid.is_empty() {
        return None;
    }
    let note = drift_engine::truncate::truncate_bytes(
        &format!(
            "{finding} (rule {}, mode {})",
            rule.id,
            audit.mode().map_or("", |m| m.as_str())
        ),
        super::series::MAX_NOTE_BYTES,
    );
    Some(Intent {
        regarding: regarding(identity, identity.uid),
        type_: EventType::Normal,
        reason: reason::BYPASSED,
        action: "Audit",
        // Another end or another setter is another note, and another Event.
        distinct: Some(note.clone()),
        note: Note::Latest(note),
        user: String::new(),
        rule: rule.id.to_string(),
        record: None,
        bypass: None,
        memory: Some(memory),
        at,
    })
}

fn regarding(identity: &AuditedObject<'_>, uid: &str) -> Regarding {
    Regarding {
        api_version: identity.api_version.to_owned(),
        kind: identity.kind.to_owned(),
        namespace: identity.namespace.to_owned(),
        name: identity.name.to_owned(),
        uid: uid.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use drift_engine::rule::{RuleId, RuleSource};
    use drift_engine::who::{Memory, RunEvidence, WebhookScope};
    use serde_json::{Value, json};

    use super::super::series::{Outcome, Reporter, Store, Write};
    use super::*;

    const SET: &str = "2026-03-01T10:05:00Z";

    fn rules() -> drift_engine::RuleSet {
        drift_engine::RuleSet::build([RuleSource {
            id: RuleId {
                namespace: "drift-system".into(),
                name: "web".into(),
            },
            spec: drift_engine::SpecText::Yaml(
                "mode: enforce\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\n"
                    .into(),
            ),
            origin: None,
        }])
    }

    /// `held`, its bypass annotation `value` set by `kubectl-patch` at [`SET`].
    fn held(value: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "held", "namespace": "shop", "uid": "u-1",
                "annotations": {"drift-sentinel.k8s.io/bypass": value},
                "managedFields": [{"manager": "kubectl-patch", "operation": "Update", "time": SET,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:annotations": {"f:drift-sentinel.k8s.io/bypass": {}}}}}]},
            "spec": {"replicas": 2}})
    }

    /// The `Bypassed` finding of one run over `object` at `now`, carol remembered as the setter
    /// of the annotation's entry when `known`.
    fn bypassed_at(object: &Value, known: bool, now: SystemTime) -> Option<Intent> {
        let rules = rules();
        let namespaces = drift_engine::manifests::Namespaces::new();
        let mut audit =
            drift_engine::audit::audit_object(&rules, &namespaces, object, &[], now).unwrap();
        let identity = AuditedObject::of(object, "deployments");
        let mut memory = Memory::default();
        if known {
            memory.setters.insert(
                "u-1".into(),
                drift_api::events::RememberedSetter {
                    manager: "kubectl-patch".into(),
                    time: SET.into(),
                    user: "carol".into(),
                },
            );
        }
        let mut run = RunEvidence::new(
            drift_api::events::Records::default(),
            Err("not read in this test".to_owned()),
            memory,
            WebhookScope::Unknown("not read".into()),
        );
        run.judge(object, &identity, &mut audit);
        bypassed(&identity, &audit, now)
    }

    /// Reference §6 "Events", §8 "Memory": an object under an honoured bypass whose setter the
    /// audit knows gets a Normal `Bypassed` Event naming the end and the setter in absolute
    /// times, its memory the setter's JSON (the Report's `bypassSetter`); none when the setter
    /// is not known or the bypass is not honoured.
    #[test]
    fn a_bypass_whose_setter_is_known_is_a_bypassed_event() {
        let now = drift_api::violation::parse_rfc3339("2026-03-01T11:00:00Z").unwrap();
        let intent = bypassed_at(&held("true"), true, now).expect("a Bypassed finding");
        assert_eq!(intent.reason, reason::BYPASSED);
        assert_eq!(intent.type_, EventType::Normal);
        assert_eq!(
            intent.note,
            Note::Latest(format!(
                "bypass without an end (set by user carol with kubectl-patch at {SET}) (rule drift-system/web, mode enforce)"
            ))
        );
        let setter = intent.memory.as_deref().unwrap();
        assert_eq!(
            drift_api::events::bypass_setter_of(setter).map(|s| s.user),
            Some("carol".to_owned())
        );
        let until = bypassed_at(&held("2026-03-02T00:00:00Z"), true, now).unwrap();
        let Note::Latest(note) = &until.note else {
            panic!("{until:?}")
        };
        assert!(
            note.starts_with("bypass until 2026-03-02T00:00:00Z (set by user carol"),
            "{note}"
        );
        assert!(!note.contains(" in ") && !note.contains(" ago"), "{note}");
        // Not known, or no bypass (its end passed): no Event.
        assert_eq!(bypassed_at(&held("true"), false, now), None);
        assert_eq!(bypassed_at(&held("2026-03-01T10:30:00Z"), true, now), None);
    }

    /// 1,000 runs a minute apart over the same bypass are one Event: created once, then its
    /// series patched.
    #[test]
    fn a_thousand_runs_over_one_bypass_are_one_event() {
        let mut store = Store::new(Reporter {
            controller: drift_api::events::AUDIT_CONTROLLER,
            instance: "audit-0".into(),
            signing_key: None,
        });
        let start = drift_api::violation::parse_rfc3339("2026-03-01T11:00:00Z").unwrap();
        let (mut created, mut patched) = (0, 0);
        for run in 0..1000 {
            let now = start + Duration::from_secs(60 * run);
            let intent = bypassed_at(&held("true"), true, now).unwrap();
            assert!(store.observe(intent));
            for write in store.due(now) {
                match &write {
                    Write::Create { .. } => created += 1,
                    Write::Patch { .. } => patched += 1,
                }
                store.written(&write, Outcome::Done, now);
            }
        }
        assert_eq!((created, patched), (1, 999));
    }
}
