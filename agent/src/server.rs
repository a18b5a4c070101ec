//! Serving a router on a TCP listener, plain or TLS, with the timeouts of the command line and
//! a graceful shutdown: stop accepting, let in-flight requests finish, give up after the
//! shutdown timeout.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Sleep;
use tokio_rustls::TlsAcceptor;

/// Connection-level timeouts.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionTimeouts {
    pub read_header: Duration,
    pub idle: Duration,
    pub shutdown: Duration,
}

/// Serves `router` until `shutdown` turns true, then drains.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<TlsAcceptor>,
    timeouts: ConnectionTimeouts,
    mut shutdown: watch::Receiver<bool>,
) {
    let graceful = GracefulShutdown::new();
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
            _ = stopped(&mut shutdown) => break,
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let tls = tls.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            match tls {
                Some(acceptor) => {
                    let handshake =
                        tokio::time::timeout(timeouts.read_header, acceptor.accept(stream)).await;
                    match handshake {
                        Ok(Ok(stream)) => serve_connection(stream, router, timeouts, watcher).await,
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                }
                None => serve_connection(stream, router, timeouts, watcher).await,
            }
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => tracing::info!("all connections closed"),
        _ = tokio::time::sleep(timeouts.shutdown) => {
            tracing::warn!("shutdown timeout reached with connections still open");
        }
    }
}

/// Resolves once shutdown is requested (or the sender is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await.map(|_| ());
}

async fn serve_connection<I>(
    io: I,
    router: Router,
    timeouts: ConnectionTimeouts,
    watcher: hyper_util::server::graceful::Watcher,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(IdleTimeout::new(io, timeouts.idle));
    let service = TowerToHyperService::new(router);
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(timeouts.read_header);
    let connection = builder.serve_connection_with_upgrades(io, service);
    if let Err(e) = watcher.watch(connection.into_owned()).await {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

/// Fails reads on a connection that has had nothing to read for `idle`.
struct IdleTimeout<T> {
    inner: T,
    idle: Duration,
    timer: Pin<Box<Sleep>>,
    armed: bool,
}

impl<T> IdleTimeout<T> {
    fn new(inner: T, idle: Duration) -> Self {
        Self {
            inner,
            idle,
            timer: Box::pin(tokio::time::sleep(idle)),
            armed: false,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for IdleTimeout<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                this.armed = false;
                Poll::Ready(result)
            }
            Poll::Pending => {
                if !this.armed {
                    let deadline = tokio::time::Instant::now() + this.idle;
                    this.timer.as_mut().reset(deadline);
                    this.armed = true;
                }
                match this.timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "connection idle timeout",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for IdleTimeout<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
