//! What `kubectl drift audit` and `kubectl drift blame` read to tell who made a drifted field
//! and why (reference §8 "Who and why", §9): the webhook's records of edits (its Events labelled
//! [`RECORD_SELECTOR`]), the drift-sentinel webhook configurations, and what the agent's audit
//! remembers in its Reports and its memory Events once the records' Events expired. Each is read once per command;
//! the join is the engine's ([`drift_engine::who`]). What cannot be read is said, never guessed.

use std::time::{Duration, SystemTime};

use drift_api::events::signature::{self, Verification};
use drift_api::events::{
    AUDIT_MEMORY_LABEL, AUDIT_MEMORY_VERSION, AUDIT_REPORT_LABEL, AUDIT_REPORT_NAME,
    RECORD_SELECTOR, RecordReader, Records,
};
use drift_api::paging::Pages;
use drift_engine::attribution::Coverage;
use drift_engine::who::{Memory, MemoryEventReader, NamespaceLabels, ReportReader, WebhookScope};
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

/// The ConfigMaps holding the agent's public keys: the one each drift-sentinel webhook
/// configuration names in [`signature::PUBLIC_KEY_CONFIGMAP_ANNOTATION`] (the chart gives each
/// release its own), or [`signature::PUBLIC_KEY_CONFIGMAP`] for one that names none. Each
/// once, in the order of the configurations.
pub(crate) fn record_key_configmaps(configurations: &[Value]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for configuration in configurations {
        let ours = configuration
            .get("webhooks")
            .and_then(Value::as_array)
            .is_some_and(|webhooks| {
                webhooks
                    .iter()
                    .any(|w| w.get("name").and_then(Value::as_str) == Some(WEBHOOK_NAME))
            });
        if !ours {
            continue;
        }
        let name = configuration
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(signature::PUBLIC_KEY_CONFIGMAP_ANNOTATION))
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .unwrap_or(signature::PUBLIC_KEY_CONFIGMAP);
        if !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
    }
    names
}

/// The public keys of one key ConfigMap (`data.ed25519` and `data.ed25519-previous`), or why
/// it holds none that can be used. `place` names it in the message.
pub(crate) fn keys_of_configmap(
    place: &str,
    configmap: &Value,
) -> Result<Vec<signature::VerifyingKey>, String> {
    let data = |key: &str| {
        configmap
            .pointer(&format!("/data/{key}"))
            .and_then(Value::as_str)
            .filter(|text| !text.trim().is_empty())
    };
    let current = data(signature::PUBLIC_KEY_DATA).ok_or_else(|| {
        format!(
            "{place} holds no public key (data.{}): the agent runs without --record-signing-key, or has not started",
            signature::PUBLIC_KEY_DATA
        )
    })?;
    let current = signature::public_key_of_text(current).map_err(|e| {
        format!(
            "the public key in {place} (data.{}) {e}",
            signature::PUBLIC_KEY_DATA
        )
    })?;
    let previous =
        signature::previous_keys_of_text(data(signature::PREVIOUS_KEYS_DATA).unwrap_or_default())
            .map_err(|e| {
            format!(
                "the previous public keys in {place} (data.{}), {e}",
                signature::PREVIOUS_KEYS_DATA
            )
        })?;
    Ok(std::iter::once(current).chain(previous).collect())
}

/// What the webhook's records and the audit's Reports are verified with: the public keys the
/// agent publishes in its key ConfigMap ([`record_key_configmaps`]) of its namespace (the
/// webhook configuration's `clientConfig.service.namespace`), or why they cannot be had — then
/// no user is named from them, and that is said on stderr once, naming the ConfigMap read.
pub(crate) async fn verification(
    cluster: &Cluster,
    configurations: &Result<Vec<Value>, String>,
) -> Verification {
    let namespace = configurations
        .as_ref()
        .map_err(Clone::clone)
        .and_then(|c| crate::cluster::pods::namespace_of_webhook(c).map_err(|e| format!("{e:#}")));
    let verification = match (&namespace, configurations) {
        (Err(why), _) | (_, Err(why)) => Verification::Unavailable(format!(
            "the agent's namespace, where its public key is, is not known: {why}"
        )),
        (Ok(namespace), Ok(configurations)) => {
            let collection = collection_path("", "v1", Some(namespace), "configmaps");
            let mut keys = Vec::new();
            let mut failures = Vec::new();
            for name in record_key_configmaps(configurations) {
                let place = format!("ConfigMap {namespace}/{name}");
                match cluster.get(&collection, &name).await {
                    Ok(Some(found)) => match keys_of_configmap(&place, &found) {
                        Ok(found) => keys.extend(found),
                        Err(why) => failures.push(why),
                    },
                    Ok(None) => failures.push(format!("{place} does not exist")),
                    Err(e) => failures.push(format!(
                        "{place} could not be read ({e}; needs get on configmaps {name} in namespace {namespace})"
                    )),
                }
            }
            trusted(keys, failures)
        }
    };
    if let Verification::Unavailable(why) = &verification {
        eprintln!(
            "kubectl drift: the webhook's records could not be verified: {why}; no user is named from them"
        );
    }
    verification
}

