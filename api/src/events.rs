//! Drift Sentinel's Events (reference §6 "Events", §8 "Who and why") as other programs read
//! them: the reporting controllers, the reasons, and the record of edits the webhook's Events
//! carry — an [`EditRecord`] as JSON in the annotation [`EDITS_ANNOTATION`], on Events labelled
//! [`RECORD_LABEL`] — which the audit (and `kubectl drift blame`) read back to tell who made a
//! drifted field's live value. Also what the audit remembers of what it attributed, kept in its
//! Reports ([`WHO_RECORDED_PROPERTY`], [`remembered_of_report`]) after the Events expire.
//!
//! The join itself is the engine's (`drift_engine::attribution`), which reads and writes
//! these types.

use std::collections::HashMap;
use std::fmt;

pub mod signature;

/// The Event type the records and the audit's memory are read from (re-exported for the engine's
/// readers, which take pages of them).
pub use k8s_openapi::api::events::v1::Event;
use serde::{Deserialize, Serialize};

/// The version of the [`EditRecord`] encoding; a record of another version is not read.
pub const RECORD_VERSION: u32 = 1;
/// A user name longer than this is cut (`…(cut from N bytes)`): the API server takes user names
/// of any length from its authenticators; Events and reports take bounded ones.
pub const MAX_USER_BYTES: usize = 256;
/// Fields recorded per edit (the first uncovered ones in byte order, with the count of all).
pub const MAX_RECORDED_FIELDS: usize = 20;
/// Edits kept per record (the latest; an older one whose fields a later one all covers goes first).
pub const MAX_RECORDED_EDITS: usize = 8;

/// Why an edit got past the webhook: what the webhook recorded when it judged it, or, without
/// such a record, what the audit can tell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Why {
    /// The effective mode was `warn`: allowed, with a warning to whoever made it.
    WarnMode,
    /// The effective mode was `dry-run`: allowed, recorded as "would deny".
    DryRunMode,
    /// The rule's bypass annotation was honoured: until `end` (RFC 3339), or without an end;
    /// `setBy` is the user who set it, when known.
    Bypass {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        end: Option<String>,
        #[serde(default, rename = "setBy", skip_serializing_if = "Option::is_none")]
        set_by: Option<String>,
    },
    /// The user matched the rule's `exemptUsers`.
    ExemptUser,
    /// The rule's `users` did not list the user.
    UserNotInScope,
    /// The effective mode was `off`.
    ModeOff,
    /// The webhook configuration does not send this object's UPDATEs to the webhook (now).
    OutsideWebhook { detail: String },
    /// No record of the edit: the webhook did not see it (it was down and its failure policy let
    /// the edit through, or the edit came before the rule or the webhook).
    NotSeen,
    /// Nothing can be said, and why.
    Unknown { detail: String },
}

impl Why {
    /// Whether the webhook records this why (the others are the audit's own conclusions).
    pub fn is_recorded(&self) -> bool {
        !matches!(
            self,
            Why::OutsideWebhook { .. } | Why::NotSeen | Why::Unknown { .. }
        )
    }

    /// One word for documents and metrics: `warn-mode`, `bypass`, `not-seen` …
    pub fn as_str(&self) -> &'static str {
        match self {
            Why::WarnMode => "warn-mode",
            Why::DryRunMode => "dry-run-mode",
            Why::Bypass { .. } => "bypass",
            Why::ExemptUser => "exempt-user",
            Why::UserNotInScope => "user-not-in-scope",
            Why::ModeOff => "mode-off",
            Why::OutsideWebhook { .. } => "outside-webhook",
            Why::NotSeen => "not-seen",
            Why::Unknown { .. } => "unknown",
        }
    }
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Why::WarnMode => f.write_str("warn mode"),
            Why::DryRunMode => f.write_str("dry-run mode"),
            Why::Bypass { end, set_by } => {
                match end {
                    Some(end) => write!(f, "bypass until {end}")?,
                    None => f.write_str("bypass without an end")?,
                }
                match set_by {
                    Some(user) => write!(f, ", set by {user}"),
                    None => Ok(()),
                }
            }
            Why::ExemptUser => f.write_str("exempt user"),
            Why::UserNotInScope => f.write_str("user not in the rule's users"),
            Why::ModeOff => f.write_str("mode off"),
            Why::OutsideWebhook { detail } => {
                write!(f, "outside what the webhook intercepts: {detail}")
            }
            Why::NotSeen => f.write_str("the webhook did not see this edit"),
            Why::Unknown { detail } => f.write_str(detail),
        }
    }
}

