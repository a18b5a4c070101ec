//! What the long-running commands share as processes: JSON logs, the names a pod is known by
//! (its host name, its namespace), and the signals that stop them. `serve`, `audit` and
//! `reader` use it; none of them reaches into another for it.

use anyhow::Context as _;

/// Where a command's logs go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogTo {
    Stdout,
    /// For a command whose standard output is its result (the audit run once prints its
    /// summary there).
    Stderr,
}

/// JSON logs, one object per line, at `level` and above. Once per process; a second call
/// changes nothing.
pub fn init_logging(level: tracing::Level, to: LogTo) {
    let logs = tracing_subscriber::fmt()
        .event_format(crate::json_lines::JsonLines)
        .with_max_level(level);
    let _ = match to {
        LogTo::Stdout => logs.with_writer(std::io::stdout).try_init(),
        LogTo::Stderr => logs.with_writer(std::io::stderr).try_init(),
    };
}

/// This pod's name: `--pod-name` (`given`), else the host name (a pod's host name is its name).
pub fn pod_name(given: Option<&str>) -> String {
    given.map_or_else(host_name, str::to_owned)
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "drift-sentinel".to_owned())
}

/// The agent's own namespace: `--pod-namespace`, the service account's, or `default`.
pub fn agent_namespace(pod_namespace: Option<&str>) -> String {
    pod_namespace
        .map(str::to_owned)
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .ok()
                .map(|n| n.trim().to_owned())
        })
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_owned())
}

/// SIGTERM (as Kubernetes sends) and SIGINT, caught from the moment this is made: made before
/// the listeners open, so that a signal right after the first probe succeeds is a graceful stop
/// and not the default action, which kills the process at once.
pub struct StopSignals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    pub fn catch() -> anyhow::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            terminate: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
            interrupt: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
        })
    }

    /// Returns when the process is asked to stop.
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}

/// How much freed memory glibc's allocator keeps at the top of a heap before it returns it to
/// the system.
///
/// glibc's default (128 KiB, until a large block is freed) gives pages back after almost every
/// burst of requests and takes them again with page faults on the next: under a steady load of
/// 29 KB reviews that was 1.25 page faults per request, some of them with a TLB shoot-down of
/// the other core, and 15–20 % of the throughput (issue 27, `docs/operations.md`). A fixed
/// threshold also ends glibc's dynamic one, which after one 8 MB body would keep up to 16 MB
/// per heap; bodies above 128 KiB stay mapped on their own and return on free.
pub const KEPT_FREED_MEMORY: usize = 4 << 20;

/// Sets glibc's trim threshold to [`KEPT_FREED_MEMORY`]; call it before any thread starts.
/// Whether it was set (never, on another C library).
pub fn keep_freed_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let threshold = libc::c_int::try_from(KEPT_FREED_MEMORY).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only sets one of the allocator's parameters, under its own lock.
        unsafe { libc::mallopt(libc::M_TRIM_THRESHOLD, threshold) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    /// This thread's minor page faults so far.
    fn page_faults() -> i64 {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: getrusage writes one rusage into the pointer it is given.
        let usage = unsafe {
            assert_eq!(libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr()), 0);
            usage.assume_init()
        };
        usage.ru_minflt
    }

    /// 2 MiB in blocks the size of a review, each written, then all freed.
    fn a_burst_of_requests() {
        let blocks: Vec<Vec<u8>> = (0..64).map(|n| vec![n as u8 | 1; 32 << 10]).collect();
        assert!(blocks.iter().all(|b| b[b.len() - 1] != 0));
    }

    #[test]
    fn freed_memory_is_reused_without_page_faults() {
        assert!(keep_freed_memory());
        a_burst_of_requests();
        let before = page_faults();
        a_burst_of_requests();
        let faults = page_faults() - before;
        // Given back and taken again, 2 MiB are 512 page faults.
        assert!(
            faults < 64,
            "{faults} page faults for memory freed just before"
        );
    }
}
