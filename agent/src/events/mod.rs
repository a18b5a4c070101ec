//! Events on the objects Drift Sentinel judges (reference §6 "Events"): what the webhook let
//! through or denied, and the drift the audit finds, where `kubectl describe` and
//! `kubectl events --for` show them. A finding goes into a bounded queue ([`EventSink::send`]
//! never waits; what does not fit is dropped and counted); the writer task aggregates repeats
//! into one Event with a series count ([`series`]) and writes them with backoff ([`writer`]).

pub mod admission;
pub mod audit;
pub mod series;
mod setters;
mod writer;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use drift_engine::json::Document;
use drift_engine::{AdmissionRequest, Evaluation};
use tokio::sync::{mpsc, watch};

pub use series::{Intent, Reporter};
use writer::EventMetrics;

use crate::metrics::Metrics;

/// Findings waiting for the writer task, at most.
pub const QUEUE_CAPACITY: usize = 4096;
/// Bytes of the findings waiting for the writer task, at most ([`Intent::weight`]).
pub const MAX_QUEUED_BYTES: usize = 4 * 1024 * 1024;

/// Where findings go: the queue to the writer task.
#[derive(Clone)]
pub struct EventSink {
    queue: mpsc::Sender<Intent>,
    metrics: EventMetrics,
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
        let (sink, writer_side) = Self::unwritten(reporter, metrics);
        let WriterSide {
            queue,
            store,
            metrics,
        } = writer_side;
        let writer = tokio::spawn(writer::run(client, store, queue, metrics, shutdown));
        (sink, writer)
    }

    /// The sink and the writer's side of its queue, with no writer task yet: what
    /// [`Self::start`] hands to the task, and what a test or the benchmark takes findings from.
    pub(crate) fn unwritten(reporter: Reporter, metrics: &Metrics) -> (Self, WriterSide) {
        let (queue, receiver) = mpsc::channel(QUEUE_CAPACITY);
        let metrics = EventMetrics::of(metrics, Arc::default());
        let writer_side = WriterSide {
            queue: receiver,
            store: series::Store::new(reporter),
            metrics: metrics.clone(),
        };
        (Self { queue, metrics }, writer_side)
    }

    /// Makes the Events' findings of one admission decision ([`admission::intents_of`]) and
    /// hands them to the writer.
    pub(crate) fn send_admission<O: Document>(
        &self,
        request: &AdmissionRequest<O>,
        evaluation: &Evaluation<'_>,
        now: SystemTime,
    ) {
        self.send_all(admission::intents_of(request, evaluation, now));
    }

    /// Hands each finding to the writer ([`Self::send`]).
    pub fn send_all(&self, intents: impl IntoIterator<Item = Intent>) {
        for intent in intents {
            self.send(intent);
        }
    }

    /// Hands a finding to the writer, never waiting: dropped and counted when the queue is full
    /// ([`QUEUE_CAPACITY`] findings or [`MAX_QUEUED_BYTES`]).
    pub fn send(&self, intent: Intent) {
        let weight = intent.weight();
        let queued = &self.metrics.queued_bytes;
        let fits = queued.fetch_add(weight, Ordering::Relaxed) + weight <= MAX_QUEUED_BYTES;
        if !fits || self.queue.try_send(intent).is_err() {
            queued.fetch_sub(weight, Ordering::Relaxed);
            self.metrics
                .dropped
                .with_label_values(&["queue_full"])
                .inc();
        }
    }
}

/// The writer's side of an [`EventSink`]'s queue: the findings waiting, and their series.
pub(crate) struct WriterSide {
    queue: mpsc::Receiver<Intent>,
    store: series::Store,
    metrics: EventMetrics,
}

impl WriterSide {
    /// Takes the queued findings into their series, as the writer task does between writes;
    /// how many it took.
    pub(crate) fn take(&mut self) -> usize {
        let mut taken = 0;
        while let Ok(intent) = self.queue.try_recv() {
            writer::take(&mut self.store, intent, &self.metrics);
            taken += 1;
        }
        taken
    }
}

/// The webhook's Events findings of a decision, made and taken into their series as the writer
/// task takes them, but never written (no task, no cluster): the agent library's one seam for
/// `bench/examples/finding_loop.rs`, which counts the instructions of this per finding.
pub struct UnwrittenFindings {
    sink: EventSink,
    writer_side: WriterSide,
}

impl UnwrittenFindings {
    /// Findings reported as the webhook's, from `instance`.
    pub fn new(instance: &str) -> Result<Self, prometheus::Error> {
        let reporter = Reporter {
            controller: drift_api::events::WEBHOOK_CONTROLLER,
            instance: instance.to_owned(),
            signing_key: None,
        };
        let (sink, writer_side) = EventSink::unwritten(reporter, &Metrics::new()?);
        Ok(Self { sink, writer_side })
    }

    /// What the webhook does after answering a decision ([`EventSink::send_admission`]), then
    /// what the writer task does with its findings; how many findings it made.
    pub fn find<O: Document>(
        &mut self,
        request: &AdmissionRequest<O>,
        evaluation: &Evaluation<'_>,
        now: SystemTime,
    ) -> usize {
        self.sink.send_admission(request, evaluation, now);
        self.writer_side.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(note_bytes: usize) -> Intent {
        Intent {
            regarding: series::Regarding {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: "shop".into(),
                name: "web".into(),
                uid: "u-1".into(),
            },
            type_: series::EventType::Warning,
            reason: drift_api::events::reason::DRIFT_WARNED,
            action: "Allow",
            note: series::Note::Latest("n".repeat(note_bytes)),
            user: "alice".into(),
            rule: "ops/web".into(),
            record: None,
            bypass: None,
            distinct: None,
            memory: None,
            at: SystemTime::UNIX_EPOCH,
        }
    }

    /// The queue holds at most [`MAX_QUEUED_BYTES`] of findings, whatever their number: one that
    /// does not fit is dropped and counted, and room comes back as the writer takes them.
    #[test]
    fn the_queue_is_bounded_in_bytes() {
        let metrics = Metrics::new().expect("metrics");
        let (queue, mut receiver) = mpsc::channel(QUEUE_CAPACITY);
        let sink = EventSink {
            queue,
            metrics: EventMetrics::of(&metrics, Arc::default()),
        };
        let big = finding(MAX_QUEUED_BYTES / 3);
        let weight = big.weight();
        assert!(weight > MAX_QUEUED_BYTES / 3);
        for _ in 0..3 {
            sink.send(big.clone());
        }
        let dropped = || {
            metrics
                .events_dropped
                .with_label_values(&["queue_full"])
                .get()
        };
        // Two fit; the third would pass the bound.
        assert_eq!(dropped(), 1);
        assert_eq!(
            sink.metrics.queued_bytes.load(Ordering::Relaxed),
            2 * weight
        );
        // Small findings still fit beside them.
        sink.send(finding(10));
        assert_eq!(dropped(), 1);
        // The writer took one: its bytes are free again.
        let taken = receiver.try_recv().expect("a finding");
        writer::queue_bytes(&sink.metrics, &taken);
        sink.send(big);
        assert_eq!(dropped(), 1);
    }
}
