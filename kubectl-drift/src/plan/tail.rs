//! The plan of `tail`: where the records are read from (admin URLs, or the agent pods through
//! port-forwarding), the filters it starts with, `--since`, and the terminal UI or lines.

use std::time::{Duration, SystemTime};

use anyhow::{Context as _, bail};
use drift_api::violation::{Source, parse_rfc3339};
use drift_engine::glob::Glob;

use super::common::{Agents, Kube, colour};
use crate::cli::{Output, TailArgs, TailSource};
use crate::http::AdminUrl;

#[derive(Debug)]
pub(crate) struct Tail {
    pub admins: Admins,
    pub filters: TailFilters,
    pub since: Option<SystemTime>,
    /// The terminal UI, or lines in this format.
    pub view: TailView,
    pub colour: bool,
}

/// Where `tail` reads from.
#[derive(Debug)]
pub(crate) enum Admins {
    /// `--url`: admin APIs reached directly.
    Urls {
        urls: Vec<AdminUrl>,
        timeout: Option<Duration>,
    },
    /// The agent pods of the cluster, through port-forwarding.
    Cluster { kube: Kube, agents: Agents },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TailView {
    Tui,
    Lines(Output),
}

/// The filters `tail` starts with.
#[derive(Debug, Clone, Default)]
pub(crate) struct TailFilters {
    pub namespace: Option<Glob>,
    pub rule: Option<Glob>,
    pub source: Option<Source>,
}

/// A glob of a filter flag.
fn glob(flag: &str, text: Option<&str>) -> anyhow::Result<Option<Glob>> {
    text.filter(|t| !t.is_empty())
        .map(|t| Glob::new(t).with_context(|| format!("{flag} {t:?}")))
        .transpose()
}

pub(super) fn tail(args: &TailArgs, now: SystemTime) -> anyhow::Result<Tail> {
    let admins = if args.url.is_empty() {
        Admins::Cluster {
            kube: Kube::of(&args.kube)?,
            agents: Agents::of(&args.agents),
        }
    } else {
        let given = [
            ("--kubeconfig", args.kube.kubeconfig.is_some()),
            ("--context", args.kube.context.is_some()),
        ];
        if let Some((flag, _)) = given.iter().find(|(_, set)| *set) {
            bail!(
                "{flag} finds the agent pods of a cluster; --url talks to an admin API directly (give one or the other)"
            );
        }
        let urls = args
            .url
            .iter()
            .map(|u| AdminUrl::parse(u))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Admins::Urls {
            urls,
            timeout: Kube::of(&args.kube)?.timeout,
        }
    };
    let since = args
        .since
        .as_deref()
        .map(|s| parse_since(s, now))
        .transpose()?;
    let view = match (args.no_tui, args.output) {
        (false, None) => TailView::Tui,
        (false, Some(Output::Text)) => {
            bail!("-o text prints lines instead of the terminal UI: add --no-tui")
        }
        (true, None) => TailView::Lines(Output::Json),
        (_, Some(output)) => TailView::Lines(output),
    };
    Ok(Tail {
        admins,
        filters: TailFilters {
            namespace: glob("-n/--namespace", args.kube.namespace.as_deref())?,
            rule: glob("--rule", args.rule.as_deref())?,
            source: args.source.map(|s| match s {
                TailSource::Webhook => Source::Webhook,
                TailSource::Audit => Source::Audit,
            }),
        },
        since,
        view,
        colour: colour(args.color),
    })
}

/// `--since`: a duration before `now` (`10m`, `1h30m`, `2d`) or an RFC 3339 time.
pub(crate) fn parse_since(text: &str, now: SystemTime) -> anyhow::Result<SystemTime> {
    if let Some(time) = parse_rfc3339(text) {
        return Ok(time);
    }
    let duration = humantime::parse_duration(text.trim()).map_err(|_| {
        anyhow::anyhow!(
            "--since {text:?} is neither a duration (10m, 1h30m) nor an RFC 3339 time (2027-01-15T08:00:00Z)"
        )
    })?;
    Ok(now.checked_sub(duration).unwrap_or(SystemTime::UNIX_EPOCH))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_as_a_duration_or_a_time() {
        let now = humantime::parse_rfc3339("2027-01-15T08:00:00Z").unwrap();
        let t = |s: &str| humantime::parse_rfc3339(s).unwrap();
        assert_eq!(parse_since("10m", now).unwrap(), t("2027-01-15T07:50:00Z"));
        assert_eq!(
            parse_since("1h 30m", now).unwrap(),
            t("2027-01-15T06:30:00Z")
        );
        assert_eq!(
            parse_since("2027-01-15T09:00:00+01:00", now).unwrap(),
            t("2027-01-15T08:00:00Z")
        );
        assert_eq!(
            parse_since("2027-01-14T08:00:00.5Z", now).unwrap(),
            t("2027-01-14T08:00:00.5Z")
        );
        let error = parse_since("yesterday", now).unwrap_err().to_string();
        assert!(error.contains("--since \"yesterday\""), "{error}");
    }
}
