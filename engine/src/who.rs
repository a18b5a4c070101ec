//! One audit run's "who and why" (reference §8 "Who and why"), the same for the agent's audit,
//! `kubectl drift audit` and `kubectl drift blame`: the webhook's records of edits by object
//! uid, what an earlier run (or the audit's last Report) remembered, whether the webhook
//! configuration sends an object's UPDATEs to the webhook, and since when the records have been
//! read. Each drifted object is joined with them ([`crate::attribution::attribute_drift`]), each
//! bypass with who set it ([`crate::attribution::bypass_setter`]); what was attributed from a
//! record is kept for the next run ([`RunEvidence::finish`]). Pure: the callers read the
//! records, the configuration and the labels, and pass them in.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::attribution::{Coverage, Evidence, Remembered, Unverified, attribute_drift};
use crate::audit::{AuditedObject, BypassFinding};
use crate::webhook_scope::{Interception, Target, interception_by};
use drift_api::events::signature::Verification;
use drift_api::events::{
    AUDIT_MEMORY_LABEL, AUDIT_MEMORY_VERSION, Event, EventMemory, FieldAttribution, Records,
};

/// Objects whose attributions (and bypass setters) are remembered at most.
pub const MAX_REMEMBERED_OBJECTS: usize = 100_000;
/// Bytes the remembered attributions and bypass setters take at most (counted by
/// [`weight`]): past it, what a run attributes is reported but not remembered.
pub const MAX_REMEMBERED_BYTES: usize = 16 * 1024 * 1024;

/// What one object's remembered attributions take in memory, within a fixed allowance per
/// entry for the map, the why and its texts (a recorded why holds at most a bypass's end and
/// setter, each bounded).
fn weight(uid: &str, remembered: &[Remembered]) -> usize {
    const PER_ENTRY: usize = 640;
    uid.len()
        + remembered
            .iter()
            .map(|r| {
                let a = &r.attribution;
                PER_ENTRY
                    + r.path.len()
                    + r.value.len()
                    + a.user.as_ref().map_or(0, String::len)
                    + a.rule.as_ref().map_or(0, String::len)
                    + a.seen.as_ref().map_or(0, String::len)
            })
            .sum::<usize>()
}

fn setter_weight(uid: &str, setter: &BypassSetter) -> usize {
    128 + uid.len() + setter.manager.len() + setter.time.len() + setter.user.len()
}
/// Drifted fields attributed per object.
pub const MAX_ATTRIBUTED_FIELDS: usize = crate::message::MAX_DETAILED_CHANGES;

/// Namespaces whose labels are read per run at most (pages of 500); an object of another
/// namespace is judged with its namespace's labels not known.
pub const MAX_NAMESPACES: usize = 50_000;
/// A namespace with more labels than this is judged with its labels not known (the API server
/// takes any number).
pub const MAX_LABELS_PER_NAMESPACE: usize = 256;

/// The one reader of the namespaces' labels for [`WebhookScope::Read`], for the agent's audit
/// and the plugin alike: fed each namespace as the caller lists them, it keeps the labels of the
/// first [`MAX_NAMESPACES`] by name. Pure: the caller does the HTTP.
#[derive(Debug, Default)]
pub struct NamespaceLabels {
    labels: HashMap<String, Map<String, Value>>,
}

impl NamespaceLabels {
    /// Whether no more namespaces are kept (the caller stops listing).
    pub fn is_full(&self) -> bool {
        self.labels.len() >= MAX_NAMESPACES
    }

    /// Adds a namespace's labels. Over [`MAX_LABELS_PER_NAMESPACE`] none are kept: some labels
    /// only would be a wrong answer, none is "not known".
    pub fn add(&mut self, name: &str, labels: Map<String, Value>) {
        if self.is_full() || labels.len() > MAX_LABELS_PER_NAMESPACE {
            return;
        }
        self.labels.insert(name.to_owned(), labels);
    }

    /// The labels read, by namespace name.
    pub fn into_map(self) -> HashMap<String, Map<String, Value>> {
        self.labels
    }
}

