//! Rules and namespaces from the cluster, on kube-runtime: a metadata-only watch of ConfigMaps
//! (`Api<PartialObjectMeta<ConfigMap>>`, what `metadata_watcher` was) and a
//! watch of Namespaces, each into a reflector store, feed the same snapshot builder as the rule
//! files do.
//!
//! What the events mean is decided by [`RuleIndex`] (no HTTP there); this module only runs
//! the watches and fetches the data of annotated ConfigMaps. Fetches run as tasks beside the
//! event loop (at most [`MAX_FETCHES`] at once, each bounded by [`FETCH_TIMEOUT`]), so a hung
//! GET never stalls namespace events or shutdown. Invalid rules get one Warning Event
//! (`InvalidRule`) per ConfigMap version, published from a task with a timeout too.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use drift_api::status::RuleSourceKind;
use drift_engine::manifests::{NamespaceInfo, Namespaces};
use drift_engine::rule::MODE_ANNOTATION;
use futures::{FutureExt as _, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ObjectReference};
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::kube_client::WATCH_TIMEOUT_SECONDS;
use crate::last_good::{Keeper, LastGoodMap, LastGoodStore, NotKept};
use crate::rule_index::{self, Changes, FetchRequest, FetchedRule, InvalidVersion, RuleIndex};
use crate::rules_source::build_snapshot;
use crate::state::Shared;
use crate::watch_failures::{FailureLog, LogLine, with_backoff};

/// Longest wait for one GET of a rule ConfigMap.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Fetches running at once; more wait in a queue.
pub const MAX_FETCHES: usize = 8;
/// Longest wait for one Event to be recorded.
const EVENT_TIMEOUT: Duration = Duration::from_secs(10);
/// Fetches of rule ConfigMaps' data, run as tasks; results come back through [`Fetcher::next`].
struct Fetcher {
    client: Client,
    tasks: JoinSet<(FetchRequest, Result<FetchedRule, String>)>,
    queue: VecDeque<FetchRequest>,
}

impl Fetcher {
    fn new(client: Client) -> Self {
        Self {
            client,
            tasks: JoinSet::new(),
            queue: VecDeque::new(),
        }
    }

    fn start(&mut self, request: FetchRequest) {
        if self.tasks.len() >= MAX_FETCHES {
            self.queue.push_back(request);
            return;
        }
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &request.id.namespace);
        self.tasks.spawn(async move {
            let result = fetch(&api, &request.id.name).await;
            (request, result)
        });
    }

    fn is_idle(&self) -> bool {
        self.tasks.is_empty()
    }

    /// The next finished fetch. Pending forever while none runs (guard with `is_idle`).
    async fn next(&mut self) -> Option<(FetchRequest, Result<FetchedRule, String>)> {
        let done = self.tasks.join_next().await?;
        while self.tasks.len() < MAX_FETCHES {
            let Some(request) = self.queue.pop_front() else {
                break;
            };
            self.start(request);
        }
        // A fetch task that panicked has no result to give; the resync tries again.
        done.ok()
    }
}

/// Reads `data.spec` of one ConfigMap, within [`FETCH_TIMEOUT`].
async fn fetch(api: &Api<ConfigMap>, name: &str) -> Result<FetchedRule, String> {
    match tokio::time::timeout(FETCH_TIMEOUT, api.get(name)).await {
        Ok(Ok(config_map)) => Ok(FetchedRule {
            uid: config_map.metadata.uid.clone().unwrap_or_default(),
            resource_version: config_map
                .metadata
                .resource_version
                .clone()
                .unwrap_or_default(),
            spec: config_map.data.and_then(|mut d| d.remove("spec")),
        }),
        Ok(Err(e)) => Err(format!("cannot read the ConfigMap: {e}")),
        Err(_) => Err(format!(
            "cannot read the ConfigMap: no answer within {}",
            humantime::format_duration(FETCH_TIMEOUT)
        )),
    }
}

/// The Namespaces the rules need to know: their mode annotations.
fn namespaces_of(store: &Store<Namespace>) -> Namespaces {
    store
        .state()
        .iter()
        .map(|namespace| {
            let info = NamespaceInfo {
                mode_annotation: namespace.annotations().get(MODE_ANNOTATION).cloned(),
            };
            (namespace.name_any(), info)
        })
        .collect()
}

