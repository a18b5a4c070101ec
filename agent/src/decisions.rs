//! The threads that decide: a fixed pool of as many threads as the process may use cores
//! (at least two), apart from the async workers that answer `/healthz` and `/readyz`
//! (reference §6), fed in arrival order.
//!
//! Decisions are CPU work. On tokio's blocking pool every concurrent request got a thread of
//! its own (sixteen callers, sixteen threads on two cores), which the kernel then time-sliced:
//! context switches and cold caches cost a fifth of the throughput (issue 27, measured in
//! `docs/operations.md`). Here a request waits in the queue instead, and the write timeout
//! still answers for it (`webhook::admission`); one that waited past it is never worked on.

use std::collections::VecDeque;
use std::num::NonZeroUsize;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::Thread;

type Job = Box<dyn FnOnce() + Send>;

/// A fixed pool of decision threads; dropping it lets them end once the queue is empty.
pub struct DecisionPool {
    queue: Arc<Queue>,
    threads: usize,
}

/// The jobs waiting, and the threads waiting for one. A job wakes one idle thread (a
/// channel behind a mutex, as before, woke every idle thread for each job: one waited in
/// `recv`, the others on the mutex it then released — 3.0 context switches of these threads
/// per call at 50 calls/s, now 1.4; the CPU per call did not measurably change).
struct Queue {
    waiting: Mutex<Waiting>,
}

#[derive(Default)]
struct Waiting {
    jobs: VecDeque<Job>,
    /// Threads waiting for a job, the last to go idle on top: a job wakes that one, whose
    /// caches are the warmest when calls are few. A condition variable woke the one that had
    /// waited longest, so the threads took turns; at 50 calls/s this took the agent's CPU per
    /// call from 344 to 319 µs (medians of 8 alternating 10 s runs, plain HTTP). Under load
    /// every thread is busy and a job wakes none (a wake-up is a system call).
    idle: Vec<Thread>,
    /// The pool was dropped: the threads end once `jobs` is empty.
    closed: bool,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        // A job never runs under the lock, so a poisoned lock holds a consistent queue.
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `job`, waking the thread that went idle last, if one waits.
    fn push(&self, job: Job) {
        let idle = {
            let mut waiting = self.lock();
            waiting.jobs.push_back(job);
            waiting.idle.pop()
        };
        if let Some(thread) = idle {
            thread.unpark();
        }
    }
}

impl DecisionPool {
    /// As many threads as this process may use cores (its CPU quota included), at least two,
    /// so that one long decision never holds up every other.
    pub fn for_this_machine() -> std::io::Result<Self> {
        let cores = std::thread::available_parallelism().map_or(2, NonZeroUsize::get);
        Self::new(cores.max(2))
    }

    pub fn new(threads: usize) -> std::io::Result<Self> {
        let queue = Arc::new(Queue {
            waiting: Mutex::new(Waiting::default()),
        });
        let pool = Self {
            queue: queue.clone(),
            threads,
        };
        for n in 0..threads {
            let queue = queue.clone();
            // On an error `pool` is dropped, which ends the threads already started.
            std::thread::Builder::new()
                .name(format!("drift-decide-{n}"))
                .spawn(move || work(&queue))?;
        }
        Ok(pool)
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
        self.queue.push(job);
        answered
            .await
            .unwrap_or_else(|_| Err("the decision thread stopped".into()))
    }
}

impl Drop for DecisionPool {
    fn drop(&mut self) {
        let idle = {
            let mut waiting = self.queue.lock();
            waiting.closed = true;
            std::mem::take(&mut waiting.idle)
        };
        for thread in idle {
            thread.unpark();
        }
    }
}

/// One decision thread: takes the next job until the pool is dropped and the queue is empty.
fn work(queue: &Queue) {
    let me = std::thread::current();
    let mut waiting = queue.lock();
    loop {
        if let Some(job) = waiting.jobs.pop_front() {
            // Never run a job under the lock.
            drop(waiting);
            job();
            waiting = queue.lock();
        } else if waiting.closed {
            return;
        } else {
            waiting.idle.push(me.clone());
            drop(waiting);
            // A job's `unpark` before this `park` makes it return at once.
            std::thread::park();
            waiting = queue.lock();
            // Woken without a job (park may return spuriously): out of the idle list while
            // this thread looks for one.
            waiting.idle.retain(|thread| thread.id() != me.id());
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

    /// Jobs that arrive while the threads go idle and come back are never left waiting.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn no_job_is_left_in_the_queue() {
        let pool = Arc::new(DecisionPool::new(2).unwrap());
        for round in 0..200u64 {
            let tasks: Vec<_> = (0..(round % 7 + 1))
                .map(|n| {
                    let pool = pool.clone();
                    tokio::spawn(async move { pool.run(move || round * 10 + n).await })
                })
                .collect();
            for (n, task) in tasks.into_iter().enumerate() {
                let answer = tokio::time::timeout(Duration::from_secs(5), task)
                    .await
                    .expect("a queued job was left waiting");
                assert_eq!(answer.unwrap(), Ok(round * 10 + n as u64));
            }
        }
    }

    /// When calls come one at a time, one thread decides them all: the one that went idle
    /// last, whose caches are warm.
    #[tokio::test]
    async fn one_call_at_a_time_is_decided_by_one_thread() {
        let pool = DecisionPool::new(3).unwrap();
        let all_idle = || {
            let deadline = Instant::now() + Duration::from_secs(5);
            while pool.queue.lock().idle.len() < 3 {
                assert!(Instant::now() < deadline, "the threads did not go idle");
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        let mut names = std::collections::BTreeSet::new();
        for _ in 0..20 {
            all_idle();
            let name = pool.run(|| std::thread::current().name().map(str::to_owned));
            names.insert(name.await.unwrap());
        }
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[tokio::test]
    async fn dropping_the_pool_ends_its_threads() {
        let pool = DecisionPool::new(3).unwrap();
        assert_eq!(pool.run(|| 1).await, Ok(1));
        // Each thread holds the queue while it runs.
        let queue = Arc::downgrade(&pool.queue);
        drop(pool);
        let deadline = Instant::now() + Duration::from_secs(5);
        while queue.upgrade().is_some() {
            assert!(
                Instant::now() < deadline,
                "the decision threads did not end"
            );
            std::thread::sleep(Duration::from_millis(5));
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
