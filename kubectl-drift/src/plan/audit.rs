//! The plan of `audit`: offline (`--rules` and the objects of `-f` files) or against the
//! cluster (its rules and objects, one namespace or all), with the field managers whose edits are
//! imperative.

use std::path::PathBuf;

use anyhow::bail;

use super::common::{
    ClusterTiers, Kube, OfflineRules, cluster_tiers, drift_managers, offline_rules,
    refuse_cluster_flags,
};
use crate::cli::AuditArgs;

/// `audit`: offline (files) or against the cluster, with what both need.
#[derive(Debug)]
pub(crate) struct Audit {
    pub source: AuditSource,
    /// Field managers whose `Update`s are imperative edits.
    pub managers: Vec<String>,
}

#[derive(Debug)]
pub(crate) enum AuditSource {
    /// `--rules PATH -f OBJECTS`: `namespace` keeps the objects of one namespace (`-n`).
    Offline {
        rules: OfflineRules,
        files: Vec<PathBuf>,
        namespace: Option<String>,
    },
    Cluster {
        kube: Kube,
        /// `-A`: every namespace and the cluster-scoped objects; otherwise `kube.namespace`
        /// (else the context's).
        all_namespaces: bool,
        /// `--resources`: what a `*` selector audits; `None` asks the cluster's webhook.
        resources: Option<Vec<(String, String)>>,
        chunk: u32,
        /// Which rule ConfigMaps are cluster rules, as the agent's audit has them.
        tiers: ClusterTiers,
        /// The API server's `--event-ttl`: how far back the webhook's records of edits reach.
        event_ttl: std::time::Duration,
    },
}

pub(super) fn audit(args: &AuditArgs) -> anyhow::Result<Audit> {
    let managers = drift_managers(&args.drift_managers);
    if !args.judging.offline.rules.is_empty() {
        refuse_cluster_flags(&args.judging.kube, "offline audit (--rules)")?;
        if args.files.is_empty() {
            bail!(
                "offline audit (--rules) needs the objects: -f FILE (e.g. kubectl get deploy -A -o yaml --show-managed-fields > live.yaml)"
            );
        }
        if args.resources.is_some() {
            bail!(
                "--resources names what the cluster's objects are listed from; offline audit (--rules) judges the objects of -f"
            );
        }
        return Ok(Audit {
            source: AuditSource::Offline {
                rules: offline_rules(&args.judging.offline, &args.judging.tiers)?,
                files: args.files.clone(),
                namespace: args.judging.kube.namespace.clone(),
            },
            managers,
        });
    }
    if args.judging.offline.namespace_file.is_some() {
        bail!(
            "--namespace-file is for offline audit (with --rules); against a cluster the Namespaces' annotations are read"
        );
    }
    if !args.files.is_empty() {
        bail!(
            "-f is for offline audit (with --rules PATH); against a cluster the objects are listed from the API"
        );
    }
    let resources = args
        .resources
        .as_ref()
        .map(|r| drift_engine::audit::parse_resources(r));
    if resources.as_ref().is_some_and(Vec::is_empty) {
        bail!("--resources names no resource: give group/resource, e.g. apps/deployments");
    }
    Ok(Audit {
        source: AuditSource::Cluster {
            kube: Kube::of(&args.judging.kube)?,
            all_namespaces: args.all_namespaces,
            resources,
            chunk: args.chunk_size,
            tiers: cluster_tiers(&args.judging.tiers)?,
            event_ttl: super::common::event_ttl(&args.events)?,
        },
        managers,
    })
}
