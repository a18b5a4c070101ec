//! The audit's side of "who and why" (reference §8 "Who and why"): each run reads the webhook's
//! records of edits (its Events labelled `drift-sentinel.k8s.io/edit-record`), and the engine's
//! join ([`drift_engine::attribution::attribute`]) names, for each drifted field, the user who
//! made its live value and why the webhook let it through — or why that is not known. What was
//! attributed from a record is remembered for as long as the field keeps that value, so it
//! outlives the Event (kept by the API server an hour by default). Each run also reads the
//! webhook's ValidatingWebhookConfiguration and the namespaces' labels, so that a field nobody
//! recorded is told "outside what the webhook intercepts" when the configuration does not send
//! the object's UPDATEs to the webhook ([`drift_engine::webhook_scope::interception`]).

use std::collections::HashMap;
use std::time::SystemTime;

use drift_api::events::{EditRecord, FieldAttribution, RECORD_SELECTOR, record_of};
use drift_api::paging::Pages;
use drift_engine::attribution::{Coverage, Evidence, Remembered, attribute_drift};
use drift_engine::audit::AuditedObject;
use drift_engine::webhook_scope::{Interception, Target, interception};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use kube::api::Api;
use serde_json::{Map, Value};

/// Records read per run at most (pages of 500): the webhook keeps at most 4,096 series per pod.
const MAX_RECORDS: usize = 50_000;
/// Objects whose attributions are remembered at most.
const MAX_REMEMBERED_OBJECTS: usize = 100_000;
/// Drifted fields attributed per object.
const MAX_ATTRIBUTED_FIELDS: usize = drift_engine::message::MAX_DETAILED_CHANGES;
/// Namespaces whose labels are read per run at most (pages of 500); an object of another
/// namespace is judged with its namespace's labels not known.
const MAX_NAMESPACES: usize = 50_000;
/// A namespace with more labels than this is judged with its labels not known (the API server
/// takes any number).
const MAX_LABELS_PER_NAMESPACE: usize = 256;

/// What the audit keeps between runs.
pub struct Attributor {
    client: kube::Client,
    /// The webhook's ValidatingWebhookConfiguration (`--webhook-configuration`).
    webhook_configuration: Option<String>,
    /// Since when the records have been read without a gap: the first read that succeeded.
    since: Option<SystemTime>,
    memory: HashMap<String, Vec<Remembered>>,
    /// Who set each object's bypass annotation, by its uid: the managedFields entry's (manager,
    /// time) and the user.
    setters: HashMap<String, BypassSetter>,
}

/// The managedFields entry (manager, time) owning a bypass annotation, and who set it.
type BypassSetter = ((String, String), String);

/// What one run joins drifted fields with.
pub struct RunEvidence {
    records: HashMap<String, Vec<EditRecord>>,
    coverage: Option<Coverage>,
    remembered: HashMap<String, Vec<Remembered>>,
    /// What this run attributed from records: the next run's memory.
    next: HashMap<String, Vec<Remembered>>,
    remembered_setters: HashMap<String, BypassSetter>,
    next_setters: HashMap<String, BypassSetter>,
    scope: WebhookScope,
}

/// What tells whether the webhook is sent an object's UPDATEs: its configuration and the
/// namespaces' labels, as read at the start of a run, or why that cannot be told this run.
enum WebhookScope {
    Read {
        configuration: Value,
        /// `None`: the labels could not be read.
        namespace_labels: Option<HashMap<String, Map<String, Value>>>,
    },
    Unknown(String),
}

impl WebhookScope {
    fn of(&self, identity: &AuditedObject<'_>) -> Interception {
        let (configuration, namespace_labels) = match self {
            WebhookScope::Read {
                configuration,
                namespace_labels,
            } => (configuration, namespace_labels),
            WebhookScope::Unknown(why) => return Interception::Unknown(why.clone()),
        };
        let (group, version) = identity
            .api_version
            .split_once('/')
            .unwrap_or(("", identity.api_version));
        interception(
            configuration,
            &Target {
                group,
                version,
                resource: identity.resource,
                namespace: identity.namespace,
                namespace_labels: namespace_labels
                    .as_ref()
                    .and_then(|labels| labels.get(identity.namespace)),
                object_labels: Some(identity.labels),
            },
        )
    }
}

impl Attributor {
    pub fn new(client: kube::Client, webhook_configuration: Option<String>) -> Self {
        Self {
            client,
            webhook_configuration,
            since: None,
            memory: HashMap::new(),
            setters: HashMap::new(),
        }
    }

