//! Test support for Drift Sentinel.
//!
//! [`ApiServer`] is a Kubernetes API server double served over real HTTP on loopback. It speaks
//! enough of the protocol for the resources the agent uses — list, watch (with
//! `resourceVersion` semantics and replay), get, create, update, merge patch, delete, and
//! `PartialObjectMetadata` responses for metadata-only watches, `fieldSelector` on list and
//! watch — so that the real kube-rs client and runtime run against it unmodified. Faults can be
//! injected: a watch closed mid-stream, `410 Gone` on the next watch, failing and slow requests.
//!
//! Server-side apply (`PATCH` with `application/apply-patch+yaml`, on the object or its
//! `/status`) keeps each field manager's applied fields, merges list-maps on their keys (for
//! Connections `status.byPod` on `id` and `publishStatuses` on `source`; lists not declared
//! as list-maps are atomic), removes what a manager stops applying unless another manager owns
//! it, answers `409 Conflict` when a manager would change another's field without `force=true`,
//! and shows managers in `metadata.managedFields` (also readable with
//! [`ApiServer::managed_fields`]).

mod apiserver;

pub use apiserver::{ApiServer, Fault, ManagedFields};
