//! Rules and namespaces from the cluster: kube-rs watches of rule ConfigMaps and Namespaces
//! feed the same snapshot builder as the rule files do.
//!
//! ConfigMaps are watched as metadata only, so memory does not grow with the ConfigMaps that
//! are not rules; the data of a ConfigMap is fetched only when it carries the rule annotation
//! and its resourceVersion changed. A relist (first sync, or after `410 Gone`) is buffered and
//! installed whole at its end: requests never see a half-built rule set. Invalid rules get one
//! Warning Event (`InvalidRule`) per ConfigMap version.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use drift_engine::manifests::{NamespaceInfo, Namespaces};
use drift_engine::rule::{MODE_ANNOTATION, is_rule_annotation};
use drift_engine::{RuleId, RuleSource};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ObjectReference};
use kube::api::{Api, PartialObjectMeta};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher::watcher};
use kube::{Client, Config, ResourceExt};
use tokio::sync::watch;

use crate::rules_source::build_snapshot;
use crate::state::{Shared, SourceKind};

/// A kube client from `--kubeconfig`, or the in-cluster service account.
pub async fn client(kubeconfig: Option<&Path>) -> anyhow::Result<Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("invalid kubeconfig {}", path.display()))?
        }
        None => Config::incluster().context("cannot load the in-cluster configuration")?,
    };
    Client::try_from(config).context("cannot build the Kubernetes client")
}

/// A rule ConfigMap as last fetched.
#[derive(Debug, Clone)]
struct RuleConfigMap {
    uid: String,
    resource_version: String,
    /// `data.spec`, or why the ConfigMap could not be fetched.
    spec: Result<Option<String>, String>,
    /// A newer version exists that could not be fetched yet.
    stale: bool,
}

type Key = (String, String);

/// What the watches have seen; owned by the one task that runs them.
struct ClusterState {
    config_maps: BTreeMap<Key, RuleConfigMap>,
    namespaces: Namespaces,
    /// Entries of a relist in progress, installed at its end.
    config_map_relist: Option<BTreeMap<Key, RuleConfigMap>>,
    namespace_relist: Option<Namespaces>,
    config_maps_synced: bool,
    namespaces_synced: bool,
    /// (uid, resourceVersion) of invalid rule ConfigMaps already given an Event.
    reported: HashSet<(String, String)>,
}

/// Watches the cluster and installs a new snapshot on every relevant change until
/// `shutdown` fires.
pub async fn run(
    client: Client,
    shared: Arc<Shared>,
    startup_sync_timeout: Duration,
    resync: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    // Metadata-only: the data of ConfigMaps that are not rules is never transferred or kept.
    let config_maps: Api<PartialObjectMeta<ConfigMap>> = Api::all(client.clone());
    let namespaces: Api<PartialObjectMeta<Namespace>> = Api::all(client.clone());
    let reporter = Reporter {
        controller: "drift-sentinel".into(),
        // The chart sets DRIFT_SENTINEL_POD_NAME (the --pod-name flag's variable).
        instance: std::env::var("DRIFT_SENTINEL_POD_NAME")
            .or_else(|_| std::env::var("POD_NAME"))
            .ok(),
    };
    let recorder = Recorder::new(client.clone(), reporter);
    let mut config_map_events =
        std::pin::pin!(watcher(config_maps, watcher::Config::default()).default_backoff());
    let mut namespace_events =
        std::pin::pin!(watcher(namespaces, watcher::Config::default()).default_backoff());
    let mut state = ClusterState {
        config_maps: BTreeMap::new(),
        namespaces: Namespaces::new(),
        config_map_relist: None,
        namespace_relist: None,
        config_maps_synced: false,
        namespaces_synced: false,
        reported: HashSet::new(),
    };
    shared.set_not_ready("waiting for the first sync of rule ConfigMaps and Namespaces");
    let startup_deadline = tokio::time::sleep(startup_sync_timeout);
    tokio::pin!(startup_deadline);
    let mut deadline_passed = false;
    // Rule ConfigMaps whose data could not be fetched are tried again every resync period.
    let mut resync_timer = tokio::time::interval_at(tokio::time::Instant::now() + resync, resync);
    loop {
        let changed = tokio::select! {
            event = config_map_events.next() => {
                on_config_map_event(&mut state, &client, &shared, event).await
            }
            event = namespace_events.next() => on_namespace_event(&mut state, &shared, event),
            _ = &mut startup_deadline, if !deadline_passed => {
                deadline_passed = true;
                if !shared.is_ready() {
                    let reason = format!(
                        "first sync not complete after {}: rule ConfigMaps {}, Namespaces {}",
                        humantime::format_duration(startup_sync_timeout),
                        if state.config_maps_synced { "synced" } else { "not synced" },
                        if state.namespaces_synced { "synced" } else { "not synced" },
                    );
                    tracing::error!("{reason}; still trying");
                    shared.set_not_ready(&reason);
                }
                false
            }
            _ = resync_timer.tick() => refetch_unreadable(&mut state, &client).await,
            _ = shutdown.changed() => return,
        };
        if changed && state.config_maps_synced && state.namespaces_synced {
            install(&state, &shared);
            report_invalid(&mut state, &shared, &recorder).await;
            if !shared.is_ready() {
                tracing::info!("first sync complete; ready");
                shared.set_ready(true);
            }
        }
    }
}

