//! Labels of the object a `/scale` request scales (reference §3): a Scale carries no labels, so in
//! cluster mode the parent's are read from the API (metadata only, with a short timeout).
//! Offline they are unknown and rules with label selectors do not match.

use std::time::Duration;

use drift_engine::AdmissionRequest;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use serde_json::{Map, Value};

/// Reads parent labels through the cluster client.
pub struct ParentLookup {
    client: Client,
    timeout: Duration,
}

impl ParentLookup {
    pub fn new(client: Client, timeout: Duration) -> Self {
        Self { client, timeout }
    }

    /// The labels of the scaled object, or `None` when they cannot be read in time (the rule
    /// with labels then does not match, as offline).
    pub async fn labels<O>(&self, request: &AdmissionRequest<O>) -> Option<Map<String, Value>> {
        let target = drift_engine::evaluation::target_of(request)?;
        let resource = &request.resource;
        let api_version = if resource.group.is_empty() {
            resource.version.clone()
        } else {
            format!("{}/{}", resource.group, resource.version)
        };
        let api_resource = ApiResource {
            group: resource.group.clone(),
            version: resource.version.clone(),
            api_version,
            kind: target.kind.into_owned(),
            plural: resource.resource.clone(),
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), request.namespace(), &api_resource);
        match tokio::time::timeout(self.timeout, api.get_metadata(request.name())).await {
            Ok(Ok(meta)) => Some(
                meta.metadata
                    .labels
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, Value::String(v)))
                    .collect(),
            ),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, name = request.name(), namespace = request.namespace(), "cannot read the labels of the scaled object; rules with labels do not match");
                None
            }
            Err(_) => {
                tracing::warn!(
                    name = request.name(),
                    namespace = request.namespace(),
                    "timed out reading the labels of the scaled object; rules with labels do not match"
                );
                None
            }
        }
    }
}
