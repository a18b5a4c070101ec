//! Serving a router on a TCP listener, plain or TLS, with the timeouts of the command line and
//! a graceful shutdown in two steps (reference §6 "Shutdown", [`Phase`]): first keep accepting
//! and answering while every client is moved off its connection, then stop accepting, let
//! in-flight requests finish and give up after the shutdown timeout.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper::http::{HeaderValue, Version, header};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tokio_rustls::TlsAcceptor;

use crate::capacity::{ConnectionLimit, Quiet, Slot};
use crate::client_auth::PeerCertificates;

/// TLS of a listener: its acceptor and, under client authentication, who may call.
#[derive(Clone)]
pub struct Tls {
    pub acceptor: TlsAcceptor,
    pub client_auth: Option<Arc<crate::client_auth::ClientAuth>>,
}

/// Connection-level timeouts.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionTimeouts {
    pub read_header: Duration,
    pub idle: Duration,
    pub shutdown: Duration,
}

/// Where a listener is in the process's shutdown (reference §6 "Shutdown"). Only moves
/// forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Accepting and answering.
    Serving,
    /// The shutdown delay: the endpoint is being removed, but kube-proxy and the API server may
    /// still send here for a while, so connections are still accepted and every request
    /// answered. Each client is moved off its connection without a request being lost: HTTP/1
    /// responses carry `Connection: close`, and an HTTP/2 connection gets GOAWAY (at once, or
    /// after its first request when none has come yet). Idle HTTP/1 connections are left
    /// open: closing one could cross a request the client is sending on it.
    Draining,
    /// The listener is closed; idle connections close, in-flight requests finish (HTTP/1
    /// with `Connection: close`, HTTP/2 after GOAWAY), within the shutdown timeout.
    Stopping,
}

/// The process's two listeners: its main address (webhook or probes) and its loopback admin
/// address, each error naming which one could not be bound.
pub async fn bind_listeners(
    address: std::net::SocketAddr,
    admin_address: std::net::SocketAddr,
) -> anyhow::Result<(TcpListener, TcpListener)> {
    use anyhow::Context as _;
    let main = TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address}"))?;
    let admin = TcpListener::bind(admin_address)
        .await
        .with_context(|| format!("cannot listen on admin address {admin_address}"))?;
    Ok((main, admin))
}

/// A listener's address as text, for the log line that says where the process listens.
pub fn local_address(listener: &TcpListener) -> String {
    listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default()
}

