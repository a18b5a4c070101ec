//! `drift-sentinel`: parses the command line and runs the agent.

use std::process::ExitCode;

fn main() -> ExitCode {
    // Before any thread starts (the allocator's parameters are the process's).
    drift_sentinel::process::keep_freed_memory();
    let cli = drift_sentinel::cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("drift-sentinel: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(drift_sentinel::run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("drift-sentinel: {e:#}");
            ExitCode::FAILURE
        }
    }
}
