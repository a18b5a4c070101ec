//! The Drift Sentinel agent: the HTTPS admission webhook and everything around it. The binary
//! (`main.rs`) only parses the command line and calls [`run`], which hands the subcommand to
//! its module; the decisions themselves are made by `drift-engine`.

mod admin;
mod audit;
mod bounded_series;
pub mod capacity;
mod certificates;
pub mod cli;
pub mod client_auth;
mod cluster_source;
mod connection_status;
mod decisions;
mod events;
pub mod export;
mod json_lines;
mod kube_client;
mod last_good;
mod log_limit;
mod metrics;
mod parent_labels;
pub mod process;
mod record_key;
mod review_cmd;
mod rule_files;
mod rule_index;
pub mod rules_source;
pub mod serve;
pub mod server;
mod state;
mod tiers;
pub mod tls;
mod validate_rule;
mod watch_failures;
pub mod webhook;

/// The benchmark's seam into the Events (`bench/examples/finding_loop.rs`); the module stays private.
pub use events::UnwrittenFindings;

use std::process::ExitCode;

use anyhow::Context as _;

use crate::cli::Command;

/// Runs a parsed command line to completion: the process's exit code, or the error that
/// stopped it.
pub async fn run(cli: cli::Cli) -> anyhow::Result<ExitCode> {
    let done = ExitCode::SUCCESS;
    match cli.command {
        Command::Serve(args) => serve::run(*args).await.map(|()| done),
        Command::Review(args) => review_cmd::run(&args).map(|()| done),
        Command::Audit(args) => Ok(audit::command(*args).await),
        Command::Crd => {
            print!("{}", drift_api::connection_crd_yaml()?);
            Ok(done)
        }
        Command::Reader(args) => {
            process::init_logging(tracing::Level::INFO, process::LogTo::Stdout);
            tokio::task::spawn_blocking(move || {
                export::reader::run(&args.path, args.interval, args.once)
            })
            .await
            .context("the reader stopped unexpectedly")?
            .map(|()| done)
        }
    }
}
