//! The audit's "who and why" (reference §8 "Who and why") on the real API server, beyond the
//! warned edit of `events`: an edit the webhook's namespaceSelector leaves out is "outside what
//! the webhook intercepts", naming the selector; an edit made while the webhook was unreachable
//! (failurePolicy Ignore) is "the webhook did not see this edit"; the bypass listing names the
//! user who set the bypass; with `--events=false` the audit writes no `DriftDetected` Event.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use libtest_mimic::Trial;
use serde_json::Value;

use crate::env::{
    AGENT_NAMESPACE, Env, EnvOptions, RELEASE, deployment, shared, stderr, stdout, wait_for,
};
use crate::events::{events, patch_as, replicas, ruled};
use crate::trial;

pub fn tests() -> Vec<Trial> {
    vec![
        trial!(an_edit_outside_the_webhooks_namespace_selector_is_told_so),
        trial!(an_edit_the_unreachable_webhook_let_through_was_not_seen),
        trial!(the_bypass_listing_names_the_user_who_set_the_bypass),
        trial!(with_events_off_the_audit_writes_no_drift_detected_event),
    ]
}

fn warn_rule(ns: &str) -> String {
    format!(
        "mode: warn\npriority: 10\nnamespaces: [{ns}]\nselectors: [{{apiGroup: apps, kind: Deployment}}]\nmutable: []\n"
    )
}

fn enforce_rule(ns: &str) -> String {
    warn_rule(ns).replace("mode: warn", "mode: enforce")
}

/// `drift-sentinel audit --once` as `pod` against the cluster, reading the chart's webhook
/// configuration, with `extra` flags.
pub fn audit_once(env: &Env, pod: &str, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_drift-sentinel"))
        .args(["audit", "--once", "--kubeconfig"])
        .arg(env.cluster.admin_kubeconfig())
        .args(["--pod-namespace", AGENT_NAMESPACE, "--pod-name", pod])
        .args([
            "--audit-reports",
            "none",
            "--webhook-configuration",
            RELEASE,
        ])
        .args(extra)
        .output()
        .expect("run drift-sentinel audit")
}

/// The lines an audit printed about one drifted object: its `drifted KIND NS/NAME …` line and
/// the indented lines under it (its fields and their `who:`), up to the next object.
pub fn drifted_block(printed: &str, kind: &str, ns: &str, name: &str) -> String {
    let header = format!("drifted apps/v1 {kind} {ns}/{name} ");
    let mut lines = printed.lines().skip_while(|l| !l.starts_with(&header));
    let Some(first) = lines.next() else {
        return String::new();
    };
    let mut block = format!("{first}\n");
    for line in lines.take_while(|l| l.starts_with("  ")) {
        block.push_str(line);
        block.push('\n');
    }
    block
}

