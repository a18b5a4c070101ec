//! `kubectl drift`: tells a person why an edit is, or would be, denied. Every verdict it shows
//! comes from `drift-engine`, the same code the agent runs, so the two never disagree.
//!
//! Offline (`preview --rules --old --new`, `explain --rules -f`) the rules and objects come
//! from files; without `--rules` they come from the cluster (see [`live`]): its rule ConfigMaps,
//! the live object and the namespace's mode annotation.

pub mod cli;
mod cluster;
mod live;
mod offline;
mod render;
mod status;
mod tail;

use anyhow::{Context as _, bail};
use drift_engine::review::{AdmissionRequest, parse_review, update_review};
use drift_engine::{Context, Detail, Evaluation, evaluate};
use serde_json::Value;

use crate::cli::{Cli, Command, ExplainArgs, PreviewArgs};
use crate::offline::LoadedRules;

/// The name of the webhook in the chart's ValidatingWebhookConfiguration, as the API server
/// quotes it in a denial.
pub const WEBHOOK_NAME: &str = "validate.drift-sentinel.k8s.io";

/// The user an edit is judged for when none is given (offline) or known (cluster).
const DEFAULT_USER: &str = "kubernetes-admin";

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

pub fn run(cli: Cli) -> anyhow::Result<Verdict> {
    match cli.command {
        Command::Preview(args) => preview(&args),
        Command::Explain(args) => explain(&args),
        Command::Tail(args) => tail::run(&args),
        Command::Status(args) => status::run(&args),
    }
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
) -> Judged {
    let context = Context {
        namespace_mode,
        parent_labels: None,
    };
    let evaluation = evaluate(&rules.set, request, &context, Detail::Full);
    let verdict = Verdict::of(&evaluation);
    let (document, screen) = render::preview_parts(request, &evaluation, rules, verdict);
    Judged {
        verdict,
        document,
        screen,
    }
}

fn preview(args: &PreviewArgs) -> anyhow::Result<Verdict> {
    if args.offline.rules.is_empty() {
        if args.offline.namespace_file.is_some() {
            bail!(
                "--namespace-file is for offline preview (with --rules); against a cluster the Namespace's annotation is read"
            );
        }
        return live::preview(args);
    }
    if args.server_dry_run {
        bail!("--server-dry-run needs the cluster; offline preview (--rules) has no API server");
    }
    if args.target.is_some() {
        bail!(
            "offline preview (--rules) takes --old FILE and --new FILE, not KIND/NAME; without --rules KIND/NAME opens the live object in $EDITOR"
        );
    }
    let (Some(old_path), Some(new_path)) = (&args.old, &args.new) else {
        bail!("offline preview needs both --old FILE and --new FILE");
    };
    let rules = offline::load_rules(&args.offline.rules)?;
    let namespaces = offline::load_namespaces(args.offline.namespace_file.as_deref())?;
    let old = offline::read_object(old_path)?;
    let new = offline::read_object(new_path)?;
    let user = args.user.as_deref().unwrap_or(DEFAULT_USER);
    let request = request_for(old, new, user).with_context(|| {
        format!(
            "cannot compare {} with {}",
            old_path.display(),
            new_path.display()
        )
    })?;
    let namespace_mode = namespaces
        .get(request.namespace())
        .and_then(|n| n.mode_annotation.as_deref());
    let judged = judge(&rules, &request, namespace_mode);
    render::emit(&args.common, &judged.document, || judged.screen)?;
    Ok(judged.verdict)
}

fn explain(args: &ExplainArgs) -> anyhow::Result<Verdict> {
    if args.offline.rules.is_empty() {
        if args.offline.namespace_file.is_some() {
            bail!(
                "--namespace-file is for offline explain (with --rules); against a cluster the Namespace's annotation is read"
            );
        }
        return live::explain(args);
    }
    if args.target.is_some() {
        bail!(
            "offline explain (--rules) takes the object as -f FILE, not KIND/NAME; without --rules KIND/NAME is read from the cluster"
        );
    }
    let Some(path) = &args.file else {
        bail!("offline explain needs the object: -f FILE");
    };
    let rules = offline::load_rules(&args.offline.rules)?;
    let namespaces = offline::load_namespaces(args.offline.namespace_file.as_deref())?;
    let object = offline::read_object(path)?;
    // Explaining an object is explaining an edit of it that changes nothing.
    let user = args.user.as_deref().unwrap_or(DEFAULT_USER);
    let request = request_for(object.clone(), object, user)
        .with_context(|| format!("cannot read {} as a Kubernetes object", path.display()))?;
    let namespace_mode = namespaces
        .get(request.namespace())
        .and_then(|n| n.mode_annotation.as_deref());
    render::explain(&args.common, &request, namespace_mode, &rules)?;
    Ok(Verdict::Allowed)
}
