//! Drift Sentinel's Events (reference §6 "Events", §8 "Who and why") as other programs read
//! them: the reporting controllers, the reasons, and the record of edits the webhook's Events
//! carry — an [`EditRecord`] as JSON in the annotation [`EDITS_ANNOTATION`], on Events labelled
//! [`RECORD_LABEL`] — which the audit (and `kubectl drift blame`) read back to tell who made a
//! drifted field's live value. Also the audit's memory of what it attributed
//! ([`AttributionMemory`], in a ConfigMap of its namespace), kept after the Events expire.
//!
//! The join itself is the engine's ([`drift_engine::attribution`]).

use std::collections::BTreeMap;

use k8s_openapi::api::events::v1::Event;
use serde::{Deserialize, Serialize};

pub use drift_engine::attribution::{
    Attribution, EditRecord, RECORD_VERSION, RecordedEdit, RecordedField, Remembered, Why,
};

/// `reportingController` of the webhook's Events.
pub const WEBHOOK_CONTROLLER: &str = "drift-sentinel.k8s.io/webhook";
/// `reportingController` of the audit's Events.
pub const AUDIT_CONTROLLER: &str = "drift-sentinel.k8s.io/audit";

/// The annotation holding an Event's [`EditRecord`] (JSON).
pub const EDITS_ANNOTATION: &str = "drift-sentinel.k8s.io/edits";
/// The label of Events that carry an [`EditRecord`]; its value is the record version.
pub const RECORD_LABEL: &str = "drift-sentinel.k8s.io/edit-record";
/// The label selector that lists them.
pub const RECORD_SELECTOR: &str = "drift-sentinel.k8s.io/edit-record=v1";
/// The annotation of the denial Event on a rule ConfigMap naming the last denied edit.
pub const LAST_DENIED_ANNOTATION: &str = "drift-sentinel.k8s.io/last-denied";
/// The most bytes an [`EDITS_ANNOTATION`] value takes (an object's annotations may take 256 KiB
/// in all; the older edits are left out to fit).
pub const MAX_RECORD_BYTES: usize = 16 * 1024;

/// The Event reasons (`reason`), one per finding.
pub mod reason {
    /// Warning on the object: a violation allowed in warn mode.
    pub const DRIFT_WARNED: &str = "DriftWarned";
    /// Warning on the object: a violation allowed in dry-run mode ("would deny").
    pub const DRIFT_DRY_RUN: &str = "DriftDryRun";
    /// Normal on the object: an edit the bypass annotation let through without judging it.
    pub const BYPASS_USED: &str = "BypassUsed";
    /// Warning on the object: a bypass annotation that is no bypass (ended, invalid, over
    /// `maxBypass`); the edit was judged.
    pub const BYPASS_NOT_HONOURED: &str = "BypassNotHonoured";
    /// Normal on the object: an edit allowed without comparison (an exempt user, a user the
    /// rule's `users` do not list, mode `off`).
    pub const EDIT_NOT_COMPARED: &str = "EditNotCompared";
    /// Warning on the winning rule's ConfigMap: edits it denied (one series per rule).
    pub const DRIFT_DENIED: &str = "DriftDenied";
    /// Warning on the object: drift the audit found.
    pub const DRIFT_DETECTED: &str = "DriftDetected";
}

/// The edit record an Event of the webhook carries, when it carries a valid one about the
/// object it regards (the same uid); `None` otherwise — never a guess from the note.
pub fn record_of(event: &Event) -> Option<EditRecord> {
    if event.reporting_controller.as_deref() != Some(WEBHOOK_CONTROLLER) {
        return None;
    }
    let text = event.metadata.annotations.as_ref()?.get(EDITS_ANNOTATION)?;
    if text.len() > MAX_RECORD_BYTES {
        return None;
    }
    let record: EditRecord = serde_json::from_str(text).ok()?;
    let regarding = event.regarding.as_ref()?.uid.as_deref()?;
    (record.is_valid() && record.uid == regarding).then_some(record)
}

