//! What `preview` prints: the verdict on an edit, each changed path with old → new and whether
//! it is mutable, denied or excluded, and what the API server and kubectl would say; as a
//! screen (`-o text`) or a document (`-o json|yaml`).

use std::fmt::Write as _;

use drift_engine::json::LazyValue;
use drift_engine::message::display_value;
use drift_engine::review::AdmissionRequest;
use drift_engine::rule::Mode;
use drift_engine::truncate::truncate_chars;
use drift_engine::{Evaluation, RuleSet, Step};
use serde_json::{Value, json};

use super::common::{mode_source, object_line, object_summary};
use super::output::Style;
use crate::verdict::{Verdict, WEBHOOK_NAME};

/// What `preview` prints of an evaluated update.
pub(crate) struct PreviewParts {
    /// For `-o json|yaml`.
    pub document: Value,
    /// For `-o text`.
    pub screen: String,
}

/// The message the API server would return to kubectl.
fn api_server_message(evaluation: &Evaluation<'_>) -> Option<String> {
    (!evaluation.allowed()).then(|| {
        format!(
            "admission webhook \"{WEBHOOK_NAME}\" denied the request: {}",
            evaluation.status_message()
        )
    })
}

/// The changes `include`/`exclude` left out (evaluated with [`drift_engine::Detail::Full`]).
fn excluded<'e>(evaluation: &'e Evaluation<'_>) -> &'e [drift_engine::diff::Change<'e>] {
    evaluation
        .comparison()
        .and_then(|c| c.excluded.as_deref())
        .unwrap_or(&[])
}

/// What `preview` prints: the document (`-o json|yaml`) and the screen (`-o text`).
pub(crate) fn preview_parts(
    request: &AdmissionRequest,
    evaluation: &Evaluation<'_>,
    rules: &RuleSet,
    verdict: Verdict,
    style: &Style,
) -> PreviewParts {
    let mut changes: Vec<Value> = evaluation
        .changes()
        .iter()
        .map(|c| {
            json!({
                "path": c.path,
                "old": c.change.old,
                "new": c.change.new,
                "status": if c.mutable { "mutable" } else { "denied" },
            })
        })
        .collect();
    changes.extend(excluded(evaluation).iter().map(
        |c| json!({"path": c.path.to_string(), "old": c.old, "new": c.new, "status": "excluded"}),
    ));
    let document = json!({
        "object": object_summary(request),
        "user": request.user_info.username,
        "rule": evaluation.rule().map(|r| r.id.to_string()),
        "tier": evaluation.rule().map(|r| r.tier.as_str()),
        "mode": evaluation.mode().map(Mode::as_str),
        "modeSource": evaluation.matched().map(|m| m.winner.mode_source),
        "step": evaluation.step(),
        "reason": evaluation.reason(),
        "allowed": evaluation.allowed(),
        "result": evaluation.verdict().map(|v| v.as_str()),
        "changes": changes,
        "deniedPaths": evaluation.denied_paths(),
        "warnings": evaluation.warnings(),
        "apiServerMessage": api_server_message(evaluation),
        "invalidRules": rules.invalid().iter().map(ToString::to_string).collect::<Vec<_>>(),
        "exitCode": verdict.exit_code(),
    });
    let screen = preview_text(request, evaluation, rules, verdict, style);
    PreviewParts { document, screen }
}