fn reporter() -> Reporter {
    Reporter {
        controller: "drift-sentinel".into(),
        // The chart sets DRIFT_SENTINEL_POD_NAME (the --pod-name flag's variable).
        instance: std::env::var("DRIFT_SENTINEL_POD_NAME")
            .or_else(|_| std::env::var("POD_NAME"))
            .ok(),
    }
}

/// How the cluster source runs.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Longest wait for the first sync before the agent says why it is not ready.
    pub startup_sync_timeout: Duration,
    /// How often rule ConfigMaps that could not be read are fetched again.
    pub resync: Duration,
    /// The agent's namespace and the name of its ConfigMap of last good rule versions.
    pub last_good: (String, String),
    /// Whether this process keeps that ConfigMap written (the webhook's agents) or only reads
    /// it (the audit).
    pub keep_last_good: bool,
}

/// Reads the last good rule versions, and starts the task that keeps them written.
async fn start_last_good(
    client: &Client,
    options: &ClusterOptions,
    shared: &Shared,
    shutdown: &watch::Receiver<bool>,
) -> (LastGoodMap, Option<Keeper>) {
    let (namespace, name) = &options.last_good;
    let store = LastGoodStore::new(Api::namespaced(client.clone(), namespace), namespace, name);
    if !options.keep_last_good {
        return (store.read().await, None);
    }
    let deadline = tokio::time::Instant::now() + options.startup_sync_timeout;
    let loaded = store.load(deadline).await;
    if !loaded.usable {
        return (loaded.entries, None);
    }
    let (sender, receiver) = watch::channel(loaded.entries.clone());
    tokio::spawn(store.persist(
        loaded.entries.clone(),
        receiver,
        shared.metrics.last_good_refused.clone(),
        shutdown.clone(),
    ));
    (loaded.entries, Some(Keeper::new(sender)))
}

/// Watches the cluster and installs a new snapshot on every relevant change until
/// `shutdown` fires.
pub async fn run(
    client: Client,
    shared: Arc<Shared>,
    options: ClusterOptions,
    mut shutdown: watch::Receiver<bool>,
) {
    let ClusterOptions {
        startup_sync_timeout,
        resync,
        ..
    } = options;
    let startup_deadline = tokio::time::sleep(startup_sync_timeout);
    tokio::pin!(startup_deadline);
    shared.set_not_ready("waiting for the first sync: reading the last good rule versions");
    // Before the first sync: a rule that is invalid now is served in its last valid version
    // from the start.
    let (last_good, mut keeper) = start_last_good(&client, &options, &shared, &shutdown).await;
    let store = format!("{}/{}", options.last_good.0, options.last_good.1);
    let watch_config = watcher::Config::default().timeout(WATCH_TIMEOUT_SECONDS);
    // Metadata only: the data of ConfigMaps that are not rules is never transferred or kept.
    let mut config_map_events =
        std::pin::pin!(config_map_watch(client.clone(), watch_config.clone()));
    let (namespace_store, namespace_writer) = reflector::store::<Namespace>();
    let mut namespace_events = std::pin::pin!(namespace_watch(
        client.clone(),
        watch_config,
        namespace_writer
    ));
    let recorder = Recorder::new(client.clone(), reporter());
    let mut events_out: JoinSet<()> = JoinSet::new();
    let mut index = RuleIndex::with_last_good(last_good);
    let mut fetcher = Fetcher::new(client);
    let mut namespaces = Namespaces::new();
    let mut config_map_failures = FailureLog::default();
    let mut namespace_failures = FailureLog::default();
    shared.set_not_ready("waiting for the first sync of rule ConfigMaps and Namespaces");
    let mut deadline_passed = false;
    // Rule ConfigMaps whose data could not be fetched are tried again every resync period.
    let mut resync_timer = tokio::time::interval_at(tokio::time::Instant::now() + resync, resync);
    loop {
        let changes = tokio::select! {
            event = config_map_events.next() => match event {
                Some(Ok(event)) => {
                    watch_recovered(&mut config_map_failures, "configmaps");
                    index.apply(&event)
                }
                Some(Err(e)) => {
                    watch_failed(&shared, &mut config_map_failures, "configmaps", &e);
                    Changes::default()
                }
                None => Changes::default(),
            },
            event = namespace_events.next() => match event {
                None => Changes::default(),
                Some(Ok(event)) => {
                    watch_recovered(&mut namespace_failures, "namespaces");
                    if matches!(event, Event::Init | Event::InitApply(_)) {
                        // A relist in progress: the store still holds the previous list.
                        continue;
                    }
                    let next = namespaces_of(&namespace_store);
                    let changed = next != namespaces;
                    namespaces = next;
                    Changes { changed, ..Changes::default() }
                }
                Some(Err(e)) => {
                    watch_failed(&shared, &mut namespace_failures, "namespaces", &e);
                    Changes::default()
                }
            },
            Some((request, result)) = fetcher.next(), if !fetcher.is_idle() => {
                index.fetched(&request, result)
            }
            _ = &mut startup_deadline, if !deadline_passed => {
                deadline_passed = true;
                if !shared.rules_synced() {
                    let reason = format!(
                        "first sync not complete after {}: rule ConfigMaps {}, Namespaces {}",
                        humantime::format_duration(startup_sync_timeout),
                        sync_state(is_ready(&index.store()), index.pending()),
                        sync_state(is_ready(&namespace_store), 0),
                    );
                    tracing::error!("{reason}; still trying");
                    shared.set_not_ready(&reason);
                }
                Changes::default()
            }
            _ = resync_timer.tick() => Changes {
                fetch: index.unreadable(),
                ..Changes::default()
            },
            Some(_) = events_out.join_next(), if !events_out.is_empty() => Changes::default(),
            _ = shutdown.changed() => return,
        };
        for id in &changes.fetch {
            if let Some(request) = index.start_fetch(id) {
                fetcher.start(request);
            }
        }
        // Installed once both stores are ready and every rule listed first has been read (or
        // failed to be): a rule set missing a rule that exists would allow what it denies.
        let synced = is_ready(&index.store()) && is_ready(&namespace_store);
        let first_sync = !shared.rules_synced() && synced && index.pending() == 0;
        if (changes.changed && shared.rules_synced()) || first_sync {
            install(&index, &namespaces, &shared);
            let reporting = Reporting {
                recorder: &recorder,
                events_out: &mut events_out,
                store: &store,
            };
            after_install(&mut index, keeper.as_mut(), &shared, reporting);
            if first_sync {
                tracing::info!("first sync complete; ready");
                shared.set_ready(true);
            }
        }
    }
}

