//! The task that writes Events (reference §6 "Events"): it takes findings from a bounded queue,
//! aggregates them in a [`Store`] and makes the writes due once a second, each within
//! [`WRITE_TIMEOUT`], a failed one again after a backoff. Nothing on the admission path waits on
//! it.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::{mpsc, watch};

use super::series::{Intent, Outcome, Store, Write};

/// The counters of the Events' path (shared with the metrics registry).
#[derive(Clone)]
pub(crate) struct EventMetrics {
    pub dropped: prometheus::IntCounterVec,
    pub writes: prometheus::IntCounterVec,
    /// The bytes of the findings in the queue (shared by the senders and the writer).
    pub queued_bytes: Arc<AtomicUsize>,
}

impl EventMetrics {
    pub(super) fn of(metrics: &crate::metrics::Metrics, queued_bytes: Arc<AtomicUsize>) -> Self {
        Self {
            dropped: metrics.events_dropped.clone(),
            writes: metrics.event_writes.clone(),
            queued_bytes,
        }
    }
}

/// Longest wait for one write.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the due writes are made.
const FLUSH_PERIOD: Duration = Duration::from_secs(1);
/// Most writes per flush: a flood of series is written over the next flushes, not at once.
const MAX_WRITES_PER_FLUSH: usize = 50;
/// After shutdown, the longest time given to the last writes.
const FINAL_FLUSH: Duration = Duration::from_secs(2);

pub(super) async fn run(
    client: kube::Client,
    mut store: Store,
    mut queue: mpsc::Receiver<Intent>,
    metrics: EventMetrics,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(FLUSH_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Made once: a future made again at every turn of the loop registers its waker again.
    let stop = stopped(&mut shutdown);
    tokio::pin!(stop);
    // Findings taken from the queue at one wake-up, at most: as many as it holds.
    let receive_batch = queue.max_capacity();
    let mut batch = Vec::with_capacity(receive_batch);
    loop {
        tokio::select! {
            received = queue.recv_many(&mut batch, receive_batch) => {
                if received == 0 {
                    break;
                }
                for intent in batch.drain(..) {
                    take(&mut store, intent, &metrics);
                }
                // What arrives meanwhile waits in the queue: under load the writer wakes once
                // per period, not once per finding (a wake-up from a decision thread is a
                // system call and a context switch on a shared core).
                tokio::time::sleep(GATHER_PERIOD).await;
            }
            _ = tick.tick() => flush(&client, &mut store, &metrics).await,
            () = &mut stop => {
                while let Ok(intent) = queue.try_recv() {
                    take(&mut store, intent, &metrics);
                }
                let _ = tokio::time::timeout(FINAL_FLUSH, flush(&client, &mut store, &metrics)).await;
                break;
            }
        }
    }
}

/// How long findings gather in the queue after the writer took some.
const GATHER_PERIOD: Duration = Duration::from_millis(20);

/// A finding left the queue: its bytes no longer count against [`super::MAX_QUEUED_BYTES`].
pub(super) fn queue_bytes(metrics: &EventMetrics, intent: &Intent) {
    metrics
        .queued_bytes
        .fetch_sub(intent.weight(), std::sync::atomic::Ordering::Relaxed);
}

async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    while !*shutdown.borrow_and_update() {
        if shutdown.changed().await.is_err() {
            // The sender is gone: the process is ending.
            return;
        }
    }
}

/// What the writer does with each finding it takes from the queue: frees its bytes and adds it
/// to its series.
pub(super) fn take(store: &mut Store, intent: Intent, metrics: &EventMetrics) {
    queue_bytes(metrics, &intent);
    if !store.observe(intent) {
        metrics.dropped.with_label_values(&["series_full"]).inc();
    }
}

async fn flush(client: &kube::Client, store: &mut Store, metrics: &EventMetrics) {
    let writes = store.due(SystemTime::now());
    for write in writes.into_iter().take(MAX_WRITES_PER_FLUSH) {
        let outcome = perform(client, &write).await;
        let result = match (&write, outcome) {
            (Write::Create { .. }, Outcome::Done) => "created",
            (Write::Patch { .. }, Outcome::Done) => "patched",
            _ => "failed",
        };
        metrics.writes.with_label_values(&[result]).inc();
        if store.written(&write, outcome, SystemTime::now()) {
            metrics.dropped.with_label_values(&["write_failed"]).inc();
        }
    }
}

async fn perform(client: &kube::Client, write: &Write) -> Outcome {
    let (namespace, written) = match write {
        Write::Create { event, .. } => {
            let namespace = event.metadata.namespace.clone().unwrap_or_default();
            let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
            let written =
                tokio::time::timeout(WRITE_TIMEOUT, api.create(&PostParams::default(), event))
                    .await;
            (namespace, written)
        }
        Write::Patch {
            namespace,
            name,
            patch,
            ..
        } => {
            let api: Api<Event> = Api::namespaced(client.clone(), namespace);
            let written = tokio::time::timeout(
                WRITE_TIMEOUT,
                api.patch(name, &PatchParams::default(), &Patch::Merge(patch)),
            )
            .await;
            (namespace.clone(), written)
        }
    };
    match written {
        Ok(Ok(_)) => Outcome::Done,
        // Created already (a retry of a create whose answer was lost).
        Ok(Err(kube::Error::Api(status)))
            if status.is_already_exists() && matches!(write, Write::Create { .. }) =>
        {
            Outcome::Done
        }
        Ok(Err(kube::Error::Api(status))) if status.is_not_found() => {
            if matches!(write, Write::Patch { .. }) {
                Outcome::Gone
            } else {
                tracing::warn!(namespace, error = %status.message, "cannot write an Event: its namespace is gone");
                Outcome::Failed
            }
        }
        Ok(Err(e)) => {
            tracing::warn!(namespace, error = %e, "cannot write an Event; will retry");
            Outcome::Failed
        }
        Err(_) => {
            tracing::warn!(
                namespace,
                "cannot write an Event: no answer in time; will retry"
            );
            Outcome::Failed
        }
    }
}
