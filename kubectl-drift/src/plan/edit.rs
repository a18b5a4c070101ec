//! The plans of `explain` and `preview`: offline (the rules and objects of files) or against
//! the cluster (its rules; the live object, or a file's, or the live object edited in
//! `$EDITOR`).

use std::path::PathBuf;

use anyhow::bail;

use super::common::{
    ClusterTiers, DEFAULT_USER, Kube, OfflineRules, cluster_tiers, offline_rules,
    refuse_cluster_flags, split_target,
};
use crate::cli::{ExplainArgs, PreviewArgs};

#[derive(Debug)]
pub(crate) enum Explain {
    Offline(OfflineExplain),
    Cluster(ClusterExplain),
}

/// `explain --rules PATH -f FILE`.
#[derive(Debug)]
pub(crate) struct OfflineExplain {
    pub rules: OfflineRules,
    pub file: PathBuf,
    /// `-n`: the object's namespace when its file has none.
    pub namespace: Option<String>,
    pub user: String,
}

/// `explain KIND/NAME` or `explain -f FILE` against the cluster's rules.
#[derive(Debug)]
pub(crate) struct ClusterExplain {
    pub kube: Kube,
    pub tiers: ClusterTiers,
    pub object: ObjectRef,
    pub user: Option<String>,
}

/// An object of the cluster, or of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ObjectRef {
    Live { kind: String, name: String },
    File(PathBuf),
}

#[derive(Debug)]
pub(crate) enum Preview {
    Offline(OfflinePreview),
    Cluster(ClusterPreview),
}

/// `preview --rules PATH --old FILE --new FILE`.
#[derive(Debug)]
pub(crate) struct OfflinePreview {
    pub rules: OfflineRules,
    pub old: PathBuf,
    pub new: PathBuf,
    /// `-n`: the objects' namespace when their files have none.
    pub namespace: Option<String>,
    pub user: String,
}

/// `preview -f FILE` or `preview KIND/NAME` (through `$EDITOR`).
#[derive(Debug)]
pub(crate) struct ClusterPreview {
    pub kube: Kube,
    pub tiers: ClusterTiers,
    pub edit: Edit,
    pub server_dry_run: bool,
    pub user: Option<String>,
}

/// Where the edited object of a cluster preview comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Edit {
    /// A file, as `kubectl apply -f` (or, `replace`, `kubectl replace -f`) would send it.
    File { path: PathBuf, replace: bool },
    /// The live object edited in `$EDITOR`.
    Editor { kind: String, name: String },
}

pub(super) fn explain(args: &ExplainArgs) -> anyhow::Result<Explain> {
    if !args.judging.offline.rules.is_empty() {
        refuse_cluster_flags(&args.judging.kube, "offline explain (--rules)")?;
        if args.target.is_some() {
            bail!(
                "offline explain (--rules) takes the object as -f FILE, not KIND/NAME; without --rules KIND/NAME is read from the cluster"
            );
        }
        let Some(file) = args.file.clone() else {
            bail!("offline explain needs the object: -f FILE");
        };
        return Ok(Explain::Offline(OfflineExplain {
            rules: offline_rules(&args.judging.offline, &args.judging.tiers)?,
            file,
            namespace: args.judging.kube.namespace.clone(),
            user: args.user.clone().unwrap_or_else(|| DEFAULT_USER.to_owned()),
        }));
    }
    if args.judging.offline.namespace_file.is_some() {
        bail!(
            "--namespace-file is for offline explain (with --rules); against a cluster the Namespace's annotation is read"
        );
    }
    let object = match (&args.target, &args.file) {
        (Some(_), Some(_)) => bail!("give KIND/NAME or -f FILE, not both"),
        (None, None) => bail!(
            "explain needs KIND/NAME of a live object (e.g. deploy/web) or -f FILE; offline: --rules PATH -f FILE"
        ),
        (Some(target), None) => {
            let (kind, name) = split_target(target)?;
            ObjectRef::Live { kind, name }
        }
        (None, Some(file)) => ObjectRef::File(file.clone()),
    };
    Ok(Explain::Cluster(ClusterExplain {
        kube: Kube::of(&args.judging.kube)?,
        tiers: cluster_tiers(&args.judging.tiers)?,
        object,
        user: args.user.clone(),
    }))
}

pub(super) fn preview(args: &PreviewArgs) -> anyhow::Result<Preview> {
    if !args.judging.offline.rules.is_empty() {
        refuse_cluster_flags(&args.judging.kube, "offline preview (--rules)")?;
        if args.server_dry_run {
            bail!(
                "--server-dry-run needs the cluster; offline preview (--rules) has no API server"
            );
        }
        if args.target.is_some() || args.file.is_some() {
            bail!(
                "offline preview (--rules) takes --old FILE and --new FILE, not {}; without --rules KIND/NAME opens the live object in $EDITOR",
                if args.file.is_some() {
                    "-f FILE"
                } else {
                    "KIND/NAME"
                }
            );
        }
        let (Some(old), Some(new)) = (&args.old, &args.new) else {
            bail!("offline preview needs both --old FILE and --new FILE");
        };
        return Ok(Preview::Offline(OfflinePreview {
            rules: offline_rules(&args.judging.offline, &args.judging.tiers)?,
            old: old.clone(),
            new: new.clone(),
            namespace: args.judging.kube.namespace.clone(),
            user: args.user.clone().unwrap_or_else(|| DEFAULT_USER.to_owned()),
        }));
    }
    if args.judging.offline.namespace_file.is_some() {
        bail!(
            "--namespace-file is for offline preview (with --rules); against a cluster the Namespace's annotation is read"
        );
    }
    if args.old.is_some() || args.new.is_some() {
        bail!(
            "--old and --new are for offline preview (with --rules); against a cluster use -f FILE or KIND/NAME"
        );
    }
    let edit = match (&args.file, &args.target) {
        (Some(_), Some(_)) => bail!("give -f FILE or KIND/NAME, not both"),
        (None, None) => bail!(
            "preview needs -f FILE (the edited object) or KIND/NAME (to edit the live object in $EDITOR); offline: --rules PATH --old FILE --new FILE"
        ),
        (Some(path), None) => Edit::File {
            path: path.clone(),
            replace: args.replace,
        },
        (None, Some(target)) => {
            let (kind, name) = split_target(target)?;
            Edit::Editor { kind, name }
        }
    };
    Ok(Preview::Cluster(ClusterPreview {
        kube: Kube::of(&args.judging.kube)?,
        tiers: cluster_tiers(&args.judging.tiers)?,
        edit,
        server_dry_run: args.server_dry_run,
        user: args.user.clone(),
    }))
}
