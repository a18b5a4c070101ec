//! The Connection that routes exported violations: read from a file offline (`--connection`)
//! or watched in the cluster (`--audit-connection` in the pod's namespace), validated, and
//! turned into the channel directory the publisher writes to. A Connection with errors (an
//! unknown driver, a bad `closedConnectionTTL`, a path that cannot be written) exports
//! nothing; its errors go to `connectionErrors` and the log.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use drift_api::Connection;
use futures::StreamExt;
use kube::Resource as _;
use kube::api::Api;
use kube::runtime::watcher;

use super::Exporter;
use crate::connection_status::ConnectionStatusReporter;

/// `spec.config.path` when it is not set.
pub const DEFAULT_PATH: &str = "tmp/violations/topics";
/// The only driver.
pub const DISK_DRIVER: &str = "disk";
const TTL_RANGE: (Duration, Duration) = (Duration::from_secs(60), Duration::from_secs(600));

/// Where a Connection's files go: its `spec.config.path` under the export root, then the
/// channel directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `--export-root`: every Connection path resolves inside it.
    pub root: PathBuf,
    /// `--audit-channel`: the directory under the Connection's path.
    pub channel: String,
}

/// A Connection checked against what this agent can do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// `<path>/<channel>`, when the Connection is usable.
    pub channel_dir: Option<PathBuf>,
    /// What is wrong with it, one sentence each, class before the first colon.
    pub errors: Vec<String>,
}

/// Validates `connection` for `target`, creating (mode 0700, never through a symbolic link)
/// and probing the channel directory so that a path that cannot be written is reported now, not
/// at the first record.
pub fn check(connection: &Connection, target: &Target) -> Checked {
    let mut errors = Vec::new();
    let spec = &connection.spec;
    if spec.driver != DISK_DRIVER {
        errors.push(format!(
            "unknown driver {:?}: the only driver is \"disk\"",
            spec.driver
        ));
    }
    if let Some(ttl) = &spec.config.closed_connection_ttl {
        match humantime::parse_duration(ttl) {
            Ok(d) if d >= TTL_RANGE.0 && d <= TTL_RANGE.1 => {}
            Ok(_) => errors.push(format!(
                "invalid closedConnectionTTL {ttl:?}: accepted values are \"1m\" through \"10m\""
            )),
            Err(e) => errors.push(format!(
                "invalid closedConnectionTTL {ttl:?}: {e}; accepted values are \"1m\" through \"10m\""
            )),
        }
    }
    if spec.config.max_audit_results == Some(0) {
        errors.push("invalid maxAuditResults 0: it must be at least 1".to_owned());
    }
    let path = spec.config.path.as_deref().unwrap_or(DEFAULT_PATH);
    if path.trim().is_empty() {
        errors.push("invalid path \"\": set spec.config.path to a writable directory".to_owned());
    }
    if !errors.is_empty() {
        return Checked {
            channel_dir: None,
            errors,
        };
    }
    let dir = match super::paths::resolve(&target.root, path) {
        Ok(resolved) => resolved.join(&target.channel),
        Err(e) => {
            errors.push(e.to_string());
            return Checked {
                channel_dir: None,
                errors,
            };
        }
    };
    if let Err(e) = probe_writable(&target.root, &dir) {
        errors.push(format!(
            "path {path:?} is not writable (channel directory {}): {e}",
            dir.display()
        ));
        return Checked {
            channel_dir: None,
            errors,
        };
    }
    Checked {
        channel_dir: Some(dir),
        errors,
    }
}

fn probe_writable(root: &Path, dir: &Path) -> std::io::Result<()> {
    super::paths::ensure_dir(root, dir)?;
    let probe = dir.join(format!(".drift-sentinel-probe-{}", std::process::id()));
    std::fs::write(&probe, b"")?;
    std::fs::remove_file(&probe)
}

/// Reads a Connection document from a file (YAML or JSON).
pub fn read_file(path: &Path) -> anyhow::Result<Connection> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the Connection file {}", path.display()))?;
    // Measured before libyaml reads it (reference §5, "No input stops the agent").
    drift_engine::nesting::check_yaml(&text).map_err(|e| {
        anyhow::anyhow!(
            "{} cannot be read as a Connection: the text {e}",
            path.display()
        )
    })?;
    let value: serde_json::Value = serde_yaml::from_str(&text)
        .with_context(|| format!("{} is not a YAML document", path.display()))?;
    let api_version = value.get("apiVersion").and_then(|v| v.as_str());
    let kind = value.get("kind").and_then(|v| v.as_str());
    let (want_api_version, want_kind) = (Connection::api_version(&()), Connection::kind(&()));
    if api_version != Some(want_api_version.as_ref()) || kind != Some(want_kind.as_ref()) {
        anyhow::bail!(
            "{} holds apiVersion {:?} kind {:?}; expected apiVersion {want_api_version} kind {want_kind}",
            path.display(),
            api_version.unwrap_or(""),
            kind.unwrap_or("")
        );
    }
    serde_json::from_value(value)
        .with_context(|| format!("{} is not a valid Connection", path.display()))
}

