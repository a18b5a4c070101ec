//! End-to-end tests against a real Kubernetes control plane (etcd, kube-apiserver,
//! kube-controller-manager v1.37, built by `.ci/build-cluster`): the agent registered as a real
//! admission webhook, driven through the real kubectl and helm; then the installed suite
//! (`installed`): the chart's pods on a real node. `bash .ci/e2e` runs it (it builds what the
//! suite needs first); one test: `bash .ci/e2e webhook::scale` (a substring of the test name, as
//! for any cargo test). See docs/testing.md.
//!
//! A custom harness (libtest-mimic) so that the shared environments are stopped — every
//! process, every temporary directory, the node's changes to the host — when their tests end,
//! also after a failed test.

#[path = "../support/mod.rs"]
mod support;

mod audit;
mod blame;
mod bypass;
mod chart;
mod controllers;
mod env;
mod events;
mod faults;
mod installed;
mod last_good;
mod memory;
mod plugin;
mod rules;
mod tiers;
mod trust;
mod webhook;
mod who;
mod zeros;

/// A trial named `module::function` (see [`trial_name`]), from a function that panics on failure.
#[macro_export]
macro_rules! trial {
    ($test:path) => {
        libtest_mimic::Trial::test(
            $crate::trial_name(module_path!(), stringify!($test)),
            || {
                $test();
                Ok(())
            },
        )
    };
}

/// `module::function`, the module's path without the crate's name (`webhook::scale`,
/// `installed::webhook::…`).
pub fn trial_name(module: &str, function: &str) -> String {
    let module = module.split_once("::").map_or(module, |(_, path)| path);
    format!("{module}::{function}")
}

fn main() {
    let mut args = libtest_mimic::Arguments::from_args();
    // The tests wait on servers, not on the CPU; a few at a time keep a 2-core machine busy.
    if args.test_threads.is_none() {
        args.test_threads = Some(4);
    }
    let mut tests = Vec::new();
    tests.extend(webhook::tests());
    tests.extend(blame::tests());
    tests.extend(audit::tests());
    tests.extend(bypass::tests());
    tests.extend(events::tests());
    tests.extend(who::tests());
    tests.extend(rules::tests());
    tests.extend(controllers::tests());
    tests.extend(plugin::tests());
    tests.extend(faults::tests());
    tests.extend(last_good::tests());
    tests.extend(memory::tests());
    tests.extend(chart::tests());
    tests.extend(tiers::tests());
    tests.extend(trust::tests());
    tests.extend(zeros::tests());
    let conclusion = libtest_mimic::run(&args, tests);
    env::teardown();

    // The installed suite, one test at a time, once the agent beside the API server is gone.
    let installed_args = libtest_mimic::Arguments {
        test_threads: Some(1),
        ..args
    };
    let installed = libtest_mimic::run(&installed_args, installed::tests());
    let host_changed = installed::teardown();
    if !host_changed.is_empty() {
        eprintln!(
            "the test node left the host changed:\n  {}",
            host_changed.join("\n  ")
        );
    }
    if conclusion.has_failed() || installed.has_failed() || !host_changed.is_empty() {
        std::process::exit(101);
    }
}
