//! What the agent knows of the rule ConfigMaps in the cluster, kept apart from any HTTP so
//! that it can be tested by feeding it watch events: each event (and each finished fetch of a
//! ConfigMap's data) is turned into "the rule set changed", "fetch the data of these
//! ConfigMaps" and "forget these".
//!
//! The ConfigMap watch is metadata only. Only ConfigMaps carrying the rule annotation enter
//! the index's reflector store (so memory does not grow with the other ConfigMaps); a relist
//! is buffered by that store and reconciled against the index when it completes, so requests
//! never see a half-listed rule set.
//!
//! Last good version kept (reference §2): the engine compiles every version read; a rule whose new
//! version is invalid (or cannot be read) keeps being enforced in its last valid version,
//! marked stale, while its `InvalidRule` Event is still emitted; a rule that was never valid is
//! not applied. Last valid versions from the agent's last-good ConfigMap count only for a
//! ConfigMap of the same uid.

use std::collections::{BTreeMap, HashSet};
use std::time::SystemTime;

use drift_engine::rule::is_rule_annotation;
use drift_engine::{RuleError, RuleId, RuleSource};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::Store;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;

use crate::last_good::{LastGood, LastGoodMap};
use crate::state::StaleRule;

/// ConfigMap metadata as the watch delivers it.
pub type ConfigMapMeta = PartialObjectMeta<ConfigMap>;

/// What one event (or finished fetch) means for the rule set.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// The rule set to serve may differ: build and install a new snapshot.
    pub changed: bool,
    /// ConfigMaps whose data must be fetched (a new one, or a new version).
    pub fetch: Vec<RuleId>,
    /// ConfigMaps no longer rules (deleted, or the annotation removed).
    pub forgotten: Vec<RuleId>,
}

impl Changes {
    fn merge(&mut self, other: Changes) {
        self.changed |= other.changed;
        self.fetch.extend(other.fetch);
        self.forgotten.extend(other.forgotten);
    }
}

/// One fetch to make: the ConfigMap and the uid it must still have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    pub id: RuleId,
    pub uid: String,
}

/// A ConfigMap's data as read from the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedRule {
    pub uid: String,
    pub resource_version: String,
    /// `data.spec`; `None` when the ConfigMap has none.
    pub spec: Option<String>,
}

/// The data of one version of a rule ConfigMap, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ReadVersion {
    resource_version: String,
    spec: Option<String>,
}

#[derive(Debug, Clone)]
struct Entry {
    uid: String,
    /// The newest resourceVersion known (from the watch, or from a fetch).
    seen: String,
    /// The last version whose data could be read: the one in force.
    read: Option<ReadVersion>,
    /// Why the last fetch failed, until one succeeds.
    read_error: Option<String>,
    /// A fetch is running, started when the watch had shown this resourceVersion.
    fetching: Option<String>,
    /// Why the version read is invalid (the engine's verdict).
    invalid: Option<RuleError>,
    /// The last valid version of this ConfigMap.
    last_good: Option<LastGood>,
    /// Since when the last good version is served instead of a newer one.
    stale_since: Option<SystemTime>,
}

impl Entry {
    fn new(uid: String, seen: String, last_good: Option<LastGood>) -> Self {
        Self {
            uid,
            seen,
            read: None,
            read_error: None,
            fetching: None,
            invalid: None,
            last_good,
            stale_since: None,
        }
    }

    /// Why the newest version is not what is served, when it is not: it is invalid, or it
    /// cannot be read.
    fn stale_reason(&self) -> Option<String> {
        self.last_good.as_ref()?;
        match (&self.read, &self.invalid, &self.read_error) {
            (Some(_), Some(invalid), _) => Some(invalid.to_string()),
            (_, _, Some(reason)) => Some(reason.clone()),
            _ => None,
        }
    }

    /// The version in force is not the newest known one.
    fn behind(&self) -> bool {
        self.read
            .as_ref()
            .is_none_or(|read| read.resource_version != self.seen)
    }
}

/// An invalid rule ConfigMap version not yet given its `InvalidRule` Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidVersion {
    pub error: RuleError,
    pub uid: String,
    pub resource_version: String,
}

