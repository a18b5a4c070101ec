//! The last valid version of every rule ConfigMap, kept where a restarted agent or a new
//! replica finds it (reference §2 "Last good version kept"): one ConfigMap of the agent's own
//! namespace (`--last-good-configmap`), one `data` key per rule (`<namespace>_<name>`: neither
//! part can hold `_`) holding `{"uid", "resourceVersion", "spec"}`. It is read before the first
//! sync and patched (JSON merge patch of the keys that changed) by one task, off the event loop,
//! each request with a timeout.
//!
//! Kubernetes caps a ConfigMap's data at 1 MiB, so what is kept is fitted to [`STORE_BYTES`]
//! first ([`fit`]): cluster rules first, then namespace rules — at most
//! [`NAMESPACE_RULE_BYTES`] of them, the smallest first — so that a tenant's large valid rules
//! never crowd out the cluster rules' last good versions, and a patch never grows the ConfigMap
//! past what the API server takes. A rule left out is reported (an Event on its ConfigMap, a
//! WARN, a gauge) by the cluster source; a patch the API server refuses is not sent again until
//! what is wanted changes.

use std::collections::BTreeMap;
use std::time::Duration;

use drift_engine::RuleId;
use drift_engine::rule::Tier;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// Longest wait for one request about the last-good ConfigMap.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Wait before a patch that failed for a passing reason (no answer, a server error) is tried
/// again; doubled after each failure up to [`MAX_RETRY`].
const RETRY: Duration = Duration::from_secs(5);
const MAX_RETRY: Duration = Duration::from_secs(300);
/// What the store's `data` may hold, keys and values: Kubernetes' 1 MiB less room for the
/// ConfigMap's metadata.
pub const STORE_BYTES: usize = 1000 * 1024;
/// What namespace rules may take of it at most (and only what cluster rules leave).
pub const NAMESPACE_RULE_BYTES: usize = STORE_BYTES / 2;

/// The last valid version of one rule ConfigMap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastGood {
    /// Used only for a ConfigMap of this uid: a rule deleted and created again starts afresh.
    pub uid: String,
    pub resource_version: String,
    pub spec: String,
}

/// Last good versions by rule.
pub type LastGoodMap = BTreeMap<RuleId, LastGood>;

/// The `data` key of a rule.
pub fn key(id: &RuleId) -> String {
    format!("{}_{}", id.namespace, id.name)
}

fn id_of_key(key: &str) -> Option<RuleId> {
    let (namespace, name) = key.split_once('_')?;
    Some(RuleId {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    })
}

/// The entries of the ConfigMap's `data`; an entry that cannot be read is skipped (and
/// overwritten by the next valid version of its rule).
pub fn decode(data: &BTreeMap<String, String>) -> LastGoodMap {
    let mut out = LastGoodMap::new();
    for (key, value) in data {
        match (id_of_key(key), serde_json::from_str::<LastGood>(value)) {
            (Some(id), Ok(entry)) => {
                out.insert(id, entry);
            }
            _ => tracing::warn!(
                key,
                "ignoring an unreadable entry of the last-good rules ConfigMap"
            ),
        }
    }
    out
}

/// The bytes an entry takes in the ConfigMap's data: its key and its encoded value.
pub fn entry_bytes(id: &RuleId, entry: &LastGood) -> usize {
    key(id).len() + serde_json::to_string(entry).map_or(usize::MAX / 2, |v| v.len())
}

/// What of the last good versions the store keeps, and what it leaves out.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Fitted {
    pub kept: LastGoodMap,
    /// Rules whose last good version is not kept, with its size in bytes.
    pub left_out: BTreeMap<RuleId, usize>,
}

