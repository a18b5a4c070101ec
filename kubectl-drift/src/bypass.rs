//! `kubectl drift bypass` (reference §9): a temporary exception, set, cleared and listed.
//!
//! - `bypass KIND/NAME --for 4h [--reason TEXT]` writes the winning rule's bypass annotation
//!   as an RFC 3339 end — counted from the API server's clock (the `Date` of its answer), not
//!   this machine's — and `drift-sentinel.k8s.io/bypass-reason`, refusing a duration over the
//!   rule's `maxBypass` and naming the rule;
//! - `--clear` removes both;
//! - `--list [-A]` shows every object of the webhook's kinds carrying its rule's bypass
//!   annotation: its end (or none), what it means now, the reason, and who set it (the field
//!   manager and time of managedFields).
//!
//! The writes are merge patches with field manager `kubectl-drift`; the webhook judges them as
//! any edit (setting a bypass is allowed by the bypass it sets; the annotations themselves are
//! never compared), and its warnings are printed as kubectl prints them.

use std::time::{Duration, SystemTime};

use anyhow::{Context as _, anyhow, bail};
use drift_engine::RuleSet;
use drift_engine::audit::{BypassFinding, bypass_finding, winning_rule};
use drift_engine::bypass::BypassEnd;
use drift_engine::rule::{BYPASS_REASON_ANNOTATION, CompiledRule};
use drift_engine::time::{format_rfc3339_seconds, human_duration};
use http_body_util::BodyExt as _;
use hyper::http;
use kube::core::params::{Patch, PatchParams};
use kube::core::request::Request;
use serde_json::{Value, json};

use crate::cli::Output;
use crate::cluster::{Cluster, FIELD_MANAGER, collection_path, warnings};
use crate::live::resolve::{self, Resource};
use crate::plan::{BypassAction, BypassPlan, Print};
use crate::verdict::Verdict;

/// The kinds `--list` looks at: the webhook's (the chart's default `webhook.rules`).
const LISTED_KINDS: [&str; 4] = [
    "deployments.apps",
    "statefulsets.apps",
    "daemonsets.apps",
    "rollouts.argoproj.io",
];

/// Runs `kubectl drift bypass`.
pub(crate) async fn run(plan: &BypassPlan, print: Print) -> anyhow::Result<Verdict> {
    let cluster = crate::live::connect(&plan.kube).await?;
    let rules = crate::live::tiered_rules(&cluster, &plan.tiers).await?;
    match &plan.action {
        BypassAction::Set {
            kind,
            name,
            duration,
            reason,
        } => {
            let target = Target::fetch(&cluster, plan, kind, name).await?;
            set(
                &cluster,
                &rules,
                &target,
                *duration,
                reason.as_deref(),
                print,
            )
            .await?
        }
        BypassAction::Clear { kind, name } => {
            let target = Target::fetch(&cluster, plan, kind, name).await?;
            clear(&cluster, &rules, &target, print).await?
        }
        BypassAction::List { all_namespaces } => {
            let namespace = (!all_namespaces).then(|| {
                plan.kube
                    .namespace
                    .clone()
                    .unwrap_or_else(|| cluster.default_namespace.clone())
            });
            list(&cluster, &rules, namespace.as_deref(), print).await?
        }
    }
    Ok(Verdict::Allowed)
}

/// The object a bypass is set on or cleared from.
struct Target {
    resource: Resource,
    namespace: String,
    name: String,
    object: Value,
}

impl Target {
    async fn fetch(
        cluster: &Cluster,
        plan: &BypassPlan,
        kind: &str,
        name: &str,
    ) -> anyhow::Result<Self> {
        let (resource, namespace) =
            resolve::resolve_target(cluster, kind, plan.kube.namespace.as_deref()).await?;
        let mut object = cluster
            .get(&resource.collection(&namespace), name)
            .await
            .with_context(|| format!("cannot read {}", describe(&resource, &namespace, name)))?
            .ok_or_else(|| anyhow!("{} not found", describe(&resource, &namespace, name)))?;
        if object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            object["kind"] = Value::String(resource.kind.clone());
            object["apiVersion"] = Value::String(resource.api_version());
        }
        Ok(Target {
            resource,
            namespace,
            name: name.to_owned(),
            object,
        })
    }

    fn describe(&self) -> String {
        describe(&self.resource, &self.namespace, &self.name)
    }

    /// The rule whose bypass annotation counts for this object.
    fn rule<'r>(&self, rules: &'r RuleSet) -> anyhow::Result<&'r CompiledRule> {
        winning_rule(rules, &self.object).ok_or_else(|| {
            anyhow!(
                "no rule applies to {}: there is nothing to bypass (kubectl drift explain {}/{} shows the rules)",
                self.describe(),
                self.resource.qualified(),
                self.name
            )
        })
    }
}

/// `deployments.apps "web" in namespace "shop"`.
fn describe(resource: &Resource, namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        format!("{} {name:?}", resource.qualified())
    } else {
        format!(
            "{} {name:?} in namespace {namespace:?}",
            resource.qualified()
        )
    }
}