/// What a snapshot is built from.
#[derive(Debug, Default)]
pub struct Sources {
    /// The version of each rule to serve.
    pub rules: Vec<RuleSource>,
    /// Rule ConfigMaps that could not be read, with nothing to serve in their place.
    pub unreadable: Vec<(RuleId, String)>,
    /// Rules served in their last good version.
    pub stale: Vec<StaleRule>,
}

/// Rule ConfigMaps: what is known of each, and what must be fetched.
pub struct RuleIndex {
    /// The watch's view of the rule ConfigMaps (metadata); buffers relists.
    writer: Writer<ConfigMapMeta>,
    entries: BTreeMap<RuleId, Entry>,
    /// (uid, resourceVersion) of invalid versions already reported.
    reported: HashSet<(String, String)>,
    /// Last good versions read at startup, for ConfigMaps not seen yet.
    persisted: LastGoodMap,
}

impl Default for RuleIndex {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether the metadata marks a ConfigMap as a rule.
pub fn is_rule(meta: &ConfigMapMeta) -> bool {
    let annotations: serde_json::Map<String, serde_json::Value> = meta
        .annotations()
        .iter()
        .filter(|(k, _)| k.as_str() == drift_engine::rule::RULE_ANNOTATION)
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    is_rule_annotation(Some(&annotations))
}

/// Drops what the index never reads (managed fields, labels, other annotations) before an
/// object is kept anywhere.
pub fn strip(meta: &mut ConfigMapMeta) {
    let metadata = &mut meta.metadata;
    metadata.managed_fields = None;
    metadata.labels = None;
    metadata.owner_references = None;
    metadata.finalizers = None;
    if let Some(annotations) = metadata.annotations.as_mut() {
        annotations.retain(|k, _| k == drift_engine::rule::RULE_ANNOTATION);
    }
}

fn id_of(meta: &ConfigMapMeta) -> RuleId {
    RuleId {
        namespace: meta.namespace().unwrap_or_default(),
        name: meta.name_any(),
    }
}

impl RuleIndex {
    pub fn new() -> Self {
        Self::with_last_good(LastGoodMap::new())
    }

    /// An index that knows the last good versions kept by an earlier run.
    pub fn with_last_good(persisted: LastGoodMap) -> Self {
        Self {
            writer: Writer::default(),
            entries: BTreeMap::new(),
            reported: HashSet::new(),
            persisted,
        }
    }

    /// The reflector store of rule ConfigMaps; ready after the first complete list.
    pub fn store(&self) -> Store<ConfigMapMeta> {
        self.writer.as_reader()
    }

    /// Applies one watch event.
    pub fn apply(&mut self, event: &Event<ConfigMapMeta>) -> Changes {
        match event {
            Event::Init => {
                self.writer.apply_watcher_event(event);
                Changes::default()
            }
            // A relist: only rules are kept; the index is reconciled when it completes.
            Event::InitApply(meta) => {
                if is_rule(meta) {
                    self.writer.apply_watcher_event(event);
                }
                Changes::default()
            }
            Event::InitDone => {
                self.writer.apply_watcher_event(event);
                self.reconcile()
            }
            Event::Apply(meta) if is_rule(meta) => {
                self.writer.apply_watcher_event(event);
                self.upsert(meta)
            }
            // Deleted, or no longer annotated: no longer a rule.
            Event::Apply(meta) | Event::Delete(meta) => {
                self.writer
                    .apply_watcher_event(&Event::Delete(meta.clone()));
                self.forget(&id_of(meta))
            }
        }
    }

    /// After a complete list: the store holds every rule ConfigMap there is.
    fn reconcile(&mut self) -> Changes {
        let listed = self.writer.as_reader().state();
        let mut changes = Changes::default();
        let ids: HashSet<RuleId> = listed.iter().map(|meta| id_of(meta)).collect();
        let gone: Vec<RuleId> = self
            .entries
            .keys()
            .filter(|id| !ids.contains(id))
            .cloned()
            .collect();
        for id in gone {
            changes.merge(self.forget(&id));
        }
        for meta in listed {
            changes.merge(self.upsert(&meta));
        }
        // The first complete list may hold no rule at all: the (empty) rule set is ready.
        changes.changed = true;
        changes
    }

