//! The threads that decide: a fixed pool of as many threads as the process may use cores
//! (at least two), apart from the async workers that answer `/healthz` and `/readyz`
//! (reference §6), fed in arrival order.
//!
//! Decisions are CPU work. On tokio's blocking pool every concurrent request got a thread of
//! its own (sixteen callers, sixteen threads on two cores), which the kernel then time-sliced:
//! context switches and cold caches cost a fifth of the throughput (issue 27, measured in
//! `docs/operations.md`). Here a request waits in the queue instead, and the write timeout
//! still answers for it (`webhook::admission`); one that waited past it is never worked on.

use std::num::NonZeroUsize;
use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, PoisonError};

type Job = Box<dyn FnOnce() + Send>;

/// A fixed pool of decision threads; dropping it lets them end once the queue is empty.
pub struct DecisionPool {
    jobs: Sender<Job>,
    threads: usize,
}

impl DecisionPool {
    /// As many threads as this process may use cores (its CPU quota included), at least two,
    /// so that one long decision never holds up every other.
    pub fn for_this_machine() -> std::io::Result<Self> {
        let cores = std::thread::available_parallelism().map_or(2, NonZeroUsize::get);
        Self::new(cores.max(2))
    }

    pub fn new(threads: usize) -> std::io::Result<Self> {
        let (sender, receiver) = channel::<Job>();
        let receiver = Arc::new(Mutex::new(receiver));
        for n in 0..threads {
            let receiver = receiver.clone();
            std::thread::Builder::new()
                .name(format!("drift-decide-{n}"))
                .spawn(move || work(&receiver))?;
        }
        Ok(Self {
            jobs: sender,
            threads,
        })
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `decide` on a decision thread and waits for it; a panic becomes its message.
    pub async fn run<T: Send + 'static>(
        &self,
        decide: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, String> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = answer.send(guarded(decide));
        });
        if self.jobs.send(job).is_err() {
            return Err("the decision threads have stopped".into());
        }
        answered
            .await
            .unwrap_or_else(|_| Err("the decision thread stopped".into()))
    }
}

/// One decision thread: takes the next job until the pool is dropped.
fn work(receiver: &Mutex<Receiver<Job>>) {
    loop {
        // The lock is held only while waiting for a job, never while running one.
        let job = receiver
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .recv();
        match job {
            Ok(job) => job(),
            Err(_) => return,
        }
    }
}

/// Runs `f`; a panic becomes its message.
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(AssertUnwindSafe(f)).map_err(|panic| {
        panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".into())
    })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[tokio::test]
    async fn answers_and_reports_a_panic_as_its_message() {
        let pool = DecisionPool::new(2).unwrap();
        assert_eq!(pool.run(|| 6 * 7).await, Ok(42));
        let name = pool
            .run(|| std::thread::current().name().map(str::to_owned))
            .await;
        assert!(name.unwrap().unwrap().starts_with("drift-decide-"));
        let panicked = pool.run(|| -> u8 { panic!("no such field") }).await;
        assert_eq!(panicked, Err("no such field".to_owned()));
        // The thread that caught the panic goes on deciding.
        for n in 0..4 {
            assert_eq!(pool.run(move || n).await, Ok(n));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runs_as_many_decisions_at_once_as_it_has_threads() {
        let pool = Arc::new(DecisionPool::new(2).unwrap());
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let started = Instant::now();
        let tasks: Vec<_> = (0..6)
            .map(|_| {
                let (pool, running, most) = (pool.clone(), running.clone(), most.clone());
                tokio::spawn(async move {
                    pool.run(move || {
                        use std::sync::atomic::Ordering::SeqCst;
                        let now = running.fetch_add(1, SeqCst) + 1;
                        most.fetch_max(now, SeqCst);
                        std::thread::sleep(Duration::from_millis(50));
                        running.fetch_sub(1, SeqCst);
                    })
                    .await
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        assert_eq!(most.load(std::sync::atomic::Ordering::SeqCst), 2);
        // Six jobs of 50 ms on two threads: three rounds.
        assert!(started.elapsed() >= Duration::from_millis(150));
    }
}
