//! Violation export of the webhook (reference §7): the publisher, the Connection it writes through
//! — read from `--connection FILE` (re-read when it changes) or watched in the cluster — and
//! the reporter of this pod's entry in the Connection's status.

use std::sync::Arc;

use anyhow::Context as _;
use tokio::sync::watch;

use crate::cli::ServeArgs;
use crate::connection_status::{self, ClusterTarget, ConnectionStatusReporter, PublishHealth};
use crate::export::{self, connection};
use crate::metrics::Metrics;
use crate::state::ExportHandle;

/// Starts violation export: the publisher, the Connection (from a file or the cluster) and the
/// status reporter.
pub(super) async fn start(
    args: &ServeArgs,
    metrics: &Metrics,
    client: Option<&kube::Client>,
    shutdown: &watch::Receiver<bool>,
) -> anyhow::Result<ExportHandle> {
    let pod = crate::process::pod_name(args.common.export.pod_name.as_deref());
    let mut config = export::ExportConfig::default();
    if let Some(file) = &args.export_clock_file {
        config.clock = Arc::new(export::FileClock(file.clone()));
    }
    if let Some(file) = &args.export_free_space_file {
        config.free_space = Arc::new(export::FileFreeSpace(file.clone()));
    }
    let health = Arc::new(PublishHealth::default());
    let exporter = export::Exporter::start(config, metrics, health.clone())
        .context("cannot start the export publisher")?;
    let target = connection::Target {
        root: args.common.export.export_root.clone(),
        channel: args.common.export.audit_channel.clone(),
    };
    let (status, describe) = match (&args.common.export.connection, client) {
        (Some(file), _) => {
            let found = connection::read_file(file)?;
            let name = found.metadata.name.as_deref().unwrap_or("");
            if name != args.common.export.audit_connection {
                anyhow::bail!(
                    "{} holds Connection {name:?}, but --audit-connection is {:?}: make them match",
                    file.display(),
                    args.common.export.audit_connection
                );
            }
            let describe = file.display().to_string();
            let status = Arc::new(ConnectionStatusReporter::new(pod, health, None));
            connection::apply(Some(&found), &describe, &target, &exporter, &status).await;
            tokio::spawn(watch_connection_file(
                file.clone(),
                args.common.export.audit_connection.clone(),
                target,
                exporter.clone(),
                status.clone(),
                args.reload_interval,
                shutdown.clone(),
            ));
            (status, describe)
        }
        (None, Some(client)) => {
            let namespace = args.common.export.namespace_in(client);
            let api: kube::Api<drift_api::Connection> =
                kube::Api::namespaced(client.clone(), &namespace);
            let describe = format!("{namespace}/{}", args.common.export.audit_connection);
            let status = Arc::new(ConnectionStatusReporter::new(
                pod,
                health,
                Some(ClusterTarget {
                    api: api.clone(),
                    name: args.common.export.audit_connection.clone(),
                }),
            ));
            tokio::spawn(connection::watch_cluster(
                api,
                args.common.export.audit_connection.clone(),
                describe.clone(),
                target,
                exporter.clone(),
                status.clone(),
                shutdown.clone(),
            ));
            (status, describe)
        }
        (None, None) => anyhow::bail!(
            "--enable-admission-violation-export needs a Connection: without a cluster, give --connection FILE (a Connection document)"
        ),
    };
    tokio::spawn(connection_status::run(
        status.clone(),
        args.connection_status_interval,
        args.connection_heartbeat,
        shutdown.clone(),
    ));
    Ok(ExportHandle {
        exporter,
        status,
        connection: describe,
    })
}

/// Re-reads the Connection file when it changes; a file that no longer holds a valid
/// Connection stops the export and says why.
async fn watch_connection_file(
    file: std::path::PathBuf,
    name: String,
    target: connection::Target,
    exporter: Arc<export::Exporter>,
    status: Arc<ConnectionStatusReporter>,
    period: std::time::Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let describe = file.display().to_string();
    let mut last = std::fs::read(&file).ok();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = shutdown.changed() => return,
        }
        let current = std::fs::read(&file).ok();
        if current == last {
            continue;
        }
        last = current;
        let read = connection::read_file(&file).and_then(|found| {
            let found_name = found.metadata.name.clone().unwrap_or_default();
            if found_name == name {
                Ok(found)
            } else {
                Err(anyhow::anyhow!(
                    "{describe} holds Connection {found_name:?}, but --audit-connection is {name:?}"
                ))
            }
        });
        match read {
            Ok(found) => {
                connection::apply(Some(&found), &describe, &target, &exporter, &status).await;
            }
            Err(e) => {
                let error = format!("{e:#}");
                tracing::error!(connection = %describe, error = %error, "the Connection file is no longer valid: nothing is exported");
                exporter.reconfigure(None);
                status.set_connection(None, &[error]).await;
            }
        }
    }
}