/// Reports read back per run at most: one per namespace and the ClusterReport. Each is read
/// whole (up to 1 MiB); what it remembers is kept within [`MAX_REMEMBERED_BYTES`].
pub const MAX_REPORTS: usize = MAX_NAMESPACES + 1;

/// The one reader of what the audit's Reports remember ([`Memory::of_reports`]), for the
/// agent's audit and the plugin alike: fed each page of Reports (as JSON) as the caller lists
/// them, it keeps what they remember within [`MAX_REMEMBERED_BYTES`] and stops wanting more
/// past [`MAX_REPORTS`] or when full. Pure: the caller does the HTTP.
#[derive(Debug)]
pub struct ReportReader {
    verification: Verification,
    memory: Memory,
    bytes: usize,
    reports: usize,
    unverified: usize,
}

impl ReportReader {
    /// `verification`: a property is read back only with the installation's signature.
    pub fn new(verification: Verification) -> Self {
        Self {
            verification,
            memory: Memory::default(),
            bytes: 0,
            reports: 0,
            unverified: 0,
        }
    }

    /// The properties left out because they did not carry the installation's signature.
    pub fn unverified(&self) -> usize {
        self.unverified
    }

    /// Whether the caller should stop listing: [`MAX_REPORTS`] read, or the memory full.
    pub fn is_full(&self) -> bool {
        self.reports >= MAX_REPORTS || self.bytes >= MAX_REMEMBERED_BYTES
    }

    /// Adds a page of Reports (the first of them up to [`MAX_REPORTS`]).
    pub fn add_page<'r>(&mut self, reports: impl IntoIterator<Item = &'r Value>) {
        for report in reports {
            if self.reports >= MAX_REPORTS {
                return;
            }
            self.reports += 1;
            let found = drift_api::events::remembered_of_report(report, &self.verification);
            self.unverified += found.unverified;
            self.bytes = self.memory.fill_counted(
                Memory {
                    fields: found.fields.into_iter().collect(),
                    setters: found.setters.into_iter().collect(),
                },
                self.bytes,
            );
        }
    }

    /// What the Reports read remember.
    pub fn into_memory(self) -> Memory {
        self.memory
    }
}

/// More of the audit's memory Events than the reader holds ([`MAX_REMEMBERED_OBJECTS`] Events,
/// or [`MAX_REMEMBERED_BYTES`] of their annotations): none is read back, since a page left
/// unread could hold an object's later Event, and an earlier one would then be taken for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "more than {MAX_REMEMBERED_OBJECTS} of the audit's memory Events (labelled {AUDIT_MEMORY_LABEL}={AUDIT_MEMORY_VERSION}), or more than {MAX_REMEMBERED_BYTES} bytes of their annotations: none was read back"
)]
pub struct TooManyMemoryEvents;

/// The one reader of what the audit's Events (labelled [`AUDIT_MEMORY_LABEL`]) remember, for
/// the agent's audit and the plugin alike: fed each page as the caller lists them, it keeps, by
/// object uid, who made the drifted fields (`DriftDetected`) and who set the bypass
/// (`Bypassed`), of several Events of one object the one observed last, and counts the
/// annotations without the installation's signature over their object's uid (not read back).
/// Pure: the caller does the HTTP.
#[derive(Debug)]
pub struct MemoryEventReader {
    verification: Verification,
    fields: Latest<Vec<Remembered>>,
    setters: Latest<BypassSetter>,
    read: usize,
    bytes: usize,
    unverified: usize,
}

impl MemoryEventReader {
    /// `verification`: an annotation is read back only with the installation's signature.
    pub fn new(verification: Verification) -> Self {
        Self {
            verification,
            fields: Latest::default(),
            setters: Latest::default(),
            read: 0,
            bytes: 0,
            unverified: 0,
        }
    }

