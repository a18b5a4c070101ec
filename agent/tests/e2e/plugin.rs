//! `kubectl drift` as a kubectl plugin against the real API server, through the real kubectl:
//! `explain`, `preview -f`, and `preview --server-dry-run`, where the real webhook answers;
//! a team namespace's rule shown as the namespace rule the agent applies.

use std::process::{Command, Output};

use libtest_mimic::Trial;
use serde_json::Value;

use std::time::Duration;

use crate::env::{AGENT_NAMESPACE, Env, deployment, shared, stderr, stdout, wait_for};
use crate::trial;

pub fn tests() -> Vec<Trial> {
    vec![
        trial!(explain_names_the_winning_rule),
        trial!(preview_and_server_dry_run_agree_with_the_webhook),
        trial!(explain_shows_a_team_rule_as_a_namespace_rule),
    ]
}

/// `kubectl drift ARGS` with the plugin on PATH and the admin kubeconfig in KUBECONFIG, as a
/// user runs it; the agent's namespace is the chart's release namespace here (no agent pod
/// runs: the agent beside the API server is registered by URL, so the plugin takes the agent's
/// default tiers, its own namespace's rules the cluster rules).
pub fn kubectl_drift(env: &Env, args: &[&str]) -> Output {
    let mut with_agent = args.to_vec();
    with_agent.extend(["--agent-namespace", AGENT_NAMESPACE]);
    kubectl_drift_as_given(env, &with_agent)
}

fn kubectl_drift_as_given(env: &Env, args: &[&str]) -> Output {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![crate::env::binaries()];
    dirs.extend(std::env::split_paths(&path));
    Command::new(drift_testkit::cluster::kubectl_path())
        .arg("drift")
        .args(args)
        .env("PATH", std::env::join_paths(dirs).expect("PATH"))
        .env("KUBECONFIG", env.cluster.admin_kubeconfig())
        .env("NO_COLOR", "1")
        .output()
        .expect("run kubectl drift")
}