    fn upsert(&mut self, meta: &ConfigMapMeta) -> Changes {
        let id = id_of(meta);
        let uid = meta.uid().unwrap_or_default();
        let version = meta.resource_version().unwrap_or_default();
        let mut changes = Changes::default();
        match self.entries.get_mut(&id) {
            // The same ConfigMap: a new version must be read, an old one is no news.
            Some(entry) if entry.uid == uid => {
                if entry.seen == version && !entry.behind() {
                    return changes;
                }
                entry.seen = version;
            }
            // New, or deleted and created again under the same name (a delete we missed).
            existing => {
                if existing.is_some() {
                    changes.changed = true;
                }
                // Kept by an earlier run: only for the very same ConfigMap.
                let last_good = self.persisted.remove(&id).filter(|g| g.uid == uid);
                self.entries
                    .insert(id.clone(), Entry::new(uid, version, last_good));
            }
        }
        if self.entries.get(&id).is_some_and(|e| e.behind()) {
            changes.fetch.push(id);
        }
        changes
    }

    fn forget(&mut self, id: &RuleId) -> Changes {
        match self.entries.remove(id) {
            Some(entry) => Changes {
                // A ConfigMap never read was never part of a rule set.
                changed: entry.read.is_some() || entry.read_error.is_some(),
                fetch: Vec::new(),
                forgotten: vec![id.clone()],
            },
            None => Changes::default(),
        }
    }

    /// Marks a fetch as started; `None` when it is not needed (gone, or one is running).
    pub fn start_fetch(&mut self, id: &RuleId) -> Option<FetchRequest> {
        let entry = self.entries.get_mut(id)?;
        if entry.fetching.is_some() || !(entry.behind() || entry.read_error.is_some()) {
            return None;
        }
        entry.fetching = Some(entry.seen.clone());
        Some(FetchRequest {
            id: id.clone(),
            uid: entry.uid.clone(),
        })
    }

    /// Records the outcome of a fetch started for `request`.
    pub fn fetched(
        &mut self,
        request: &FetchRequest,
        result: Result<FetchedRule, String>,
    ) -> Changes {
        let Some(entry) = self.entries.get_mut(&request.id) else {
            return Changes::default();
        };
        if entry.uid != request.uid {
            // Replaced meanwhile; the new one has (or gets) its own fetch.
            return Changes::default();
        }
        let seen_at_start = entry.fetching.take();
        let mut changes = Changes::default();
        match result {
            // Read the same ConfigMap: this version is the one in force now.
            Ok(fetched) if fetched.uid == entry.uid => {
                let read = ReadVersion {
                    resource_version: fetched.resource_version,
                    spec: fetched.spec,
                };
                changes.changed = entry.read.as_ref() != Some(&read) || entry.read_error.is_some();
                if seen_at_start.as_ref() == Some(&entry.seen) {
                    // The watch showed nothing newer while the GET ran: what the GET returned
                    // is at least as new as anything it showed.
                    entry.seen = read.resource_version.clone();
                } else if entry.seen != read.resource_version {
                    // The watch showed a version during the GET that may be newer.
                    changes.fetch.push(request.id.clone());
                }
                classify_read(&request.id, entry, &read);
                entry.read = Some(read);
                entry.read_error = None;
            }
            // The name now belongs to another ConfigMap; the watch will tell.
            Ok(_) => {}
            Err(reason) => {
                let first = entry.read_error.is_none();
                if entry.read.is_some() && first {
                    // The last version read stays in force; the resync reads again.
                    tracing::warn!(rule = %request.id, error = %reason, "cannot read the new version of a rule ConfigMap; keeping the previous one until it can be read");
                }
                changes.changed = first || entry.read_error.as_deref() != Some(&reason);
                if entry.last_good.is_some() {
                    entry.stale_since.get_or_insert_with(SystemTime::now);
                }
                entry.read_error = Some(reason);
            }
        }
        changes
    }

