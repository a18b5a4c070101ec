//! The texts a user sees, rendered from an [`Evaluation`]: the violation reason (reference §3 step 9),
//! the warnings, the status message, and the admission response itself — each bounded whatever
//! the size of the diff (reference §5).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::audit::{Audit, AuditComparison, AuditResult, AuditedObject, BypassFinding};
use crate::baseline::LAST_APPLIED_ANNOTATION;
use crate::bypass::{Bypass, BypassRefusal};
use crate::evaluation::{
    BadRequest, Comparison, Evaluation, ImperativeEdit, JudgedChange, NoMatch, Outcome, Settled,
    Step, Verdict, Violation,
};
use crate::json::LazyValue;
use crate::review::{AdmissionResponse, ResponseStatus};
use crate::rule::{CompiledRule, MODE_ANNOTATION};
use crate::time::{format_rfc3339_seconds, human_duration};
use crate::truncate::truncate_bytes;

/// The fixed beginning of every violation message.
pub const VIOLATION_PREFIX: &str = "Drift Sentinel: immutable fields changed: ";
/// The fixed beginning of every audit finding (reference §8): the live object differs from what was
/// declared for it.
pub const DRIFT_PREFIX: &str = "Drift Sentinel: drift from the declared state: ";
/// How many uncovered paths a reason names.
pub const MAX_PATHS_NAMED: usize = 20;
/// How many changes a reason shows values for.
pub const MAX_VALUES_SHOWN: usize = 10;
/// Values in reasons are cut to this many characters.
pub const MAX_VALUE_CHARS: usize = 64;
/// Texts list at most this many drifted paths, as records carry at most this many changes.
pub use drift_api::violation::MAX_DETAILED_CHANGES;
/// A warning is cut to this many bytes, `…` included.
pub const MAX_WARNING_BYTES: usize = 512;
/// How many paths the `denied-paths` audit annotation lists.
pub const MAX_ANNOTATED_PATHS: usize = 20;
/// The reason and the `denied-paths` annotation are each cut to this many bytes, so that the
/// whole response stays under 64 KiB whatever the paths (keys of any length) look like.
const MAX_TEXT_BYTES: usize = 16 * 1024;

/// The violation reason: fixed prefix, at most [`MAX_PATHS_NAMED`] uncovered paths, values for
/// at most [`MAX_VALUES_SHOWN`], then the rule and how to bypass it.
///
/// The comparison holds the first changes and uncovered paths in byte order (all of them, or
/// as many as the evaluation kept) and counts them all.
pub(crate) fn violation_reason(
    rule: &CompiledRule,
    comparison: &Comparison<'_>,
    violation: &Violation,
    prefix: &str,
    refused_bypass: Option<&dyn std::fmt::Display>,
) -> String {
    let (judged, denied) = (&comparison.changes, &violation.denied);
    let (denied_count, uncovered_count) = (violation.denied_count, comparison.uncovered_count);
    let mut message = String::with_capacity(256);
    message.push_str(prefix);
    message.push_str(&denied[..denied.len().min(MAX_PATHS_NAMED)].join(", "));
    let named = denied.len().min(MAX_PATHS_NAMED);
    if denied_count > named {
        let _ = write!(message, " … and {} more", denied_count - named);
    }
    let uncovered = judged.iter().filter(|c| !c.mutable);
    let mut shown = 0;
    for change in uncovered.clone().take(MAX_VALUES_SHOWN) {
        shown += 1;
        message.push_str("; ");
        message.push_str(&change.text());
    }
    let remaining = uncovered_count.saturating_sub(shown);
    if remaining > 0 {
        let _ = write!(message, "; and {remaining} more");
    }
    if let Some(refusal) = refused_bypass {
        let _ = write!(
            message,
            "; annotation {} is no bypass: {refusal}",
            rule.bypass
        );
    }
    let _ = write!(
        message,
        "; rule {} allows changes only to: {}; {}",
        rule.id,
        rule.mutable_text,
        bypass_hint(rule)
    );
    truncate_bytes(&message, MAX_TEXT_BYTES)
}

