//! Rules and namespace modes managed with kubectl take effect; an invalid rule is reported as a
//! Warning Event; two agents keep each other's Connection status entries through the real API
//! server's server-side apply.

use std::time::Duration;

use libtest_mimic::Trial;
use serde_json::Value;

use crate::env::{AGENT_NAMESPACE, deployment, shared, stderr, wait_for, wait_for_dry_run};
use crate::support::{Agent, plain_client, post};
use crate::trial;

pub fn tests() -> Vec<Trial> {
    vec![
        trial!(rules_created_changed_broken_and_deleted_take_effect),
        trial!(namespace_modes_take_effect),
        trial!(two_agents_keep_each_others_connection_status),
        trial!(a_tenants_aliased_rule_is_refused_at_apply_with_memory_flat),
    ]
}

fn rule(ns: &str, mutable: &str) -> String {
    format!(
        "mode: enforce\npriority: 10\nnamespaces: [{ns}]\nselectors: [{{apiGroup: apps, kind: Deployment}}]\nmutable: [{mutable}]\n"
    )
}

fn rules_created_changed_broken_and_deleted_take_effect() {
    let env = shared();
    let ns = env.namespace("e2e-rules", &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    let scaled = deployment(&ns, "web", 3, "nginx:1.0");

    // Created: replicas become mutable here (the default rule would deny them).
    env.rule(
        "e2e-rules",
        &rule(&ns, "'spec.replicas', 'metadata.annotations'"),
    );
    wait_for_dry_run(&env, "the new rule", &scaled, |ok, _| ok);

    // Changed: only images again; the denial names this rule.
    env.rule(
        "e2e-rules",
        &rule(&ns, "'spec.template.spec.containers[*].image'"),
    );
    wait_for_dry_run(&env, "the changed rule", &scaled, |ok, err| {
        !ok && err.contains("rule drift-system/e2e-rules allows changes only to: spec.template.spec.containers[*].image;")
    });

    // Broken: refused by the rule webhook at apply time, with the line and column in
    // kubectl's output, and nothing stored (reference §2 "A typo never opens a hole").
    let broken = crate::support::rule_config_map(
        AGENT_NAMESPACE,
        "e2e-rules",
        "mode: enforce\nnamespaces: [e2e-rules]\nselectors: [{apiGroup: apps, kind: Deployment}]\nmutabel: [spec.replicas]\n",
    );
    let output = env.kubectl_stdin(&["apply", "-f", "-"], &broken);
    assert!(!output.status.success(), "a broken rule was stored");
    let printed = stderr(&output);
    assert!(
        printed.contains("admission webhook \"rules.drift-sentinel.k8s.io\" denied the request")
            && printed.contains("data.spec line 4 column 1")
            && printed.contains("mutabel"),
        "{printed}"
    );
    let stored = env
        .get(&["configmap", "e2e-rules", "-n", AGENT_NAMESPACE])
        .expect("the rule");
    assert!(
        !stored["data"]["spec"]
            .as_str()
            .unwrap_or("")
            .contains("mutabel")
    );
    wait_for_dry_run(&env, "the rule still in force", &scaled, |ok, err| {
        !ok && err.contains("rule drift-system/e2e-rules")
    });

    // A valid rule with a likely mistake is admitted with a warning naming the pattern.
    let misspelt = crate::support::rule_config_map(
        AGENT_NAMESPACE,
        "e2e-rules-typo",
        "mode: enforce\npriority: 5\nnamespaces: [e2e-rules]\nselectors: [{apiGroup: apps, kind: Deployment}]\nmutable: ['spec.template.spec.containerz[*].image']\n",
    );
    let output = env.kubectl_stdin(&["apply", "-f", "-"], &misspelt);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("Warning: Drift Sentinel: rule drift-system/e2e-rules-typo: mutable pattern spec.template.spec.containerz[*].image"),
        "{}",
        stderr(&output)
    );
    let output = env.kubectl(&[
        "delete",
        "configmap",
        "e2e-rules-typo",
        "-n",
        AGENT_NAMESPACE,
    ]);
    assert!(output.status.success(), "{}", stderr(&output));

    // Deleted: the default rule decides again.
    let output = env.kubectl(&["delete", "configmap", "e2e-rules", "-n", AGENT_NAMESPACE]);
    assert!(output.status.success(), "{}", stderr(&output));
    wait_for_dry_run(&env, "the default rule", &scaled, |ok, err| {
        !ok && err.contains("rule drift-system/drift-sentinel-default-rule")
    });
}

