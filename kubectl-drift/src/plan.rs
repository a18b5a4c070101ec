//! What to do ("low-level" arguments, ripgrep's term): the command line checked once, each
//! command in the mode it runs in (offline or against the cluster), with every value parsed.
//! A combination that cannot work is a usage error here, named in one line; the commands never
//! look at flags again.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, bail};
use drift_api::violation::{Source, parse_rfc3339};
use drift_engine::glob::Glob;
use drift_engine::rule::TierPolicy;

use crate::cli::{
    AgentPods, AuditArgs, BypassArgs, Cli, ColorChoice, Command, Display, ExplainArgs, KubeFlags,
    Offline, Output, PreviewArgs, Shell, StatusArgs, TailArgs, TailSource, Tiers,
};
use crate::http::AdminUrl;

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
    fn of(display: &Display) -> Self {
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
    fn of(flags: &KubeFlags) -> anyhow::Result<Self> {
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

/// The agent pods of `status` and `tail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Agents {
    pub namespace: String,
    pub selector: String,
    pub port: u16,
}

impl Agents {
    fn of(agents: &AgentPods) -> Self {
        Agents {
            namespace: agents.agent_namespace.clone(),
            selector: agents.selector.clone(),
            port: agents.admin_port,
        }
    }
}

/// A command, ready to run.
#[derive(Debug)]
pub(crate) enum Plan {
    Explain(Explain, Print),
    Preview(Preview, Print),
    Status(Status, Print),
    Audit(Audit, Print),
    Bypass(BypassPlan, Print),
    Tail(Tail),
    Completion(Shell),
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
    },
}

#[derive(Debug)]
pub(crate) struct Status {
    pub kube: Kube,
    pub agents: Agents,
    /// The audit pods' label selector (in the agents' namespace, on the same admin port).
    pub audit_selector: String,
    pub connection: String,
    pub webhook: Option<String>,
}

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

impl Plan {
    /// Checks the command line and parses its values, as of `now` (for `--since 10m`).
    pub(crate) fn of(cli: Cli, now: SystemTime) -> anyhow::Result<Plan> {
        Ok(match cli.command {
            Command::Explain(args) => Plan::Explain(explain(&args)?, Print::of(&args.display)),
            Command::Preview(args) => Plan::Preview(preview(&args)?, Print::of(&args.display)),
            Command::Status(args) => Plan::Status(status(&args)?, Print::of(&args.display)),
            Command::Audit(args) => Plan::Audit(audit(&args)?, Print::of(&args.display)),
            Command::Bypass(args) => Plan::Bypass(bypass(&args)?, Print::of(&args.display)),
            Command::Tail(args) => Plan::Tail(tail(&args, now)?),
            Command::Completion(args) => Plan::Completion(args.shell),
        })
    }
}

/// The longest `bypass --reason`: an annotation, read by people.
pub(crate) const MAX_REASON_BYTES: usize = 1024;

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

fn bypass(args: &BypassArgs) -> anyhow::Result<BypassPlan> {
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
        kube: Kube::of(&args.kube)?,
        tiers: cluster_tiers(&args.tiers)?,
        action,
    })
}