    /// Reads the webhook's records for a run. A failed read leaves the coverage unknown for the
    /// run (and restarts it: an edit whose record expired meanwhile must not be called unseen).
    pub async fn start_run(&mut self) -> RunEvidence {
        let read_at = SystemTime::now();
        let records = match read_records(&self.client).await {
            Ok(records) => {
                self.since.get_or_insert(read_at);
                Some(records)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the webhook's records of edits (Events): the users of drifted fields are not known this run");
                self.since = None;
                None
            }
        };
        RunEvidence {
            coverage: records
                .as_ref()
                .and(self.since)
                .map(|since| Coverage { since, read_at }),
            records: records.unwrap_or_default(),
            remembered: std::mem::take(&mut self.memory),
            next: HashMap::new(),
            remembered_setters: std::mem::take(&mut self.setters),
            next_setters: HashMap::new(),
            scope: self.webhook_scope().await,
        }
    }

    /// The webhook's configuration and the namespaces' labels for a run; what cannot be read
    /// leaves "outside what the webhook intercepts" untold, with the reason.
    async fn webhook_scope(&self) -> WebhookScope {
        let Some(name) = &self.webhook_configuration else {
            return WebhookScope::Unknown(
                "the webhook's configuration is not named (--webhook-configuration)".to_owned(),
            );
        };
        let api: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        let configuration = match api.get(name).await.map(serde_json::to_value) {
            Ok(Ok(configuration)) => configuration,
            Ok(Err(e)) => {
                return WebhookScope::Unknown(format!(
                    "ValidatingWebhookConfiguration {name} cannot be read: {e}"
                ));
            }
            Err(e) => {
                tracing::warn!(configuration = %name, error = %e, "cannot read the webhook's configuration: whether a drifted object is outside what the webhook intercepts is not known this run");
                return WebhookScope::Unknown(format!(
                    "ValidatingWebhookConfiguration {name} cannot be read: {}",
                    drift_engine::truncate::truncate_bytes(&e.to_string(), 256)
                ));
            }
        };
        let namespace_labels = match read_namespace_labels(&self.client).await {
            Ok(labels) => Some(labels),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the namespaces' labels: whether a drifted object is outside the webhook's namespaceSelector is not known this run");
                None
            }
        };
        WebhookScope::Read {
            configuration,
            namespace_labels,
        }
    }

    /// Keeps what the run attributed for the next run; a run that did not see every object
    /// keeps what earlier runs remembered of the others.
    pub fn finish_run(&mut self, mut evidence: RunEvidence, complete: bool) {
        if !complete {
            for (uid, remembered) in evidence.remembered {
                if evidence.next.len() >= MAX_REMEMBERED_OBJECTS {
                    break;
                }
                evidence.next.entry(uid).or_insert(remembered);
            }
            for (uid, setter) in evidence.remembered_setters {
                if evidence.next_setters.len() >= MAX_REMEMBERED_OBJECTS {
                    break;
                }
                evidence.next_setters.entry(uid).or_insert(setter);
            }
        }
        self.memory = evidence.next;
        self.setters = evidence.next_setters;
    }
}

impl RunEvidence {
    /// Who made each drifted field of `object` and why (the first [`MAX_ATTRIBUTED_FIELDS`]).
    pub fn attribute(
        &mut self,
        object: &Value,
        identity: &AuditedObject<'_>,
        audit: &drift_engine::Audit<'_>,
    ) -> Vec<FieldAttribution> {
        let uid = object
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or("");
        let interception = self.scope.of(identity);
        let evidence = Evidence {
            records: self.records.get(uid).map_or(&[], Vec::as_slice),
            remembered: self.remembered.get(uid).map_or(&[], Vec::as_slice),
            interception: &interception,
            coverage: self.coverage,
        };
        let mut out = Vec::new();
        let mut kept = Vec::new();
        for (change, attributed) in
            attribute_drift(object, audit.changes(), &evidence, MAX_ATTRIBUTED_FIELDS)
        {
            kept.extend(attributed.remember(&change.change.path));
            out.push(FieldAttribution {
                path: change.path.clone(),
                attribution: attributed.attribution,
            });
        }
        if !kept.is_empty() && !uid.is_empty() && self.next.len() < MAX_REMEMBERED_OBJECTS {
            self.next.insert(uid.to_owned(), kept);
        }
        out
    }
}

impl RunEvidence {
    /// Who set the bypass annotation of the object `uid`
    /// ([`drift_engine::attribution::bypass_setter`]), or what an earlier run found for the same
    /// managedFields entry (kept after the record's Event expires).
    pub fn bypass_setter(
        &mut self,
        uid: &str,
        bypass: &drift_engine::audit::BypassFinding<'_>,
    ) -> Option<String> {
        let entry = bypass.set_by.as_ref()?;
        let time = entry.time.as_deref()?;
        let stamp = (entry.manager.to_string(), time.to_owned());
        let found = self
            .records
            .get(uid)
            .and_then(|records| {
                drift_engine::attribution::bypass_setter(records, &entry.manager, time)
            })
            .map(str::to_owned)
            .or_else(|| {
                self.remembered_setters
                    .get(uid)
                    .filter(|(remembered, _)| *remembered == stamp)
                    .map(|(_, user)| user.clone())
            })?;
        if self.next_setters.len() < MAX_REMEMBERED_OBJECTS {
            self.next_setters
                .insert(uid.to_owned(), (stamp, found.clone()));
        }
        Some(found)
    }
}