fn an_edit_outside_the_webhooks_namespace_selector_is_told_so() {
    let env = shared();
    let ns = env.namespace("e2e-who-outside", &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    env.apply(&deployment(&ns, "probe", 1, "nginx:1.0"));
    ruled(&env, "e2e-who-outside", &warn_rule(&ns), &ns, |ok, err| {
        ok && err.contains("rule drift-system/e2e-who-outside")
    });
    // The chart's namespaceSelector opts a namespace out with this label.
    let labelled = env.kubectl(&[
        "label",
        "namespace",
        &ns,
        "drift-sentinel.k8s.io/enabled=false",
    ]);
    assert!(labelled.status.success(), "{}", stderr(&labelled));
    wait_for(
        "the API server to stop sending the namespace's edits to the webhook",
        Duration::from_secs(30),
        || {
            let dry = env.kubectl(&[
                "patch",
                "deploy/probe",
                "-n",
                &ns,
                "--dry-run=server",
                "--type=merge",
                "-p",
                &replicas(7),
            ]);
            dry.status.success() && !stderr(&dry).contains("rule drift-system/e2e-who-outside")
        },
    );
    let edited = patch_as(&env, &ns, "web", "alice", &replicas(5));
    assert!(edited.status.success(), "{}", stderr(&edited));

    let audit = audit_once(&env, "e2e-audit-outside", &[]);
    let printed = stdout(&audit);
    assert_eq!(audit.status.code(), Some(1), "{printed}{}", stderr(&audit));
    let block = drifted_block(&printed, "Deployment", &ns, "web");
    assert!(
        block.contains(&format!(
            "  who: spec.replicas: user unknown: outside what the webhook intercepts: webhook validate.drift-sentinel.k8s.io: its namespaceSelector does not select namespace {ns}\n"
        )),
        "{block}\nin\n{printed}"
    );
    assert!(!block.contains("alice"), "{block}");
}

/// A periodic audit (its records are read from its first run on) as `pod`, every 2 s; stopped
/// when dropped.
struct PeriodicAudit {
    child: std::process::Child,
    admin: String,
}

impl PeriodicAudit {
    fn start(env: &Env, pod: &str) -> Self {
        let admin_port = drift_testkit::free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_drift-sentinel"))
            .args(["audit", "--audit-interval", "2s", "--kubeconfig"])
            .arg(env.cluster.admin_kubeconfig())
            .args(["--pod-namespace", AGENT_NAMESPACE, "--pod-name", pod])
            .args([
                "--audit-reports",
                "none",
                "--webhook-configuration",
                RELEASE,
            ])
            .args([
                "--address",
                &format!("127.0.0.1:{}", drift_testkit::free_port()),
            ])
            .args(["--admin-address", &format!("127.0.0.1:{admin_port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start drift-sentinel audit");
        Self {
            child,
            admin: format!("http://127.0.0.1:{admin_port}"),
        }
    }

    /// Waits for a run that completed.
    fn wait_for_a_run(&self) {
        let client = reqwest::blocking::Client::new();
        wait_for("a completed audit run", Duration::from_secs(60), || {
            client
                .get(format!("{}/status", self.admin))
                .send()
                .and_then(|r| r.json::<Value>())
                .is_ok_and(|status| status.get("audit").is_some_and(|a| !a.is_null()))
        });
    }
}

impl Drop for PeriodicAudit {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reference §8 "Who and why": an edit made after the audit began reading the webhook's records,
/// with no record of it, was not seen by the webhook — here it was unreachable and its
/// failurePolicy Ignore let the edit through. An environment of its own: the webhook goes away.
fn an_edit_the_unreachable_webhook_let_through_was_not_seen() {
    let mut env = Env::start(EnvOptions {
        values: vec!["webhook.failurePolicy=Ignore".to_owned()],
        ..EnvOptions::default()
    });
    let ns = env.namespace("e2e-who-unseen", &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    env.apply(&deployment(&ns, "probe", 1, "nginx:1.0"));
    ruled(
        &env,
        "e2e-who-unseen",
        &enforce_rule(&ns),
        &ns,
        |ok, err| !ok && err.contains("rule drift-system/e2e-who-unseen"),
    );
    let audit = PeriodicAudit::start(&env, "e2e-audit-unseen");
    audit.wait_for_a_run();
    // managedFields times are whole seconds: the edit comes a second after the first read.
    std::thread::sleep(Duration::from_millis(1500));

    // The webhook goes away; failurePolicy Ignore lets the edit the rule would deny through.
    env.agent.signal("TERM");
    assert!(
        env.agent.wait_exit(Duration::from_secs(15)).is_some(),
        "the agent did not stop"
    );
    let edited = patch_as(&env, &ns, "web", "alice", &replicas(5));
    assert!(edited.status.success(), "{}", stderr(&edited));

    // Once its record would have been written (a grace of 30 s), the audit says it was not seen.
    let mut found = Vec::new();
    wait_for(
        "the DriftDetected Event saying the webhook did not see the edit",
        Duration::from_secs(120),
        || {
            found = events(&env, &ns, "Deployment", "web", "DriftDetected");
            found.retain(|e| {
                e["reportingInstance"] == "e2e-audit-unseen"
                    && e["note"].as_str().is_some_and(|n| {
                        n.contains("spec.replicas: 2 → 5 (by kubectl-patch at ")
                            && n.contains("user unknown: the webhook did not see this edit")
                    })
            });
            !found.is_empty()
        },
    );
    // Never a guess: no Event of this audit names alice.
    let named = events(&env, &ns, "Deployment", "web", "DriftDetected")
        .into_iter()
        .filter(|e| e["note"].as_str().is_some_and(|n| n.contains("alice")))
        .count();
    assert_eq!(named, 0);
    drop(audit);
}

fn the_bypass_listing_names_the_user_who_set_the_bypass() {
    let env = shared();
    let ns = env.namespace("e2e-who-bypass", &[]);
    env.apply(&deployment(&ns, "held", 2, "nginx:1.0"));
    env.apply(&deployment(&ns, "probe", 1, "nginx:1.0"));
    ruled(
        &env,
        "e2e-who-bypass",
        &enforce_rule(&ns),
        &ns,
        |ok, err| !ok && err.contains("rule drift-system/e2e-who-bypass"),
    );
    // carol sets the bypass; dave edits under it.
    let bypass = r#"{"metadata":{"annotations":{"drift-sentinel.k8s.io/bypass":"true"}}}"#;
    let set = patch_as(&env, &ns, "held", "carol", bypass);
    assert!(set.status.success(), "{}", stderr(&set));
    let edited = patch_as(&env, &ns, "held", "dave", &replicas(7));
    assert!(edited.status.success(), "{}", stderr(&edited));
    let mut dave = Vec::new();
    wait_for("dave's BypassUsed Event", Duration::from_secs(30), || {
        dave = events(&env, &ns, "Deployment", "held", "BypassUsed")
            .into_iter()
            .filter(|e| e["note"].as_str().is_some_and(|n| n.starts_with("dave ")))
            .collect();
        !dave.is_empty()
    });
    let note = dave[0]["note"].as_str().unwrap_or_default();
    assert!(note.contains("the bypass was set by carol"), "{note}");

    let audit = audit_once(&env, "e2e-audit-bypass", &[]);
    let printed = stdout(&audit);
    let line = printed
        .lines()
        .find(|l| l.starts_with(&format!("bypass apps/v1 Deployment {ns}/held ")))
        .unwrap_or_else(|| panic!("no bypass line in\n{printed}{}", stderr(&audit)));
    assert!(
        line.contains("bypass without an end (set by user carol with kubectl-patch at "),
        "{line}"
    );
}

fn with_events_off_the_audit_writes_no_drift_detected_event() {
    let env = shared();
    let ns = env.namespace("e2e-who-quiet", &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    env.apply(&deployment(&ns, "probe", 1, "nginx:1.0"));
    ruled(&env, "e2e-who-quiet", &warn_rule(&ns), &ns, |ok, err| {
        ok && err.contains("rule drift-system/e2e-who-quiet")
    });
    let edited = patch_as(&env, &ns, "web", "alice", &replicas(5));
    assert!(edited.status.success(), "{}", stderr(&edited));
    wait_for("alice's edit record", Duration::from_secs(30), || {
        !events(&env, &ns, "Deployment", "web", "DriftWarned").is_empty()
    });

    let audit = audit_once(&env, "e2e-audit-quiet", &["--events=false"]);
    let printed = stdout(&audit);
    assert_eq!(audit.status.code(), Some(1), "{printed}{}", stderr(&audit));
    let block = drifted_block(&printed, "Deployment", &ns, "web");
    assert!(
        block.contains("  spec.replicas: 2 → 5"),
        "{block}\nin\n{printed}"
    );
    // Without Events the audit reads no records either.
    assert!(!block.contains("who:"), "{block}");
    // An audit with Events writes its Events before it exits (the_audit_names_the_user_…);
    // give a late one time to show anyway.
    std::thread::sleep(Duration::from_secs(3));
    let written: Vec<Value> = events(&env, &ns, "Deployment", "web", "DriftDetected")
        .into_iter()
        .filter(|e| e["reportingInstance"] == "e2e-audit-quiet")
        .collect();
    assert!(written.is_empty(), "{written:#?}");
}
