//! Test support for Drift Sentinel.
//!
//! [`ApiServer`] is a Kubernetes API server double served over real HTTP on loopback. It speaks
//! enough of the protocol for the resources the agent uses — list, watch (with
//! `resourceVersion` semantics and replay), get, create, update, merge patch, delete, and
//! `PartialObjectMetadata` responses for metadata-only watches — so that the real kube-rs
//! client and runtime run against it unmodified. Faults can be injected: a watch closed
//! mid-stream, `410 Gone` on the next watch, failing and slow requests.

mod apiserver;

pub use apiserver::{ApiServer, Fault};