/// Fits `desired` into [`STORE_BYTES`]: cluster rules (by `tier_of`) first, in name order, then
/// namespace rules within [`NAMESPACE_RULE_BYTES`] and what is left, the smallest first.
pub fn fit(desired: &LastGoodMap, tier_of: impl Fn(&RuleId) -> Tier) -> Fitted {
    let mut cluster = Vec::new();
    let mut namespaced = Vec::new();
    for (id, entry) in desired {
        let sized = (entry_bytes(id, entry), id);
        match tier_of(id) {
            Tier::Cluster => cluster.push(sized),
            Tier::Namespace => namespaced.push(sized),
        }
    }
    namespaced.sort();
    let mut fitted = Fitted::default();
    let mut used = 0;
    let mut namespace_used = 0;
    for (tier, entries) in [(Tier::Cluster, cluster), (Tier::Namespace, namespaced)] {
        for (bytes, id) in entries {
            let fits_tier = tier == Tier::Cluster || namespace_used + bytes <= NAMESPACE_RULE_BYTES;
            if fits_tier && used + bytes <= STORE_BYTES {
                used += bytes;
                if tier == Tier::Namespace {
                    namespace_used += bytes;
                }
                fitted.kept.insert(id.clone(), desired[id].clone());
            } else {
                fitted.left_out.insert(id.clone(), bytes);
            }
        }
    }
    fitted
}

/// A rule whose last good version the store leaves out, to report once per version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotKept {
    pub id: RuleId,
    pub uid: String,
    pub resource_version: String,
    pub bytes: usize,
    pub tier: Tier,
}

impl NotKept {
    /// Why, for the Event and the WARN: what is lost, and what to do.
    pub fn reason(&self, store: &str) -> String {
        let room = match self.tier {
            Tier::Cluster => format!("cluster rules fill its {} KiB", STORE_BYTES / 1024),
            Tier::Namespace => format!(
                "namespace rules may use {} KiB of its {} KiB, after the cluster rules, the smallest first",
                NAMESPACE_RULE_BYTES / 1024,
                STORE_BYTES / 1024
            ),
        };
        format!(
            "the last valid version of rule {} ({} bytes) is not kept in ConfigMap {store}: {room}, and it does not fit. It is enforced while it stays valid; if it becomes invalid, it is no longer enforced after a restart. Make the rule smaller (or fewer rules in its namespace)",
            self.id, self.bytes
        )
    }
}

/// What the webhook's agents keep written: the fitted last good versions, sent to
/// [`LastGoodStore::persist`], and which versions were reported as left out.
pub struct Keeper {
    sender: watch::Sender<LastGoodMap>,
    reported: std::collections::HashSet<(String, String)>,
}

impl Keeper {
    pub fn new(sender: watch::Sender<LastGoodMap>) -> Self {
        Self {
            sender,
            reported: Default::default(),
        }
    }

    /// Fits `desired` and sends what is kept on to be written: the rules left out whose
    /// version was not reported yet, and how many are left out now.
    pub fn keep(
        &mut self,
        desired: &LastGoodMap,
        tier_of: impl Fn(&RuleId) -> Tier,
    ) -> (Vec<NotKept>, usize) {
        let fitted = fit(desired, &tier_of);
        self.sender.send_if_modified(|current| {
            let modified = *current != fitted.kept;
            if modified {
                current.clone_from(&fitted.kept);
            }
            modified
        });
        let mut new = Vec::new();
        let mut now = std::collections::HashSet::new();
        for (id, bytes) in &fitted.left_out {
            let entry = &desired[id];
            let version = (entry.uid.clone(), entry.resource_version.clone());
            if !self.reported.contains(&version) {
                new.push(NotKept {
                    id: id.clone(),
                    uid: entry.uid.clone(),
                    resource_version: entry.resource_version.clone(),
                    bytes: *bytes,
                    tier: tier_of(id),
                });
            }
            now.insert(version);
        }
        // Versions kept again (or gone) are forgotten: left out later, they are told again.
        self.reported = now;
        (new, fitted.left_out.len())
    }
}