fn preview_text(
    request: &AdmissionRequest,
    evaluation: &Evaluation<'_>,
    rules: &RuleSet,
    verdict: Verdict,
    style: &Style,
) -> String {
    let warnings = evaluation.warnings();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Object:  {} (edited by {})",
        object_line(request),
        request.user_info.username
    );
    match (evaluation.rule(), evaluation.mode()) {
        (Some(rule), Some(mode)) => {
            let origin = rule
                .origin
                .as_deref()
                .map(|o| format!(", {o}"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "Rule:    {} ({} rule, priority {}{origin})",
                rule.id, rule.tier, rule.priority
            );
            let _ = writeln!(out, "Mode:    {mode} (from {})", mode_source(evaluation));
        }
        _ => {
            let _ = writeln!(out, "Rule:    none matches ({})", evaluation.reason());
        }
    }
    out.push_str(&changes_table(evaluation, style));
    out.push('\n');
    let headline = match verdict {
        Verdict::Denied => style.red("DENIED"),
        Verdict::ViolationAllowed => style.yellow("ALLOWED WITH A VIOLATION"),
        Verdict::Allowed => style.green("ALLOWED"),
    };
    let why = match verdict {
        Verdict::Allowed => format!(" ({})", evaluation.reason()),
        _ => String::new(),
    };
    let _ = writeln!(out, "Verdict: {headline}{why}");
    if let Some(message) = api_server_message(evaluation) {
        let _ = writeln!(
            out,
            "\nThe API server would answer:\n  Error from server (Forbidden): {message}"
        );
    } else if evaluation.step() == Step::Violation {
        for warning in &warnings {
            let _ = writeln!(out, "\nkubectl would print:\n  Warning: {warning}");
        }
        if warnings.is_empty() {
            let _ = writeln!(
                out,
                "\nRecorded only (dry-run): {}",
                evaluation.status_message()
            );
        }
    } else {
        for warning in &warnings {
            let _ = writeln!(out, "Warning: {warning}");
        }
    }
    if verdict == Verdict::Denied
        && let Some(rule) = evaluation.rule()
    {
        let _ = writeln!(
            out,
            "\nTo allow it: make {} mutable in rule {} (mutable now: {}), or bypass it for a while: kubectl drift bypass {}/{} --for DURATION (annotation {}{}).",
            evaluation.denied_paths().join(", "),
            rule.id,
            rule.mutable_text,
            request.kind.kind.to_ascii_lowercase(),
            request.name(),
            rule.bypass,
            rule.max_bypass
                .map(|max| format!(", at most {}", drift_engine::time::human_duration(max)))
                .unwrap_or_default()
        );
    }
    if !rules.invalid().is_empty() {
        let _ = writeln!(out, "\n{}", style.yellow("Invalid rules (not applied):"));
        for error in rules.invalid() {
            let _ = writeln!(out, "  {error}");
        }
    }
    out
}

/// The changed paths with old → new and whether each is mutable, denied or excluded.
fn changes_table(evaluation: &Evaluation<'_>, style: &Style) -> String {
    let mut out = String::new();
    let rows: Vec<(String, String, String)> = evaluation
        .changes()
        .iter()
        .map(|c| {
            let status = if c.mutable {
                style.green("mutable")
            } else {
                style.red("denied")
            };
            (
                c.path.clone(),
                arrow(c.change.old.as_ref(), c.change.new.as_ref()),
                status,
            )
        })
        .chain(excluded(evaluation).iter().map(|c| {
            (
                c.path.to_string(),
                arrow(c.old.as_ref(), c.new.as_ref()),
                style.yellow("excluded"),
            )
        }))
        .collect();
    if rows.is_empty() {
        let _ = writeln!(
            out,
            "\nNo changes {}.",
            if evaluation.rule().is_some() {
                "in the compared fields"
            } else {
                "judged"
            }
        );
    } else {
        let width = rows
            .iter()
            .map(|r| r.0.chars().count())
            .max()
            .unwrap_or(6)
            .max(6);
        let values_width = rows
            .iter()
            .map(|r| r.1.chars().count())
            .max()
            .unwrap_or(9)
            .max(9);
        let _ = writeln!(
            out,
            "\n{:width$}  {:values_width$}  VERDICT",
            "CHANGE", "OLD → NEW"
        );
        for (path, values, status) in rows {
            let _ = writeln!(out, "{path:width$}  {values:values_width$}  {status}");
        }
    }
    out
}

fn arrow(old: Option<&LazyValue<'_>>, new: Option<&LazyValue<'_>>) -> String {
    let cut = |v: Option<&LazyValue<'_>>| {
        let text = display_value(v);
        truncate_chars(&text, 40)
    };
    format!("{} → {}", cut(old), cut(new))
}
