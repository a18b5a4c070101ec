//! `kubectl-drift`: parses the command line and runs the plugin on one tokio runtime. Exit
//! codes: 0 allowed without a violation, 1 would be denied, 3 a violation allowed by a
//! non-enforcing mode, 2 usage, input or cluster error.

use std::process::ExitCode;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let cli = kubectl_drift::cli::parse();
    match kubectl_drift::run(cli).await {
        Ok(verdict) => ExitCode::from(verdict.exit_code()),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
