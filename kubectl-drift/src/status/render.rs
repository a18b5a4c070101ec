//! The [`Report`] printed: tables a person reads (`-o text`, coloured when asked), or the same
//! facts as JSON or YAML.

use std::fmt::Write as _;
use std::time::SystemTime;

use super::report::{
    PodReport, Report, SourceState, invalid_rules, loaded_rules, stale_rules, stale_text,
};
use super::time::{age, ago, short_duration};
use crate::cli::Output;
use crate::plan::Print;
use crate::render::Style;

pub(super) fn print(
    report: &Report,
    print: Print,
    now: SystemTime,
    out: &mut impl std::io::Write,
) -> anyhow::Result<()> {
    match print.output {
        Output::Json => writeln!(out, "{}", serde_json::to_string_pretty(report)?)?,
        Output::Yaml => write!(out, "{}", serde_yaml::to_string(report)?)?,
        Output::Text => write!(out, "{}", text(report, now, Style::new(print.colour)))?,
    }
    Ok(())
}

/// Columns separated by two spaces, each as wide as its widest cell (colour codes aside).
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let width = |cell: &str| crate::render::visible_width(cell);
    let mut widths: Vec<usize> = header.iter().map(|h| width(h)).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(width(cell));
        }
    }
    let line = |cells: &[String]| {
        let last = cells.len().saturating_sub(1);
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            text.push_str(cell);
            if i < last {
                text.push_str(&" ".repeat(widths[i] - width(cell) + 2));
            }
        }
        text.trim_end().to_owned() + "\n"
    };
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    let mut out = line(&header);
    for row in rows {
        out.push_str(&line(row));
    }
    out
}

fn yes(value: bool) -> String {
    if value { "yes" } else { "no" }.to_owned()
}

fn text(report: &Report, now: SystemTime, style: Style) -> String {
    let mut out = pods_text(report, now, &style);
    connection_text(report, now, &style, &mut out);
    webhooks_text(report, &style, &mut out);
    audit_text(report, now, &mut out);
    if !report.warnings.is_empty() {
        out.push_str(&format!("\n{}\n", style.yellow("Warnings:")));
        for warning in &report.warnings {
            out.push_str(&format!("  - {warning}\n"));
        }
    }
    if report.healthy {
        out.push_str(&format!("\n{}\n", style.green("Healthy.")));
    } else {
        let count = report.problems.len();
        let headline = format!(
            "Unhealthy ({count} problem{}):",
            if count == 1 { "" } else { "s" }
        );
        out.push_str(&format!("\n{}\n", style.red(&headline)));
        for problem in &report.problems {
            out.push_str(&format!("  - {problem}\n"));
        }
    }
    out
}

/// The audit pods and their last run.
fn audit_text(report: &Report, now: SystemTime, out: &mut String) {
    let audit = &report.audit;
    out.push_str(&format!(
        "\nAudit pods (namespace {}, selector {}):\n",
        report.namespace, audit.selector
    ));
    if audit.pods.is_empty() {
        out.push_str("  none\n");
        return;
    }
    let rows: Vec<Vec<String>> = audit
        .pods
        .iter()
        .map(|p| super::audit::row(p, now))
        .collect();
    out.push_str(&table(super::audit::HEADER, &rows));
    // What the runs read of the records and the memory, and what did not verify (reference §8
    // "Trust"); the reasons are among the warnings.
    let evidence: Vec<String> = audit
        .pods
        .iter()
        .filter_map(super::audit::evidence_line)
        .collect();
    if !evidence.is_empty() {
        out.push_str(
            "
Who and why, last run (the webhook's records, the audit's memory):
",
        );
        for line in evidence {
            out.push_str(&format!(
                "  {line}
"
            ));
        }
    }
    // The findings themselves, by default (without export or Reports), are the audit's
    // DriftDetected Events on the drifted objects (reference §6 "Events", §8).
    let drifted = audit
        .pods
        .iter()
        .filter_map(|p| p.admin.as_ref()?.last_run.as_ref())
        .map(|run| run.counts.drifted)
        .max()
        .unwrap_or(0);
    if drifted > 0 {
        out.push_str(&format!(
            "
{drifted} drifted objects in the last run, each with a DriftDetected Event naming its fields and who changed them:
  kubectl get events -A --field-selector reason=DriftDetected
  kubectl events -n NAMESPACE --for KIND/NAME
"
        ));
    }
}

