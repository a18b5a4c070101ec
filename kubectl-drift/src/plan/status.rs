//! The plan of `status`: the cluster, the agent pods (by `--agent-namespace`, not `-n`), the
//! audit pods, the Connection and the webhook configuration to look at.

use anyhow::bail;

use super::common::{Agents, Kube};
use crate::cli::StatusArgs;

#[derive(Debug)]
pub(crate) struct Status {
    pub kube: Kube,
    pub agents: Agents,
    /// The audit pods' label selector (in the agents' namespace, on the same admin port).
    pub audit_selector: String,
    pub connection: String,
    pub webhook: Option<String>,
}

pub(super) fn status(args: &StatusArgs) -> anyhow::Result<Status> {
    if let Some(namespace) = &args.kube.namespace {
        bail!(
            "status looks at the agent, not at objects: its namespace is --agent-namespace (default: where the webhook points), not -n; try --agent-namespace {namespace}"
        );
    }
    Ok(Status {
        kube: Kube::of(&args.kube)?,
        agents: Agents::of(&args.agents),
        audit_selector: args.audit_selector.clone(),
        connection: args.connection.clone(),
        webhook: args.webhook.clone(),
    })
}
