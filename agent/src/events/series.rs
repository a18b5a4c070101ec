//! The Events to write, aggregated (reference §6 "Events"): every finding is an [`Intent`]; the
//! repeats of one finding (the same object, reason, user, why and rule) within
//! [`SERIES_WINDOW`] of each other are one Event whose `series.count` says how many, written at
//! most once per [`WRITE_INTERVAL`]. Pure: the writer task ([`super::writer`]) feeds it intents and
//! the time, asks for the writes that are due and reports how they went.
//!
//! Bounded whatever the load: at most [`MAX_SERIES`] series weighing at most [`MAX_SERIES_BYTES`]
//! together, and [`super::setters::MAX_BYPASS_SETTERS`] bypass setters, are kept; a finding
//! that finds no room once the fully written series observed longest ago are forgotten is
//! dropped and counted. Those are kept in order ([`Store::evictable`]), so forgetting one costs
//! O(log n), not a scan.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub use super::setters::BypassSeen;
use super::setters::Setters;
use drift_api::events::signature::{RECORD_SIGNATURE_ANNOTATION, SigningKey, sign_record};
use drift_api::events::{
    AUDIT_MEMORY_LABEL, AUDIT_MEMORY_VERSION, EDITS_ANNOTATION, EditRecord, LAST_DENIED_ANNOTATION,
    MemoryAnnotation, RECORD_LABEL, RECORD_VERSION, RecordedEdit, Why, record_annotation,
};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use serde_json::{Value, json};

/// A repeat within this of the series' last observation joins it; a later one starts a new
/// Event (the same window as client-go's and kube-rs's recorders).
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);
/// A series is written (created, then patched with its count) at most this often.
pub const WRITE_INTERVAL: Duration = Duration::from_secs(10);
/// Series kept at once.
pub const MAX_SERIES: usize = 4096;
/// What the series kept weigh at most together (each [`Series::weigh`]): each holds its latest
/// finding and an edit record of up to 8 edits, so 4,096 of them could otherwise hold ~64 MiB
/// (reference §5 "Memory"). 4,096 ordinary series (a few KiB each) fit; large records bind it.
pub const MAX_SERIES_BYTES: usize = 16 * 1024 * 1024;
/// An Event's `note` is at most 1 KiB.
pub const MAX_NOTE_BYTES: usize = 1000;
/// Longest wait before a failed write is tried again.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Tries of one write before its finding is given up (counted).
pub const MAX_TRIES: u32 = 8;

/// `Normal` or `Warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// The object an Event regards.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Regarding {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// Empty when not known (a rule ConfigMap named by its id).
    pub uid: String,
}

/// How the note of a series is written. The API server keeps an Event's note as created (it is
/// immutable): a series says how many times, and a counted one names its latest finding in the
/// annotation [`LAST_DENIED_ANNOTATION`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// The first finding's text, as it is.
    Latest(String),
    /// Counted on the regarded object (the denials on a rule ConfigMap): `{what}; the first:
    /// {last}` and the latest's `last` in the annotation.
    Counted { what: &'static str, last: String },
}

/// One finding to make an Event of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    pub regarding: Regarding,
    pub type_: EventType,
    pub reason: &'static str,
    pub action: &'static str,
    pub note: Note,
    /// The user the finding is about; part of the series key (empty: any user).
    pub user: String,
    /// The rule (`namespace/name`).
    pub rule: String,
    /// The why and the edit the webhook records for the audit (reference §8 "Who and why").
    pub record: Option<(Why, RecordedEdit)>,
    /// The bypass annotation on the edited object, for an edit under a bypass.
    pub bypass: Option<BypassSeen>,
    /// What else tells this finding's series apart (the audit's drift: its note).
    pub distinct: Option<String>,
    /// What the audit remembers of the object, in the memory annotation of its reason
    /// ([`MemoryAnnotation::of_reason`]: a `DriftDetected` Event's who made the drifted fields,
    /// a `Bypassed` Event's who set the bypass), for a restarted audit without Reports.
    pub memory: Option<String>,
    pub at: SystemTime,
}

