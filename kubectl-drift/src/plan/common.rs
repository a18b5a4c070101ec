//! What the plans of several commands are made of: how a result is printed ([`Print`]), how
//! the cluster is reached ([`Kube`]), the agent pods ([`Agents`]), the rules of files
//! ([`OfflineRules`]) and which of the cluster's rules are cluster rules ([`ClusterTiers`]), and
//! the checks every command makes of those flags.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use drift_engine::rule::TierPolicy;

use crate::cli::{
    AgentPods, ColorChoice, Display, DriftManagers, KubeFlags, Offline, Output, Tiers,
};

/// The timeout of one API request when `--request-timeout` is not given.
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// The user an edit is judged for when none is given (offline) or known (cluster).
pub(crate) const DEFAULT_USER: &str = "kubernetes-admin";

/// How a result is printed: the format, and whether text is coloured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Print {
    pub output: Output,
    pub colour: bool,
}

impl Print {
    pub(super) fn of(display: &Display) -> Self {
        Print {
            output: display.output,
            colour: colour(display.color),
        }
    }
}

/// `--color`: `auto` colours a terminal unless `NO_COLOR` is set (to anything but empty);
/// `always` and `never` win over both.
pub(crate) fn colour(choice: ColorChoice) -> bool {
    use std::io::IsTerminal;
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            std::io::stdout().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        }
    }
}

/// How to reach the cluster, as kubectl would.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Kube {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    /// `-n`: the namespace of the objects asked about; `None` is the context's.
    pub namespace: Option<String>,
    /// Per API request; `None` is no limit (`--request-timeout 0`).
    pub timeout: Option<Duration>,
}

impl Kube {
    pub(super) fn of(flags: &KubeFlags) -> anyhow::Result<Self> {
        let timeout = match flags.request_timeout.as_deref() {
            None => Some(DEFAULT_REQUEST_TIMEOUT),
            Some(text) => parse_timeout(text)?,
        };
        Ok(Kube {
            kubeconfig: flags.kubeconfig.clone(),
            context: flags.context.clone(),
            namespace: flags.namespace.clone(),
            timeout,
        })
    }
}

/// `--request-timeout` as kubectl reads it: `0` no limit, a plain number seconds, else a
/// duration with its unit (`5s`, `1m30s`, `500ms`).
pub(crate) fn parse_timeout(text: &str) -> anyhow::Result<Option<Duration>> {
    let text = text.trim();
    let duration = match text.parse::<u64>() {
        Ok(seconds) => Duration::from_secs(seconds),
        Err(_) => humantime::parse_duration(text).map_err(|_| {
            anyhow::anyhow!(
                "--request-timeout {text:?} is not a duration: use 0 (no limit), a number of seconds, or a duration such as 5s, 1m, 1h30m"
            )
        })?,
    };
    Ok((!duration.is_zero()).then_some(duration))
}

/// The agent pods of `status` and `tail`, as the flags name them: the namespace is found in
/// the cluster when `--agent-namespace` does not give it ([`crate::cluster::pods::locate`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Agents {
    pub namespace: Option<String>,
    pub selector: String,
    pub port: u16,
}

impl Agents {
    pub(super) fn of(agents: &AgentPods) -> Self {
        Agents {
            namespace: agents.agent_namespace.clone(),
            selector: agents.selector.clone(),
            port: agents.admin_port,
        }
    }
}

/// Rules and namespaces from files.
#[derive(Debug, Clone)]
pub(crate) struct OfflineRules {
    pub rules: Vec<PathBuf>,
    pub namespace_file: Option<PathBuf>,
    /// `--cluster-rule-namespaces`; without it every rule file is a cluster rule.
    pub tiers: TierPolicy,
}

/// Which rule ConfigMaps of the cluster are cluster rules.
#[derive(Debug, Clone)]
pub(crate) struct ClusterTiers {
    /// `--cluster-rule-namespaces`, when given.
    pub given: Option<TierPolicy>,
    /// The agent pods whose `/status` says it otherwise; their namespace is the agent's
    /// default when none answers.
    pub agents: Agents,
}

/// Offline, the cluster's flags other than `-n` have nothing to act on.
pub(super) fn refuse_cluster_flags(kube: &KubeFlags, mode: &str) -> anyhow::Result<()> {
    let given = [
        ("--kubeconfig", kube.kubeconfig.is_some()),
        ("--context", kube.context.is_some()),
        ("--request-timeout", kube.request_timeout.is_some()),
    ];
    if let Some((flag, _)) = given.iter().find(|(_, set)| *set) {
        bail!("{flag} is for the cluster; {mode} reads no cluster");
    }
    Ok(())
}

pub(super) fn offline_rules(offline: &Offline, tiers: &Tiers) -> anyhow::Result<OfflineRules> {
    Ok(OfflineRules {
        rules: offline.rules.clone(),
        namespace_file: offline.namespace_file.clone(),
        tiers: tier_policy(tiers)?.unwrap_or_else(TierPolicy::all_cluster),
    })
}

/// `--cluster-rule-namespaces` as a tier policy; `None` when not given (or only empty globs).
pub(super) fn tier_policy(tiers: &Tiers) -> anyhow::Result<Option<TierPolicy>> {
    TierPolicy::given(&tiers.cluster_rule_namespaces)
        .map_err(|e| anyhow::anyhow!("--cluster-rule-namespaces: {e}"))
}

pub(super) fn cluster_tiers(tiers: &Tiers) -> anyhow::Result<ClusterTiers> {
    Ok(ClusterTiers {
        given: tier_policy(tiers)?,
        agents: Agents::of(&tiers.agents),
    })
}

/// `--drift-managers`, else the engine's default, trimmed, empty names left out.
/// `--event-ttl`: how long the API server keeps Events.
pub(super) fn event_ttl(flags: &crate::cli::EventTtl) -> anyhow::Result<Duration> {
    drift_engine::time::parse_duration(&flags.event_ttl)
        .map_err(|e| anyhow::anyhow!("--event-ttl: {e}"))
}

pub(super) fn drift_managers(flags: &DriftManagers) -> Vec<String> {
    match &flags.names {
        Some(given) => given
            .iter()
            .map(|m| m.trim().to_owned())
            .filter(|m| !m.is_empty())
            .collect(),
        None => drift_engine::DEFAULT_DRIFT_MANAGERS
            .iter()
            .map(|m| (*m).to_owned())
            .collect(),
    }
}

/// `KIND/NAME` split in two.
pub(crate) fn split_target(target: &str) -> anyhow::Result<(String, String)> {
    match target.split_once('/') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((kind.to_owned(), name.to_owned()))
        }
        _ => bail!("expected KIND/NAME (e.g. deploy/web), got {target:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_timeouts_as_kubectl_reads_them() {
        assert_eq!(parse_timeout("0").unwrap(), None);
        assert_eq!(parse_timeout("0s").unwrap(), None);
        assert_eq!(parse_timeout("7").unwrap(), Some(Duration::from_secs(7)));
        assert_eq!(parse_timeout("5s").unwrap(), Some(Duration::from_secs(5)));
        assert_eq!(
            parse_timeout("1m30s").unwrap(),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            parse_timeout("250ms").unwrap(),
            Some(Duration::from_millis(250))
        );
        assert!(parse_timeout("-1").is_err());
    }

    #[test]
    fn colour_choices() {
        assert!(colour(ColorChoice::Always));
        assert!(!colour(ColorChoice::Never));
    }
}
