//! `kubectl drift audit` against the cluster: its rule ConfigMaps (as `explain` reads them),
//! its Namespaces' mode annotations, the resources the auditing rules select (resolved through
//! discovery as the agent resolves them, a `*` selector standing for the resources the
//! cluster's drift-sentinel webhook intercepts), and their objects listed page by page — each
//! page judged and dropped before the next is read.

use std::time::{Duration, SystemTime};

use anyhow::{Context as _, anyhow};
use drift_api::events::Records;
use drift_api::events::signature::Verification;
use drift_api::paging::Pages;
use drift_engine::attribution::Coverage;
use drift_engine::manifests::{self, Namespaces};
use drift_engine::who::{Memory, RunEvidence};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::Api;
use kube::api::ListParams;
use kube::core::request::Request;
use serde_json::Value;

use super::report::{Report, Run};
use crate::cluster::{Cluster, collection_path};
use crate::live::{self, resolve, who};
use crate::plan::{ClusterTiers, Kube};

/// The label the chart puts on its objects, the webhook configuration included.
const CHART_LABEL: &str = "app.kubernetes.io/name=drift-sentinel";

/// What a run against the cluster audits, as the plan says.
pub(super) struct Scope<'p> {
    pub kube: &'p Kube,
    pub tiers: &'p ClusterTiers,
    pub all_namespaces: bool,
    pub resources: Option<&'p [(String, String)]>,
    pub chunk: u32,
    /// The API server's `--event-ttl`.
    pub event_ttl: Duration,
}

/// Audits the objects of `namespace` (the context's unless `all_namespaces`), telling who made
/// each drift and who set each bypass as the agent's audit tells them.
pub(super) async fn audit(plan: &Scope<'_>, managers: &[String]) -> anyhow::Result<Report> {
    let cluster = live::connect(plan.kube).await?;
    let scope = (!plan.all_namespaces).then(|| {
        plan.kube
            .namespace
            .clone()
            .unwrap_or_else(|| cluster.default_namespace.clone())
    });
    let (rules, namespaces, webhook, served, evidence) = tokio::join!(
        live::tiered_rules(&cluster, plan.tiers),
        read_namespaces(&cluster, scope.as_deref()),
        webhook_resources(&cluster, plan.resources),
        resolve::listable(&cluster),
        evidence(&cluster, scope.as_deref(), plan.event_ttl),
    );
    let (rules, (namespace_objects, namespaces), served) = (rules?, namespaces?, served?);
    let selected: Vec<resolve::Resource> = served
        .into_iter()
        .filter(|r| scope.is_none() || r.namespaced)
        .filter(|r| {
            let intercepted = webhook
                .iter()
                .any(|(group, plural)| *group == r.group && *plural == r.plural);
            drift_engine::audit::selects_kind(&rules, &r.group, &r.kind, intercepted)
        })
        .collect();
    let mut run = Run::new(&rules, &namespaces, managers, scope.clone())
        .with_who(evidence.into_run(&namespace_objects));
    for resource in &selected {
        list(&cluster, resource, scope.as_deref(), plan.chunk, &mut run).await?;
    }
    Ok(run.into_report())
}

/// What the run joins drifted objects with, read once: the webhook's records in the audited
/// namespace (every namespace with `-A`), the webhook configurations and what the agent's
/// audit remembers in its Reports and memory Events. What cannot be read is said on stderr and in each
/// attribution ("could not be read"), never guessed.
struct Evidence {
    records: Result<Records, String>,
    configurations: Result<Vec<Value>, String>,
    remembered: Memory,
    coverage: Coverage,
}

async fn evidence(cluster: &Cluster, scope: Option<&str>, event_ttl: Duration) -> Evidence {
    let now = SystemTime::now();
    let configurations = who::webhook_configurations(cluster).await;
    let verification = who::verification(cluster, &configurations).await;
    let (records, remembered) = tokio::join!(
        who::read_records(cluster, scope, None, &verification),
        who::remembered(cluster, scope, &verification),
    );
    if let (Ok(records), Verification::Keys(_)) = (&records, &verification)
        && records.unverified_count() > 0
    {
        eprintln!(
            "kubectl drift audit: {} of the webhook's records did not verify with its public keys (forged, or signed by a key rotated out and no longer listed): no user is named from them",
            records.unverified_count()
        );
    }
    let (remembered, memory_notes) = remembered;
    for note in records.as_ref().err().into_iter().chain(&memory_notes) {
        eprintln!("kubectl drift audit: {note}");
    }
    Evidence {
        records,
        configurations,
        remembered,
        coverage: who::coverage(now, event_ttl),
    }
}

impl Evidence {
    /// The engine's evidence of the run; `namespaces`: the Namespaces read (for their labels,
    /// which the webhook's namespaceSelector reads).
    fn into_run(self, namespaces: &[Value]) -> RunEvidence {
        let scope = who::webhook_scope(self.configurations, namespaces);
        let (records, coverage) = match self.records {
            Ok(records) => (records, Ok(self.coverage)),
            Err(reason) => (Records::default(), Err(reason)),
        };
        RunEvidence::new(records, coverage, self.remembered, scope)
    }
}

