//! reference §2 "Who may write a rule", on the real API server: a tenant who may write ConfigMaps in
//! its namespace cannot switch off or weaken the platform's rules, and its own rules act in its
//! namespace only; `--cluster-rule-namespaces` makes a namespace's rules act as written.

use std::time::Duration;

use libtest_mimic::Trial;

use crate::env::{AGENT_NAMESPACE, Env, EnvOptions, deployment, stderr, wait_for};
use crate::trial;

pub fn tests() -> Vec<Trial> {
    vec![trial!(a_tenant_cannot_switch_off_the_platforms_rules)]
}

fn rule_in(namespace: &str, name: &str, spec: &str) -> String {
    crate::support::rule_config_map(namespace, name, spec)
}

/// A dry run of `manifest`: (allowed, stderr).
fn dry_run(env: &Env, manifest: &str) -> (bool, String) {
    let output = env.kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], manifest);
    (output.status.success(), stderr(&output))
}

fn a_tenant_cannot_switch_off_the_platforms_rules() {
    // No default rule: the platform protects prod-* only, so a tenant's namespace is left to it.
    let mut env = Env::start(EnvOptions {
        values: vec!["defaultRule.enabled=false".into()],
        ..EnvOptions::default()
    });
    for ns in ["prod-shop", "team-a", "team-b"] {
        env.namespace(ns, &[]);
        env.apply(&deployment(ns, "web", 2, "nginx:1.0"));
    }
    env.apply(&rule_in(
        AGENT_NAMESPACE,
        "platform",
        "mode: enforce\nnamespaces: ['prod-*']\nselectors: [{apiGroup: apps, kind: Deployment}]\nmutable: ['spec.template.spec.containers[*].image']\n",
    ));
    let scaled_prod = deployment("prod-shop", "web", 5, "nginx:1.0");
    wait_for("the platform rule", Duration::from_secs(30), || {
        let (ok, err) = dry_run(&env, &scaled_prod);
        !ok && err.contains("rule drift-system/platform")
    });

    // The tenant, who may write ConfigMaps in team-a, tries to switch everything off. The rule
    // webhook admits it with a warning that says what it will really cover.
    let switch_off = rule_in(
        "team-a",
        "switch-off",
        "mode: 'off'\npriority: 100000\nnamespaces: ['*']\nselectors: [{apiGroup: '*', kind: '*'}]\n",
    );
    let output = env.kubectl_stdin(&["apply", "-f", "-"], &switch_off);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("this is a namespace rule"),
        "{}",
        stderr(&output)
    );
    // A tenant's enforce rule for every namespace.
    let output = env.kubectl_stdin(
        &["apply", "-f", "-"],
        &rule_in(
            "team-a",
            "strict",
            "mode: enforce\npriority: 100\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\n",
        ),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    // Wait until the agent has both tenant rules (team-a's strict rule denies there).
    wait_for("the tenant's rules", Duration::from_secs(30), || {
        let status = env.agent.status();
        status["rules"]
            .as_array()
            .is_some_and(|r| r.iter().filter(|r| r["tier"] == "namespace").count() == 2)
    });

    // The platform's protection is unchanged in prod.
    let (ok, err) = dry_run(&env, &scaled_prod);
    assert!(!ok && err.contains("rule drift-system/platform"), "{err}");
    // The tenant's enforce rule acts in its own namespace (its switch-off rule, higher, wins
    // there: both are the tenant's own) and nowhere else.
    let (ok, err) = dry_run(&env, &deployment("team-a", "web", 5, "nginx:1.0"));
    assert!(ok, "team-a: {err}");
    let (ok, err) = dry_run(&env, &deployment("team-b", "web", 5, "nginx:1.0"));
    assert!(ok && !err.contains("team-a"), "team-b: {err}");
    let output = env.kubectl(&["delete", "configmap", "switch-off", "-n", "team-a"]);
    assert!(output.status.success(), "{}", stderr(&output));
    wait_for(
        "the tenant's enforce rule in team-a",
        Duration::from_secs(30),
        || {
            let (ok, err) = dry_run(&env, &deployment("team-a", "web", 5, "nginx:1.0"));
            !ok && err.contains("rule team-a/strict")
        },
    );
    let (ok, err) = dry_run(&env, &deployment("team-b", "web", 5, "nginx:1.0"));
    assert!(ok, "team-b is not the tenant's: {err}");

    // Listed as a cluster rule namespace, team-a's rules act as written: its enforce rule for
    // every namespace now denies in team-b too.
    env.restart_agent_with(&[
        "--cluster-rule-namespaces",
        &format!("{AGENT_NAMESPACE},team-a"),
    ]);
    wait_for(
        "team-a's rule as a cluster rule",
        Duration::from_secs(30),
        || {
            let (ok, err) = dry_run(&env, &deployment("team-b", "web", 5, "nginx:1.0"));
            !ok && err.contains("rule team-a/strict")
        },
    );
}
