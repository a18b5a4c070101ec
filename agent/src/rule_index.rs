//! What the agent knows of the rule ConfigMaps in the cluster, kept apart from any HTTP so
//! that it can be tested by feeding it watch events: each event (and each finished fetch of a
//! ConfigMap's data) is turned into "the rule set changed", "fetch the data of these
//! ConfigMaps" and "forget these".
//!
//! The ConfigMap watch is metadata only. Only ConfigMaps carrying the rule annotation enter
//! the index's reflector store (so memory does not grow with the other ConfigMaps); a relist
//! is buffered by that store and reconciled against the index when it completes, so requests
//! never see a half-listed rule set.

use std::collections::{BTreeMap, HashSet};

use drift_engine::rule::is_rule_annotation;
use drift_engine::{RuleError, RuleId, RuleSource};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::Store;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;

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
}

impl Entry {
    fn new(uid: String, seen: String) -> Self {
        Self {
            uid,
            seen,
            read: None,
            read_error: None,
            fetching: None,
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

/// Rule ConfigMaps: what is known of each, and what must be fetched.
pub struct RuleIndex {
    /// The watch's view of the rule ConfigMaps (metadata); buffers relists.
    writer: Writer<ConfigMapMeta>,
    entries: BTreeMap<RuleId, Entry>,
    /// (uid, resourceVersion) of invalid versions already reported.
    reported: HashSet<(String, String)>,
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
        Self {
            writer: Writer::default(),
            entries: BTreeMap::new(),
            reported: HashSet::new(),
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
                self.entries.insert(id.clone(), Entry::new(uid, version));
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
                entry.read = Some(read);
                entry.read_error = None;
            }
            // The name now belongs to another ConfigMap; the watch will tell.
            Ok(_) => {}
            Err(reason) => {
                let first = entry.read_error.is_none();
                if entry.read.is_some() {
                    // The last version read stays in force; the resync reads again.
                    if first {
                        tracing::warn!(rule = %request.id, error = %reason, "cannot read the new version of a rule ConfigMap; keeping the previous one until it can be read");
                    }
                } else {
                    changes.changed = first || entry.read_error.as_deref() != Some(&reason);
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

    /// The rules to build a snapshot from, and the ConfigMaps that could not be read at all.
    pub fn sources(&self) -> (Vec<RuleSource>, Vec<(RuleId, String)>) {
        let mut sources = Vec::with_capacity(self.entries.len());
        let mut unreadable = Vec::new();
        for (id, entry) in &self.entries {
            match (&entry.read, &entry.read_error) {
                (Some(read), _) => sources.push(RuleSource {
                    id: id.clone(),
                    spec: read.spec.clone(),
                    origin: None,
                }),
                (None, Some(reason)) => unreadable.push((id.clone(), reason.clone())),
                (None, None) => {}
            }
        }
        (sources, unreadable)
    }

    /// The invalid versions among `invalid` (the engine's verdict on the snapshot built from
    /// [`RuleIndex::sources`]) not reported yet; each is reported once. Versions that are gone
    /// are forgotten, so the set stays as small as the rule set.
    pub fn unreported_invalid(&mut self, invalid: &[RuleError]) -> Vec<InvalidVersion> {
        let mut out = Vec::new();
        for error in invalid {
            let id = RuleId {
                namespace: error.namespace.clone(),
                name: error.name.clone(),
            };
            let Some(entry) = self.entries.get(&id) else {
                continue;
            };
            let version = entry
                .read
                .as_ref()
                .map_or_else(|| entry.seen.clone(), |r| r.resource_version.clone());
            if self.reported.insert((entry.uid.clone(), version.clone())) {
                out.push(InvalidVersion {
                    error: error.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn meta(namespace: &str, name: &str, uid: &str, version: &str, rule: bool) -> ConfigMapMeta {
        let mut annotations = std::collections::BTreeMap::new();
        if rule {
            annotations.insert(
                drift_engine::rule::RULE_ANNOTATION.to_owned(),
                " TRUE ".to_owned(),
            );
        }
        annotations.insert("other".to_owned(), "x".repeat(100));
        PartialObjectMeta {
            types: None,
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                uid: Some(uid.into()),
                resource_version: Some(version.into()),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            },
            _phantom: std::marker::PhantomData,
        }
    }

    fn id(namespace: &str, name: &str) -> RuleId {
        RuleId {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    const SPEC: &str = "mode: enforce\nnamespaces: ['*']\nselectors: [{kind: Deployment}]\n";

    fn read(uid: &str, version: &str, spec: &str) -> Result<FetchedRule, String> {
        Ok(FetchedRule {
            uid: uid.into(),
            resource_version: version.into(),
            spec: Some(spec.into()),
        })
    }

    /// Lists `objects` as a (re)list does.
    fn list(index: &mut RuleIndex, objects: &[ConfigMapMeta]) -> Changes {
        assert_eq!(index.apply(&Event::Init), Changes::default());
        for object in objects {
            assert_eq!(
                index.apply(&Event::InitApply(object.clone())),
                Changes::default()
            );
        }
        index.apply(&Event::InitDone)
    }

    fn fetch(index: &mut RuleIndex, rule: &RuleId, result: Result<FetchedRule, String>) -> Changes {
        let request = index.start_fetch(rule).expect("a fetch is due");
        index.fetched(&request, result)
    }

    #[test]
    fn a_list_asks_to_fetch_the_rules_only_and_fetches_make_them_sources() {
        let mut index = RuleIndex::new();
        let changes = list(
            &mut index,
            &[
                meta("ops", "rule", "u1", "1", true),
                meta("apps", "plain", "u2", "2", false),
            ],
        );
        assert_eq!(changes.fetch, vec![id("ops", "rule")]);
        assert!(changes.changed);
        // Only the rule is kept, and stripped of what is never read.
        assert_eq!(index.store().state().len(), 1);
        assert_eq!(index.pending(), 1);
        assert!(index.sources().0.is_empty());

        let changes = fetch(&mut index, &id("ops", "rule"), read("u1", "1", SPEC));
        assert!(changes.changed);
        assert!(changes.fetch.is_empty());
        assert_eq!(index.pending(), 0);
        let (sources, unreadable) = index.sources();
        assert_eq!(sources.len(), 1);
        assert_eq!(sources[0].spec.as_deref(), Some(SPEC));
        assert!(unreadable.is_empty());
        // While a fetch runs, no second one is started.
        assert!(index.start_fetch(&id("ops", "rule")).is_none());
    }

    #[test]
    fn versions_deletions_and_the_annotation_removed() {
        let mut index = RuleIndex::new();
        list(&mut index, &[meta("ops", "rule", "u1", "1", true)]);
        fetch(&mut index, &id("ops", "rule"), read("u1", "1", SPEC));

        // The same version again (a resumed watch, an unrelated relist): nothing to do.
        let again = index.apply(&Event::Apply(meta("ops", "rule", "u1", "1", true)));
        assert_eq!(again, Changes::default());
        // A new version: fetch it; the old one stays in force meanwhile.
        let newer = index.apply(&Event::Apply(meta("ops", "rule", "u1", "2", true)));
        assert_eq!(newer.fetch, vec![id("ops", "rule")]);
        assert!(!newer.changed);
        assert_eq!(index.sources().0.len(), 1);
        let warn = SPEC.replace("enforce", "warn");
        let done = fetch(&mut index, &id("ops", "rule"), read("u1", "2", &warn));
        assert!(done.changed);
        assert_eq!(index.sources().0[0].spec.as_deref(), Some(warn.as_str()));

        // The annotation removed: forgotten, like a deletion.
        let removed = index.apply(&Event::Apply(meta("ops", "rule", "u1", "3", false)));
        assert_eq!(removed.forgotten, vec![id("ops", "rule")]);
        assert!(removed.changed);
        assert!(index.sources().0.is_empty());
        assert!(index.store().state().is_empty());

        // Annotated again, then deleted.
        let back = index.apply(&Event::Apply(meta("ops", "rule", "u1", "4", true)));
        assert_eq!(back.fetch, vec![id("ops", "rule")]);
        let deleted = index.apply(&Event::Delete(meta("ops", "rule", "u1", "5", true)));
        assert_eq!(deleted.forgotten, vec![id("ops", "rule")]);
        // It was never read: the rule set did not change.
        assert!(!deleted.changed);
        // A late fetch of a forgotten ConfigMap is ignored.
        let request = FetchRequest {
            id: id("ops", "rule"),
            uid: "u1".into(),
        };
        assert_eq!(
            index.fetched(&request, read("u1", "4", SPEC)),
            Changes::default()
        );
        assert!(index.sources().0.is_empty());
    }

    #[test]
    fn a_relist_forgets_what_is_gone_and_fetches_only_what_changed() {
        let mut index = RuleIndex::new();
        list(
            &mut index,
            &[
                meta("ops", "a", "ua", "1", true),
                meta("ops", "b", "ub", "1", true),
            ],
        );
        fetch(&mut index, &id("ops", "a"), read("ua", "1", SPEC));
        fetch(&mut index, &id("ops", "b"), read("ub", "1", SPEC));

        // During the relist, nothing changes; at its end: b is gone, a unchanged, c new.
        let changes = list(
            &mut index,
            &[
                meta("ops", "a", "ua", "1", true),
                meta("ops", "c", "uc", "7", true),
            ],
        );
        assert_eq!(changes.forgotten, vec![id("ops", "b")]);
        assert_eq!(changes.fetch, vec![id("ops", "c")]);
        assert!(changes.changed);
        let names: Vec<String> = index
            .sources()
            .0
            .iter()
            .map(|s| s.id.name.clone())
            .collect();
        assert_eq!(names, ["a"]);

        // A ConfigMap deleted and created again under the same name (the delete missed):
        // the new one replaces the old one, which stops applying.
        let replaced = index.apply(&Event::Apply(meta("ops", "a", "ua2", "9", true)));
        assert!(replaced.changed);
        assert_eq!(replaced.fetch, vec![id("ops", "a")]);
        assert!(index.sources().0.is_empty());
    }

    #[test]
    fn a_rule_that_cannot_be_read_is_reported_and_fetched_again() {
        let mut index = RuleIndex::new();
        list(&mut index, &[meta("ops", "rule", "u1", "1", true)]);
        let failed = fetch(
            &mut index,
            &id("ops", "rule"),
            Err("cannot read: 500".into()),
        );
        assert!(failed.changed);
        assert_eq!(index.pending(), 0);
        let (sources, unreadable) = index.sources();
        assert!(sources.is_empty());
        assert_eq!(
            unreadable,
            vec![(id("ops", "rule"), "cannot read: 500".into())]
        );
        assert_eq!(index.unreadable(), vec![id("ops", "rule")]);
        fetch(&mut index, &id("ops", "rule"), read("u1", "1", SPEC));
        assert!(index.unreadable().is_empty());
        assert_eq!(index.sources().0.len(), 1);

        // A new version that cannot be read keeps the last one read in force.
        index.apply(&Event::Apply(meta("ops", "rule", "u1", "2", true)));
        let failed = fetch(&mut index, &id("ops", "rule"), Err("timed out".into()));
        assert!(!failed.changed);
        assert_eq!(index.sources().0[0].spec.as_deref(), Some(SPEC));
        assert!(index.sources().1.is_empty());
        assert_eq!(index.unreadable(), vec![id("ops", "rule")]);
        let warn = SPEC.replace("enforce", "warn");
        assert!(fetch(&mut index, &id("ops", "rule"), read("u1", "2", &warn)).changed);
        assert!(index.unreadable().is_empty());
    }

    #[test]
    fn a_version_shown_by_the_watch_during_a_fetch_is_fetched_next() {
        let mut index = RuleIndex::new();
        list(&mut index, &[meta("ops", "rule", "u1", "1", true)]);
        let request = index.start_fetch(&id("ops", "rule")).unwrap();
        index.apply(&Event::Apply(meta("ops", "rule", "u1", "2", true)));
        let changes = index.fetched(&request, read("u1", "1", SPEC));
        assert!(changes.changed);
        assert_eq!(changes.fetch, vec![id("ops", "rule")]);
        // The GET returned a version the watch has not shown yet: when it does, no refetch.
        fetch(&mut index, &id("ops", "rule"), read("u1", "3", SPEC));
        let shown = index.apply(&Event::Apply(meta("ops", "rule", "u1", "3", true)));
        assert_eq!(shown, Changes::default());
    }

    #[test]
    fn each_invalid_version_is_reported_once() {
        let mut index = RuleIndex::new();
        list(&mut index, &[meta("ops", "typo", "u1", "1", true)]);
        fetch(
            &mut index,
            &id("ops", "typo"),
            read("u1", "1", "mode: nope\n"),
        );
        let error = RuleError {
            namespace: "ops".into(),
            name: "typo".into(),
            origin: None,
            field: Some("mode".into()),
            line: Some(1),
            column: Some(7),
            reason: "invalid mode".into(),
        };
        let first = index.unreported_invalid(std::slice::from_ref(&error));
        assert_eq!(first.len(), 1);
        assert_eq!(
            (first[0].uid.as_str(), first[0].resource_version.as_str()),
            ("u1", "1")
        );
        assert!(
            index
                .unreported_invalid(std::slice::from_ref(&error))
                .is_empty()
        );
        // A relist of the same version: not again.
        list(&mut index, &[meta("ops", "typo", "u1", "1", true)]);
        assert!(
            index
                .unreported_invalid(std::slice::from_ref(&error))
                .is_empty()
        );
        // A new version, still invalid: once more.
        index.apply(&Event::Apply(meta("ops", "typo", "u1", "2", true)));
        fetch(
            &mut index,
            &id("ops", "typo"),
            read("u1", "2", "mode: nah\n"),
        );
        assert_eq!(
            index.unreported_invalid(std::slice::from_ref(&error)).len(),
            1
        );
    }
}
