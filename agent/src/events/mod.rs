//! Events on the objects Drift Sentinel judges (reference §6 "Events"): what the webhook let
//! through or denied, and the drift the audit finds, where `kubectl describe` and
//! `kubectl events --for` show them. A finding goes into a bounded queue ([`EventSink::send`]
//! never waits; what does not fit is dropped and counted); the writer task aggregates repeats
//! into one Event with a series count ([`series`]) and writes them with backoff ([`writer`]).

pub mod admission;
pub mod audit;
pub mod series;
mod writer;

use tokio::sync::{mpsc, watch};

pub use series::{Intent, Reporter};

use crate::metrics::Metrics;

/// Findings waiting for the writer task.
pub const QUEUE_CAPACITY: usize = 1024;

/// Where findings go: the queue to the writer task.
#[derive(Clone)]
pub struct EventSink {
    queue: mpsc::Sender<Intent>,
    metrics: EventMetrics,
}

/// The counters of the Events' path (shared with the metrics registry).
#[derive(Clone)]
pub(crate) struct EventMetrics {
    pub dropped: prometheus::IntCounterVec,
    pub writes: prometheus::IntCounterVec,
}

impl EventMetrics {
    fn of(metrics: &Metrics) -> Self {
        Self {
            dropped: metrics.events_dropped.clone(),
            writes: metrics.event_writes.clone(),
        }
    }
}

impl EventSink {
    /// Starts the writer task on the current runtime; it ends at `shutdown` after a last write
    /// (its handle says when).
    pub fn start(
        client: kube::Client,
        reporter: Reporter,
        metrics: &Metrics,
        shutdown: watch::Receiver<bool>,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let (queue, receiver) = mpsc::channel(QUEUE_CAPACITY);
        let store = series::Store::new(reporter);
        let writer = tokio::spawn(writer::run(
            client,
            store,
            receiver,
            EventMetrics::of(metrics),
            shutdown,
        ));
        let sink = Self {
            queue,
            metrics: EventMetrics::of(metrics),
        };
        (sink, writer)
    }

    /// Hands each finding to the writer ([`Self::send`]).
    pub fn send_all(&self, intents: impl IntoIterator<Item = Intent>) {
        for intent in intents {
            self.send(intent);
        }
    }

    /// Hands a finding to the writer, never waiting: dropped and counted when the queue is full.
    pub fn send(&self, intent: Intent) {
        if self.queue.try_send(intent).is_err() {
            self.metrics
                .dropped
                .with_label_values(&["queue_full"])
                .inc();
        }
    }
}
