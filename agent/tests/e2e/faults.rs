//! The control plane failing under a running agent, each in an environment of its own: the API
//! server restarted, etcd compacted (a resumed watch gets `410 Gone`), etcd stopped. The rules
//! stay intact, and changes made after the fault are picked up.

use std::time::Duration;

use libtest_mimic::Trial;

use crate::env::{Env, EnvOptions, deployment, stderr, wait_for};
use crate::trial;

pub fn tests() -> Vec<Trial> {
    vec![
        trial!(api_server_restart_and_etcd_compaction),
        trial!(etcd_stopped_and_started),
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