/// Who made a drifted field's live value and why it got through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attribution {
    /// The user of the edit, from the webhook's record of it; absent when not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    pub why: Why,
    /// The rule the webhook judged the edit under (`namespace/name`), from its record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// When the webhook judged the edit (RFC 3339), from its record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen: Option<String>,
}

/// `user alice, warn mode`, or `user unknown: the webhook did not see this edit`.
impl fmt::Display for Attribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.user {
            Some(user) => write!(f, "user {user}, {}", self.why),
            None => write!(f, "user unknown: {}", self.why),
        }
    }
}

/// The webhook's record of one user's edits of one object under one finding (an Event's
/// `drift-sentinel.k8s.io/edits` annotation): what the audit joins drifted fields with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EditRecord {
    /// [`RECORD_VERSION`].
    pub v: u32,
    /// The edited object's `metadata.uid`.
    pub uid: String,
    /// The requesting user, cut to [`MAX_USER_BYTES`].
    pub user: String,
    pub why: Why,
    /// The rule that judged the edits (`namespace/name`).
    pub rule: String,
    /// The latest edits, oldest first, at most [`MAX_RECORDED_EDITS`].
    pub edits: Vec<RecordedEdit>,
    /// Older edits left out.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted: u32,
}

/// One edit the webhook judged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecordedEdit {
    /// When the webhook judged it (RFC 3339, microseconds, UTC).
    pub seen: String,
    /// The managedFields entry the edit wrote (`drift_engine::managed::request_entry`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// The changed fields the rule does not allow, with their new values' fingerprints; empty
    /// when the edit was not compared (a bypass, an exempt user, mode `off`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<RecordedField>,
    /// Changed fields left out of `fields`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub fields_omitted: u32,
}

/// A field an edit changed, and what it changed it to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecordedField {
    /// The rendered path (reference §4).
    pub path: String,
    /// The fingerprint of the new value (`drift_engine::attribution::fingerprint`); absent when
    /// it was too long to take one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl EditRecord {
    /// Adds `edit` as the latest, keeping at most [`MAX_RECORDED_EDITS`]: an older edit whose
    /// every field a later one also changed goes first (it no longer made any live value), then
    /// the oldest.
    pub fn push(&mut self, edit: RecordedEdit) {
        self.edits.push(edit);
        while self.edits.len() > MAX_RECORDED_EDITS {
            let superseded = (0..self.edits.len() - 1).find(|&i| {
                let older = &self.edits[i];
                !older.fields.is_empty()
                    && older.fields.iter().all(|field| {
                        self.edits[i + 1..]
                            .iter()
                            .any(|later| later.fields.iter().any(|f| f.path == field.path))
                    })
            });
            self.edits.remove(superseded.unwrap_or(0));
            self.omitted = self.omitted.saturating_add(1);
        }
    }

    /// Whether this record can be read as written: the version this code writes, a why the
    /// webhook records, and the bounds it keeps.
    pub fn is_valid(&self) -> bool {
        self.v == RECORD_VERSION
            && self.why.is_recorded()
            && self.user.len() <= MAX_USER_BYTES + 32
            && self.edits.len() <= MAX_RECORDED_EDITS
            && self
                .edits
                .iter()
                .all(|e| e.fields.len() <= MAX_RECORDED_FIELDS)
    }
}

/// What an earlier audit run attributed to a field, kept after the Events it came from expire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Remembered {
    pub path: String,
    /// The fingerprint of the live value it was attributed with
    /// (`drift_engine::attribution::fingerprint`): a later value is another edit.
    pub value: String,
    pub attribution: Attribution,
}

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

