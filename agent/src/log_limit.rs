//! The one limit on how often a class of event is logged: at most one line per period for each
//! class, saying how many of it were held back since the last line (a flood of refused callers
//! or of dropped records must not become a flood of log lines).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most one line per `period` for each class `K`.
#[derive(Debug)]
pub struct LogLimit<K> {
    period: Duration,
    /// By class: when its last line was allowed, and how many were held back since.
    last: Mutex<HashMap<K, (Instant, u64)>>,
}

/// A line that may be written now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowed {
    /// The first line of its class.
    pub first: bool,
    /// Events of its class held back since the last line.
    pub held_back: u64,
}

impl<K: Hash + Eq> LogLimit<K> {
    pub fn new(period: Duration) -> Self {
        Self {
            period,
            last: Mutex::new(HashMap::new()),
        }
    }

    /// `Some` when an event of `class` may be logged now; `None` when it is held back (and
    /// counted), or the state cannot be had.
    pub fn allow<Q>(&self, class: &Q) -> Option<Allowed>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut last = self.last.lock().ok()?;
        let now = Instant::now();
        match last.get_mut(class) {
            Some((at, held_back)) if now.duration_since(*at) < self.period => {
                *held_back += 1;
                None
            }
            Some((at, held_back)) => {
                let allowed = Allowed {
                    first: false,
                    held_back: *held_back,
                };
                *at = now;
                *held_back = 0;
                Some(allowed)
            }
            None => {
                last.insert(class.to_owned(), (now, 0));
                Some(Allowed {
                    first: true,
                    held_back: 0,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_a_period_for_each_class() {
        let limit = LogLimit::<String>::new(Duration::from_secs(3600));
        let first = Some(Allowed {
            first: true,
            held_back: 0,
        });
        assert_eq!(limit.allow("a"), first);
        assert_eq!(limit.allow("a"), None);
        assert_eq!(limit.allow("a"), None);
        assert_eq!(limit.allow("b"), first);
        let limit = LogLimit::<()>::new(Duration::ZERO);
        assert_eq!(limit.allow(&()), first);
        let again = Some(Allowed {
            first: false,
            held_back: 0,
        });
        assert_eq!(limit.allow(&()), again);
    }

    #[test]
    fn the_next_line_says_how_many_were_held_back() {
        let limit = LogLimit::<()>::new(Duration::from_millis(50));
        assert!(limit.allow(&()).is_some());
        assert_eq!(limit.allow(&()), None);
        assert_eq!(limit.allow(&()), None);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(
            limit.allow(&()),
            Some(Allowed {
                first: false,
                held_back: 2
            })
        );
    }
}
