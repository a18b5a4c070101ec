//! Which rule ConfigMaps are cluster rules (reference §2, "Who may write a rule"): the policy of
//! `--cluster-rule-namespaces`, the same for the webhook and the audit, so that the audit
//! judges each object under the rule that would win at admission.

use drift_engine::rule::TierPolicy;

/// The rule ConfigMaps in the namespaces `globs` match are cluster rules. Without globs: in
/// cluster mode the agent's own namespace, and offline every rule file.
pub fn tier_policy(
    globs: &[String],
    offline: bool,
    agent_namespace: String,
) -> anyhow::Result<TierPolicy> {
    let flag_error = |e| anyhow::anyhow!("--cluster-rule-namespaces: {e}");
    let policy = match TierPolicy::given(globs).map_err(flag_error)? {
        Some(policy) => policy,
        None if offline => return Ok(TierPolicy::all_cluster()),
        None => TierPolicy::cluster_namespaces(&[agent_namespace]).map_err(flag_error)?,
    };
    if policy.is_all_cluster() {
        tracing::warn!(
            "--cluster-rule-namespaces '*': every rule ConfigMap is a cluster rule, so whoever may write a ConfigMap in any namespace can weaken protection everywhere (the original's behaviour)"
        );
    }
    tracing::info!(cluster_rule_namespaces = ?policy.cluster_namespace_globs(), "rule ConfigMaps in these namespaces are cluster rules; elsewhere namespace rules");
    Ok(policy)
}
