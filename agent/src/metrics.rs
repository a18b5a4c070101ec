//! Prometheus metrics of the agent (reference §6), registered once on a private registry. The
//! families whose labels a caller chooses are bounded in series ([`BoundedCounterVec`]).

use crate::bounded_series::BoundedCounterVec;
use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounterVec, IntGauge, Opts, Registry, TextEncoder,
};

/// Series of `drift_sentinel_admission_requests_total` (namespace, resource and result exact).
pub const ADMISSION_REQUEST_SERIES: usize = 1_000;
/// Series of `drift_sentinel_violations_total` with every label exact …
pub const VIOLATION_SERIES: usize = 2_000;
/// … and with the field `_other` (namespace, resource and mode exact).
pub const VIOLATION_NAMESPACE_SERIES: usize = 500;
/// Rules of `drift_sentinel_audit_drifted_objects` (the others summed under `_other`).
pub const AUDIT_DRIFTED_RULES: usize = 100;
/// Scrapes of `/metrics` rendered or being sent at once (a Prometheus pair scrapes two); a
/// third waits for one of them, at most [`SCRAPE_WAIT`].
pub const MAX_SCRAPES: usize = 2;
pub const SCRAPE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Why a scrape got no metrics.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    #[error("{MAX_SCRAPES} scrapes are being answered already; try again")]
    Busy,
    #[error("cannot render metrics: {0}")]
    Render(#[from] prometheus::Error),
}

/// Every metric the agent exports.
pub struct Metrics {
    registry: Registry,
    pub admission_requests: BoundedCounterVec,
    pub violations: BoundedCounterVec,
    pub series_limited: IntCounterVec,
    pub connections: IntGauge,
    pub last_good_not_kept: IntGauge,
    pub last_good_refused: prometheus::IntCounter,

    pub connections_closed: IntCounterVec,
    /// Scrapes being rendered or sent (each holds its text until sent).
    scrapes: std::sync::Arc<tokio::sync::Semaphore>,
    pub admission_duration: Histogram,
    pub webhook_refused: IntCounterVec,
    pub rules_loaded: IntGauge,
    pub rules_invalid: IntGauge,
    pub rule_sources_stale: IntGauge,
    pub rules_stale: IntGauge,
    pub config_events: IntCounterVec,
    pub watch_failures: IntCounterVec,
    pub export_published: IntCounterVec,
    pub export_dropped: IntCounterVec,
    /// Events (reference §6 "Events") not written, by reason.
    pub events_dropped: IntCounterVec,
    /// Event writes to the API server, by result.
    pub event_writes: IntCounterVec,
    pub export_queue_messages: IntGauge,
    pub export_queue_bytes: IntGauge,
    pub export_spool_segments: IntGauge,
    pub export_spool_bytes: IntGauge,
    pub audit_last_run: prometheus::Gauge,
    pub audit_duration: prometheus::Gauge,
    pub audit_objects: prometheus::IntGaugeVec,
    pub audit_drifted: prometheus::IntGaugeVec,
    pub audit_bypassed: prometheus::IntGaugeVec,
    pub audit_bypass_oldest: prometheus::Gauge,
    pub audit_unverified: prometheus::IntGaugeVec,
}

/// Which process serves the metrics: each exposes only the families it writes, so that the
/// webhook never serves an audit gauge at 0 (which `DriftSentinelAuditNotCompleting` would read
/// as an audit that never ran) and the audit serves no empty admission histogram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The admission webhook (`drift-sentinel`): admission, the admission export, rules.
    Webhook,
    /// The audit (`drift-sentinel audit`): the last run (reference §8), its export, rules.
    Audit,
}

impl Metrics {
    /// The webhook's metrics.
    pub fn new() -> Result<Self, prometheus::Error> {
        Self::for_role(Role::Webhook)
    }

    /// The audit's metrics.
    pub fn audit() -> Result<Self, prometheus::Error> {
        Self::for_role(Role::Audit)
    }