/// The JSON merge patch that turns `written` into `desired`: changed keys set, removed keys
/// `null`. `None` when they are the same.
pub fn patch(written: &LastGoodMap, desired: &LastGoodMap) -> Option<serde_json::Value> {
    let mut data = serde_json::Map::new();
    for (id, entry) in desired {
        if written.get(id) != Some(entry) {
            let value = serde_json::to_string(entry).unwrap_or_default();
            data.insert(key(id), serde_json::Value::String(value));
        }
    }
    for id in written.keys() {
        if !desired.contains_key(id) {
            data.insert(key(id), serde_json::Value::Null);
        }
    }
    (!data.is_empty()).then(|| serde_json::json!({ "data": data }))
}

/// Where the last good versions are kept.
#[derive(Clone)]
pub struct LastGoodStore {
    api: Api<ConfigMap>,
    name: String,
    describe: String,
}

/// What reading the store at startup gave.
pub struct Loaded {
    pub entries: LastGoodMap,
    /// Whether it exists (or was created): patches are worth sending.
    pub usable: bool,
}

impl LastGoodStore {
    pub fn new(api: Api<ConfigMap>, namespace: &str, name: &str) -> Self {
        Self {
            api,
            name: name.to_owned(),
            describe: format!("{namespace}/{name}"),
        }
    }