    /// Adds a page; `more`: whether the API server has another page (its `continue`). Past
    /// [`MAX_REMEMBERED_OBJECTS`] Events with more to read (or in one page), or past
    /// [`MAX_REMEMBERED_BYTES`] of annotations, nothing is kept: [`TooManyMemoryEvents`].
    pub fn add_page(&mut self, events: &[Event], more: bool) -> Result<(), TooManyMemoryEvents> {
        self.read = self.read.saturating_add(events.len());
        if self.read > MAX_REMEMBERED_OBJECTS || (more && self.read >= MAX_REMEMBERED_OBJECTS) {
            return Err(self.overflow());
        }
        for event in events {
            let memory = drift_api::events::remembered_of_event(event, &self.verification);
            if memory == EventMemory::None {
                continue;
            }
            self.bytes += event
                .metadata
                .annotations
                .as_ref()
                .map_or(0, |a| a.values().map(String::len).sum());
            if self.bytes > MAX_REMEMBERED_BYTES {
                return Err(self.overflow());
            }
            // RFC 3339 times in UTC order as text.
            let observed = event
                .series
                .as_ref()
                .map(|s| &s.last_observed_time)
                .or(event.event_time.as_ref())
                .map(|t| t.0.to_string());
            match memory {
                EventMemory::Remembered(uid, remembered) => {
                    self.fields.keep(uid, observed, remembered);
                }
                EventMemory::Setter(uid, setter) => self.setters.keep(uid, observed, setter),
                EventMemory::Unverified => self.unverified += 1,
                EventMemory::None => {}
            }
        }
        Ok(())
    }

    /// Forgets what was read: with Events left unread, the last observed is not known.
    fn overflow(&mut self) -> TooManyMemoryEvents {
        self.fields = Latest::default();
        self.setters = Latest::default();
        TooManyMemoryEvents
    }

    /// The annotations left out because they did not carry the installation's signature.
    pub fn unverified(&self) -> usize {
        self.unverified
    }

    /// What the Events read remember, within the memory's bounds.
    pub fn into_memory(self) -> Memory {
        let mut memory = Memory::default();
        memory.fill_from(Memory {
            fields: self.fields.into_map(),
            setters: self.setters.into_map(),
        });
        memory
    }
}

/// Of several Events of one object, what the one observed last remembers.
#[derive(Debug)]
struct Latest<T>(HashMap<String, (Option<String>, T)>);

impl<T> Default for Latest<T> {
    fn default() -> Self {
        Self(HashMap::new())
    }
}

impl<T> Latest<T> {
    fn keep(&mut self, uid: String, observed: Option<String>, value: T) {
        match self.0.get(&uid) {
            Some((seen, _)) if *seen >= observed => {}
            _ => {
                self.0.insert(uid, (observed, value));
            }
        }
    }

    fn into_map(self) -> HashMap<String, T> {
        self.0
            .into_iter()
            .map(|(uid, (_, value))| (uid, value))
            .collect()
    }
}

/// What tells whether the webhook is sent an object's UPDATEs: the drift-sentinel webhook
/// configurations and the namespaces' labels as read for a run, or why that cannot be told.
#[derive(Debug, Clone)]
pub enum WebhookScope {
    Read {
        configurations: Vec<Value>,
        /// By namespace name; `None`: the labels could not be read.
        namespace_labels: Option<HashMap<String, Map<String, Value>>>,
    },
    Unknown(String),
}

impl WebhookScope {
    /// Whether the configurations send UPDATEs of the audited object to the webhook.
    pub fn of(&self, identity: &AuditedObject<'_>) -> Interception {
        let (configurations, namespace_labels) = match self {
            WebhookScope::Read {
                configurations,
                namespace_labels,
            } => (configurations, namespace_labels),
            WebhookScope::Unknown(why) => return Interception::Unknown(why.clone()),
        };
        let (group, version) = identity
            .api_version
            .split_once('/')
            .unwrap_or(("", identity.api_version));
        interception_by(
            configurations,
            &Target {
                group,
                version,
                resource: identity.resource,
                namespace: identity.namespace,
                namespace_labels: namespace_labels
                    .as_ref()
                    .and_then(|labels| labels.get(identity.namespace)),
                object_labels: Some(identity.labels),
            },
        )
    }
}

/// Who set a bypass annotation: the managedFields entry owning it (manager, time), and the user.
pub use drift_api::events::RememberedSetter as BypassSetter;

/// What runs keep of what they attributed from records, by object uid.
#[derive(Debug, Clone, Default)]
pub struct Memory {
    pub fields: HashMap<String, Vec<Remembered>>,
    pub setters: HashMap<String, BypassSetter>,
}

