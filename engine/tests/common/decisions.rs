//! The decision helpers of the engine's black-box tests: rule `ops/r` and a decision at the
//! epoch (so that no bypass end or clock moves an answer).

use std::time::SystemTime;

use drift_engine::review::AdmissionRequest;
use drift_engine::{Context, Detail, Evaluation, RuleSet, evaluate};

use crate::requests::rule;

/// A rule that lets only the containers' images change, in the `prod*` namespaces.
pub const IMAGE_ONLY: &str = r#"
mode: enforce
namespaces: ["prod*"]
selectors: [{apiGroup: apps, kind: Deployment}]
mutable: ["spec.template.spec.containers[*].image"]
"#;

/// The decision on `request` at the epoch, with the detail an answer needs.
pub fn decide<'a>(rules: &'a RuleSet, request: &'a AdmissionRequest) -> Evaluation<'a> {
    decide_with(Detail::Verdict, rules, request)
}

/// The decision on `request` at the epoch, with `detail`.
pub fn decide_with<'a>(
    detail: Detail,
    rules: &'a RuleSet,
    request: &'a AdmissionRequest,
) -> Evaluation<'a> {
    evaluate(rules, request, &Context::at(SystemTime::UNIX_EPOCH), detail)
}

/// The rule set of one rule, `ops/r`, with the spec `spec`.
pub fn ops_rule(spec: &str) -> RuleSet {
    RuleSet::build(vec![rule("ops", "r", spec)])
}
