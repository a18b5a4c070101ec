//! One audit run: every selected object judged by the engine, the drifted ones written to the
//! run's export file as they are found (never accumulated), counted for metrics, `/status` and
//! the reports, and — run once — printed.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use drift_api::status::{AuditCounts, AuditRun};
use drift_api::violation::format_rfc3339;
use serde_json::Value;

use super::files::{AuditFileError, AuditFiles, RunFile};
use super::objects;
use super::reports::{self, Reports};
use crate::bounded_series::largest;
use crate::connection_status::{ConnectionStatusReporter, PublishHealth};
use crate::export::spool::{Limits, StatvfsFreeSpace};
use crate::state::{AuditRuns, Shared, Snapshot};
use drift_engine::audit::AuditedObject;
use drift_engine::message::drift_text;

/// Where the Connection is read from.
pub enum ConnectionSource {
    File(PathBuf),
    /// The Connection API of the pod's namespace (and that namespace).
    Cluster(Box<kube::Api<drift_api::Connection>>, String),
}

/// Everything a run needs; built once by the command.
pub struct Auditor {
    pub shared: Arc<Shared>,
    /// Where each run is recorded for `/status`.
    pub runs: Arc<AuditRuns>,
    /// `None` offline.
    pub client: Option<kube::Client>,
    /// Offline: the object files.
    pub objects: Vec<PathBuf>,
    pub managers: Vec<String>,
    pub webhook_resources: Vec<(String, String)>,
    pub chunk: u32,
    pub export: Option<ConnectionSource>,
    pub connection_name: String,
    /// The export root and the channel directory's name.
    pub target: crate::export::connection::Target,
    pub status: Arc<ConnectionStatusReporter>,
    pub health: Arc<PublishHealth>,
    /// Write OpenReports.
    pub reports: bool,
    /// Print drifted objects on standard output.
    pub print: bool,
    /// The channel directory of the last run (what the admin `/violations` reads).
    pub last_dir: Arc<arc_swap::ArcSwapOption<PathBuf>>,
    /// Cluster mode with `--events`: who made the drifted fields (reference §8 "Who and why").
    pub attribution: Option<tokio::sync::Mutex<super::attribution::Attributor>>,
    /// Cluster mode with `--events`: the `DriftDetected` Events.
    pub events: Option<crate::events::EventSink>,
    /// `--record-signing-key`: signs what the Reports remember (reference §8 "Trust").
    pub signing_key: Option<Arc<drift_api::events::signature::SigningKey>>,
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub id: String,
    pub start: SystemTime,
    pub duration: std::time::Duration,
    pub counts: AuditCounts,
    pub drifted_by_rule: BTreeMap<String, u64>,
    /// How long the longest-standing honoured bypass had been set (since its annotation's
    /// managedFields time); zero when none.
    pub oldest_bypass: std::time::Duration,
    pub error: Option<String>,
    /// Cluster mode with `--events`: the records read and the memory read back.
    pub evidence: Option<drift_api::status::AuditEvidence>,
}

impl RunOutcome {
    /// One line: the run, its counts, and its error.
    pub fn summary(&self) -> String {
        let c = &self.counts;
        let mut text = format!(
            "audit {}: {} objects: {} drifted, {} clean, {} no_baseline, {} skipped",
            self.id,
            c.drifted + c.clean + c.no_baseline + c.skipped,
            c.drifted,
            c.clean,
            c.no_baseline,
            c.skipped
        );
        if let Some(bypasses) = c.bypass_summary() {
            text.push_str("; ");
            text.push_str(&bypasses);
        }
        if let Some(error) = &self.error {
            text.push_str("; error: ");
            text.push_str(error);
        }
        text
    }
}

/// The state of a run in progress.
struct Progress<'s> {
    snapshot: &'s Snapshot,
    managers: &'s [String],
    id: String,
    file: Option<RunFile>,
    reports: Option<Reports>,
    counts: AuditCounts,
    drifted_by_rule: BTreeMap<String, u64>,
    oldest_bypass: std::time::Duration,
    published: u64,
    too_large: u64,
    print: bool,
    /// The run's start: every object of a run is judged at this one instant (a bypass ending
    /// mid-run does not split the run in two). Records keep the time they are written: with the
    /// run's id, it tells the records of a run apart (`kubectl drift tail` deduplicates by both).
    judged_at: SystemTime,
    now_seconds: i64,
    /// Namespaces whose invalid mode annotation was already logged this run.
    warned: std::collections::BTreeSet<String>,
    who: Option<drift_engine::who::RunEvidence>,
    events: Option<&'s crate::events::EventSink>,
}

