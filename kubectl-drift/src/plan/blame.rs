//! The plan of `blame KIND/NAME`: the object, the cluster, the rule tiers and the field managers
//! whose edits are imperative, as `audit` has them, and how long the API server keeps Events.

use std::time::Duration;

use super::common::{ClusterTiers, Kube, cluster_tiers, drift_managers, split_target};
use crate::cli::BlameArgs;

/// `blame KIND/NAME` against the cluster.
#[derive(Debug)]
pub(crate) struct Blame {
    pub kube: Kube,
    pub kind: String,
    pub name: String,
    pub tiers: ClusterTiers,
    /// Field managers whose `Update`s are imperative edits.
    pub managers: Vec<String>,
    /// The API server's `--event-ttl`: how far back the webhook's records of edits reach.
    pub event_ttl: Duration,
}

pub(super) fn blame(args: &BlameArgs) -> anyhow::Result<Blame> {
    let (kind, name) = split_target(&args.target)?;
    let event_ttl = super::common::event_ttl(&args.events)?;
    Ok(Blame {
        kube: Kube::of(&args.cluster.kube)?,
        kind,
        name,
        tiers: cluster_tiers(&args.cluster.tiers)?,
        managers: drift_managers(&args.drift_managers),
        event_ttl,
    })
}
