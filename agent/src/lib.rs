//! The Drift Sentinel agent: the HTTPS admission webhook and everything around it. The binary
//! (`main.rs`) only parses the command line and calls [`run`]; the decisions themselves are
//! made by `drift-engine`.

pub mod admin;
pub mod cli;
pub mod cluster_source;
pub mod export;
pub mod metrics;
pub mod parent_labels;
pub mod review_cmd;
pub mod rules_source;
pub mod server;
pub mod state;
pub mod tls;
pub mod webhook;

use std::sync::Arc;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::cli::{Command, ServeArgs};
use crate::rules_source::FileSource;
use crate::server::ConnectionTimeouts;
use crate::state::Shared;

/// Runs a parsed command line to completion.
pub async fn run(cli: cli::Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve(*args).await,
        Command::Review(args) => review_cmd::run(&args),
        Command::Crd => {
            print!("{}", drift_api::connection_crd_yaml()?);
            Ok(())
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
    args.kubeconfig.is_some() || std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
}

/// `drift-sentinel serve`.
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    init_logging(args.log_level);
    let metrics = metrics::Metrics::new().context("cannot register metrics")?;
    let (shutdown_tx, shutdown_rx) = watch::channel(false);

    let offline = !args.rules.is_empty() || !args.namespaces.is_empty();
    let shared = if offline {
        let source = FileSource {
            rules: args.rules.clone(),
            namespaces: args.namespaces.clone(),
        };
        source.check().map_err(anyhow::Error::msg)?;
        let contents = source.read();
        let snapshot = source.build(&contents);
        if args.rules.is_empty() {
            tracing::info!("no --rules given: serving the built-in default rule");
        }
        tracing::info!(rules = ?args.rules, namespaces = ?args.namespaces, "offline mode: rules and namespaces come from files; no cluster is contacted");
        let shared = Shared::new(metrics, snapshot);
        shared.set_ready(true);
        tokio::spawn(rules_source::watch_files(
            source,
            contents.fingerprint(),
            shared.clone(),
            args.reload_interval,
            shutdown_rx.clone(),
        ));
        shared
    } else if cluster_configured(&args) {
        let client = cluster_source::client(args.kubeconfig.as_deref()).await?;
        tracing::info!("cluster mode: rules and namespaces come from the Kubernetes API");
        let shared = Shared::new(metrics, state::Snapshot::empty(state::SourceKind::Cluster));
        shared.set_parent_lookup(parent_labels::ParentLookup::new(
            client.clone(),
            std::time::Duration::from_secs(2),
        ));
        tokio::spawn(cluster_source::run(
            client,
            shared.clone(),
            args.startup_sync_timeout,
            args.watch_resync,
            shutdown_rx.clone(),
        ));
        shared
    } else {
        tracing::warn!(
            "no rule source configured (no --rules, no cluster configuration): serving the built-in default rule"
        );
        let shared = Shared::new(metrics, rules_source::builtin_snapshot());
        shared.set_ready(true);
        shared
    };

    let tls = match (&args.tls_cert_file, &args.tls_key_file) {
        (Some(cert), Some(key)) => {
            let tls = Arc::new(
                tls::ReloadingTls::new(cert.clone(), key.clone())
                    .context("cannot load the TLS certificate")?,
            );
            tokio::spawn(tls.clone().watch(args.reload_interval, shutdown_rx.clone()));
            Some(tls.acceptor())
        }
        _ => None,
    };

    let webhook_listener = TcpListener::bind(args.address)
        .await
        .with_context(|| format!("cannot listen on {}", args.address))?;
    let admin_listener = TcpListener::bind(args.admin_address)
        .await
        .with_context(|| format!("cannot listen on admin address {}", args.admin_address))?;
    tracing::info!(
        address = %webhook_listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        admin_address = %admin_listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        tls = tls.is_some(),
        "listening"
    );

    let timeouts = ConnectionTimeouts {
        read_header: args.read_header_timeout,
        idle: args.idle_timeout,
        shutdown: args.shutdown_timeout,
    };
    let webhook = webhook::router(
        shared.clone(),
        webhook::WebhookConfig {
            validate_path: args.validate_path.clone(),
            health_path: args.health_path.clone(),
            ready_path: args.ready_path.clone(),
            metrics_path: args.metrics_path.clone(),
            read_timeout: args.read_timeout,
            write_timeout: args.write_timeout,
        },
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
        admin::router(shared.clone()),
        None,
        timeouts,
        shutdown_rx.clone(),
    ));

    wait_for_signal().await?;
    tracing::info!("shutting down: no new connections, finishing in-flight requests");
    shared.set_ready(false);
    let _ = shutdown_tx.send(true);
    let drained = tokio::time::timeout(args.shutdown_timeout, async {
        let _ = webhook_task.await;
        let _ = admin_task.await;
    })
    .await;
    if drained.is_err() {
        tracing::warn!("shutdown timeout reached; exiting");
    }
    tracing::info!("stopped");
    Ok(())
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    Ok(())
}
