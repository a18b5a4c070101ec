//! The texts a user sees, rendered from an [`Evaluation`]: the violation reason (SPEC §3 step 9),
//! the warnings, the status message, and the admission response itself — each bounded whatever
//! the size of the diff (SPEC §5).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use crate::evaluation::{BadRequest, Evaluation, JudgedChange, NoMatch, Outcome, Step, Verdict};
use crate::review::{AdmissionResponse, ResponseStatus};
use crate::rule::{CompiledRule, MODE_ANNOTATION};

/// The fixed beginning of every violation message.
pub const VIOLATION_PREFIX: &str = "Drift Sentinel: immutable fields changed: ";
/// The fixed beginning of every audit finding (SPEC §8): the live object differs from what was
/// declared for it.
pub const DRIFT_PREFIX: &str = "Drift Sentinel: drift from the declared state: ";
/// The beginning of an audit finding on an object whose baseline an imperative edit rewrote
/// (`kubectl replace`): the declared values of the fields such edits own are unknown.
pub fn rewritten_baseline_prefix(edit: &crate::evaluation::ImperativeEdit<'_>) -> String {
    format!(
        "Drift Sentinel: drift from the declared state ({edit} rewrote the {} baseline, so every field an imperative edit owns is drift): ",
        crate::baseline::LAST_APPLIED_ANNOTATION
    )
}
/// How many uncovered paths a reason names.
pub const MAX_PATHS_NAMED: usize = 20;
/// How many changes a reason shows values for.
pub const MAX_VALUES_SHOWN: usize = 10;
/// Values in reasons are cut to this many characters.
pub const MAX_VALUE_CHARS: usize = 64;
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
/// `judged` and `denied` are the first changes and uncovered paths in byte order (all of them,
/// or as many as the evaluation kept); `denied_count` and `uncovered_count` count them all.
pub(crate) fn violation_reason(
    rule: &CompiledRule,
    judged: &[JudgedChange<'_>],
    denied: &[String],
    denied_count: usize,
    uncovered_count: usize,
    prefix: &str,
) -> String {
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
    let _ = write!(
        message,
        "; rule {} allows changes only to: {}; to bypass, set annotation {}: \"true\" on the object",
        rule.id, rule.mutable_text, rule.bypass
    );
    truncate_bytes(&message, MAX_TEXT_BYTES)
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
            _ => match self.violation() {
                Some(violation) => violation.reason.clone(),
                None => self.step().reason().to_owned(),
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

    /// The warnings kubectl shows: a warn-mode violation (first), and an ignored namespace
    /// mode annotation.
    pub fn warnings(&self) -> Vec<String> {
        let Some(matched) = self.matched() else {
            return Vec::new();
        };
        let mut warnings = Vec::new();
        if self.verdict() == Some(Verdict::Warned) {
            warnings.push(truncate_bytes(&self.reason(), MAX_WARNING_BYTES));
        }
        if let Some(ignored) = matched.ignored_mode_annotation {
            let warning = format!(
                "Drift Sentinel: namespace {:?} has an invalid {MODE_ANNOTATION} annotation {:?} (expected one of enforce, warn, dry-run, off); it is ignored and rule {} applies its mode {}",
                ignored.namespace, ignored.value, matched.rule.id, matched.rule.mode
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
            audit_annotations.insert("rule".to_owned(), matched.rule.id.to_string());
            audit_annotations.insert("mode".to_owned(), matched.mode.as_str().to_owned());
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

/// A value for a message: compact JSON, `<absent>` for a missing side, cut to 64 characters.
pub fn display_value(value: Option<&Value>) -> String {
    match value {
        None => "<absent>".to_owned(),
        Some(value) => truncate_chars(&value.to_string(), MAX_VALUE_CHARS),
    }
}

/// Cuts `text` to at most `max` characters, the last being `…` when cut.
pub fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some(_) => {
            let keep = max.saturating_sub(1);
            let end = text.char_indices().nth(keep).map_or(text.len(), |(i, _)| i);
            let mut out = String::with_capacity(end + 3);
            out.push_str(&text[..end]);
            out.push('…');
            out
        }
    }
}

/// Cuts `text` to at most `max` bytes, the `…` included, on a character boundary.
pub fn truncate_bytes(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let ellipsis = '…';
    let mut end = max.saturating_sub(ellipsis.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = String::with_capacity(end + ellipsis.len_utf8());
    out.push_str(&text[..end]);
    out.push(ellipsis);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_the_limit() {
        assert_eq!(truncate_chars("abcdef", 6), "abcdef");
        assert_eq!(truncate_chars("abcdefg", 6), "abcde…");
        assert_eq!(truncate_chars("ééééééé", 6).chars().count(), 6);
        assert_eq!(truncate_chars("", 0), "");
        assert_eq!(truncate_bytes("abcdef", 6), "abcdef");
        let cut = truncate_bytes("abcdefghij", 6);
        assert!(cut.len() <= 6 && cut.ends_with('…'), "{cut}");
        let cut = truncate_bytes(&"é".repeat(600), 512);
        assert!(cut.len() <= 512, "{}", cut.len());
    }
}
