//! `kubectl drift`: tells a person why an edit is, or would be, denied. Every verdict it shows
//! comes from `drift-engine`, the same code the agent runs, so the two never disagree.
//!
//! The command line ([`cli`]) is checked once into a [`plan::Plan`]; each command then runs in
//! its mode: offline (`preview --rules --old --new`, `explain --rules -f`, `audit --rules -f`:
//! rules and objects from files, [`offline`]) or against the cluster ([`live`], [`audit`],
//! [`status`], [`tail`]: its rule
//! ConfigMaps, the live object, the namespace's mode annotation, the agent pods). One tokio
//! runtime runs every command; the agents' admin APIs are reached with one HTTP client
//! ([`http`]) over TCP or a pod port-forward ([`cluster::forward`]).

mod audit;
mod bypass;
pub mod cli;
mod cluster;
mod complete;
mod http;
mod live;
mod offline;
mod plan;
mod render;
mod status;
mod tail;

use std::time::SystemTime;

use drift_engine::review::{AdmissionRequest, parse_review, update_review};
use drift_engine::{Context, Detail, Evaluation, evaluate};
use serde_json::Value;

pub use complete::kubectl_complete;

use crate::cli::Cli;
use crate::offline::LoadedRules;
use crate::plan::{Explain, Plan, Preview, Print};

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

    fn of(evaluation: &Evaluation<'_>) -> Self {
        match evaluation.verdict() {
            _ if !evaluation.allowed() => Verdict::Denied,
            Some(drift_engine::Verdict::Warned | drift_engine::Verdict::WouldDeny) => {
                Verdict::ViolationAllowed
            }
            _ => Verdict::Allowed,
        }
    }
}

/// Runs the command line: checks it, then runs the command. An error is a usage, input or
/// cluster error (exit 2).
pub async fn run(cli: Cli) -> anyhow::Result<Verdict> {
    match Plan::of(cli, SystemTime::now())? {
        Plan::Preview(Preview::Offline(plan), print) => offline::preview(&plan, print),
        Plan::Explain(Explain::Offline(plan), print) => offline::explain(&plan, print),
        Plan::Preview(Preview::Cluster(plan), print) => live::preview(&plan, print).await,
        Plan::Explain(Explain::Cluster(plan), print) => live::explain(&plan, print).await,
        Plan::Status(plan, print) => status::run(&plan, print).await,
        Plan::Audit(plan, print) => audit::run(&plan, print).await,
        Plan::Bypass(plan, print) => bypass::run(&plan, print).await,
        Plan::Tail(plan) => tail::run(plan).await,
        Plan::Completion(shell) => {
            complete::script(shell, &mut std::io::stdout().lock())?;
            Ok(Verdict::Allowed)
        }
    }
}

/// The innermost cause of an error, which is the one worth showing ("Connection refused (os
/// error 111)" rather than "error sending request").
pub(crate) fn innermost(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// The request an UPDATE of `old` into `new` would send.
fn request_for(old: Value, new: Value, user: &str) -> anyhow::Result<AdmissionRequest> {
    let review = update_review(old, new, user, "kubectl-drift-preview")?;
    let body = serde_json::to_vec(&review)?;
    let parsed = parse_review(&body).map_err(|e| anyhow::anyhow!(e.0))?;
    parsed.request.map_err(anyhow::Error::msg)
}

/// An UPDATE judged by `drift-engine`: the verdict and what `preview` prints of it.
pub(crate) struct Judged {
    pub verdict: Verdict,
    /// For `-o json|yaml`.
    pub document: Value,
    /// For `-o text`.
    pub screen: String,
}

/// Judges `request` (an UPDATE) against `rules` with the namespace's mode annotation, as the
/// agent would.
pub(crate) fn judge(
    rules: &LoadedRules,
    request: &AdmissionRequest,
    namespace_mode: Option<&str>,
    print: Print,
) -> Judged {
    let context = Context {
        namespace_mode,
        parent_labels: None,
        now: std::time::SystemTime::now(),
    };
    let evaluation = evaluate(&rules.set, request, &context, Detail::Full);
    let verdict = Verdict::of(&evaluation);
    let style = render::Style::new(print.colour);
    let (document, screen) = render::preview_parts(request, &evaluation, rules, verdict, &style);
    Judged {
        verdict,
        document,
        screen,
    }
}
