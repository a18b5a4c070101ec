//! The command line as clap parses it ("high-level" arguments, ripgrep's term): what a person
//! typed, flag by flag. [`crate::plan`] turns it into what to do, checking the combinations
//! once. The kube flags (`--kubeconfig`, `--context`, `-n`, `--request-timeout`) and the
//! display flags (`-o`, `--color`) are declared once here and flattened into every command.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// The chart's selector labels of the agent (webhook) pods, less the release name
/// (`charts/drift-sentinel/templates/_helpers.tpl`, `drift-sentinel.selectorLabels`).
pub(crate) const DEFAULT_SELECTOR: &str =
    "app.kubernetes.io/name=drift-sentinel,app.kubernetes.io/component=webhook";
/// The chart's selector labels of the audit pods (its audit Deployment), less the release name.
pub(crate) const DEFAULT_AUDIT_SELECTOR: &str =
    "app.kubernetes.io/name=drift-sentinel,app.kubernetes.io/component=audit";
/// The agent's `--admin-address` port.
pub(crate) const DEFAULT_ADMIN_PORT: u16 = 9090;

#[derive(Debug, Parser)]
#[command(
    name = "kubectl-drift",
    bin_name = "kubectl drift",
    version,
    about = "Why an edit is, or would be, denied by Drift Sentinel",
    long_about = "Why an edit is, or would be, denied by Drift Sentinel.\n\n\
Against the cluster (its rule ConfigMaps, the namespace's mode annotation):\n  \
kubectl drift explain deploy/web\n  \
kubectl drift preview -f web.yaml [--server-dry-run]\n  \
kubectl drift preview deploy/web    (edit the live object in $EDITOR; nothing is applied)\n\n\
Offline (no cluster needed, for CI and local use):\n  \
kubectl drift preview --rules DIR --old before.yaml --new after.yaml\n  \
kubectl drift explain --rules DIR -f object.yaml\n  \
kubectl drift audit --rules DIR -f live.yaml\n\n\
Drift of live objects from their declared state, with the cluster's rules:\n  \
kubectl drift audit [-n NAMESPACE | -A]\n  \
kubectl drift blame deploy/web      (who owns each field; drifted ones with who and why)\n\n\
Live, from the agents (through port-forwarding) or an agent's admin API:\n  \
kubectl drift status\n  \
kubectl drift tail [--no-tui]\n  \
kubectl drift tail --url http://127.0.0.1:9090\n\n\
Shell completion: kubectl drift completion bash|zsh|fish (and kubectl_complete-drift on PATH \
for `kubectl drift <TAB>`).\n\n\
Exit codes: 0 allowed without a violation, 1 would be denied, 3 a violation allowed by a \
non-enforcing mode (warn, dry-run), 2 usage, input or cluster error."
)]
pub struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Parses the process's arguments (exits 2 with clap's message on a usage error).
pub fn parse() -> Cli {
    Cli::parse()
}

