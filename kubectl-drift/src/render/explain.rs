//! What `explain` prints: every rule in priority order with why it matched or not, the winner,
//! the mode and where it came from, include/exclude/mutable, the bypass annotation, the users;
//! as a screen (`-o text`) or a document (`-o json|yaml`).

use std::fmt::Write as _;

use drift_engine::bypass::{Bypass, BypassRefusal};
use drift_engine::evaluation::{Mismatch, Settled};
use drift_engine::review::AdmissionRequest;
use drift_engine::rule::Mode;
use drift_engine::time::{format_rfc3339_seconds, human_duration};
use drift_engine::{CompiledRule, Evaluation, PathPattern, RuleSet};
use serde_json::{Value, json};

use super::common::{mode_source, object_line, object_summary};
use super::output::{Style, emit};
use crate::lint::RuleWarning;
use crate::plan::Print;

/// One rule as `explain` lists it.
struct Considered<'r> {
    rule: &'r CompiledRule,
    matched: bool,
    wins: bool,
    reason: String,
}

/// Where the request stands with the winning rule.
struct Standing<'e> {
    bypass_value: Option<&'e str>,
    /// What the bypass annotation means at the time of the evaluation.
    bypass: Option<&'e Result<Bypass, BypassRefusal>>,
    in_scope: bool,
    exempt: bool,
    bypassed: bool,
    /// Steps 2–3 settle a request before the bypass annotation is read.
    settled_before_bypass: bool,
}

impl<'e> Standing<'e> {
    fn of(evaluation: &'e Evaluation<'_>) -> Self {
        let matched = evaluation.matched();
        let settled = matched.map(|m| &m.settled);
        Standing {
            bypass_value: matched.and_then(|m| m.bypass_value.as_deref()),
            bypass: matched.and_then(|m| m.bypass.as_ref()),
            in_scope: !matches!(settled, Some(Settled::UserNotInScope)),
            exempt: matches!(settled, Some(Settled::UserExempt)),
            bypassed: matches!(settled, Some(Settled::Bypassed(_))),
            settled_before_bypass: matches!(
                settled,
                Some(Settled::UserNotInScope | Settled::UserExempt | Settled::BeingDeleted)
            ),
        }
    }
}

fn mismatch_reason(request: &AdmissionRequest, rule: &CompiledRule, mismatch: &Mismatch) -> String {
    let joined = |items: Vec<String>| items.join(", ");
    match mismatch {
        Mismatch::Namespace => format!(
            "namespace {:?} matches none of {}",
            request.namespace(),
            joined(
                rule.namespaces
                    .iter()
                    .map(|g| g.as_str().to_owned())
                    .collect()
            )
        ),
        Mismatch::Selector => format!(
            "{}/{} matches none of the selectors {}",
            if request.kind.group.is_empty() {
                "core"
            } else {
                &request.kind.group
            },
            request.kind.kind,
            joined(rule.selectors.iter().map(ToString::to_string).collect())
        ),
        Mismatch::Label(failed) => format!("label requirement {failed} does not hold"),
        Mismatch::ParentLabelsUnknown => "labels of the scaled object are not known".to_owned(),
        Mismatch::OtherNamespace => format!(
            "a namespace rule applies only in its own namespace {:?}",
            rule.id.namespace
        ),
        Mismatch::ClusterRuleMatched => "a namespace rule, and a cluster rule matches".to_owned(),
    }
}

fn considered<'r>(request: &AdmissionRequest, evaluation: &Evaluation<'r>) -> Vec<Considered<'r>> {
    let winner = evaluation.rule();
    evaluation
        .considered
        .iter()
        .map(|c| Considered {
            rule: c.rule,
            matched: c.matched.is_ok(),
            wins: winner.is_some_and(|w| std::ptr::eq(w, c.rule)),
            reason: match &c.matched {
                Ok(()) => "matches: namespace, selector and labels".to_owned(),
                Err(mismatch) => mismatch_reason(request, c.rule, mismatch),
            },
        })
        .collect()
}