/// The [`EDITS_ANNOTATION`] value of `record`: its JSON, the oldest edits left out (and
/// counted in `omitted`) until it fits [`MAX_RECORD_BYTES`]. `None` when even one edit does not
/// fit (a record is bounded far below that: it cannot happen with records the webhook builds).
pub fn record_annotation(record: &EditRecord) -> Option<String> {
    let mut record = record.clone();
    loop {
        let text = serde_json::to_string(&record).ok()?;
        if text.len() <= MAX_RECORD_BYTES {
            return Some(text);
        }
        if record.edits.len() <= 1 {
            return None;
        }
        record.edits.remove(0);
        record.omitted = record.omitted.saturating_add(1);
    }
}

/// What the audit attributed, kept in its ConfigMap ([`MEMORY_KEY`]) so that it outlives the
/// Events it came from and the audit's restarts (reference §8 "Who and why").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttributionMemory {
    /// Since when the webhook's records have been read without a gap (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records_read_since: Option<String>,
    /// When they were last read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records_read_at: Option<String>,
    /// By object uid: the attributions of its drifted fields.
    #[serde(default)]
    pub objects: BTreeMap<String, Vec<Remembered>>,
}

/// Who made one drifted field's live value and why it got through, as the audit's records,
/// Reports and output carry it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldAttribution {
    pub path: String,
    #[serde(flatten)]
    pub attribution: Attribution,
}

/// `spec.replicas: user alice, warn mode`.
impl std::fmt::Display for FieldAttribution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.attribution)
    }
}

/// The key of the memory ConfigMap's `data` holding the [`AttributionMemory`] (JSON).
pub const MEMORY_KEY: &str = "attribution.json";

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ObjectReference;

    fn record() -> EditRecord {
        EditRecord {
            v: RECORD_VERSION,
            uid: "u-1".into(),
            user: "alice".into(),
            why: Why::WarnMode,
            rule: "drift-system/web".into(),
            edits: vec![RecordedEdit {
                seen: "2026-03-01T10:00:00.000000Z".into(),
                manager: Some("kubectl-edit".into()),
                time: Some("2026-03-01T10:00:00Z".into()),
                fields: vec![RecordedField {
                    path: "spec.replicas".into(),
                    new: Some("sha256:00".into()),
                }],
                fields_omitted: 0,
            }],
            omitted: 0,
        }
    }

    fn event(controller: &str, uid: &str, annotation: Option<String>) -> Event {
        let mut event = Event {
            reporting_controller: Some(controller.into()),
            regarding: Some(ObjectReference {
                uid: Some(uid.into()),
                ..ObjectReference::default()
            }),
            ..Event::default()
        };
        if let Some(text) = annotation {
            event.metadata.annotations = Some([(EDITS_ANNOTATION.to_owned(), text)].into());
        }
        event
    }

    #[test]
    fn a_record_is_read_back_only_from_the_webhook_about_its_own_object() {
        let text = record_annotation(&record()).unwrap();
        assert_eq!(
            record_of(&event(WEBHOOK_CONTROLLER, "u-1", Some(text.clone()))),
            Some(record())
        );
        assert_eq!(
            record_of(&event(AUDIT_CONTROLLER, "u-1", Some(text.clone()))),
            None
        );
        assert_eq!(
            record_of(&event(WEBHOOK_CONTROLLER, "u-2", Some(text))),
            None
        );
        assert_eq!(record_of(&event(WEBHOOK_CONTROLLER, "u-1", None)), None);
        assert_eq!(
            record_of(&event(
                WEBHOOK_CONTROLLER,
                "u-1",
                Some("alice did it".into())
            )),
            None
        );
    }

    #[test]
    fn an_annotation_fits_its_bound_by_leaving_out_the_oldest_edits() {
        let mut big = record();
        let edit = big.edits[0].clone();
        big.edits = vec![edit; 8];
        for e in &mut big.edits {
            e.fields = vec![
                RecordedField {
                    path: "p".repeat(500),
                    new: Some("sha256:00".into()),
                };
                20
            ];
        }
        let text = record_annotation(&big).unwrap();
        assert!(text.len() <= MAX_RECORD_BYTES, "{}", text.len());
        let read: EditRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(read.edits.len() as u32 + read.omitted, 8);
        assert!(read.omitted > 0);
    }
}