impl Progress<'_> {
    /// Audits one object: counted, reported, printed and exported; a failed export write aborts
    /// the run.
    fn audit_one(&mut self, object: &Value, resource: &str) -> Result<(), AuditFileError> {
        let snapshot = self.snapshot;
        let Some(mut audit) = drift_engine::audit::audit_object(
            &snapshot.rules,
            &snapshot.namespaces,
            object,
            self.managers,
            self.judged_at,
        ) else {
            return Ok(());
        };
        let identity = AuditedObject::of(object, resource);
        if let Some(ignored) = audit
            .matched
            .as_ref()
            .and_then(|m| m.ignored_mode_annotation)
            && self.warned.insert(ignored.namespace.to_owned())
        {
            tracing::warn!(
                namespace = ignored.namespace,
                value = ignored.value,
                "invalid drift-sentinel.k8s.io/mode annotation ignored: the rule's mode applies"
            );
        }
        drift_engine::record::count(&mut self.counts, &audit);
        let attributions = match &mut self.who {
            Some(evidence) => evidence.judge(object, &identity, &mut audit),
            None => drift_engine::who::Attributions::default(),
        };
        if let Some(reports) = &mut self.reports {
            reports.add(
                identity.namespace,
                object,
                &audit,
                &attributions,
                self.now_seconds,
            );
        }
        let who = attributions.fields;
        self.list_bypass(&identity, &audit)?;
        if let Some(events) = self.events {
            // Who set the bypass, kept on the object for a restarted audit (§8 "Memory").
            events.send_all(crate::events::audit::bypassed(
                &identity,
                &audit,
                self.judged_at,
            ));
        }
        if !audit.is_drifted() {
            return Ok(());
        }
        if let Some(rule) = audit.rule() {
            *self.drifted_by_rule.entry(rule.id.to_string()).or_default() += 1;
        }
        if let Some(events) = self.events {
            let uid = object
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or("");
            events.send_all(crate::events::audit::drift_detected(
                &identity,
                uid,
                &audit,
                &who,
                drift_api::events::who_recorded_property(&attributions.recorded),
                self.judged_at,
            ));
        }
        if self.print {
            let text = drift_text(&identity, &audit, &who);
            let _ = std::io::stdout().lock().write_all(text.as_bytes());
        }
        let encoded =
            drift_engine::record::audited(&self.id, &identity, &audit, who, SystemTime::now())
                .and_then(|record| record.encode().ok());
        self.write(encoded)
    }

    /// Writes an encoded record to the run's file, when there is one; a record over the size
    /// limit is counted, not written; a failed write aborts the run.
    fn write(&mut self, encoded: Option<Vec<u8>>) -> Result<(), AuditFileError> {
        if let Some(file) = &mut self.file
            && let Some(encoded) = encoded
        {
            if encoded.len() > Limits::default().record_bytes {
                self.too_large += 1;
                return Ok(());
            }
            file.write_record(&encoded)?;
            self.published += 1;
        }
        Ok(())
    }

    /// An object carrying the bypass annotation, honoured or not: printed and written to the
    /// run's file as a `bypass` record (reference §8 step 1), so that forgotten bypasses are
    /// found.
    fn list_bypass(
        &mut self,
        identity: &AuditedObject<'_>,
        audit: &drift_engine::Audit<'_>,
    ) -> Result<(), AuditFileError> {
        if let Some(since) = audit
            .bypass
            .as_ref()
            .filter(|b| b.read.is_ok())
            .and_then(|b| b.set_by.as_ref()?.time.as_deref())
            .and_then(drift_api::violation::parse_rfc3339)
        {
            let age = self.judged_at.duration_since(since).unwrap_or_default();
            self.oldest_bypass = self.oldest_bypass.max(age);
        }
        if self.print
            && let Some(text) = drift_engine::message::bypass_text(identity, audit)
        {
            let _ = std::io::stdout().lock().write_all(text.as_bytes());
        }
        let encoded =
            drift_engine::record::bypass_listed(&self.id, identity, audit, SystemTime::now())
                .and_then(|record| record.encode().ok());
        self.write(encoded)
    }
}

impl Auditor {
    /// The channel directory the admin `/violations` reads (the last run's).
    pub fn admin_dir(&self) -> Arc<arc_swap::ArcSwapOption<PathBuf>> {
        self.last_dir.clone()
    }