/// Prints the explanation of `request` (an UPDATE that changes nothing) by its `evaluation`
/// against `rules` (in full detail, with the namespace's mode annotation `namespace_mode`), with
/// the linter's warnings about the rules (offline; the cluster's rules were linted when they
/// were written).
pub(crate) fn explain(
    print: Print,
    request: &AdmissionRequest,
    evaluation: &Evaluation<'_>,
    namespace_mode: Option<&str>,
    rules: &RuleSet,
    lint: &[RuleWarning],
) -> anyhow::Result<()> {
    let considered = considered(request, evaluation);
    let standing = Standing::of(evaluation);
    let document = document(
        request,
        evaluation,
        &considered,
        &standing,
        namespace_mode,
        rules,
        lint,
    );
    emit(print, &document, |style| {
        text(
            request,
            evaluation,
            &considered,
            &standing,
            rules,
            lint,
            &style,
        )
    })
}

fn strings(patterns: &[PathPattern]) -> Vec<String> {
    patterns.iter().map(ToString::to_string).collect()
}

fn document(
    request: &AdmissionRequest,
    evaluation: &Evaluation<'_>,
    considered: &[Considered<'_>],
    standing: &Standing<'_>,
    namespace_mode: Option<&str>,
    rules: &RuleSet,
    lint: &[RuleWarning],
) -> Value {
    let winner = evaluation.rule();
    json!({
        "object": object_summary(request),
        "rules": considered.iter().map(|c| json!({
            "rule": c.rule.id.to_string(), "tier": c.rule.tier.as_str(), "priority": c.rule.priority, "mode": c.rule.mode.as_str(),
            "matched": c.matched, "winner": c.wins, "reason": c.reason, "origin": c.rule.origin,
        })).collect::<Vec<_>>(),
        "winner": winner.map(|r| r.id.to_string()),
        "mode": evaluation.mode().map(Mode::as_str),
        "modeSource": evaluation.matched().map(|m| m.winner.mode_source),
        "namespaceModeAnnotation": namespace_mode,
        "include": winner.map(|r| strings(&r.include)),
        "exclude": winner.map(|r| strings(&r.exclude)),
        "mutable": winner.map(|r| strings(&r.mutable)),
        "bypass": winner.map(|r| json!({
            "annotation": r.bypass, "value": standing.bypass_value, "active": standing.bypassed,
            "end": standing.bypass.and_then(|b| b.as_ref().ok()).and_then(|b| b.end).map(format_rfc3339_seconds),
            "meaning": standing.bypass.map(|b| match b { Ok(bypass) => bypass.to_string(), Err(refusal) => format!("no bypass: {refusal}") }),
            "maxBypass": r.max_bypass.map(human_duration),
        })),
        "users": winner.map(|r| json!({"scoped": r.users, "inScope": standing.in_scope, "exempt": standing.exempt})),
        "warnings": evaluation.warnings(),
        "invalidRules": rules.invalid().iter().map(ToString::to_string).collect::<Vec<_>>(),
        "ruleWarnings": lint.iter().map(|w| json!({
            "rule": w.rule, "origin": w.origin, "warning": w.warning,
        })).collect::<Vec<_>>(),
    })
}

fn text(
    request: &AdmissionRequest,
    evaluation: &Evaluation<'_>,
    considered: &[Considered<'_>],
    standing: &Standing<'_>,
    rules: &RuleSet,
    lint: &[RuleWarning],
    style: &Style,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Object:  {}\n", object_line(request));
    let _ = writeln!(out, "RULES IN PRIORITY ORDER");
    let width = considered
        .iter()
        .map(|c| c.rule.id.to_string().len())
        .max()
        .unwrap_or(4);
    let tier_width = considered
        .iter()
        .map(|c| tier_text(c.rule).len())
        .max()
        .unwrap_or(0);
    for c in considered {
        let mark = if c.wins {
            style.green("WINS   ")
        } else if c.matched {
            style.yellow("matches")
        } else {
            "no     ".to_owned()
        };
        let shadowed = if c.matched && !c.wins {
            " (a higher-priority rule wins)"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  {mark}  {:width$}  {:tier_width$}  priority {:>5}  {}{shadowed}",
            c.rule.id.to_string(),
            tier_text(c.rule),
            c.rule.priority,
            c.reason
        );
    }
    match evaluation.rule() {
        None => {
            let _ = writeln!(
                out,
                "\nNo rule matches: every UPDATE of this object is allowed."
            );
        }
        Some(rule) => winner_text(request, evaluation, rule, standing, style, &mut out),
    }
    for warning in &evaluation.warnings() {
        let _ = writeln!(out, "Warning: {warning}");
    }
    if !rules.invalid().is_empty() {
        let _ = writeln!(out, "\n{}", style.yellow("Invalid rules (not applied):"));
        for error in rules.invalid() {
            let _ = writeln!(out, "  {error}");
        }
    }
    if !lint.is_empty() {
        let _ = writeln!(
            out,
            "\n{}",
            style
                .yellow("Rule warnings (the /validate-rule webhook admits these rules with them):")
        );
        for warning in lint {
            match &warning.origin {
                Some(origin) => {
                    let _ = writeln!(out, "  {origin}: Warning: {}", warning.warning);
                }
                None => {
                    let _ = writeln!(out, "  Warning: {}", warning.warning);
                }
            }
        }
    }
    out
}

/// `cluster rule` or `namespace rule`.
fn tier_text(rule: &CompiledRule) -> String {
    format!("{} rule", rule.tier)
}

fn winner_text(
    request: &AdmissionRequest,
    evaluation: &Evaluation<'_>,
    rule: &CompiledRule,
    standing: &Standing<'_>,
    style: &Style,
    out: &mut String,
) {
    let _ = writeln!(
        out,
        "\nWinner:  {} ({})",
        style.bold(&rule.id.to_string()),
        tier_text(rule)
    );
    let _ = writeln!(
        out,
        "Mode:    {} (from {})",
        evaluation.mode().map(Mode::as_str).unwrap_or(""),
        mode_source(evaluation)
    );
    let list = |patterns: &[PathPattern], empty: &str| {
        if patterns.is_empty() {
            empty.to_owned()
        } else {
            strings(patterns).join(", ")
        }
    };
    let _ = writeln!(out, "Include: {}", list(&rule.include, "(everything)"));
    let _ = writeln!(out, "Exclude: {}", list(&rule.exclude, "(none)"));
    let _ = writeln!(out, "Mutable: {}", list(&rule.mutable, "(none)"));
    let state = match (standing.bypass_value, standing.bypass) {
        (Some(v), _) if standing.settled_before_bypass => {
            format!("set to {v:?} (not reached: an earlier step settles the request)")
        }
        (Some(v), Some(Ok(bypass))) => {
            format!("set to {v:?}: {bypass}; every UPDATE is allowed, with a warning")
        }
        (Some(v), Some(Err(refusal))) => format!("set to {v:?} but no bypass: {refusal}"),
        _ => "not set".to_owned(),
    };
    let cap = rule
        .max_bypass
        .map(|max| format!(" (maxBypass {})", human_duration(max)))
        .unwrap_or_default();
    let _ = writeln!(out, "Bypass:  annotation {}{cap} {state}", rule.bypass);
    let user = &request.user_info.username;
    if !rule.users.is_empty() {
        let _ = writeln!(
            out,
            "Users:   only {} (user {user} {})",
            rule.users.join(", "),
            if standing.in_scope {
                "is listed"
            } else {
                "is not listed: allowed"
            }
        );
    }
    if standing.exempt {
        let _ = writeln!(out, "Exempt:  user {user} is exempt: allowed");
    }
}