/// The webhook's records read at most per audit run or plugin command (pages of 500): the
/// webhook keeps at most 4,096 series per pod, a handful per object.
pub const MAX_RECORDS: usize = 50_000;

/// More of the webhook's records than [`MAX_RECORDS`]: they are not read at all, since a page
/// left unread could hold the record of an edit, which would then be called unseen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "more than {MAX_RECORDS} of the webhook's records of edits (Events labelled {RECORD_SELECTOR}): the rest were not read, so no edit can be called unseen"
)]
pub struct TooManyRecords;

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
    /// Normal on the object: the audit found it under an honoured bypass whose setter it
    /// knows (its memory of who set it, [`super::BYPASS_SETTER_ANNOTATION`]).
    pub const BYPASSED: &str = "Bypassed";
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

/// The one reader of the webhook's records, for the agent's audit and the plugin alike: fed each
/// page of Events labelled [`RECORD_SELECTOR`] as the caller lists them, it keeps the valid
/// records ([`record_of`]) by object uid, within [`MAX_RECORDS`], apart by whether they carry
/// the installation's signature ([`signature::Verification`]). Pure: the caller does the HTTP.
#[derive(Debug)]
pub struct RecordReader {
    verification: signature::Verification,
    records: Records,
    read: usize,
}

/// The webhook's records read, by object uid: those signed with the installation's key, and
/// those that are not (unsigned, another key's, altered, copied to another object): never used
/// to name a user, and never taken for "no record" either.
#[derive(Debug, Clone, Default)]
pub struct Records {
    pub verified: HashMap<String, Vec<EditRecord>>,
    pub unverified: HashMap<String, Vec<EditRecord>>,
    /// Why the unverified ones name no user.
    pub unverified_why: String,
}

impl Records {
    /// How many records did not verify.
    pub fn unverified_count(&self) -> usize {
        self.unverified.values().map(Vec::len).sum()
    }
}

impl RecordReader {
    pub fn new(verification: signature::Verification) -> Self {
        let records = Records {
            unverified_why: verification.unverified_why(),
            ..Records::default()
        };
        Self {
            verification,
            records,
            read: 0,
        }
    }

    /// Adds a page; `more`: whether the API server has another page (its `continue`). Past
    /// [`MAX_RECORDS`] with more to read, or in one page, nothing is kept: [`TooManyRecords`].
    pub fn add_page(&mut self, events: &[Event], more: bool) -> Result<(), TooManyRecords> {
        self.read = self.read.saturating_add(events.len());
        if self.read > MAX_RECORDS || (more && self.read >= MAX_RECORDS) {
            self.records.verified = HashMap::new();
            self.records.unverified = HashMap::new();
            return Err(TooManyRecords);
        }
        for event in events {
            let Some(record) = record_of(event) else {
                continue;
            };
            let annotations = event.metadata.annotations.as_ref();
            let text = annotations.and_then(|a| a.get(EDITS_ANNOTATION));
            let signature = annotations
                .and_then(|a| a.get(signature::RECORD_SIGNATURE_ANNOTATION))
                .map(String::as_str);
            let verified = text.is_some_and(|text| self.verification.record(text, signature));
            let kept = if verified {
                &mut self.records.verified
            } else {
                &mut self.records.unverified
            };
            kept.entry(record.uid.clone()).or_default().push(record);
        }
        Ok(())
    }

    /// The valid records read, by object uid.
    pub fn into_records(self) -> Records {
        self.records
    }
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

/// Who set an object's bypass annotation, as a run found it from the webhook's record: the
/// managedFields entry owning the annotation (manager, time) and the user. Valid while that
/// entry is the one owning it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RememberedSetter {
    pub manager: String,
    pub time: String,
    pub user: String,
}

/// The name of the agent's audit's Report in each namespace, and of its ClusterReport.
pub const AUDIT_REPORT_NAME: &str = "drift-sentinel-audit";
/// The label (key, value) that marks the agent's audit's Reports.
pub const AUDIT_REPORT_LABEL: (&str, &str) =
    ("app.kubernetes.io/managed-by", "drift-sentinel-audit");