/// The clap command, for completion scripts and the completion program.
pub(crate) fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Output {
    Text,
    Json,
    Yaml,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ColorChoice {
    /// Colour on a terminal, unless NO_COLOR is set.
    Auto,
    Always,
    Never,
}

/// How a result is printed.
#[derive(Debug, Clone, Args)]
pub(crate) struct Display {
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
    pub output: Output,
    /// When to colour text output: auto (a terminal, and NO_COLOR unset), always, never.
    #[arg(long, value_enum, default_value = "auto", value_name = "WHEN")]
    pub color: ColorChoice,
}

/// The flags kubectl has for reaching a cluster, as kubectl has them.
#[derive(Debug, Clone, Args)]
pub(crate) struct KubeFlags {
    /// Path to the kubeconfig file (else KUBECONFIG, else ~/.kube/config, else in-cluster).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (else its current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// The namespace of the objects asked about (default: the context's namespace, else
    /// `default`). For `tail`: only records of objects in this namespace (a glob).
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// How long one request to the API server may take: 0 means no limit, else a duration
    /// (5s, 1m, 1h30m; a plain number is seconds). Default 20s.
    #[arg(long, value_name = "DURATION")]
    pub request_timeout: Option<String>,
}

/// Rules and namespaces from files: the offline mode of `explain` and `preview`.
#[derive(Debug, Clone, Args)]
pub(crate) struct Offline {
    /// Rule ConfigMaps from files: a YAML file or a directory of them (repeatable). Makes the
    /// command offline: no cluster is contacted.
    #[arg(long = "rules", value_name = "PATH")]
    pub rules: Vec<PathBuf>,
    /// Namespace documents, for the drift-sentinel.k8s.io/mode annotation (offline).
    #[arg(long = "namespace-file", value_name = "FILE")]
    pub namespace_file: Option<PathBuf>,
}

/// Which rule ConfigMaps are cluster rules (reference §2 "Who may write a rule"): `explain`,
/// `preview` and `audit`, offline and against the cluster.
#[derive(Debug, Clone, Args)]
pub(crate) struct Tiers {
    /// Rule ConfigMaps in these namespaces (globs, comma-separated or repeated; `*` every one)
    /// are cluster rules, the others namespace rules, as the agent's flag of the same name.
    /// Offline, without it every rule file is a cluster rule. Against the cluster, without it
    /// the agent's own setting is read from an agent pod's admin /status (--agent-namespace,
    /// -l, --admin-port); when no agent answers, the agent's default is assumed: its own
    /// namespace (--agent-namespace).
    #[arg(long, value_name = "GLOBS", value_delimiter = ',')]
    pub cluster_rule_namespaces: Vec<String>,
    #[command(flatten)]
    pub agents: AgentPods,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Show the changes of an edit, which are mutable, denied or excluded, and the verdict.
    ///
    /// -f FILE (against the cluster) judges what `kubectl apply -f FILE` would make of the live
    /// object, not the file as written: fields the file sets replace the live ones; maps merge;
    /// lists with a merge key (containers, env, volumes, imagePullSecrets … by name, ports by
    /// port and protocol, volumeMounts by mountPath) merge element by element, other lists are
    /// replaced (custom resources: every list, as their JSON merge patch does); a field the file
    /// leaves out stays as it is (what the API server defaulted, what other clients set) unless
    /// the last apply set it (the live object's kubectl.kubernetes.io/last-applied-configuration
    /// annotation): then it is removed; and the last-applied annotation becomes the file's.
    /// With --replace, the file as written replaces the object, as `kubectl replace -f FILE`
    /// would: every field it leaves out, defaulted ones too, is removed.
    ///
    /// KIND/NAME opens the live object in $EDITOR, like `kubectl edit`: the saved object is
    /// judged, with the fields the editor did not show (status, resourceVersion, uid, …) kept.
    ///
    /// Offline (--rules), --old and --new are compared as written.
    Preview(PreviewArgs),
    /// Show every rule in priority order, whether and why it matches an object, and the winner.
    Explain(ExplainArgs),
    /// Follow the exported violations live: a terminal UI, or lines with --no-tui.
    ///
    /// The records of every admin API given, merged by time: a header with a sparkline of
    /// violations per minute over the last hour (webhook and audit), a list (newest at the
    /// bottom), a detail pane (user, rule, mode, each denied path with old → new), a top view
    /// (t) of the rules, users, namespaces and denied fields of the shown records, filters and
    /// pause. The streams reconnect when an agent restarts, without repeating records.
    ///
    /// Keys: ↑/↓ or j/k select, g/G first/last, p pause/resume, t top view, / text filter,
    /// n namespace filter, r rule filter (while typing: Enter applies, Esc clears), s source
    /// all/webhook/audit, c clear the filters, q or Ctrl-C quit, Esc clears the text filter or
    /// quits.
    ///
    /// Without --url, follows every running agent pod (--agent-namespace, --selector) through
    /// port-forwarding to its admin port, as `kubectl port-forward` does; a pod that goes away
    /// is replaced by another agent pod when the stream reconnects.
    ///
    /// --no-tui prints each record as it arrives: -o json (the default) one JSON line as
    /// received, -o yaml one YAML document each, -o text one line each.
    ///
    /// Example, with an agent pod's admin port forwarded (kubectl -n NAMESPACE port-forward POD
    /// 9090): kubectl drift tail --url http://127.0.0.1:9090
    Tail(TailArgs),
    /// Is Drift Sentinel healthy? The agents, their rules, export and webhook configuration.
    ///
    /// The agent pods and their readiness, each pod's rules loaded
    /// and invalid (from its admin /status through port-forwarding), the Connection's
    /// status.byPod (source, active, last attempt, last success, errors; a source whose last
    /// success is more than 2 minutes old while it is still attempted is stale), and the
    /// ValidatingWebhookConfiguration (caBundle, failurePolicy, namespaceSelector).
    ///
    /// Exit codes: 0 healthy, 1 unhealthy (each problem is listed), 2 the cluster could not be
    /// asked.
    Status(StatusArgs),
    /// Find drift: live objects that differ from what was declared for them, and who changed them.
    ///
    /// The audit of `drift-sentinel audit` (the same engine, docs/audit.md), run from here:
    /// every object that an auditing rule (mode enforce, warn or dry-run) selects is judged
    /// under the rule that would win for it at admission, against its declared state — the
    /// kubectl.kubernetes.io/last-applied-configuration annotation — and the fields that
    /// imperative edits own (metadata.managedFields: kubectl edit, patch, set, scale, label,
    /// annotate, replace, rollout). Each drifted object is shown with its paths, declared →
    /// live, and who changed them (the field manager and its time).
    ///
    /// Against the cluster: its rule ConfigMaps and Namespaces, and the objects listed through
    /// the API (500 a page) in the context's namespace, -n NAMESPACE, or -A every namespace
    /// (cluster-scoped objects only with -A). Offline: --rules PATH [--namespace-file F] -f
    /// OBJECTS, files as `kubectl get -o yaml --show-managed-fields` writes them (List
    /// documents included); -n keeps the objects of one namespace.
    ///
    /// Exit codes: 0 no drift, 1 drift found, 2 usage, input or cluster error.
    Audit(AuditArgs),
    /// Who owns each field of an object, and who made its drift and why (the kubectl-blame view).
    ///
    /// KIND/NAME: each field of the live object (spec and the other top-level fields but status,
    /// metadata.labels, annotations, finalizers and ownerReferences) with its value and the
    /// metadata.managedFields entry that owns it: the field manager, the operation (Update, or
    /// Apply for server-side apply: kubectl apply --server-side, Flux's kustomize-controller,
    /// Argo CD) and its time. Long values are cut (…).
    ///
    /// The object is judged as `kubectl drift audit` judges it, with the cluster's rules (the
    /// same engine): against client-side apply's kubectl.kubernetes.io/last-applied-configuration
    /// annotation, and the fields imperative edits own (kubectl edit, patch, set, scale …). Each
    /// drifted field is marked (!), with the declared and the live value, the edit that changed
    /// it, and who made it and why the webhook let it through — read from the webhook's records
    /// of edits (its Events, kept by the API server an hour by default) — or why that is not known.
    ///
    /// Exit codes: 0 shown (drifted or not), 2 usage or cluster error (the object not found, a
    /// kind the cluster does not serve, no permission to read it).
    Blame(BlameArgs),
    /// Set, clear or list temporary exceptions: the bypass annotation with an end.
    ///
    /// KIND/NAME --for DURATION [--reason TEXT] sets the bypass annotation of the rule that
    /// applies to the object (drift-sentinel.k8s.io/bypass unless the rule names another) to
    /// an RFC 3339 end DURATION after the API server's clock (the Date of its answer), and
    /// drift-sentinel.k8s.io/bypass-reason to TEXT. Edits of the object are then allowed until
    /// the end, each with a warning naming it; after it, they are judged again, and the audit
    /// reports the drift made meanwhile. A duration over the rule's maxBypass is refused,
    /// naming the rule. KIND/NAME --clear removes both annotations.
    ///
    /// --list shows the bypassed objects of the webhook's kinds (Deployments, StatefulSets,
    /// DaemonSets, Argo Rollouts) in the namespace, or every namespace with -A: the end (or
    /// none), what the annotation means now (active, expired, not honoured), the reason, and who
    /// set it (the field manager and time from managedFields).
    ///
    /// Exit codes: 0 done, 2 usage, input or cluster error (a refused duration included).
    Bypass(BypassArgs),
    /// Print a shell completion script: bash, zsh or fish.
    ///
    /// bash: source <(kubectl drift completion bash). For `kubectl drift <TAB>` (kubectl 1.26 or
    /// later), put kubectl_complete-drift (shipped with the plugin) on PATH: kubectl runs it, and
    /// it completes commands, flags, kinds and the names of objects in the cluster.
    Completion(CompletionArgs),
}

#[derive(Debug, Clone, Args)]
pub(crate) struct BypassArgs {
    /// The object, as kubectl names it: KIND/NAME (deploy/web, rollouts.argoproj.io/api).
    #[arg(value_name = "KIND/NAME")]
    pub target: Option<String>,
    /// How long the bypass lasts from now, by the API server's clock: 30m, 4h, 1h30m, 2d.
    #[arg(long = "for", value_name = "DURATION")]
    pub duration: Option<String>,
    /// Why (an incident or ticket): written to drift-sentinel.k8s.io/bypass-reason.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// Remove the bypass (and its reason) from the object.
    #[arg(long)]
    pub clear: bool,
    /// List the bypassed objects instead.
    #[arg(long)]
    pub list: bool,
    /// With --list: every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    #[command(flatten)]
    pub cluster: ClusterJudging,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct BlameArgs {
    /// The object, as kubectl names it: KIND/NAME (deploy/web, sts/db, rollouts.argoproj.io/api).
    #[arg(value_name = "KIND/NAME")]
    pub target: String,
    #[command(flatten)]
    pub cluster: ClusterJudging,
    #[command(flatten)]
    pub drift_managers: DriftManagers,
    #[command(flatten)]
    pub events: EventTtl,
}

/// What `bypass` and `blame` work with: the cluster (they have no offline mode, unlike
/// [`Judging`]), how to print, and the rule tiers.
#[derive(Debug, Clone, Args)]
pub(crate) struct ClusterJudging {
    #[command(flatten)]
    pub kube: KubeFlags,
    #[command(flatten)]
    pub display: Display,
    #[command(flatten)]
    pub tiers: Tiers,
}

/// Which field managers' edits are imperative (`blame` and `audit`).
#[derive(Debug, Clone, Args)]
pub(crate) struct DriftManagers {
    /// Field managers whose `Update`s are imperative edits (comma-separated), as the agent's
    /// --audit-drift-managers; default: what kubectl writes for edit, patch, set, label,
    /// annotate, replace, rollout and scale.
    #[arg(
        long = "drift-managers",
        id = "drift_managers",
        value_name = "NAMES",
        value_delimiter = ','
    )]
    pub names: Option<Vec<String>>,
}

