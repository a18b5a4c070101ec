//! Last good version kept (reference §2): a valid rule made invalid behind the (absent) rule
//! webhook's back keeps being enforced in its last valid version — with the agent running, and
//! after the agent is restarted, from the ConfigMap of last good versions — while it is shown
//! stale and its InvalidRule Event is emitted; deleting it removes it. A tenant's large valid
//! rules, together past the 1 MiB a ConfigMap holds, never stop the cluster rules' last good
//! versions from being kept: what does not fit is left out, with an Event, a WARN and a gauge,
//! and nothing is retried. Each in its own environment: the ConfigMap and the Role letting the
//! agent get/patch it exist before the agent starts.

use std::time::Duration;

use libtest_mimic::Trial;
use serde_json::Value;

use crate::env::{AGENT_NAMESPACE, Env, EnvOptions, RELEASE, deployment, stderr, wait_for};
use crate::trial;

pub fn tests() -> Vec<Trial> {
    vec![
        trial!(an_invalid_version_keeps_the_last_good_one_across_a_restart),
        trial!(a_tenants_large_rules_never_crowd_out_the_cluster_rules),
    ]
}

const LAST_GOOD: &str = "drift-sentinel-last-good-rules";

/// The ConfigMap and the least RBAC for it: get and patch, by name.
fn last_good_manifests() -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {LAST_GOOD}\n  namespace: {AGENT_NAMESPACE}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: drift-sentinel-last-good\n  namespace: {AGENT_NAMESPACE}\nrules:\n  - apiGroups: [\"\"]\n    resources: [configmaps]\n    resourceNames: [{LAST_GOOD}]\n    verbs: [get, patch]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: drift-sentinel-last-good\n  namespace: {AGENT_NAMESPACE}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: drift-sentinel-last-good\nsubjects:\n  - kind: ServiceAccount\n    name: {RELEASE}\n    namespace: {AGENT_NAMESPACE}\n"
    )
}

fn rule(ns: &str, extra: &str) -> String {
    format!(
        "mode: enforce\npriority: 10\nnamespaces: [{ns}]\nselectors: [{{apiGroup: apps, kind: Deployment}}]\nmutable: ['spec.template.spec.containers[*].image']\n{extra}"
    )
}

/// The verdict of a server-side dry run of `manifest`: (allowed, stderr).
fn dry_run(env: &Env, manifest: &str) -> (bool, String) {
    let output = env.kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], manifest);
    (output.status.success(), stderr(&output))
}

fn kept_version(env: &Env, rule: &str) -> Option<Value> {
    let config_map = env.get(&["configmap", LAST_GOOD, "-n", AGENT_NAMESPACE])?;
    let entry = config_map["data"][format!("{AGENT_NAMESPACE}_{rule}")].as_str()?;
    serde_json::from_str(entry).ok()
}

