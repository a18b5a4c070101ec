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
use drift_api::events::{EditRecord, RECORD_SELECTOR, record_of};
use drift_api::paging::Pages;
use drift_engine::attribution::{Coverage, Evidence};
use drift_engine::manifests;
use drift_engine::webhook_scope::{self, Interception, Target};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use serde_json::{Map, Value};

use crate::cluster::{Cluster, collection_path};
use crate::live::{self, resolve};
use crate::plan::{Blame, Print};
use crate::verdict::{Verdict, WEBHOOK_NAME};

/// Records read at most for one object (pages of 500): the webhook keeps a handful of Events per
/// object (one series per user and finding).
const MAX_RECORDS: usize = 5_000;

/// Shows the blame of the plan's object.
pub(crate) async fn run(plan: &Blame, print: Print) -> anyhow::Result<Verdict> {
    let cluster = live::connect(&plan.kube).await?;
    let resource = resolve::resolve(&cluster, &plan.kind)
        .await
        .with_context(|| {
            format!(
                "cannot blame {}/{}: `kubectl api-resources` lists the kinds the cluster serves",
                plan.kind, plan.name
            )
        })?;
    let namespace = if resource.namespaced {
        plan.kube
            .namespace
            .clone()
            .unwrap_or_else(|| cluster.default_namespace.clone())
    } else {
        String::new()
    };
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
        let (records, interception) = tokio::join!(
            read_records(&cluster, &namespace, uid),
            read_interception(&cluster, &resource, &namespace, &object, &namespace_object),
        );
        let coverage = match &records {
            Ok(_) => Some(Coverage {
                since: now
                    .checked_sub(plan.event_ttl)
                    .unwrap_or(SystemTime::UNIX_EPOCH),
                read_at: now,
            }),
            Err(e) => {
                notes.push(e.clone());
                None
            }
        };
        let records = records.unwrap_or_default();
        let evidence = Evidence {
            records: &records,
            remembered: &[],
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

/// The webhook's records of edits of the object (uid `uid`): its Events labelled as carrying
/// one, in the object's namespace. `Err` is a note saying why they could not be read.
async fn read_records(
    cluster: &Cluster,
    namespace: &str,
    uid: &str,
) -> Result<Vec<EditRecord>, String> {
    let api: Api<Event> = if namespace.is_empty() {
        Api::all(cluster.client.clone())
    } else {
        Api::namespaced(cluster.client.clone(), namespace)
    };
    let selector = format!("regarding.uid={uid}");
    let mut pages = Pages::new(500);
    let mut records = Vec::new();
    let mut read = 0;
    while let Some(params) = pages.next_params().filter(|_| read < MAX_RECORDS) {
        let params = params.labels(RECORD_SELECTOR).fields(&selector);
        let page = cluster.timed(api.list(&params)).await.map_err(|e| {
            let place = if namespace.is_empty() {
                "every namespace".to_owned()
            } else {
                format!("namespace {namespace}")
            };
            format!(
                "the webhook's records of edits (Events labelled {RECORD_SELECTOR}) could not be read: {e}; the users of drifted fields are not known (blame needs list on events.k8s.io events in {place})"
            )
        })?;
        read += page.items.len();
        records.extend(
            page.items
                .iter()
                .filter_map(record_of)
                .filter(|r| r.uid == uid),
        );
        pages.answered(page.metadata.continue_.as_deref());
    }
    Ok(records)
}

/// Whether the cluster's drift-sentinel webhook configurations (those with the webhook
/// `validate.drift-sentinel.k8s.io`) send the object's UPDATEs to the webhook.
async fn read_interception(
    cluster: &Cluster,
    resource: &resolve::Resource,
    namespace: &str,
    object: &Value,
    namespace_object: &[Value],
) -> Interception {
    let collection = collection_path(
        "admissionregistration.k8s.io",
        "v1",
        None,
        "validatingwebhookconfigurations",
    );
    let listed = match cluster.list(&collection, false).await {
        Ok(listed) => listed,
        Err(e) => {
            return Interception::Unknown(format!(
                "the webhook configurations could not be read ({e})"
            ));
        }
    };
    let ours: Vec<Value> = listed
        .into_iter()
        .filter(|c| {
            c.get("webhooks")
                .and_then(Value::as_array)
                .is_some_and(|hooks| hooks.iter().any(|h| h["name"] == WEBHOOK_NAME))
        })
        .collect();
    let no_labels = Map::new();
    let target = Target {
        group: &resource.group,
        version: &resource.version,
        resource: &resource.plural,
        namespace,
        namespace_labels: if namespace.is_empty() {
            None
        } else {
            Some(labels_of(namespace_object.first()).unwrap_or(&no_labels))
        },
        object_labels: Some(labels_of(Some(object)).unwrap_or(&no_labels)),
    };
    webhook_scope::interception_by(&ours, &target)
}

fn labels_of(object: Option<&Value>) -> Option<&Map<String, Value>> {
    object?.get("metadata")?.get("labels")?.as_object()
}
