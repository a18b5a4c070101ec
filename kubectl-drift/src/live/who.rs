//! What `kubectl drift audit` and `kubectl drift blame` read to tell who made a drifted field
//! and why (reference §8 "Who and why", §9): the webhook's records of edits (its Events labelled
//! [`RECORD_SELECTOR`]), the drift-sentinel webhook configurations, and what the agent's audit
//! remembers in its Reports once the records' Events expired. Each is read once per command;
//! the join is the engine's ([`drift_engine::who`]). What cannot be read is said, never guessed.

use std::time::{Duration, SystemTime};

use drift_api::events::signature::{self, Verification};
use drift_api::events::{
    AUDIT_REPORT_LABEL, AUDIT_REPORT_NAME, RECORD_SELECTOR, RecordReader, Records,
};
use drift_api::paging::Pages;
use drift_engine::attribution::Coverage;
use drift_engine::who::{Memory, NamespaceLabels, ReportReader, WebhookScope};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use serde_json::Value;

use crate::cluster::{Cluster, collection_path};
use crate::verdict::WEBHOOK_NAME;

/// Reports read a page (each may be near 1 MiB).
const REPORT_PAGE: u32 = 10;

fn place(namespace: Option<&str>) -> String {
    match namespace {
        Some(namespace) if !namespace.is_empty() => format!("namespace {namespace}"),
        _ => "every namespace".to_owned(),
    }
}

/// The webhook's records of edits in `namespace` (every namespace when `None` or empty), of the
/// object `uid` only when given, by object uid. `Err` says why they could not be read.
pub(crate) async fn read_records(
    cluster: &Cluster,
    namespace: Option<&str>,
    uid: Option<&str>,
    verification: &Verification,
) -> Result<Records, String> {
    let api: Api<Event> = match namespace.filter(|n| !n.is_empty()) {
        Some(namespace) => Api::namespaced(cluster.client.clone(), namespace),
        None => Api::all(cluster.client.clone()),
    };
    let regarding = uid.map(|uid| format!("regarding.uid={uid}"));
    let mut pages = Pages::new(500);
    let mut reader = RecordReader::new(verification.clone());
    while let Some(params) = pages.next_params() {
        let mut params = params.labels(RECORD_SELECTOR);
        if let Some(selector) = &regarding {
            params = params.fields(selector);
        }
        let page = cluster.timed(api.list(&params)).await.map_err(|e| {
            format!(
                "the webhook's records of edits (Events labelled {RECORD_SELECTOR}) could not be read: {e}; the users of drifted fields are not known (needs list on events.k8s.io events in {})",
                place(namespace)
            )
        })?;
        pages.answered(page.metadata.continue_.as_deref());
        // With a page left unread, an edit whose record is on it would be called unseen.
        reader
            .add_page(&page.items, pages.has_more())
            .map_err(|e| format!("{e}; the users of drifted fields are not known"))?;
    }
    let mut records = reader.into_records();
    if let Some(uid) = uid {
        records.verified.retain(|key, _| key == uid);
        records.unverified.retain(|key, _| key == uid);
    }
    Ok(records)
}

/// What the webhook's records and the audit's Reports are verified with: the public key the
/// agent publishes in the ConfigMap [`signature::PUBLIC_KEY_CONFIGMAP`] of its namespace (the
/// webhook configuration's `clientConfig.service.namespace`), or why it cannot be had — then
/// no user is named from them, and that is said on stderr once.
pub(crate) async fn verification(
    cluster: &Cluster,
    configurations: &Result<Vec<Value>, String>,
) -> Verification {
    let namespace = configurations
        .as_ref()
        .map_err(Clone::clone)
        .and_then(|c| crate::cluster::pods::namespace_of_webhook(c).map_err(|e| format!("{e:#}")));
    let verification = match &namespace {
        Err(why) => Verification::Unavailable(format!(
            "the agent's namespace, where its public key is, is not known: {why}"
        )),
        Ok(namespace) => {
            let collection = collection_path("", "v1", Some(namespace), "configmaps");
            let place = format!("ConfigMap {namespace}/{}", signature::PUBLIC_KEY_CONFIGMAP);
            match cluster
                .get(&collection, signature::PUBLIC_KEY_CONFIGMAP)
                .await
            {
                Ok(Some(found)) => match found
                    .pointer(&format!("/data/{}", signature::PUBLIC_KEY_DATA))
                    .and_then(Value::as_str)
                    .filter(|text| !text.is_empty())
                {
                    Some(text) => match signature::public_key_of_text(text) {
                        Ok(key) => Verification::Key(key),
                        Err(e) => Verification::Unavailable(format!(
                            "the public key in {place} (data.{}) {e}",
                            signature::PUBLIC_KEY_DATA
                        )),
                    },
                    None => Verification::Unavailable(format!(
                        "{place} holds no public key (data.{}): the agent runs without --record-signing-key, or has not started",
                        signature::PUBLIC_KEY_DATA
                    )),
                },
                Ok(None) => Verification::Unavailable(format!("{place} does not exist")),
                Err(e) => Verification::Unavailable(format!(
                    "{place} could not be read ({e}; needs get on configmaps {} in namespace {namespace})",
                    signature::PUBLIC_KEY_CONFIGMAP
                )),
            }
        }
    };
    if let Verification::Unavailable(why) = &verification {
        eprintln!(
            "kubectl drift: the webhook's records could not be verified: {why}; no user is named from them"
        );
    }
    verification
}

