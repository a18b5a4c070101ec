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

/// This pod's name when `--pod-name` is not given: the host name (a pod's host name is its name).
pub fn host_name() -> String {
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

/// Returns when the process is asked to stop (SIGTERM, as Kubernetes does, or SIGINT).
pub async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    Ok(())
}