fn pod_row(p: &PodReport, now: SystemTime, style: &Style) -> Vec<String> {
    let admin = p.admin.as_ref();
    let number = |v: Option<u64>| v.map_or("-".to_owned(), |n| n.to_string());
    let reachable = admin.filter(|a| a.reachable);
    vec![
        p.pod.name.clone(),
        if p.pod.ready {
            yes(true)
        } else {
            style.red("no")
        },
        if p.pod.deleting {
            "Terminating".to_owned()
        } else {
            p.pod.phase.clone()
        },
        p.pod.restarts.to_string(),
        p.pod
            .created
            .as_deref()
            .and_then(|t| age(t, now))
            .map_or("-".to_owned(), short_duration),
        match admin {
            None => "-".to_owned(),
            Some(a) if !a.reachable => style.red("unreachable"),
            Some(a) => match a.ready {
                Some(true) => "ready".to_owned(),
                Some(false) => style.red("not ready"),
                None => "?".to_owned(),
            },
        },
        number(reachable.and_then(|a| a.rules_loaded)),
        match reachable.and_then(|a| a.rules_invalid) {
            Some(n) if n > 0 => style.red(&n.to_string()),
            n => number(n),
        },
        match admin.and_then(|a| a.export_enabled) {
            Some(true) => "on".to_owned(),
            Some(false) => "off".to_owned(),
            None => "-".to_owned(),
        },
    ]
}

fn pods_text(report: &Report, now: SystemTime, style: &Style) -> String {
    let mut out = format!(
        "Agent pods (namespace {}, selector {}):\n",
        report.namespace, report.selector
    );
    if report.pods.is_empty() {
        out.push_str("  none\n");
    } else {
        let rows: Vec<Vec<String>> = report.pods.iter().map(|p| pod_row(p, now, style)).collect();
        out.push_str(&table(
            &[
                "POD", "READY", "STATUS", "RESTARTS", "AGE", "AGENT", "RULES", "INVALID", "EXPORT",
            ],
            &rows,
        ));
    }
    let rules = loaded_rules(&report.pods);
    if !rules.is_empty() {
        out.push_str("\nRules in force:\n");
        let rows: Vec<Vec<String>> = rules
            .iter()
            .map(|(rule, pods)| {
                let stale = stale_rules(&report.pods)
                    .iter()
                    .any(|(s, _)| s.rule == rule.rule);
                vec![
                    format!("  {}", rule.rule),
                    format!("{} rule", rule.tier),
                    rule.mode.clone(),
                    rule.priority.to_string(),
                    if stale {
                        style.yellow("stale")
                    } else {
                        "current".to_owned()
                    },
                    pods.join(", "),
                ]
            })
            .collect();
        out.push_str(&table(
            &["  RULE", "TIER", "MODE", "PRIORITY", "VERSION", "PODS"],
            &rows,
        ));
    }
    let namespaces: Vec<String> = {
        let mut seen: Vec<String> = Vec::new();
        for globs in report
            .pods
            .iter()
            .filter_map(|p| p.admin.as_ref()?.cluster_rule_namespaces.as_ref())
        {
            let text = globs.join(", ");
            if !seen.contains(&text) {
                seen.push(text);
            }
        }
        seen
    };
    for text in namespaces {
        if text == "*" {
            out.push_str("Cluster rule namespaces: * (every rule ConfigMap is a cluster rule)\n");
        } else {
            let _ = writeln!(
                out,
                "Cluster rule namespaces: {text} (rule ConfigMaps elsewhere are namespace rules)"
            );
        }
    }
    let stale = stale_rules(&report.pods);
    if !stale.is_empty() {
        out.push_str("\nStale rules (the last valid version is served):\n");
        for (rule, pods) in stale {
            let _ = writeln!(
                out,
                "  {} (pod {}): {}",
                rule.rule,
                pods.join(", "),
                stale_text(rule)
            );
        }
    }
    let invalid = invalid_rules(&report.pods);
    if !invalid.is_empty() {
        out.push_str("\nInvalid rules:\n");
        for (rule, pods) in invalid {
            let _ = writeln!(
                out,
                "  {} (pod {}): {}",
                rule.rule,
                pods.join(", "),
                rule.message
            );
        }
    }
    out
}

