//! The last valid version of every rule ConfigMap, kept where a restarted agent or a new
//! replica finds it (reference §2 "Last good version kept"): one ConfigMap of the agent's own
//! namespace (`--last-good-configmap`), one `data` key per rule (`<namespace>_<name>`: neither
//! part can hold `_`) holding `{"uid", "resourceVersion", "spec"}`. It is read before the first
//! sync and patched (JSON merge patch of the keys that changed) by one task, off the event loop,
//! each request with a timeout.

use std::collections::BTreeMap;
use std::time::Duration;

use drift_engine::RuleId;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// The ConfigMap the last good versions are kept in, unless `--last-good-configmap` names
/// another.
pub const DEFAULT_CONFIGMAP: &str = "drift-sentinel-last-good-rules";
/// Longest wait for one request about the last-good ConfigMap.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Wait before a failed patch is tried again.
const RETRY: Duration = Duration::from_secs(5);

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

    /// Writes every change of `desired` until `shutdown`; `written` is what the ConfigMap held
    /// when it was read. A failed patch is retried (with what is desired by then).
    pub async fn persist(
        self,
        mut written: LastGoodMap,
        mut desired: watch::Receiver<LastGoodMap>,
        mut shutdown: watch::Receiver<bool>,
    ) {
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
                    Ok(Ok(_)) => written = want,
                    failed => {
                        let error = match failed {
                            Ok(Err(e)) => e.to_string(),
                            _ => "no answer in time".to_owned(),
                        };
                        tracing::warn!(configmap = %self.describe, error, "cannot write the last good rule versions; retrying");
                        tokio::select! {
                            _ = tokio::time::sleep(RETRY) => continue,
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
