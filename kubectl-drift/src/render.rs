//! What the commands print: a screen a person reads (`-o text`, coloured only on a terminal
//! and never with `NO_COLOR`), or the same facts as JSON or YAML for scripts.

use std::fmt::Write as _;
use std::io::IsTerminal;

use drift_engine::evaluation::{Mismatch, ModeSource, Settled};
use drift_engine::message::{display_value, truncate_chars};
use drift_engine::review::AdmissionRequest;
use drift_engine::rule::Mode;
use drift_engine::{Context, Detail, Evaluation, Step, evaluate};
use serde_json::{Value, json};

use crate::cli::{Common, Output};
use crate::offline::LoadedRules;
use crate::{Verdict, WEBHOOK_NAME};

struct Style {
    colour: bool,
}

impl Style {
    fn detect() -> Self {
        let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        Self { colour }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.colour {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    fn red(&self, text: &str) -> String {
        self.paint("1;31", text)
    }
    fn green(&self, text: &str) -> String {
        self.paint("32", text)
    }
    fn yellow(&self, text: &str) -> String {
        self.paint("33", text)
    }
    fn bold(&self, text: &str) -> String {
        self.paint("1", text)
    }
}

pub(crate) fn emit(
    common: &Common,
    document: &Value,
    text: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    match common.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(document)?),
        Output::Yaml => print!("{}", serde_yaml::to_string(document)?),
        Output::Text => print!("{}", text()),
    }
    Ok(())
}

fn object_summary(request: &AdmissionRequest) -> Value {
    json!({
        "apiVersion": if request.kind.group.is_empty() { request.kind.version.clone() } else { format!("{}/{}", request.kind.group, request.kind.version) },
        "kind": request.kind.kind,
        "namespace": request.namespace(),
        "name": request.name(),
    })
}

fn object_line(request: &AdmissionRequest) -> String {
    match request.namespace() {
        "" => format!("{} {}", request.kind.kind, request.name()),
        ns => format!("{} {ns}/{}", request.kind.kind, request.name()),
    }
}

