//! What a run prints: each phase's measures, the medians of the rounds, and every round's
//! UPDATEs pooled with intervals.
use std::collections::BTreeMap;

use crate::servers::{Servers, Setup};
use crate::support::{Quantiles, difference, median, quantiles};

/// Every phase of a run, by rate (rounded to whole UPDATEs per second) and setup.
pub type Results = BTreeMap<(u64, Setup), Vec<Phase>>;

/// What one phase measured.
#[derive(Debug, Clone, Default)]
pub struct Phase {
    pub sent: usize,
    pub seconds: f64,
    pub client: Quantiles,
    pub webhook: Quantiles,
    pub statuses: BTreeMap<u16, usize>,
    pub agent_cpu_us_per_request: Option<f64>,
    /// The webhook server's CPU seconds in the phase and the API server's calls to it: summed
    /// over rounds, a CPU per call finer than one round's (the kernel counts CPU in 10 ms ticks,
    /// a few per cent of a 6 s round at 50/s).
    pub agent_cpu_and_calls: Option<(f64, f64)>,
    /// Every UPDATE's client latency (ms), for the table pooled over rounds.
    pub latencies: Vec<f64>,
}

/// Every round's UPDATEs pooled per setup, and what each setup adds to no webhook and to the
/// floor with a 90 % interval from drawing rounds again (`support::difference`): whether a
/// difference is the setup's or the machine's.
pub fn print_pooled(results: &Results, rates: &[f64], setups: &[Setup]) {
    println!();
    println!(
        "pooled over the rounds; differences in ms with 90 % intervals from drawing the rounds again:"
    );
    println!(
        "| rate | setup | UPDATE p50 | UPDATE p99 | p50 − no webhook | p99 − no webhook | p50 − floor | p99 − floor | server CPU per call |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let rounds_of = |rate: f64, setup: Setup| -> Vec<Vec<f64>> {
        results
            .get(&(rate as u64, setup))
            .map(|phases| phases.iter().map(|p| p.latencies.clone()).collect())
            .unwrap_or_default()
    };
    for &rate in rates {
        let (none, floor) = (
            rounds_of(rate, Setup::NoWebhook),
            rounds_of(rate, Setup::Floor),
        );
        for &setup in setups {
            let rounds = rounds_of(rate, setup);
            let pooled = quantiles(&rounds.concat());
            let over = |base: &[Vec<f64>]| {
                let [p50, p99] = difference(&rounds, base);
                format!("{p50} | {p99}")
            };
            let (over_none, over_floor) = match setup {
                Setup::NoWebhook => ("— | —".to_string(), "— | —".to_string()),
                Setup::Floor => (over(&none), "— | —".to_string()),
                Setup::Agent | Setup::AgentClientAuth | Setup::Baseline => {
                    (over(&none), over(&floor))
                }
            };
            let (cpu, calls) = results
                .get(&(rate as u64, setup))
                .into_iter()
                .flatten()
                .filter_map(|p| p.agent_cpu_and_calls)
                .fold((0.0, 0.0), |(c, n), (pc, pn)| (c + pc, n + pn));
            let cpu = if calls > 0.0 {
                format!("{:.0} µs", cpu * 1e6 / calls)
            } else {
                "—".to_owned()
            };
            println!(
                "| {rate:.0}/s | {} | {:.2} ms | {:.2} ms | {over_none} | {over_floor} | {cpu} |",
                setup.label(),
                pooled.p50,
                pooled.p99
            );
        }
    }
    if setups.contains(&Setup::Baseline) {
        println!();
        println!("the agent against the baseline build (ms, 90 % intervals):");
        for &rate in rates {
            let [p50, p99] = difference(
                &rounds_of(rate, Setup::Agent),
                &rounds_of(rate, Setup::Baseline),
            );
            println!("  at {rate:.0}/s: p50 agent − baseline {p50}, p99 {p99}");
        }
    }
}
/// One phase's line as it ends.
pub fn print_phase(round: usize, rate: f64, setup: Setup, phase: &Phase) {
    println!(
        "  round {round} at {rate:.0}/s, {:<20} {} UPDATEs in {:.1} s: client p50 {:.2} ms p99 {:.2} ms; webhook p50 {:.2} ms p99 {:.2} ms; agent CPU {}; statuses {:?}",
        setup.label(),
        phase.sent,
        phase.seconds,
        phase.client.p50,
        phase.client.p99,
        phase.webhook.p50,
        phase.webhook.p99,
        phase
            .agent_cpu_us_per_request
            .map_or("-".into(), |c| format!("{c:.0} µs/request")),
        phase.statuses
    );
}

/// The medians over the rounds of each setup's quantiles, and what each adds to no webhook.
pub fn print_medians(results: &Results, rates: &[f64], servers: &Servers) {
    println!(
        "| rate | setup | UPDATE p50 | UPDATE p99 | webhook p50 | webhook p99 | agent CPU per request | agent peak RSS |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let phases_of = |rate: f64, setup: Setup| -> &[Phase] {
        results
            .get(&(rate as u64, setup))
            .map_or(&[], Vec::as_slice)
    };
    for &rate in rates {
        let base = phases_of(rate, Setup::NoWebhook);
        let (base50, base99) = (
            median(base.iter().map(|p| p.client.p50)),
            median(base.iter().map(|p| p.client.p99)),
        );
        for setup in servers.setups() {
            let phases = phases_of(rate, setup);
            let p50 = median(phases.iter().map(|p| p.client.p50));
            let p99 = median(phases.iter().map(|p| p.client.p99));
            if setup == Setup::NoWebhook {
                println!(
                    "| {rate:.0}/s | {} | {p50:.2} ms | {p99:.2} ms | — | — | — | — |",
                    setup.label()
                );
                continue;
            }
            let (w50, w99) = (
                median(phases.iter().map(|p| p.webhook.p50)),
                median(phases.iter().map(|p| p.webhook.p99)),
            );
            let cpu = median(phases.iter().filter_map(|p| p.agent_cpu_us_per_request));
            let rss = servers.of(setup).map_or(0.0, |s| s.peak_rss_mib());
            println!(
                "| {rate:.0}/s | {} | {p50:.2} ms ({:+.2}) | {p99:.2} ms ({:+.2}, {:.2}×) | {w50:.2} ms | {w99:.2} ms | {cpu:.0} µs | {rss:.1} MiB |",
                setup.label(),
                p50 - base50,
                p99 - base99,
                p99 / base99,
            );
        }
    }
}