fn connection_text(report: &Report, now: SystemTime, style: &Style, out: &mut String) {
    let connection = &report.connection;
    let _ = write!(out, "\nConnection {}/{}", report.namespace, connection.name);
    if !connection.found {
        // Said only when some pod answered that its export is off and none that it is on.
        let export_known_off = report.exporting_pods().next().is_none()
            && report
                .pods
                .iter()
                .any(|p| p.admin.as_ref().is_some_and(|a| a.export_enabled.is_some()));
        out.push_str(if export_known_off {
            ": not found (violation export is off on the agent pods read: none is needed)\n"
        } else {
            ": not found\n"
        });
        return;
    }
    if connection.by_pod.is_empty() {
        out.push_str(": no status by pod yet\n");
        return;
    }
    out.push_str(", status by pod:\n");
    let mut rows = Vec::new();
    for entry in &connection.by_pod {
        let pod = if entry.pod_found {
            entry.pod.clone()
        } else {
            format!("{} (gone)", entry.pod)
        };
        if entry.sources.is_empty() {
            rows.push(vec![
                pod.clone(),
                "-".into(),
                "-".into(),
                "never".into(),
                "never".into(),
                entry.connection_errors.len().to_string(),
                if entry.connection_errors.is_empty() {
                    "no publish yet".into()
                } else {
                    style.red("CONNECTION ERRORS")
                },
            ]);
        }
        for source in &entry.sources {
            let state = match (source.state, entry.pod_found) {
                (_, false) => "-".to_owned(),
                (SourceState::Ok, _) => "ok".to_owned(),
                (SourceState::Idle, _) => style.yellow("stale (idle)"),
                (SourceState::Stale, _) => style.red("STALE"),
                (SourceState::Errors, _) => style.red("ERRORS"),
            };
            rows.push(vec![
                pod.clone(),
                source.source.clone(),
                source.active.to_string(),
                ago(source.last_attempt_time.as_deref(), now),
                ago(source.last_success_time.as_deref(), now),
                (source.errors.len() + entry.connection_errors.len()).to_string(),
                state,
            ]);
        }
    }
    out.push_str(&table(
        &[
            "POD",
            "SOURCE",
            "ACTIVE",
            "LAST ATTEMPT",
            "LAST SUCCESS",
            "ERRORS",
            "STATE",
        ],
        &rows,
    ));
}

fn webhooks_text(report: &Report, style: &Style, out: &mut String) {
    if report.webhook_configurations.is_empty() {
        out.push_str("\nValidatingWebhookConfiguration: none found\n");
    }
    for configuration in &report.webhook_configurations {
        let _ = writeln!(
            out,
            "\nValidatingWebhookConfiguration {}:",
            configuration.name
        );
        let rows: Vec<Vec<String>> = configuration
            .webhooks
            .iter()
            .map(|w| {
                vec![
                    w.name.clone(),
                    if w.ca_bundle {
                        "present".to_owned()
                    } else {
                        style.red("MISSING")
                    },
                    w.failure_policy.clone(),
                    w.target.clone(),
                    w.namespace_selector_text.clone(),
                ]
            })
            .collect();
        out.push_str(&table(
            &[
                "WEBHOOK",
                "CABUNDLE",
                "FAILURE POLICY",
                "CALLS",
                "NAMESPACE SELECTOR",
            ],
            &rows,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns() {
        let text = table(
            &["POD", "READY"],
            &[
                vec!["agent-long-name".into(), "yes".into()],
                vec!["a".into(), "no".into()],
            ],
        );
        assert_eq!(
            text,
            "POD              READY\nagent-long-name  yes\na                no\n"
        );
    }

    #[test]
    fn coloured_cells_align_as_plain_ones() {
        let style = Style::new(true);
        let text = table(
            &["A", "B"],
            &[
                vec![style.red("no"), "x".into()],
                vec!["yes".into(), "y".into()],
            ],
        );
        assert_eq!(text, "A    B\n\x1b[1;31mno\x1b[0m   x\nyes  y\n");
    }
}