async fn set(
    cluster: &Cluster,
    rules: &RuleSet,
    target: &Target,
    duration: Duration,
    reason: Option<&str>,
    print: Print,
) -> anyhow::Result<()> {
    let rule = target.rule(rules)?;
    if let Some(max) = rule.max_bypass
        && duration > max
    {
        bail!(
            "--for {} is longer than rule {} allows for {}: its maxBypass is {}; ask for at most that",
            human_duration(duration),
            rule.id,
            target.describe(),
            human_duration(max)
        );
    }
    let now = server_time(cluster).await?;
    // Whole seconds, rounded up: the end is never before what was asked.
    let end = now + duration;
    let end = match end.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(since) if since.subsec_nanos() > 0 => {
            SystemTime::UNIX_EPOCH + Duration::from_secs(since.as_secs() + 1)
        }
        _ => end,
    };
    let end_text = format_rfc3339_seconds(end);
    let patch = json!({"metadata": {"annotations": {
        rule.bypass.as_str(): end_text,
        BYPASS_REASON_ANNOTATION: reason,
    }}});
    let answer = patch_object(cluster, target, &patch).await?;
    print_warnings(&answer.warnings);
    let document = json!({
        "object": target.describe(),
        "rule": rule.id.to_string(),
        "annotation": rule.bypass,
        "end": end_text,
        "for": human_duration(duration),
        "reason": reason,
    });
    let text = format!(
        "{} bypassed until {end_text} ({} from the API server's clock) under rule {}{}\n",
        target.describe(),
        human_duration(duration),
        rule.id,
        reason.map(|r| format!("; reason: {r}")).unwrap_or_default()
    );
    emit(print, &document, &text)
}

async fn clear(
    cluster: &Cluster,
    rules: &RuleSet,
    target: &Target,
    print: Print,
) -> anyhow::Result<()> {
    let rule = target.rule(rules)?;
    let annotations = target.object.pointer("/metadata/annotations");
    let had = annotations.and_then(|a| a.get(&rule.bypass)).is_some();
    let patch = json!({"metadata": {"annotations": {
        rule.bypass.as_str(): null,
        BYPASS_REASON_ANNOTATION: null,
    }}});
    let answer = patch_object(cluster, target, &patch).await?;
    print_warnings(&answer.warnings);
    let text = if had {
        format!(
            "{}: bypass cleared; rule {} judges its edits again\n",
            target.describe(),
            rule.id
        )
    } else {
        format!("{}: no bypass was set\n", target.describe())
    };
    let document =
        json!({"object": target.describe(), "rule": rule.id.to_string(), "cleared": had});
    emit(print, &document, &text)
}

/// One listed bypass.
struct Listed {
    namespace: String,
    kind: String,
    name: String,
    finding: Value,
    text: [String; 6],
}

async fn list(
    cluster: &Cluster,
    rules: &RuleSet,
    namespace: Option<&str>,
    print: Print,
) -> anyhow::Result<()> {
    let now = server_time(cluster).await?;
    let mut listed = Vec::new();
    for kind in LISTED_KINDS {
        // A kind the cluster does not serve (no Argo Rollouts) has nothing to list.
        let Ok(resource) = resolve::resolve(cluster, kind).await else {
            continue;
        };
        let collection = collection_path(
            &resource.group,
            &resource.version,
            namespace.filter(|_| resource.namespaced),
            &resource.plural,
        );
        let objects = cluster
            .list(&collection, true)
            .await
            .with_context(|| format!("cannot list {}", resource.qualified()))?;
        for mut object in objects {
            object["kind"] = Value::String(resource.kind.clone());
            object["apiVersion"] = Value::String(resource.api_version());
            let Some(rule) = winning_rule(rules, &object) else {
                continue;
            };
            if let Some(finding) = bypass_finding(rule, &object, now) {
                listed.push(listed_row(&object, rule, &finding));
            }
        }
    }
    listed.sort_by(|a, b| (&a.namespace, &a.kind, &a.name).cmp(&(&b.namespace, &b.kind, &b.name)));
    let document = Value::Array(listed.iter().map(|l| l.finding.clone()).collect());
    let text = if listed.is_empty() {
        match namespace {
            Some(namespace) => format!("no bypassed objects in namespace {namespace}\n"),
            None => "no bypassed objects\n".to_owned(),
        }
    } else {
        table(&listed)
    };
    emit(print, &document, &text)
}

