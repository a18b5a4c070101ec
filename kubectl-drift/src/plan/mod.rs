//! What to do ("low-level" arguments, ripgrep's term): the command line checked once, each
//! command in the mode it runs in (offline or against the cluster), with every value parsed.
//! A combination that cannot work is a usage error here, named in one line; the commands never
//! look at flags again.
//!
//! One module per command's plan ([`edit`] for `explain` and `preview`, [`audit`], [`blame`],
//! [`bypass`], [`status`], [`tail`]), each made of what [`common`] holds; [`Plan::of`] picks the
//! command.

mod audit;
mod blame;
mod bypass;
mod common;
mod edit;
mod status;
mod tail;

use std::time::SystemTime;

use crate::cli::{Cli, Command, Shell};

pub(crate) use audit::{Audit, AuditSource};
pub(crate) use blame::Blame;
pub(crate) use bypass::{BypassAction, BypassPlan};
pub(crate) use common::{Agents, ClusterTiers, DEFAULT_USER, Kube, OfflineRules, Print};
pub(crate) use edit::{
    ClusterExplain, ClusterPreview, Edit, Explain, ObjectRef, OfflineExplain, OfflinePreview,
    Preview,
};
pub(crate) use status::Status;
pub(crate) use tail::{Admins, Tail, TailFilters, TailView};

/// A command, ready to run.
#[derive(Debug)]
pub(crate) enum Plan {
    Explain(Explain, Print),
    Preview(Preview, Print),
    Status(Status, Print),
    Audit(Audit, Print),
    Blame(Blame, Print),
    Bypass(BypassPlan, Print),
    Tail(Tail),
    Completion(Shell),
}