/// The Report result property (a drift result's) holding what the audit attributed from the
/// webhook's records, with the fingerprint of each value ([`Remembered`] as a JSON array), so
/// that a restarted audit and the plugin know it after the records' Events expire (reference §8
/// "Who and why"). `who` is the same for people; this is for reading back.
pub const WHO_RECORDED_PROPERTY: &str = "whoRecorded";
/// The Report result property (a bypass `skip` result's) holding its [`RememberedSetter`] (JSON).
pub const BYPASS_SETTER_PROPERTY: &str = "bypassSetter";
/// The most bytes a [`WHO_RECORDED_PROPERTY`] value takes: whole entries are kept, the rest left
/// out (not remembered), so that a result stays small within its Report's 1 MiB.
pub const MAX_WHO_RECORDED_BYTES: usize = 4096;

/// The [`WHO_RECORDED_PROPERTY`] value of `recorded`: as many whole entries as fit
/// [`MAX_WHO_RECORDED_BYTES`]; `None` when there is none to keep.
pub fn who_recorded_property(recorded: &[Remembered]) -> Option<String> {
    // Each entry serialized once: the array is `[` entries joined by `,` `]`.
    let mut text = String::from("[");
    for entry in recorded {
        let Ok(entry) = serde_json::to_string(entry) else {
            break;
        };
        let comma = usize::from(text.len() > 1);
        if text.len() + comma + entry.len() + 1 > MAX_WHO_RECORDED_BYTES {
            break;
        }
        if comma == 1 {
            text.push(',');
        }
        text.push_str(&entry);
    }
    text.push(']');
    (text.len() > 2).then_some(text)
}

/// A Report result's memory property and its signature ([`signature::sign_property`]), as the
/// audit writes them: `(name, text)` then `(nameSignature, ed25519:…)`; only the first without
/// a key (it is then not read back).
pub fn signed_property(
    key: Option<&signature::SigningKey>,
    name: &str,
    uid: &str,
    text: &str,
) -> Vec<(String, String)> {
    let signature = key.map(|key| signature::sign_property(key, name, uid, text));
    let mut properties = vec![(name.to_owned(), text.to_owned())];
    if let Some(signature) = signature {
        properties.push((signature::signature_property(name), signature));
    }
    properties
}