    /// Reads the ConfigMap, creating it (empty) when it is absent and the agent may. Transient
    /// failures are retried until `deadline`; after that, or when it may not be read or
    /// created, the agent goes on without (a WARN says what is lost).
    pub async fn load(&self, deadline: tokio::time::Instant) -> Loaded {
        loop {
            match tokio::time::timeout(REQUEST_TIMEOUT, self.api.get_opt(&self.name)).await {
                Ok(Ok(Some(config_map))) => {
                    let entries = decode(&config_map.data.unwrap_or_default());
                    tracing::info!(configmap = %self.describe, rules = entries.len(), "last good rule versions read");
                    return Loaded {
                        entries,
                        usable: true,
                    };
                }
                Ok(Ok(None)) => return self.create().await,
                Ok(Err(kube::Error::Api(status))) if status.is_forbidden() => {
                    self.warn_lost(&status.message);
                    return Loaded::unusable();
                }
                Ok(Err(e)) => {
                    if tokio::time::Instant::now() >= deadline {
                        self.warn_lost(&e.to_string());
                        return Loaded::unusable();
                    }
                }
                Err(_) if tokio::time::Instant::now() >= deadline => {
                    self.warn_lost("no answer in time");
                    return Loaded::unusable();
                }
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Reads the ConfigMap without ever writing it (the audit process judges with the same
    /// last good versions as the webhook, and leaves keeping them to the webhook's agents).
    pub async fn read(&self) -> LastGoodMap {
        match tokio::time::timeout(REQUEST_TIMEOUT, self.api.get_opt(&self.name)).await {
            Ok(Ok(Some(config_map))) => decode(&config_map.data.unwrap_or_default()),
            Ok(Ok(None)) => LastGoodMap::default(),
            Ok(Err(e)) => {
                tracing::warn!(configmap = %self.describe, error = %e, "cannot read the last good rule versions: rules that are invalid now are not audited");
                LastGoodMap::default()
            }
            Err(_) => {
                tracing::warn!(configmap = %self.describe, "no answer reading the last good rule versions: rules that are invalid now are not audited");
                LastGoodMap::default()
            }
        }
    }

    async fn create(&self) -> Loaded {
        let mut config_map = ConfigMap::default();
        config_map.metadata.name = Some(self.name.clone());
        let created = tokio::time::timeout(
            REQUEST_TIMEOUT,
            self.api.create(&PostParams::default(), &config_map),
        )
        .await;
        match created {
            Ok(Ok(_)) => {
                tracing::info!(configmap = %self.describe, "created the ConfigMap of last good rule versions");
                Loaded::empty()
            }
            // Another replica created it meanwhile.
            Ok(Err(kube::Error::Api(status))) if status.code == 409 => Loaded::empty(),
            Ok(Err(e)) => {
                self.warn_lost(&format!("it does not exist and cannot be created: {e}"));
                Loaded::unusable()
            }
            Err(_) => {
                self.warn_lost("it does not exist and creating it got no answer in time");
                Loaded::unusable()
            }
        }
    }

    fn warn_lost(&self, why: &str) {
        tracing::warn!(
            configmap = %self.describe,
            error = why,
            "cannot use the ConfigMap of last good rule versions: they will not survive a restart"
        );
    }

    /// Writes every change of `desired` (already fitted) until `shutdown`; `written` is what
    /// the ConfigMap held when it was read. A patch that failed for a passing reason is tried
    /// again, less and less often, with what is desired by then; one the API server refused
    /// (a 4xx) is not sent again until what is desired changes, and `refused` counts it.
    pub async fn persist(
        self,
        mut written: LastGoodMap,
        mut desired: watch::Receiver<LastGoodMap>,
        refused: prometheus::IntCounter,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut retry = RETRY;
        loop {
            let want = desired.borrow_and_update().clone();
            if let Some(body) = patch(&written, &want) {
                let params = PatchParams::default();
                let sent = tokio::time::timeout(
                    REQUEST_TIMEOUT,
                    self.api.patch(&self.name, &params, &Patch::Merge(&body)),
                )
                .await;
                match sent {
                    Ok(Ok(_)) => {
                        written = want;
                        retry = RETRY;
                    }
                    Ok(Err(kube::Error::Api(status))) if (400..500).contains(&status.code) => {
                        refused.inc();
                        tracing::warn!(configmap = %self.describe, code = status.code, error = %status.message, "the API server refused the last good rule versions; not sent again until they change");
                    }
                    failed => {
                        let error = match failed {
                            Ok(Err(e)) => e.to_string(),
                            _ => "no answer in time".to_owned(),
                        };
                        tracing::warn!(configmap = %self.describe, error, retry_in = %humantime::format_duration(retry), "cannot write the last good rule versions; trying again");
                        tokio::select! {
                            _ = tokio::time::sleep(retry) => {
                                retry = (retry * 2).min(MAX_RETRY);
                                continue;
                            }
                            _ = shutdown.changed() => return,
                        }
                    }
                }
            }
            tokio::select! {
                changed = desired.changed() => if changed.is_err() { return },
                _ = shutdown.changed() => return,
            }
        }
    }
}

impl Loaded {
    fn empty() -> Self {
        Self {
            entries: LastGoodMap::new(),
            usable: true,
        }
    }

    fn unusable() -> Self {
        Self {
            entries: LastGoodMap::new(),
            usable: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(namespace: &str, name: &str) -> RuleId {
        RuleId {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    fn entry(version: &str) -> LastGood {
        LastGood {
            uid: "u".into(),
            resource_version: version.into(),
            spec: "mode: enforce\n".into(),
        }
    }

    #[test]
    fn entries_round_trip_through_the_config_map_data() {
        let mut map = LastGoodMap::new();
        map.insert(id("ops", "rule.v2"), entry("7"));
        let body = patch(&LastGoodMap::new(), &map).unwrap();
        let data: BTreeMap<String, String> = body["data"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
            .collect();
        assert_eq!(data.keys().collect::<Vec<_>>(), ["ops_rule.v2"]);
        assert!(data["ops_rule.v2"].contains("\"resourceVersion\":\"7\""));
        assert_eq!(decode(&data), map);
        // A broken entry is skipped, the others kept.
        let mut broken = data.clone();
        broken.insert("nounderscore".into(), "{}".into());
        broken.insert("ops_x".into(), "not json".into());
        assert_eq!(decode(&broken), map);
    }

    fn sized(namespace: &str, name: &str, bytes: usize) -> (RuleId, LastGood) {
        let id = id(namespace, name);
        let mut entry = entry("1");
        let overhead = entry_bytes(&id, &entry);
        entry.spec.push_str(&"#".repeat(bytes - overhead));
        assert_eq!(entry_bytes(&id, &entry), bytes);
        (id, entry)
    }

    /// Cluster rules first, whatever their size; namespace rules within their share and what
    /// is left, the smallest first; what does not fit is named with its size.
    #[test]
    fn the_store_keeps_cluster_rules_first_and_namespace_rules_within_their_share() {
        let tier = |id: &RuleId| {
            if id.namespace == "ops" {
                Tier::Cluster
            } else {
                Tier::Namespace
            }
        };
        let desired: LastGoodMap = [
            sized("ops", "a", 300 * 1024),
            sized("ops", "b", 200 * 1024),
            sized("team", "huge", 400 * 1024),
            sized("team", "big", 310 * 1024),
            sized("team", "small", 100 * 1024),
            sized("other", "small", 100 * 1024),
        ]
        .into_iter()
        .collect();
        let fitted = fit(&desired, tier);
        let kept: Vec<String> = fitted.kept.keys().map(ToString::to_string).collect();
        assert_eq!(kept, ["ops/a", "ops/b", "other/small", "team/small"]);
        let left_out: Vec<(String, usize)> = fitted
            .left_out
            .iter()
            .map(|(id, bytes)| (id.to_string(), *bytes))
            .collect();
        assert_eq!(
            left_out,
            [
                ("team/big".to_owned(), 310 * 1024),
                ("team/huge".to_owned(), 400 * 1024)
            ]
        );
        // Cluster rules take the whole store when they need it.
        let crowded: LastGoodMap = [
            sized("ops", "a", 600 * 1024),
            sized("ops", "b", 350 * 1024),
            sized("team", "small", 100 * 1024),
        ]
        .into_iter()
        .collect();
        let fitted = fit(&crowded, tier);
        assert_eq!(fitted.kept.len(), 2);
        assert_eq!(
            fitted.left_out.keys().next().unwrap().to_string(),
            "team/small"
        );
        let used: usize = fitted.kept.iter().map(|(id, e)| entry_bytes(id, e)).sum();
        assert!(used <= STORE_BYTES);
    }

    /// What is kept is sent on once; a rule left out is reported once per version.
    #[test]
    fn the_keeper_sends_what_fits_and_reports_each_version_left_out_once() {
        let (sender, receiver) = watch::channel(LastGoodMap::new());
        let mut keeper = Keeper::new(sender);
        let tier = |_: &RuleId| Tier::Namespace;
        let mut desired: LastGoodMap = [
            sized("team", "a", 400 * 1024),
            sized("team", "b", 200 * 1024),
        ]
        .into_iter()
        .collect();
        let (new, left_out) = keeper.keep(&desired, tier);
        assert_eq!((new.len(), left_out), (1, 1));
        assert_eq!(new[0].id.to_string(), "team/a");
        assert!(
            new[0]
                .reason("ns/store")
                .contains("namespace rules may use 500 KiB")
        );
        assert_eq!(
            receiver.borrow().keys().next().unwrap().to_string(),
            "team/b"
        );
        // The same again: nothing new to report.
        assert_eq!(keeper.keep(&desired, tier), (Vec::new(), 1));
        // A new version of it is reported again.
        desired.get_mut(&id("team", "a")).unwrap().resource_version = "2".into();
        assert_eq!(keeper.keep(&desired, tier).0.len(), 1);
    }

    #[test]
    fn a_patch_sets_what_changed_and_removes_what_went() {
        let mut written = LastGoodMap::new();
        written.insert(id("ops", "a"), entry("1"));
        written.insert(id("ops", "b"), entry("1"));
        let mut desired = written.clone();
        assert_eq!(patch(&written, &desired), None);
        desired.insert(id("ops", "a"), entry("2"));
        desired.remove(&id("ops", "b"));
        let body = patch(&written, &desired).unwrap();
        let data = body["data"].as_object().unwrap();
        assert_eq!(data.len(), 2);
        assert!(data["ops_a"].as_str().unwrap().contains("\"2\""));
        assert!(data["ops_b"].is_null());
    }
}
