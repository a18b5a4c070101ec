//! Export health on the Connection's status (reference §7 "Status"). This pod writes only its own
//! `status.byPod[id=<pod>]` entry — `connectionUID` and `connectionErrors` with the field
//! manager `drift-sentinel/<pod>`, and `publishStatuses[source=webhook]` with
//! `drift-sentinel/<pod>/webhook` — by server-side apply on the list-map keys, so that other
//! pods and other sources never lose their entries. Publish errors are checked every 10 s; an
//! unchanged healthy state is written at most once a minute; a window without publish
//! attempts leaves the entry alone. Offline, the same entry is served at the admin `/status`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use drift_api::{Connection, PodConnectionStatus, PublishStatus, StatusError};
use kube::Resource as _;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

/// Most error entries in one list; the last says how many more were omitted.
pub const MAX_ERRORS: usize = 500;
/// The publisher source the webhook reports.
pub const WEBHOOK_SOURCE: &str = "webhook";
/// The publisher source the audit reports.
pub const AUDIT_SOURCE: &str = "audit";

/// The class of an error: its text before the first colon.
pub fn error_class(message: &str) -> &str {
    message.split(':').next().unwrap_or(message).trim()
}

/// Error classes as status entries: distinct, in first-seen order, at most [`MAX_ERRORS`],
/// the last one saying how many were left out.
pub fn error_entries<'a>(
    type_: &str,
    messages: impl IntoIterator<Item = &'a str>,
) -> Vec<StatusError> {
    let mut classes: Vec<&str> = Vec::new();
    for message in messages {
        let class = error_class(message);
        if !classes.contains(&class) {
            classes.push(class);
        }
    }
    let mut entries: Vec<StatusError> = Vec::new();
    let omitted = classes.len().saturating_sub(MAX_ERRORS - 1);
    let kept = if omitted > 1 {
        MAX_ERRORS - 1
    } else {
        classes.len()
    };
    for class in classes.iter().take(kept) {
        entries.push(StatusError {
            type_: type_.to_owned(),
            message: (*class).to_owned(),
        });
    }
    if kept < classes.len() {
        entries.push(StatusError {
            type_: type_.to_owned(),
            message: format!("{} more error classes were omitted", classes.len() - kept),
        });
    }
    entries
}

/// Publish outcomes since the last report, written by the publisher thread.
#[derive(Default)]
pub struct PublishHealth {
    inner: Mutex<Health>,
}

#[derive(Default)]
struct Health {
    attempts: u64,
    successes: u64,
    errors: Vec<String>,
    last_attempt: Option<SystemTime>,
    last_success: Option<SystemTime>,
}

/// One reporting window.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    pub attempts: u64,
    pub successes: u64,
    pub errors: Vec<StatusError>,
    pub last_attempt: Option<SystemTime>,
    pub last_success: Option<SystemTime>,
}

impl PublishHealth {
    /// A batch was written (`succeeded`: at least one record) or failed with `error`.
    pub fn record_attempt(&self, at: SystemTime, succeeded: bool, error: Option<&str>) {
        let Ok(mut health) = self.inner.lock() else {
            return;
        };
        health.attempts += 1;
        health.last_attempt = Some(at);
        if succeeded {
            health.successes += 1;
            health.last_success = Some(at);
        }
        if let Some(error) = error {
            // Keep classes only: the window never holds more than the status can show.
            let class = error_class(error);
            if !health.errors.iter().any(|e| e == class) && health.errors.len() <= MAX_ERRORS {
                health.errors.push(class.to_owned());
            }
        }
    }

    /// A failure outside a batch (the spool cannot be opened, the janitor failed).
    pub fn record_error(&self, at: SystemTime, error: &str) {
        self.record_attempt(at, false, Some(error));
    }

    /// Nothing to export to any more: errors of the old spool no longer apply.
    pub fn clear_errors(&self) {
        if let Ok(mut health) = self.inner.lock() {
            health.errors.clear();
        }
    }

    /// Takes the window since the last call.
    pub fn take_window(&self) -> Window {
        let Ok(mut health) = self.inner.lock() else {
            return Window {
                attempts: 0,
                successes: 0,
                errors: Vec::new(),
                last_attempt: None,
                last_success: None,
            };
        };
        let window = Window {
            attempts: health.attempts,
            successes: health.successes,
            errors: error_entries("Publish", health.errors.iter().map(String::as_str)),
            last_attempt: health.last_attempt,
            last_success: health.last_success,
        };
        health.attempts = 0;
        health.successes = 0;
        health.errors.clear();
        window
    }
}