fn install(state: &ClusterState, shared: &Shared) {
    let mut sources = Vec::with_capacity(state.config_maps.len());
    let mut unreadable = Vec::new();
    for ((namespace, name), config_map) in &state.config_maps {
        let id = RuleId {
            namespace: namespace.clone(),
            name: name.clone(),
        };
        match &config_map.spec {
            Ok(spec) => sources.push(RuleSource {
                id,
                spec: spec.clone(),
                origin: None,
            }),
            Err(reason) => unreadable.push((id, reason.clone())),
        }
    }
    let mut snapshot = build_snapshot(
        sources,
        state.namespaces.clone(),
        Vec::new(),
        SourceKind::Cluster,
    );
    for (id, reason) in unreadable {
        snapshot.add_unreadable_rule(id, reason);
    }
    shared.install(snapshot);
}

/// One Warning Event per invalid rule ConfigMap version.
async fn report_invalid(state: &mut ClusterState, shared: &Shared, recorder: &Recorder) {
    let snapshot = shared.snapshot();
    for error in snapshot.rules.invalid() {
        let key = (error.namespace.clone(), error.name.clone());
        let Some(config_map) = state.config_maps.get(&key) else {
            continue;
        };
        let version = (config_map.uid.clone(), config_map.resource_version.clone());
        if !state.reported.insert(version) {
            continue;
        }
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
            name: Some(error.name.clone()),
            namespace: Some(error.namespace.clone()),
            uid: Some(config_map.uid.clone()),
            resource_version: Some(config_map.resource_version.clone()),
            ..ObjectReference::default()
        };
        let mut note = error.to_string();
        truncate_on_char_boundary(&mut note, 1000);
        let event = KubeEvent {
            type_: EventType::Warning,
            reason: "InvalidRule".into(),
            note: Some(note),
            action: "LoadRule".into(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&event, &reference).await {
            tracing::warn!(rule = %format!("{}/{}", error.namespace, error.name), error = %e, "cannot record the InvalidRule event");
        }
    }
    // Forget versions that are gone, so the set stays as small as the rule set.
    let live: HashSet<(String, String)> = state
        .config_maps
        .values()
        .map(|c| (c.uid.clone(), c.resource_version.clone()))
        .collect();
    state.reported.retain(|v| live.contains(v));
}

/// Fetches again the rule ConfigMaps whose last fetch failed; returns whether any changed.
async fn refetch_unreadable(state: &mut ClusterState, client: &Client) -> bool {
    let mut changed = false;
    for ((namespace, name), entry) in state.config_maps.iter_mut() {
        if entry.spec.is_ok() && !entry.stale {
            continue;
        }
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
        if let Ok(config_map) = api.get(name).await {
            entry.spec = Ok(config_map.data.and_then(|mut d| d.remove("spec")));
            entry.resource_version = config_map.metadata.resource_version.unwrap_or_default();
            entry.stale = false;
            changed = true;
        }
    }
    changed
}

fn truncate_on_char_boundary(text: &mut String, max: usize) {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
}

fn key_of<K: kube::Resource>(object: &PartialObjectMeta<K>) -> Key {
    (object.namespace().unwrap_or_default(), object.name_any())
}

/// Fetches `data.spec` of a rule ConfigMap.
async fn fetch(client: &Client, meta: &PartialObjectMeta<ConfigMap>) -> RuleConfigMap {
    let (namespace, name) = key_of(meta);
    let namespaced: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let spec = match namespaced.get(&name).await {
        Ok(config_map) => Ok(config_map.data.and_then(|mut d| d.remove("spec"))),
        Err(e) => Err(format!("cannot read the ConfigMap: {e}")),
    };
    RuleConfigMap {
        uid: meta.uid().unwrap_or_default(),
        resource_version: meta.resource_version().unwrap_or_default(),
        spec,
        stale: false,
    }
}