/// Serves `router` until `phase` reaches [`Phase::Stopping`] (or its sender is gone), then
/// waits for the open connections to finish, at most `timeouts.shutdown`; at most `limit`'s
/// connections at once (`capacity`).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<Tls>,
    timeouts: ConnectionTimeouts,
    limit: ConnectionLimit,
    mut phase: watch::Receiver<Phase>,
) {
    // Every connection holds a receiver: the sender is closed once the last one has ended.
    let (open, _) = watch::channel(());
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: pause instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopping(&mut phase) => break,
        };
        // Counted from here, its TLS handshake included.
        let activity = Arc::new(Activity::new());
        let Some(slot) = limit.admit(activity.clone()) else {
            tracing::debug!(%peer, "connection refused: every connection has a request in flight");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let connection = Connection {
            router: router.clone(),
            timeouts,
            phase: phase.clone(),
            activity,
            slot,
        };
        let tls = tls.clone();
        let open = open.subscribe();
        tokio::spawn(async move {
            let _open = open;
            match tls {
                Some(tls) => {
                    let handshake = tokio::select! {
                        handshake = tokio::time::timeout(timeouts.read_header, tls.acceptor.accept(stream)) => handshake,
                        () = connection.slot.evicted() => {
                            tracing::debug!(%peer, "TLS handshake ended to make room for a new connection");
                            return;
                        }
                    };
                    match handshake {
                        Ok(Ok(stream)) => {
                            // What the caller presented, judged at its requests (client_auth).
                            let caller = tls.client_auth.as_ref().map(|_| {
                                Arc::new(PeerCertificates::new(
                                    peer,
                                    stream.get_ref().1.peer_certificates(),
                                ))
                            });
                            serve_connection(stream, connection, caller).await
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                }
                None => serve_connection(stream, connection, None).await,
            }
        });
    }
    drop(listener);
    tokio::select! {
        () = open.closed() => tracing::info!("all connections closed"),
        _ = tokio::time::sleep(timeouts.shutdown) => {
            tracing::warn!("shutdown timeout reached with connections still open");
        }
    }
}

/// Resolves once the listener must close (or the sender is gone).
async fn stopping(phase: &mut watch::Receiver<Phase>) {
    let _ = phase.wait_for(|p| *p >= Phase::Stopping).await.map(|_| ());
}

/// Resolves when a connection must be told to go: at [`Phase::Stopping`], or while draining
/// once it is known to be HTTP/2 (GOAWAY loses no request; HTTP/1 connections are told by
/// their next response instead).
async fn told_to_go(activity: &Activity, phase: &mut watch::Receiver<Phase>) {
    loop {
        let now = *phase.borrow_and_update();
        if now >= Phase::Stopping || (now == Phase::Draining && activity.is_http2()) {
            return;
        }
        tokio::select! {
            changed = phase.changed() => if changed.is_err() {
                // The sender is gone: the process is ending.
                return;
            },
            () = activity.http2_seen.notified() => {}
        }
    }
}

/// One accepted connection: what serves it, its activity and its place under the cap.
struct Connection {
    router: Router,
    timeouts: ConnectionTimeouts,
    phase: watch::Receiver<Phase>,
    activity: Arc<Activity>,
    slot: Slot,
}

async fn serve_connection<I>(io: I, connection: Connection, caller: Option<Arc<PeerCertificates>>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Connection {
        router,
        timeouts,
        mut phase,
        activity,
        slot,
    } = connection;
    let service = TowerToHyperService::new(Tracked {
        inner: router,
        activity: activity.clone(),
        caller,
        phase: phase.clone(),
    });
    let mut builder = Builder::new(TokioExecutor::new());
    // hyper's own header-read timer also runs while a keep-alive connection waits for its next
    // request, so it would close every connection idle for READ_HEADER_TIMEOUT, crossing the
    // request a client (the API server's connection pool) may be sending on it: a failed
    // admission. [`Activity`] times request heads instead, from their first byte.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None);
    builder.http2().timer(TokioTimer::new());
    crate::capacity::bound_connection(&mut builder);
    let io = HeadWatch {
        io,
        activity: activity.clone(),
    };
    let connection = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::pin!(connection);
    let mut going = false;
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            // Dropping the connection closes it; nothing is in flight when these fire.
            () = activity.expired(timeouts) => {
                tracing::debug!("connection closed: no request in time");
                return;
            }
            () = slot.evicted() => {
                tracing::debug!("connection closed: quiet the longest, to make room for a new one");
                return;
            }
            // Idle HTTP/1: closed now; a request in flight: answered with `Connection: close`;
            // HTTP/2: GOAWAY, the streams it has begun are finished.
            () = told_to_go(&activity, &mut phase), if !going => {
                connection.as_mut().graceful_shutdown();
                going = true;
            }
        }
    }
}

/// What a connection is doing, as far as its timeouts are concerned: counted in requests, not
/// bytes, so that the rules hold alike over HTTP/1 and HTTP/2 (whose PINGs and partial frames
/// would otherwise keep a connection open forever).
struct Activity {
    opened: Instant,
    state: std::sync::Mutex<ActivityState>,
    changed: Notify,
    /// A request came over HTTP/2 (the protocol is only known from the first request).
    http2: std::sync::atomic::AtomicBool,
    http2_seen: Notify,
}

#[derive(Clone, Copy)]
struct ActivityState {
    in_flight: usize,
    requests: u64,
    last_done: Instant,
    /// When bytes came on an idle HTTP/1 connection after its first request: a request head
    /// has begun, and must be read within the read-header timeout.
    head_started: Option<Instant>,
}

impl Activity {
    fn new() -> Self {
        let now = Instant::now();
        Self {
            opened: now,
            state: std::sync::Mutex::new(ActivityState {
                in_flight: 0,
                requests: 0,
                last_done: now,
                head_started: None,
            }),
            changed: Notify::new(),
            http2: std::sync::atomic::AtomicBool::new(false),
            http2_seen: Notify::new(),
        }
    }

    fn is_http2(&self) -> bool {
        self.http2.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Records the protocol of a request; the first HTTP/2 one wakes [`told_to_go`].
    fn saw(&self, version: Version) {
        if version == Version::HTTP_2 && !self.http2.swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            self.http2_seen.notify_one();
        }
    }

    /// Bytes were read: on an idle HTTP/1 connection that has had a request, a new request head
    /// begins (HTTP/2 sends frames that are no request, such as PINGs, between requests; before
    /// the first request the connection's opening already starts the clock).
    fn bytes_read(&self) {
        if self.is_http2() {
            return;
        }
        let started = self.state.lock().is_ok_and(|mut state| {
            let begins = state.in_flight == 0 && state.requests > 0 && state.head_started.is_none();
            if begins {
                state.head_started = Some(Instant::now());
            }
            begins
        });
        if started {
            self.changed.notify_one();
        }
    }

