//! `kubectl drift`: tells a person why an edit is, or would be, denied. Every verdict it shows
//! comes from `drift-engine`, the same code the agent runs, so the two never disagree.
//!
//! The command line ([`cli`]) is checked once into a [`plan::Plan`]; [`run`] then hands each
//! command to its module, in its mode:
//! - offline (`preview --rules --old --new`, `explain --rules -f`): [`offline`], with the rules,
//!   namespaces and objects of files ([`files`]) and the rule linter ([`lint`]);
//! - against the cluster: `preview` and `explain` ([`live`]), [`audit`] (also offline),
//!   [`blame`], [`bypass`], [`status`] and [`tail`]: the rule ConfigMaps, the live object, the
//!   namespace's mode annotation, the agent pods ([`cluster`]);
//! - `completion` and the completion of `kubectl drift <TAB>` ([`complete`]).
//!
//! What the webhook would decide about an update, and the exit code it makes, is [`verdict`]'s;
//! what `preview` and `explain` print is [`render`]'s. One tokio runtime runs every command; the
//! agents' admin APIs are reached with one HTTP client ([`http`]) over TCP or a pod
//! port-forward ([`cluster::forward`]).

mod audit;
mod blame;
mod bypass;
pub mod cli;
mod cluster;
mod complete;
mod files;
mod http;
mod lint;
mod live;
mod offline;
mod plan;
mod render;
mod status;
mod tail;
mod verdict;

use std::time::SystemTime;

pub use complete::kubectl_complete;
pub use verdict::Verdict;

use crate::cli::Cli;
use crate::plan::{Explain, Plan, Preview};

/// Runs the command line: checks it, then runs the command. An error is a usage, input or
/// cluster error (exit 2).
pub async fn run(cli: Cli) -> anyhow::Result<Verdict> {
    match Plan::of(cli, SystemTime::now())? {
        Plan::Preview(Preview::Offline(plan), print) => offline::preview(&plan, print),
        Plan::Explain(Explain::Offline(plan), print) => offline::explain(&plan, print),
        Plan::Preview(Preview::Cluster(plan), print) => live::preview(&plan, print).await,
        Plan::Explain(Explain::Cluster(plan), print) => live::explain(&plan, print).await,
        Plan::Status(plan, print) => status::run(&plan, print).await,
        Plan::Audit(plan, print) => audit::run(&plan, print).await,
        Plan::Blame(plan, print) => blame::run(&plan, print).await,
        Plan::Bypass(plan, print) => bypass::run(&plan, print).await,
        Plan::Tail(plan) => tail::run(plan).await,
        Plan::Completion(shell) => {
            complete::script(shell, &mut std::io::stdout().lock())?;
            Ok(Verdict::Allowed)
        }
    }
}
