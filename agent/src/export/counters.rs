//! Records that are not exported — why ([`DropReason`]), counted, and logged at most once a
//! minute ([`LogLimiter`]) — and the other metrics of the webhook's export
//! ([`ExportCounters`]). The queue, the publisher and the exporter all count through it.

use std::time::Duration;

use prometheus::IntGauge;

use super::spool::SpoolStats;
use crate::log_limit::LogLimit;
use crate::metrics::Metrics;

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
pub struct LogLimiter(LogLimit<String>);

const LOG_PERIOD: Duration = Duration::from_secs(60);

impl Default for LogLimiter {
    fn default() -> Self {
        Self(LogLimit::new(LOG_PERIOD))
    }
}

impl LogLimiter {
    pub fn warn(&self, class: &str, message: &str) {
        match self.0.allow(class) {
            None => {}
            Some(allowed) if allowed.first => tracing::warn!(class, "{message}"),
            Some(allowed) => {
                tracing::warn!(
                    class,
                    suppressed_since_last = allowed.held_back,
                    "{message}"
                )
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

    /// The queue's depth, as [`super::queue::Queue::depth`] gives it.
    pub fn queue_depth(&self, (messages, bytes): (usize, usize)) {
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
