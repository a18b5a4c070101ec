//! What the webhook takes in at once (reference §5 "Memory"): at most a number of admission
//! requests in flight (half the connection cap, so that half the connections can always make
//! room for a newcomer, `capacity`), and their bodies within one budget of bytes across every
//! connection. A body's bytes are counted from before it is read until the last copy of it is
//! dropped (the decision may still hold it after its answer went), so decisions waiting for a
//! thread hold their share too.
//!
//! A request that declares its length takes its share whole before anything is read, so two
//! half-read bodies never wait on each other; one without a length takes it a MiB at a time.
//! Bodies of at most [`SMALL_BODY`] (a review of a Deployment is tens of KiB) may also draw on a
//! reserve of their own, so that callers holding the shared budget with large bodies they send
//! slowly do not stop the API server's ordinary reviews. A request that cannot get its share
//! within [`BUDGET_WAIT`] (or its read timeout) is answered 503 with the reason and
//! `Retry-After`; the API server then applies the webhook's failurePolicy, as for any failed
//! call, and says why.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use http_body_util::BodyExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::response::plain;

/// Largest AdmissionReview accepted (413 beyond).
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;
/// Bytes of request bodies held at once across every connection: four of the largest bodies …
pub const BODY_BUDGET: usize = 4 * MAX_BODY_BYTES;
/// … and a reserve that only bodies of at most [`SMALL_BODY`] bytes draw on.
pub const SMALL_BODY_RESERVE: usize = 8 * 1024 * 1024;
pub const SMALL_BODY: usize = 1024 * 1024;
/// Longest wait for a body's share of the budget; well within the API server's webhook timeout
/// (10 s in the chart), so that it is told why.
pub const BUDGET_WAIT: Duration = Duration::from_secs(5);
/// What a body without a declared length takes of the budget at a time.
const STEP: usize = 1024 * 1024;

/// The admission requests and body bytes the webhook holds.
#[derive(Debug, Clone)]
pub struct Intake {
    requests: Arc<Semaphore>,
    max_requests: usize,
    bytes: Arc<Semaphore>,
    reserve: Arc<Semaphore>,
}

/// Every place for an admission request is taken.
#[derive(Debug)]
pub struct Busy {
    max_requests: usize,
}

impl axum::response::IntoResponse for Busy {
    fn into_response(self) -> Response {
        unavailable(format!(
            "the agent has {} admission requests in flight already, its limit (half of --max-connections)",
            self.max_requests
        ))
    }
}

/// An admission request in flight, until dropped.
#[derive(Debug)]
pub struct Admitted {
    _place: OwnedSemaphorePermit,
}

impl Intake {
    /// At most `max_requests` admission requests in flight and [`BODY_BUDGET`] bytes of their
    /// bodies.
    pub fn new(max_requests: usize) -> Self {
        let max_requests = max_requests.max(1);
        Self {
            requests: Arc::new(Semaphore::new(max_requests)),
            max_requests,
            bytes: Arc::new(Semaphore::new(BODY_BUDGET)),
            reserve: Arc::new(Semaphore::new(SMALL_BODY_RESERVE)),
        }
    }

    /// A place for one more request in flight, or why there is none (answered 503 at once).
    pub fn admit(&self) -> Result<Admitted, Busy> {
        match self.requests.clone().try_acquire_owned() {
            Ok(place) => Ok(Admitted { _place: place }),
            Err(_) => Err(Busy {
                max_requests: self.max_requests,
            }),
        }
    }

    /// The bytes of the budget and the reserve taken now.
    pub fn bytes_held(&self) -> usize {
        BODY_BUDGET + SMALL_BODY_RESERVE
            - self.bytes.available_permits()
            - self.reserve.available_permits()
    }

    /// `n` bytes of the budget (or, for a body's first share of at most [`SMALL_BODY`] bytes,
    /// of the reserve), waiting until `until` at most.
    async fn take(
        &self,
        n: usize,
        first: bool,
        until: Instant,
    ) -> Result<OwnedSemaphorePermit, Response> {
        let n32 = u32::try_from(n).unwrap_or(u32::MAX);
        let shared = self.bytes.clone().acquire_many_owned(n32);
        let taken = if first && n <= SMALL_BODY {
            let reserved = self.reserve.clone().acquire_many_owned(n32);
            tokio::time::timeout_at(until, async {
                tokio::select! {
                    taken = shared => taken,
                    taken = reserved => taken,
                }
            })
            .await
        } else {
            tokio::time::timeout_at(until, shared).await
        };
        match taken {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(unavailable(format!(
                "the agent is holding {} MiB of request bodies, its limit; the body of this request ({n} bytes) could not be taken in within {} s",
                (BODY_BUDGET + SMALL_BODY_RESERVE) >> 20,
                BUDGET_WAIT.as_secs()
            ))),
        }
    }