/// What a Report of the audit (`openreports.io` `Report` or `ClusterReport`, as JSON) remembers,
/// by object uid: the recorded attributions of its drift results ([`WHO_RECORDED_PROPERTY`])
/// and the bypass setters of its skip results ([`BYPASS_SETTER_PROPERTY`]). What cannot be read
/// (another writer's result, a value over its bound, a record no longer valid) is left out:
/// never a guess.
pub fn remembered_of_report(
    report: &serde_json::Value,
    verification: &signature::Verification,
) -> ReportMemory {
    let mut fields = Vec::new();
    let mut setters = Vec::new();
    let mut unverified = 0;
    let results = report
        .get("results")
        .and_then(serde_json::Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    for result in results {
        let uid = result
            .pointer("/resources/0/uid")
            .and_then(serde_json::Value::as_str)
            .filter(|uid| !uid.is_empty());
        let Some(uid) = uid else { continue };
        let text = |key: &str| {
            result
                .get("properties")
                .and_then(|p| p.get(key))
                .and_then(serde_json::Value::as_str)
        };
        // Read back only with the installation's signature over this object's uid: anyone
        // who may write Reports can write the text.
        let mut property = |key: &str| {
            let value = text(key).filter(|text| text.len() <= MAX_WHO_RECORDED_BYTES)?;
            let signature = text(&signature::signature_property(key));
            if verification.property(key, uid, value, signature) {
                Some(value)
            } else {
                unverified += 1;
                None
            }
        };
        if let Some(recorded) = property(WHO_RECORDED_PROPERTY).and_then(who_recorded_of) {
            fields.push((uid.to_owned(), recorded));
        }
        if let Some(setter) = property(BYPASS_SETTER_PROPERTY).and_then(bypass_setter_of) {
            setters.push((uid.to_owned(), setter));
        }
    }
    ReportMemory {
        fields,
        setters,
        unverified,
    }
}

/// The attributions a [`WHO_RECORDED_PROPERTY`] value (or [`WHO_RECORDED_ANNOTATION`]) holds,
/// those taken from records with a user only; `None` when it holds none, is over its bound or
/// cannot be read. The one reader of what [`who_recorded_property`] writes.
pub fn who_recorded_of(text: &str) -> Option<Vec<Remembered>> {
    if text.len() > MAX_WHO_RECORDED_BYTES {
        return None;
    }
    let recorded: Vec<Remembered> = serde_json::from_str::<Vec<Remembered>>(text)
        .ok()?
        .into_iter()
        .filter(|r| r.attribution.why.is_recorded() && r.attribution.user.is_some())
        .collect();
    (!recorded.is_empty()).then_some(recorded)
}

/// The label (and its value) of the audit's Events that carry what it remembers: its
/// `DriftDetected` Events what it attributed from records ([`WHO_RECORDED_ANNOTATION`]), its
/// `Bypassed` Events who set the bypass ([`BYPASS_SETTER_ANNOTATION`]). What a restarted audit
/// lists to remember them when it writes no Reports (reference §8 "Who and why", Memory).
pub const AUDIT_MEMORY_LABEL: &str = "drift-sentinel.k8s.io/audit-memory";
pub const AUDIT_MEMORY_VERSION: &str = "v1";
/// The annotation of a `DriftDetected` Event holding the object's [`WHO_RECORDED_PROPERTY`] value.
pub const WHO_RECORDED_ANNOTATION: &str = "drift-sentinel.k8s.io/who-recorded";
/// The annotation of a `Bypassed` Event holding the object's [`BYPASS_SETTER_PROPERTY`] value.
pub const BYPASS_SETTER_ANNOTATION: &str = "drift-sentinel.k8s.io/bypass-setter";

/// The [`BYPASS_SETTER_PROPERTY`] value (and [`BYPASS_SETTER_ANNOTATION`]) of a setter: its JSON
/// (`{"manager", "time", "user"}`). The one writer of what [`bypass_setter_of`] reads.
pub fn bypass_setter_text(setter: &RememberedSetter) -> Option<String> {
    serde_json::to_string(setter)
        .ok()
        .filter(|text| text.len() <= MAX_WHO_RECORDED_BYTES)
}

/// The setter a [`BYPASS_SETTER_PROPERTY`] value (or [`BYPASS_SETTER_ANNOTATION`]) holds;
/// `None` when it is over its bound, cannot be read or names no user or no time.
pub fn bypass_setter_of(text: &str) -> Option<RememberedSetter> {
    if text.len() > MAX_WHO_RECORDED_BYTES {
        return None;
    }
    serde_json::from_str::<RememberedSetter>(text)
        .ok()
        .filter(|s| !s.user.is_empty() && !s.time.is_empty())
}

/// One of the audit's memory annotations on its Events, and the annotation of its signature:
/// signed and verified as the Report properties are ([`signature::sign_property`] over the
/// annotation's name, the regarded object's uid and the exact text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryAnnotation {
    pub name: &'static str,
    pub signature: &'static str,
}

impl MemoryAnnotation {
    /// What a `DriftDetected` Event remembers: who made the drifted fields.
    pub const WHO_RECORDED: Self = Self {
        name: WHO_RECORDED_ANNOTATION,
        signature: signature::WHO_RECORDED_SIGNATURE_ANNOTATION,
    };
    /// What a `Bypassed` Event remembers: who set the bypass.
    pub const BYPASS_SETTER: Self = Self {
        name: BYPASS_SETTER_ANNOTATION,
        signature: signature::BYPASS_SETTER_SIGNATURE_ANNOTATION,
    };

    /// The memory annotation an audit Event of `reason` carries, if any.
    pub fn of_reason(reason: &str) -> Option<Self> {
        match reason {
            self::reason::DRIFT_DETECTED => Some(Self::WHO_RECORDED),
            self::reason::BYPASSED => Some(Self::BYPASS_SETTER),
            _ => None,
        }
    }

