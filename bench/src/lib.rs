//! The side-by-side load benchmark of the webhook: reference servers on the agent's own serving
//! stack — [`reference`](mod@reference) (binary `drift-reference`) parses the review and
//! answers, [`floor`] (binary `drift-floor`) only finds the uid in the bytes and answers, and
//! its checked variant (binary `drift-checked-floor`) also makes the strict pass over the body
//! that every answer needs — and the fixtures all of them are loaded with ([`fixtures`], binary
//! `drift-bench-fixtures`). `scripts/load-bench.sh` runs the comparison.

pub mod fixtures;
pub mod floor;
pub mod reference;

use std::ffi::OsString;

use axum::extract::{Request, State};
use axum::response::Response;
use axum::routing::post;
use clap::Parser as _;
use drift_sentinel::capacity::ConnectionLimit;
use drift_sentinel::cli::{Cli, Command, ServeArgs};
use drift_sentinel::server::ConnectionTimeouts;
use drift_sentinel::webhook::{Intake, read_review_body};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Parses `drift-sentinel serve`'s flags (and defaults, and `DRIFT_SENTINEL_*` environment):
/// the reference takes the agent's own command line, so that both run with the same address
/// form, certificate flags and timeouts. Flags the reference has no use for are accepted and
/// ignored.
pub fn parse_serve_args(
    args: impl IntoIterator<Item = OsString>,
) -> Result<ServeArgs, clap::Error> {
    let argv = ["drift-sentinel".into(), "serve".into()]
        .into_iter()
        .chain(args);
    match Cli::try_parse_from(argv)?.command {
        Command::Serve(args) => Ok(*args),
        _ => unreachable!("the subcommand is always serve"),
    }
}

/// The state of a reference's handler: how long it waits for the body (the agent's
/// `--read-timeout`), and the budget of body bytes it reads within (the agent's).
#[derive(Debug, Clone)]
pub struct ReadTimeout(pub std::time::Duration, pub Intake);

/// Which reference server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reference {
    /// Parses the review into a `serde_json::Value` ([`reference`](mod@reference)).
    Parse,
    /// Finds the uid by a byte search ([`floor`]).
    Floor,
    /// Reads the review as the agent does first, then answers as the floor ([`floor`]).
    CheckedFloor,
}

/// Serves a reference on `listener` as the agent serves its webhook: `server::serve` with
/// the agent's reloading TLS (when a certificate is given) and connection timeouts, until
/// `shutdown` turns true.
pub async fn serve_reference(
    which: Reference,
    listener: TcpListener,
    args: &ServeArgs,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let tls = drift_sentinel::tls::serving(args, &shutdown)?;
    let timeouts = ConnectionTimeouts {
        read_header: args.read_header_timeout,
        idle: args.idle_timeout,
        shutdown: args.shutdown_timeout,
    };
    let answer: fn(&[u8]) -> Response = match which {
        Reference::Parse => reference::answer,
        Reference::Floor => floor::answer,
        Reference::CheckedFloor => floor::answer_checked,
    };
    // Every reference reads the body as the agent does: JSON only, at most 8 MiB, within the
    // read timeout.
    let validate = post(
        move |State(ReadTimeout(read_timeout, intake)): State<ReadTimeout>, request: Request| async move {
            match read_review_body(request, read_timeout, &intake).await {
                Ok(body) => answer(&body),
                Err(refused) => refused,
            }
        },
    );
    let router = axum::Router::new()
        .route(&args.validate_path, validate)
        .with_state(ReadTimeout(
            args.read_timeout,
            Intake::new(args.max_connections / 2),
        ));
    // The agent's listener stops at Phase::Stopping: here as soon as `shutdown` turns true.
    let (phase_tx, phase) = watch::channel(drift_sentinel::server::Phase::Serving);
    let mut stop = shutdown;
    tokio::spawn(async move {
        let _ = stop.wait_for(|stop| *stop).await;
        let _ = phase_tx.send(drift_sentinel::server::Phase::Stopping);
    });
    let connections = ConnectionLimit::new(args.max_connections, None);
    drift_sentinel::server::serve(listener, router, tls, timeouts, connections, phase).await;
    Ok(())
}

/// The `main` of a reference binary: takes `drift-sentinel serve`'s flags (uses `--address`,
/// the certificate flags, `--validate-path` and the timeouts; ignores the rest), prints
/// `listening on ADDRESS` once it accepts connections, then serves until killed, on the
/// agent's runtime (multi-threaded, one worker per core) and allocator settings.
pub fn reference_main(which: Reference, name: &str) -> std::process::ExitCode {
    let args = match parse_serve_args(std::env::args_os().skip(1)) {
        Ok(args) => args,
        Err(e) => e.exit(),
    };
    // As the agent's process does: a floor without it would pay page faults the agent does not.
    drift_sentinel::process::keep_freed_memory();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("{name}: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let listener = TcpListener::bind(args.address).await?;
        println!("listening on {}", listener.local_addr()?);
        // Never sent: a reference stops when it is killed.
        let (_stop, shutdown) = watch::channel(false);
        serve_reference(which, listener, &args, shutdown).await
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
