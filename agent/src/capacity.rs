//! What a listener holds at once, in connections and in the bytes each connection may buffer
//! (reference §5 "Memory", §6 "Connections"), apart from how it serves them (`server`).
//!
//! A listener takes at most `max` connections, counted from the accept (a TLS handshake in
//! progress included) until they close. A connection arriving at the cap closes the one that
//! has waited longest without a request in flight — a silent connection, a half-open handshake,
//! an idle keep-alive — so a new caller, the kubelet's probe among them, always gets in while
//! connections only sit there; only when every connection has a request in flight (which the
//! webhook's intake keeps to half the cap, `webhook::intake`) is the new one closed at once.
//! Each connection buffers a bounded amount: request heads and HTTP/1 reads within
//! [`MAX_READ_BUFFER`], HTTP/2 within its windows, header lists and streams below.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioExecutor;
use hyper_util::server::conn::auto::Builder;
use tokio::sync::Notify;

/// Connections of the loopback admin listener and of the audit's probe listener.
pub const SMALL_LISTENER_CONNECTIONS: usize = 64;
/// Files the process keeps for itself besides its connections: listeners, the runtime's,
/// the API server's connections, certificate and rule files, the export's segments.
pub const RESERVED_FILES: u64 = 64;

/// An HTTP/1 connection's read buffer (a request head must fit; body bytes pass through it to
/// the body budget). hyper's default is ~400 KiB per connection.
pub const MAX_READ_BUFFER: usize = 16 * 1024;
/// An HTTP/2 connection's and stream's receive windows: what a peer may send before the agent
/// reads it (hyper's default: 1 MiB each). A window's worth is sent per round trip: 64 KiB
/// every 0.2 ms is 320 MB/s.
pub const HTTP2_WINDOW: u32 = 64 * 1024;
/// Concurrent HTTP/2 streams per connection (hyper's default: 200).
pub const HTTP2_STREAMS: u32 = 32;
/// An HTTP/2 header list (hyper's default, made explicit).
pub const HTTP2_HEADER_LIST: u32 = 16 * 1024;
/// What an HTTP/2 stream buffers of a response before the peer takes it (hyper's: ~400 KiB).
pub const HTTP2_SEND_BUFFER: usize = 64 * 1024;

/// Sets the per-connection bounds above on a connection builder.
pub fn bound_connection(builder: &mut Builder<TokioExecutor>) {
    builder.http1().max_buf_size(MAX_READ_BUFFER);
    builder
        .http2()
        .initial_connection_window_size(HTTP2_WINDOW)
        .initial_stream_window_size(HTTP2_WINDOW)
        .max_concurrent_streams(HTTP2_STREAMS)
        .max_header_list_size(HTTP2_HEADER_LIST)
        .max_send_buf_size(HTTP2_SEND_BUFFER);
}

/// Whether a connection could be closed for a newcomer, and since when.
pub trait Quiet: Send + Sync {
    /// `None` while a request is in flight; otherwise since when nothing has been asked (the
    /// accept, or the end of the last request).
    fn quiet_since(&self) -> Option<Instant>;
}

/// The connections of one listener.
#[derive(Clone)]
pub struct ConnectionLimit {
    inner: Arc<Inner>,
}

struct Inner {
    max: usize,
    open: Mutex<Open>,
    metrics: Option<ConnectionMetrics>,
    last_warned: Mutex<Option<Instant>>,
}

/// The webhook listener's connection metrics.
#[derive(Clone)]
pub struct ConnectionMetrics {
    /// Connections open (`drift_sentinel_connections`).
    pub open: prometheus::IntGauge,
    /// Connections closed at the cap, by reason (`evicted`, `refused`).
    pub closed: prometheus::IntCounterVec,
}

#[derive(Default)]
struct Open {
    next: u64,
    entries: HashMap<u64, Entry>,
}

struct Entry {
    quiet: Arc<dyn Quiet>,
    close: Arc<Notify>,
}

/// A connection's place under the cap, given back when dropped.
pub struct Slot {
    id: u64,
    inner: Arc<Inner>,
    close: Arc<Notify>,
}

/// How often the WARN about the cap is logged at most.
const WARN_EVERY: Duration = Duration::from_secs(60);

impl ConnectionLimit {
    /// At most `max` connections (at least one), counted in `metrics` when given.
    pub fn new(max: usize, metrics: Option<ConnectionMetrics>) -> Self {
        Self {
            inner: Arc::new(Inner {
                max: max.max(1),
                open: Mutex::new(Open::default()),
                metrics,
                last_warned: Mutex::new(None),
            }),
        }
    }

    pub fn max(&self) -> usize {
        self.inner.max
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.inner.lock().entries.len()
    }