impl Plan {
    /// Checks the command line and parses its values, as of `now` (for `--since 10m`).
    pub(crate) fn of(cli: Cli, now: SystemTime) -> anyhow::Result<Plan> {
        Ok(match cli.command {
            Command::Explain(args) => {
                Plan::Explain(edit::explain(&args)?, Print::of(&args.judging.display))
            }
            Command::Preview(args) => {
                Plan::Preview(edit::preview(&args)?, Print::of(&args.judging.display))
            }
            Command::Status(args) => Plan::Status(status::status(&args)?, Print::of(&args.display)),
            Command::Audit(args) => {
                Plan::Audit(audit::audit(&args)?, Print::of(&args.judging.display))
            }
            Command::Blame(args) => {
                Plan::Blame(blame::blame(&args)?, Print::of(&args.cluster.display))
            }
            Command::Bypass(args) => {
                Plan::Bypass(bypass::bypass(&args)?, Print::of(&args.cluster.display))
            }
            Command::Tail(args) => Plan::Tail(tail::tail(&args, now)?),
            Command::Completion(args) => Plan::Completion(args.shell),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::common::DEFAULT_REQUEST_TIMEOUT;
    use super::*;
    use crate::cli::Output;
    use clap::Parser;
    use drift_api::violation::Source;
    use std::time::Duration;

    fn plan(args: &[&str]) -> anyhow::Result<Plan> {
        let mut all = vec!["kubectl-drift"];
        all.extend(args);
        let now = humantime::parse_rfc3339("2027-01-15T08:00:00Z").unwrap();
        Plan::of(Cli::try_parse_from(all)?, now)
    }

    fn error(args: &[&str]) -> String {
        format!("{:#}", plan(args).unwrap_err())
    }

    #[test]
    fn explain_and_preview_modes() {
        match plan(&["explain", "deploy/web", "-n", "prod"]).unwrap() {
            Plan::Explain(Explain::Cluster(ClusterExplain { kube, object, .. }), _) => {
                assert_eq!(kube.namespace.as_deref(), Some("prod"));
                assert_eq!(kube.timeout, Some(DEFAULT_REQUEST_TIMEOUT));
                assert_eq!(
                    object,
                    ObjectRef::Live {
                        kind: "deploy".into(),
                        name: "web".into()
                    }
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            plan(&["explain", "--rules", "r", "-f", "o.yaml"]).unwrap(),
            Plan::Explain(Explain::Offline(_), _)
        ));
        assert!(matches!(
            plan(&[
                "preview",
                "-f",
                "x.yaml",
                "--replace",
                "--request-timeout",
                "0"
            ])
            .unwrap(),
            Plan::Preview(
                Preview::Cluster(ClusterPreview {
                    kube: Kube { timeout: None, .. },
                    edit: Edit::File { replace: true, .. },
                    ..
                }),
                _
            )
        ));
        assert!(matches!(
            plan(&["preview", "sts/db", "-o", "json"]).unwrap(),
            Plan::Preview(
                Preview::Cluster(ClusterPreview {
                    edit: Edit::Editor { .. },
                    ..
                }),
                Print {
                    output: Output::Json,
                    ..
                }
            )
        ));
    }

    #[test]
    fn combinations_that_cannot_work_are_named() {
        for (args, expected) in [
            (&["explain"][..], "explain needs KIND/NAME"),
            (&["explain", "deploy/web", "-f", "x"], "not both"),
            (&["explain", "web"], "expected KIND/NAME"),
            (
                &["explain", "--rules", "r", "deploy/web"],
                "-f FILE, not KIND/NAME",
            ),
            (
                &["explain", "--rules", "r", "-f", "x", "--context", "c"],
                "--context is for the cluster",
            ),
            (
                &["explain", "--namespace-file", "n", "deploy/web"],
                "--namespace-file is for offline",
            ),
            (
                &["preview", "--rules", "r", "--old", "a"],
                "both --old FILE and --new FILE",
            ),
            (
                &[
                    "preview",
                    "--rules",
                    "r",
                    "--old",
                    "a",
                    "--new",
                    "b",
                    "--server-dry-run",
                ],
                "--server-dry-run needs the cluster",
            ),
            (
                &["preview", "--old", "a", "--new", "b"],
                "--old and --new are for offline",
            ),
            (&["preview"], "preview needs -f FILE"),
            (
                &["preview", "-f", "x", "--request-timeout", "soon"],
                "--request-timeout \"soon\"",
            ),
            (
                &["status", "-n", "drift-sentinel"],
                "--agent-namespace drift-sentinel",
            ),
            (
                &["tail", "--url", "http://127.0.0.1:9", "--context", "c"],
                "--context finds the agent pods",
            ),
            (&["tail", "--url", "127.0.0.1:9"], "is not an http:// URL"),
            (&["tail", "--since", "yesterday"], "--since \"yesterday\""),
            (&["tail", "--rule", "[z-a]"], "--rule \"[z-a]\""),
            (&["tail", "-o", "text"], "add --no-tui"),
            (&["audit", "--rules", "r"], "needs the objects: -f FILE"),
            (&["audit", "-f", "live.yaml"], "-f is for offline audit"),
            (
                &["audit", "--namespace-file", "n.yaml"],
                "--namespace-file is for offline audit",
            ),
            (
                &["audit", "--rules", "r", "-f", "x", "--kubeconfig", "k"],
                "--kubeconfig is for the cluster",
            ),
            (
                &["audit", "--resources", ","],
                "--resources names no resource",
            ),
            (&["blame", "web"], "expected KIND/NAME (e.g. deploy/web)"),
            (
                &["blame", "deploy/web", "--event-ttl", "soon"],
                "--event-ttl: \"soon\" is not a duration",
            ),
        ] {
            let text = error(args);
            assert!(text.contains(expected), "{args:?}: {text}");
        }
    }

    #[test]
    fn tail_filters_views_and_sources() {
        let Plan::Tail(tail) = plan(&[
            "tail",
            "--url",
            "http://127.0.0.1:9090",
            "-n",
            "prod-?",
            "--rule",
            "strict",
            "--source",
            "audit",
            "--since",
            "10m",
            "--no-tui",
            "--request-timeout",
            "3s",
        ])
        .unwrap() else {
            panic!()
        };
        assert!(tail.filters.namespace.as_ref().unwrap().matches("prod-1"));
        assert!(!tail.filters.namespace.as_ref().unwrap().matches("prod-eu"));
        assert_eq!(tail.filters.source, Some(Source::Audit));
        assert_eq!(tail.view, TailView::Lines(Output::Json));
        assert_eq!(
            tail.since,
            Some(humantime::parse_rfc3339("2027-01-15T07:50:00Z").unwrap())
        );
        assert!(matches!(
            tail.admins,
            Admins::Urls { timeout: Some(t), .. } if t == Duration::from_secs(3)
        ));
        let Plan::Tail(tail) = plan(&["tail", "-o", "yaml", "--agent-namespace", "ops"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(tail.view, TailView::Lines(Output::Yaml));
        assert!(
            matches!(tail.admins, Admins::Cluster { agents: Agents { ref namespace, .. }, .. } if namespace.as_deref() == Some("ops"))
        );
    }

    #[test]
    fn bypass_sets_clears_or_lists() {
        let Ok(Plan::Bypass(set, _)) = plan(&[
            "bypass",
            "deploy/web",
            "--for",
            "4h",
            "--reason",
            "INC-7",
            "-n",
            "shop",
        ]) else {
            panic!("not a bypass plan");
        };
        assert_eq!(
            set.action,
            BypassAction::Set {
                kind: "deploy".into(),
                name: "web".into(),
                duration: std::time::Duration::from_secs(4 * 3600),
                reason: Some("INC-7".into()),
            }
        );
        assert_eq!(set.kube.namespace.as_deref(), Some("shop"));
        let Ok(Plan::Bypass(clear, _)) = plan(&["bypass", "sts/db", "--clear"]) else {
            panic!("not a bypass plan");
        };
        assert_eq!(
            clear.action,
            BypassAction::Clear {
                kind: "sts".into(),
                name: "db".into()
            }
        );
        let Ok(Plan::Bypass(list, _)) = plan(&["bypass", "--list", "-A"]) else {
            panic!("not a bypass plan");
        };
        assert_eq!(
            list.action,
            BypassAction::List {
                all_namespaces: true
            }
        );
        let long = "x".repeat(1025);
        for (args, says) in [
            (
                vec!["bypass", "deploy/web"],
                "how long? kubectl drift bypass deploy/web --for 4h",
            ),
            (vec!["bypass", "--for", "4h"], "name the object"),
            (
                vec!["bypass", "deploy/web", "--for", "soon"],
                "--for: \"soon\" is not a duration like 72h",
            ),
            (
                vec!["bypass", "deploy/web", "--for", "0s"],
                "--for: \"0s\" is not longer than zero",
            ),
            (
                vec!["bypass", "deploy/web", "--for", "4h", "--clear"],
                "--clear removes the bypass; --for and --reason are for setting one",
            ),
            (
                vec!["bypass", "--list", "deploy/web"],
                "--list lists every bypass; KIND/NAME is for setting or clearing one",
            ),
            (
                vec!["bypass", "deploy/web", "--for", "4h", "-A"],
                "-A is for --list",
            ),
            (vec!["bypass", "web", "--for", "4h"], "KIND/NAME"),
            (
                vec!["bypass", "deploy/web", "--for", "4h", "--reason", &long],
                "--reason is 1025 bytes; at most 1024",
            ),
        ] {
            let error = error(&args);
            assert!(error.contains(says), "{args:?}: {error}");
        }
    }
}