/// How to bypass a rule for a while (the end of every violation reason).
fn bypass_hint(rule: &CompiledRule) -> String {
    match rule.max_bypass {
        Some(max) => format!(
            "to bypass, set annotation {} to an RFC 3339 end at most {} ahead (kubectl drift bypass KIND/NAME --for DURATION)",
            rule.bypass,
            human_duration(max)
        ),
        None => format!(
            "to bypass, set annotation {} to an RFC 3339 end (kubectl drift bypass KIND/NAME --for DURATION), or \"true\" for no end",
            rule.bypass
        ),
    }
}

/// Why a bypass annotation is not honoured, for reasons and warnings: as the webhook says it at
/// the moment of an edit, with how long ago its end passed or how far ahead it is.
impl std::fmt::Display for BypassRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_refusal(f, self, Clock::Relative)
    }
}

/// `bypass until 2026-12-10T18:00:00Z, in 2d4h` or `bypass without an end`.
impl std::fmt::Display for Bypass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_bypass(f, self, Clock::Relative)
    }
}

/// A bypass the audit found: `bypass until 2026-12-10T18:00:00Z (set by kubectl-annotate at T)`,
/// or why it is none. Absolute times only ([`Clock::Absolute`]): the audit's texts are kept (its
/// export, its Report, whose reader derives a result's id from the message), so the same
/// finding reads the same on every run.
impl std::fmt::Display for BypassFinding<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.read {
            Ok(bypass) => write_bypass(f, bypass, Clock::Absolute)?,
            Err(refusal) => {
                f.write_str("no bypass: ")?;
                write_refusal(f, refusal, Clock::Absolute)?;
            }
        }
        match (&self.user, &self.set_by, &self.user_unknown) {
            (Some(user), Some(edit), _) => write!(f, " (set by user {user} with {edit})"),
            (None, Some(edit), Some(why)) => write!(f, " (set by {edit}; user unknown: {why})"),
            (None, Some(edit), None) => write!(f, " (set by {edit})"),
            (_, None, _) => Ok(()),
        }
    }
}

/// How a text places a bypass end in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Clock {
    /// Also relative to when it was read (`in 4h`, `passed 10m ago`): what the webhook says to
    /// whoever makes an edit, now.
    Relative,
    /// The RFC 3339 time alone: what the audit keeps, the same on every run.
    Absolute,
}

fn write_bypass(
    f: &mut std::fmt::Formatter<'_>,
    bypass: &Bypass,
    clock: Clock,
) -> std::fmt::Result {
    match (bypass.end, bypass.remaining()) {
        (Some(end), Some(left)) if clock == Clock::Relative => write!(
            f,
            "bypass until {}, in {}",
            format_rfc3339_seconds(end),
            human_duration(left)
        ),
        (Some(end), _) => write!(f, "bypass until {}", format_rfc3339_seconds(end)),
        (None, _) => f.write_str("bypass without an end"),
    }
}

fn write_refusal(
    f: &mut std::fmt::Formatter<'_>,
    refusal: &BypassRefusal,
    clock: Clock,
) -> std::fmt::Result {
    match refusal {
        BypassRefusal::Expired { end, now } => match clock {
            Clock::Relative => write!(
                f,
                "its end {} passed {} ago",
                format_rfc3339_seconds(*end),
                human_duration(now.duration_since(*end).unwrap_or_default())
            ),
            Clock::Absolute => write!(f, "its end {} has passed", format_rfc3339_seconds(*end)),
        },
        BypassRefusal::Invalid { value } => write!(
            f,
            "{value:?} is neither \"true\" nor an RFC 3339 time such as 2026-12-10T18:00:00Z"
        ),
        BypassRefusal::NoEndUnderMax { max } => write!(
            f,
            "\"true\" has no end, and the rule's maxBypass allows at most {} ahead",
            human_duration(*max)
        ),
        BypassRefusal::BeyondMax { end, now, max } => match clock {
            Clock::Relative => write!(
                f,
                "its end {} is {} ahead, more than the rule's maxBypass of {}",
                format_rfc3339_seconds(*end),
                human_duration(end.duration_since(*now).unwrap_or_default()),
                human_duration(*max)
            ),
            Clock::Absolute => write!(
                f,
                "its end {} is further ahead than the rule's maxBypass of {}",
                format_rfc3339_seconds(*end),
                human_duration(*max)
            ),
        },
    }
}