    /// A place for a new connection whose activity `quiet` tells: at once below the cap,
    /// else by closing the connection quiet the longest; `None` when every connection has a
    /// request in flight.
    pub fn admit(&self, quiet: Arc<dyn Quiet>) -> Option<Slot> {
        let mut open = self.inner.lock();
        if open.entries.len() >= self.inner.max {
            let quietest = open
                .entries
                .iter()
                .filter_map(|(id, e)| Some((e.quiet.quiet_since()?, *id)))
                .min();
            match quietest.and_then(|(_, id)| open.entries.remove(&id)) {
                Some(evicted) => {
                    evicted.close.notify_one();
                    self.inner.count("evicted");
                }
                None => {
                    drop(open);
                    self.inner.count("refused");
                    return None;
                }
            }
        }
        let id = open.next;
        open.next += 1;
        let close = Arc::new(Notify::new());
        open.entries.insert(
            id,
            Entry {
                quiet,
                close: close.clone(),
            },
        );
        self.inner.count_open(open.entries.len());
        Some(Slot {
            id,
            inner: self.inner.clone(),
            close,
        })
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Open> {
        // Nothing panics under the lock; a poisoned one still holds a consistent map.
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn count_open(&self, open: usize) {
        if let Some(metrics) = &self.metrics {
            metrics.open.set(i64::try_from(open).unwrap_or(i64::MAX));
        }
    }

    fn count(&self, reason: &str) {
        if let Some(metrics) = &self.metrics {
            metrics.closed.with_label_values(&[reason]).inc();
        }
        let mut last = self
            .last_warned
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if last.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
            *last = Some(Instant::now());
            tracing::warn!(
                max_connections = self.max,
                reason,
                "connection limit reached: a connection was closed (evicted: the longest quiet one made room for a new one; refused: every connection had a request in flight); drift_sentinel_connections_closed_total counts them, this WARN repeats at most once a minute"
            );
        }
    }
}

impl Slot {
    /// Resolves when the connection must close to make room for a newer one.
    pub async fn evicted(&self) {
        self.close.notified().await;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.inner.lock();
        open.entries.remove(&self.id);
        self.inner.count_open(open.entries.len());
    }
}

/// `bytes` that hold `place` (a share of some budget) until their last copy is dropped: after
/// the response they are sent in is written, or the request they were read in is done with.
pub fn held_bytes<P: Send + 'static>(bytes: Vec<u8>, place: P) -> bytes::Bytes {
    bytes::Bytes::from_owner(Held {
        bytes,
        _place: place,
    })
}

struct Held<P> {
    bytes: Vec<u8>,
    _place: P,
}

impl<P> AsRef<[u8]> for Held<P> {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// Raises the soft limit of open files to the hard limit (the default soft limit of 1,024 is
/// below what a listener of `--max-connections` may need) and returns the connections the
/// process can then hold: `wanted`, or fewer when the files allowed leave no room for
/// [`RESERVED_FILES`] and the other listeners' connections.
pub fn raise_file_limit(wanted: usize, other_listeners: usize) -> (usize, u64) {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let mut soft = limit.current.unwrap_or(u64::MAX);
    if limit.current != limit.maximum {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => soft = limit.maximum.unwrap_or(u64::MAX),
            Err(e) => tracing::warn!(error = %e, soft, "cannot raise the limit of open files"),
        }
    }
    let room = soft.saturating_sub(RESERVED_FILES + other_listeners as u64);
    let allowed = usize::try_from(room).unwrap_or(usize::MAX).max(1);
    if allowed < wanted {
        tracing::warn!(
            max_connections = wanted,
            open_files = soft,
            allowed,
            "--max-connections is more than the open files allowed leave room for: the webhook listener takes fewer"
        );
    }
    (wanted.min(allowed), soft)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    struct Fake {
        since: Instant,
        busy: AtomicBool,
    }

    impl Quiet for Fake {
        fn quiet_since(&self) -> Option<Instant> {
            (!self.busy.load(Ordering::Relaxed)).then_some(self.since)
        }
    }

    fn fake(age_ms: u64, busy: bool) -> Arc<Fake> {
        Arc::new(Fake {
            since: Instant::now() - Duration::from_millis(age_ms),
            busy: AtomicBool::new(busy),
        })
    }

    #[tokio::test]
    async fn at_the_cap_the_longest_quiet_connection_makes_room() {
        let closed =
            prometheus::IntCounterVec::new(prometheus::Opts::new("closed", "h"), &["reason"])
                .unwrap();
        let open = prometheus::IntGauge::new("open", "h").unwrap();
        let metrics = ConnectionMetrics {
            open: open.clone(),
            closed: closed.clone(),
        };
        let limit = ConnectionLimit::new(3, Some(metrics));
        let busy = fake(900, true);
        let old = fake(500, false);
        let young = fake(100, false);
        let slots: Vec<Slot> = [busy.clone(), old, young.clone()]
            .into_iter()
            .map(|c| limit.admit(c as Arc<dyn Quiet>).unwrap())
            .collect();
        assert_eq!(limit.open(), 3);
        // The busy one is older, but has a request in flight: the old quiet one goes.
        let newcomer = limit.admit(fake(0, false)).unwrap();
        tokio::time::timeout(Duration::from_secs(1), slots[1].evicted())
            .await
            .expect("the longest quiet connection is told to close");
        assert_eq!(limit.open(), 3);
        assert_eq!(closed.with_label_values(&["evicted"]).get(), 1);
        // Every connection busy: the next one is refused.
        young.busy.store(true, Ordering::Relaxed);
        let newcomer_busy = fake(0, true);
        drop(newcomer);
        let _busy_newcomer = limit.admit(newcomer_busy).unwrap();
        assert!(limit.admit(fake(0, false)).is_none());
        assert_eq!(closed.with_label_values(&["refused"]).get(), 1);
        // A connection that ends gives its place back.
        drop(slots);
        assert_eq!(limit.open(), 1);
        assert_eq!(open.get(), 1);
        assert!(limit.admit(fake(0, false)).is_some());
    }
}
