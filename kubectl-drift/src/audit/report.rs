//! One audit run: the rules and namespaces it judges with, each object judged as it is read
//! ([`Run`]), and what it found ([`Report`]), offline or against the cluster.

use std::time::SystemTime;

use drift_api::status::AuditCounts;
use drift_engine::RuleSet;
use drift_engine::audit::AuditedObject;
use drift_engine::manifests::Namespaces;
use drift_engine::message::{bypass_text, drift_text};
use drift_engine::who::RunEvidence;
use serde::Serialize;
use serde_json::Value;

/// What a run found, as `-o json|yaml` prints it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Report {
    /// The run's id (its start, as the agent names its runs): the `id` of its records.
    pub id: String,
    /// The namespace audited; `None` for every namespace (`-A`, or offline without `-n`).
    pub namespace: Option<String>,
    pub counts: AuditCounts,
    /// One `violation_audited` record per drifted object, as the agent exports them.
    pub drifted: Vec<Value>,
    /// One `bypass` record per object carrying the bypass annotation, honoured or not (its end
    /// or none, who set it and since when), as the agent exports them (reference §8 step 1).
    pub bypassed: Vec<Value>,
    /// Text of each bypassed and drifted object in the order judged, for `-o text`.
    #[serde(skip)]
    pub text: Vec<Printed>,
}

/// One object's text, and what its first word is.
#[derive(Debug)]
pub(super) struct Printed {
    pub text: String,
    pub found: Found,
}

/// What a printed text reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Found {
    /// The object drifted, under a rule in mode `enforce` (or another mode).
    Drifted { enforce: bool },
    /// The object carries the bypass annotation.
    Bypass,
}

/// A run in progress: the rules and namespaces it judges with, and what it found.
pub(super) struct Run<'r> {
    rules: &'r RuleSet,
    namespaces: &'r Namespaces,
    managers: &'r [String],
    report: Report,
    /// Against the cluster: who made the drifted fields and who set the bypasses (reference §8
    /// "Who and why"), as the agent's audit tells them.
    who: Option<RunEvidence>,
}

impl<'r> Run<'r> {
    pub(super) fn new(
        rules: &'r RuleSet,
        namespaces: &'r Namespaces,
        managers: &'r [String],
        namespace: Option<String>,
    ) -> Self {
        Run {
            rules,
            namespaces,
            managers,
            report: Report {
                id: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
                namespace,
                counts: AuditCounts::default(),
                drifted: Vec::new(),
                bypassed: Vec::new(),
                text: Vec::new(),
            },
            who: None,
        }
    }

    /// Tells who made each drifted field and who set each bypass from `evidence`.
    pub(super) fn with_who(mut self, evidence: RunEvidence) -> Self {
        self.who = Some(evidence);
        self
    }

    /// What the run found.
    pub(super) fn into_report(self) -> Report {
        self.report
    }

    /// Judges one object of `resource` (its plural), keeping what a drifted one shows.
    pub(super) fn audit_one(&mut self, object: &Value, resource: &str) {
        let Some(mut audit) = drift_engine::audit::audit_object(
            self.rules,
            self.namespaces,
            object,
            self.managers,
            SystemTime::now(),
        ) else {
            return;
        };
        drift_engine::record::count(&mut self.report.counts, &audit);
        let identity = AuditedObject::of(object, resource);
        let who = match &mut self.who {
            Some(evidence) => evidence.judge(object, &identity, &mut audit).fields,
            None => Vec::new(),
        };
        // Listed first, as the agent prints them.
        if let Some(text) = bypass_text(&identity, &audit)
            && let Some(record) = drift_engine::record::bypass_listed(
                &self.report.id,
                &identity,
                &audit,
                SystemTime::now(),
            )
            && let Ok(value) = serde_json::to_value(&record)
        {
            self.report.bypassed.push(value);
            self.report.text.push(Printed {
                text,
                found: Found::Bypass,
            });
        }
        if !audit.is_drifted() {
            return;
        }
        // A drifted object always has a record (its mode is not off); text and record go
        // together so that `-o text` and `-o json` show the same objects.
        let text = drift_text(&identity, &audit, &who);
        if let Some(record) = drift_engine::record::audited(
            &self.report.id,
            &identity,
            &audit,
            who,
            SystemTime::now(),
        ) && let Ok(value) = serde_json::to_value(&record)
        {
            self.report.drifted.push(value);
            self.report.text.push(Printed {
                text,
                found: Found::Drifted {
                    enforce: audit.mode() == Some(drift_engine::rule::Mode::Enforce),
                },
            });
        }
    }
}