    /// Rule ConfigMaps whose last fetch failed, to be fetched again.
    pub fn unreadable(&self) -> Vec<RuleId> {
        self.entries
            .iter()
            .filter(|(_, e)| e.read_error.is_some() && e.fetching.is_none())
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Rule ConfigMaps neither read nor failed yet: their first fetch is running or queued.
    pub fn pending(&self) -> usize {
        self.entries
            .values()
            .filter(|e| e.read.is_none() && e.read_error.is_none())
            .count()
    }

    /// What to build a snapshot from.
    pub fn sources(&self) -> Sources {
        let mut out = Sources::default();
        for (id, entry) in &self.entries {
            let source = |spec: Option<String>| RuleSource {
                id: id.clone(),
                spec: spec.into(),
                origin: None,
            };
            if let (Some(reason), Some(good)) = (entry.stale_reason(), &entry.last_good) {
                out.rules.push(source(Some(good.spec.clone())));
                out.stale.push(StaleRule {
                    rule: id.to_string(),
                    reason,
                    since: entry
                        .stale_since
                        .map(|t| humantime::format_rfc3339_seconds(t).to_string()),
                    served_resource_version: good.resource_version.clone(),
                    resource_version: entry.seen.clone(),
                });
                continue;
            }
            match (&entry.read, &entry.read_error) {
                // Valid, or never valid (the engine reports it, and it is not applied).
                (Some(read), _) => out.rules.push(source(read.spec.clone())),
                (None, Some(reason)) => out.unreadable.push((id.clone(), reason.clone())),
                (None, None) => {}
            }
        }
        out
    }

    /// The last good version of every rule ConfigMap there is: what the last-good ConfigMap
    /// should hold.
    pub fn last_good(&self) -> LastGoodMap {
        self.entries
            .iter()
            .filter_map(|(id, e)| Some((id.clone(), e.last_good.clone()?)))
            .collect()
    }

    /// Invalid (or unreadable) versions not reported yet; each is reported once. Versions that
    /// are gone are forgotten, so the set stays as small as the rule set.
    pub fn unreported_invalid(&mut self) -> Vec<InvalidVersion> {
        let mut out = Vec::new();
        for (id, entry) in &self.entries {
            let (error, version) = match (&entry.read, &entry.invalid, &entry.read_error) {
                (Some(read), Some(invalid), _) => (invalid.clone(), read.resource_version.clone()),
                (None, _, Some(reason)) => (unreadable_error(id, reason), entry.seen.clone()),
                _ => continue,
            };
            if self.reported.insert((entry.uid.clone(), version.clone())) {
                out.push(InvalidVersion {
                    error,
                    uid: entry.uid.clone(),
                    resource_version: version,
                });
            }
        }
        let live: HashSet<(String, String)> = self
            .entries
            .values()
            .flat_map(|e| {
                let read = e
                    .read
                    .as_ref()
                    .map(|r| (e.uid.clone(), r.resource_version.clone()));
                [Some((e.uid.clone(), e.seen.clone())), read]
            })
            .flatten()
            .collect();
        self.reported.retain(|v| live.contains(v));
        out
    }
}

/// The engine's verdict on a version just read: valid, it becomes the last good one; invalid,
/// the last good one (if any) is served instead, stale.
fn classify_read(id: &RuleId, entry: &mut Entry, read: &ReadVersion) {
    let source = RuleSource {
        id: id.clone(),
        spec: read.spec.clone().into(),
        origin: None,
    };
    match (drift_engine::rule::compile(&source), &read.spec) {
        (Ok(_), Some(spec)) => {
            entry.invalid = None;
            entry.stale_since = None;
            entry.last_good = Some(LastGood {
                uid: entry.uid.clone(),
                resource_version: read.resource_version.clone(),
                spec: spec.clone(),
            });
        }
        (Ok(_), None) => entry.invalid = None,
        (Err(error), _) => {
            if entry.last_good.is_some() && entry.stale_since.is_none() {
                entry.stale_since = Some(SystemTime::now());
                tracing::warn!(rule = %id, error = %error, "rule ConfigMap became invalid; enforcing its last valid version");
            }
            entry.invalid = Some(error);
        }
    }
}

/// A rule ConfigMap that could not be read, reported as an invalid rule.
pub fn unreadable_error(id: &RuleId, reason: &str) -> RuleError {
    RuleError {
        namespace: id.namespace.clone(),
        name: id.name.clone(),
        origin: None,
        field: None,
        line: None,
        column: None,
        reason: reason.to_owned(),
    }
}

#[cfg(test)]
mod tests;
