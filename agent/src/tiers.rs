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
    let mut globs = globs.to_vec();
    globs.retain(|g| !g.trim().is_empty());
    if globs.is_empty() {
        if offline {
            return Ok(TierPolicy::all_cluster());
        }
        globs.push(agent_namespace);
    }
    if globs.iter().any(|g| g == "*") {
        tracing::warn!(
            "--cluster-rule-namespaces '*': every rule ConfigMap is a cluster rule, so whoever may write a ConfigMap in any namespace can weaken protection everywhere (the original's behaviour)"
        );
    }
    let policy = TierPolicy::cluster_namespaces(&globs)
        .map_err(|e| anyhow::anyhow!("--cluster-rule-namespaces: {e}"))?;
    tracing::info!(cluster_rule_namespaces = ?globs, "rule ConfigMaps in these namespaces are cluster rules; elsewhere namespace rules");
    Ok(policy)
}
