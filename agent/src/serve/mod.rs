//! `drift-sentinel serve`: the admission webhook as a process. Starts the rule source (files,
//! the cluster, or the built-in default rule), violation export when enabled ([`export`]), the
//! webhook and admin listeners. On SIGTERM (reference §6 "Shutdown") it fails readiness at once
//! but keeps accepting and answering for `--shutdown-delay`, while the endpoint is removed and
//! clients are moved off their connections; then it stops taking connections, finishes what is
//! in flight and drains the export within `--shutdown-timeout`.

mod export;

use std::sync::Arc;

use anyhow::Context as _;
use tokio::sync::watch;

use crate::cli::ServeArgs;
use crate::process::{LogTo, StopSignals, init_logging};
use drift_api::status::RuleSourceKind;
use drift_engine::rule::TierPolicy;

use crate::capacity::{self, ConnectionLimit};
use crate::decisions::DecisionPool;
use crate::rules_source::{self, FileSource, FileState};
use crate::server::{self, ConnectionTimeouts, Phase};
use crate::state::{ServeState, Shared, Snapshot};
use crate::{admin, cluster_source, kube_client, metrics, parent_labels, tls, webhook};

/// Runs `drift-sentinel serve` until SIGTERM.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    init_logging(args.common.log_level, LogTo::Stdout);
    let mut stop_signals = StopSignals::catch()?;
    let metrics = metrics::Metrics::new().context("cannot register metrics")?;
    // `phase` drives the listeners; `shutdown` the rest (sources, TLS reloads, export), which
    // keep working through the shutdown delay since requests are still answered.
    let (phase_tx, phase_rx) = watch::channel(Phase::Serving);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);

    let record_keys = crate::record_key::load(
        args.common.record_signing_key.as_deref(),
        args.common.record_verify_keys.as_deref(),
    )?;
    let signing_key = record_keys.signing.clone();
    let (source, tier_policy, initial) = open_rule_source(&args).await?;
    let record_signing = source.client().filter(|_| args.events).map(|client| {
        let namespace = args.common.export.namespace_in(client);
        let publication = Arc::new(crate::record_key::PublicationStatus::new(
            &namespace,
            &args.record_key_configmap,
        ));
        // In the background: an API server that fails must not hold back serving (the admin
        // port answers /status while the first sync waits).
        tokio::spawn(crate::record_key::publish_until_done(
            client.clone(),
            namespace,
            args.record_key_configmap.clone(),
            record_keys,
            publication.clone(),
            shutdown_rx.clone(),
        ));
        crate::record_key::SigningStatus {
            signed: signing_key.is_some(),
            publication: Some(publication),
        }
    });
    let export = if args.enable_admission_violation_export {
        Some(export::start(&args, &metrics, source.client(), &shutdown_rx).await?)
    } else {
        None
    };
    let serving = Arc::new(ServeState {
        parents: source.client().map(|client| {
            parent_labels::ParentLookup::new(client.clone(), std::time::Duration::from_secs(2))
        }),
        export,
        decisions: DecisionPool::for_this_machine().context("cannot start the decision threads")?,
        events: source.client().filter(|_| args.events).map(|client| {
            crate::events::EventSink::start(
                client.clone(),
                crate::events::Reporter {
                    controller: drift_api::events::WEBHOOK_CONTROLLER,
                    instance: crate::process::pod_name(args.common.export.pod_name.as_deref()),
                    signing_key: signing_key.clone(),
                },
                &metrics,
                shutdown_rx.clone(),
            )
            .0
        }),
        record_signing,
    });
    let shared = Shared::new(metrics, tier_policy, initial);
    source.start(&args, &shared, &shutdown_rx);
    let tls = tls::serving(&args, &shutdown_rx)?;
    let servers = start_servers(&args, &shared, &serving, tls, &phase_rx, &shutdown_rx).await?;

    stop_signals.recv().await;
    shared.set_terminating();
    let _ = phase_tx.send(Phase::Draining);
    tracing::info!(
        delay_seconds = args.shutdown_delay.as_secs_f64(),
        "shutting down: not ready; still answering for the shutdown delay, closing keep-alive connections"
    );
    tokio::time::sleep(args.shutdown_delay).await;
    tracing::info!("shutdown delay over: no new connections, finishing in-flight requests");
    let _ = phase_tx.send(Phase::Stopping);
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
    drain_export(&serving, deadline).await;
    tracing::info!("stopped");
    Ok(())
}

