//! The agent's shared state: the active rule snapshot, swapped atomically when a source
//! changes, so that an admission request never waits for (or sees half of) a rebuild; and
//! beside it what each process adds — the webhook's parent lookup and export, the audit's
//! runs — each built whole at startup.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use drift_api::status::{AuditRun, RuleSourceKind};
use drift_engine::manifests::Namespaces;
use drift_engine::rule::TierPolicy;
use drift_engine::{RuleId, RuleSet, SpecText};

use crate::metrics::Metrics;
use crate::parent_labels::ParentLookup;

// The wire types of `/status` describe sources and stale rules; the snapshot keeps them as
// they are sent.
pub use drift_api::status::{SourceError, StaleRule, StaleSource};

/// One consistent view of the rules and namespaces.
#[derive(Debug)]
pub struct Snapshot {
    pub rules: RuleSet,
    pub namespaces: Namespaces,
    pub source_errors: Vec<SourceError>,
    /// Sources whose last loaded rules are served instead of what they hold now.
    pub stale_sources: Vec<StaleSource>,
    /// Cluster mode: rules served in their last valid version.
    pub stale_rules: Vec<StaleRule>,
    pub kind: RuleSourceKind,
    pub loaded_at: SystemTime,
    /// `data.spec` of every rule ConfigMap, to tell what changed between snapshots.
    pub specs: BTreeMap<RuleId, SpecText>,
}

impl Snapshot {
    pub fn empty(kind: RuleSourceKind) -> Self {
        Self {
            rules: RuleSet::default(),
            namespaces: Namespaces::new(),
            source_errors: Vec::new(),
            stale_sources: Vec::new(),
            stale_rules: Vec::new(),
            kind,
            loaded_at: SystemTime::now(),
            specs: BTreeMap::new(),
        }
    }

    /// A rule ConfigMap that could not be fetched: reported as invalid, never applied.
    pub fn add_unreadable_rule(&mut self, id: RuleId, reason: String) {
        self.rules.push_invalid(drift_engine::RuleError {
            namespace: id.namespace,
            name: id.name,
            origin: None,
            field: None,
            line: None,
            column: None,
            reason,
        });
    }

    /// Invalid rules plus sources that could not be read at all.
    pub fn invalid_count(&self) -> usize {
        self.rules.invalid().len() + self.source_errors.len()
    }
}

/// The rules a process keeps current, and how it is doing: shared by the listeners and the
/// source watchers of both processes, and built whole — whatever it holds is known when it is
/// made. What only one process has lives beside it ([`ServeState`], [`AuditRuns`]).
pub struct Shared {
    snapshot: ArcSwap<Snapshot>,
    pub metrics: Metrics,
    ready: AtomicBool,
    /// SIGTERM came: not ready from now on, whatever the rule sources do.
    terminating: AtomicBool,
    /// Why the agent is not ready, for `/readyz`.
    not_ready_reason: Mutex<String>,
    /// Which rule ConfigMaps are cluster rules (reference §2).
    tier_policy: TierPolicy,
}

/// What the webhook's handlers need besides the rules, all known when `serve` has started its
/// sources: nothing here changes afterwards.
pub struct ServeState {
    /// Cluster mode: reads the labels of objects scaled through `/scale`.
    pub parents: Option<ParentLookup>,
    /// Violation export, when enabled.
    pub export: Option<ExportHandle>,
    /// The threads decisions (and rule checks) run on.
    pub decisions: crate::decisions::DecisionPool,
    /// Cluster mode with `--events`: where findings go to become Events (reference §6).
    pub events: Option<crate::events::EventSink>,
    /// Cluster mode with `--events`: whether records are signed, and the publication of the
    /// public key (reference §8 "Trust").
    pub record_signing: Option<crate::record_key::SigningStatus>,
}

/// The export of this process: the exporter, its status and where its Connection comes from.
pub struct ExportHandle {
    pub exporter: Arc<crate::export::Exporter>,
    pub status: Arc<crate::connection_status::ConnectionStatusReporter>,
    /// `namespace/name` of the Connection, or the file it is read from.
    pub connection: String,
}

/// The audit process's runs, for `/status`.
pub struct AuditRuns {
    /// Run periodically: `--audit-interval`.
    interval: Option<Duration>,
    last: Mutex<Option<AuditRun>>,
    /// Cluster mode with `--events`: whether the audit verifies with a key.
    record_signing: Option<crate::record_key::SigningStatus>,
}

impl AuditRuns {
    pub fn new(
        interval: Option<Duration>,
        record_signing: Option<crate::record_key::SigningStatus>,
    ) -> Self {
        Self {
            interval,
            last: Mutex::new(None),
            record_signing,
        }
    }

    pub fn record_signing(&self) -> Option<&crate::record_key::SigningStatus> {
        self.record_signing.as_ref()
    }

