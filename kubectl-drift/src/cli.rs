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