impl Intent {
    /// About how many bytes it holds: what counts against the queue's bound.
    pub fn weight(&self) -> usize {
        let regarding = &self.regarding;
        let note = match &self.note {
            Note::Latest(text) => text.len(),
            Note::Counted { last, .. } => last.len(),
        };
        let record = self
            .record
            .as_ref()
            .map_or(0, |(_, edit)| edit_weight(edit));
        std::mem::size_of::<Self>()
            + regarding.api_version.len()
            + regarding.kind.len()
            + regarding.namespace.len()
            + regarding.name.len()
            + regarding.uid.len()
            + note
            + self.user.len()
            + self.rule.len()
            + record
            + self.bypass.as_ref().map_or(0, |b| b.value.len())
            + self.distinct.as_ref().map_or(0, String::len)
            + self.memory.as_ref().map_or(0, String::len)
    }
}

/// About how many bytes one recorded edit holds.
fn edit_weight(edit: &RecordedEdit) -> usize {
    std::mem::size_of::<RecordedEdit>()
        + edit.seen.len()
        + edit.manager.as_ref().map_or(0, String::len)
        + edit.time.as_ref().map_or(0, String::len)
        + edit
            .fields
            .iter()
            .map(|f| {
                std::mem::size_of::<drift_api::events::RecordedField>()
                    + f.path.len()
                    + f.new.as_ref().map_or(0, String::len)
            })
            .sum::<usize>()
}

/// What makes two findings one series.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    regarding: Regarding,
    type_: EventType,
    reason: &'static str,
    user: String,
    rule: String,
    why: Option<String>,
    distinct: Option<String>,
}

/// One Event as it is and as it should be.
#[derive(Debug)]
struct Series {
    latest: Intent,
    /// The note of the first finding: the Event's, which cannot change.
    first_note: Note,
    record: Option<EditRecord>,
    first: SystemTime,
    last: SystemTime,
    count: u32,
    /// The Event's name once created.
    name: Option<String>,
    /// `count` as last written (0: never).
    written: u32,
    written_at: Option<SystemTime>,
    failures: u32,
    retry_at: Option<SystemTime>,
    /// [`Series::weigh`] as last taken: what it counts in the store's `kept_bytes`.
    weight: usize,
    /// Tells apart series observed last at the same time in [`Store::evictable`].
    id: u64,
}

impl Series {
    fn pending(&self) -> bool {
        self.count > self.written
    }

    /// Counts a repeat: the store's `kept_bytes` after it.
    fn join(&mut self, key: &Key, intent: Intent, kept_bytes: usize) -> usize {
        self.count = self.count.saturating_add(1);
        self.last = self.last.max(intent.at);
        if let (Some(record), Some((_, edit))) = (&mut self.record, &intent.record) {
            record.push(edit.clone());
        }
        self.latest = intent;
        let weight = self.weigh(key);
        let kept_bytes = kept_bytes - self.weight + weight;
        self.weight = weight;
        kept_bytes
    }

    /// About how many bytes the series and its key hold.
    fn weigh(&self, key: &Key) -> usize {
        let note = |note: &Note| match note {
            Note::Latest(text) => text.len(),
            Note::Counted { last, .. } => last.len(),
        };
        let strings = |k: &Key| {
            k.regarding.api_version.len()
                + k.regarding.kind.len()
                + k.regarding.namespace.len()
                + k.regarding.name.len()
                + k.regarding.uid.len()
                + k.user.len()
                + k.rule.len()
                + k.why.as_ref().map_or(0, String::len)
                + k.distinct.as_ref().map_or(0, String::len)
        };
        // The record's why is no longer than the key's, its text.
        let record = self.record.as_ref().map_or(0, |r| {
            r.uid.len()
                + r.user.len()
                + r.rule.len()
                + key.why.as_ref().map_or(0, String::len)
                + r.edits.iter().map(edit_weight).sum::<usize>()
        });
        std::mem::size_of::<Key>()
            + std::mem::size_of::<Self>()
            // The key's shared allocation, and its entry in `Store::evictable`.
            + 2 * std::mem::size_of::<usize>()
            + std::mem::size_of::<((SystemTime, u64), Arc<Key>)>()
            + strings(key)
            + self.latest.weight()
            + note(&self.first_note)
            + record
            // Its Event's name once created, `{name}.{nanos:x}`: counted from the start, so
            // that a write never makes it heavier.
            + key.regarding.name.len()
            + 1
            + 32
    }
}

