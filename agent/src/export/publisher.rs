//! The publisher: one thread that takes records off the queue, up to 64 ready ones at a time
//! (never waiting to fill a batch), and writes them to the disk spool. It also runs the
//! janitor (age rotation and retention) while admission files exist, opens a new spool when
//! the Connection changes, and drains the queue for a bounded time at shutdown.

use std::path::PathBuf;
use std::sync::mpsc::{self, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::counters::{DropReason, ExportCounters, LogLimiter};
use super::queue::{Message, Queue};
use super::spool::{Clock, FreeSpace, Limits, Spool, SpoolError};
use crate::connection_status::PublishHealth;

/// Most records written per batch.
pub const BATCH: usize = 64;
/// How often the janitor runs while admission files exist.
const JANITOR_PERIOD: Duration = Duration::from_secs(1);

/// Process-wide pieces the publisher needs.
pub struct PublisherParts {
    pub queue: Arc<Queue>,
    pub clock: Arc<dyn Clock>,
    pub free_space: Arc<dyn FreeSpace>,
    pub limits: Limits,
    pub counters: ExportCounters,
    pub health: Arc<PublishHealth>,
    pub logs: Arc<LogLimiter>,
    /// Set at shutdown: records still queued after it are dropped (`shutdown`).
    pub drain_deadline: Arc<Mutex<Option<Instant>>>,
}

struct Publisher {
    parts: PublisherParts,
    spool: Option<Spool>,
    /// When the janitor last ran; under steady load it runs between batches.
    last_janitor: Instant,
}

/// Starts the publisher thread.
pub fn spawn(
    parts: PublisherParts,
    rx: mpsc::Receiver<Message>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("export-publisher".into())
        .spawn(move || {
            lower_priority();
            Publisher {
                parts,
                spool: None,
                last_janitor: Instant::now(),
            }
            .run(rx)
        })
}

/// Nice value of the publisher thread.
const PUBLISHER_NICE: i32 = 10;

/// Lowers this thread's scheduling priority. Each record wakes the publisher; at normal
/// priority the scheduler may run it at once, ahead of the request thread that woke it, and
/// the response waits. At a lower priority it runs in the time the webhook leaves idle.
fn lower_priority() {
    let thread = rustix::thread::gettid();
    if let Err(e) = rustix::process::setpriority_process(Some(thread), PUBLISHER_NICE) {
        tracing::debug!(error = %e, "cannot lower the export publisher's priority");
    }
}

impl Publisher {
    fn run(mut self, rx: mpsc::Receiver<Message>) {
        loop {
            let janitor = self.spool.as_ref().is_some_and(Spool::has_files);
            let message = if janitor {
                match rx.recv_timeout(JANITOR_PERIOD) {
                    Ok(message) => Some(message),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            } else {
                match rx.recv() {
                    Ok(message) => Some(message),
                    Err(_) => break,
                }
            };
            match message {
                None => self.janitor(),
                Some(Message::Record(first)) => {
                    let mut batch = vec![first];
                    let mut control = None;
                    while batch.len() < BATCH {
                        match rx.try_recv() {
                            Ok(Message::Record(record)) => batch.push(record),
                            Ok(other) => {
                                control = Some(other);
                                break;
                            }
                            Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                        }
                    }
                    self.publish(batch);
                    self.after_batch();
                    if let Some(control) = control
                        && self.control(control)
                    {
                        break;
                    }
                }
                Some(control) => {
                    if self.control(control) {
                        break;
                    }
                }
            }
        }
    }

    /// Handles a control message; `true` when the thread is done.
    fn control(&mut self, message: Message) -> bool {
        match message {
            Message::Record(record) => {
                self.publish(vec![record]);
                false
            }
            Message::Reconfigure(dir) => {
                self.reconfigure(dir);
                false
            }
            Message::Drain(done) => {
                if let Some(spool) = self.spool.as_mut() {
                    if let Err(e) = spool.finish_segment() {
                        tracing::warn!(error = %e, "cannot complete the open admission segment at shutdown");
                    }
                    // Retention too, so that shutdown leaves the spool within its limits.
                    if let Err(e) = spool.tick() {
                        tracing::warn!(error = %e, "cannot enforce spool retention at shutdown");
                    }
                }
                self.update_spool_gauges();
                let _ = done.send(());
                true
            }
        }
    }

    fn reconfigure(&mut self, dir: Option<PathBuf>) {
        if self.spool.as_ref().map(|s| s.dir().to_owned()) == dir {
            return;
        }
        // Dropping the old spool completes its open segment.
        self.spool = None;
        let Some(dir) = dir else {
            self.parts.health.clear_errors();
            return;
        };
        match Spool::open(
            dir.clone(),
            self.parts.limits.clone(),
            self.parts.clock.clone(),
            self.parts.free_space.clone(),
        ) {
            Ok((spool, recovery)) => {
                tracing::info!(
                    dir = %dir.display(),
                    recovered_segments = recovery.published,
                    removed_remnants = recovery.removed,
                    locked_by_other_writers = recovery.locked,
                    "admission export spool ready"
                );
                self.spool = Some(spool);
                self.update_spool_gauges();
            }
            Err(e) => {
                let message = format!("cannot open spool directory {}: {e}", dir.display());
                self.parts.logs.warn("spool_open", &message);
                self.parts
                    .health
                    .record_error(self.parts.clock.now(), &message);
            }
        }
    }

    fn past_deadline(&self) -> bool {
        let deadline = self.parts.drain_deadline.lock().map(|d| *d).unwrap_or(None);
        deadline.is_some_and(|d| Instant::now() >= d)
    }

    fn publish(&mut self, batch: Vec<Vec<u8>>) {
        let now = self.parts.clock.now();
        let mut written = 0usize;
        let mut first_error: Option<String> = None;
        for record in batch {
            let len = record.len();
            let outcome = if self.past_deadline() {
                Err(DropReason::Shutdown)
            } else {
                match self.spool.as_mut() {
                    None => Err(DropReason::NoConnection),
                    Some(spool) => spool.append(&record).map_err(|e| {
                        let reason = match &e {
                            SpoolError::TooLarge { .. } => DropReason::MessageTooLarge,
                            SpoolError::DiskFull { .. } => DropReason::DiskFull,
                            SpoolError::Io { .. } => DropReason::PublishError,
                        };
                        if first_error.is_none() && reason != DropReason::MessageTooLarge {
                            first_error = Some(e.to_string());
                        }
                        reason
                    }),
                }
            };
            self.parts.queue.release(len);
            match outcome {
                Ok(()) => {
                    written += 1;
                    self.parts.counters.published();
                }
                Err(reason) => self.parts.counters.dropped(reason, &self.parts.logs),
            }
        }
        let deferred = self
            .spool
            .as_mut()
            .and_then(Spool::take_deferred_error)
            .map(|e| e.to_string());
        if first_error.is_none() {
            first_error = deferred;
        }
        if let Some(error) = &first_error {
            self.parts.logs.warn("publish", error);
        }
        if self.spool.is_some() {
            self.parts
                .health
                .record_attempt(now, written > 0, first_error.as_deref());
        }
        self.parts.counters.queue_depth(self.parts.queue.depth());
    }

    /// Completes a full or old segment; runs the janitor when it is due.
    fn after_batch(&mut self) {
        let result = self.spool.as_mut().map_or(Ok(()), Spool::after_batch);
        self.report_maintenance(result);
        if self.last_janitor.elapsed() >= JANITOR_PERIOD {
            self.janitor();
        } else {
            self.update_spool_gauges();
        }
    }

    /// Rotation by age, retention, a fresh free-space measurement.
    fn janitor(&mut self) {
        self.last_janitor = Instant::now();
        let result = self.spool.as_mut().map_or(Ok(()), Spool::tick);
        self.report_maintenance(result);
        self.update_spool_gauges();
    }

    fn report_maintenance(&self, result: Result<(), SpoolError>) {
        if let Err(e) = result {
            let message = e.to_string();
            self.parts.logs.warn("janitor", &message);
            self.parts
                .health
                .record_error(self.parts.clock.now(), &message);
        }
    }

    fn update_spool_gauges(&self) {
        let stats = self.spool.as_ref().map(Spool::stats).unwrap_or_default();
        self.parts.counters.spool(stats);
    }
}
