//! How the cluster watches fail and recover (reference §6): a capped backoff, so that once the API
//! server is reachable again the rules are current within seconds rather than the half minute
//! kube-runtime's default backoff can wait; no wait at all before the relist that a `410 Gone`
//! asks for; and every failure counted, but logged at most once per resource per
//! [`LOG_EVERY`], with the number of failures the quiet period hid.

use std::pin::Pin;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::watcher;
use tokio::time::Instant;

/// First wait after a failure.
pub const BACKOFF_START: Duration = Duration::from_millis(500);
/// Longest wait between two attempts.
pub const BACKOFF_CAP: Duration = Duration::from_secs(5);
/// At most one WARN line per resource this often.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// Exponential backoff from [`BACKOFF_START`], doubling, capped at [`BACKOFF_CAP`]; reset by
/// any successful event.
#[derive(Debug, Default)]
pub struct Backoff {
    failures: u32,
}

impl Backoff {
    /// The wait before the next attempt after `error`. `None`: go on at once — after a
    /// `410 Gone` the watcher relists from scratch, and waiting would only keep the rules
    /// out of date longer.
    pub fn after(&mut self, error: &watcher::Error) -> Option<Duration> {
        if is_gone(error) {
            return None;
        }
        let wait = BACKOFF_START
            .saturating_mul(1 << self.failures.min(16))
            .min(BACKOFF_CAP);
        self.failures = self.failures.saturating_add(1);
        Some(wait)
    }

    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

/// A `410 Gone` after which the watcher starts over with a fresh list (not one after which it
/// would retry the same request: that one backs off like any failure).
pub fn is_gone(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::WatchError(status) => status.code == 410,
        watcher::Error::InitialListFailed(kube::Error::Api(status)) => status.code == 410,
        _ => false,
    }
}

type WatchStream<K> = Pin<Box<dyn Stream<Item = watcher::Result<watcher::Event<K>>> + Send>>;

/// `stream` paused by [`Backoff`] after each failure. The pause lives inside the returned
/// stream, so dropping a pending `next()` (as `select!` does) does not cut it short.
pub fn with_backoff<K: Send + 'static>(
    stream: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send {
    let stream: WatchStream<K> = Box::pin(stream);
    futures::stream::unfold(
        (stream, Backoff::default(), None::<Duration>),
        |(mut stream, mut backoff, wait)| async move {
            if let Some(wait) = wait {
                tokio::time::sleep(wait).await;
            }
            let item = stream.next().await?;
            let wait = match &item {
                Ok(_) => {
                    backoff.reset();
                    None
                }
                Err(error) => backoff.after(error),
            };
            Some((item, (stream, backoff, wait)))
        },
    )
}

/// The failures of one watch, for the log: what to say, and when to keep quiet.
#[derive(Debug, Default)]
pub struct FailureLog {
    last_line: Option<Instant>,
    /// Failures not logged since the last line.
    suppressed: u64,
    /// Failures since the watch last delivered an event.
    since_success: u64,
}

/// What to log for one failure.
#[derive(Debug, PartialEq, Eq)]
pub enum LogLine {
    /// A WARN line, naming how many failures were not logged since the previous one.
    Warn { suppressed: u64 },
    /// Nothing: a line was logged less than [`LOG_EVERY`] ago.
    Quiet,
}

impl FailureLog {
    pub fn failed(&mut self, now: Instant) -> LogLine {
        self.since_success += 1;
        match self.last_line {
            Some(last) if now.duration_since(last) < LOG_EVERY => {
                self.suppressed += 1;
                LogLine::Quiet
            }
            _ => {
                self.last_line = Some(now);
                LogLine::Warn {
                    suppressed: std::mem::take(&mut self.suppressed),
                }
            }
        }
    }

    /// The watch delivered an event; returns the failures it recovered from, if any.
    pub fn succeeded(&mut self) -> Option<u64> {
        let failures = std::mem::take(&mut self.since_success);
        (failures > 0).then_some(failures)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn gone() -> watcher::Error {
        watcher::Error::WatchError(Box::new(
            Status::failure("too old", "Expired").with_code(410),
        ))
    }

    fn refused() -> watcher::Error {
        watcher::Error::NoResourceVersion
    }

    #[test]
    fn backoff_doubles_from_half_a_second_to_five_and_resets() {
        let mut backoff = Backoff::default();
        let waits: Vec<Duration> = (0..7).filter_map(|_| backoff.after(&refused())).collect();
        let millis: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(millis, [500, 1000, 2000, 4000, 5000, 5000, 5000]);
        // A 410 relists at once and does not lengthen the next wait.
        assert_eq!(backoff.after(&gone()), None);
        backoff.reset();
        assert_eq!(backoff.after(&refused()), Some(BACKOFF_START));
        assert_eq!(backoff.after(&gone()), None);
        assert_eq!(backoff.after(&refused()), Some(Duration::from_secs(1)));
    }

    #[test]
    fn at_most_one_line_per_ten_seconds_with_the_count_of_the_others() {
        let start = Instant::now();
        let mut log = FailureLog::default();
        assert_eq!(log.failed(start), LogLine::Warn { suppressed: 0 });
        for second in 1..10 {
            assert_eq!(
                log.failed(start + Duration::from_secs(second)),
                LogLine::Quiet
            );
        }
        assert_eq!(
            log.failed(start + Duration::from_secs(10)),
            LogLine::Warn { suppressed: 9 }
        );
        assert_eq!(log.succeeded(), Some(11));
        assert_eq!(log.succeeded(), None);
        assert_eq!(log.failed(start + Duration::from_secs(12)), LogLine::Quiet);
        assert_eq!(
            log.failed(start + Duration::from_secs(25)),
            LogLine::Warn { suppressed: 1 }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_stream_waits_after_failures_but_not_after_a_410() {
        let items: Vec<watcher::Result<watcher::Event<()>>> = vec![
            Err(refused()),
            Err(refused()),
            Err(gone()),
            Ok(watcher::Event::Init),
            Err(refused()),
            Ok(watcher::Event::InitDone),
        ];
        let started = Instant::now();
        let mut stream = std::pin::pin!(with_backoff(futures::stream::iter(items)));
        let mut at = Vec::new();
        while let Some(item) = stream.next().await {
            at.push((item.is_ok(), started.elapsed().as_millis()));
        }
        // Waits: 0.5 s, 1 s, none after the 410, reset by the event, 0.5 s.
        assert_eq!(
            at,
            [
                (false, 0),
                (false, 500),
                (false, 1500),
                (true, 1500),
                (false, 1500),
                (true, 2000)
            ]
        );
    }
}