/// A write the writer should make now.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    Create {
        id: WriteId,
        event: Box<Event>,
    },
    /// A JSON merge patch of the Event `name`.
    Patch {
        id: WriteId,
        namespace: String,
        name: String,
        patch: Value,
    },
}

/// Which series a write is of, and the count it writes.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteId {
    key: Arc<Key>,
    count: u32,
}

/// How a write went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Done,
    /// The Event to patch is gone (expired or deleted): the series starts a new one.
    Gone,
    Failed,
}

/// Who writes the Events (`reportingController`, `reportingInstance`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reporter {
    pub controller: &'static str,
    pub instance: String,
    /// Signs each record annotation the webhook writes and each memory annotation the audit
    /// writes (`--record-signing-key`; reference §8 "Trust"): here, on the writer task, never on
    /// the admission answer path.
    pub signing_key: Option<Arc<SigningKey>>,
}

impl Reporter {
    /// The annotations of a record: its text and, with a key, its signature.
    fn record_annotations(&self, record: &EditRecord) -> Option<BTreeMap<String, String>> {
        let text = record_annotation(record)?;
        let mut annotations = BTreeMap::new();
        if let Some(key) = &self.signing_key {
            annotations.insert(
                RECORD_SIGNATURE_ANNOTATION.to_owned(),
                sign_record(key, &text),
            );
        }
        annotations.insert(EDITS_ANNOTATION.to_owned(), text);
        Some(annotations)
    }

    /// The annotations of the audit's memory `memory` of object `uid` in an Event of `reason`:
    /// its text and, with a key, its signature over the uid and the text (reference §8 "Trust";
    /// unsigned, it is not read back). Empty for a reason that carries no memory.
    fn memory_annotations(
        &self,
        reason: &str,
        uid: &str,
        memory: &str,
    ) -> BTreeMap<String, String> {
        MemoryAnnotation::of_reason(reason).map_or_else(BTreeMap::new, |annotation| {
            annotation
                .signed(self.signing_key.as_deref(), uid, memory)
                .into_iter()
                .collect()
        })
    }
}

/// The series being written, and who set the bypasses seen.
#[derive(Debug)]
pub struct Store {
    reporter: Reporter,
    series: HashMap<Arc<Key>, Series>,
    /// The fully written series (no write pending: the ones that may be forgotten), observed
    /// longest ago first, by `(last, id)`: exactly those of `series` whose `pending()` is false.
    evictable: BTreeMap<(SystemTime, u64), Arc<Key>>,
    /// The `id` of the next new series.
    next_id: u64,
    /// The sum of the kept series' weights, at most `max_bytes`.
    kept_bytes: usize,
    /// [`MAX_SERIES`] and [`MAX_SERIES_BYTES`] (smaller in tests, to reach them in few steps).
    max_series: usize,
    max_bytes: usize,
    /// Who set the bypasses seen ([`super::setters`]).
    setters: Setters,
}

impl Store {
    pub fn new(reporter: Reporter) -> Self {
        Self {
            reporter,
            series: HashMap::new(),
            evictable: BTreeMap::new(),
            next_id: 0,
            kept_bytes: 0,
            max_series: MAX_SERIES,
            max_bytes: MAX_SERIES_BYTES,
            setters: Setters::default(),
        }
    }