/// Offline, the cluster's flags other than `-n` have nothing to act on.
fn refuse_cluster_flags(kube: &KubeFlags, mode: &str) -> anyhow::Result<()> {
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

fn offline_rules(offline: &Offline, tiers: &Tiers) -> anyhow::Result<OfflineRules> {
    Ok(OfflineRules {
        rules: offline.rules.clone(),
        namespace_file: offline.namespace_file.clone(),
        tiers: tier_policy(tiers)?.unwrap_or_else(TierPolicy::all_cluster),
    })
}

/// `--cluster-rule-namespaces` as a tier policy; `None` when not given (or only empty globs).
fn tier_policy(tiers: &Tiers) -> anyhow::Result<Option<TierPolicy>> {
    let globs: Vec<&str> = tiers
        .cluster_rule_namespaces
        .iter()
        .map(|g| g.trim())
        .filter(|g| !g.is_empty())
        .collect();
    if globs.is_empty() {
        return Ok(None);
    }
    let policy = TierPolicy::cluster_namespaces(&globs)
        .map_err(|e| anyhow::anyhow!("--cluster-rule-namespaces: {e}"))?;
    Ok(Some(policy))
}

fn cluster_tiers(tiers: &Tiers) -> anyhow::Result<ClusterTiers> {
    Ok(ClusterTiers {
        given: tier_policy(tiers)?,
        agents: Agents::of(&tiers.agents),
    })
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

fn explain(args: &ExplainArgs) -> anyhow::Result<Explain> {
    if !args.offline.rules.is_empty() {
        refuse_cluster_flags(&args.kube, "offline explain (--rules)")?;
        if args.target.is_some() {
            bail!(
                "offline explain (--rules) takes the object as -f FILE, not KIND/NAME; without --rules KIND/NAME is read from the cluster"
            );
        }
        let Some(file) = args.file.clone() else {
            bail!("offline explain needs the object: -f FILE");
        };
        return Ok(Explain::Offline(OfflineExplain {
            rules: offline_rules(&args.offline, &args.tiers)?,
            file,
            namespace: args.kube.namespace.clone(),
            user: args.user.clone().unwrap_or_else(|| DEFAULT_USER.to_owned()),
        }));
    }
    if args.offline.namespace_file.is_some() {
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
        kube: Kube::of(&args.kube)?,
        tiers: cluster_tiers(&args.tiers)?,
        object,
        user: args.user.clone(),
    }))
}

fn preview(args: &PreviewArgs) -> anyhow::Result<Preview> {
    if !args.offline.rules.is_empty() {
        refuse_cluster_flags(&args.kube, "offline preview (--rules)")?;
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
            rules: offline_rules(&args.offline, &args.tiers)?,
            old: old.clone(),
            new: new.clone(),
            namespace: args.kube.namespace.clone(),
            user: args.user.clone().unwrap_or_else(|| DEFAULT_USER.to_owned()),
        }));
    }
    if args.offline.namespace_file.is_some() {
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
        kube: Kube::of(&args.kube)?,
        tiers: cluster_tiers(&args.tiers)?,
        edit,
        server_dry_run: args.server_dry_run,
        user: args.user.clone(),
    }))
}

fn status(args: &StatusArgs) -> anyhow::Result<Status> {
    if let Some(namespace) = &args.kube.namespace {
        bail!(
            "status looks at the agent, not at objects: its namespace is --agent-namespace (default {}), not -n; try --agent-namespace {namespace}",
            crate::cli::DEFAULT_AGENT_NAMESPACE
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

fn audit(args: &AuditArgs) -> anyhow::Result<Audit> {
    let managers = args.drift_managers.clone().unwrap_or_else(|| {
        drift_engine::DEFAULT_DRIFT_MANAGERS
            .iter()
            .map(|m| (*m).to_owned())
            .collect()
    });
    let managers: Vec<String> = managers
        .into_iter()
        .map(|m| m.trim().to_owned())
        .filter(|m| !m.is_empty())
        .collect();
    if !args.offline.rules.is_empty() {
        refuse_cluster_flags(&args.kube, "offline audit (--rules)")?;
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
                rules: offline_rules(&args.offline, &args.tiers)?,
                files: args.files.clone(),
                namespace: args.kube.namespace.clone(),
            },
            managers,
        });
    }
    if args.offline.namespace_file.is_some() {
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
            kube: Kube::of(&args.kube)?,
            all_namespaces: args.all_namespaces,
            resources,
            chunk: args.chunk_size,
            tiers: cluster_tiers(&args.tiers)?,
        },
        managers,
    })
}

/// A glob of a filter flag.
fn glob(flag: &str, text: Option<&str>) -> anyhow::Result<Option<Glob>> {
    text.filter(|t| !t.is_empty())
        .map(|t| Glob::new(t).with_context(|| format!("{flag} {t:?}")))
        .transpose()
}

fn tail(args: &TailArgs, now: SystemTime) -> anyhow::Result<Tail> {
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
#[path = "plan_tests.rs"]
mod tests;