/// Puts a (checked) Connection into effect: the exporter's directory, the status entry, the log.
pub async fn apply(
    connection: Option<&Connection>,
    describe: &str,
    target: &Target,
    exporter: &Exporter,
    status: &ConnectionStatusReporter,
) {
    let Some(connection) = connection else {
        let error = format!(
            "Connection {describe} not found: create it (the chart does when enableAdmissionViolationExport is true)"
        );
        tracing::warn!(connection = describe, "{error}");
        exporter.reconfigure(None);
        status.set_connection(None, &[error]).await;
        return;
    };
    let checked = check(connection, target);
    for error in &checked.errors {
        tracing::error!(connection = describe, error = %error, "invalid Connection: nothing is exported through it");
    }
    if let Some(dir) = &checked.channel_dir {
        tracing::info!(connection = describe, dir = %dir.display(), "admission violations are exported to disk");
    }
    exporter.reconfigure(checked.channel_dir.clone());
    status
        .set_connection(connection.metadata.uid.clone(), &checked.errors)
        .await;
}

/// Watches the Connection `name` in `api`'s namespace and applies each version of it.
pub async fn watch_cluster(
    api: Api<Connection>,
    name: String,
    describe: String,
    target: Target,
    exporter: Arc<Exporter>,
    status: Arc<ConnectionStatusReporter>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    use kube::runtime::WatchStreamExt;
    // Closed by the server before the client's read timeout could cut an idle watch.
    let config = watcher::Config::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(crate::kube_client::WATCH_TIMEOUT_SECONDS);
    let mut events = watcher(api, config).default_backoff().boxed();
    // Whether the Connection was seen since the last (re)list began.
    let mut seen = false;
    // The uid and spec last put into effect: status writes (ours and other pods') change the
    // object too, and must not re-apply an unchanged spec.
    let mut applied: Option<(Option<String>, drift_api::ConnectionSpec)> = None;
    loop {
        let event = tokio::select! {
            event = events.next() => event,
            _ = shutdown.changed() => return,
        };
        match event {
            None => return,
            Some(Err(e)) => {
                tracing::warn!(connection = %describe, error = %e, "Connection watch error; retrying")
            }
            Some(Ok(watcher::Event::Init)) => seen = false,
            Some(Ok(watcher::Event::InitApply(connection) | watcher::Event::Apply(connection))) => {
                seen = true;
                let current = (connection.metadata.uid.clone(), connection.spec.clone());
                if applied.as_ref() != Some(&current) {
                    apply(Some(&connection), &describe, &target, &exporter, &status).await;
                    applied = Some(current);
                }
            }
            Some(Ok(watcher::Event::InitDone)) => {
                if !seen {
                    applied = None;
                    apply(None, &describe, &target, &exporter, &status).await;
                }
            }
            Some(Ok(watcher::Event::Delete(_))) => {
                applied = None;
                apply(None, &describe, &target, &exporter, &status).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drift_api::{ConnectionConfig, ConnectionSpec};

    fn connection(driver: &str, path: Option<String>, ttl: Option<&str>) -> Connection {
        Connection::new(
            "audit-connection",
            ConnectionSpec {
                driver: driver.into(),
                config: ConnectionConfig {
                    path,
                    max_audit_results: Some(3),
                    closed_connection_ttl: ttl.map(str::to_owned),
                },
            },
        )
    }

    #[test]
    fn validation_names_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("topics").display().to_string();
        let cases: [(&str, Option<String>, Option<&str>, &str); 5] = [
            ("disk", Some(good.clone()), Some("5m"), ""),
            (
                "kafka",
                Some(good.clone()),
                None,
                "unknown driver \"kafka\"",
            ),
            (
                "disk",
                Some(good.clone()),
                Some("30s"),
                "invalid closedConnectionTTL \"30s\"",
            ),
            (
                "disk",
                Some(good.clone()),
                Some("soon"),
                "invalid closedConnectionTTL \"soon\"",
            ),
            (
                "disk",
                Some(dir.path().join("file/under").display().to_string()),
                None,
                "is not writable",
            ),
        ];
        std::fs::write(dir.path().join("file"), b"not a directory").unwrap();
        for (driver, path, ttl, want) in cases {
            let target = Target {
                root: PathBuf::from("/"),
                channel: "audit-channel".into(),
            };
            let checked = check(&connection(driver, path.clone(), ttl), &target);
            if want.is_empty() {
                assert_eq!(checked.errors, Vec::<String>::new());
                assert_eq!(
                    checked.channel_dir,
                    Some(PathBuf::from(&good).join("audit-channel"))
                );
            } else {
                assert!(checked.channel_dir.is_none(), "{driver} {path:?} {ttl:?}");
                assert!(
                    checked.errors.iter().any(|e| e.contains(want)),
                    "{:?} should mention {want}",
                    checked.errors
                );
            }
        }
    }

    #[test]
    fn a_connection_file_must_be_a_connection() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yaml");
        std::fs::write(
            &file,
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
        )
        .unwrap();
        let error = read_file(&file).unwrap_err().to_string();
        assert!(
            error.contains(
                "expected apiVersion connection.drift-sentinel.io/v1alpha1 kind Connection"
            ),
            "{error}"
        );
        std::fs::write(
            &file,
            "apiVersion: connection.drift-sentinel.io/v1alpha1\nkind: Connection\nmetadata: {name: audit-connection}\nspec: {driver: disk, config: {path: /tmp/x}}\n",
        )
        .unwrap();
        let connection = read_file(&file).unwrap();
        assert_eq!(connection.spec.config.path.as_deref(), Some("/tmp/x"));
    }
}
