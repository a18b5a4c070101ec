//! The installed suite: the chart installed as docs/install.md tells users, its pods running the
//! project's image on a real node (`drift_testkit::node`), the webhook called through its
//! Service, the plugin through real port-forwarding, and the disruptions operators cause every
//! week under traffic. Its tests run one at a time, after the URL-registered suite (one node per
//! machine; the disruption tests measure), in one shared environment; when they are done the
//! node is torn down and the run fails if the host is not as it was found.

mod disruptions;
mod env;
mod plugin;
mod traffic;
mod webhook;

pub use env::teardown;

pub fn tests() -> Vec<libtest_mimic::Trial> {
    let mut tests = webhook::tests();
    tests.extend(plugin::tests());
    tests.extend(disruptions::tests());
    tests
}
