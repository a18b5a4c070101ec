//! Prometheus metrics of the agent (SPEC §6), registered once on a private registry.

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounterVec, IntGauge, Opts, Registry, TextEncoder,
};

/// Every metric the agent exports.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    pub admission_requests: IntCounterVec,
    pub violations: IntCounterVec,
    pub admission_duration: Histogram,
    pub rules_loaded: IntGauge,
    pub rules_invalid: IntGauge,
    pub rule_sources_stale: IntGauge,
    pub rules_stale: IntGauge,
    pub config_events: IntCounterVec,
    pub watch_failures: IntCounterVec,
    pub export_published: IntCounterVec,
    pub export_dropped: IntCounterVec,
    pub export_queue_messages: IntGauge,
    pub export_queue_bytes: IntGauge,
    pub export_spool_segments: IntGauge,
    pub export_spool_bytes: IntGauge,
    pub audit_last_run: prometheus::Gauge,
    pub audit_duration: prometheus::Gauge,
    pub audit_objects: prometheus::IntGaugeVec,
    pub audit_drifted: prometheus::IntGaugeVec,
}

impl Metrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let admission_requests = IntCounterVec::new(
            Opts::new(
                "drift_sentinel_admission_requests_total",
                "Admission requests answered, by namespace, resource and result.",
            ),
            &["namespace", "resource", "result"],
        )?;
        let violations = IntCounterVec::new(
            Opts::new(
                "drift_sentinel_violations_total",
                "Changed paths outside a rule's mutable fields, by namespace, resource, field (indices written [*]) and effective mode.",
            ),
            &["namespace", "resource", "field", "mode"],
        )?;
        let admission_duration = Histogram::with_opts(
            HistogramOpts::new(
                "drift_sentinel_admission_duration_seconds",
                "Time to decide an admission request, from body received to response built.",
            )
            .buckets(vec![
                0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005,
                0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
            ]),
        )?;
        let rules_loaded = IntGauge::new(
            "drift_sentinel_rules_loaded_total",
            "Valid rules in the active rule set.",
        )?;
        let rules_invalid = IntGauge::new(
            "drift_sentinel_rules_invalid",
            "Rules (and rule files) that are invalid and not applied.",
        )?;
        let rule_sources_stale = IntGauge::new(
            "drift_sentinel_rule_sources_stale",
            "Rule files whose last loaded rules are kept because they are being rewritten, empty or no longer parse.",
        )?;
        let rules_stale = IntGauge::new(
            "drift_sentinel_rules_stale",
            "Rule ConfigMaps enforced in their last valid version because the current one is invalid or cannot be read.",
        )?;
        let config_events = IntCounterVec::new(
            Opts::new(
                "drift_sentinel_config_events_total",
                "Rule configuration events, by type (added, updated, deleted, invalid, stale, source_error, reload, watch_error).",
            ),
            &["event_type"],
        )?;
        let watch_failures = IntCounterVec::new(
            Opts::new(
                "drift_sentinel_watch_failures_total",
                "Failures of the cluster watches (list, watch, or an error event such as 410 Gone), by resource (configmaps, namespaces).",
            ),
            &["resource"],
        )?;
        let export_published = IntCounterVec::new(
            Opts::new(
                "drift_sentinel_export_records_published_total",
                "Violation records written to the export spool, by source (webhook, audit).",
            ),
            &["source"],
        )?;
        let export_dropped = IntCounterVec::new(
            Opts::new(
                "drift_sentinel_export_records_dropped_total",
                "Violation records not exported, by source and reason (message_too_large, queue_full, encode_error, disk_full, shutdown, publish_error, no_connection).",
            ),
            &["source", "reason"],
        )?;
        let export_queue_messages = IntGauge::new(
            "drift_sentinel_export_queue_messages",
            "Export queue: messages being built or waiting to be published (limit 1024).",
        )?;
        let export_queue_bytes = IntGauge::new(
            "drift_sentinel_export_queue_bytes",
            "Export queue: encoded bytes waiting to be published (limit 16 MiB).",
        )?;
        let export_spool_segments = IntGauge::new(
            "drift_sentinel_export_spool_segments",
            "Completed admission segments in the spool directory (limit 20).",
        )?;
        let export_spool_bytes = IntGauge::new(
            "drift_sentinel_export_spool_bytes",
            "Bytes of admission segments in the spool directory, the open one included (limit 20 MiB).",
        )?;
        let audit_last_run = prometheus::Gauge::new(
            "drift_sentinel_audit_last_run_timestamp_seconds",
            "When the last completed audit run started (Unix time).",
        )?;
        let audit_duration = prometheus::Gauge::new(
            "drift_sentinel_audit_duration_seconds",
            "How long the last completed audit run took.",
        )?;
        let audit_objects = prometheus::IntGaugeVec::new(
            Opts::new(
                "drift_sentinel_audit_objects",
                "Objects of the last completed audit run, by result (drifted, clean, no_baseline, skipped).",
            ),
            &["result"],
        )?;
        let audit_drifted = prometheus::IntGaugeVec::new(
            Opts::new(
                "drift_sentinel_audit_drifted_objects",
                "Drifted objects of the last completed audit run, by rule (namespace/name).",
            ),
            &["rule"],
        )?;
        registry.register(Box::new(audit_last_run.clone()))?;
        registry.register(Box::new(audit_duration.clone()))?;
        registry.register(Box::new(audit_objects.clone()))?;
        registry.register(Box::new(audit_drifted.clone()))?;
        registry.register(Box::new(export_published.clone()))?;
        registry.register(Box::new(export_dropped.clone()))?;
        registry.register(Box::new(export_queue_messages.clone()))?;
        registry.register(Box::new(export_queue_bytes.clone()))?;
        registry.register(Box::new(export_spool_segments.clone()))?;
        registry.register(Box::new(export_spool_bytes.clone()))?;
        registry.register(Box::new(admission_requests.clone()))?;
        registry.register(Box::new(violations.clone()))?;
        registry.register(Box::new(admission_duration.clone()))?;
        registry.register(Box::new(rules_loaded.clone()))?;
        registry.register(Box::new(rules_invalid.clone()))?;
        registry.register(Box::new(rule_sources_stale.clone()))?;
        registry.register(Box::new(rules_stale.clone()))?;
        registry.register(Box::new(config_events.clone()))?;
        registry.register(Box::new(watch_failures.clone()))?;
        Ok(Self {
            registry,
            admission_requests,
            violations,
            admission_duration,
            rules_loaded,
            rules_invalid,
            rule_sources_stale,
            rules_stale,
            config_events,
            watch_failures,
            export_published,
            export_dropped,
            export_queue_messages,
            export_queue_bytes,
            export_spool_segments,
            export_spool_bytes,
            audit_last_run,
            audit_duration,
            audit_objects,
            audit_drifted,
        })
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> Result<String, prometheus::Error> {
        let mut buffer = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut buffer)?;
        String::from_utf8(buffer).map_err(|e| prometheus::Error::Msg(e.to_string()))
    }
}
