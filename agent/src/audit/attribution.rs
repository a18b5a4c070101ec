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

use drift_api::events::signature::Verification;
use drift_api::events::{
    AUDIT_MEMORY_LABEL, AUDIT_MEMORY_VERSION, RECORD_SELECTOR, RecordReader, Records,
};
use drift_api::paging::Pages;
use drift_api::status::{AuditEvidence, MemoryRead, SignedSource};
use drift_engine::attribution::Coverage;
use drift_engine::who::{Memory, MemoryEventReader, NamespaceLabels, RunEvidence, WebhookScope};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use kube::api::Api;
use serde_json::{Map, Value};

/// What the audit keeps between runs.
pub struct Attributor {
    client: kube::Client,
    /// The webhook's ValidatingWebhookConfiguration (`--webhook-configuration`).
    webhook_configuration: Option<String>,
    /// Since when the records have been read without a gap: the first read that succeeded.
    since: Option<SystemTime>,
    /// What earlier runs attributed from records.
    memory: Memory,
    /// Whether the memory is still to be seeded from the audit's last Reports (Reports on, and
    /// no run finished yet in this process).
    seed_from_reports: bool,
    /// Whether the memory is still to be seeded from the audit's last `DriftDetected` Events
    /// (after the Reports, for the objects they have nothing of: the only memory without them).
    seed_from_events: bool,
    /// What records and remembered attributions are verified with (reference §8 "Trust").
    verification: Verification,
    /// Whether a run without a key has said so (once).
    said_unverifiable: bool,
    /// The last read of the records, and of each memory, for `/status` and the metrics.
    evidence: AuditEvidence,
}

impl Attributor {
    /// `reports`: whether the audit writes Reports, which then seed what it remembers after a
    /// restart (reference §8 "Who and why").
    pub fn new(
        client: kube::Client,
        webhook_configuration: Option<String>,
        reports: bool,
        verification: Verification,
    ) -> Self {
        Self {
            client,
            webhook_configuration,
            since: None,
            memory: Memory::default(),
            seed_from_reports: reports,
            seed_from_events: true,
            verification,
            said_unverifiable: false,
            evidence: AuditEvidence::default(),
        }
    }

    /// Reads the webhook's records for a run. A failed read leaves the coverage unknown for the
    /// run (and restarts it: an edit whose record expired meanwhile must not be called unseen).
    /// The first run of the process first reads what the audit's last Reports remember.
    pub async fn start_run(&mut self) -> RunEvidence {
        if self.seed_from_reports {
            let outcome = super::reports::remembered(&self.client, &self.verification).await;
            self.note_memory(
                SignedSource::Report,
                outcome
                    .as_ref()
                    .map(|(m, unverified)| (m.fields.len() + m.setters.len(), *unverified))
                    .map_err(|e| format!("{e:#}")),
            );
            match outcome {
                Ok((memory, _)) => {
                    tracing::info!(
                        objects = memory.fields.len(),
                        bypasses = memory.setters.len(),
                        "remembered attributions read from the audit's last Reports"
                    );
                    self.memory.fill_from(memory);
                    self.seed_from_reports = false;
                }
                // Tried again next run: the Reports may not be readable yet.
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "cannot read the audit's last Reports: users attributed before the restart whose Events expired are not known this run");
                }
            }
        }
        if self.seed_from_events {
            let outcome = remembered_of_events(&self.client, &self.verification).await;
            self.note_memory(
                SignedSource::EventMemory,
                outcome
                    .as_ref()
                    .map(|(m, unverified)| (m.fields.len() + m.setters.len(), *unverified))
                    .map_err(Clone::clone),
            );
            match outcome {
                Ok((memory, _)) => {
                    tracing::info!(
                        objects = memory.fields.len(),
                        "remembered attributions read from the audit's last DriftDetected Events"
                    );
                    self.memory.fill_from(memory);
                    self.seed_from_events = false;
                }
                // Tried again next run.
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the audit's last DriftDetected Events: users attributed before the restart whose records expired are not known this run");
                }
            }
        }
        let read_at = SystemTime::now();
        let (records, coverage) = match read_records(&self.client, &self.verification).await {
            Ok(records) => {
                let since = *self.since.get_or_insert(read_at);
                // Without a key every record is unverified: said once, not every run.
                let unverified = records.unverified_count();
                if unverified > 0
                    && (matches!(self.verification, Verification::Keys(_))
                        || !self.said_unverifiable)
                {
                    self.said_unverifiable = true;
                    super::trust::warn_unverified(
                        SignedSource::Record,
                        unverified,
                        &self.verification,
                    );
                }
                let unverified = records.unverified_count();
                let read = records.verified.values().map(Vec::len).sum::<usize>() + unverified;
                self.evidence.records = super::trust::signed_read(Ok((read, unverified)), || {
                    records.unverified_why.clone()
                });
                (records, Ok(Coverage { since, read_at }))
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the webhook's records of edits (Events): the users of drifted fields are not known this run");
                self.since = None;
                self.evidence.records = super::trust::signed_read(Err(&e), String::new);
                (Records::default(), Err(e))
            }
        };
        RunEvidence::new(
            records,
            coverage,
            std::mem::take(&mut self.memory),
            self.webhook_scope().await,
        )
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
            configurations: vec![configuration],
            namespace_labels,
        }
    }

    /// Keeps the last read of a memory for `/status`.
    fn note_memory(&mut self, source: SignedSource, outcome: Result<(usize, usize), String>) {
        let read = MemoryRead {
            source,
            outcome: super::trust::signed_read(
                outcome.as_ref().copied().map_err(String::as_str),
                || super::trust::unverified_reason(&self.verification).to_owned(),
            ),
        };
        self.evidence.memory.retain(|m| m.source != source);
        self.evidence.memory.push(read);
        self.evidence.memory.sort_by_key(|m| m.source);
    }

    /// The last read of the records and of each memory, and what of them did not verify.
    pub fn evidence(&self) -> AuditEvidence {
        self.evidence.clone()
    }

    /// Keeps what the run attributed for the next run; a run that did not see every object
    /// keeps what earlier runs remembered of the others.
    pub fn finish_run(&mut self, evidence: RunEvidence, complete: bool) {
        self.memory = evidence.finish(complete);
    }
}