    fn update(&self, f: impl FnOnce(&mut ActivityState)) {
        if let Ok(mut state) = self.state.lock() {
            f(&mut state);
        }
        self.changed.notify_one();
    }

    /// When the connection must close if nothing changes: the first request must reach the
    /// service within the read-header timeout of the connection's opening (a connection that
    /// sends nothing, or a request head sent in pieces); between requests the idle timeout
    /// runs from the end of the last one, and a later HTTP/1 head must be read within the
    /// read-header timeout of its first byte. `None` while a request is in flight.
    fn deadline(&self, timeouts: ConnectionTimeouts) -> Option<Instant> {
        let state = *self.state.lock().ok()?;
        if state.in_flight > 0 {
            return None;
        }
        Some(if state.requests == 0 {
            self.opened + timeouts.read_header
        } else {
            let idle = state.last_done + timeouts.idle;
            state
                .head_started
                .map_or(idle, |head| idle.min(head + timeouts.read_header))
        })
    }

    /// Resolves when the connection has been without a request for too long.
    async fn expired(&self, timeouts: ConnectionTimeouts) {
        loop {
            let changed = self.changed.notified();
            match self.deadline(timeouts) {
                None => changed.await,
                Some(deadline) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(deadline.into()) => {
                            if self.deadline(timeouts).is_some_and(|d| d <= Instant::now()) {
                                return;
                            }
                        }
                        () = changed => {}
                    }
                }
            }
        }
    }
}

impl Quiet for Activity {
    fn quiet_since(&self) -> Option<Instant> {
        let state = *self.state.lock().ok()?;
        if state.in_flight > 0 {
            return None;
        }
        Some(if state.requests == 0 {
            self.opened
        } else {
            state.last_done
        })
    }
}

/// Counts a request in flight from the call until its response body is done.
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.update(|state| {
            state.in_flight = state.in_flight.saturating_sub(1);
            state.last_done = Instant::now();
        });
    }
}

/// The router, with each request counted in the connection's [`Activity`] and carrying the
/// certificates the connection presented, under client authentication (as an `Arc`: no
/// allocation per request); while the process shuts down, HTTP/1 responses close their
/// connection.
#[derive(Clone)]
struct Tracked {
    inner: Router,
    activity: Arc<Activity>,
    caller: Option<Arc<PeerCertificates>>,
    phase: watch::Receiver<Phase>,
}

impl tower::Service<axum::extract::Request<hyper::body::Incoming>> for Tracked {
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        tower::Service::<axum::extract::Request<hyper::body::Incoming>>::poll_ready(
            &mut self.inner,
            cx,
        )
    }

    fn call(&mut self, mut request: axum::extract::Request<hyper::body::Incoming>) -> Self::Future {
        if let Some(caller) = &self.caller {
            request.extensions_mut().insert(caller.clone());
        }
        self.activity.update(|state| {
            state.in_flight += 1;
            state.requests += 1;
            state.head_started = None;
        });
        let version = request.version();
        self.activity.saw(version);
        let guard = InFlight(self.activity.clone());
        let phase = self.phase.clone();
        let future = self.inner.call(request.map(axum::body::Body::new));
        Box::pin(async move {
            let mut response = future.await?;
            // Decided when the answer is ready, so that a request begun before SIGTERM and
            // answered after it closes its connection too (HTTP/2 has GOAWAY instead).
            if version < Version::HTTP_2 && *phase.borrow() >= Phase::Draining {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            // The request stays in flight until its body is sent (or abandoned).
            Ok(response.map(|body| {
                axum::body::Body::new(GuardedBody {
                    body,
                    _guard: guard,
                })
            }))
        })
    }
}

/// A connection's stream as hyper reads it (the plaintext, under TLS), telling its [`Activity`]
/// when bytes arrive: the start of a request head.
struct HeadWatch<I> {
    io: I,
    activity: Arc<Activity>,
}

impl<I: AsyncRead + Unpin> AsyncRead for HeadWatch<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.bytes_read();
        }
        read
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for HeadWatch<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, data)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A response body that holds its request's [`InFlight`] until it is done or dropped.
struct GuardedBody {
    body: axum::body::Body,
    _guard: InFlight,
}

impl hyper::body::Body for GuardedBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}