    /// Records a run. A failed run keeps the start of the last run that completed, so that
    /// `kubectl drift status` can tell how long the audit has not completed.
    pub fn record(&self, mut run: AuditRun) {
        if let Ok(mut last) = self.last.lock() {
            run.last_completed = if run.error.is_none() {
                Some(run.start.clone())
            } else {
                last.as_ref().and_then(|l| l.last_completed.clone())
            };
            *last = Some(run);
        }
    }

    pub fn last(&self) -> Option<AuditRun> {
        self.last.lock().ok().and_then(|l| l.clone())
    }

    pub fn interval(&self) -> Option<Duration> {
        self.interval
    }
}

impl Shared {
    /// The state of a process whose rules start as `initial`.
    pub fn new(metrics: Metrics, tier_policy: TierPolicy, initial: Snapshot) -> Arc<Self> {
        let shared = Arc::new(Self {
            snapshot: ArcSwap::from_pointee(Snapshot::empty(initial.kind.clone())),
            metrics,
            ready: AtomicBool::new(false),
            terminating: AtomicBool::new(false),
            not_ready_reason: Mutex::new("starting".into()),
            tier_policy,
        });
        // Installed rather than stored, so that the first rules are counted and logged as
        // every later change is.
        shared.install(initial);
        shared
    }

    /// Which rule ConfigMaps are cluster rules.
    pub fn tier_policy(&self) -> &TierPolicy {
        &self.tier_policy
    }

    /// The active snapshot; cheap, lock-free.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    /// Whether `/readyz` succeeds: the rules are synced and the process is not shutting down.
    pub fn is_ready(&self) -> bool {
        self.rules_synced() && !self.terminating.load(Ordering::Acquire)
    }

    /// Whether the rule sources have delivered a complete rule set (shutting down or not).
    pub fn rules_synced(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    /// SIGTERM: not ready for good, so that the endpoint is removed while the process still
    /// answers (reference §6 "Shutdown").
    pub fn set_terminating(&self) {
        if let Ok(mut current) = self.not_ready_reason.lock() {
            "shutting down".clone_into(&mut current);
        }
        self.terminating.store(true, Ordering::Release);
    }

    /// Marks the agent not ready and says why.
    pub fn set_not_ready(&self, reason: &str) {
        if let Ok(mut current) = self.not_ready_reason.lock() {
            *current = reason.to_owned();
        }
        self.set_ready(false);
    }

    pub fn not_ready_reason(&self) -> String {
        self.not_ready_reason
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// Makes `next` the active snapshot: counts what changed, updates the gauges, logs each
    /// new problem once, then swaps.
    pub fn install(&self, next: Snapshot) {
        let previous = self.snapshot.load();
        let events = &self.metrics.config_events;
        for (id, spec) in &next.specs {
            match previous.specs.get(id) {
                None => events.with_label_values(&["added"]).inc(),
                Some(old) if old != spec => events.with_label_values(&["updated"]).inc(),
                Some(_) => {}
            }
        }
        for id in previous.specs.keys() {
            if !next.specs.contains_key(id) {
                events.with_label_values(&["deleted"]).inc();
            }
        }
        for error in next.rules.invalid() {
            if !previous.rules.invalid().contains(error) {
                events.with_label_values(&["invalid"]).inc();
                tracing::error!(
                    rule = %format!("{}/{}", error.namespace, error.name),
                    field = error.field.as_deref().unwrap_or(""),
                    line = error.line,
                    column = error.column,
                    "invalid rule, not applied: {error}"
                );
            }
        }
        for error in &next.source_errors {
            if !previous.source_errors.contains(error) {
                events.with_label_values(&["source_error"]).inc();
                tracing::error!(source = %error.source, "rule source cannot be read: {error}");
            }
        }
        events.with_label_values(&["reload"]).inc();
        self.metrics
            .rules_loaded
            .set(i64::try_from(next.rules.rules().len()).unwrap_or(i64::MAX));
        self.metrics
            .rules_invalid
            .set(i64::try_from(next.invalid_count()).unwrap_or(i64::MAX));
        self.metrics
            .rules_stale
            .set(i64::try_from(next.stale_rules.len()).unwrap_or(i64::MAX));
        for stale in &next.stale_rules {
            if !previous.stale_rules.iter().any(|s| s.rule == stale.rule) {
                events.with_label_values(&["stale"]).inc();
            }
        }
        self.metrics
            .rule_sources_stale
            .set(i64::try_from(next.stale_sources.len()).unwrap_or(i64::MAX));
        tracing::info!(
            rules_loaded = next.rules.rules().len(),
            rules_invalid = next.invalid_count(),
            rules = %next.rules.rules().iter().map(|r| r.id.to_string()).collect::<Vec<_>>().join(", "),
            "rule set active"
        );
        self.snapshot.store(Arc::new(next));
    }
}
