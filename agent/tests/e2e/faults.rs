//! The control plane failing under a running agent, each in an environment of its own: the API
//! server restarted, etcd compacted (a resumed watch gets `410 Gone`), etcd stopped. The rules
//! stay intact, and changes made after the fault are picked up; after an outage of the API
//! server, within 10 s of its return (SPEC §6: capped backoff, failures logged and counted).

use std::time::{Duration, Instant};

use libtest_mimic::Trial;

use crate::env::{Env, EnvOptions, deployment, stderr, wait_for};
use crate::trial;

pub fn tests() -> Vec<Trial> {
    vec![
        trial!(api_server_restart_and_etcd_compaction),
        trial!(etcd_stopped_and_started),
        trial!(api_server_down_for_15_seconds),
    ]
}

fn rule(ns: &str, mutable: &str) -> String {
    format!(
        "mode: enforce\npriority: 10\nnamespaces: [{ns}]\nselectors: [{{apiGroup: apps, kind: Deployment}}]\nmutable: [{mutable}]\n"
    )
}

/// Waits until a dry run of `manifest` is allowed (`allowed`) or denied naming `needle`.
fn wait_verdict(
    env: &Env,
    what: &str,
    manifest: &str,
    allowed: bool,
    needle: &str,
    limit: Duration,
) {
    wait_for(what, limit, || {
        let output = env.kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], manifest);
        output.status.success() == allowed && stderr(&output).contains(needle)
    });
}

fn api_server_restart_and_etcd_compaction() {
    let mut env = Env::start(EnvOptions::default());
    let ns = env.namespace("e2e-fault", &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    let scaled = deployment(&ns, "web", 3, "nginx:1.0");
    env.rule(
        "e2e-fault",
        &rule(&ns, "'spec.template.spec.containers[*].image'"),
    );
    wait_verdict(
        &env,
        "the rule",
        &scaled,
        false,
        "rule drift-system/e2e-fault",
        Duration::from_secs(30),
    );

    // Restarted: the rule is intact, and a change made afterwards takes effect.
    env.cluster.restart_apiserver();
    wait_verdict(
        &env,
        "the rule after the restart",
        &scaled,
        false,
        "rule drift-system/e2e-fault",
        Duration::from_secs(30),
    );
    env.rule(
        "e2e-fault",
        &rule(&ns, "'spec.replicas', 'metadata.annotations'"),
    );
    wait_verdict(
        &env,
        "a change after the restart",
        &scaled,
        true,
        "",
        Duration::from_secs(60),
    );

    // Compacted, then restarted (an empty watch cache): the agent's watches resume from a
    // resourceVersion that is gone, get 410 and relist.
    for i in 0..20 {
        env.apply(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: churn-{i}\n  namespace: {ns}\n"
        ));
    }
    env.cluster.compact_etcd();
    env.cluster.restart_apiserver();
    wait_verdict(
        &env,
        "the rule after the compaction",
        &scaled,
        true,
        "",
        Duration::from_secs(30),
    );
    env.rule(
        "e2e-fault",
        &rule(&ns, "'spec.template.spec.containers[*].image'"),
    );
    wait_verdict(
        &env,
        "a change after the compaction",
        &scaled,
        false,
        "rule drift-system/e2e-fault",
        Duration::from_secs(60),
    );
    let logs = env.agent.logs().join("\n");
    assert!(
        logs.contains("WARN") || logs.contains("\"level\":\"WARN\""),
        "the watch failures were not logged:\n{logs}"
    );
}

fn etcd_stopped_and_started() {
    let mut env = Env::start(EnvOptions::default());
    let ns = env.namespace("e2e-etcd", &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    let scaled = deployment(&ns, "web", 3, "nginx:1.0");
    env.rule(
        "e2e-etcd",
        &rule(&ns, "'spec.template.spec.containers[*].image'"),
    );
    wait_verdict(
        &env,
        "the rule",
        &scaled,
        false,
        "rule drift-system/e2e-etcd",
        Duration::from_secs(30),
    );

    env.cluster.stop_etcd();
    std::thread::sleep(Duration::from_secs(5));
    env.cluster.start_etcd();
    wait_verdict(
        &env,
        "the rule after etcd is back",
        &scaled,
        false,
        "rule drift-system/e2e-etcd",
        Duration::from_secs(60),
    );
    env.rule(
        "e2e-etcd",
        &rule(&ns, "'spec.replicas', 'metadata.annotations'"),
    );
    wait_verdict(
        &env,
        "a change after etcd is back",
        &scaled,
        true,
        "",
        Duration::from_secs(60),
    );
}

/// The API server killed for 15 s: each watch failure is logged (a WARN within 10 s of the
/// stop) and counted, and a rule change made once the server is back is enforced within 10 s.
fn api_server_down_for_15_seconds() {
    let mut env = Env::start(EnvOptions::default());
    let ns = env.namespace("e2e-outage", &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    let scaled = deployment(&ns, "web", 3, "nginx:1.0");
    env.rule(
        "e2e-outage",
        &rule(&ns, "'spec.replicas', 'metadata.annotations'"),
    );
    wait_verdict(
        &env,
        "the rule allowing replicas",
        &scaled,
        true,
        "",
        Duration::from_secs(30),
    );
    let failures_before = env.metric_sum("drift_sentinel_watch_failures_total");
    let logged_before = env.agent.logs().len();

    let stopped = Instant::now();
    env.cluster.stop_apiserver();
    wait_for("a WARN about the watches", Duration::from_secs(10), || {
        env.agent.logs()[logged_before..]
            .iter()
            .any(|l| l.contains("\"level\":\"WARN\"") && l.contains("watch failed"))
    });
    let warned = stopped.elapsed();
    // The outage itself: nothing to poll while the server is down.
    std::thread::sleep(Duration::from_secs(15).saturating_sub(stopped.elapsed()));
    env.cluster.start_apiserver();
    let back = Instant::now();
    let failures = env.metric_sum("drift_sentinel_watch_failures_total");
    assert!(
        failures > failures_before,
        "watch failures not counted: {failures_before} before, {failures} after"
    );
    let warn_lines = env.agent.logs()[logged_before..]
        .iter()
        .filter(|l| l.contains("watch failed"))
        .count();

    env.rule(
        "e2e-outage",
        &rule(&ns, "'spec.template.spec.containers[*].image'"),
    );
    let applied = back.elapsed();
    wait_verdict(
        &env,
        "the rule change after the outage",
        &scaled,
        false,
        "rule drift-system/e2e-outage",
        Duration::from_secs(10).saturating_sub(applied),
    );
    eprintln!(
        "outage of {:?}: first WARN after {warned:?}; {warn_lines} WARN lines for {} failures; \
         rule change applied {applied:?} after the server was back, enforced after {:?}",
        back - stopped,
        failures - failures_before,
        back.elapsed()
    );
}
