//! Violation export (SPEC §7). The webhook hands each violating decision to the [`Exporter`],
//! which reserves a queue slot, builds the record (`record`), and queues it (`queue`) without
//! ever waiting; the publisher thread (`publisher`) writes batches to the disk spool (`spool`)
//! of the channel directory the Connection (`connection`) names. Every record is either on
//! disk or counted as dropped, by reason. `stream` serves the admin `/violations` stream and
//! `reader` is the demonstration reader.

pub mod connection;
pub mod paths;
pub mod publisher;
pub mod queue;
pub mod reader;
pub mod record;
pub mod spool;
pub mod stream;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwapOption;
use drift_engine::json::Document;
use drift_engine::{AdmissionRequest, Evaluation};
use prometheus::IntGauge;

use crate::connection_status::PublishHealth;
use crate::metrics::Metrics;
use publisher::PublisherParts;
use queue::{Message, Queue, QueueLimits};
use spool::{Clock, FreeSpace, Limits, SpoolStats};

/// How long shutdown waits for the queue to drain.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a record was not exported (the `reason` label of the drop counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Over 64 KiB once encoded.
    MessageTooLarge,
    /// 1,024 messages or 16 MiB already queued.
    QueueFull,
    /// The record could not be encoded.
    EncodeError,
    /// Free space on the spool's file system is below the 16 MiB reserve.
    DiskFull,
    /// Still queued when the shutdown drain ended, or produced after it began.
    Shutdown,
    /// Writing to the spool failed (a read-only or vanished directory, an I/O error).
    PublishError,
    /// No usable Connection: missing, invalid, or its path cannot be written.
    NoConnection,
}

impl DropReason {
    pub const ALL: [DropReason; 7] = [
        DropReason::MessageTooLarge,
        DropReason::QueueFull,
        DropReason::EncodeError,
        DropReason::DiskFull,
        DropReason::Shutdown,
        DropReason::PublishError,
        DropReason::NoConnection,
    ];

    /// The line logged (at most once a minute) when a record is dropped for this reason.
    fn log_message(self) -> &'static str {
        match self {
            DropReason::MessageTooLarge => {
                "admission violation record dropped: over 64 KiB encoded (message_too_large)"
            }
            DropReason::QueueFull => {
                "admission violation record dropped: the export queue is full (queue_full)"
            }
            DropReason::EncodeError => {
                "admission violation record dropped: it could not be encoded (encode_error)"
            }
            DropReason::DiskFull => {
                "admission violation record dropped: free space is below the 16 MiB reserve (disk_full)"
            }
            DropReason::Shutdown => {
                "admission violation record dropped: still queued when the shutdown drain ended (shutdown)"
            }
            DropReason::PublishError => {
                "admission violation record dropped: writing to the spool failed (publish_error)"
            }
            DropReason::NoConnection => {
                "admission violation record dropped: no usable Connection (no_connection)"
            }
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::MessageTooLarge => "message_too_large",
            DropReason::QueueFull => "queue_full",
            DropReason::EncodeError => "encode_error",
            DropReason::DiskFull => "disk_full",
            DropReason::Shutdown => "shutdown",
            DropReason::PublishError => "publish_error",
            DropReason::NoConnection => "no_connection",
        }
    }
}

/// Logs each class of problem at most once a minute, saying how many were suppressed.
#[derive(Default)]
pub struct LogLimiter {
    last: Mutex<HashMap<String, (Instant, u64)>>,
}

const LOG_PERIOD: Duration = Duration::from_secs(60);

impl LogLimiter {
    pub fn warn(&self, class: &str, message: &str) {
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        let now = Instant::now();
        match last.get_mut(class) {
            Some((at, suppressed)) if now.duration_since(*at) < LOG_PERIOD => {
                *suppressed += 1;
            }
            Some((at, suppressed)) => {
                tracing::warn!(class, suppressed_since_last = *suppressed, "{message}");
                *at = now;
                *suppressed = 0;
            }
            None => {
                tracing::warn!(class, "{message}");
                last.insert(class.to_owned(), (now, 0));
            }
        }
    }
}

/// The export metrics of the webhook source.
#[derive(Clone)]
pub struct ExportCounters {
    published: prometheus::IntCounter,
    /// One counter per reason, in the order of [`DropReason::ALL`], resolved once.
    dropped: Vec<prometheus::IntCounter>,
    queue_messages: IntGauge,
    queue_bytes: IntGauge,
    spool_segments: IntGauge,
    spool_bytes: IntGauge,
}

const SOURCE: &str = "webhook";

impl ExportCounters {
    pub fn new(metrics: &Metrics) -> Self {
        // Every reason is present from the start, so that a rate() over it has a zero to
        // start from.
        let dropped = DropReason::ALL
            .iter()
            .map(|reason| {
                metrics
                    .export_dropped
                    .with_label_values(&[SOURCE, reason.as_str()])
            })
            .collect();
        Self {
            published: metrics.export_published.with_label_values(&[SOURCE]),
            dropped,
            queue_messages: metrics.export_queue_messages.clone(),
            queue_bytes: metrics.export_queue_bytes.clone(),
            spool_segments: metrics.export_spool_segments.clone(),
            spool_bytes: metrics.export_spool_bytes.clone(),
        }
    }

    pub fn published(&self) {
        self.published.inc();
    }

    pub fn dropped(&self, reason: DropReason, logs: &LogLimiter) {
        self.dropped_many(reason, 1, logs);
    }

    pub fn dropped_many(&self, reason: DropReason, count: u64, logs: &LogLimiter) {
        if count == 0 {
            return;
        }
        if let Some(counter) = DropReason::ALL
            .iter()
            .position(|r| *r == reason)
            .and_then(|i| self.dropped.get(i))
        {
            counter.inc_by(count);
        }
        logs.warn(reason.as_str(), reason.log_message());
    }

    pub fn queue_depth(&self, queue: &Queue) {
        let (messages, bytes) = queue.depth();
        self.queue_messages
            .set(i64::try_from(messages).unwrap_or(i64::MAX));
        self.queue_bytes
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    pub fn spool(&self, stats: SpoolStats) {
        self.spool_segments
            .set(i64::try_from(stats.segments).unwrap_or(i64::MAX));
        self.spool_bytes
            .set(i64::try_from(stats.bytes).unwrap_or(i64::MAX));
    }
}

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
        if !evaluation.is_violation() {
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
            return; // mode off: not a violation the export records
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
            Ok(()) => self.counters.queue_depth(&self.queue),
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