fn mode_source(evaluation: &Evaluation<'_>) -> &'static str {
    match evaluation.matched().map(|m| m.mode_source) {
        Some(ModeSource::NamespaceAnnotation) => "namespace annotation drift-sentinel.k8s.io/mode",
        Some(ModeSource::Rule) => "the rule",
        None => "",
    }
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

/// The changes `include`/`exclude` left out (evaluated with [`Detail::Full`]).
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
    rules: &LoadedRules,
    verdict: Verdict,
) -> (Value, String) {
    let mut changes: Vec<Value> = evaluation
        .changes()
        .iter()
        .map(|c| {
            json!({
                "path": c.path,
                "old": c.change.old.as_deref(),
                "new": c.change.new.as_deref(),
                "status": if c.mutable { "mutable" } else { "denied" },
            })
        })
        .collect();
    changes.extend(excluded(evaluation).iter().map(|c| {
        json!({"path": c.path.to_string(), "old": c.old.as_deref(), "new": c.new.as_deref(), "status": "excluded"})
    }));
    let document = json!({
        "object": object_summary(request),
        "user": request.user_info.username,
        "rule": evaluation.rule().map(|r| r.id.to_string()),
        "tier": evaluation.rule().map(|r| r.tier.as_str()),
        "mode": evaluation.mode().map(Mode::as_str),
        "modeSource": evaluation.matched().map(|m| m.mode_source),
        "step": evaluation.step(),
        "reason": evaluation.reason(),
        "allowed": evaluation.allowed(),
        "result": evaluation.verdict().map(|v| v.as_str()),
        "changes": changes,
        "deniedPaths": evaluation.denied_paths(),
        "warnings": evaluation.warnings(),
        "apiServerMessage": api_server_message(evaluation),
        "invalidRules": rules.set.invalid().iter().map(ToString::to_string).collect::<Vec<_>>(),
        "exitCode": verdict.exit_code(),
    });
    let screen = preview_text(request, evaluation, rules, verdict);
    (document, screen)
}

fn preview_text(
    request: &AdmissionRequest,
    evaluation: &Evaluation<'_>,
    rules: &LoadedRules,
    verdict: Verdict,
) -> String {
    let warnings = evaluation.warnings();
    let style = Style::detect();
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
                arrow(c.change.old.as_deref(), c.change.new.as_deref()),
                status,
            )
        })
        .chain(excluded(evaluation).iter().map(|c| {
            (
                c.path.to_string(),
                arrow(c.old.as_deref(), c.new.as_deref()),
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
            "\nTo allow it: make {} mutable in rule {} (mutable now: {}), or set annotation {}: \"true\" on the object.",
            evaluation.denied_paths().join(", "),
            rule.id,
            rule.mutable_text,
            rule.bypass
        );
    }
    if !rules.set.invalid().is_empty() {
        let _ = writeln!(out, "\n{}", style.yellow("Invalid rules (not applied):"));
        for error in rules.set.invalid() {
            let _ = writeln!(out, "  {error}");
        }
    }
    out
}

fn arrow(old: Option<&Value>, new: Option<&Value>) -> String {
    let cut = |v: Option<&Value>| {
        let text = display_value(v);
        truncate_chars(&text, 40)
    };
    format!("{} → {}", cut(old), cut(new))
}

pub fn explain(
    common: &Common,
    request: &AdmissionRequest,
    namespace_mode: Option<&str>,
    rules: &LoadedRules,
) -> anyhow::Result<()> {
    let context = Context {
        namespace_mode,
        parent_labels: None,
    };
    let evaluation = evaluate(&rules.set, request, &context, Detail::Full);
    let winner = evaluation.rule();
    let considered: Vec<(&drift_engine::CompiledRule, bool, bool, String)> = evaluation
        .considered
        .iter()
        .map(|c| {
            let rule = c.rule;
            let reason = match &c.matched {
                Ok(()) => "matches: namespace, selector and labels".to_owned(),
                Err(Mismatch::Namespace) => format!(
                    "namespace {:?} matches none of {}",
                    request.namespace(),
                    rule.namespaces
                        .iter()
                        .map(|g| g.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Err(Mismatch::Selector) => format!(
                    "{}/{} matches none of the selectors {}",
                    if request.kind.group.is_empty() {
                        "core"
                    } else {
                        &request.kind.group
                    },
                    request.kind.kind,
                    rule.selectors
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Err(Mismatch::Label(failed)) => {
                    format!("label requirement {failed} does not hold")
                }
                Err(Mismatch::ParentLabelsUnknown) => {
                    "labels of the scaled object are not known".to_owned()
                }
                Err(Mismatch::OtherNamespace) => format!(
                    "a namespace rule applies only in its own namespace {:?}",
                    rule.id.namespace
                ),
                Err(Mismatch::ClusterRuleMatched) => {
                    "a namespace rule, and a cluster rule matches".to_owned()
                }
            };
            let wins = winner.is_some_and(|w| std::ptr::eq(w, rule));
            (rule, c.matched.is_ok(), wins, reason)
        })
        .collect();
    let matched = evaluation.matched();
    let bypass_value = matched.and_then(|m| m.bypass_value);
    let settled = matched.map(|m| &m.settled);
    let in_scope = !matches!(settled, Some(Settled::UserNotInScope));
    let exempt = matches!(settled, Some(Settled::UserExempt));
    let bypassed = matches!(settled, Some(Settled::Bypassed));
    let settled_before_bypass = matches!(
        settled,
        Some(Settled::UserNotInScope | Settled::UserExempt | Settled::BeingDeleted)
    );
    let warnings = evaluation.warnings();
    let user = &request.user_info.username;
    let document = json!({
        "object": object_summary(request),
        "rules": considered.iter().map(|(rule, matched, wins, reason)| json!({
            "rule": rule.id.to_string(), "tier": rule.tier.as_str(), "priority": rule.priority, "mode": rule.mode.as_str(),
            "matched": matched, "winner": wins, "reason": reason, "origin": rule.origin,
        })).collect::<Vec<_>>(),
        "winner": winner.map(|r| r.id.to_string()),
        "mode": evaluation.mode().map(Mode::as_str),
        "modeSource": matched.map(|m| m.mode_source),
        "namespaceModeAnnotation": namespace_mode,
        "include": winner.map(|r| r.include.iter().map(ToString::to_string).collect::<Vec<_>>()),
        "exclude": winner.map(|r| r.exclude.iter().map(ToString::to_string).collect::<Vec<_>>()),
        "mutable": winner.map(|r| r.mutable.iter().map(ToString::to_string).collect::<Vec<_>>()),
        "bypass": winner.map(|r| json!({"annotation": r.bypass, "value": bypass_value, "active": bypassed})),
        "users": winner.map(|r| json!({"scoped": r.users, "inScope": in_scope, "exempt": exempt})),
        "warnings": warnings,
        "invalidRules": rules.set.invalid().iter().map(ToString::to_string).collect::<Vec<_>>(),
    });
    emit(common, &document, || {
        let style = Style::detect();
        let mut out = String::new();
        let _ = writeln!(out, "Object:  {}\n", object_line(request));
        let _ = writeln!(out, "RULES IN PRIORITY ORDER");
        let width = considered
            .iter()
            .map(|c| c.0.id.to_string().len())
            .max()
            .unwrap_or(4);
        for (rule, matched, wins, reason) in &considered {
            let mark = if *wins {
                style.green("WINS   ")
            } else if *matched {
                style.yellow("matches")
            } else {
                "no     ".to_owned()
            };
            let shadowed = if *matched && !*wins {
                " (a higher-priority rule wins)"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "  {mark}  {:width$}  priority {:>5}  {}{shadowed}",
                rule.id.to_string(),
                rule.priority,
                reason
            );
        }
        match winner {
            None => {
                let _ = writeln!(
                    out,
                    "\nNo rule matches: every UPDATE of this object is allowed."
                );
            }
            Some(rule) => {
                let _ = writeln!(out, "\nWinner:  {}", style.bold(&rule.id.to_string()));
                let _ = writeln!(
                    out,
                    "Mode:    {} (from {})",
                    evaluation.mode().map(Mode::as_str).unwrap_or(""),
                    mode_source(&evaluation)
                );
                let list = |patterns: &[drift_engine::PathPattern]| {
                    if patterns.is_empty() {
                        "(none)".to_owned()
                    } else {
                        patterns
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                };
                let _ = writeln!(
                    out,
                    "Include: {}",
                    if rule.include.is_empty() {
                        "(everything)".to_owned()
                    } else {
                        list(&rule.include)
                    }
                );
                let _ = writeln!(out, "Exclude: {}", list(&rule.exclude));
                let _ = writeln!(out, "Mutable: {}", list(&rule.mutable));
                let state = match bypass_value {
                    Some(v) if bypassed => format!("set to {v:?}: every UPDATE is allowed"),
                    // Steps 2–3 settle a request before the bypass annotation is read.
                    Some(v) if settled_before_bypass => {
                        format!("set to {v:?} (not reached: an earlier step settles the request)")
                    }
                    Some(v) => format!("present but {v:?} (only \"true\" bypasses)"),
                    None => "not set".to_owned(),
                };
                let _ = writeln!(out, "Bypass:  annotation {} {state}", rule.bypass);
                if !rule.users.is_empty() {
                    let _ = writeln!(
                        out,
                        "Users:   only {} (user {user} {})",
                        rule.users.join(", "),
                        if in_scope {
                            "is listed"
                        } else {
                            "is not listed: allowed"
                        }
                    );
                }
                if exempt {
                    let _ = writeln!(out, "Exempt:  user {user} is exempt: allowed");
                }
            }
        }
        for warning in &warnings {
            let _ = writeln!(out, "Warning: {warning}");
        }
        if !rules.set.invalid().is_empty() {
            let _ = writeln!(out, "\n{}", style.yellow("Invalid rules (not applied):"));
            for error in rules.set.invalid() {
                let _ = writeln!(out, "  {error}");
            }
        }
        out
    })
}