/// Rule ConfigMaps, metadata only, stripped of what is never read.
fn config_map_watch(
    client: Client,
    config: watcher::Config,
) -> impl futures::Stream<Item = watcher::Result<Event<rule_index::ConfigMapMeta>>> + Send {
    with_backoff(
        watcher(
            Api::<rule_index::ConfigMapMeta>::all(client.clone()),
            config,
        )
        .modify(rule_index::strip),
    )
}

/// Namespaces into a reflector store, stripped of what is never read.
fn namespace_watch(
    client: Client,
    config: watcher::Config,
    writer: reflector::store::Writer<Namespace>,
) -> impl futures::Stream<Item = watcher::Result<Event<Namespace>>> + Send {
    let events = watcher(Api::<Namespace>::all(client), config).modify(|namespace| {
        namespace.metadata.managed_fields = None;
        namespace.spec = None;
        namespace.status = None;
    });
    reflector::reflector(writer, with_backoff(events))
}

/// Where the Events of a rule change go, and the name of the last-good store.
struct Reporting<'r> {
    recorder: &'r Recorder,
    events_out: &'r mut JoinSet<()>,
    store: &'r str,
}

/// After a snapshot is installed: the last good versions to keep (fitted to the store, what
/// does not fit reported), and the InvalidRule Events now due (all sent by tasks, off the event
/// loop).
fn after_install(
    index: &mut RuleIndex,
    keeper: Option<&mut Keeper>,
    shared: &Shared,
    reporting: Reporting<'_>,
) {
    if let Some(keeper) = keeper {
        let tiers = shared.tier_policy();
        let (new, left_out) = keeper.keep(&index.last_good(), |id| tiers.tier_of(&id.namespace));
        shared
            .metrics
            .last_good_not_kept
            .set(i64::try_from(left_out).unwrap_or(i64::MAX));
        for not_kept in new {
            let reason = not_kept.reason(reporting.store);
            tracing::warn!(rule = %not_kept.id, bytes = not_kept.bytes, "{reason}");
            reporting.events_out.spawn(report_not_kept(
                reporting.recorder.clone(),
                not_kept,
                reason,
            ));
        }
    }
    for invalid in index.unreported_invalid() {
        reporting
            .events_out
            .spawn(report_invalid(reporting.recorder.clone(), invalid));
    }
}

