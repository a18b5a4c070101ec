//! The Drift Sentinel agent: the HTTPS admission webhook and everything around it. The binary
//! (`main.rs`) only parses the command line and calls [`run`]; the decisions themselves are
//! made by `drift-engine`.

mod admin;
mod audit;
mod certificates;
pub mod cli;
pub mod client_auth;
mod cluster_source;
mod connection_status;
pub mod export;
mod kube_client;
mod last_good;
mod metrics;
mod parent_labels;
mod review_cmd;
mod rule_files;
mod rule_index;
pub mod rules_source;
pub mod server;
mod state;
pub mod tls;
mod validate_rule;
mod watch_failures;
pub mod webhook;

use std::sync::Arc;

use anyhow::Context as _;
use tokio::sync::watch;

use crate::cli::{Command, ServeArgs};
use crate::rules_source::FileSource;
use crate::server::ConnectionTimeouts;
use crate::state::Shared;

/// Idle timeout of admin connections (long-lived follow streams).
pub(crate) const ADMIN_IDLE_TIMEOUT: std::time::Duration =
    std::time::Duration::from_secs(7 * 24 * 3600);

/// Runs a parsed command line to completion: the process's exit code, or the error that
/// stopped it.
pub async fn run(cli: cli::Cli) -> anyhow::Result<std::process::ExitCode> {
    let done = std::process::ExitCode::SUCCESS;
    match cli.command {
        Command::Serve(args) => serve(*args).await.map(|()| done),
        Command::Review(args) => review_cmd::run(&args).map(|()| done),
        Command::Audit(args) => Ok(audit::command(*args).await),
        Command::Crd => {
            print!("{}", drift_api::connection_crd_yaml()?);
            Ok(done)
        }
        Command::Reader(args) => {
            init_logging(tracing::Level::INFO);
            tokio::task::spawn_blocking(move || export::reader::run(&args))
                .await
                .context("the reader stopped unexpectedly")?
                .map(|()| done)
        }
    }
}

fn init_logging(level: tracing::Level) {
    let _ = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_max_level(level)
        .with_writer(std::io::stdout)
        .try_init();
}

/// Whether a cluster configuration is available: an explicit kubeconfig, or the in-cluster
/// service account.
fn cluster_configured(args: &ServeArgs) -> bool {
    kube_client::cluster_configured(args.kubeconfig.as_deref())
}

/// `drift-sentinel serve`.
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    init_logging(args.log_level);
    let metrics = metrics::Metrics::new().context("cannot register metrics")?;
    let (shutdown_tx, shutdown_rx) = watch::channel(false);

    let (shared, cluster_client) = start_rule_source(&args, metrics, &shutdown_rx).await?;
    if args.enable_admission_violation_export {
        start_export(&args, &shared, cluster_client.as_ref(), &shutdown_rx).await?;
    }
    let tls = tls::serving(&args, &shutdown_rx)?;
    let servers = start_servers(&args, &shared, tls, &shutdown_rx).await?;

    wait_for_signal().await?;
    tracing::info!("shutting down: no new connections, finishing in-flight requests");
    shared.set_ready(false);
    let _ = shutdown_tx.send(true);
    let deadline = tokio::time::Instant::now() + args.shutdown_timeout;
    let drained = tokio::time::timeout_at(deadline, async {
        for server in servers {
            let _ = server.await;
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!("shutdown timeout reached; exiting");
    }
    drain_export(&shared, deadline).await;
    tracing::info!("stopped");
    Ok(())
}

/// Where rules and namespaces come from — files, the cluster, or the built-in default rule —
/// started: the shared state it keeps current, and the cluster client when there is one.
async fn start_rule_source(
    args: &ServeArgs,
    metrics: metrics::Metrics,
    shutdown_rx: &watch::Receiver<bool>,
) -> anyhow::Result<(Arc<Shared>, Option<kube::Client>)> {
    let offline = !args.rules.is_empty() || !args.namespaces.is_empty();
    let tier_policy = tier_policy(args, offline)?;
    if offline {
        let source = FileSource {
            rules: args.rules.clone(),
            namespaces: args.namespaces.clone(),
            tier_policy: tier_policy.clone(),
        };
        source.check().map_err(anyhow::Error::msg)?;
        let files = source.load(args.reload_interval);
        let snapshot = source.build(&files);
        if args.rules.is_empty() {
            tracing::info!("no --rules given: serving the built-in default rule");
        }
        tracing::info!(rules = ?args.rules, namespaces = ?args.namespaces, "offline mode: rules and namespaces come from files; no cluster is contacted");
        let shared = Shared::new(metrics, snapshot);
        shared.set_tier_policy(tier_policy);
        shared.set_ready(true);
        tokio::spawn(rules_source::watch_files(
            source,
            files,
            shared.clone(),
            args.reload_interval,
            shutdown_rx.clone(),
        ));
        Ok((shared, None))
    } else if cluster_configured(args) {
        let client = kube_client::client(args.kubeconfig.as_deref()).await?;
        tracing::info!("cluster mode: rules and namespaces come from the Kubernetes API");
        let shared = Shared::new(metrics, state::Snapshot::empty(state::SourceKind::Cluster));
        shared.set_tier_policy(tier_policy);
        shared.set_parent_lookup(parent_labels::ParentLookup::new(
            client.clone(),
            std::time::Duration::from_secs(2),
        ));
        let namespace = args
            .pod_namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_owned());
        tokio::spawn(cluster_source::run(
            client.clone(),
            shared.clone(),
            cluster_source::ClusterOptions {
                startup_sync_timeout: args.startup_sync_timeout,
                resync: args.watch_resync,
                last_good: (namespace, args.last_good_configmap.clone()),
                keep_last_good: true,
            },
            shutdown_rx.clone(),
        ));
        Ok((shared, Some(client)))
    } else {
        tracing::warn!(
            "no rule source configured (no --rules, no cluster configuration): serving the built-in default rule"
        );
        let shared = Shared::new(metrics, rules_source::builtin_snapshot());
        shared.set_tier_policy(tier_policy);
        shared.set_ready(true);
        Ok((shared, None))
    }
}