    /// Adds a finding: to its series, or as a new one. False when there is no room for it, in
    /// number or in bytes, once the fully written series observed longest ago are forgotten
    /// (the rest have writes pending): the caller counts it as dropped.
    pub fn observe(&mut self, mut intent: Intent) -> bool {
        if let Some(bypass) = &intent.bypass {
            let setter =
                self.setters
                    .observe(&intent.regarding.uid, &intent.user, bypass, intent.at);
            if let Some((Why::Bypass { set_by, .. }, _)) = &mut intent.record
                && set_by.is_none()
            {
                *set_by = setter;
                if let (Some(setter), Note::Latest(note)) = (set_by.as_ref(), &mut intent.note) {
                    note.push_str(&format!("; the bypass was set by {setter}"));
                }
            }
        }
        let key = Key {
            regarding: intent.regarding.clone(),
            type_: intent.type_,
            reason: intent.reason,
            user: intent.user.clone(),
            rule: intent.rule.clone(),
            why: intent.record.as_ref().map(|(why, _)| why.to_string()),
            distinct: intent.distinct.clone(),
        };
        let at = intent.at;
        let series_kept = self.series.len();
        if let Some(series) = self.series.get_mut(&key)
            && at.duration_since(series.last).unwrap_or(Duration::ZERO) <= SERIES_WINDOW
        {
            // At most: the latest finding replaced, one edit more in the record.
            let bound = series.weight - series.latest.weight()
                + intent.weight()
                + intent
                    .record
                    .as_ref()
                    .map_or(0, |(_, edit)| edit_weight(edit));
            // A repeat of a series with writes pending (in no eviction order, before or after)
            // that fits as things are, as most of a flood do, joins without another lookup.
            if series.pending()
                && series_kept <= self.max_series
                && self.kept_bytes - series.weight + bound <= self.max_bytes
            {
                self.kept_bytes = series.join(&key, intent, self.kept_bytes);
                return true;
            }
            if !self.make_room(&key, bound) {
                return false;
            }
            let kept_bytes = self.kept_bytes;
            let Some(kept_bytes) =
                self.change(&key, |series| series.join(&key, intent, kept_bytes))
            else {
                return false;
            };
            self.kept_bytes = kept_bytes;
            return true;
        }
        let record = intent.record.as_ref().map(|(why, edit)| EditRecord {
            v: RECORD_VERSION,
            uid: intent.regarding.uid.clone(),
            user: drift_engine::attribution::bounded_user(&intent.user),
            why: why.clone(),
            rule: intent.rule.clone(),
            edits: vec![edit.clone()],
            omitted: 0,
        });
        let mut series = Series {
            first_note: intent.note.clone(),
            latest: intent,
            record,
            first: at,
            last: at,
            count: 1,
            name: None,
            written: 0,
            written_at: None,
            failures: 0,
            retry_at: None,
            weight: 0,
            id: self.next_id,
        };
        self.next_id += 1;
        series.weight = series.weigh(&key);
        if !self.make_room(&key, series.weight) {
            return false;
        }
        // A series past its window starts a new Event (the new one is pending: not evictable).
        self.forget(&key);
        self.kept_bytes += series.weight;
        self.series.insert(Arc::new(key), series);
        true
    }

    /// Applies `change` to the series `key`, keeping [`Store::evictable`] in step with it.
    fn change<R>(&mut self, key: &Key, change: impl FnOnce(&mut Series) -> R) -> Option<R> {
        let (shared, series) = self.series.get_key_value(key)?;
        let shared = Arc::clone(shared);
        if !series.pending() {
            self.evictable.remove(&(series.last, series.id));
        }
        let series = self.series.get_mut(key)?;
        let result = change(series);
        if !series.pending() {
            self.evictable.insert((series.last, series.id), shared);
        }
        Some(result)
    }

    /// Makes room for the series `key` to weigh `weight` (what it weighs now given back):
    /// forgets the fully written series observed longest ago, other than it, until it fits
    /// [`MAX_SERIES`] and [`MAX_SERIES_BYTES`]. False when it cannot.
    fn make_room(&mut self, key: &Key, weight: usize) -> bool {
        loop {
            let (added, current) = self.series.get(key).map_or((1, 0), |s| (0, s.weight));
            if self.series.len() + added <= self.max_series
                && self.kept_bytes - current + weight <= self.max_bytes
            {
                return true;
            }
            // At most one entry (the series `key` itself) is passed over.
            let oldest = self
                .evictable
                .values()
                .find(|k| k.as_ref() != key)
                .map(Arc::clone);
            let Some(oldest) = oldest else {
                return false;
            };
            self.forget(&oldest);
        }
    }