/// How far back the webhook's records of edits reach (`blame` and `audit` against a cluster).
#[derive(Debug, Clone, Args)]
pub(crate) struct EventTtl {
    /// How long the API server keeps Events (its --event-ttl; 1h by default): an edit made
    /// within it that the webhook's records do not name is one the webhook did not see.
    #[arg(long, value_name = "DURATION", default_value = "1h")]
    pub event_ttl: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Shell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct CompletionArgs {
    /// The shell the script is for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// How the agent pods are found and reached (cluster mode of `status` and `tail`; `explain` and
/// `preview` read the agent's cluster rule namespaces from them).
#[derive(Debug, Clone, Args)]
pub(crate) struct AgentPods {
    /// Namespace of the agent: its pods and the Connection. Default: where the cluster's
    /// validate.drift-sentinel.k8s.io webhook points (its Service's namespace, else the
    /// namespace of the Helm release that installed it); when that cannot be told, the
    /// command says so and exits 2.
    #[arg(long, value_name = "NAMESPACE")]
    pub agent_namespace: Option<String>,
    /// Label selector of the agent pods (the chart's selector labels).
    #[arg(short = 'l', long, default_value = DEFAULT_SELECTOR)]
    pub selector: String,
    /// The agents' admin port in their pods (the agent's --admin-address).
    #[arg(long, default_value_t = DEFAULT_ADMIN_PORT)]
    pub admin_port: u16,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub kube: KubeFlags,
    #[command(flatten)]
    pub display: Display,
    #[command(flatten)]
    pub agents: AgentPods,
    /// The Connection the agents export through (their --audit-connection).
    #[arg(long, value_name = "NAME", default_value = "audit-connection")]
    pub connection: String,
    /// Label selector of the audit pods (the chart's audit Deployment, in --agent-namespace):
    /// their last audit run, from their admin /status.
    #[arg(long, value_name = "SELECTOR", default_value = DEFAULT_AUDIT_SELECTOR)]
    pub audit_selector: String,
    /// The ValidatingWebhookConfiguration (default: the chart's, labelled
    /// app.kubernetes.io/name=drift-sentinel, else any with the webhook
    /// validate.drift-sentinel.k8s.io).
    #[arg(long, value_name = "NAME")]
    pub webhook: Option<String>,
}

/// What `preview`, `explain` and `audit` judge with: the cluster (or the rule files), how to
/// print, and the rule tiers.
#[derive(Debug, Clone, Args)]
pub(crate) struct Judging {
    #[command(flatten)]
    pub kube: KubeFlags,
    #[command(flatten)]
    pub display: Display,
    #[command(flatten)]
    pub offline: Offline,
    #[command(flatten)]
    pub tiers: Tiers,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct PreviewArgs {
    #[command(flatten)]
    pub judging: Judging,
    /// The object before the edit (offline).
    #[arg(long, value_name = "FILE")]
    pub old: Option<PathBuf>,
    /// The object after the edit (offline).
    #[arg(long, value_name = "FILE")]
    pub new: Option<PathBuf>,
    /// The edited object (cluster mode: applied to the live object of the same kind, name and
    /// namespace as `kubectl apply -f` would, and the result compared with it).
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// With -f: compare the file as written, as `kubectl replace -f` would send it, instead of
    /// what `kubectl apply -f` would make of the live object; fields the file leaves out
    /// (also those the API server defaulted) count as removed.
    #[arg(long, requires = "file", conflicts_with = "rules")]
    pub replace: bool,
    /// KIND/NAME of a live object to edit in $EDITOR (KUBE_EDITOR, EDITOR, else vi), like
    /// `kubectl edit`: the verdict on the saved edit is shown; nothing is applied.
    #[arg(value_name = "KIND/NAME")]
    pub target: Option<String>,
    /// Also send the update to the API server as a server-side dry run (nothing is changed), so
    /// that the installed webhook answers; both verdicts are shown, and their disagreement is
    /// an error (exit 2).
    #[arg(long)]
    pub server_dry_run: bool,
    /// The user making the edit (default: offline kubernetes-admin; against a cluster the user
    /// the kubeconfig authenticates as, else kubernetes-admin).
    #[arg(long)]
    pub user: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct ExplainArgs {
    #[command(flatten)]
    pub judging: Judging,
    /// The object to explain (offline; against the cluster, an object of a file judged with
    /// the cluster's rules).
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// KIND/NAME of a live object (cluster mode): deploy/web, deployment.apps/web, sts/db, …
    #[arg(value_name = "KIND/NAME")]
    pub target: Option<String>,
    /// The user whose edits are explained (default: offline kubernetes-admin; against a cluster
    /// the user the kubeconfig authenticates as, else kubernetes-admin).
    #[arg(long)]
    pub user: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct AuditArgs {
    #[command(flatten)]
    pub judging: Judging,
    /// Objects to audit (offline, with --rules): a file or a directory of *.yaml, *.yml and
    /// *.json files, as `kubectl get -o yaml` writes them; repeatable.
    #[arg(short = 'f', long = "filename", value_name = "PATH")]
    pub files: Vec<PathBuf>,
    /// Audit every namespace (and cluster-scoped objects); as kubectl's -A, not with -n.
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    pub all_namespaces: bool,
    #[command(flatten)]
    pub drift_managers: DriftManagers,
    /// Resources (group/resource, comma-separated) that a rule selector with `*` audits, as the
    /// agent's --audit-resources; default: the resources the cluster's drift-sentinel webhook
    /// intercepts, else apps/deployments,apps/statefulsets,apps/daemonsets,argoproj.io/rollouts.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub resources: Option<Vec<String>>,
    /// Objects per list request against the cluster (pagination).
    #[arg(long, value_name = "N", default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub chunk_size: u32,
    #[command(flatten)]
    pub events: EventTtl,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum TailSource {
    Webhook,
    Audit,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct TailArgs {
    #[command(flatten)]
    pub kube: KubeFlags,
    /// With --no-tui: json (each record as received, one line), yaml (one document each) or
    /// text (one line each). Without --no-tui, json or yaml print lines instead of the UI.
    #[arg(short = 'o', long = "output", value_enum, value_name = "FORMAT")]
    pub output: Option<Output>,
    /// When to colour the terminal UI and text lines: auto, always, never.
    #[arg(long, value_enum, default_value = "auto", value_name = "WHEN")]
    pub color: ColorChoice,
    /// The admin API of an agent, e.g. http://127.0.0.1:9090 (through kubectl port-forward);
    /// repeatable, records are merged by time. Without it: every running agent pod of the
    /// cluster, through port-forwarding.
    #[arg(long = "url", value_name = "URL")]
    pub url: Vec<String>,
    /// Print the records as they arrive instead of the terminal UI (NDJSON unless -o says).
    #[arg(long)]
    pub no_tui: bool,
    /// Only records from this long ago (10m, 1h30m) or since this RFC 3339 time.
    #[arg(long, value_name = "DURATION|RFC3339")]
    pub since: Option<String>,
    /// Only records of this export: the webhook's or the audit's.
    #[arg(long, value_enum)]
    pub source: Option<TailSource>,
    /// Records of every namespace (the default; as kubectl's -A, it cannot be combined with -n).
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    pub all_namespaces: bool,
    /// Only records of this rule: NAME or NAMESPACE/NAME (a glob: `*`, `?`, `[a-z]`).
    #[arg(long, value_name = "GLOB")]
    pub rule: Option<String>,
    #[command(flatten)]
    pub agents: AgentPods,
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_is_consistent() {
        super::command().debug_assert();
    }
}