/// A refused bypass in the audit's reason: without the time of the run.
struct AbsoluteRefusal<'r>(&'r BypassRefusal);

impl std::fmt::Display for AbsoluteRefusal<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_refusal(f, self.0, Clock::Absolute)
    }
}

/// The audit's finding (reference §8): the drifted paths and values as a violation reason shows
/// them, beginning with what the object drifted from — its declared state, or, when an
/// imperative edit rewrote the baseline, the fields such edits own.
pub(crate) fn drift_reason(
    rule: &CompiledRule,
    compared: &AuditComparison<'_>,
    violation: &Violation,
    refused_bypass: Option<&BypassRefusal>,
) -> String {
    let prefix = match &compared.baseline_rewritten_by {
        None => DRIFT_PREFIX.to_owned(),
        Some(edit) => format!(
            "Drift Sentinel: drift from the declared state ({edit} rewrote the {} baseline, so every field an imperative edit owns is drift): ",
            LAST_APPLIED_ANNOTATION
        ),
    };
    // The audit's reason is kept (export, Report): its refused bypass without the run's time.
    let refusal = refused_bypass.map(AbsoluteRefusal);
    violation_reason(
        rule,
        &compared.comparison,
        violation,
        &prefix,
        refusal.as_ref().map(|r| r as &dyn std::fmt::Display),
    )
}

impl JudgedChange<'_> {
    /// `path: old → new`, then who changed it when an imperative edit did: how a message, the
    /// audit's text and the plugin show one change. Values are cut to
    /// [`MAX_VALUE_CHARS`] characters.
    pub fn text(&self) -> String {
        let old = match &self.change.old {
            None if self.declared_unknown => "<unknown>".to_owned(),
            old => display_value(old.as_ref()),
        };
        let mut text = format!(
            "{}: {old} → {}",
            self.path,
            display_value(self.change.new.as_ref())
        );
        if let Some(edit) = &self.edit {
            use std::fmt::Write as _;
            let _ = write!(text, " (by {edit})");
        }
        text
    }
}

/// `kubectl-set at 2026-07-28T12:00:00Z`, or the manager alone when its entry has no time.
impl std::fmt::Display for ImperativeEdit<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.manager)?;
        match &self.time {
            Some(time) => write!(f, " at {time}"),
            None => Ok(()),
        }
    }
}

impl Audit<'_> {
    /// The reason: the drift's, or what the result says.
    pub fn reason(&self) -> String {
        match &self.result {
            AuditResult::Skipped(why) => format!("skipped: {why}"),
            AuditResult::NoBaseline => format!(
                "no baseline: no {LAST_APPLIED_ANNOTATION} annotation and no field changed by an imperative edit"
            ),
            AuditResult::Clean(c) if c.comparison.changes.is_empty() => {
                "no drift from the declared state".to_owned()
            }
            AuditResult::Clean(_) => "only mutable fields drifted".to_owned(),
            AuditResult::Drifted(c) => match (self.rule(), &c.comparison.violation) {
                (Some(rule), Some(violation)) => drift_reason(
                    rule,
                    c,
                    violation,
                    self.bypass.as_ref().and_then(|b| b.read.as_ref().err()),
                ),
                _ => String::new(),
            },
        }
    }
}