    fn forget(&mut self, key: &Key) {
        if let Some(series) = self.series.remove(key) {
            self.kept_bytes -= series.weight;
            if !series.pending() {
                self.evictable.remove(&(series.last, series.id));
            }
        }
    }

    /// The writes due at `now`: a new series at once, a repeat once [`WRITE_INTERVAL`] has
    /// passed since its Event was last written, a failed write at its retry time. Fully
    /// written series past their window are forgotten.
    pub fn due(&mut self, now: SystemTime) -> Vec<Write> {
        // The fully written series, observed longest ago first: forgotten until one is within
        // its window.
        while let Some(((last, _), key)) = self.evictable.first_key_value()
            && now.duration_since(*last).unwrap_or(Duration::ZERO) > SERIES_WINDOW
        {
            let key = Arc::clone(key);
            self.forget(&key);
        }
        let mut writes = Vec::new();
        for (key, series) in &self.series {
            let ready = series.pending()
                && series.retry_at.is_none_or(|t| t <= now)
                && series.written_at.is_none_or(|t| {
                    now.duration_since(t).unwrap_or(Duration::ZERO) >= WRITE_INTERVAL
                });
            if !ready {
                continue;
            }
            let id = WriteId {
                key: key.clone(),
                count: series.count,
            };
            writes.push(match &series.name {
                None => Write::Create {
                    id,
                    event: Box::new(self.event(series)),
                },
                Some(name) => Write::Patch {
                    id,
                    namespace: key.regarding.namespace.clone(),
                    name: name.clone(),
                    patch: self.patch(series),
                },
            });
        }
        writes
    }

    /// Records how a write went. Returns true when a finding was given up (after
    /// [`MAX_TRIES`]), for the caller to count.
    pub fn written(&mut self, write: &Write, outcome: Outcome, now: SystemTime) -> bool {
        let (id, created) = match write {
            Write::Create { id, event } => (id, event.metadata.name.clone()),
            Write::Patch { id, .. } => (id, None),
        };
        self.change(&id.key, |series| {
            Self::apply(series, id.count, created, outcome, now)
        })
        .unwrap_or(false)
    }

    /// [`Store::written`] for one series.
    fn apply(
        series: &mut Series,
        count: u32,
        created: Option<String>,
        outcome: Outcome,
        now: SystemTime,
    ) -> bool {
        match outcome {
            Outcome::Done => {
                if created.is_some() {
                    series.name = created;
                }
                series.written = series.written.max(count);
                series.written_at = Some(now);
                series.failures = 0;
                series.retry_at = None;
                false
            }
            Outcome::Gone => {
                // Created again with its whole count.
                series.name = None;
                series.written_at = None;
                series.written = 0;
                false
            }
            Outcome::Failed => {
                series.failures += 1;
                if series.failures >= MAX_TRIES {
                    // Given up: what it counted so far is lost; later repeats try again.
                    series.written = series.count;
                    series.failures = 0;
                    series.retry_at = None;
                    return true;
                }
                let backoff = Duration::from_secs(1 << series.failures.min(6)).min(MAX_BACKOFF);
                series.retry_at = Some(now + backoff);
                false
            }
        }
    }

