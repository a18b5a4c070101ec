//! Command line of the plugin, with kubectl's habits: `-n`, `--context`, `--kubeconfig`,
//! `-o text|json|yaml`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

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
kubectl drift explain --rules DIR -f object.yaml\n\n\
Live, from the agents (through port-forwarding) or an agent's admin API:\n  \
kubectl drift status\n  \
kubectl drift tail [--no-tui]\n  \
kubectl drift tail --url http://127.0.0.1:9090\n\n\
Exit codes: 0 allowed without a violation, 1 would be denied, 3 a violation allowed by a \
non-enforcing mode (warn, dry-run), 2 usage, input or cluster error."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

pub fn parse() -> Cli {
    Cli::parse()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
    Yaml,
}

#[derive(Debug, Clone, Args)]
pub struct Common {
    /// Output format.
    #[arg(
        short = 'o',
        long = "output",
        value_enum,
        default_value = "text",
        global = true
    )]
    pub output: Output,
    /// Namespace of the object (cluster mode; default: the kubeconfig context's namespace, else
    /// `default`; a file's own namespace wins). Offline it comes from the object.
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// The kubeconfig context to use (cluster mode).
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// Path to the kubeconfig file (cluster mode).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct Offline {
    /// Rule ConfigMaps from files: a YAML file or a directory of them (repeatable).
    #[arg(long = "rules")]
    pub rules: Vec<PathBuf>,
    /// Namespace documents, for the drift-sentinel.k8s.io/mode annotation.
    #[arg(long = "namespace-file")]
    pub namespace_file: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
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
    /// Follow the exported violations live: a terminal UI, or NDJSON with --no-tui.
    ///
    /// The records of every admin API given, merged by time: a list (newest at the bottom), a
    /// detail pane (user, rule, mode, each denied path with old → new), filters and pause. The
    /// streams reconnect when an agent restarts, without repeating records.
    ///
    /// Keys: ↑/↓ or j/k select, g/G first/last, p pause/resume, / text filter, n namespace
    /// filter, r rule filter (while typing: Enter applies, Esc clears), s source
    /// all/webhook/audit, c clear the filters, q or Ctrl-C quit, Esc clears the text filter or
    /// quits.
    ///
    /// Without --url, follows every running agent pod (--agent-namespace, --selector) through
    /// port-forwarding to its admin port, as `kubectl port-forward` does; a pod that goes away
    /// is replaced by another agent pod when the stream reconnects.
    ///
    /// Example, with an agent pod's admin port forwarded (kubectl -n NAMESPACE port-forward POD
    /// 9090): kubectl drift tail --url http://127.0.0.1:9090
    Tail(TailArgs),
    /// Is Drift Sentinel healthy? The agent pods and their readiness, each pod's rules loaded
    /// and invalid (from its admin /status through port-forwarding), the Connection's
    /// status.byPod (source, active, last attempt, last success, errors; a source whose last
    /// success is more than 2 minutes old while it is still attempted is stale), and the
    /// ValidatingWebhookConfiguration (caBundle, failurePolicy, namespaceSelector).
    ///
    /// Exit codes: 0 healthy, 1 unhealthy (each problem is listed), 2 the cluster could not be
    /// asked.
    Status(StatusArgs),
}

/// How the agent pods are found and reached (cluster mode of `status` and `tail`).
#[derive(Debug, Clone, Args)]
pub struct AgentPods {
    /// Label selector of the agent pods (the chart's selector labels).
    #[arg(short = 'l', long, default_value = crate::cluster::DEFAULT_SELECTOR)]
    pub selector: String,
    /// The agents' admin port in their pods (the agent's --admin-address).
    #[arg(long, default_value_t = crate::cluster::DEFAULT_ADMIN_PORT)]
    pub admin_port: u16,
}

#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// Namespace of the agent: its pods and the Connection.
    #[arg(short = 'n', long, default_value = crate::cluster::DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// The kubeconfig context to use.
    #[arg(long)]
    pub context: Option<String>,
    /// Path to the kubeconfig file.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    pub agents: AgentPods,
    /// The Connection the agents export through (their --audit-connection).
    #[arg(long, value_name = "NAME", default_value = "audit-connection")]
    pub connection: String,
    /// The ValidatingWebhookConfiguration (default: the chart's, labelled
    /// app.kubernetes.io/name=drift-sentinel, else any with the webhook
    /// validate.drift-sentinel.k8s.io).
    #[arg(long, value_name = "NAME")]
    pub webhook: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
    pub output: Output,
}

#[derive(Debug, Clone, Args)]
pub struct PreviewArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub offline: Offline,
    /// The object before the edit (offline).
    #[arg(long)]
    pub old: Option<PathBuf>,
    /// The object after the edit (offline).
    #[arg(long)]
    pub new: Option<PathBuf>,
    /// The edited object (cluster mode: applied to the live object of the same kind, name and
    /// namespace as `kubectl apply -f` would, and the result compared with it).
    #[arg(short = 'f', long = "filename")]
    pub file: Option<PathBuf>,
    /// With -f: compare the file as written, as `kubectl replace -f` would send it, instead of
    /// what `kubectl apply -f` would make of the live object; fields the file leaves out
    /// (also those the API server defaulted) count as removed.
    #[arg(long, requires = "file", conflicts_with = "rules")]
    pub replace: bool,
    /// KIND/NAME of a live object to edit in $EDITOR (KUBE_EDITOR, EDITOR, else vi), like
    /// `kubectl edit`: the verdict on the saved edit is shown; nothing is applied.
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
pub struct ExplainArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub offline: Offline,
    /// The object to explain (offline).
    #[arg(short = 'f', long = "filename")]
    pub file: Option<PathBuf>,
    /// KIND/NAME of a live object (cluster mode): deploy/web, deployment.apps/web, sts/db, …
    pub target: Option<String>,
    /// The user whose edits are explained (default: offline kubernetes-admin; against a cluster
    /// the user the kubeconfig authenticates as, else kubernetes-admin).
    #[arg(long)]
    pub user: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TailSource {
    Webhook,
    Audit,
}

#[derive(Debug, Clone, Args)]
pub struct TailArgs {
    /// The admin API of an agent, e.g. http://127.0.0.1:9090 (through kubectl port-forward);
    /// repeatable, records are merged by time. Without it: every running agent pod of the
    /// cluster, through port-forwarding.
    #[arg(long = "url", value_name = "URL")]
    pub url: Vec<String>,
    /// Print each record as one NDJSON line, as received, until interrupted.
    #[arg(long)]
    pub no_tui: bool,
    /// Only records from this long ago (10m, 1h30m) or since this RFC 3339 time.
    #[arg(long, value_name = "DURATION|RFC3339")]
    pub since: Option<String>,
    /// Only records of this export: the webhook's or the audit's.
    #[arg(long, value_enum)]
    pub source: Option<TailSource>,
    /// Only records of objects in this namespace (`*` matches any text).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Records of every namespace (the default; as kubectl's -A, it cannot be combined with -n).
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    pub all_namespaces: bool,
    /// Only records of this rule: NAME or NAMESPACE/NAME (`*` matches any text).
    #[arg(long)]
    pub rule: Option<String>,
    /// The kubeconfig context to use (cluster mode).
    #[arg(long)]
    pub context: Option<String>,
    /// Path to the kubeconfig file (cluster mode).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of the agent pods (cluster mode; -n filters the records).
    #[arg(long, value_name = "NAMESPACE", default_value = crate::cluster::DEFAULT_NAMESPACE)]
    pub agent_namespace: String,
    #[command(flatten)]
    pub agents: AgentPods,
}
