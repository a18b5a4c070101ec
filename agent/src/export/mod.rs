//! Violation export (reference §7). The webhook hands each violating decision to the [`Exporter`],
//! which reserves a queue slot, builds the record (`record`), and queues it (`queue`) without
//! ever waiting; the publisher thread (`publisher`) writes batches to the disk spool (`spool`)
//! of the channel directory the Connection (`connection`) names. Every record is either on
//! disk or counted as dropped, by reason. `stream` serves the admin `/violations` stream and
//! `reader` is the demonstration reader.

pub mod connection;
pub mod counters;
pub mod paths;
pub mod publisher;
pub mod queue;
pub mod reader;
pub mod record;
pub mod spool;
pub mod stream;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwapOption;
use drift_engine::json::Document;
use drift_engine::{AdmissionRequest, Evaluation};

use crate::connection_status::PublishHealth;
use crate::metrics::Metrics;
use counters::{DropReason, ExportCounters, LogLimiter};
use publisher::PublisherParts;
use queue::{Message, Queue, QueueLimits};
use spool::{Clock, FreeSpace, Limits};

/// How long shutdown waits for the queue to drain.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// What the exporter is built from.
pub struct ExportConfig {
    pub clock: Arc<dyn Clock>,
    pub free_space: Arc<dyn FreeSpace>,
    pub limits: Limits,
    pub queue: QueueLimits,
}

impl Default for ExportConfig {
    fn default() -> Self {
        Self {
            clock: Arc::new(spool::SystemClock),
            free_space: Arc::new(spool::StatvfsFreeSpace),
            limits: Limits::default(),
            queue: QueueLimits::default(),
        }
    }
}

/// The admission export of one agent process.
pub struct Exporter {
    queue: Arc<Queue>,
    clock: Arc<dyn Clock>,
    counters: ExportCounters,
    logs: Arc<LogLimiter>,
    record_limit: usize,
    connected: AtomicBool,
    channel_dir: ArcSwapOption<PathBuf>,
    drain_deadline: Arc<Mutex<Option<Instant>>>,
    health: Arc<PublishHealth>,
}

impl Exporter {
    /// Starts the publisher thread. Nothing is exported until [`Exporter::reconfigure`] gives
    /// it a channel directory.
    pub fn start(
        config: ExportConfig,
        metrics: &Metrics,
        health: Arc<PublishHealth>,
    ) -> std::io::Result<Arc<Self>> {
        let (tx, rx) = std::sync::mpsc::channel();
        let queue = Arc::new(Queue::new(config.queue, tx));
        let counters = ExportCounters::new(metrics);
        let logs = Arc::new(LogLimiter::default());
        let drain_deadline = Arc::new(Mutex::new(None));
        let record_limit = config.limits.record_bytes;
        publisher::spawn(
            PublisherParts {
                queue: queue.clone(),
                clock: config.clock.clone(),
                free_space: config.free_space,
                limits: config.limits,
                counters: counters.clone(),
                health: health.clone(),
                logs: logs.clone(),
                drain_deadline: drain_deadline.clone(),
            },
            rx,
        )?;
        Ok(Arc::new(Self {
            queue,
            clock: config.clock,
            counters,
            logs,
            record_limit,
            connected: AtomicBool::new(false),
            channel_dir: ArcSwapOption::empty(),
            drain_deadline,
            health,
        }))
    }

    /// Exports a violating evaluation; returns at once whatever happens to the record.
    pub fn export_admission<O: Document>(
        &self,
        request: &AdmissionRequest<O>,
        evaluation: &Evaluation<'_>,
    ) {
        // Violations, and edits a bypass allowed: the trail of a temporary exception's use.
        if !evaluation.is_violation() && evaluation.step() != drift_engine::Step::Bypassed {
            return;
        }
        if !self.connected.load(Ordering::Acquire) {
            self.counters.dropped(DropReason::NoConnection, &self.logs);
            return;
        }
        let slot = match self.queue.reserve() {
            Ok(slot) => slot,
            Err(reason) => {
                self.counters.dropped(reason, &self.logs);
                return;
            }
        };
        let Some(record) = record::admission_record(request, evaluation, self.clock.now()) else {
            return; // mode off: nothing the export records
        };
        let encoded = match record.encode() {
            Ok(encoded) => encoded,
            Err(_) => {
                self.counters.dropped(DropReason::EncodeError, &self.logs);
                return;
            }
        };
        if encoded.len() > self.record_limit {
            self.counters
                .dropped(DropReason::MessageTooLarge, &self.logs);
            return;
        }
        match slot.send(encoded) {
            Ok(()) => self.counters.queue_depth(self.queue.depth()),
            Err(reason) => self.counters.dropped(reason, &self.logs),
        }
    }

    /// Exports to `dir` (a channel directory) from now on, or nowhere.
    pub fn reconfigure(&self, dir: Option<PathBuf>) {
        self.connected.store(dir.is_some(), Ordering::Release);
        self.channel_dir.store(dir.clone().map(Arc::new));
        self.queue.control(Message::Reconfigure(dir));
    }

    /// The channel directory records go to, when there is a usable Connection.
    pub fn channel_dir(&self) -> Option<PathBuf> {
        self.channel_dir.load_full().map(|d| d.as_ref().clone())
    }

    pub fn health(&self) -> &Arc<PublishHealth> {
        &self.health
    }

    /// Messages and bytes queued.
    pub fn queue_depth(&self) -> (usize, usize) {
        self.queue.depth()
    }

    /// Stops taking records and drains the queue for up to `within`; what is still queued
    /// then is dropped with reason `shutdown`. The open segment is completed.
    pub async fn shutdown(&self, within: Duration) {
        let deadline = Instant::now() + within;
        if let Ok(mut d) = self.drain_deadline.lock() {
            *d = Some(deadline);
        }
        self.queue.close();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        if !self.queue.control(Message::Drain(done_tx)) {
            return;
        }
        // A little beyond the deadline: the publisher drops what is left once it passes.
        let grace = within + Duration::from_millis(500);
        if tokio::time::timeout(grace, done_rx).await.is_err() {
            // The publisher is stuck in a write: what it has not taken is lost.
            let (messages, _) = self.queue.depth();
            self.counters.dropped_many(
                DropReason::Shutdown,
                u64::try_from(messages).unwrap_or(u64::MAX),
                &self.logs,
            );
            tracing::warn!(
                queued = messages,
                "export drain did not finish within {within:?}"
            );
        }
    }
}

/// A clock read from a file holding an RFC 3339 time, for tests that move time forward
/// (hidden flag `--export-clock-file`). The system clock when the file cannot be read.
pub struct FileClock(pub PathBuf);

impl Clock for FileClock {
    fn now(&self) -> SystemTime {
        std::fs::read_to_string(&self.0)
            .ok()
            .and_then(|t| humantime::parse_rfc3339(t.trim()).ok())
            .unwrap_or_else(SystemTime::now)
    }
}

/// A free-space probe read from a file holding a number of bytes, for tests of the reserve
/// (hidden flag `--export-free-space-file`). statvfs when the file cannot be read.
pub struct FileFreeSpace(pub PathBuf);

impl FreeSpace for FileFreeSpace {
    fn available(&self, dir: &Path) -> std::io::Result<u64> {
        match std::fs::read_to_string(&self.0)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            Some(bytes) => Ok(bytes),
            None => spool::StatvfsFreeSpace.available(dir),
        }
    }
}
