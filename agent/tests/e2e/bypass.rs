//! A bypass that ends (reference §3 step 4, §8 step 1, §9) against the real API server: set
//! with `kubectl drift bypass --for`, an edit (`kubectl patch`) allowed with the warning kubectl prints, the
//! same edit denied once the end has passed, the audit reporting the drift made under the
//! bypass and listing the bypasses still active, and `maxBypass` refusing `--for 30d` (and a
//! `maxBypass` that is no duration refused at `kubectl apply`).

use std::process::Command;
use std::time::Duration;

use libtest_mimic::Trial;
use serde_json::Value;

use crate::env::{AGENT_NAMESPACE, deployment, shared, stderr, stdout, wait_for, wait_for_dry_run};
use crate::plugin::kubectl_drift;
use crate::trial;

pub fn tests() -> Vec<Trial> {
    vec![trial!(a_bypass_ends_and_the_audit_finds_what_it_let_in)]
}

const NS: &str = "e2e-bypass";
const RULE: &str = "mode: enforce\npriority: 10\nnamespaces: [e2e-bypass]\nselectors: [{apiGroup: apps, kind: Deployment}]\nmutable: []\nmaxBypass: 72h\n";

/// `kubectl patch` of the replicas of `name` (a server-side dry run when `dry_run`): an edit
/// of the object itself, which a bypass reaches (a `/scale` carries no annotations).
fn scale(env: &crate::env::Env, name: &str, replicas: u32, dry_run: bool) -> std::process::Output {
    let object = format!("deploy/{name}");
    let patch = format!(r#"{{"spec":{{"replicas":{replicas}}}}}"#);
    let mut args = vec!["patch", &object, "-n", NS, "--type=merge", "-p", &patch];
    if dry_run {
        args.push("--dry-run=server");
    }
    env.kubectl(&args)
}

fn a_bypass_ends_and_the_audit_finds_what_it_let_in() {
    let env = shared();
    let ns = env.namespace(NS, &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    env.apply(&deployment(&ns, "held", 2, "nginx:1.0"));
    // A maxBypass that is not a duration is refused at `kubectl apply`, naming the field.
    let bad = crate::support::rule_config_map(
        AGENT_NAMESPACE,
        "e2e-bypass",
        &RULE.replace("72h", "soon"),
    );
    let refused = env.kubectl_stdin(&["apply", "-f", "-"], &bad);
    assert!(
        !refused.status.success(),
        "a rule with maxBypass: soon was stored"
    );
    assert!(
        stderr(&refused).contains("field maxBypass: \"soon\" is not a duration like 72h"),
        "{}",
        stderr(&refused)
    );
    env.rule("e2e-bypass", RULE);
    wait_for_dry_run(
        &env,
        "the capped rule",
        &deployment(&ns, "web", 3, "nginx:1.0"),
        |ok, err| !ok && err.contains("rule drift-system/e2e-bypass allows changes only to: none"),
    );

    // maxBypass refuses a month, naming the rule.
    let refused = kubectl_drift(&env, &["bypass", "deploy/web", "-n", &ns, "--for", "30d"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stdout(&refused));
    assert!(
        stderr(&refused).contains("--for 30d is longer than rule drift-system/e2e-bypass allows for deployments.apps \"web\" in namespace \"e2e-bypass\": its maxBypass is 3d"),
        "{}",
        stderr(&refused)
    );

    // A bypass of three seconds: the edit made within it is allowed, with the warning.
    let set = kubectl_drift(
        &env,
        &[
            "bypass",
            "deploy/web",
            "-n",
            &ns,
            "--for",
            "3s",
            "--reason",
            "INC-7",
            "-o",
            "json",
        ],
    );
    assert_eq!(set.status.code(), Some(0), "{}", stderr(&set));
    let set: Value = serde_json::from_slice(&set.stdout).expect("JSON");
    let end = set["end"].as_str().expect("the end").to_owned();
    assert_eq!(set["rule"], "drift-system/e2e-bypass");
    let scaled = scale(&env, "web", 5, false);
    assert!(scaled.status.success(), "{}", stderr(&scaled));
    assert!(
        stderr(&scaled).contains(&format!("Warning: Drift Sentinel: bypass until {end}, in ")),
        "{}",
        stderr(&scaled)
    );
    let annotations =
        env.get(&["deploy", "web", "-n", &ns]).expect("web")["metadata"]["annotations"].clone();
    assert_eq!(annotations["drift-sentinel.k8s.io/bypass"], end.as_str());
    assert_eq!(annotations["drift-sentinel.k8s.io/bypass-reason"], "INC-7");

    // After the end, the same edit is judged again: denied, the reason saying why.
    wait_for("the bypass to end", Duration::from_secs(30), || {
        let output = scale(&env, "web", 6, true);
        !output.status.success()
            && stderr(&output).contains(&format!(
                "annotation drift-sentinel.k8s.io/bypass is no bypass: its end {end} passed"
            ))
    });

    // A bypass still running, and the list of both.
    let held = kubectl_drift(&env, &["bypass", "deploy/held", "-n", &ns, "--for", "2h"]);
    assert_eq!(held.status.code(), Some(0), "{}", stderr(&held));
    let listed = kubectl_drift(&env, &["bypass", "--list", "-n", &ns, "-o", "json"]);
    assert_eq!(listed.status.code(), Some(0), "{}", stderr(&listed));
    let listed: Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    let state = |name: &str| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["name"] == name)
            .map(|b| (b["state"].clone(), b["setBy"].clone()))
    };
    assert_eq!(
        state("held"),
        Some(("active".into(), "kubectl-drift".into())),
        "{listed:#}"
    );
    assert_eq!(
        state("web"),
        Some(("expired".into(), "kubectl-drift".into())),
        "{listed:#}"
    );

    // The audit: the drift made under the ended bypass is reported; both bypasses are listed.
    let auditing = crate::env::auditing();
    let audit = Command::new(env!("CARGO_BIN_EXE_drift-sentinel"))
        .args(["audit", "--once", "--audit-reports", "none", "--kubeconfig"])
        .arg(env.cluster.admin_kubeconfig())
        .arg("--record-signing-key")
        .arg(env.record_key())
        .args(["--pod-namespace", AGENT_NAMESPACE])
        .output()
        .expect("run drift-sentinel audit");
    drop(auditing);
    let printed = stdout(&audit);
    for line in [
        "drifted apps/v1 Deployment e2e-bypass/web (rule drift-system/e2e-bypass, enforce)\n  spec.replicas: 2 → 5 (by kubectl-patch at".to_owned(),
        format!("bypass apps/v1 Deployment e2e-bypass/web (rule drift-system/e2e-bypass): no bypass: its end {end} has passed"),
        "bypass apps/v1 Deployment e2e-bypass/held (rule drift-system/e2e-bypass): bypass until ".to_owned(),
    ] {
        assert!(printed.contains(&line), "{line}\nnot in\n{printed}{}", stderr(&audit));
    }
    assert!(
        !printed.contains("drifted apps/v1 Deployment e2e-bypass/held"),
        "{printed}"
    );

    // Cleared: edits of held are judged again at once.
    let cleared = kubectl_drift(&env, &["bypass", "deploy/held", "-n", &ns, "--clear"]);
    assert_eq!(cleared.status.code(), Some(0), "{}", stderr(&cleared));
    assert!(
        stdout(&cleared).contains("bypass cleared"),
        "{}",
        stdout(&cleared)
    );
    let output = scale(&env, "held", 4, true);
    assert!(!output.status.success(), "{}", stderr(&output));
}
