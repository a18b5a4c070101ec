//! `drift-reference`: the reference server of the load benchmark (see `drift_bench::reference`).
//! Takes `drift-sentinel serve`'s flags; uses `--address`, `--tls-cert-file`/`--tls-key-file`,
//! `--validate-path` and the timeouts, and ignores the rest. Prints `listening on ADDRESS` once
//! it accepts connections, then serves until killed.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args = match drift_bench::parse_serve_args(std::env::args_os().skip(1)) {
        Ok(args) => args,
        Err(e) => e.exit(),
    };
    // The agent's runtime (`drift-sentinel`'s main): multi-threaded, one worker per core.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("drift-reference: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.address).await?;
        println!("listening on {}", listener.local_addr()?);
        // Never sent: the reference stops when it is killed.
        let (_stop, shutdown) = tokio::sync::watch::channel(false);
        drift_bench::serve_reference(listener, &args, shutdown).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("drift-reference: {e:#}");
            ExitCode::FAILURE
        }
    }
}