/// Where rules and namespaces come from, opened but not yet watched.
enum RuleSource {
    /// `--rules`/`--namespaces`: the files as first read.
    Files(FileSource, FileState),
    Cluster(kube::Client),
    /// Neither files nor a cluster: the built-in default rule.
    BuiltIn,
}

/// Opens the rule source the command line names — files, the cluster, or the built-in
/// default rule — with the tier policy and the rules to start from.
async fn open_rule_source(args: &ServeArgs) -> anyhow::Result<(RuleSource, TierPolicy, Snapshot)> {
    let offline =
        !args.common.sources.rules.is_empty() || !args.common.sources.namespaces.is_empty();
    let tier_policy = tier_policy(args, offline)?;
    if offline {
        let source = FileSource {
            rules: args.common.sources.rules.clone(),
            namespaces: args.common.sources.namespaces.clone(),
            tier_policy: tier_policy.clone(),
        };
        source.check().map_err(anyhow::Error::msg)?;
        let files = source.load(args.reload_interval);
        let snapshot = source.build(&files);
        if args.common.sources.rules.is_empty() {
            tracing::info!("no --rules given: serving the built-in default rule");
        }
        tracing::info!(rules = ?args.common.sources.rules, namespaces = ?args.common.sources.namespaces, "offline mode: rules and namespaces come from files; no cluster is contacted");
        Ok((RuleSource::Files(source, files), tier_policy, snapshot))
    } else if kube_client::cluster_configured(args.common.sources.kubeconfig.as_deref()) {
        let client = kube_client::client(args.common.sources.kubeconfig.as_deref()).await?;
        tracing::info!("cluster mode: rules and namespaces come from the Kubernetes API");
        let snapshot = Snapshot::empty(RuleSourceKind::Cluster);
        Ok((RuleSource::Cluster(client), tier_policy, snapshot))
    } else {
        tracing::warn!(
            "no rule source configured (no --rules, no cluster configuration): serving the built-in default rule"
        );
        let snapshot = rules_source::builtin_snapshot();
        Ok((RuleSource::BuiltIn, tier_policy, snapshot))
    }
}

impl RuleSource {
    fn client(&self) -> Option<&kube::Client> {
        match self {
            RuleSource::Cluster(client) => Some(client),
            RuleSource::Files(..) | RuleSource::BuiltIn => None,
        }
    }

    /// Keeps `shared` current until shutdown: files re-read when they change, the cluster
    /// watched (ready after its first sync); files and the built-in rule are ready at once.
    fn start(self, args: &ServeArgs, shared: &Arc<Shared>, shutdown_rx: &watch::Receiver<bool>) {
        match self {
            RuleSource::Files(source, files) => {
                shared.set_ready(true);
                tokio::spawn(rules_source::watch_files(
                    source,
                    files,
                    shared.clone(),
                    args.reload_interval,
                    shutdown_rx.clone(),
                ));
            }
            RuleSource::Cluster(client) => {
                let namespace = args.common.export.namespace_in(&client);
                tokio::spawn(cluster_source::run(
                    client,
                    shared.clone(),
                    cluster_source::ClusterOptions {
                        startup_sync_timeout: args.common.sources.startup_sync_timeout,
                        resync: args.common.sources.watch_resync,
                        last_good: (namespace, args.common.sources.last_good_configmap.clone()),
                        keep_last_good: true,
                    },
                    shutdown_rx.clone(),
                ));
            }
            RuleSource::BuiltIn => shared.set_ready(true),
        }
    }
}

