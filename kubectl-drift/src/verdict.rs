//! What the webhook would decide about an UPDATE, and what that makes a command conclude: the
//! request the API server would send the webhook ([`request_for`]), its evaluation by
//! `drift-engine` with the namespace's mode annotation, as the agent evaluates it
//! ([`evaluate_update`]), and the [`Verdict`], which decides the exit code.

use std::time::SystemTime;

use drift_engine::review::{AdmissionRequest, parse_review, update_review};
use drift_engine::{Context, Detail, Evaluation, RuleSet, evaluate};
use serde_json::Value;

/// The name of the webhook in the chart's ValidatingWebhookConfiguration, as the API server
/// quotes it in a denial.
pub(crate) const WEBHOOK_NAME: &str = "validate.drift-sentinel.k8s.io";

/// What a command concluded; decides the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed, no violation.
    Allowed,
    /// Would be denied.
    Denied,
    /// A violation that a non-enforcing mode allows (warn, dry-run).
    ViolationAllowed,
}

impl Verdict {
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Allowed => 0,
            Verdict::Denied => 1,
            Verdict::ViolationAllowed => 3,
        }
    }

    /// The verdict on an evaluated update: denied, a violation a non-enforcing mode allows, or
    /// allowed.
    pub(crate) fn of(evaluation: &Evaluation<'_>) -> Self {
        match evaluation.verdict() {
            _ if !evaluation.allowed() => Verdict::Denied,
            Some(drift_engine::Verdict::Warned | drift_engine::Verdict::WouldDeny) => {
                Verdict::ViolationAllowed
            }
            _ => Verdict::Allowed,
        }
    }
}

/// The request an UPDATE of `old` into `new` would send.
pub(crate) fn request_for(old: Value, new: Value, user: &str) -> anyhow::Result<AdmissionRequest> {
    let review = update_review(old, new, user, "kubectl-drift-preview")?;
    let body = serde_json::to_vec(&review)?;
    let parsed = parse_review(&body).map_err(|e| anyhow::anyhow!(e.0))?;
    parsed.request.map_err(anyhow::Error::msg)
}

/// Evaluates `request` (an UPDATE) against `rules` with the namespace's mode annotation, as the
/// agent would, in full detail (every rule considered, the excluded changes kept) for the
/// screens of `preview` and `explain`.
pub(crate) fn evaluate_update<'a>(
    rules: &'a RuleSet,
    request: &'a AdmissionRequest,
    namespace_mode: Option<&'a str>,
) -> Evaluation<'a> {
    let context = Context {
        namespace_mode,
        parent_labels: None,
        now: SystemTime::now(),
    };
    evaluate(rules, request, &context, Detail::Full)
}