fn rfc3339(time: Option<SystemTime>) -> Option<String> {
    time.map(|t| humantime::format_rfc3339_seconds(t).to_string())
}

/// Where the status goes besides the admin `/status`.
#[derive(Clone)]
pub struct ClusterTarget {
    pub api: Api<Connection>,
    pub name: String,
}

/// This pod's entry of a Connection's status, and how it is written.
pub struct ConnectionStatusReporter {
    pod: String,
    health: Arc<PublishHealth>,
    cluster: Option<ClusterTarget>,
    entry: Mutex<PodConnectionStatus>,
    last_written: Mutex<Option<(Instant, PublishStatus)>>,
    /// Whether the base entry still has to be written (a write failed).
    base_dirty: std::sync::atomic::AtomicBool,
    /// The publisher source this reporter owns (`webhook` or `audit`).
    source: &'static str,
}

/// Longest a field manager name may be.
const MAX_MANAGER_CHARS: usize = 128;

fn manager(parts: &[&str]) -> String {
    let name = format!("drift-sentinel/{}", parts.join("/"));
    name.chars().take(MAX_MANAGER_CHARS).collect()
}

impl ConnectionStatusReporter {
    pub fn new(pod: String, health: Arc<PublishHealth>, cluster: Option<ClusterTarget>) -> Self {
        Self::for_source(pod, health, cluster, WEBHOOK_SOURCE)
    }

