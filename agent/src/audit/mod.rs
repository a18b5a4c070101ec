//! `drift-sentinel audit` (reference §8): finds the drift that slipped past the webhook by comparing
//! live objects with what was declared for them. Every `--audit-interval`, or once with
//! `--audit-once` (exit 0 no drift, 1 drift, 2 error); offline with `--rules` and `--objects`.
//!
//! The judgement is the engine's ([`drift_engine::audit()`]); this module finds the objects
//! ([`objects`]), and renders each run: export files ([`files`]) through the Connection (the
//! export module's validation and status reporting), OpenReports ([`reports`]), metrics,
//! `/status`, and — run once — a summary on standard output.

mod attribution;
pub mod files;
pub mod objects;
pub mod reports;
mod run;
pub mod trust;

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use tokio::sync::watch;

use crate::cli::{AuditArgs, ReportsMode};
use crate::connection_status::{
    AUDIT_SOURCE, ClusterTarget, ConnectionStatusReporter, PublishHealth,
};
use crate::process::{LogTo, StopSignals, init_logging};
use crate::rules_source::FileSource;
use crate::state::{AuditRuns, Shared, Snapshot};
use drift_api::status::RuleSourceKind;
pub use run::{Auditor, ConnectionSource};

/// Exit code of a run once: drift found.
pub const EXIT_DRIFT: u8 = 1;
/// Exit code of a run once: the audit could not be completed.
pub const EXIT_ERROR: u8 = 2;