/// The webhook and admin listeners bound and served until shutdown.
async fn start_servers(
    args: &ServeArgs,
    shared: &Arc<Shared>,
    tls: Option<server::Tls>,
    shutdown_rx: &watch::Receiver<bool>,
) -> anyhow::Result<[tokio::task::JoinHandle<()>; 2]> {
    let (webhook_listener, admin_listener) =
        server::bind_listeners(args.address, args.admin_address).await?;
    tracing::info!(
        address = %server::local_address(&webhook_listener),
        admin_address = %server::local_address(&admin_listener),
        tls = tls.is_some(),
        client_authentication = tls.as_ref().is_some_and(|t| t.client_auth.is_some()),
        "listening"
    );

    let timeouts = ConnectionTimeouts {
        read_header: args.read_header_timeout,
        idle: args.idle_timeout,
        shutdown: args.shutdown_timeout,
    };
    let client_auth = tls.as_ref().and_then(|t| t.client_auth.clone());
    let webhook = webhook::router(
        shared.clone(),
        webhook::WebhookConfig {
            validate_path: args.validate_path.clone(),
            validate_rule_path: args.validate_rule_path.clone(),
            health_path: args.health_path.clone(),
            ready_path: args.ready_path.clone(),
            metrics_path: args.metrics_path.clone(),
            read_timeout: args.read_timeout,
            write_timeout: args.write_timeout,
        },
        client_auth,
    );
    let webhook_task = tokio::spawn(server::serve(
        webhook_listener,
        webhook,
        tls,
        timeouts,
        shutdown_rx.clone(),
    ));
    let admin_task = tokio::spawn(server::serve(
        admin_listener,
        admin::router(shared.clone(), shutdown_rx.clone()),
        None,
        // `/violations?follow=true` streams for as long as the client wants and the client
        // sends nothing meanwhile: the read-idle timeout would cut it. The listener is
        // loopback only.
        ConnectionTimeouts {
            idle: ADMIN_IDLE_TIMEOUT,
            ..timeouts
        },
        shutdown_rx.clone(),
    ));
    Ok([webhook_task, admin_task])
}

/// In-flight requests are done: what they queued for export is drained, and the export's
/// health reported, within the time left before `deadline`.
async fn drain_export(shared: &Shared, deadline: tokio::time::Instant) {
    let Some(export) = shared.export() else {
        return;
    };
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    export
        .exporter
        .shutdown(left.min(export::DRAIN_TIMEOUT))
        .await;
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    let _ = tokio::time::timeout(
        left,
        export
            .status
            .report(std::time::Instant::now(), std::time::Duration::ZERO),
    )
    .await;
}

/// Which rule ConfigMaps are cluster rules (SPEC §2 "Who may write a rule"): those in
/// `--cluster-rule-namespaces`; by default, in cluster mode, the agent's own namespace, and
/// offline every rule file.
fn tier_policy(args: &ServeArgs, offline: bool) -> anyhow::Result<drift_engine::rule::TierPolicy> {
    tier_policy_of(
        &args.cluster_rule_namespaces,
        offline,
        agent_namespace(args.pod_namespace.as_deref()),
    )
}