/// The labels of every namespace (the first [`drift_engine::who::MAX_NAMESPACES`]), by name.
async fn read_namespace_labels(
    client: &kube::Client,
) -> Result<HashMap<String, Map<String, Value>>, kube::Error> {
    let api: Api<Namespace> = Api::all(client.clone());
    let mut pages = Pages::new(500);
    let mut labels = NamespaceLabels::default();
    while let Some(params) = pages.next_params()
        && !labels.is_full()
    {
        let page = api.list_metadata(&params).await?;
        for namespace in page.items {
            let Some(name) = namespace.metadata.name else {
                continue;
            };
            let own = namespace.metadata.labels.unwrap_or_default();
            labels.add(
                &name,
                own.into_iter()
                    .map(|(key, value)| (key, Value::String(value)))
                    .collect(),
            );
        }
        pages.answered(page.metadata.continue_.as_deref());
    }
    Ok(labels.into_map())
}

/// What the audit's Events (labelled [`AUDIT_MEMORY_LABEL`]) remember, by object uid, and how
/// many of their annotations did not verify ([`MemoryEventReader`]: its bounds, the one observed
/// last of several Events of one object; pages of 500). An annotation without this
/// installation's signature is not read back (logged with the count, as for the Reports').
async fn remembered_of_events(
    client: &kube::Client,
    verification: &Verification,
) -> Result<(Memory, usize), String> {
    let api: Api<Event> = Api::all(client.clone());
    let selector = format!("{AUDIT_MEMORY_LABEL}={AUDIT_MEMORY_VERSION}");
    let mut pages = Pages::new(500);
    let mut reader = MemoryEventReader::new(verification.clone());
    while let Some(params) = pages.next_params() {
        let page = api
            .list(&params.labels(&selector))
            .await
            .map_err(|e| e.to_string())?;
        pages.answered(page.metadata.continue_.as_deref());
        reader
            .add_page(&page.items, pages.has_more())
            .map_err(|e| e.to_string())?;
    }
    let unverified = reader.unverified();
    super::trust::warn_unverified(SignedSource::EventMemory, unverified, verification);
    Ok((reader.into_memory(), unverified))
}

/// The valid records of every Event labelled as carrying one, by object uid
/// ([`RecordReader`]: more than its bound is an error).
async fn read_records(
    client: &kube::Client,
    verification: &Verification,
) -> Result<Records, String> {
    let api: Api<Event> = Api::all(client.clone());
    let mut pages = Pages::new(500);
    let mut reader = RecordReader::new(verification.clone());
    while let Some(params) = pages.next_params() {
        let page = api
            .list(&params.labels(RECORD_SELECTOR))
            .await
            .map_err(|e| e.to_string())?;
        pages.answered(page.metadata.continue_.as_deref());
        reader
            .add_page(&page.items, pages.has_more())
            .map_err(|e| e.to_string())?;
    }
    Ok(reader.into_records())
}

#[cfg(test)]
mod tests {
    use super::*;
    use drift_engine::audit::AuditedObject;
    use drift_engine::webhook_scope::Interception;
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
            configurations: vec![configuration()],
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