/// The webhook and admin listeners bound and served until shutdown.
async fn start_servers(
    args: &ServeArgs,
    shared: &Arc<Shared>,
    serving: &Arc<ServeState>,
    tls: Option<server::Tls>,
    phase: &watch::Receiver<Phase>,
    shutdown_rx: &watch::Receiver<bool>,
) -> anyhow::Result<[tokio::task::JoinHandle<()>; 2]> {
    let (webhook_listener, admin_listener) =
        server::bind_listeners(args.address, args.admin_address).await?;
    let (max_connections, open_files) =
        capacity::raise_file_limit(args.max_connections, capacity::SMALL_LISTENER_CONNECTIONS);
    tracing::info!(
        address = %server::local_address(&webhook_listener),
        admin_address = %server::local_address(&admin_listener),
        tls = tls.is_some(),
        client_authentication = tls.as_ref().is_some_and(|t| t.client_auth.is_some()),
        decision_threads = serving.decisions.threads(),
        max_connections,
        open_files,
        "listening"
    );
    let connections = ConnectionLimit::new(
        max_connections,
        Some(capacity::ConnectionMetrics {
            open: shared.metrics.connections.clone(),
            closed: shared.metrics.connections_closed.clone(),
        }),
    );

    let timeouts = ConnectionTimeouts {
        read_header: args.read_header_timeout,
        idle: args.idle_timeout,
        shutdown: args.shutdown_timeout,
    };
    let client_auth = tls.as_ref().and_then(|t| t.client_auth.clone());
    let webhook = webhook::router(
        shared.clone(),
        serving.clone(),
        webhook::WebhookConfig {
            validate_path: args.validate_path.clone(),
            validate_rule_path: args.validate_rule_path.clone(),
            probes: webhook::ProbePaths {
                health: args.health_path.clone(),
                ready: args.ready_path.clone(),
                metrics: args.metrics_path.clone(),
            },
            read_timeout: args.read_timeout,
            write_timeout: args.write_timeout,
            // Half the connections at most carry an admission request, so that the other half
            // can always be closed for a newcomer (capacity).
            intake: webhook::Intake::new(max_connections / 2),
        },
        client_auth,
    );
    let webhook_task = tokio::spawn(server::serve(
        webhook_listener,
        webhook,
        tls,
        timeouts,
        connections,
        phase.clone(),
    ));
    let admin_task = tokio::spawn(server::serve(
        admin_listener,
        admin::router(shared.clone(), serving.clone(), shutdown_rx.clone()),
        None,
        // Follow streams outlive the usual idle timeout.
        ConnectionTimeouts {
            idle: admin::IDLE_TIMEOUT,
            ..timeouts
        },
        ConnectionLimit::new(capacity::SMALL_LISTENER_CONNECTIONS, None),
        phase.clone(),
    ));
    Ok([webhook_task, admin_task])
}

/// In-flight requests are done: what they queued for export is drained, and the export's
/// health reported, within the time left before `deadline`.
async fn drain_export(serving: &ServeState, deadline: tokio::time::Instant) {
    let Some(export) = &serving.export else {
        return;
    };
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    export
        .exporter
        .shutdown(left.min(crate::export::DRAIN_TIMEOUT))
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

/// Which rule ConfigMaps are cluster rules (reference §2 "Who may write a rule"): those in
/// `--cluster-rule-namespaces`; by default, in cluster mode, the agent's own namespace, and
/// offline every rule file.
fn tier_policy(args: &ServeArgs, offline: bool) -> anyhow::Result<TierPolicy> {
    crate::tiers::tier_policy(
        &args.common.sources.cluster_rule_namespaces,
        offline,
        crate::process::agent_namespace(args.common.export.pod_namespace.as_deref()),
    )
}