/// Every object of `resource` in `namespace` (every namespace when `None`), `chunk` a page,
/// each judged as it is read.
async fn list(
    cluster: &Cluster,
    resource: &resolve::Resource,
    namespace: Option<&str>,
    chunk: u32,
    run: &mut Run<'_>,
) -> anyhow::Result<()> {
    let collection = collection_path(
        &resource.group,
        &resource.version,
        namespace.filter(|_| resource.namespaced),
        &resource.plural,
    );
    let what = match namespace {
        Some(namespace) => format!("{} in namespace {namespace:?}", resource.qualified()),
        None => resource.qualified(),
    };
    let api_version = Value::String(resource.api_version());
    let kind = Value::String(resource.kind.clone());
    let mut pages = Pages::new(chunk);
    while let Some(params) = pages.next_params() {
        let request = Request::new(&collection)
            .list(&params)
            .map_err(kube::Error::BuildRequest)?;
        let text = cluster
            .timed(cluster.client.request_text(request))
            .await
            .with_context(|| format!("cannot list {what} at {}", cluster.server))?;
        let mut page: Value = serde_json::from_str(&text)
            .with_context(|| format!("the list of {what} is not JSON"))?;
        if let Some(Value::Array(items)) = page.get_mut("items").map(Value::take) {
            for mut item in items {
                // List items carry no apiVersion and kind; rules match on them.
                if let Some(map) = item.as_object_mut() {
                    map.insert("apiVersion".into(), api_version.clone());
                    map.insert("kind".into(), kind.clone());
                }
                run.audit_one(&item, &resource.plural);
            }
        }
        pages.answered(page.pointer("/metadata/continue").and_then(Value::as_str));
    }
    Ok(())
}

/// The Namespaces (metadata) and their mode annotations: every namespace's, or the one audited.
async fn read_namespaces(
    cluster: &Cluster,
    scope: Option<&str>,
) -> anyhow::Result<(Vec<Value>, Namespaces)> {
    let collection = collection_path("", "v1", None, "namespaces");
    let mut found = match scope {
        None => cluster.list(&collection, true).await.with_context(|| {
            format!(
                "cannot list the Namespaces (for their drift-sentinel.k8s.io/mode annotation) at {}",
                cluster.server
            )
        })?,
        Some(namespace) => cluster
            .get(&collection, namespace)
            .await
            .with_context(|| {
                format!(
                    "cannot read Namespace {namespace:?} (for its drift-sentinel.k8s.io/mode annotation)"
                )
            })?
            .into_iter()
            .collect(),
    };
    for namespace in &mut found {
        namespace["kind"] = Value::from("Namespace");
    }
    let namespaces = manifests::namespaces(&found);
    Ok((found, namespaces))
}

/// What a `*` selector audits: `--resources`, else the resources the chart's webhook
/// intercepts (its `webhook.rules`, as the chart passes them to the audit Deployment), else the
/// chart's defaults. A user who may not read webhook configurations gets the defaults.
async fn webhook_resources(
    cluster: &Cluster,
    given: Option<&[(String, String)]>,
) -> Vec<(String, String)> {
    if let Some(given) = given {
        return given.to_vec();
    }
    let api: Api<ValidatingWebhookConfiguration> = Api::all(cluster.client.clone());
    let listed = cluster
        .timed(api.list(&ListParams::default().labels(CHART_LABEL)))
        .await
        .map_err(|e| anyhow!("{e}"));
    let found = listed.map(|l| intercepted(&l.items)).unwrap_or_default();
    if found.is_empty() {
        drift_engine::audit::parse_resources(&[drift_engine::audit::DEFAULT_AUDIT_RESOURCES])
    } else {
        found
    }
}

/// `(group, resource)` of every rule of the drift-sentinel admission webhooks (subresources and
/// wildcards left out).
fn intercepted(configurations: &[ValidatingWebhookConfiguration]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let hooks = configurations
        .iter()
        .flat_map(|c| c.webhooks.iter().flatten())
        .filter(|w| w.name == crate::verdict::WEBHOOK_NAME);
    for rule in hooks.flat_map(|w| w.rules.iter().flatten()) {
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                let pair = (group.clone(), resource.clone());
                if group != "*"
                    && resource != "*"
                    && !resource.contains('/')
                    && !found.contains(&pair)
                {
                    found.push(pair);
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_webhook_rules_name_the_intercepted_resources() {
        let configuration: ValidatingWebhookConfiguration = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "ds"},
            "webhooks": [
                {"name": "validate.drift-sentinel.k8s.io", "admissionReviewVersions": ["v1"],
                 "sideEffects": "None", "clientConfig": {},
                 "rules": [
                    {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["UPDATE"],
                     "resources": ["deployments", "deployments/scale", "statefulsets"]},
                    {"apiGroups": ["argoproj.io"], "apiVersions": ["v1alpha1"], "operations": ["UPDATE"],
                     "resources": ["rollouts", "*"]}]},
                {"name": "rules.drift-sentinel.k8s.io", "admissionReviewVersions": ["v1"],
                 "sideEffects": "None", "clientConfig": {},
                 "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                    "resources": ["configmaps"]}]}
            ]
        }))
        .unwrap();
        let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
            list.iter()
                .map(|(g, r)| ((*g).to_owned(), (*r).to_owned()))
                .collect()
        };
        assert_eq!(
            intercepted(&[configuration]),
            pairs(&[
                ("apps", "deployments"),
                ("apps", "statefulsets"),
                ("argoproj.io", "rollouts")
            ])
        );
    }
}