impl Memory {
    /// The bytes this memory takes, as [`MAX_REMEMBERED_BYTES`] counts them.
    pub fn bytes(&self) -> usize {
        self.fields
            .iter()
            .map(|(uid, r)| weight(uid, r))
            .sum::<usize>()
            + self
                .setters
                .iter()
                .map(|(uid, s)| setter_weight(uid, s))
                .sum::<usize>()
    }
}

impl Memory {
    /// What the audit's Reports (as JSON, `openreports.io` `Report`s and `ClusterReport`s
    /// written by the audit) remember ([`drift_api::events::remembered_of_report`]): how a
    /// restarted audit, `kubectl drift audit` and `kubectl drift blame` know what an earlier
    /// run attributed after the records' Events expired.
    pub fn of_reports<'r>(
        reports: impl IntoIterator<Item = &'r Value>,
        verification: &Verification,
    ) -> Self {
        let mut reader = ReportReader::new(verification.clone());
        reader.add_page(reports);
        reader.into_memory()
    }

    /// Adds what `other` has of objects this memory has nothing of (within the bounds).
    pub fn fill_from(&mut self, other: Memory) {
        let bytes = self.bytes();
        self.fill_counted(other, bytes);
    }

    /// [`Self::fill_from`] for a memory of `bytes` bytes; what it takes then.
    fn fill_counted(&mut self, other: Memory, mut bytes: usize) -> usize {
        for (uid, remembered) in other.fields {
            let w = weight(&uid, &remembered);
            if self.fields.len() >= MAX_REMEMBERED_OBJECTS || bytes + w > MAX_REMEMBERED_BYTES {
                continue;
            }
            if let std::collections::hash_map::Entry::Vacant(entry) = self.fields.entry(uid) {
                entry.insert(remembered);
                bytes += w;
            }
        }
        for (uid, setter) in other.setters {
            let w = setter_weight(&uid, &setter);
            if self.setters.len() >= MAX_REMEMBERED_OBJECTS || bytes + w > MAX_REMEMBERED_BYTES {
                continue;
            }
            if let std::collections::hash_map::Entry::Vacant(entry) = self.setters.entry(uid) {
                entry.insert(setter);
                bytes += w;
            }
        }
        bytes
    }
}

/// One drifted object's attributions: what is reported, and what of it was taken from a
/// record (with the fingerprint of the value it is about), which is what may be remembered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributions {
    pub fields: Vec<FieldAttribution>,
    pub recorded: Vec<Remembered>,
}

/// What one run joins drifted objects with.
#[derive(Debug)]
pub struct RunEvidence {
    records: Records,
    coverage: Result<Coverage, String>,
    remembered: Memory,
    next: Memory,
    /// The bytes `next` takes ([`weight`]), within [`MAX_REMEMBERED_BYTES`].
    next_bytes: usize,
    scope: WebhookScope,
}

impl RunEvidence {
    /// `records`: the webhook's records by object uid (empty when they could not be read, and
    /// then `coverage` says why); `remembered`: what earlier runs attributed.
    pub fn new(
        records: Records,
        coverage: Result<Coverage, String>,
        remembered: Memory,
        scope: WebhookScope,
    ) -> Self {
        Self {
            records,
            coverage,
            remembered,
            next: Memory::default(),
            next_bytes: 0,
            scope,
        }
    }

    /// What an audited object shows of who and why: who set its bypass annotation (filled into
    /// `audit.bypass`), and, when it drifted, who made each drifted field and why. The agent's
    /// audit and `kubectl drift audit` call this for each object they judge.
    pub fn judge(
        &mut self,
        object: &Value,
        identity: &AuditedObject<'_>,
        audit: &mut crate::Audit<'_>,
    ) -> Attributions {
        if let Some(bypass) = &mut audit.bypass {
            match self.bypass_setter(identity.uid, bypass) {
                Ok(user) => bypass.user = Some(user),
                Err(why) => bypass.user_unknown = Some(why),
            }
        }
        let attributions = if audit.is_drifted() {
            self.attribute(object, identity, audit)
        } else {
            Attributions::default()
        };
        // This run reached the object: what it found of it now is all the next run keeps
        // ([`Self::finish`] brings back only what was remembered of objects not reached), so
        // a field that stopped drifting, or whose value changed, is not remembered again.
        self.remembered.fields.remove(identity.uid);
        self.remembered.setters.remove(identity.uid);
        attributions
    }

