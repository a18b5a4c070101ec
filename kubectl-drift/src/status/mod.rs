//! `kubectl drift status` (reference §9): is Drift Sentinel healthy in this cluster?
//!
//! - the agent pods (the chart's selector labels) and their readiness;
//! - each pod's admin `/status`, through port-forwarding: rules loaded (each with its tier,
//!   cluster or namespace rule) and invalid, rules served in their last valid version (stale,
//!   with the reason), the cluster rule namespaces, export on;
//! - the Connection's `status.byPod`: per pod and source, active, last attempt, last success,
//!   errors — a source whose last success is more than 2 minutes old is flagged stale: a
//!   problem while it is still being attempted (or no longer succeeding), a warning when
//!   nothing was attempted since (idle);
//! - the ValidatingWebhookConfiguration: caBundle present, failurePolicy, namespaceSelector;
//! - the audit pods (the chart's audit Deployment) and their last run: an audit that has not
//!   completed within 3 intervals is a problem ([`audit`]).
//!
//! Three steps: [`fetch`] asks the cluster (the only I/O), [`health`] decides what is healthy,
//! stale or a problem (pure, tested without a cluster), [`render`] prints the
//! [`report::Report`] as text, JSON or YAML ([`time`]: how both write times). Exit 0 when
//! healthy, 1 when something is not (each problem is named), 2 when the cluster cannot be
//! asked.

mod audit;
mod fetch;
mod health;
mod render;
mod report;
mod time;

use std::time::SystemTime;

use crate::plan::{Print, Status};
use crate::verdict::Verdict;

/// Fetches, judges and prints; unhealthy exits 1, like "would be denied".
pub(crate) async fn run(plan: &Status, print: Print) -> anyhow::Result<Verdict> {
    let facts = fetch::fetch(plan).await?;
    let now = SystemTime::now();
    let report = health::report_of(facts, plan, now);
    let mut out = std::io::stdout().lock();
    render::print(&report, print, now, &mut out)?;
    Ok(if report.healthy {
        Verdict::Allowed
    } else {
        Verdict::Denied
    })
}
