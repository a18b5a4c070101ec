//! `drift-engine`: the pure decision logic of Drift Sentinel.
//!
//! Data in, decision out: rule YAML is compiled once into a [`RuleSet`]; each admission
//! request is judged by [`decide`] against it. No I/O, no clock, no async, no globals — the
//! agent and the kubectl plugin share this crate so that they can never disagree on a verdict.

pub mod apply;
pub mod decision;
pub mod diff;
pub mod glob;
pub mod manifests;
pub mod path;
pub mod review;
pub mod rule;

pub use decision::{Context, Decision, Outcome, Step, decide};
pub use path::{FieldPath, PathPattern, PathSegment};
pub use review::{AdmissionRequest, AdmissionResponse, ReviewVersion, parse_review};
pub use rule::{CompiledRule, Mode, RuleError, RuleId, RuleSet, RuleSource};
