//! `kubectl drift blame KIND/NAME` (reference §9): who owns each field of a live object (its
//! managedFields, the kubectl-blame view), and its drift as `kubectl drift audit` finds it, with
//! who made each drifted field and why (reference §8 "Who and why").
//!
//! The judgement is the engine's audit of the object ([`drift_engine::audit::audit_object`],
//! with the cluster's rules in the agent's tiers and its Namespace's mode annotation), the who
//! and why the engine's join ([`drift_engine::attribution::attribute_drift`]) of its drifted
//! fields with the webhook's records of edits (its Events, as the agent's audit reads them) and
//! with whether the webhook configuration sends the object's UPDATEs to the webhook
//! ([`drift_engine::webhook_scope`]). [`view`] builds what is shown; nothing is judged here.

mod view;

use std::time::SystemTime;

use anyhow::{Context as _, anyhow};
use drift_api::events::signature::Verification;
use drift_engine::attribution::{Evidence, Unverified};
use drift_engine::audit::AuditedObject;
use drift_engine::manifests;
use serde_json::Value;

use crate::cluster::{Cluster, collection_path};
use crate::live::{self, resolve, who};
use crate::plan::{Blame, Print};
use crate::verdict::Verdict;

/// Shows the blame of the plan's object.
pub(crate) async fn run(plan: &Blame, print: Print) -> anyhow::Result<Verdict> {
    let cluster = live::connect(&plan.kube).await?;
    let (resource, namespace) = resolve::resolve_target(
        &cluster,
        &plan.kind,
        plan.kube.namespace.as_deref(),
    )
    .await
    .with_context(|| {
        format!(
            "cannot blame {}/{}: `kubectl api-resources` lists the kinds the cluster serves",
            plan.kind, plan.name
        )
    })?;
    let object = read_object(&cluster, &resource, &namespace, &plan.name).await?;
    let (rules, namespace_object) = tokio::join!(
        live::tiered_rules(&cluster, &plan.tiers),
        read_namespace(&cluster, &namespace)
    );
    let (rules, namespace_object) = (
        rules.context("blame judges the object with the cluster's rule ConfigMaps")?,
        namespace_object?,
    );
    let namespaces = manifests::namespaces(namespace_object.as_slice());
    let now = SystemTime::now();
    let audit =
        drift_engine::audit::audit_object(&rules, &namespaces, &object, &plan.managers, now);
    let mut notes = Vec::new();
    let drifted = audit.as_ref().is_some_and(drift_engine::Audit::is_drifted);
    let blame = if drifted {
        let uid = object
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or("");
        let configurations = who::webhook_configurations(&cluster).await;
        let verification = who::verification(&cluster, &configurations).await;
        let (records, remembered) = tokio::join!(
            who::read_records(&cluster, Some(&namespace), Some(uid), &verification),
            who::remembered(&cluster, Some(&namespace), &verification),
        );
        let unread = records.as_ref().err().cloned();
        if let Some(e) = &unread {
            notes.push(e.clone());
        }
        let coverage = match &unread {
            None => Ok(who::coverage(now, plan.event_ttl)),
            Some(e) => Err(e.as_str()),
        };
        let (remembered, memory_notes) = remembered;
        notes.extend(memory_notes);
        let scope = who::webhook_scope(configurations, &namespace_object);
        let interception = scope.of(&AuditedObject::of(&object, &resource.plural));
        let records = records.unwrap_or_default();
        if records.unverified_count() > 0 && matches!(verification, Verification::Keys(_)) {
            notes.push(format!(
                "{} of the webhook's records of this object did not verify: {}",
                records.unverified_count(),
                records.unverified_why
            ));
        }
        let evidence = Evidence {
            records: records.verified.get(uid).map_or(&[], Vec::as_slice),
            unverified: Unverified {
                records: records.unverified.get(uid).map_or(&[], Vec::as_slice),
                why: &records.unverified_why,
            },
            remembered: remembered.fields.get(uid).map_or(&[], Vec::as_slice),
            interception: &interception,
            coverage,
        };
        view::blame(&object, audit.as_ref(), Some(&evidence), notes)
    } else {
        view::blame(&object, audit.as_ref(), None, notes)
    };
    let document = serde_json::to_value(&blame)?;
    crate::render::emit(print, &document, |style| view::text(&blame, &style))?;
    Ok(Verdict::Allowed)
}

/// The live object, or an error naming it and what to do.
async fn read_object(
    cluster: &Cluster,
    resource: &resolve::Resource,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Value> {
    let place = if resource.namespaced {
        format!(" in namespace {namespace:?}")
    } else {
        String::new()
    };
    let what = format!("{} {name:?}{place}", resource.qualified());
    let namespace_flag = if resource.namespaced {
        format!(" -n {namespace}")
    } else {
        String::new()
    };
    let mut object = match cluster.get(&resource.collection(namespace), name).await {
        Ok(Some(object)) => object,
        Ok(None) => {
            return Err(anyhow!(
                "{what} not found: check the name and the namespace (kubectl get {}{namespace_flag}; -n NAMESPACE names another)",
                resource.qualified()
            ));
        }
        Err(e) if e.code() == Some(403) => {
            return Err(anyhow!(
                "cannot read {what}: {e}: blame needs get on {} (kubectl auth can-i get {}{namespace_flag})",
                resource.qualified(),
                resource.qualified()
            ));
        }
        Err(e) => return Err(anyhow!("cannot read {what} at {}: {e}", cluster.server)),
    };
    if object.pointer("/kind").and_then(Value::as_str).is_none() {
        object["kind"] = Value::String(resource.kind.clone());
        object["apiVersion"] = Value::String(resource.api_version());
    }
    Ok(object)
}

/// The object's Namespace (for its mode annotation and its labels, which the webhook's
/// namespaceSelector reads); none for a cluster-scoped object.
async fn read_namespace(cluster: &Cluster, namespace: &str) -> anyhow::Result<Vec<Value>> {
    if namespace.is_empty() {
        return Ok(Vec::new());
    }
    let found = cluster
        .get(&collection_path("", "v1", None, "namespaces"), namespace)
        .await
        .map_err(|e| {
            anyhow!(
                "cannot read Namespace {namespace:?} (for its drift-sentinel.k8s.io/mode annotation): {e}; blame needs get on namespaces"
            )
        })?;
    Ok(found
        .into_iter()
        .map(|mut n| {
            n["kind"] = Value::from("Namespace");
            n
        })
        .collect())
}