fn is_ready<K: kube::Resource + Clone + 'static>(store: &Store<K>) -> bool
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store.wait_until_ready().now_or_never().is_some()
}

fn sync_state(ready: bool, pending: usize) -> String {
    match (ready, pending) {
        (false, _) => "not synced".into(),
        (true, 0) => "synced".into(),
        (true, n) => format!("listed, {n} not read yet"),
    }
}

fn install(index: &RuleIndex, namespaces: &Namespaces, shared: &Shared) {
    let sources = index.sources();
    let mut snapshot = build_snapshot(
        sources.rules,
        namespaces.clone(),
        Vec::new(),
        RuleSourceKind::Cluster,
        shared.tier_policy(),
    );
    for (id, reason) in sources.unreadable {
        snapshot.add_unreadable_rule(id, reason);
    }
    snapshot.stale_rules = sources.stale;
    shared.install(snapshot);
}

/// The `InvalidRule` Warning Event of one ConfigMap version.
async fn report_invalid(recorder: Recorder, invalid: InvalidVersion) {
    let InvalidVersion {
        error,
        uid,
        resource_version,
    } = invalid;
    let id = drift_engine::RuleId {
        namespace: error.namespace.clone(),
        name: error.name.clone(),
    };
    let warning = RuleWarning {
        reason: "InvalidRule",
        action: "LoadRule",
        note: error.to_string(),
    };
    publish(&recorder, &id, uid, resource_version, warning).await;
}

/// The `LastGoodNotKept` Warning Event of a rule whose last good version the store leaves out.
async fn report_not_kept(recorder: Recorder, not_kept: NotKept, note: String) {
    let warning = RuleWarning {
        reason: "LastGoodNotKept",
        action: "KeepLastGood",
        note,
    };
    let NotKept {
        id,
        uid,
        resource_version,
        ..
    } = not_kept;
    publish(&recorder, &id, uid, resource_version, warning).await;
}

/// A Warning Event about a rule ConfigMap.
struct RuleWarning {
    reason: &'static str,
    action: &'static str,
    note: String,
}

/// Publishes `warning` on the rule ConfigMap `id` (of `uid`, at `resource_version`), within
/// [`EVENT_TIMEOUT`].
async fn publish(
    recorder: &Recorder,
    id: &drift_engine::RuleId,
    uid: String,
    resource_version: String,
    warning: RuleWarning,
) {
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: Some(id.name.clone()),
        namespace: Some(id.namespace.clone()),
        uid: Some(uid),
        resource_version: Some(resource_version),
        ..ObjectReference::default()
    };
    // An Event's note is at most 1 KiB.
    let note = drift_engine::truncate::truncate_bytes(&warning.note, 1000);
    let event = KubeEvent {
        type_: EventType::Warning,
        reason: warning.reason.into(),
        note: Some(note),
        action: warning.action.into(),
        secondary: None,
    };
    let reason = warning.reason;
    match tokio::time::timeout(EVENT_TIMEOUT, recorder.publish(&event, &reference)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(rule = %id, error = %e, "cannot record the {reason} event")
        }
        Err(_) => {
            tracing::warn!(rule = %id, "cannot record the {reason} event: no answer in time")
        }
    }
}

/// Counts a watch failure and logs it, at most once per resource every ten seconds.
fn watch_failed(shared: &Shared, log: &mut FailureLog, resource: &str, error: &watcher::Error) {
    shared
        .metrics
        .watch_failures
        .with_label_values(&[resource])
        .inc();
    shared
        .metrics
        .config_events
        .with_label_values(&["watch_error"])
        .inc();
    if let LogLine::Warn { suppressed } = log.failed(Instant::now()) {
        tracing::warn!(
            resource,
            error = %error,
            suppressed,
            "watch failed; retrying (suppressed: failures not logged since the previous line)"
        );
    }
}

fn watch_recovered(log: &mut FailureLog, resource: &str) {
    if let Some(failures) = log.succeeded() {
        tracing::info!(resource, failures, "watch resumed");
    }
}