impl Evaluation<'_> {
    /// The reason: the violation message, why the request is bad, or the allowing step's text.
    pub fn reason(&self) -> String {
        match &self.outcome {
            Outcome::BadRequest(BadRequest::ObjectsMissing { object, old_object }) => {
                let which = match (object, old_object) {
                    (true, true) => "object and oldObject are",
                    (true, false) => "object is",
                    _ => "oldObject is",
                };
                format!("UPDATE request {which} missing or not a JSON object")
            }
            Outcome::BadRequest(BadRequest::KindMissing) => {
                "UPDATE request has no kind: it cannot be matched against rules".to_owned()
            }
            Outcome::NoMatch(NoMatch::ScaleOfUnknownResource(resource)) => format!(
                "{} (scale of resource {resource:?} is not enforced)",
                Step::NoMatchingRule.reason()
            ),
            _ => match (self.matched(), self.comparison(), self.violation()) {
                (Some(matched), Some(comparison), Some(violation)) => self
                    .rendered_reason
                    .get_or_init(|| {
                        violation_reason(
                            matched.winner.rule,
                            comparison,
                            violation,
                            VIOLATION_PREFIX,
                            matched
                                .bypass
                                .as_ref()
                                .and_then(|b| b.as_ref().err())
                                .map(|r| r as &dyn std::fmt::Display),
                        )
                    })
                    .clone(),
                _ => self.step().reason().to_owned(),
            },
        }
    }

    /// The message an enforcing webhook returns, the warning, or the logged line.
    pub fn status_message(&self) -> String {
        match self.verdict() {
            Some(Verdict::WouldDeny) => format!("would deny: {}", self.reason()),
            _ => self.reason(),
        }
    }

    /// The warnings kubectl shows: a warn-mode violation (first); the bypass that allowed the
    /// edit and when it ends, or, on an allowed edit, why the bypass annotation is none (a
    /// bypass is meant to end: whoever set it sees so on every edit); and an ignored namespace
    /// mode annotation.
    pub fn warnings(&self) -> Vec<String> {
        let Some(matched) = self.matched() else {
            return Vec::new();
        };
        let mut warnings = Vec::new();
        if self.verdict() == Some(Verdict::Warned) {
            warnings.push(truncate_bytes(&self.reason(), MAX_WARNING_BYTES));
        }
        let bypass_warning = match (&matched.settled, &matched.bypass) {
            (Settled::Bypassed(bypass), _) => Some(format!(
                "Drift Sentinel: {bypass}: rule {} does not judge edits of this object while annotation {} is set",
                matched.winner.rule.id, matched.winner.rule.bypass
            )),
            // A denial's reason says it already.
            (_, Some(Err(refusal))) if self.allowed() && !self.is_violation() => Some(format!(
                "Drift Sentinel: annotation {} is no bypass: {refusal}; rule {} judges edits of this object",
                matched.winner.rule.bypass, matched.winner.rule.id
            )),
            _ => None,
        };
        if let Some(warning) = bypass_warning {
            warnings.push(truncate_bytes(&warning, MAX_WARNING_BYTES));
        }
        if let Some(ignored) = matched.winner.ignored_mode_annotation {
            let warning = format!(
                "Drift Sentinel: namespace {:?} has an invalid {MODE_ANNOTATION} annotation {:?} (expected one of enforce, warn, dry-run, off); it is ignored and rule {} applies its mode {}",
                ignored.namespace, ignored.value, matched.winner.rule.id, matched.winner.rule.mode
            );
            warnings.push(truncate_bytes(&warning, MAX_WARNING_BYTES));
        }
        warnings
    }

    /// The `denied-paths` audit annotation: at most [`MAX_ANNOTATED_PATHS`] paths, then
    /// `, … (N more)`.
    pub fn denied_paths_annotation(&self) -> String {
        let denied = self.denied_paths();
        let listed = denied.len().min(MAX_ANNOTATED_PATHS);
        let mut text = denied[..listed].join(", ");
        let total = self.violation().map_or(0, |v| v.denied_count);
        if total > listed {
            let _ = write!(text, ", … ({} more)", total - listed);
        }
        truncate_bytes(&text, MAX_TEXT_BYTES)
    }

    /// The `response` of the AdmissionReview.
    pub fn response(&self, uid: &str) -> AdmissionResponse {
        let allowed = self.allowed();
        let (code, reason) = match (&self.outcome, allowed) {
            (_, true) => (200, None),
            (Outcome::BadRequest(_), false) => (400, Some("BadRequest")),
            (_, false) => (403, Some("Forbidden")),
        };
        let mut audit_annotations = BTreeMap::new();
        if let (Some(matched), Some(verdict)) = (self.matched(), self.verdict()) {
            audit_annotations.insert("rule".to_owned(), matched.winner.rule.id.to_string());
            audit_annotations.insert("mode".to_owned(), matched.winner.mode.as_str().to_owned());
            audit_annotations.insert("result".to_owned(), verdict.as_str().to_owned());
            if self.is_violation() {
                audit_annotations.insert("denied-paths".to_owned(), self.denied_paths_annotation());
            }
        }
        AdmissionResponse {
            uid: uid.to_owned(),
            allowed,
            status: ResponseStatus {
                status: if allowed { "Success" } else { "Failure" },
                code,
                reason,
                message: self.status_message(),
            },
            warnings: self.warnings(),
            audit_annotations,
        }
    }
}