/// Runs the command; errors are printed and exit with code 2.
pub async fn command(args: AuditArgs) -> ExitCode {
    // Logs go to standard error: standard output is the summary of a run once.
    init_logging(args.common.log_level, LogTo::Stderr);
    match run_command(args).await {
        Ok(code) => code,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "audit failed");
            eprintln!("drift-sentinel audit: {e:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

async fn run_command(args: AuditArgs) -> anyhow::Result<ExitCode> {
    let metrics = crate::metrics::Metrics::audit().context("cannot register metrics")?;
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let offline = !args.objects.is_empty();
    let cluster_configured =
        crate::kube_client::cluster_configured(args.common.sources.kubeconfig.as_deref());
    let client = if offline || !cluster_configured {
        None
    } else {
        Some(crate::kube_client::client(args.common.sources.kubeconfig.as_deref()).await?)
    };
    if !offline && client.is_none() {
        anyhow::bail!(
            "no objects to audit: give --objects FILE (with --rules) to audit files, or a cluster (--kubeconfig, or run in a pod)"
        );
    }
    let record_keys = crate::record_key::load(
        args.common.record_signing_key.as_deref(),
        args.common.record_verify_keys.as_deref(),
    )?;
    let signing_key = record_keys.signing.clone();
    if signing_key.is_none() && args.events {
        tracing::warn!(
            "no --record-signing-key: the webhook's records and what the Reports remember cannot be verified, so the audit names no user from them"
        );
    }
    let shared = rules(&args, client.as_ref(), metrics, &shutdown_rx).await?;

    let export = match (
        args.enable_violation_export,
        &args.common.export.connection,
        &client,
    ) {
        (false, _, _) => None,
        (true, Some(file), _) => Some(ConnectionSource::File(file.clone())),
        (true, None, Some(client)) => {
            let namespace = args.common.export.namespace_in(client);
            Some(ConnectionSource::Cluster(
                Box::new(kube::Api::namespaced(client.clone(), &namespace)),
                namespace,
            ))
        }
        (true, None, None) => anyhow::bail!(
            "--enable-violation-export needs a Connection: without a cluster, give --connection FILE"
        ),
    };
    let health = Arc::new(PublishHealth::default());
    let pod = crate::process::pod_name(args.common.export.pod_name.as_deref());
    let cluster_target = match &export {
        Some(ConnectionSource::Cluster(api, _)) => Some(ClusterTarget {
            api: api.as_ref().clone(),
            name: args.common.export.audit_connection.clone(),
        }),
        _ => None,
    };
    let status = Arc::new(ConnectionStatusReporter::for_source(
        pod,
        health.clone(),
        cluster_target,
        AUDIT_SOURCE,
    ));
    let reports = match (&client, args.audit_reports) {
        (Some(client), ReportsMode::Openreports) => {
            if reports::installed(client).await {
                true
            } else {
                tracing::warn!(
                    "the OpenReports CRDs (openreports.io) are not installed: no reports are written (--audit-reports none silences this)"
                );
                false
            }
        }
        _ => false,
    };
    let events = client.clone().filter(|_| args.events).map(|client| {
        crate::events::EventSink::start(
            client,
            crate::events::Reporter {
                controller: drift_api::events::AUDIT_CONTROLLER,
                instance: crate::process::pod_name(args.common.export.pod_name.as_deref()),
                // Signs the memory on its `DriftDetected` Events (reference §8 "Trust").
                signing_key: signing_key.clone(),
            },
            &shared.metrics,
            shutdown_rx.clone(),
        )
    });
    // Run once, nothing serves `/status`.
    let runs = Arc::new(AuditRuns::new(
        (!args.audit_once).then_some(args.audit_interval),
        client
            .as_ref()
            .filter(|_| args.events)
            .map(|_| crate::record_key::SigningStatus {
                signed: signing_key.is_some(),
                publication: None,
            }),
    ));
    let auditor = Auditor {
        shared: shared.clone(),
        runs: runs.clone(),
        client: client.clone(),
        objects: args.objects.clone(),
        managers: args.audit_drift_managers.clone(),
        webhook_resources: drift_engine::audit::parse_resources(&args.audit_resources),
        chunk: args.audit_chunk_size,
        export,
        connection_name: args.common.export.audit_connection.clone(),
        target: crate::export::connection::Target {
            root: args.common.export.export_root.clone(),
            channel: args.common.export.audit_channel.clone(),
        },
        status,
        health,
        reports,
        print: args.audit_once,
        last_dir: Arc::default(),
        attribution: client.clone().filter(|_| args.events).map(|c| {
            tokio::sync::Mutex::new(attribution::Attributor::new(
                c,
                args.webhook_configuration.clone(),
                reports,
                crate::record_key::verification(&record_keys),
            ))
        }),
        events: events.as_ref().map(|(sink, _)| sink.clone()),
        signing_key: signing_key.clone(),
    };

    if args.audit_once {
        let outcome = auditor.run().await;
        let _ = shutdown_tx.send(true);
        if let Some((_, writer)) = events {
            // The last Events are written before the process ends.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), writer).await;
        }
        println!("{}", outcome.summary());
        if let Some(error) = &outcome.error {
            eprintln!("drift-sentinel audit: {error}");
        }
        return Ok(ExitCode::from(
            match (&outcome.error, outcome.counts.drifted) {
                (Some(_), _) => EXIT_ERROR,
                (None, 0) => 0,
                (None, _) => EXIT_DRIFT,
            },
        ));
    }
    periodic(&args, auditor, shared, runs, shutdown_tx, shutdown_rx).await?;
    Ok(ExitCode::SUCCESS)
}

/// The rule snapshot: from files (re-read when they change), or the cluster's watches.
async fn rules(
    args: &AuditArgs,
    client: Option<&kube::Client>,
    metrics: crate::metrics::Metrics,
    shutdown: &watch::Receiver<bool>,
) -> anyhow::Result<Arc<Shared>> {
    if !args.common.sources.rules.is_empty() {
        let tier_policy = crate::tiers::tier_policy(
            &args.common.sources.cluster_rule_namespaces,
            true,
            String::new(),
        )?;
        let source = FileSource {
            rules: args.common.sources.rules.clone(),
            namespaces: args.common.sources.namespaces.clone(),
            tier_policy: tier_policy.clone(),
        };
        source.check().map_err(anyhow::Error::msg)?;
        let interval = std::time::Duration::from_secs(2);
        let files = source.load(interval);
        let snapshot = source.build(&files);
        let shared = Shared::new(metrics, tier_policy, snapshot);
        shared.set_ready(true);
        if !args.audit_once {
            tokio::spawn(crate::rules_source::watch_files(
                source,
                files,
                shared.clone(),
                interval,
                shutdown.clone(),
            ));
        }
        return Ok(shared);
    }
    let client = client.context("--rules is required without a cluster")?;
    let namespace = args.common.export.namespace_in(client);
    let tier_policy = crate::tiers::tier_policy(
        &args.common.sources.cluster_rule_namespaces,
        false,
        namespace.clone(),
    )?;
    let shared = Shared::new(
        metrics,
        tier_policy,
        Snapshot::empty(RuleSourceKind::Cluster),
    );
    tokio::spawn(crate::cluster_source::run(
        client.clone(),
        shared.clone(),
        crate::cluster_source::ClusterOptions {
            startup_sync_timeout: args.common.sources.startup_sync_timeout,
            resync: args.common.sources.watch_resync,
            last_good: (namespace, args.common.sources.last_good_configmap.clone()),
            keep_last_good: false,
        },
        shutdown.clone(),
    ));
    let deadline = tokio::time::Instant::now() + args.common.sources.startup_sync_timeout;
    while !shared.is_ready() {
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "the cluster's rules did not sync within {:?}: {}",
                args.common.sources.startup_sync_timeout,
                shared.not_ready_reason()
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Ok(shared)
}

/// Runs every `--audit-interval` until SIGTERM, with the probe/metrics and admin listeners.
async fn periodic(
    args: &AuditArgs,
    auditor: Auditor,
    shared: Arc<Shared>,
    runs: Arc<AuditRuns>,
    shutdown_tx: watch::Sender<bool>,
    shutdown_rx: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    // Caught before the listeners open (a run once is stopped by a signal's default action).
    let mut stop_signals = StopSignals::catch()?;
    let (probes, admin) = crate::server::bind_listeners(args.address, args.admin_address).await?;
    tracing::info!(
        address = %crate::server::local_address(&probes),
        admin_address = %crate::server::local_address(&admin),
        interval = ?args.audit_interval,
        "audit listening"
    );
    let timeouts = crate::server::ConnectionTimeouts {
        read_header: std::time::Duration::from_secs(5),
        idle: std::time::Duration::from_secs(60),
        shutdown: std::time::Duration::from_secs(10),
    };
    let admin_dir = auditor.admin_dir();
    let exports = auditor.export.is_some();
    // No admission request comes here, so no shutdown delay: the listeners close at SIGTERM
    // and finish what is in flight (a scrape, a `/status`).
    let (phase_tx, phase_rx) = watch::channel(crate::server::Phase::Serving);
    let servers = [
        tokio::spawn(crate::server::serve(
            probes,
            crate::webhook::probe_router(shared.clone(), &crate::webhook::ProbePaths::default()),
            None,
            timeouts,
            small_listener(),
            phase_rx.clone(),
        )),
        tokio::spawn(crate::server::serve(
            admin,
            crate::admin::audit_router(
                shared.clone(),
                runs,
                admin_dir,
                exports,
                shutdown_rx.clone(),
            ),
            None,
            crate::server::ConnectionTimeouts {
                idle: crate::admin::IDLE_TIMEOUT,
                ..timeouts
            },
            small_listener(),
            phase_rx,
        )),
    ];
    let mut ticker = tokio::time::interval(args.audit_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = stop_signals.recv() => break,
        }
        // A run in progress is abandoned on SIGTERM: its file is removed as an aborted run's.
        tokio::select! {
            outcome = auditor.run() => {
                tracing::info!(summary = %outcome.summary(), "audit run finished");
            }
            () = stop_signals.recv() => break,
        }
    }
    tracing::info!("shutting down");
    shared.set_terminating();
    let _ = phase_tx.send(crate::server::Phase::Stopping);
    let _ = shutdown_tx.send(true);
    // Each listener gives up on its connections after `timeouts.shutdown`.
    for server in servers {
        let _ = server.await;
    }
    tracing::info!("stopped");
    Ok(())
}

/// The connections of the audit's listeners (probes and metrics; the loopback admin API).
fn small_listener() -> crate::capacity::ConnectionLimit {
    crate::capacity::ConnectionLimit::new(crate::capacity::SMALL_LISTENER_CONNECTIONS, None)
}
