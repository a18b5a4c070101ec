//! The rule linter offline: `explain --rules` lints the rules as the agent's `/validate-rule`
//! webhook does (`drift_engine::lint`, with the built-in kinds' shapes), so that a pipeline
//! sees the warnings `kubectl apply` would print before the rule reaches a cluster.

use drift_engine::RuleSet;
use drift_engine::lint::{LintContext, lint};

/// A warning of the rule linter about one valid rule.
pub(crate) struct RuleWarning {
    /// `namespace/name`.
    pub rule: String,
    /// The file it came from.
    pub origin: Option<String>,
    /// As the `/validate-rule` webhook words it, and `kubectl apply` prints it after `Warning: `.
    pub warning: String,
}

/// The linter's warnings about the valid rules of `rules`, as the agent's `/validate-rule` gives
/// them (`agent/src/validate_rule.rs`): the built-in kinds' shapes; the namespaces that exist
/// are not known offline.
pub(crate) fn lint_warnings(rules: &RuleSet) -> Vec<RuleWarning> {
    let context = LintContext {
        shapes: Some(drift_api::shapes::built_in()),
        namespaces: None,
    };
    let mut warnings = Vec::new();
    let mut rules: Vec<_> = rules.rules().iter().collect();
    rules.sort_by(|a, b| (&a.origin, &a.id).cmp(&(&b.origin, &b.id)));
    for rule in rules {
        for warning in lint(rule, &context) {
            warnings.push(RuleWarning {
                rule: rule.id.to_string(),
                origin: rule.origin.clone(),
                warning: format!("Drift Sentinel: rule {}: {warning}", rule.id),
            });
        }
    }
    warnings
}
