//! The audit's side of "who and why" (reference §8 "Who and why"): each run reads the webhook's
//! records of edits (its Events labelled `drift-sentinel.k8s.io/edit-record`), and the engine's
//! join ([`drift_engine::attribution::attribute`]) names, for each drifted field, the user who
//! made its live value and why the webhook let it through — or why that is not known. What was
//! attributed from a record is remembered for as long as the field keeps that value, so it
//! outlives the Event (kept by the API server an hour by default).

use std::collections::HashMap;
use std::time::SystemTime;

use drift_api::events::{EditRecord, FieldAttribution, RECORD_SELECTOR, record_of};
use drift_engine::attribution::{Coverage, Evidence, Remembered, attribute};
use drift_engine::webhook_scope::Interception;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use serde_json::Value;

/// Records read per run at most (pages of 500): the webhook keeps at most 4,096 series per pod.
const MAX_RECORDS: usize = 50_000;
/// Objects whose attributions are remembered at most.
const MAX_REMEMBERED_OBJECTS: usize = 100_000;
/// Drifted fields attributed per object.
const MAX_ATTRIBUTED_FIELDS: usize = drift_engine::message::MAX_DETAILED_CHANGES;

/// What the audit keeps between runs.
pub struct Attributor {
    client: kube::Client,
    /// Since when the records have been read without a gap: the first read that succeeded.
    since: Option<SystemTime>,
    memory: HashMap<String, Vec<Remembered>>,
}

/// What one run joins drifted fields with.
pub struct RunEvidence {
    records: HashMap<String, Vec<EditRecord>>,
    coverage: Option<Coverage>,
    remembered: HashMap<String, Vec<Remembered>>,
    /// What this run attributed from records: the next run's memory.
    next: HashMap<String, Vec<Remembered>>,
    interception: Interception,
}

impl Attributor {
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            since: None,
            memory: HashMap::new(),
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
            interception: Interception::Unknown("the webhook configuration is not read".to_owned()),
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
        }
        self.memory = evidence.next;
    }
}

impl RunEvidence {
    /// Who made each drifted field of `object` and why (the first [`MAX_ATTRIBUTED_FIELDS`]).
    pub fn attribute(
        &mut self,
        object: &Value,
        audit: &drift_engine::Audit<'_>,
    ) -> Vec<FieldAttribution> {
        let uid = object
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or("");
        let owned = drift_engine::managed::owned_fields(object);
        let evidence = Evidence {
            records: self.records.get(uid).map_or(&[], Vec::as_slice),
            remembered: self.remembered.get(uid).map_or(&[], Vec::as_slice),
            interception: &self.interception,
            coverage: self.coverage,
        };
        let mut out = Vec::new();
        let mut kept = Vec::new();
        for change in audit
            .changes()
            .iter()
            .filter(|c| !c.mutable)
            .take(MAX_ATTRIBUTED_FIELDS)
        {
            let attributed = attribute(object, &change.change.path, &owned, &evidence);
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

/// The valid records of every Event labelled as carrying one, by object uid.
async fn read_records(
    client: &kube::Client,
) -> Result<HashMap<String, Vec<EditRecord>>, kube::Error> {
    let api: Api<Event> = Api::all(client.clone());
    let mut params = ListParams::default().labels(RECORD_SELECTOR).limit(500);
    let mut records: HashMap<String, Vec<EditRecord>> = HashMap::new();
    let mut read = 0;
    loop {
        let page = api.list(&params).await?;
        for event in &page.items {
            if let Some(record) = record_of(event) {
                records.entry(record.uid.clone()).or_default().push(record);
            }
        }
        read += page.items.len();
        match page.metadata.continue_ {
            Some(next) if !next.is_empty() && read < MAX_RECORDS => {
                params = params.continue_token(&next);
            }
            _ => break,
        }
    }
    Ok(records)
}