/// A value for a message: compact JSON, `<absent>` for a missing side, cut to 64 characters
/// (never built whole to be cut: [`LazyValue::shown`]).
pub fn display_value(value: Option<&LazyValue<'_>>) -> String {
    match value {
        None => "<absent>".to_owned(),
        Some(value) => value.shown(MAX_VALUE_CHARS),
    }
}

/// A drifted object as text: `drifted apps/v1 Deployment shop/web (rule ops/web, enforce)`,
/// then one indented line per drifted path — declared → live, and who changed it (the field
/// manager, and its time when managedFields has one). At most [`MAX_DETAILED_CHANGES`] paths,
/// then how many more; values are cut as the engine's messages cut them. Then who made each
/// drifted field and why (`  who: spec.replicas: user alice, warn mode`, reference §8 "Who and
/// why"), as the agent's audit and `kubectl drift audit` print them.
pub fn drift_text(
    identity: &AuditedObject<'_>,
    audit: &Audit<'_>,
    who: &[drift_api::events::FieldAttribution],
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "drifted {} {} {} (rule {}, {})",
        identity.api_version,
        identity.kind,
        identity.display_name(),
        audit.rule().map(|r| r.id.to_string()).unwrap_or_default(),
        audit.mode().map_or("", |m| m.as_str()),
    );
    let drifted: Vec<_> = audit.changes().iter().filter(|c| !c.mutable).collect();
    for change in drifted.iter().take(MAX_DETAILED_CHANGES) {
        let _ = writeln!(out, "  {}", change.text());
    }
    if drifted.len() > MAX_DETAILED_CHANGES {
        let _ = writeln!(out, "  … and {} more", drifted.len() - MAX_DETAILED_CHANGES);
    }
    for field in who {
        let _ = writeln!(out, "  who: {field}");
    }
    out
}

/// An object carrying the bypass annotation as one line: `bypass apps/v1 Deployment shop/web
/// (rule ops/web): bypass until 2026-12-10T18:00:00Z, in 4h (set by kubectl-annotate at T)`,
/// or what it is when it is no bypass. `None` without the annotation.
pub fn bypass_text(identity: &AuditedObject<'_>, audit: &Audit<'_>) -> Option<String> {
    let finding = audit.bypass.as_ref()?;
    Some(format!(
        "bypass {} {} {} (rule {}): {}\n",
        identity.api_version,
        identity.kind,
        identity.display_name(),
        audit.rule().map(|r| r.id.to_string()).unwrap_or_default(),
        truncate_bytes(&finding.to_string(), MAX_WARNING_BYTES),
    ))
}