fn listed_row(object: &Value, rule: &CompiledRule, finding: &BypassFinding<'_>) -> Listed {
    let text = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    let reason = object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(BYPASS_REASON_ANNOTATION))
        .and_then(Value::as_str)
        .map(|r| drift_engine::truncate::truncate_chars(r, 80));
    let end = finding.end_time().map(format_rfc3339_seconds);
    let state = finding.end();
    let remaining = finding.read.as_ref().ok().and_then(|b| b.remaining());
    let set_by = finding.set_by.as_ref().map(|e| e.to_string());
    let (namespace, name) = (text("/metadata/namespace"), text("/metadata/name"));
    let kind = text("/kind");
    let end_column = match (&end, remaining, state) {
        (Some(end), Some(left), _) => format!("{end} (in {})", human_duration(left)),
        (Some(end), _, _) => end.clone(),
        (None, _, BypassEnd::None) => "none".to_owned(),
        (None, _, _) => "-".to_owned(),
    };
    Listed {
        namespace: namespace.to_owned(),
        kind: kind.to_owned(),
        name: name.to_owned(),
        finding: json!({
            "namespace": namespace,
            "kind": kind,
            "name": name,
            "rule": rule.id.to_string(),
            "annotation": rule.bypass,
            "value": drift_engine::truncate::truncate_chars(&finding.value, 64),
            "end": end,
            "state": state.as_str(),
            "meaning": finding.to_string(),
            "reason": reason,
            "setBy": finding.set_by.as_ref().map(|e| e.manager.clone()),
            "since": finding.set_by.as_ref().and_then(|e| e.time.clone()),
        }),
        text: [
            format!("{kind}/{name}"),
            end_column,
            state.as_str().to_owned(),
            rule.id.to_string(),
            reason.unwrap_or_else(|| "-".to_owned()),
            set_by.unwrap_or_else(|| "-".to_owned()),
        ],
    }
}

/// The listing as kubectl prints tables: aligned columns, a header.
fn table(listed: &[Listed]) -> String {
    let header = [
        "NAMESPACE",
        "OBJECT",
        "END",
        "STATE",
        "RULE",
        "REASON",
        "SET BY",
    ];
    let rows: Vec<Vec<&str>> = listed
        .iter()
        .map(|l| {
            std::iter::once(l.namespace.as_str())
                .chain(l.text.iter().map(String::as_str))
                .collect()
        })
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: &[&str], out: &mut String| {
        let last = cells.len() - 1;
        for (i, cell) in cells.iter().enumerate() {
            out.push_str(cell);
            if i < last {
                let pad = widths[i] - cell.chars().count() + 3;
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push('\n');
    };
    line(&header, &mut out);
    for row in &rows {
        line(row, &mut out);
    }
    out
}

/// Prints the document (`-o json|yaml`) or the text.
fn emit(print: Print, document: &Value, text: &str) -> anyhow::Result<()> {
    match print.output {
        Output::Text => print!("{text}"),
        Output::Json => println!("{}", serde_json::to_string_pretty(document)?),
        Output::Yaml => print!("{}", serde_yaml::to_string(document)?),
    }
    Ok(())
}

/// An API answer with what the plugin reads of its headers.
struct Answer {
    date: Option<SystemTime>,
    warnings: Vec<String>,
}

/// Sends a request, reading the answer's `Date` and `Warning` headers; an error answer is the
/// API server's message.
async fn send(cluster: &Cluster, request: http::Request<Vec<u8>>) -> anyhow::Result<Answer> {
    let response = cluster
        .timed(cluster.client.send(request.map(kube::client::Body::from)))
        .await?;
    let status = response.status();
    let headers = response.headers();
    let date = headers
        .get(http::header::DATE)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_http_date);
    let warnings = warnings(headers);
    let body = cluster
        .timed(response.into_body().collect())
        .await?
        .to_bytes();
    if !status.is_success() {
        let message = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
        bail!("the API server answered {status}: {message}");
    }
    Ok(Answer { date, warnings })
}

/// The API server's clock: the `Date` of its answer to `/version`.
async fn server_time(cluster: &Cluster) -> anyhow::Result<SystemTime> {
    let request = http::Request::get("/version")
        .body(Vec::new())
        .context("cannot build the /version request")?;
    let answer = send(cluster, request)
        .await
        .with_context(|| format!("cannot read the time of {}", cluster.server))?;
    answer.date.ok_or_else(|| {
        anyhow!(
            "{} answered without a Date header: the end of a bypass is counted from the API server's clock, so it cannot be set",
            cluster.server
        )
    })
}

async fn patch_object(cluster: &Cluster, target: &Target, patch: &Value) -> anyhow::Result<Answer> {
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    let request = Request::new(target.resource.collection(&target.namespace))
        .patch(&target.name, &params, &Patch::Merge(patch))
        .map_err(kube::Error::BuildRequest)?;
    send(cluster, request)
        .await
        .with_context(|| format!("cannot patch {}", target.describe()))
}

/// An HTTP date (`Fri, 04 Dec 2026 12:00:00 GMT`).
fn parse_http_date(text: &str) -> Option<SystemTime> {
    let timestamp = jiff::fmt::rfc2822::parse(text).ok()?.timestamp();
    Some(SystemTime::from(timestamp))
}

/// Warnings as kubectl prints them.
fn print_warnings(warnings: &[String]) {
    for warning in warnings {
        eprintln!("Warning: {warning}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_dates() {
        assert_eq!(
            parse_http_date("Fri, 04 Dec 2026 12:00:00 GMT"),
            drift_engine::time::parse_rfc3339("2026-12-04T12:00:00Z")
        );
        assert_eq!(parse_http_date("yesterday"), None);
    }
}
