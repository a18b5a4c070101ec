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
Offline (no cluster needed, for CI and local use):\n  \
kubectl drift preview --rules DIR --old before.yaml --new after.yaml\n  \
kubectl drift explain --rules DIR -f object.yaml\n\n\
Live, from an agent's admin API (e.g. port-forwarded):\n  \
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
    /// Namespace of the object (cluster mode; offline it comes from the object).
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
    /// Example, with an agent pod's admin port forwarded (kubectl -n NAMESPACE port-forward POD
    /// 9090): kubectl drift tail --url http://127.0.0.1:9090
    Tail(TailArgs),
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
    /// The edited object (cluster mode: compared with the live object).
    #[arg(short = 'f', long = "filename")]
    pub file: Option<PathBuf>,
    /// The user making the edit.
    #[arg(long, default_value = "kubernetes-admin")]
    pub user: String,
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
    /// KIND/NAME of a live object (cluster mode).
    pub target: Option<String>,
    /// The user whose edits are explained.
    #[arg(long, default_value = "kubernetes-admin")]
    pub user: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TailSource {
    Webhook,
    Audit,
}

#[derive(Debug, Clone, Args)]
pub struct TailArgs {
    /// The admin API of an agent, e.g. http://127.0.0.1:9090 (through kubectl port-forward);
    /// repeatable, records are merged by time.
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
    /// Only records of this rule: NAME or NAMESPACE/NAME (`*` matches any text).
    #[arg(long)]
    pub rule: Option<String>,
    /// The kubeconfig context to use (cluster mode).
    #[arg(long)]
    pub context: Option<String>,
    /// Path to the kubeconfig file (cluster mode).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}