/// Applies one ConfigMap watch event; returns whether the rule set may have changed.
async fn on_config_map_event(
    state: &mut ClusterState,
    client: &Client,
    shared: &Shared,
    event: Option<Result<Event<PartialObjectMeta<ConfigMap>>, watcher::Error>>,
) -> bool {
    let event = match event {
        Some(Ok(event)) => event,
        Some(Err(e)) => {
            watch_error(shared, "configmaps", &e);
            return false;
        }
        None => return false,
    };
    match event {
        Event::Init => {
            state.config_map_relist = Some(BTreeMap::new());
            false
        }
        Event::InitApply(meta) => {
            if is_rule(&meta) {
                let known = state.config_maps.get(&key_of(&meta)).filter(|c| {
                    c.spec.is_ok() && Some(&c.resource_version) == meta.resource_version().as_ref()
                });
                let entry = match known {
                    Some(known) => known.clone(),
                    None => fetch(client, &meta).await,
                };
                if let Some(relist) = state.config_map_relist.as_mut() {
                    relist.insert(key_of(&meta), entry);
                }
            }
            false
        }
        Event::InitDone => {
            if let Some(relist) = state.config_map_relist.take() {
                state.config_maps = relist;
            }
            state.config_maps_synced = true;
            true
        }
        Event::Apply(meta) => {
            let key = key_of(&meta);
            if !is_rule(&meta) {
                return state.config_maps.remove(&key).is_some();
            }
            let unchanged = state.config_maps.get(&key).is_some_and(|c| {
                c.spec.is_ok() && Some(&c.resource_version) == meta.resource_version().as_ref()
            });
            if unchanged {
                return false;
            }
            let mut entry = fetch(client, &meta).await;
            if entry.spec.is_err()
                && let Some(previous) = state.config_maps.get(&key).filter(|c| c.spec.is_ok())
            {
                // A failed read of a new version keeps the last good rule in force (marked
                // stale, so the resync fetches it again) rather than switching it off.
                tracing::warn!(rule = %format!("{}/{}", key.0, key.1), "cannot read the new version of a rule ConfigMap; keeping the previous one until the next resync");
                entry = RuleConfigMap {
                    stale: true,
                    ..previous.clone()
                };
            }
            state.config_maps.insert(key, entry);
            true
        }
        Event::Delete(meta) => state.config_maps.remove(&key_of(&meta)).is_some(),
    }
}

fn is_rule(meta: &PartialObjectMeta<ConfigMap>) -> bool {
    let annotations: serde_json::Map<String, serde_json::Value> = meta
        .annotations()
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    is_rule_annotation(Some(&annotations))
}

fn namespace_info(meta: &PartialObjectMeta<Namespace>) -> NamespaceInfo {
    NamespaceInfo {
        mode_annotation: meta.annotations().get(MODE_ANNOTATION).cloned(),
    }
}

/// Applies one Namespace watch event; returns whether the namespaces changed.
fn on_namespace_event(
    state: &mut ClusterState,
    shared: &Shared,
    event: Option<Result<Event<PartialObjectMeta<Namespace>>, watcher::Error>>,
) -> bool {
    let event = match event {
        Some(Ok(event)) => event,
        Some(Err(e)) => {
            watch_error(shared, "namespaces", &e);
            return false;
        }
        None => return false,
    };
    match event {
        Event::Init => {
            state.namespace_relist = Some(Namespaces::new());
            false
        }
        Event::InitApply(meta) => {
            if let Some(relist) = state.namespace_relist.as_mut() {
                relist.insert(meta.name_any(), namespace_info(&meta));
            }
            false
        }
        Event::InitDone => {
            if let Some(relist) = state.namespace_relist.take() {
                state.namespaces = relist;
            }
            state.namespaces_synced = true;
            true
        }
        Event::Apply(meta) => {
            let info = namespace_info(&meta);
            state.namespaces.insert(meta.name_any(), info.clone()) != Some(info)
        }
        Event::Delete(meta) => state.namespaces.remove(&meta.name_any()).is_some(),
    }
}

fn watch_error(shared: &Shared, resource: &str, error: &watcher::Error) {
    shared
        .metrics
        .config_events
        .with_label_values(&["watch_error"])
        .inc();
    tracing::warn!(resource, error = %error, "watch failed; backing off and resuming");
}