/// The tier policy of `--cluster-rule-namespaces` (see [`tier_policy`]), shared with the audit.
pub(crate) fn tier_policy_of(
    globs: &[String],
    offline: bool,
    agent_namespace: String,
) -> anyhow::Result<drift_engine::rule::TierPolicy> {
    use drift_engine::rule::TierPolicy;
    let mut globs = globs.to_vec();
    globs.retain(|g| !g.trim().is_empty());
    if globs.is_empty() {
        if offline {
            return Ok(TierPolicy::all_cluster());
        }
        globs.push(agent_namespace);
    }
    if globs.iter().any(|g| g == "*") {
        tracing::warn!(
            "--cluster-rule-namespaces '*': every rule ConfigMap is a cluster rule, so whoever may write a ConfigMap in any namespace can weaken protection everywhere (the original's behaviour)"
        );
    }
    let policy = TierPolicy::cluster_namespaces(&globs)
        .map_err(|e| anyhow::anyhow!("--cluster-rule-namespaces: {e}"))?;
    tracing::info!(cluster_rule_namespaces = ?globs, "rule ConfigMaps in these namespaces are cluster rules; elsewhere namespace rules");
    Ok(policy)
}

/// The agent's own namespace: `--pod-namespace`, the service account's, or `default`.
pub(crate) fn agent_namespace(pod_namespace: Option<&str>) -> String {
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

/// This pod's name when `--pod-name` is not given: the host name (a pod's host name is its name).
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "drift-sentinel".to_owned())
}

/// Starts violation export: the publisher, the Connection (from a file or the cluster) and the
/// status reporter.
async fn start_export(
    args: &ServeArgs,
    shared: &Arc<Shared>,
    client: Option<&kube::Client>,
    shutdown: &watch::Receiver<bool>,
) -> anyhow::Result<()> {
    use connection_status::{ClusterTarget, ConnectionStatusReporter, PublishHealth};
    use export::connection;

    let pod = args.pod_name.clone().unwrap_or_else(host_name);
    let mut config = export::ExportConfig::default();
    if let Some(file) = &args.export_clock_file {
        config.clock = Arc::new(export::FileClock(file.clone()));
    }
    if let Some(file) = &args.export_free_space_file {
        config.free_space = Arc::new(export::FileFreeSpace(file.clone()));
    }
    let health = Arc::new(PublishHealth::default());
    let exporter = export::Exporter::start(config, &shared.metrics, health.clone())
        .context("cannot start the export publisher")?;
    let target = connection::Target {
        root: args.export_root.clone(),
        channel: args.audit_channel.clone(),
    };
    let (status, describe) = match (&args.connection, client) {
        (Some(file), _) => {
            let found = connection::read_file(file)?;
            let name = found.metadata.name.as_deref().unwrap_or("");
            if name != args.audit_connection {
                anyhow::bail!(
                    "{} holds Connection {name:?}, but --audit-connection is {:?}: make them match",
                    file.display(),
                    args.audit_connection
                );
            }
            let describe = file.display().to_string();
            let status = Arc::new(ConnectionStatusReporter::new(pod, health, None));
            connection::apply(Some(&found), &describe, &target, &exporter, &status).await;
            tokio::spawn(watch_connection_file(
                file.clone(),
                args.audit_connection.clone(),
                target,
                exporter.clone(),
                status.clone(),
                args.reload_interval,
                shutdown.clone(),
            ));
            (status, describe)
        }
        (None, Some(client)) => {
            let namespace = args
                .pod_namespace
                .clone()
                .unwrap_or_else(|| client.default_namespace().to_owned());
            let api: kube::Api<drift_api::Connection> =
                kube::Api::namespaced(client.clone(), &namespace);
            let describe = format!("{namespace}/{}", args.audit_connection);
            let status = Arc::new(ConnectionStatusReporter::new(
                pod,
                health,
                Some(ClusterTarget {
                    api: api.clone(),
                    name: args.audit_connection.clone(),
                }),
            ));
            tokio::spawn(connection::watch_cluster(
                api,
                args.audit_connection.clone(),
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
    shared.set_export(state::ExportHandle {
        exporter,
        status,
        connection: describe,
    });
    Ok(())
}

/// Re-reads the Connection file when it changes; a file that no longer holds a valid
/// Connection stops the export and says why.
async fn watch_connection_file(
    file: std::path::PathBuf,
    name: String,
    target: export::connection::Target,
    exporter: Arc<export::Exporter>,
    status: Arc<connection_status::ConnectionStatusReporter>,
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
        let read = export::connection::read_file(&file).and_then(|found| {
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
                export::connection::apply(Some(&found), &describe, &target, &exporter, &status)
                    .await;
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

pub(crate) async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    Ok(())
}