/// Since when the records can tell an edit the webhook did not see: the API server keeps Events
/// `event_ttl` (its `--event-ttl`), so an edit older than that may have had a record.
pub(crate) fn coverage(now: SystemTime, event_ttl: Duration) -> Coverage {
    Coverage {
        since: now.checked_sub(event_ttl).unwrap_or(SystemTime::UNIX_EPOCH),
        read_at: now,
    }
}

/// The cluster's drift-sentinel webhook configurations (those with the webhook
/// `validate.drift-sentinel.k8s.io`), as JSON. `Err` says why they could not be read.
pub(crate) async fn webhook_configurations(cluster: &Cluster) -> Result<Vec<Value>, String> {
    let collection = collection_path(
        "admissionregistration.k8s.io",
        "v1",
        None,
        "validatingwebhookconfigurations",
    );
    let listed = cluster
        .list(&collection, false)
        .await
        .map_err(|e| format!("the webhook configurations could not be read ({e})"))?;
    Ok(listed
        .into_iter()
        .filter(|c| {
            c.get("webhooks")
                .and_then(Value::as_array)
                .is_some_and(|hooks| hooks.iter().any(|h| h["name"] == WEBHOOK_NAME))
        })
        .collect())
}

/// Whether the webhook is sent an object's UPDATEs, from the configurations read (or why they
/// could not be) and the Namespaces read (`namespaces`, as JSON: their labels, which a webhook's
/// namespaceSelector reads).
pub(crate) fn webhook_scope(
    configurations: Result<Vec<Value>, String>,
    namespaces: &[Value],
) -> WebhookScope {
    match configurations {
        Ok(configurations) => WebhookScope::Read {
            configurations,
            namespace_labels: Some({
                let mut labels = NamespaceLabels::default();
                for namespace in namespaces {
                    if labels.is_full() {
                        break;
                    }
                    let Some(name) = namespace.pointer("/metadata/name").and_then(Value::as_str)
                    else {
                        continue;
                    };
                    let own = namespace
                        .pointer("/metadata/labels")
                        .and_then(Value::as_object)
                        .cloned()
                        .unwrap_or_default();
                    labels.add(name, own);
                }
                labels.into_map()
            }),
        },
        Err(why) => WebhookScope::Unknown(why),
    }
}

/// What the agent's audit remembers in its Reports ([`ReportReader`]): the Report of
/// `namespace` (and the ClusterReport for an empty one), or every Report and the ClusterReport
/// when `None`. Without the OpenReports CRDs, or with nothing written yet, nothing is
/// remembered. `Err` says why they could not be read.
pub(crate) async fn remembered(
    cluster: &Cluster,
    namespace: Option<&str>,
    verification: &Verification,
) -> Result<Memory, String> {
    let why = |e: String| {
        format!(
            "the audit's Reports could not be read ({e}): what it attributed before the webhook's records expired is not known (needs get and list on openreports.io reports in {})",
            place(namespace)
        )
    };
    let reports = collection_path(
        "openreports.io",
        "v1alpha1",
        namespace.filter(|n| !n.is_empty()),
        "reports",
    );
    let cluster_reports = collection_path("openreports.io", "v1alpha1", None, "clusterreports");
    let selector = format!("{}={}", AUDIT_REPORT_LABEL.0, AUDIT_REPORT_LABEL.1);
    let mut reader = ReportReader::new(verification.clone());
    match namespace {
        Some(namespace) => {
            let collection = if namespace.is_empty() {
                &cluster_reports
            } else {
                &reports
            };
            match cluster.get(collection, AUDIT_REPORT_NAME).await {
                Ok(found) => reader.add_page(found.iter()),
                // Not served: the OpenReports CRDs are not installed, nothing is remembered there.
                Err(e) if e.code() == Some(404) => {}
                Err(e) => return Err(why(e.to_string())),
            }
        }
        None => {
            for collection in [&reports, &cluster_reports] {
                let mut pages = Pages::new(REPORT_PAGE);
                while let Some(params) = pages.next_params()
                    && !reader.is_full()
                {
                    let request = kube::core::request::Request::new(collection)
                        .list(&params.labels(&selector))
                        .map_err(|e| why(e.to_string()))?;
                    let text = match cluster.timed(cluster.client.request_text(request)).await {
                        Ok(text) => text,
                        Err(e) if e.code() == Some(404) => break,
                        Err(e) => return Err(why(e.to_string())),
                    };
                    let page: Value =
                        serde_json::from_str(&text).map_err(|e| why(e.to_string()))?;
                    let items = page
                        .get("items")
                        .and_then(Value::as_array)
                        .map_or(&[][..], Vec::as_slice);
                    reader.add_page(items);
                    pages.answered(page.pointer("/metadata/continue").and_then(Value::as_str));
                }
            }
        }
    }
    Ok(reader.into_memory())
}