fn an_invalid_version_keeps_the_last_good_one_across_a_restart() {
    let mut env = Env::start(EnvOptions {
        manifests: vec![last_good_manifests()],
        ..EnvOptions::default()
    });
    let ns = env.namespace("e2e-last-good", &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    let scaled = deployment(&ns, "web", 3, "nginx:1.0");
    let denied_by_rule = |(allowed, err): (bool, String)| {
        !allowed && err.contains("rule drift-system/e2e-last-good")
    };
    env.rule("e2e-last-good", &rule(&ns, ""));
    wait_for("the rule", Duration::from_secs(30), || {
        denied_by_rule(dry_run(&env, &scaled))
    });
    wait_for("the kept version", Duration::from_secs(10), || {
        kept_version(&env, "e2e-last-good").is_some()
    });

    // An invalid version (an unknown key) written past the rule webhook, as when the agent was
    // down (failurePolicy Ignore): the rule webhook is taken out of the configuration first.
    let output = env.kubectl(&[
        "patch",
        "validatingwebhookconfiguration",
        crate::env::RELEASE,
        "--type=json",
        "-p",
        r#"[{"op": "remove", "path": "/webhooks/1"}]"#,
    ]);
    assert!(output.status.success(), "{}", crate::env::stderr(&output));
    env.rule("e2e-last-good", &rule(&ns, "unknownKey: true\n"));
    let status = env.agent.wait_for_status("the stale rule", |s| {
        s["staleRules"].as_array().is_some_and(|r| !r.is_empty())
    });
    let stale = &status["staleRules"][0];
    assert_eq!(stale["rule"], "drift-system/e2e-last-good", "{status:#}");
    assert!(
        stale["reason"]
            .as_str()
            .unwrap_or("")
            .contains("unknownKey"),
        "{stale}"
    );
    assert!(
        denied_by_rule(dry_run(&env, &scaled)),
        "not enforced after the invalid version"
    );
    let kept = kept_version(&env, "e2e-last-good").expect("the kept version");
    assert!(
        !kept["spec"].as_str().unwrap_or("").contains("unknownKey"),
        "{kept}"
    );
    wait_for("the InvalidRule event", Duration::from_secs(30), || {
        let output = env.kubectl(&[
            "get",
            "events",
            "-n",
            AGENT_NAMESPACE,
            "--field-selector",
            "reason=InvalidRule,involvedObject.name=e2e-last-good",
            "-o",
            "json",
        ]);
        let events: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
        events["items"].as_array().is_some_and(|items| {
            items.iter().any(|e| {
                e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("unknownKey"))
            })
        })
    });

    // Restarted: the kept version is enforced from the first sync on.
    env.restart_agent();
    assert!(
        denied_by_rule(dry_run(&env, &scaled)),
        "not enforced after the restart"
    );
    let status = env.agent.status();
    assert_eq!(
        status["staleRules"][0]["rule"], "drift-system/e2e-last-good",
        "{status:#}"
    );
    let metrics = env
        .agent_client()
        .get(format!("{}/metrics", env.agent.base))
        .send()
        .and_then(|r| r.text())
        .expect("/metrics");
    assert!(
        metrics.contains("drift_sentinel_rules_stale 1"),
        "{metrics}"
    );

    // Deleted: the rule goes (the default rule decides again), and so does its kept version.
    let output = env.kubectl(&[
        "delete",
        "configmap",
        "e2e-last-good",
        "-n",
        AGENT_NAMESPACE,
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    wait_for("the default rule", Duration::from_secs(30), || {
        let (allowed, err) = dry_run(&env, &scaled);
        !allowed && err.contains("rule drift-system/drift-sentinel-default-rule")
    });
    wait_for("the kept version removed", Duration::from_secs(10), || {
        kept_version(&env, "e2e-last-good").is_none()
    });
}

/// A valid rule of `namespace` padded with a YAML comment to about `bytes`.
fn padded_rule(namespace: &str, name: &str, bytes: usize) -> String {
    let spec = rule(namespace, &format!("# {}\n", "x".repeat(bytes)));
    crate::support::rule_config_map(namespace, name, &spec)
}

/// The Warning Events of `reason` about ConfigMap `name` in `namespace`.
fn events(env: &Env, namespace: &str, reason: &str, name: &str) -> Vec<Value> {
    let selector = format!("reason={reason},involvedObject.name={name}");
    let output = env.kubectl(&[
        "get",
        "events",
        "-n",
        namespace,
        "--field-selector",
        &selector,
        "-o",
        "json",
    ]);
    let events: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    events["items"].as_array().cloned().unwrap_or_default()
}

fn a_tenants_large_rules_never_crowd_out_the_cluster_rules() {
    let env = Env::start(EnvOptions {
        manifests: vec![last_good_manifests()],
        ..EnvOptions::default()
    });
    let tenant = env.namespace("e2e-tenant", &[]);
    let before = drift_testkit::peak_rss(env.agent.pid());
    // 20 valid namespace rules of 50 to 59.5 KB, each under the 64 KiB a rule may have: 1.1 MB,
    // past what one ConfigMap holds. `create`, not `apply`: a last-applied annotation of that
    // size is refused.
    let sizes: Vec<usize> = (0..20).map(|n| 50_000 + 500 * n).collect();
    for (n, bytes) in sizes.iter().enumerate() {
        let output = env.kubectl_stdin(
            &["create", "-f", "-"],
            &padded_rule(&tenant, &format!("large-{n}"), *bytes),
        );
        assert!(output.status.success(), "{}", stderr(&output));
    }
    env.rule("e2e-cluster", &rule(&tenant, ""));
    wait_for("the cluster rule kept", Duration::from_secs(30), || {
        kept_version(&env, "e2e-cluster").is_some()
    });
    // The cluster rule came last: once it is kept, every tenant rule has been weighed.
    let store = env
        .get(&["configmap", LAST_GOOD, "-n", AGENT_NAMESPACE])
        .expect("the store");
    let data = store["data"].as_object().cloned().unwrap_or_default();
    let is_kept = |n: usize| data.contains_key(&format!("e2e-tenant_large-{n}"));
    // The cluster rules, and of the tenant's the smallest, within half the store.
    let kept = (0..sizes.len()).take_while(|n| is_kept(*n)).count();
    assert!(kept > 0, "no tenant rule kept: {:?}", data.keys());
    assert!(kept < sizes.len(), "every tenant rule kept");
    for n in kept..sizes.len() {
        assert!(!is_kept(n), "large-{n} kept past a smaller one left out");
    }
    let tenant_bytes: usize = data
        .iter()
        .filter(|(k, _)| k.starts_with("e2e-tenant_"))
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    assert!(
        tenant_bytes <= 512_000,
        "the tenant's rules hold {tenant_bytes} bytes, more than half the store"
    );
    let size: usize = data
        .iter()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    assert!(size < 1024 * 1024, "the store holds {size} bytes");
    let left_out = sizes.len() - kept;
    // Each rule left out is told, on its ConfigMap, once.
    for n in kept..sizes.len() {
        let name = format!("large-{n}");
        wait_for("the LastGoodNotKept event", Duration::from_secs(30), || {
            events(&env, &tenant, "LastGoodNotKept", &name)
                .iter()
                .any(|e| {
                    e["message"].as_str().is_some_and(|m| {
                        m.contains(
                            "is not kept in ConfigMap drift-system/drift-sentinel-last-good-rules",
                        )
                    })
                })
        });
    }
    assert_eq!(
        env.metric_sum("drift_sentinel_last_good_not_kept"),
        left_out as f64
    );
    // Nothing was refused, nothing is retried.
    assert_eq!(
        env.metric_sum("drift_sentinel_last_good_refused_total"),
        0.0
    );
    let logs = env.agent.logs();
    assert!(
        !logs
            .iter()
            .any(|l| l.contains("cannot write the last good rule versions")),
        "a retry: {logs:#?}"
    );
    let warned = logs
        .iter()
        .filter(|l| l.contains("is not kept in ConfigMap"))
        .count();
    assert_eq!(warned, left_out, "{logs:#?}");
    let rise = drift_testkit::peak_rss(env.agent.pid()).saturating_sub(before);
    eprintln!(
        "1.1 MB of tenant rules: the agent's peak memory +{} KiB",
        rise / 1024
    );

    // A change of the cluster rule is kept as ever.
    env.rule("e2e-cluster", &rule(&tenant, "exemptUsers: [ci]\n"));
    wait_for(
        "the new cluster version kept",
        Duration::from_secs(30),
        || {
            kept_version(&env, "e2e-cluster")
                .is_some_and(|v| v["spec"].as_str().unwrap_or("").contains("exemptUsers"))
        },
    );
}
