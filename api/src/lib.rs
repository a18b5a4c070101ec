//! Drift Sentinel's API types, defined once for every program that speaks them (as linkerd2
//! keeps its Kubernetes API types in one crate):
//! - [`connection`]: the `Connection` custom resource
//!   (`connections.connection.drift-sentinel.io/v1alpha1`) that routes exported violations and
//!   carries each agent pod's export health in its status; the chart's CRD is generated from it;
//! - [`violation`]: the violation record of both sources (reference §7), as the agent writes it to
//!   disk and streams it on `/violations`, and that query;
//! - [`status`]: the admin `/status` document;
//! - [`paging`]: the pages of a list (`limit`, `continue`), as the agent's audit and the plugin
//!   read collections;
//! - [`shapes`]: the shapes of the built-in kinds, for the rule linter;
//! - [`time`]: times as records, flags and messages write them (RFC 3339, short durations);
//! - [`blame`]: what `kubectl drift blame -o json` prints: each field of an object, its owner,
//!   and its drift with who made it and why (reference §9);
//! - [`events`]: Drift Sentinel's Events, the edit records they carry and the audit's memory of
//!   who made drifted fields' values (reference §6 "Events", §8 "Who and why").
//!
//! The agent serialises these types and the plugin deserialises the same ones; round-trip tests
//! pin them. The crate depends on no other of the workspace (the engine builds on it, never the
//! reverse: testkit's `layers` test), and what is built from an evaluation is the engine's
//! (`drift_engine::record`).

pub mod blame;
pub mod connection;
pub mod events;
pub mod paging;
pub mod shapes;
pub mod status;
pub mod time;
pub mod violation;

pub use connection::{
    Connection, ConnectionConfig, ConnectionSpec, ConnectionStatus, PodConnectionStatus,
    PublishStatus, StatusError, connection_crd_yaml,
};