/// The labels of every namespace (the first [`MAX_NAMESPACES`]), by name.
async fn read_namespace_labels(
    client: &kube::Client,
) -> Result<HashMap<String, Map<String, Value>>, kube::Error> {
    let api: Api<Namespace> = Api::all(client.clone());
    let mut pages = Pages::new(500);
    let mut labels = HashMap::new();
    while let Some(params) = pages.next_params()
        && labels.len() < MAX_NAMESPACES
    {
        let page = api.list_metadata(&params).await?;
        for namespace in page.items {
            let Some(name) = namespace.metadata.name else {
                continue;
            };
            let own = namespace.metadata.labels.unwrap_or_default();
            // Some labels only would be a wrong answer: with none kept, they are not known.
            if own.len() > MAX_LABELS_PER_NAMESPACE {
                continue;
            }
            let own = own
                .into_iter()
                .map(|(key, value)| (key, Value::String(value)))
                .collect();
            labels.insert(name, own);
        }
        pages.answered(page.metadata.continue_.as_deref());
    }
    Ok(labels)
}

/// The valid records of every Event labelled as carrying one, by object uid.
async fn read_records(
    client: &kube::Client,
) -> Result<HashMap<String, Vec<EditRecord>>, kube::Error> {
    let api: Api<Event> = Api::all(client.clone());
    let mut pages = Pages::new(500);
    let mut records: HashMap<String, Vec<EditRecord>> = HashMap::new();
    let mut read = 0;
    while let Some(params) = pages.next_params()
        && read < MAX_RECORDS
    {
        let page = api.list(&params.labels(RECORD_SELECTOR)).await?;
        for event in &page.items {
            if let Some(record) = record_of(event) {
                records.entry(record.uid.clone()).or_default().push(record);
            }
        }
        read += page.items.len();
        pages.answered(page.metadata.continue_.as_deref());
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn configuration() -> Value {
        json!({"metadata": {"name": "drift-sentinel"}, "webhooks": [{
            "name": "validate.drift-sentinel.k8s.io",
            "namespaceSelector": {"matchExpressions": [
                {"key": "drift-sentinel.k8s.io/enabled", "operator": "NotIn", "values": ["false"]}]},
            "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["UPDATE"],
                       "resources": ["deployments"], "scope": "Namespaced"}]}]})
    }

    fn object(namespace: &str, api_version: &str, kind: &str) -> Value {
        json!({"apiVersion": api_version, "kind": kind,
               "metadata": {"name": "web", "namespace": namespace, "labels": {"app": "web"}}})
    }

    #[test]
    fn the_webhook_scope_of_an_audited_object() {
        let labels = |value: Value| value.as_object().cloned().unwrap_or_default();
        let scope = WebhookScope::Read {
            configuration: configuration(),
            namespace_labels: Some(HashMap::from([
                (
                    "shop".to_owned(),
                    labels(json!({"kubernetes.io/metadata.name": "shop"})),
                ),
                (
                    "lab".to_owned(),
                    labels(json!({"drift-sentinel.k8s.io/enabled": "false"})),
                ),
            ])),
        };
        let cases = [
            (object("shop", "apps/v1", "Deployment"), "deployments", Interception::Intercepted),
            (
                object("lab", "apps/v1", "Deployment"),
                "deployments",
                Interception::Outside(
                    "webhook validate.drift-sentinel.k8s.io: its namespaceSelector does not select namespace lab"
                        .to_owned(),
                ),
            ),
            // The core group: apiVersion `v1`.
            (
                object("shop", "v1", "Pod"),
                "pods",
                Interception::Outside(
                    "no webhook of ValidatingWebhookConfiguration drift-sentinel has a rule for UPDATE of pods"
                        .to_owned(),
                ),
            ),
        ];
        for (object, resource, want) in cases {
            let identity = AuditedObject::of(&object, resource);
            assert_eq!(scope.of(&identity), want, "{object}");
        }
        // A namespace whose labels were not read: not told.
        let unread = object("new", "apps/v1", "Deployment");
        assert!(matches!(
            scope.of(&AuditedObject::of(&unread, "deployments")),
            Interception::Unknown(why) if why.contains("labels are not known")
        ));
        // The configuration not read: not told, and why.
        let unknown = WebhookScope::Unknown(
            "ValidatingWebhookConfiguration x cannot be read: forbidden".into(),
        );
        let shop = object("shop", "apps/v1", "Deployment");
        assert_eq!(
            unknown.of(&AuditedObject::of(&shop, "deployments")),
            Interception::Unknown(
                "ValidatingWebhookConfiguration x cannot be read: forbidden".into()
            )
        );
    }
}
