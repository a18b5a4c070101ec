//! `kubectl drift audit` (reference §8, §9): the audit of `drift-sentinel audit` run from the
//! plugin. Which objects a run judges and the judgement are the engine's
//! ([`drift_engine::audit::audit_object`]), the text of a drifted object its renderer's
//! ([`drift_engine::message::drift_text`]), the record the API's
//! ([`drift_engine::record::audited`]), the files `drift_load`'s: the agent
//! calls the same ones, so that the plugin and the agent name the same objects and paths.
//!
//! Offline (here): the rules and namespaces of files ([`crate::files`], as `explain --rules`
//! reads them) and the objects of `-f` files, parsed as the agent parses its `--objects`.
//! Against the cluster ([`cluster`]): its rule ConfigMaps and Namespaces as `explain` reads
//! them, the objects listed page by page. Either way one [`report::Run`] judges the objects and
//! this module prints what it found. Exit 0 no drift, 1 drift, 2 error.

mod cluster;
mod report;

use serde_json::Value;

use report::{Found, Report, Run};

use crate::files;
use crate::plan::{Audit, AuditSource, Print};
use crate::render::Style;
use crate::verdict::Verdict;

/// Runs the audit the plan says and prints it; drift is [`Verdict::Denied`] (exit 1).
pub(crate) async fn run(plan: &Audit, print: Print) -> anyhow::Result<Verdict> {
    let report = match &plan.source {
        AuditSource::Offline {
            rules,
            files,
            namespace,
        } => {
            let loaded = files::load_rules(&rules.rules, &rules.tiers)?;
            let namespaces = files::load_namespaces(rules.namespace_file.as_deref())?;
            let mut run = Run::new(&loaded, &namespaces, &plan.managers, namespace.clone());
            for file in drift_load::files(files, drift_load::YAML_OR_JSON)? {
                for object in drift_load::read_documents(&file)? {
                    if namespace
                        .as_deref()
                        .is_some_and(|n| n != namespace_of(&object))
                    {
                        continue;
                    }
                    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
                    run.audit_one(&object, &drift_engine::manifests::resource_of(kind));
                }
            }
            run.into_report()
        }
        AuditSource::Cluster {
            kube,
            all_namespaces,
            resources,
            chunk,
            tiers,
            event_ttl,
        } => {
            cluster::audit(
                &cluster::Scope {
                    kube,
                    tiers,
                    all_namespaces: *all_namespaces,
                    resources: resources.as_deref(),
                    chunk: *chunk,
                    event_ttl: *event_ttl,
                },
                &plan.managers,
            )
            .await?
        }
    };
    print_report(&report, print)?;
    Ok(if report.counts.drifted > 0 {
        Verdict::Denied
    } else {
        Verdict::Allowed
    })
}

fn namespace_of(object: &Value) -> &str {
    object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The summary line: `8 objects: 5 drifted, 2 clean, 1 no_baseline, 0 skipped`, and where.
fn summary(report: &Report) -> String {
    let c = &report.counts;
    let place = match &report.namespace {
        Some(namespace) => format!(" in namespace {namespace}"),
        None => String::new(),
    };
    let mut line = format!(
        "{} objects{place}: {} drifted, {} clean, {} no_baseline, {} skipped",
        c.total(),
        c.drifted,
        c.clean,
        c.no_baseline,
        c.skipped
    );
    if let Some(bypasses) = c.bypass_summary() {
        line.push_str("; ");
        line.push_str(&bypasses);
    }
    line
}

/// `-o text`: each object carrying the bypass annotation (its end or "without an end", who set
/// it and when) and each drifted object (its first word coloured by the mode: red for enforce,
/// yellow otherwise), in the order judged, then the summary.
fn text(report: &Report, style: &Style) -> String {
    let mut out = String::new();
    for printed in &report.text {
        let text = printed.text.as_str();
        match (printed.found, text.strip_prefix("drifted")) {
            (Found::Drifted { enforce: true }, Some(rest)) => {
                out.push_str(&style.red("drifted"));
                out.push_str(rest);
            }
            (Found::Drifted { enforce: false }, Some(rest)) => {
                out.push_str(&style.yellow("drifted"));
                out.push_str(rest);
            }
            _ => out.push_str(text),
        }
    }
    if report.counts.total() == 0 {
        out.push_str(
            "No object is selected by an auditing rule (mode enforce, warn or dry-run).\n",
        );
    }
    let line = summary(report);
    out.push_str(&if report.counts.drifted == 0 {
        style.green(&line)
    } else {
        style.bold(&line)
    });
    out.push('\n');
    out
}

fn print_report(report: &Report, print: Print) -> anyhow::Result<()> {
    let document = serde_json::to_value(report)?;
    crate::render::emit(print, &document, |style| text(report, &style))
}

#[cfg(test)]
mod tests {
    use super::*;
    use drift_api::status::AuditCounts;

    #[test]
    fn the_summary_names_the_namespace_and_every_count() {
        let report = Report {
            id: "r".into(),
            namespace: Some("shop".into()),
            counts: AuditCounts {
                drifted: 5,
                clean: 2,
                no_baseline: 1,
                skipped: 0,
                ..AuditCounts::default()
            },
            drifted: Vec::new(),
            bypassed: Vec::new(),
            text: Vec::new(),
        };
        assert_eq!(
            summary(&report),
            "8 objects in namespace shop: 5 drifted, 2 clean, 1 no_baseline, 0 skipped"
        );
    }
}
