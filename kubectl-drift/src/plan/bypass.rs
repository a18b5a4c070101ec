//! The plan of `bypass`: set one on an object for a while (with a reason), clear it, or list
//! the bypassed objects.

use std::time::Duration;

use anyhow::bail;

use super::common::{ClusterTiers, Kube, cluster_tiers, split_target};
use crate::cli::BypassArgs;

/// The longest `bypass --reason`: an annotation, read by people.
const MAX_REASON_BYTES: usize = 1024;

/// `kubectl drift bypass`: set, clear or list.
#[derive(Debug)]
pub(crate) struct BypassPlan {
    pub kube: Kube,
    pub tiers: ClusterTiers,
    pub action: BypassAction,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum BypassAction {
    Set {
        kind: String,
        name: String,
        duration: Duration,
        reason: Option<String>,
    },
    Clear {
        kind: String,
        name: String,
    },
    List {
        all_namespaces: bool,
    },
}

pub(super) fn bypass(args: &BypassArgs) -> anyhow::Result<BypassPlan> {
    let action = if args.list {
        let given = [
            ("KIND/NAME", args.target.is_some()),
            ("--for", args.duration.is_some()),
            ("--reason", args.reason.is_some()),
            ("--clear", args.clear),
        ];
        if let Some((what, _)) = given.iter().find(|(_, set)| *set) {
            bail!("--list lists every bypass; {what} is for setting or clearing one");
        }
        BypassAction::List {
            all_namespaces: args.all_namespaces,
        }
    } else {
        if args.all_namespaces {
            bail!("-A is for --list; a bypass is set on one object (KIND/NAME, -n NAMESPACE)");
        }
        let Some(target) = &args.target else {
            bail!(
                "name the object: kubectl drift bypass KIND/NAME --for 4h (or --clear), or list them with --list"
            );
        };
        let (kind, name) = split_target(target)?;
        if args.clear {
            if args.duration.is_some() || args.reason.is_some() {
                bail!("--clear removes the bypass; --for and --reason are for setting one");
            }
            BypassAction::Clear { kind, name }
        } else {
            let Some(text) = &args.duration else {
                bail!(
                    "how long? kubectl drift bypass {target} --for 4h (a bypass ends; --clear removes one)"
                );
            };
            let duration = drift_engine::time::parse_duration(text)
                .map_err(|e| anyhow::anyhow!("--for: {e}"))?;
            if let Some(reason) = &args.reason
                && reason.len() > MAX_REASON_BYTES
            {
                bail!(
                    "--reason is {} bytes; at most {} fit (name the ticket, not the story)",
                    reason.len(),
                    MAX_REASON_BYTES
                );
            }
            BypassAction::Set {
                kind,
                name,
                duration,
                reason: args.reason.clone(),
            }
        }
    };
    Ok(BypassPlan {
        kube: Kube::of(&args.cluster.kube)?,
        tiers: cluster_tiers(&args.cluster.tiers)?,
        action,
    })
}