/// The verification of the keys read (the first is a release's current key), saying on stderr
/// which key ConfigMaps could not be used when others could.
fn trusted(keys: Vec<signature::VerifyingKey>, failures: Vec<String>) -> Verification {
    let mut keys = keys.into_iter();
    let Some(current) = keys.next() else {
        return Verification::Unavailable(if failures.is_empty() {
            "no drift-sentinel webhook configuration names a key ConfigMap".to_owned()
        } else {
            failures.join("; ")
        });
    };
    for why in &failures {
        eprintln!("kubectl drift: {why}; records signed with that release's key are not verified");
    }
    match signature::TrustedKeys::with_previous(current, keys.collect()) {
        Ok(keys) => Verification::Keys(keys),
        Err(e) => Verification::Unavailable(format!("the published public keys: {e}")),
    }
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

/// What the agent's audit remembers (reference §8 "Memory"): its Reports ([`reports_memory`]),
/// then, for the objects they have nothing of, its memory Events ([`events_memory`]), as the
/// audit itself reads them back after a restart. What could not be read, or did not verify,
/// is said in the notes (and nobody is named from it).
pub(crate) async fn remembered(
    cluster: &Cluster,
    namespace: Option<&str>,
    verification: &Verification,
) -> (Memory, Vec<String>) {
    let (reports, events) = tokio::join!(
        reports_memory(cluster, namespace, verification),
        events_memory(cluster, namespace, verification),
    );
    let mut notes = Vec::new();
    let mut memory = reports.unwrap_or_else(|e| {
        notes.push(e);
        Memory::default()
    });
    match events {
        Ok((remembered, unverified)) => {
            if unverified > 0 && verification.has_keys() {
                notes.push(format!(
                    "{unverified} of the audit's memory Events did not verify with its public key (forged, or signed by an earlier key): no user is named from them"
                ));
            }
            memory.fill_from(remembered);
        }
        Err(e) => notes.push(e),
    }
    (memory, notes)
}

/// What the audit's memory Events (labelled [`AUDIT_MEMORY_LABEL`]) in `namespace` (every
/// namespace when `None` or empty) remember ([`MemoryEventReader`]), and how many of their
/// annotations did not verify. `Err` says why they could not be read.
async fn events_memory(
    cluster: &Cluster,
    namespace: Option<&str>,
    verification: &Verification,
) -> Result<(Memory, usize), String> {
    let api: Api<Event> = match namespace.filter(|n| !n.is_empty()) {
        Some(namespace) => Api::namespaced(cluster.client.clone(), namespace),
        None => Api::all(cluster.client.clone()),
    };
    let selector = format!("{AUDIT_MEMORY_LABEL}={AUDIT_MEMORY_VERSION}");
    let mut pages = Pages::new(500);
    let mut reader = MemoryEventReader::new(verification.clone());
    while let Some(params) = pages.next_params() {
        let page = cluster
            .timed(api.list(&params.labels(&selector)))
            .await
            .map_err(|e| {
                format!(
                    "the audit's memory Events (labelled {selector}) could not be read: {e}; what it attributed before the webhook's records expired is not known from them (needs list on events.k8s.io events in {})",
                    place(namespace)
                )
            })?;
        pages.answered(page.metadata.continue_.as_deref());
        reader
            .add_page(&page.items, pages.has_more())
            .map_err(|e| format!("{e}; what the audit attributed before is not known from them"))?;
    }
    let unverified = reader.unverified();
    Ok((reader.into_memory(), unverified))
}

/// What the agent's audit remembers in its Reports ([`ReportReader`]): the Report of
/// `namespace` (and the ClusterReport for an empty one), or every Report and the ClusterReport
/// when `None`. Without the OpenReports CRDs, or with nothing written yet, nothing is
/// remembered. `Err` says why they could not be read.
async fn reports_memory(
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn configuration(annotation: Option<&str>, webhook: &str) -> Value {
        let mut c = json!({
            "metadata": {"name": "c", "annotations": {}},
            "webhooks": [{"name": webhook, "clientConfig": {"service": {"namespace": "ds"}}}],
        });
        if let Some(name) = annotation {
            c["metadata"]["annotations"][signature::PUBLIC_KEY_CONFIGMAP_ANNOTATION] = json!(name);
        }
        c
    }

    #[test]
    fn the_key_configmap_is_the_one_the_configuration_names() {
        // (configurations, the ConfigMaps read)
        let cases: Vec<(Vec<Value>, Vec<&str>)> = vec![
            (
                vec![configuration(Some("one-record-public-key"), WEBHOOK_NAME)],
                vec!["one-record-public-key"],
            ),
            // An installation from before the annotation: the fixed name.
            (
                vec![configuration(None, WEBHOOK_NAME)],
                vec![signature::PUBLIC_KEY_CONFIGMAP],
            ),
            (
                vec![configuration(Some("  "), WEBHOOK_NAME)],
                vec![signature::PUBLIC_KEY_CONFIGMAP],
            ),
            // Two releases in one namespace: both, once each.
            (
                vec![
                    configuration(Some("one-record-public-key"), WEBHOOK_NAME),
                    configuration(Some("two-record-public-key"), WEBHOOK_NAME),
                    configuration(Some("one-record-public-key"), WEBHOOK_NAME),
                ],
                vec!["one-record-public-key", "two-record-public-key"],
            ),
            // Another product's webhook configuration is not read.
            (
                vec![configuration(Some("theirs"), "validate.example.com")],
                vec![],
            ),
        ];
        for (configurations, want) in cases {
            assert_eq!(
                record_key_configmaps(&configurations),
                want,
                "{configurations:?}"
            );
        }
    }

    #[test]
    fn the_current_and_previous_keys_of_a_configmap() {
        let key = |b: u8| {
            signature::signing_key_of_seed(&[b; signature::SEED_BYTES])
                .unwrap()
                .verifying_key()
        };
        let text = |b: u8| signature::public_key_text(&key(b));
        let place = "ConfigMap ds/one-record-public-key";
        let found = keys_of_configmap(
            place,
            &json!({"data": {"ed25519": text(1), "ed25519-previous": format!("{}\n{}", text(2), text(3))}}),
        )
        .unwrap();
        assert_eq!(found, vec![key(1), key(2), key(3)]);
        let only = keys_of_configmap(
            place,
            &json!({"data": {"ed25519": text(1), "ed25519-previous": ""}}),
        );
        assert_eq!(only.unwrap(), vec![key(1)]);
        // (data, what the error says)
        let cases = [
            (json!({}), "holds no public key (data.ed25519)"),
            (json!({"data": {"ed25519": ""}}), "holds no public key"),
            (
                json!({"data": {"ed25519": "nope"}}),
                "the public key in ConfigMap ds/one-record-public-key (data.ed25519) is not base64",
            ),
            (
                json!({"data": {"ed25519": text(1), "ed25519-previous": "nope"}}),
                "the previous public keys in ConfigMap ds/one-record-public-key (data.ed25519-previous), line 1:",
            ),
        ];
        for (configmap, want) in cases {
            let e = keys_of_configmap(place, &configmap).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
        // The keys of two releases verify each release's records; none is no verification.
        let both = trusted(
            vec![key(1), key(2), key(4)],
            vec!["ConfigMap ds/x does not exist".into()],
        );
        let record = "{}";
        for signer in [1, 2, 4] {
            let signing = signature::signing_key_of_seed(&[signer; 32]).unwrap();
            assert!(both.record(record, Some(&signature::sign_record(&signing, record))));
        }
        let none = trusted(vec![], vec!["ConfigMap ds/x does not exist".into()]);
        assert!(
            matches!(none, Verification::Unavailable(why) if why == "ConfigMap ds/x does not exist")
        );
    }
}