    /// A reporter of another publisher source: the audit writes `source: audit`.
    pub fn for_source(
        pod: String,
        health: Arc<PublishHealth>,
        cluster: Option<ClusterTarget>,
        source: &'static str,
    ) -> Self {
        Self {
            source,
            entry: Mutex::new(PodConnectionStatus {
                id: pod.clone(),
                ..PodConnectionStatus::default()
            }),
            pod,
            health,
            cluster,
            last_written: Mutex::new(None),
            base_dirty: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// This pod's entry as last computed (what `/status` shows).
    pub fn entry(&self) -> PodConnectionStatus {
        self.entry.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// Records the Connection this pod uses and the problems with it, and writes them.
    pub async fn set_connection(&self, uid: Option<String>, errors: &[String]) {
        if let Ok(mut entry) = self.entry.lock() {
            entry.connection_uid = uid;
            entry.connection_errors =
                error_entries("UpsertConnection", errors.iter().map(String::as_str));
        }
        self.base_dirty
            .store(true, std::sync::atomic::Ordering::Release);
        self.write_base().await;
    }

    async fn write_base(&self) {
        let Some(cluster) = &self.cluster else {
            self.base_dirty
                .store(false, std::sync::atomic::Ordering::Release);
            return;
        };
        let entry = self.entry();
        let mut pod_entry = json!({
            "id": self.pod,
            "connectionErrors": entry.connection_errors,
        });
        if let Some(uid) = &entry.connection_uid {
            pod_entry["connectionUID"] = json!(uid);
        }
        let body = json!({
            "apiVersion": Connection::api_version(&()),
            "kind": Connection::kind(&()),
            "metadata": {"name": cluster.name},
            "status": {"byPod": [pod_entry]}
        });
        let params = PatchParams::apply(&manager(&[&self.pod])).force();
        match cluster
            .api
            .patch_status(&cluster.name, &params, &Patch::Apply(&body))
            .await
        {
            Ok(_) => self
                .base_dirty
                .store(false, std::sync::atomic::Ordering::Release),
            Err(e) => tracing::warn!(
                connection = %cluster.name,
                error = %e,
                "cannot write this pod's entry of the Connection status; will retry"
            ),
        }
    }

    /// One check: writes the webhook publish status when it changed, or when a minute has
    /// passed with publish attempts and no change. `now` is the time of the check.
    pub async fn report(&self, now: Instant, heartbeat: Duration) {
        if self.base_dirty.load(std::sync::atomic::Ordering::Acquire) {
            self.write_base().await;
        }
        let window = self.health.take_window();
        if window.attempts == 0 {
            return; // no new attempts: the previous entry stands
        }
        let status = PublishStatus {
            source: self.source.to_owned(),
            active: window.successes > 0,
            last_attempt_time: rfc3339(window.last_attempt),
            last_success_time: rfc3339(window.last_success),
            errors: window.errors,
        };
        let due = match self.last_written.lock().ok().and_then(|l| l.clone()) {
            None => true,
            Some((at, previous)) => {
                previous.active != status.active
                    || previous.errors != status.errors
                    || now.duration_since(at) >= heartbeat
            }
        };
        // Kept for /status either way, so that it shows the latest window.
        if let Ok(mut entry) = self.entry.lock() {
            entry.publish_statuses = vec![status.clone()];
        }
        if !due {
            return;
        }
        if self.write_publish_status(&status).await
            && let Ok(mut last) = self.last_written.lock()
        {
            *last = Some((now, status));
        }
    }

    async fn write_publish_status(&self, status: &PublishStatus) -> bool {
        let Some(cluster) = &self.cluster else {
            return true;
        };
        let body = json!({
            "apiVersion": Connection::api_version(&()),
            "kind": Connection::kind(&()),
            "metadata": {"name": cluster.name},
            "status": {"byPod": [{
                "id": self.pod,
                "publishStatuses": [status],
            }]}
        });
        let params = PatchParams::apply(&manager(&[&self.pod, self.source])).force();
        match cluster
            .api
            .patch_status(&cluster.name, &params, &Patch::Apply(&body))
            .await
        {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(
                    connection = %cluster.name,
                    error = %e,
                    source = self.source,
                    "cannot write the publish status of the Connection; will retry"
                );
                false
            }
        }
    }
}

/// Checks and reports every `interval` until shutdown.
pub async fn run(
    reporter: Arc<ConnectionStatusReporter>,
    interval: Duration,
    heartbeat: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => reporter.report(Instant::now(), heartbeat).await,
            _ = shutdown.changed() => {
                // A last report, so that the final window is not lost.
                reporter.report(Instant::now(), heartbeat).await;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_coalesced_to_their_class_and_capped() {
        let entries = error_entries(
            "Publish",
            [
                "cannot write a record in spool directory /x: Read-only file system",
                "cannot write a record in spool directory /x: No space left",
                "no colon here",
            ],
        );
        let messages: Vec<&str> = entries.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(
            messages,
            [
                "cannot write a record in spool directory /x",
                "no colon here"
            ]
        );

        let many: Vec<String> = (0..600).map(|i| format!("class {i}: detail")).collect();
        let entries = error_entries("Publish", many.iter().map(String::as_str));
        assert_eq!(entries.len(), MAX_ERRORS);
        assert_eq!(entries[498].message, "class 498");
        assert_eq!(entries[499].message, "101 more error classes were omitted");

        let exactly: Vec<String> = (0..500).map(|i| format!("class {i}")).collect();
        let entries = error_entries("Publish", exactly.iter().map(String::as_str));
        assert_eq!(entries.len(), 500);
        assert_eq!(entries[499].message, "class 499");
    }

    #[tokio::test]
    async fn healthy_traffic_is_written_once_a_minute_and_changes_at_once() {
        let health = Arc::new(PublishHealth::default());
        let reporter = ConnectionStatusReporter::new("pod-a".into(), health.clone(), None);
        let start = Instant::now();
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let minute = Duration::from_secs(60);

        reporter.report(start, minute).await;
        assert!(
            reporter.last_written.lock().unwrap().is_none(),
            "no attempts, no write"
        );

        health.record_attempt(t, true, None);
        reporter.report(start, minute).await;
        let first = reporter.last_written.lock().unwrap().clone().unwrap();
        assert!(first.1.active);

        health.record_attempt(t, true, None);
        reporter
            .report(start + Duration::from_secs(10), minute)
            .await;
        assert_eq!(
            reporter.last_written.lock().unwrap().as_ref().unwrap().0,
            start
        );

        health.record_attempt(t, false, Some("cannot write x: denied"));
        reporter
            .report(start + Duration::from_secs(20), minute)
            .await;
        let errored = reporter.last_written.lock().unwrap().clone().unwrap();
        assert_eq!(errored.0, start + Duration::from_secs(20));
        assert!(!errored.1.active);
        assert_eq!(errored.1.errors[0].message, "cannot write x");
        assert_eq!(
            errored.1.last_success_time.as_deref(),
            Some("2027-01-15T08:00:00Z")
        );

        health.record_attempt(t, true, None);
        reporter
            .report(start + Duration::from_secs(30), minute)
            .await;
        let healed = reporter.last_written.lock().unwrap().clone().unwrap();
        assert!(healed.1.active && healed.1.errors.is_empty());
        assert_eq!(reporter.entry().publish_statuses.len(), 1);
    }
}