    /// Reads `request`'s body, at most [`MAX_BODY_BYTES`], within `read_timeout` and the
    /// budget: the bytes, which give their share back when the last copy is dropped.
    pub(super) async fn read_body(
        &self,
        request: Request,
        declared: Option<u64>,
        read_timeout: Duration,
    ) -> Result<Bytes, Response> {
        let read_until = Instant::now() + read_timeout;
        let budget_until = read_until.min(Instant::now() + BUDGET_WAIT);
        let declared = declared.and_then(|n| usize::try_from(n).ok());
        let first = declared.unwrap_or(STEP).min(MAX_BODY_BYTES);
        let mut shares = vec![self.take(first, true, budget_until).await?];
        let mut taken = first;
        let mut body = request.into_body();
        let mut bytes: Vec<u8> = Vec::with_capacity(declared.unwrap_or(0));
        loop {
            let frame = match tokio::time::timeout_at(read_until, body.frame()).await {
                Err(_) => return Err(read_timed_out()),
                Ok(None) => break,
                Ok(Some(Err(e))) => {
                    return Err(plain(
                        StatusCode::BAD_REQUEST,
                        format!("cannot read request body: {e}"),
                    ));
                }
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if bytes.is_empty() && declared == Some(data.len()) {
                // The whole body in one piece, as most are: no copy.
                return Ok(Bytes::from_owner(Held {
                    bytes: data,
                    _shares: shares,
                }));
            }
            let length = bytes.len() + data.len();
            if length > MAX_BODY_BYTES {
                return Err(too_large());
            }
            while length > taken {
                let more = STEP.min((MAX_BODY_BYTES + 1).saturating_sub(taken));
                shares.push(self.take(more, false, budget_until).await?);
                taken += more;
            }
            bytes.extend_from_slice(&data);
        }
        Ok(crate::capacity::held_bytes(bytes, shares))
    }
}

/// A body read in one piece, with its shares of the budget.
struct Held {
    bytes: Bytes,
    _shares: Vec<OwnedSemaphorePermit>,
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

fn read_timed_out() -> Response {
    plain(
        StatusCode::REQUEST_TIMEOUT,
        "request body not received within the read timeout",
    )
}

/// 503 with the reason, to try again in a second.
fn unavailable(reason: String) -> Response {
    let mut response = plain(StatusCode::SERVICE_UNAVAILABLE, reason);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// 413: the body is larger than [`MAX_BODY_BYTES`].
pub(super) fn too_large() -> Response {
    plain(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body is larger than {MAX_BODY_BYTES} bytes"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: Vec<u8>) -> Request {
        Request::builder()
            .body(axum::body::Body::from(body))
            .unwrap()
    }

    #[tokio::test]
    async fn a_body_holds_its_share_until_its_last_copy_is_dropped() {
        let intake = Intake::new(4);
        let read = intake
            .read_body(
                request(vec![b'x'; 1000]),
                Some(1000),
                Duration::from_secs(1),
            )
            .await
            .unwrap();
        assert_eq!(read.len(), 1000);
        assert_eq!(intake.bytes_held(), 1000);
        let copy = read.clone();
        drop(read);
        assert_eq!(intake.bytes_held(), 1000);
        drop(copy);
        assert_eq!(intake.bytes_held(), 0);
    }

    #[tokio::test]
    async fn a_body_without_a_length_takes_the_budget_as_it_grows() {
        let intake = Intake::new(4);
        let chunk = || Ok::<_, std::io::Error>(Bytes::from(vec![b'y'; STEP + 1]));
        let chunks = vec![chunk(), chunk()];
        let body = axum::body::Body::from_stream(futures::stream::iter(chunks));
        let request = Request::builder().body(body).unwrap();
        let read = intake
            .read_body(request, None, Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(read.len(), 2 * STEP + 2);
        assert_eq!(intake.bytes_held(), 3 * STEP);
        drop(read);
        assert_eq!(intake.bytes_held(), 0);
    }

    /// Reads a body of `n` bytes that declares its length.
    async fn read(intake: &Intake, n: usize) -> Result<Bytes, Response> {
        intake
            .read_body(request(vec![0; n]), Some(n as u64), Duration::from_secs(15))
            .await
    }

    #[tokio::test(start_paused = true)]
    async fn past_the_budget_a_request_waits_then_gets_503() {
        let intake = Intake::new(64);
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(read(&intake, MAX_BODY_BYTES).await.unwrap());
        }
        assert_eq!(intake.bytes_held(), BODY_BUDGET);
        // A large body waits for the shared budget, then is refused.
        let started = Instant::now();
        let refused = read(&intake, SMALL_BODY + 1).await.unwrap_err();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(started.elapsed(), BUDGET_WAIT);
        // Small ones still come in, from the reserve, until it is taken too.
        for _ in 0..SMALL_BODY_RESERVE / SMALL_BODY {
            held.push(read(&intake, SMALL_BODY).await.unwrap());
        }
        assert_eq!(
            read(&intake, 10).await.unwrap_err().status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        // A share given back lets the next one in.
        held.pop();
        assert_eq!(read(&intake, 10).await.unwrap().len(), 10);
    }

    #[test]
    fn requests_past_the_limit_are_refused_at_once() {
        let intake = Intake::new(2);
        let first = intake.admit().unwrap();
        let _second = intake.admit().unwrap();
        let busy = axum::response::IntoResponse::into_response(intake.admit().unwrap_err());
        assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
        drop(first);
        assert!(intake.admit().is_ok());
    }
}