fn explain_names_the_winning_rule() {
    let env = shared();
    let ns = env.namespace("e2e-explain", &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    let output = kubectl_drift(&env, &["explain", "deploy/web", "-n", &ns, "-o", "json"]);
    crate::env::assert_exit(&output, 0);
    let document: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let text = document.to_string();
    assert!(
        text.contains("drift-system/drift-sentinel-default-rule"),
        "{document:#}"
    );
    let output = kubectl_drift(&env, &["explain", "deploy/web", "-n", &ns]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("drift-sentinel-default-rule"),
        "{}",
        stdout(&output)
    );

    // Without --agent-namespace the plugin finds the agent where the webhook points: the chart
    // registers it by URL here, so by the Helm release's namespace.
    let output = kubectl_drift_as_given(&env, &["explain", "deploy/web", "-n", &ns]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("drift-system/drift-sentinel-default-rule (cluster rule)"),
        "{}",
        stdout(&output)
    );
    assert!(
        stderr(&output).contains("its namespace \"drift-system\""),
        "{}",
        stderr(&output)
    );

    let output = kubectl_drift(&env, &["explain", "nosuchkind/web", "-n", &ns]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("the server doesn't have a resource type \"nosuchkind\""),
        "{}",
        stderr(&output)
    );
}

fn preview_and_server_dry_run_agree_with_the_webhook() {
    let env = shared();
    let ns = env.namespace("e2e-preview", &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    let dir = tempfile::tempdir().expect("dir");
    let scaled = dir.path().join("scaled.yaml");
    std::fs::write(&scaled, deployment(&ns, "web", 5, "nginx:1.0")).expect("write");
    let image = dir.path().join("image.yaml");
    std::fs::write(&image, deployment(&ns, "web", 2, "nginx:1.1")).expect("write");
    let (scaled, image) = (scaled.to_str().unwrap(), image.to_str().unwrap());

    let output = kubectl_drift(&env, &["preview", "-f", scaled]);
    crate::env::assert_exit(&output, 1);
    assert!(
        stdout(&output).contains("spec.replicas"),
        "{}",
        stdout(&output)
    );

    let output = kubectl_drift(&env, &["preview", "-f", scaled, "--server-dry-run"]);
    crate::env::assert_exit(&output, 1);
    let screen = stdout(&output);
    assert!(screen.contains("They agree."), "{screen}");
    assert!(
        screen.contains(
            "Drift Sentinel: immutable fields changed: spec.replicas; spec.replicas: 2 → 5"
        ),
        "the real webhook's answer is shown: {screen}"
    );
    let output = kubectl_drift(&env, &["preview", "-f", image, "--server-dry-run"]);
    crate::env::assert_exit(&output, 0);
    assert!(
        stdout(&output).contains("They agree."),
        "{}",
        stdout(&output)
    );

    // Nothing was stored by the dry runs.
    let live = env.get(&["deployment", "web", "-n", &ns]).expect("web");
    assert_eq!(live["spec"]["replicas"], 2);
}

/// reference §2 "Who may write a rule": a rule ConfigMap in a team namespace, priority 100000 and
/// every namespace, is a namespace rule for the agent; `kubectl drift explain` against the
/// cluster shows it as one (the platform's default rule wins), and `preview --server-dry-run`
/// agrees with the real webhook.
fn explain_shows_a_team_rule_as_a_namespace_rule() {
    let env = shared();
    let ns = env.namespace("e2e-team-rule", &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    let output = env.kubectl_stdin(
        &["apply", "-f", "-"],
        &crate::support::rule_config_map(
            &ns,
            "team-off",
            "mode: 'off'\npriority: 100000\nnamespaces: ['*']\nselectors: [{apiGroup: '*', kind: '*'}]\n",
        ),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let rule = format!("{ns}/team-off");
    wait_for("the team's rule", Duration::from_secs(30), || {
        env.agent.status()["rules"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["rule"] == rule.as_str()))
    });
    assert_eq!(
        env.agent.status()["clusterRuleNamespaces"],
        serde_json::json!([AGENT_NAMESPACE])
    );

    let output = kubectl_drift(&env, &["explain", "deploy/web", "-n", &ns, "-o", "json"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let document: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(
        document["winner"], "drift-system/drift-sentinel-default-rule",
        "{document:#}"
    );
    let team = document["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"] == rule.as_str())
        .unwrap_or_else(|| panic!("{document:#}"));
    assert_eq!(team["tier"], "namespace", "{document:#}");
    assert_eq!(team["winner"], false, "{document:#}");
    let output = kubectl_drift(&env, &["explain", "deploy/web", "-n", &ns]);
    let screen = stdout(&output);
    assert!(
        screen.contains("Winner:  drift-system/drift-sentinel-default-rule (cluster rule)"),
        "{screen}"
    );
    assert!(
        screen.lines().any(|l| l.contains(&rule)
            && l.contains("namespace rule")
            && l.contains("a namespace rule, and a cluster rule matches")),
        "{screen}"
    );
    // No agent pod to ask: the default is said on stderr.
    assert!(
        stderr(&output).contains("assuming the agent's default"),
        "{}",
        stderr(&output)
    );

    // The replicas edit: the agent denies it (the default rule), and so does kubectl drift.
    let dir = tempfile::tempdir().expect("dir");
    let scaled = dir.path().join("scaled.yaml");
    std::fs::write(&scaled, deployment(&ns, "web", 5, "nginx:1.0")).expect("write");
    let output = kubectl_drift(
        &env,
        &[
            "preview",
            "-f",
            scaled.to_str().unwrap(),
            "--server-dry-run",
        ],
    );
    let screen = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{screen}{}", stderr(&output));
    assert!(screen.contains("They agree."), "{screen}");

    // Told every rule is a cluster rule, the plugin would let the team's rule win, and the real
    // webhook disagrees (exit 2): what the plugin did before it took the agent's tiers.
    let output = kubectl_drift_as_given(
        &env,
        &[
            "preview",
            "-f",
            scaled.to_str().unwrap(),
            "--server-dry-run",
            "--cluster-rule-namespaces",
            "*",
        ],
    );
    assert_eq!(output.status.code(), Some(2), "{}", stdout(&output));
    assert!(
        stdout(&output).contains("They DISAGREE."),
        "{}",
        stdout(&output)
    );
    let output = env.kubectl(&["delete", "configmap", "team-off", "-n", &ns]);
    assert!(output.status.success(), "{}", stderr(&output));
}