fn namespace_modes_take_effect() {
    let env = shared();
    let ns = env.namespace("e2e-modes", &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    let scaled = deployment(&ns, "web", 3, "nginx:1.0");
    wait_for_dry_run(&env, "enforce", &scaled, |ok, _| !ok);

    let annotate = |mode: &str| {
        let arg = format!("drift-sentinel.k8s.io/mode={mode}");
        let output = env.kubectl(&["annotate", "namespace", &ns, &arg, "--overwrite"]);
        assert!(output.status.success(), "{}", stderr(&output));
    };
    annotate("dry-run");
    wait_for_dry_run(&env, "dry-run mode", &scaled, |ok, err| {
        ok && !err.contains("Warning")
    });
    annotate("warn");
    wait_for_dry_run(&env, "warn mode", &scaled, |ok, err| {
        ok && err.contains("Warning: Drift Sentinel: immutable fields changed: spec.replicas")
    });
    annotate("bogus");
    wait_for_dry_run(
        &env,
        "an invalid mode: the rule's mode, and a warning",
        &scaled,
        |ok, err| !ok && err.contains("invalid drift-sentinel.k8s.io/mode annotation \"bogus\""),
    );
    let output = env.kubectl(&["annotate", "namespace", &ns, "drift-sentinel.k8s.io/mode-"]);
    assert!(output.status.success(), "{}", stderr(&output));
    wait_for_dry_run(&env, "enforce again", &scaled, |ok, err| {
        !ok && !err.contains("Warning")
    });
}

/// Two more agent processes (not registered as webhooks: reviews are posted to them) share a
/// Connection in the real API server; each writes its own `status.byPod` entry by server-side
/// apply with its own field managers, and neither loses the other's.
fn two_agents_keep_each_others_connection_status() {
    let env = shared();
    let ns = env.namespace("e2e-connection", &[]);
    // Both agents export to one directory here; in a cluster each pod has its own volume.
    let spool = tempfile::tempdir().unwrap();
    let topics = spool.path().join("topics");
    env.apply(&format!(
        "apiVersion: connection.drift-sentinel.io/v1alpha1\nkind: Connection\nmetadata:\n  name: audit-connection\n  namespace: {ns}\nspec:\n  driver: disk\n  config:\n    path: {}\n",
        topics.display()
    ));
    let kubeconfig = env.cluster.admin_kubeconfig().to_str().unwrap().to_owned();
    let start = |pod: &str, cwd: &std::path::Path| {
        Agent::start_in(
            Some(cwd),
            &[
                // The rules are the shared environment's, in the chart's namespace.
                "--cluster-rule-namespaces",
                crate::env::AGENT_NAMESPACE,
                "--kubeconfig",
                &kubeconfig,
                "--enable-admission-violation-export",
                "--pod-name",
                pod,
                "--pod-namespace",
                &ns,
                "--connection-status-interval",
                "300ms",
            ],
            false,
        )
    };
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let agents = [
        start("pod-a", dirs[0].path()),
        start("pod-b", dirs[1].path()),
    ];
    let decide = |agent: &Agent| {
        post(
            &plain_client(),
            &format!("{}/validate", agent.base),
            &crate::support::replicas_review("e2e-shop"),
        )
        .1
    };
    let connection = || {
        env.get(&[
            "connection",
            "audit-connection",
            "-n",
            &ns,
            "--show-managed-fields",
        ])
        .unwrap_or(Value::Null)
    };
    let entry = |connection: &Value, pod: &str| {
        connection["status"]["byPod"]
            .as_array()
            .and_then(|pods| pods.iter().find(|p| p["id"] == pod))
            .cloned()
            .unwrap_or(Value::Null)
    };
    for agent in &agents {
        wait_for("the agent's first sync", Duration::from_secs(30), || {
            decide(agent)["response"]["allowed"] == false
        });
    }
    wait_for(
        "both pods' healthy webhook entries",
        Duration::from_secs(60),
        || {
            for agent in &agents {
                decide(agent);
            }
            let connection = connection();
            let uid = connection["metadata"]["uid"].clone();
            ["pod-a", "pod-b"].iter().all(|pod| {
                let entry = entry(&connection, pod);
                entry["connectionUID"] == uid
                    && entry["publishStatuses"][0]["source"] == "webhook"
                    && entry["publishStatuses"][0]["active"] == true
            })
        },
    );
    let managers: Vec<String> = connection()["metadata"]["managedFields"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter_map(|m| m["manager"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    for manager in [
        "drift-sentinel/pod-a",
        "drift-sentinel/pod-a/webhook",
        "drift-sentinel/pod-b",
        "drift-sentinel/pod-b/webhook",
    ] {
        assert!(
            managers.iter().any(|m| m == manager),
            "{manager} not among {managers:?}"
        );
    }

    // A broken Connection: each pod reports it in its own entry; the webhook entries stay.
    env.apply(&format!(
        "apiVersion: connection.drift-sentinel.io/v1alpha1\nkind: Connection\nmetadata:\n  name: audit-connection\n  namespace: {ns}\nspec:\n  driver: kafka\n  config:\n    path: topics\n"
    ));
    wait_for(
        "both pods' connection errors",
        Duration::from_secs(60),
        || {
            let connection = connection();
            ["pod-a", "pod-b"].iter().all(|pod| {
                let entry = entry(&connection, pod);
                entry["connectionErrors"][0]["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("unknown driver \"kafka\""))
                    && entry["publishStatuses"][0]["source"] == "webhook"
            })
        },
    );
}

/// reference §2, §5 (issue 40): a tenant who may write ConfigMaps in its namespace applies a rule
/// whose 10 KB spec aliases one 4 KiB string 2,000 times (8 MB written out; the agent peaked at
/// 546 MiB reading it). `kubectl apply` fails with the reason naming the alias and the fix,
/// nothing is stored, the agent's peak memory stays flat, and the tenant's next, valid rule is
/// admitted.
fn a_tenants_aliased_rule_is_refused_at_apply_with_memory_flat() {
    let env = shared();
    let ns = env.namespace("e2e-aliases", &[]);
    let tenant = "e2e-alias-tenant";
    env.apply(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: configmaps, namespace: {ns}}}\nrules:\n  - apiGroups: [\"\"]\n    resources: [configmaps]\n    verbs: [get, list, create, patch, update, delete]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: configmaps, namespace: {ns}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: configmaps}}\nsubjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: {tenant}}}]\n"
    ));
    let as_tenant = format!("--as={tenant}");
    let aliased = format!(
        "mode: enforce\nselectors: [{{apiGroup: apps, kind: Deployment}}]\nnamespaces: [&a \"{}\", {}]\n",
        "x".repeat(4096),
        vec!["*a"; 2_000].join(",")
    );
    let manifest = crate::support::rule_config_map(&ns, "aliased", &aliased);
    let before = drift_testkit::peak_rss(env.agent.pid());
    let output = env.kubectl_stdin(&[&as_tenant, "apply", "-f", "-"], &manifest);
    let after = drift_testkit::peak_rss(env.agent.pid());
    assert!(!output.status.success(), "the aliased rule was stored");
    let printed = stderr(&output);
    assert!(
        printed.contains("admission webhook \"rules.drift-sentinel.k8s.io\" denied the request")
            && printed.contains("uses the YAML alias *a")
            && printed.contains("write out the value that its anchor &a marks"),
        "{printed}"
    );
    assert!(
        env.get(&["configmap", "aliased", "-n", &ns]).is_none(),
        "nothing is stored"
    );
    // Flat: far below the 546 MiB the rule took before, with room for the other tests' requests
    // that this shared agent judges meanwhile.
    assert!(
        after.saturating_sub(before) < 16 * 1024 * 1024,
        "peak memory rose from {} to {} MiB",
        before >> 20,
        after >> 20
    );

    // A tag is refused the same way; then the tenant's rule written out is admitted.
    let tagged = crate::support::rule_config_map(
        &ns,
        "tagged",
        &format!(
            "mode: !enforce\nnamespaces: [{ns}]\nselectors: [{{apiGroup: apps, kind: Deployment}}]\n"
        ),
    );
    let output = env.kubectl_stdin(&[&as_tenant, "apply", "-f", "-"], &tagged);
    assert!(!output.status.success(), "the tagged rule was stored");
    assert!(
        stderr(&output).contains("has the YAML tag !enforce"),
        "{}",
        stderr(&output)
    );
    let written_out = crate::support::rule_config_map(
        &ns,
        "aliased",
        &format!(
            "mode: enforce\nnamespaces: [{ns}]\nselectors: [{{apiGroup: apps, kind: Deployment}}]\n"
        ),
    );
    let output = env.kubectl_stdin(&[&as_tenant, "apply", "-f", "-"], &written_out);
    assert!(output.status.success(), "{}", stderr(&output));
    let output = env.kubectl(&["delete", "configmap", "aliased", "-n", &ns]);
    assert!(output.status.success(), "{}", stderr(&output));
}
