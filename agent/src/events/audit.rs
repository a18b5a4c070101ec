//! The audit's finding as an Event (reference §6 "Events", §8): `DriftDetected` on a drifted
//! object, naming its drifted fields (declared → live), who changed them imperatively (the field
//! manager and time) and, when the audit knows them, the user and why the webhook let the edit
//! through. Its annotation keeps what the audit attributed from records (the same entries as
//! the Report's `whoRecorded`), so that a restarted audit without Reports remembers them after
//! the webhook's Events expire. Pure: the audited object, its audit and attributions, and the
//! time in.

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
        regarding: Regarding {
            api_version: identity.api_version.to_owned(),
            kind: identity.kind.to_owned(),
            namespace: identity.namespace.to_owned(),
            name: identity.name.to_owned(),
            uid: uid.to_owned(),
        },
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