    /// The Event of a series, as first created.
    fn event(&self, series: &Series) -> Event {
        let intent = &series.latest;
        let regarding = &intent.regarding;
        let nanos = series
            .first
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let mut metadata = ObjectMeta {
            namespace: Some(regarding.namespace.clone()),
            name: Some(format!("{}.{nanos:x}", regarding.name)),
            ..ObjectMeta::default()
        };
        if let Some(annotations) = series
            .record
            .as_ref()
            .and_then(|r| self.reporter.record_annotations(r))
        {
            metadata.labels =
                Some([(RECORD_LABEL.to_owned(), format!("v{RECORD_VERSION}"))].into());
            metadata.annotations = Some(annotations);
        }
        if let Note::Counted { last, .. } = &intent.note {
            metadata.annotations =
                Some([(LAST_DENIED_ANNOTATION.to_owned(), bounded(last))].into());
        }
        if let Some(memory) = &intent.memory {
            metadata.labels = Some(
                [(
                    AUDIT_MEMORY_LABEL.to_owned(),
                    AUDIT_MEMORY_VERSION.to_owned(),
                )]
                .into(),
            );
            metadata.annotations = Some(self.reporter.memory_annotations(
                intent.reason,
                &regarding.uid,
                memory,
            ));
        }
        Event {
            metadata,
            action: Some(intent.action.to_owned()),
            reason: Some(intent.reason.to_owned()),
            type_: Some(intent.type_.as_str().to_owned()),
            note: Some(self.note(series)),
            event_time: Some(micro_time(series.first)),
            series: series_of(series),
            regarding: Some(ObjectReference {
                api_version: Some(regarding.api_version.clone()),
                kind: Some(regarding.kind.clone()),
                namespace: Some(regarding.namespace.clone()),
                name: Some(regarding.name.clone()),
                uid: (!regarding.uid.is_empty()).then(|| regarding.uid.clone()),
                ..ObjectReference::default()
            }),
            reporting_controller: Some(self.reporter.controller.to_owned()),
            reporting_instance: Some(self.reporter.instance.clone()),
            ..Event::default()
        }
    }

    /// The merge patch that brings a created Event up to date: its series and the annotation
    /// of the latest finding (the rest of an Event cannot change).
    fn patch(&self, series: &Series) -> Value {
        let mut patch = json!({"series": series_of(series)});
        if let Some(annotations) = series
            .record
            .as_ref()
            .and_then(|r| self.reporter.record_annotations(r))
        {
            patch["metadata"] = json!({ "annotations": annotations });
        }
        if let Note::Counted { last, .. } = &series.latest.note {
            patch["metadata"] = json!({"annotations": {LAST_DENIED_ANNOTATION: bounded(last)}});
        }
        // What the audit remembers now of the object (null: nothing any more, and no signature).
        if let Some(annotation) = MemoryAnnotation::of_reason(series.latest.reason) {
            let memory = series.latest.memory.as_ref();
            let mut annotations = json!({
                annotation.name: null,
                annotation.signature: null,
            });
            if let Some(memory) = memory {
                for (name, value) in self.reporter.memory_annotations(
                    series.latest.reason,
                    &series.latest.regarding.uid,
                    memory,
                ) {
                    annotations[name] = Value::String(value);
                }
            }
            patch["metadata"] = json!({
                "labels": {AUDIT_MEMORY_LABEL: memory.map(|_| AUDIT_MEMORY_VERSION)},
                "annotations": annotations,
            });
        }
        patch
    }

    /// The note of the Event as created: the first finding's.
    fn note(&self, series: &Series) -> String {
        let text = match &series.first_note {
            Note::Latest(text) => text.clone(),
            Note::Counted { what, last } => format!(
                "{what}; the first: {last}; series.count counts them, annotation {LAST_DENIED_ANNOTATION} names the last"
            ),
        };
        drift_engine::truncate::truncate_bytes(&text, MAX_NOTE_BYTES)
    }
}

fn bounded(text: &str) -> String {
    drift_engine::truncate::truncate_bytes(text, MAX_NOTE_BYTES)
}

fn series_of(series: &Series) -> Option<EventSeries> {
    (series.count > 1).then(|| EventSeries {
        count: i32::try_from(series.count).unwrap_or(i32::MAX),
        last_observed_time: micro_time(series.last),
    })
}

fn micro_time(at: SystemTime) -> MicroTime {
    let timestamp = k8s_openapi::jiff::Timestamp::try_from(at)
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    MicroTime(timestamp)
}

#[cfg(test)]
#[path = "series_tests.rs"]
mod tests;