    pub fn for_role(role: Role) -> Result<Self, prometheus::Error> {
        let series_limited = IntCounterVec::new(
            Opts::new(
                "drift_sentinel_metric_series_limited_total",
                "Observations counted under a coarser series (labels \"_other\") because their metric had reached its number of series, by metric.",
            ),
            &["metric"],
        )?;
        let metrics = Self {
            registry: Registry::new(),
            admission_requests: BoundedCounterVec::new(
                Opts::new(
                    "drift_sentinel_admission_requests_total",
                    "Admission requests answered, by namespace, resource and result (namespace and resource \"_other\" past the metric's number of series).",
                ),
                &["namespace", "resource", "result"],
                &["namespace", "resource"],
                &[(&[], ADMISSION_REQUEST_SERIES)],
                &series_limited,
            )?,
            violations: BoundedCounterVec::new(
                Opts::new(
                    "drift_sentinel_violations_total",
                    "Changed paths outside a rule's mutable fields, by namespace, resource, field (indices written [*]) and effective mode (field, then namespace and resource, \"_other\" past the metric's number of series).",
                ),
                &["namespace", "resource", "field", "mode"],
                &["namespace", "resource", "field"],
                &[
                    (&[], VIOLATION_SERIES),
                    (&["field"], VIOLATION_NAMESPACE_SERIES),
                ],
                &series_limited,
            )?,
            series_limited,
            connections: IntGauge::new(
                "drift_sentinel_connections",
                "Connections open on the webhook listener, TLS handshakes included (at most --max-connections).",
            )?,
            connections_closed: IntCounterVec::new(
                Opts::new(
                    "drift_sentinel_connections_closed_total",
                    "Connections closed at --max-connections, by reason: evicted (the connection quiet the longest, to make room for a new one) or refused (every connection had a request in flight).",
                ),
                &["reason"],
            )?,
            last_good_not_kept: IntGauge::new(
                "drift_sentinel_last_good_not_kept",
                "Rules whose last valid version the last-good ConfigMap does not keep: it is full (cluster rules first, namespace rules within half of it).",
            )?,
            last_good_refused: prometheus::IntCounter::new(
                "drift_sentinel_last_good_refused_total",
                "Writes of the last-good ConfigMap the API server refused (not sent again until the versions to keep change).",
            )?,
            scrapes: std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_SCRAPES)),
            admission_duration: Histogram::with_opts(
                HistogramOpts::new(
                    "drift_sentinel_admission_duration_seconds",
                    "Time to decide an admission request, from body received to response built.",
                )
                .buckets(vec![
                    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5,
                    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                ]),
            )?,
            rules_loaded: IntGauge::new(
                "drift_sentinel_rules_loaded_total",
                "Valid rules in the active rule set.",
            )?,
            rules_invalid: IntGauge::new(
                "drift_sentinel_rules_invalid",
                "Rules (and rule files) that are invalid and not applied.",
            )?,
            rule_sources_stale: IntGauge::new(
                "drift_sentinel_rule_sources_stale",
                "Rule files whose last loaded rules are kept because they are being rewritten, empty or no longer parse.",
            )?,
            rules_stale: IntGauge::new(
                "drift_sentinel_rules_stale",
                "Rule ConfigMaps enforced in their last valid version because the current one is invalid or cannot be read.",
            )?,
            webhook_refused: IntCounterVec::new(
                Opts::new(
                    "drift_sentinel_webhook_refused_total",
                    "Callers of /validate and /validate-rule answered 401 under client authentication, by reason (no_certificate, untrusted_certificate, name_not_allowed).",
                ),
                &["reason"],
            )?,
            config_events: IntCounterVec::new(
                Opts::new(
                    "drift_sentinel_config_events_total",
                    "Rule configuration events, by type (added, updated, deleted, invalid, stale, source_error, reload, watch_error).",
                ),
                &["event_type"],
            )?,
            watch_failures: IntCounterVec::new(
                Opts::new(
                    "drift_sentinel_watch_failures_total",
                    "Failures of the cluster watches (list, watch, or an error event such as 410 Gone), by resource (configmaps, namespaces).",
                ),
                &["resource"],
            )?,
            export_published: IntCounterVec::new(
                Opts::new(
                    "drift_sentinel_export_records_published_total",
                    "Violation records written to the export spool, by source (webhook, audit).",
                ),
                &["source"],
            )?,
            export_dropped: IntCounterVec::new(
                Opts::new(
                    "drift_sentinel_export_records_dropped_total",
                    "Violation records not exported, by source and reason (message_too_large, queue_full, encode_error, disk_full, shutdown, publish_error, no_connection).",
                ),
                &["source", "reason"],
            )?,
            events_dropped: IntCounterVec::new(
                Opts::new(
                    "drift_sentinel_events_dropped_total",
                    "Findings not made into Events, by reason: queue_full (the queue between the decisions and the Event writer was full), series_full (every kept series had writes pending), write_failed (a write still failed after its retries).",
                ),
                &["reason"],
            )?,
            event_writes: IntCounterVec::new(
                Opts::new(
                    "drift_sentinel_event_writes_total",
                    "Event writes to the API server, by result: created, patched (a repeat counted in the Event's series) or failed (retried with backoff).",
                ),
                &["result"],
            )?,
            export_queue_messages: IntGauge::new(
                "drift_sentinel_export_queue_messages",
                "Export queue: messages being built or waiting to be published (limit 1024).",
            )?,
            export_queue_bytes: IntGauge::new(
                "drift_sentinel_export_queue_bytes",
                "Export queue: encoded bytes waiting to be published (limit 16 MiB).",
            )?,
            export_spool_segments: IntGauge::new(
                "drift_sentinel_export_spool_segments",
                "Completed admission segments in the spool directory (limit 20).",
            )?,
            export_spool_bytes: IntGauge::new(
                "drift_sentinel_export_spool_bytes",
                "Bytes of admission segments in the spool directory, the open one included (limit 20 MiB).",
            )?,
            audit_last_run: prometheus::Gauge::new(
                "drift_sentinel_audit_last_run_timestamp_seconds",
                "When the last completed audit run started (Unix time).",
            )?,
            audit_duration: prometheus::Gauge::new(
                "drift_sentinel_audit_duration_seconds",
                "How long the last completed audit run took.",
            )?,
            audit_objects: prometheus::IntGaugeVec::new(
                Opts::new(
                    "drift_sentinel_audit_objects",
                    "Objects of the last completed audit run, by result (drifted, clean, no_baseline, skipped).",
                ),
                &["result"],
            )?,
            audit_drifted: prometheus::IntGaugeVec::new(
                Opts::new(
                    "drift_sentinel_audit_drifted_objects",
                    "Drifted objects of the last completed audit run, by rule (namespace/name).",
                ),
                &["rule"],
            )?,
            audit_bypassed: prometheus::IntGaugeVec::new(
                Opts::new(
                    "drift_sentinel_audit_bypassed_objects",
                    "Objects of the last completed audit run carrying the bypass annotation, by end: none (no end), active, expired or not-honoured (the last two were audited).",
                ),
                &["end"],
            )?,
            audit_bypass_oldest: prometheus::Gauge::new(
                "drift_sentinel_audit_bypass_oldest_seconds",
                "How long the longest-standing honoured bypass of the last completed audit run had been set (since its annotation's managedFields time); 0 when none.",
            )?,
            audit_unverified: prometheus::IntGaugeVec::new(
                prometheus::Opts::new(
                    "drift_sentinel_audit_unverified_records",
                    "What did not verify with the installation's record signing key, by source: record (the webhook's records the last run read; no user is named from them), report and event-memory (what the audit remembers, as last read back: not read back).",
                ),
                &["source"],
            )?,
        };
        for collector in metrics.collectors(role) {
            metrics.registry.register(collector)?;
        }
        // Every source at 0 until a run reads it (reference §8): a dashboard or alert sees the
        // series before the first run, and an offline audit (no records to read) exposes them too.
        if role == Role::Audit {
            for source in drift_api::status::SignedSource::ALL {
                metrics
                    .audit_unverified
                    .with_label_values(&[source.as_str()])
                    .set(0);
            }
        }
        Ok(metrics)
    }

    /// The families `role` exposes.
    fn collectors(&self, role: Role) -> Vec<Box<dyn prometheus::core::Collector>> {
        // Both processes: their rules and the export of their records.
        let mut collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(self.rules_loaded.clone()),
            Box::new(self.rules_invalid.clone()),
            Box::new(self.rule_sources_stale.clone()),
            Box::new(self.rules_stale.clone()),
            Box::new(self.config_events.clone()),
            Box::new(self.watch_failures.clone()),
            Box::new(self.export_published.clone()),
            Box::new(self.export_dropped.clone()),
            Box::new(self.events_dropped.clone()),
            Box::new(self.event_writes.clone()),
        ];
        match role {
            // Admission, and the admission export's queue and spool.
            Role::Webhook => collectors.extend([
                self.admission_requests.collector(),
                self.violations.collector(),
                Box::new(self.series_limited.clone()),
                Box::new(self.connections.clone()),
                Box::new(self.connections_closed.clone()),
                Box::new(self.last_good_not_kept.clone()),
                Box::new(self.last_good_refused.clone()),
                Box::new(self.admission_duration.clone()),
                Box::new(self.webhook_refused.clone()),
                Box::new(self.export_queue_messages.clone()),
                Box::new(self.export_queue_bytes.clone()),
                Box::new(self.export_spool_segments.clone()),
                Box::new(self.export_spool_bytes.clone()),
            ]),
            // The last completed run (reference §8).
            Role::Audit => collectors.extend([
                Box::new(self.audit_last_run.clone()) as Box<dyn prometheus::core::Collector>,
                Box::new(self.audit_duration.clone()),
                Box::new(self.audit_objects.clone()),
                Box::new(self.audit_drifted.clone()),
                Box::new(self.audit_bypassed.clone()),
                Box::new(self.audit_bypass_oldest.clone()),
                Box::new(self.audit_unverified.clone()),
            ]),
        }
        collectors
    }

    /// `drift_sentinel_audit_unverified_records`: every source (its bounded label values), 0
    /// when nothing of it was read.
    pub fn set_audit_unverified(&self, evidence: &drift_api::status::AuditEvidence) {
        for (source, count) in evidence.unverified_by_source() {
            self.audit_unverified
                .with_label_values(&[source.as_str()])
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> Result<String, prometheus::Error> {
        String::from_utf8(self.render_bytes()?).map_err(|e| prometheus::Error::Msg(e.to_string()))
    }

    fn render_bytes(&self) -> Result<Vec<u8>, prometheus::Error> {
        let mut buffer = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut buffer)?;
        Ok(buffer)
    }

    /// [`Metrics::render`] for a scrape: at most [`MAX_SCRAPES`] texts exist at once, each
    /// until the last copy of it (the response being sent) is dropped.
    pub async fn render_for_scrape(&self) -> Result<bytes::Bytes, ScrapeError> {
        let place = tokio::time::timeout(SCRAPE_WAIT, self.scrapes.clone().acquire_owned())
            .await
            .ok()
            .and_then(Result::ok)
            .ok_or(ScrapeError::Busy)?;
        let text = self.render_bytes()?;
        Ok(crate::capacity::held_bytes(text, place))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The families a process serves (`# TYPE` lines).
    fn families(metrics: &Metrics) -> Vec<String> {
        let text = metrics.render().unwrap();
        let mut names: Vec<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| l.split(' ').next().unwrap().to_owned())
            .collect();
        names.sort();
        names
    }

    const AUDIT: [&str; 7] = [
        "drift_sentinel_audit_bypass_oldest_seconds",
        "drift_sentinel_audit_bypassed_objects",
        "drift_sentinel_audit_drifted_objects",
        "drift_sentinel_audit_duration_seconds",
        "drift_sentinel_audit_last_run_timestamp_seconds",
        "drift_sentinel_audit_objects",
        "drift_sentinel_audit_unverified_records",
    ];

    #[test]
    fn what_did_not_verify_is_served_by_source() {
        use drift_api::status::{AuditEvidence, MemoryRead, SignedRead, SignedSource};
        let memory = |source, unverified| MemoryRead {
            source,
            outcome: SignedRead {
                read: 3,
                unverified,
                ..SignedRead::default()
            },
        };
        // (the evidence, the lines served)
        let cases = [
            (
                AuditEvidence::default(),
                [
                    r#"drift_sentinel_audit_unverified_records{source="event-memory"} 0"#,
                    r#"drift_sentinel_audit_unverified_records{source="record"} 0"#,
                    r#"drift_sentinel_audit_unverified_records{source="report"} 0"#,
                ],
            ),
            (
                AuditEvidence {
                    records: SignedRead {
                        read: 10,
                        unverified: 4,
                        ..SignedRead::default()
                    },
                    memory: vec![
                        memory(SignedSource::Report, 2),
                        memory(SignedSource::EventMemory, 1),
                    ],
                },
                [
                    r#"drift_sentinel_audit_unverified_records{source="event-memory"} 1"#,
                    r#"drift_sentinel_audit_unverified_records{source="record"} 4"#,
                    r#"drift_sentinel_audit_unverified_records{source="report"} 2"#,
                ],
            ),
        ];
        for (evidence, want) in cases {
            let metrics = Metrics::audit().unwrap();
            metrics.set_audit_unverified(&evidence);
            let text = metrics.render().unwrap();
            let served: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with("drift_sentinel_audit_unverified_records"))
                .collect();
            assert_eq!(served, want, "{evidence:?}");
        }
    }

    #[test]
    fn every_source_is_served_at_zero_before_the_first_run() {
        // No run yet (or an offline audit, which reads no records): the series exist at 0.
        let text = Metrics::audit().unwrap().render().unwrap();
        let served: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("drift_sentinel_audit_unverified_records"))
            .collect();
        assert_eq!(
            served,
            [
                r#"drift_sentinel_audit_unverified_records{source="event-memory"} 0"#,
                r#"drift_sentinel_audit_unverified_records{source="record"} 0"#,
                r#"drift_sentinel_audit_unverified_records{source="report"} 0"#,
            ]
        );
    }

    #[test]
    fn the_webhook_serves_no_audit_metric() {
        let metrics = Metrics::new().unwrap();
        // Even written to (nothing in the webhook does), an audit gauge is not served.
        metrics.audit_last_run.set(1.0);
        metrics.audit_objects.with_label_values(&["drifted"]).set(1);
        metrics.audit_drifted.with_label_values(&["a/b"]).set(1);
        let names = families(&metrics);
        for name in AUDIT {
            assert!(!names.iter().any(|n| n == name), "{name} in {names:?}");
        }
        assert!(
            names
                .iter()
                .any(|n| n == "drift_sentinel_admission_duration_seconds")
        );
        assert!(names.iter().any(|n| n == "drift_sentinel_rules_invalid"));
    }

    #[test]
    fn the_audit_serves_its_metrics_and_no_admission_metric() {
        let metrics = Metrics::audit().unwrap();
        metrics.audit_objects.with_label_values(&["drifted"]).set(2);
        metrics.audit_drifted.with_label_values(&["a/b"]).set(2);
        metrics.audit_bypassed.with_label_values(&["active"]).set(1);
        metrics.set_audit_unverified(&drift_api::status::AuditEvidence::default());
        metrics.admission_duration.observe(0.1);
        metrics.export_published.with_label_values(&["audit"]).inc();
        let names = families(&metrics);
        for name in AUDIT {
            assert!(names.iter().any(|n| n == name), "{name} not in {names:?}");
        }
        for name in [
            "drift_sentinel_admission_duration_seconds",
            "drift_sentinel_admission_requests_total",
            "drift_sentinel_violations_total",
            "drift_sentinel_export_queue_messages",
            "drift_sentinel_export_spool_bytes",
        ] {
            assert!(!names.iter().any(|n| n == name), "{name} in {names:?}");
        }
        for name in [
            "drift_sentinel_rules_loaded_total",
            "drift_sentinel_rules_invalid",
            "drift_sentinel_export_records_published_total",
        ] {
            assert!(names.iter().any(|n| n == name), "{name} not in {names:?}");
        }
    }
}
