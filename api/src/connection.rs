//! The `Connection` custom resource (`connections.connection.drift-sentinel.io/v1alpha1`):
//! where and how violations are exported, and each agent pod's export health in its status.
//! The chart's CRD is generated from these types (`drift-sentinel crd`), and a test fails when
//! the two differ. Its group, version and kind are read from its `kube_core::Resource` impl, never
//! written as literals elsewhere.

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where and how violations are exported.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "connection.drift-sentinel.io",
    version = "v1alpha1",
    kind = "Connection",
    namespaced,
    status = "ConnectionStatus",
    shortname = "dsconn",
    printcolumn = r#"{"name":"Driver","type":"string","jsonPath":".spec.driver"}"#,
    printcolumn = r#"{"name":"Path","type":"string","jsonPath":".spec.config.path"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionSpec {
    /// The export driver. Only `disk` exists.
    pub driver: String,
    /// Driver configuration.
    #[serde(default)]
    pub config: ConnectionConfig,
}

/// Configuration of the disk driver.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionConfig {
    /// Directory of the channels' files; default `tmp/violations/topics`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Completed audit runs kept on disk; default 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_audit_results: Option<u32>,
    /// How long a failed closed connection stays eligible for cleanup retries, `1m` to `10m`.
    #[serde(
        default,
        rename = "closedConnectionTTL",
        skip_serializing_if = "Option::is_none"
    )]
    pub closed_connection_ttl: Option<String>,
}

/// Export health, one entry per agent pod; each pod writes only its own entry.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionStatus {
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["id"]))]
    pub by_pod: Vec<PodConnectionStatus>,
}

/// One pod's view of the connection.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodConnectionStatus {
    /// The pod's name.
    pub id: String,
    /// UID of the Connection this entry describes.
    #[serde(
        default,
        rename = "connectionUID",
        skip_serializing_if = "Option::is_none"
    )]
    pub connection_uid: Option<String>,
    /// Errors creating or updating the connection, at most 500.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub connection_errors: Vec<StatusError>,
    /// Publishing health by source (`audit`, `webhook`); each source writes only its own entry.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["source"]))]
    pub publish_statuses: Vec<PublishStatus>,
}

/// Publishing health of one source.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PublishStatus {
    /// `audit` or `webhook`.
    pub source: String,
    /// Whether the source completed at least one publish in its latest reporting window.
    #[serde(default)]
    pub active: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempt_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success_time: Option<String>,
    /// Publish error classes, at most 500.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub errors: Vec<StatusError>,
}

/// An error class: its type and the message text before the first colon.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct StatusError {
    #[serde(rename = "type")]
    pub type_: String,
    pub message: String,
}

/// The CRD of `Connection` as YAML, as the chart ships it.
pub fn connection_crd_yaml() -> Result<String, serde_yaml::Error> {
    use kube_core::CustomResourceExt;
    let header =
        "# Generated from drift-api (api/src/lib.rs) by `drift-sentinel crd`; do not edit.\n";
    Ok(format!(
        "{header}{}",
        serde_yaml::to_string(&Connection::crd())?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_crd_is_generated_from_the_types() {
        let chart = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../charts/drift-sentinel/crds/connection.yaml");
        let shipped = std::fs::read_to_string(&chart).unwrap_or_default();
        let generated = connection_crd_yaml().expect("the CRD serialises");
        assert!(
            shipped == generated,
            "{} differs from the Rust types: regenerate it with `cargo run -p drift-sentinel -- crd > charts/drift-sentinel/crds/connection.yaml`",
            chart.display()
        );
    }

    #[test]
    fn the_seed_example_parses() {
        let connection: Connection = serde_yaml::from_str(
            "apiVersion: connection.drift-sentinel.io/v1alpha1\nkind: Connection\nmetadata:\n  name: audit-connection\n  namespace: drift-sentinel\nspec:\n  driver: disk\n  config:\n    path: tmp/violations/topics\n    maxAuditResults: 3\n    closedConnectionTTL: 5m\nstatus:\n  byPod:\n  - id: pod-a\n    connectionUID: u\n    connectionErrors: [{type: UpsertConnection, message: boom}]\n    publishStatuses:\n    - {source: webhook, active: true, lastAttemptTime: '2026-07-28T12:00:00Z', errors: []}\n",
        )
        .unwrap();
        assert_eq!(connection.spec.config.max_audit_results, Some(3));
        assert_eq!(
            connection.spec.config.closed_connection_ttl.as_deref(),
            Some("5m")
        );
        let status = connection.status.unwrap();
        assert_eq!(status.by_pod[0].publish_statuses[0].source, "webhook");
    }

    #[test]
    fn status_lists_are_list_maps() {
        use kube_core::CustomResourceExt;
        let crd = serde_json::to_value(Connection::crd()).unwrap();
        let status =
            &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
        let by_pod = &status["properties"]["byPod"];
        assert_eq!(by_pod["x-kubernetes-list-type"], "map");
        assert_eq!(
            by_pod["x-kubernetes-list-map-keys"],
            serde_json::json!(["id"])
        );
        let publish = &by_pod["items"]["properties"]["publishStatuses"];
        assert_eq!(
            publish["x-kubernetes-list-map-keys"],
            serde_json::json!(["source"])
        );
        assert_eq!(
            crd["spec"]["versions"][0]["subresources"]["status"],
            serde_json::json!({})
        );
    }
}