    /// Runs one audit; never fails — the outcome says what went wrong.
    pub async fn run(&self) -> RunOutcome {
        let started = Instant::now();
        let start = SystemTime::now();
        let snapshot = self.shared.snapshot();
        let base_id = humantime::format_rfc3339_seconds(start).to_string();
        let mut errors: Vec<String> = Vec::new();
        let files = match &self.export {
            Some(source) => match self.channel_files(source).await {
                Ok(files) => Some(files),
                Err(e) => {
                    errors.push(e);
                    None
                }
            },
            None => None,
        };
        let id = files
            .as_ref()
            .map_or_else(|| base_id.clone(), |f| f.unused_id(&base_id));
        let mut progress = Progress {
            snapshot: &snapshot,
            managers: &self.managers,
            id: id.clone(),
            file: None,
            reports: self
                .reports
                .then(|| Reports::signed_with(self.signing_key.clone())),
            counts: AuditCounts::default(),
            drifted_by_rule: BTreeMap::new(),
            oldest_bypass: std::time::Duration::ZERO,
            published: 0,
            too_large: 0,
            print: self.print,
            judged_at: start,
            now_seconds: start
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX)),
            warned: std::collections::BTreeSet::new(),
            who: match &self.attribution {
                Some(attributor) => Some(attributor.lock().await.start_run().await),
                None => None,
            },
            events: self.events.as_ref(),
        };
        let mut export_error = None;
        if let Some(files) = &files {
            match files.start(&id) {
                Ok(file) => progress.file = Some(file),
                Err(e) => export_error = Some(e.to_string()),
            }
        }
        if export_error.is_none()
            && let Err(e) = self.each_object(&mut progress).await
        {
            match e {
                RunError::Export(e) => export_error = Some(e.to_string()),
                RunError::Source(e) => errors.push(e),
            }
        }
        let mut published = false;
        if let Some(mut file) = progress.file.take() {
            if export_error.is_some() || !errors.is_empty() {
                file.abort();
            } else {
                match file.complete() {
                    Ok(_) => published = true,
                    Err(e) => export_error = Some(e.to_string()),
                }
            }
        }
        if let Some(files) = &files {
            self.finish_export(files, &progress, published, export_error.as_deref())
                .await;
        }
        errors.extend(export_error);
        let mut read = None;
        if let (Some(attributor), Some(evidence)) = (&self.attribution, progress.who.take()) {
            let mut attributor = attributor.lock().await;
            attributor.finish_run(evidence, errors.is_empty());
            read = Some(attributor.evidence());
        }
        if errors.is_empty()
            && let (Some(reports), Some(client)) = (&progress.reports, &self.client)
            && let Err(e) = reports::publish(client, reports).await
        {
            errors.push(format!("{e:#}"));
        }
        let outcome = RunOutcome {
            id,
            start,
            duration: started.elapsed(),
            counts: progress.counts,
            drifted_by_rule: progress.drifted_by_rule,
            oldest_bypass: progress.oldest_bypass,
            error: (!errors.is_empty()).then(|| errors.join("; ")),
            evidence: read,
        };
        self.record(&outcome);
        outcome
    }

    /// The Connection's channel directory, validated and created as the export module does.
    async fn channel_files(&self, source: &ConnectionSource) -> Result<AuditFiles, String> {
        let (found, uid) = match source {
            ConnectionSource::File(path) => {
                let found =
                    crate::export::connection::read_file(path).map_err(|e| format!("{e:#}"))?;
                (found, None)
            }
            ConnectionSource::Cluster(api, namespace) => {
                match api.get_opt(&self.connection_name).await {
                    Ok(Some(found)) => {
                        let uid = found.metadata.uid.clone();
                        (found, uid)
                    }
                    Ok(None) => {
                        let error = format!(
                            "Connection {namespace}/{} not found: create it (the chart does when enableViolationExport is true)",
                            self.connection_name
                        );
                        self.status
                            .set_connection(None, std::slice::from_ref(&error))
                            .await;
                        return Err(error);
                    }
                    Err(e) => {
                        return Err(format!(
                            "cannot read Connection {namespace}/{}: {e}",
                            self.connection_name
                        ));
                    }
                }
            }
        };
        let checked = crate::export::connection::check(&found, &self.target);
        self.status.set_connection(uid, &checked.errors).await;
        let dir = checked
            .channel_dir
            .ok_or_else(|| checked.errors.join("; "))?;
        self.last_dir.store(Some(Arc::new(dir.clone())));
        let max = found.spec.config.max_audit_results.unwrap_or(3);
        Ok(AuditFiles::new(
            dir,
            usize::try_from(max).unwrap_or(usize::MAX),
            Arc::new(StatvfsFreeSpace),
        ))
    }

    /// Retention, export metrics and the Connection's `source: audit` status, at the end of
    /// every exported run.
    async fn finish_export(
        &self,
        files: &AuditFiles,
        progress: &Progress<'_>,
        completed: bool,
        error: Option<&str>,
    ) {
        let metrics = &self.shared.metrics;
        metrics
            .export_published
            .with_label_values(&["audit"])
            .inc_by(if completed { progress.published } else { 0 });
        metrics
            .export_dropped
            .with_label_values(&["audit", "message_too_large"])
            .inc_by(progress.too_large);
        if !completed {
            metrics
                .export_dropped
                .with_label_values(&["audit", "publish_error"])
                .inc_by(progress.published);
        }
        let now = SystemTime::now();
        let mut problem = error.map(str::to_owned);
        if completed && let Err(e) = files.enforce_retention() {
            // After the rename: reported, the completed run stays.
            problem = Some(format!(
                "cannot remove old audit runs in {}: {e}",
                files.dir().display()
            ));
        }
        self.health
            .record_attempt(now, completed, problem.as_deref());
        if let Some(problem) = &problem {
            tracing::error!(error = %problem, "audit export failed");
        }
        self.status
            .report(Instant::now(), std::time::Duration::ZERO)
            .await;
    }

    /// Metrics and `/status` of a run.
    fn record(&self, outcome: &RunOutcome) {
        let metrics = &self.shared.metrics;
        let seconds = outcome
            .start
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        if outcome.error.is_none() {
            metrics.audit_last_run.set(seconds);
            metrics.audit_duration.set(outcome.duration.as_secs_f64());
            let c = outcome.counts;
            for (label, count) in [
                ("drifted", c.drifted),
                ("clean", c.clean),
                ("no_baseline", c.no_baseline),
                ("skipped", c.skipped),
            ] {
                metrics
                    .audit_objects
                    .with_label_values(&[label])
                    .set(i64::try_from(count).unwrap_or(i64::MAX));
            }
            // Rules that no longer drift go back to zero rather than keeping an old value; the
            // rules with the most drifted objects, the rest summed under `_other`.
            metrics.audit_drifted.reset();
            let by_rule = outcome
                .drifted_by_rule
                .iter()
                .map(|(rule, count)| (rule.as_str(), *count));
            for (rule, count) in largest(by_rule, crate::metrics::AUDIT_DRIFTED_RULES) {
                metrics
                    .audit_drifted
                    .with_label_values(&[&rule])
                    .set(i64::try_from(count).unwrap_or(i64::MAX));
            }
            metrics
                .audit_bypass_oldest
                .set(outcome.oldest_bypass.as_secs_f64().floor());
            for (end, count) in c.bypassed.by_end() {
                metrics
                    .audit_bypassed
                    .with_label_values(&[end])
                    .set(i64::try_from(count).unwrap_or(i64::MAX));
            }
        }
        if let Some(evidence) = &outcome.evidence {
            metrics.set_audit_unverified(evidence);
        }
        self.runs.record(AuditRun {
            id: outcome.id.clone(),
            start: format_rfc3339(outcome.start),
            duration_seconds: outcome.duration.as_secs_f64(),
            counts: outcome.counts,
            error: outcome.error.clone(),
            // Set from the previous run when this one failed.
            last_completed: None,
            evidence: outcome.evidence.clone(),
        });
    }

    /// Every object: the files' offline, the listed resources' in a cluster.
    async fn each_object(&self, progress: &mut Progress<'_>) -> Result<(), RunError> {
        if !self.objects.is_empty() {
            let files = drift_load::files(&self.objects, drift_load::YAML_OR_JSON)
                .map_err(|e| RunError::Source(format!("{e:#}")))?;
            for file in files {
                let documents = drift_load::read_documents(&file)
                    .map_err(|e| RunError::Source(format!("{e:#}")))?;
                for object in documents {
                    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
                    let resource = drift_engine::manifests::resource_of(kind);
                    progress
                        .audit_one(&object, &resource)
                        .map_err(RunError::Export)?;
                }
            }
            return Ok(());
        }
        let Some(client) = &self.client else {
            return Ok(());
        };
        let listed = objects::resolve(client, &progress.snapshot.rules, &self.webhook_resources)
            .await
            .map_err(|e| RunError::Source(format!("{e:#}")))?;
        for resource in &listed {
            objects::list(client, resource, self.chunk, |listed, object| {
                progress.audit_one(&object, &listed.resource.plural)
            })
            .await
            .map_err(|e| RunError::Source(format!("{e:#}")))?
            .map_err(RunError::Export)?;
        }
        Ok(())
    }
}

enum RunError {
    Export(AuditFileError),
    Source(String),
}
