//! The side-by-side load benchmark of the webhook (issue 12): the reference server
//! ([`reference`], binary `drift-reference`) and the fixtures both servers are loaded with
//! ([`fixtures`], binary `drift-bench-fixtures`). `scripts/load-bench.sh` runs the comparison.

pub mod fixtures;
pub mod reference;

use std::ffi::OsString;

use clap::Parser as _;
use drift_sentinel::cli::{Cli, Command, ServeArgs};
use drift_sentinel::server::ConnectionTimeouts;
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

/// Serves the reference on `listener` as the agent serves its webhook: `server::serve` with
/// the agent's reloading TLS (when a certificate is given) and connection timeouts, until
/// `shutdown` turns true.
pub async fn serve_reference(
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
    let router = reference::router(&args.validate_path, args.read_timeout);
    drift_sentinel::server::serve(listener, router, tls, timeouts, shutdown).await;
    Ok(())
}