    /// The annotations of the memory `text` of the object `uid`: the text and, with a key, its
    /// signature (without, it is not read back). The one signer of the audit's Event memory.
    pub fn signed(
        self,
        key: Option<&signature::SigningKey>,
        uid: &str,
        text: &str,
    ) -> Vec<(String, String)> {
        let mut annotations = vec![(self.name.to_owned(), text.to_owned())];
        if let Some(key) = key {
            annotations.push((
                self.signature.to_owned(),
                signature::sign_property(key, self.name, uid, text),
            ));
        }
        annotations
    }

    /// The text of this annotation of an Event about the object `uid`: `Ok(None)` when absent
    /// or over [`MAX_WHO_RECORDED_BYTES`], `Err` when it does not carry the installation's
    /// signature over that uid and the exact text. The one verifier of the audit's Event memory.
    fn verified<'e>(
        self,
        annotations: &'e std::collections::BTreeMap<String, String>,
        uid: &str,
        verification: &signature::Verification,
    ) -> Result<Option<&'e str>, Unverified> {
        let Some(text) = annotations
            .get(self.name)
            .filter(|text| text.len() <= MAX_WHO_RECORDED_BYTES)
        else {
            return Ok(None);
        };
        let signature = annotations.get(self.signature).map(String::as_str);
        if verification.property(self.name, uid, text, signature) {
            Ok(Some(text))
        } else {
            Err(Unverified)
        }
    }
}

/// A memory annotation that did not verify ([`MemoryAnnotation::verified`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Unverified;

/// What an audit Event remembers of its object ([`remembered_of_event`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventMemory {
    /// Nothing: another controller's Event, no object uid, no annotation, or one that is over
    /// its bound or holds no recorded attribution (nor setter).
    None,
    /// An annotation without this installation's signature over this object's uid
    /// ([`MemoryAnnotation::signature`]): not read back (whoever may create Events can write
    /// the text).
    Unverified,
    /// The object's uid and its recorded attributions (a `DriftDetected` Event).
    Remembered(String, Vec<Remembered>),
    /// The object's uid and who set its bypass (a `Bypassed` Event).
    Setter(String, RememberedSetter),
}

/// What an audit Event remembers of its object: its recorded attributions
/// ([`WHO_RECORDED_ANNOTATION`]) or who set its bypass ([`BYPASS_SETTER_ANNOTATION`]). Read back
/// only from the audit's Events about an object with a uid, and only with the installation's
/// signature over that uid and the exact text (as [`remembered_of_report`] reads the Report's
/// properties). The audit writes one of the two per Event; who-recorded is read first.
pub fn remembered_of_event(event: &Event, verification: &signature::Verification) -> EventMemory {
    if event.reporting_controller.as_deref() != Some(AUDIT_CONTROLLER) {
        return EventMemory::None;
    }
    let uid = event
        .regarding
        .as_ref()
        .and_then(|r| r.uid.as_deref())
        .filter(|uid| !uid.is_empty());
    let (Some(uid), Some(annotations)) = (uid, event.metadata.annotations.as_ref()) else {
        return EventMemory::None;
    };
    let read = |memory: MemoryAnnotation| memory.verified(annotations, uid, verification);
    match read(MemoryAnnotation::WHO_RECORDED) {
        Err(Unverified) => return EventMemory::Unverified,
        Ok(Some(text)) => {
            return match who_recorded_of(text) {
                Some(recorded) => EventMemory::Remembered(uid.to_owned(), recorded),
                None => EventMemory::None,
            };
        }
        Ok(None) => {}
    }
    match read(MemoryAnnotation::BYPASS_SETTER) {
        Err(Unverified) => EventMemory::Unverified,
        Ok(text) => match text.and_then(bypass_setter_of) {
            Some(setter) => EventMemory::Setter(uid.to_owned(), setter),
            None => EventMemory::None,
        },
    }
}

/// What one Report remembers ([`remembered_of_report`]), by object uid.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReportMemory {
    pub fields: Vec<(String, Vec<Remembered>)>,
    pub setters: Vec<(String, RememberedSetter)>,
    /// Properties left out because they did not carry the installation's signature.
    pub unverified: usize,
}
