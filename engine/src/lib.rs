//! `drift-engine`: the pure decision logic of Drift Sentinel.
//!
//! Data in, evaluation out: rule YAML is compiled once into a [`RuleSet`]; each admission
//! request is judged by [`evaluate`] against it, and everything else — the admission
//! response ([`message`]), the agent's log, metrics and records, the plugin's screens — renders
//! that one [`Evaluation`]. No I/O, no clock (the time a request is judged at is passed in), no
//! async, no globals — the
//! agent and the kubectl plugin share this crate so that they can never disagree on a verdict.
//! No `unsafe`: it reads the one input an attacker controls whole.

#![forbid(unsafe_code)]

pub mod apply;
pub mod attribution;
pub mod audit;
mod baseline;
pub mod bypass;
mod comparison;
pub mod diff;
pub mod evaluation;
pub mod glob;
mod hex;
pub mod json;
pub mod lint;
pub mod managed;
pub mod manifests;
pub mod message;
pub mod nesting;
pub mod omitted;
mod path;
pub mod record;
pub mod review;
pub mod rule;
/// Times as the product writes and reads them (defined with the API types).
pub use drift_api::time;
pub mod truncate;
pub mod webhook_scope;
pub mod who;

pub use audit::{Audit, AuditContext, AuditResult, DEFAULT_DRIFT_MANAGERS, SkipReason, audit};
pub use evaluation::{Context, Detail, Evaluation, Outcome, Step, Verdict, evaluate};
pub use path::{FieldPath, PathPattern, PathSegment, PatternSegment};
pub use review::{AdmissionRequest, AdmissionResponse, ReviewVersion, parse_review};
pub use rule::{CompiledRule, Mode, RuleError, RuleId, RuleSet, RuleSource, SpecText};