    /// Who made each drifted field of `object` and why (the first [`MAX_ATTRIBUTED_FIELDS`]).
    pub fn attribute(
        &mut self,
        object: &Value,
        identity: &AuditedObject<'_>,
        audit: &crate::Audit<'_>,
    ) -> Attributions {
        let interception = self.scope.of(identity);
        let uid = identity.uid;
        let evidence = Evidence {
            records: self.records.verified.get(uid).map_or(&[], Vec::as_slice),
            unverified: Unverified {
                records: self.records.unverified.get(uid).map_or(&[], Vec::as_slice),
                why: &self.records.unverified_why,
            },
            remembered: self.remembered.fields.get(uid).map_or(&[], Vec::as_slice),
            interception: &interception,
            coverage: self.coverage.as_ref().copied().map_err(String::as_str),
        };
        let mut out = Attributions::default();
        for (change, attributed) in
            attribute_drift(object, audit.changes(), &evidence, MAX_ATTRIBUTED_FIELDS)
        {
            out.recorded
                .extend(attributed.remember(&change.change.path));
            out.fields.push(FieldAttribution {
                path: change.path.clone(),
                attribution: attributed.attribution,
            });
        }
        let w = weight(uid, &out.recorded);
        if !out.recorded.is_empty()
            && !uid.is_empty()
            && self.next.fields.len() < MAX_REMEMBERED_OBJECTS
            && self.next_bytes + w <= MAX_REMEMBERED_BYTES
            && self
                .next
                .fields
                .insert(uid.to_owned(), out.recorded.clone())
                .is_none()
        {
            self.next_bytes += w;
        }
        out
    }

    /// Who set the bypass annotation of the object `uid`: the user of the webhook's record of
    /// the edit that wrote the managedFields entry owning it now, else what an earlier run found
    /// for that same entry (kept after the record's Event expires). `Err`: why it is not known.
    pub fn bypass_setter(
        &mut self,
        uid: &str,
        bypass: &BypassFinding<'_>,
    ) -> Result<String, String> {
        let Some(entry) = bypass.set_by.as_ref() else {
            return Err("no managedFields entry owns the annotation".to_owned());
        };
        let manager: &str = &entry.manager;
        let Some(time) = entry.time.as_deref() else {
            return Err(format!(
                "the annotation's managedFields entry ({manager}) has no time to find the webhook's record by"
            ));
        };
        let records = self
            .records
            .verified
            .get(uid)
            .map_or(&[][..], Vec::as_slice);
        let found = crate::attribution::bypass_setter(records, manager, time)
            .map(str::to_owned)
            .or_else(|| {
                self.remembered
                    .setters
                    .get(uid)
                    .filter(|s| s.manager == manager && s.time == time)
                    .map(|s| s.user.clone())
            });
        let Some(found) = found else {
            return Err(match &self.coverage {
                Err(reason) => crate::attribution::records_unread(reason),
                Ok(_) => crate::attribution::bypass_setter_unknown(records, manager, time),
            });
        };
        let setter = BypassSetter {
            manager: manager.to_owned(),
            time: time.to_owned(),
            user: found.clone(),
        };
        let w = setter_weight(uid, &setter);
        if !uid.is_empty()
            && self.next.setters.len() < MAX_REMEMBERED_OBJECTS
            && self.next_bytes + w <= MAX_REMEMBERED_BYTES
            && self.next.setters.insert(uid.to_owned(), setter).is_none()
        {
            self.next_bytes += w;
        }
        Ok(found)
    }

    /// What the next run remembers: what this run attributed from records; a run that did not
    /// see every object also keeps what was remembered of the objects it did not reach
    /// ([`Self::judge`] forgets what was remembered of each object it judges).
    pub fn finish(self, complete: bool) -> Memory {
        let mut next = self.next;
        if !complete {
            next.fill_from(self.remembered);
        }
        next
    }
}

#[cfg(test)]
#[path = "who_tests.rs"]
mod tests;
