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
    AGENT_NAMESPACE, Env, EnvOptions, RELEASE, deployment, events, patch_as, replicas, ruled,
    shared, stderr, stdout, wait_for, warn_rule,
};
use crate::plugin::kubectl_drift;
use crate::trial;

pub fn tests() -> Vec<Trial> {
    vec![
        trial!(an_edit_outside_the_webhooks_namespace_selector_is_told_so),
        trial!(an_edit_the_unreachable_webhook_let_through_was_not_seen),
        trial!(the_bypass_listing_names_the_user_who_set_the_bypass),
        trial!(a_bypass_entry_an_unrecorded_edit_took_over_has_no_user),
        trial!(a_bypass_removed_and_set_again_unseen_is_not_carried_over_by_the_webhook),
        trial!(with_events_off_the_audit_writes_no_drift_detected_event),
        trial!(the_plugins_audit_names_the_user_and_the_why_of_a_warned_edit),
        trial!(a_restarted_audit_names_the_user_from_its_report_after_the_event_expired),
        trial!(a_restarted_audit_names_who_set_a_bypass_from_its_report_after_the_event_expired),
        trial!(blame_names_the_user_from_the_report_after_the_event_expired),
        trial!(a_restarted_audit_without_reports_names_the_user_from_its_drift_detected_event),
        trial!(a_restarted_audit_without_reports_names_who_set_a_bypass_from_its_bypassed_event),
        trial!(a_record_forged_by_a_user_who_may_create_events_names_nobody),
    ]
}

fn enforce_rule(ns: &str) -> String {
    warn_rule(ns).replace("mode: warn", "mode: enforce")
}

/// `drift-sentinel audit --once` as `pod` against the cluster, reading the chart's webhook
/// configuration, with `extra` flags.
pub fn audit_once(env: &Env, pod: &str, extra: &[&str]) -> Output {
    audit_once_reporting(env, pod, "none", extra)
}

/// [`audit_once`] with `--audit-reports reports`.
fn audit_once_reporting(env: &Env, pod: &str, reports: &str, extra: &[&str]) -> Output {
    let _auditing = crate::env::auditing();
    Command::new(env!("CARGO_BIN_EXE_drift-sentinel"))
        .args(["audit", "--once", "--kubeconfig"])
        .arg(env.cluster.admin_kubeconfig())
        .arg("--record-signing-key")
        .arg(env.record_key())
        .args(["--pod-namespace", AGENT_NAMESPACE, "--pod-name", pod])
        .args([
            "--audit-reports",
            reports,
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
    opt_out_of_the_webhook(&env, &ns, "e2e-who-outside");
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

/// Labels `ns` out of the chart's namespaceSelector and waits until the API server no longer
/// sends its edits to the webhook (a dry-run patch of `probe` no longer names `rule`).
fn opt_out_of_the_webhook(env: &Env, ns: &str, rule: &str) {
    let labelled = env.kubectl(&[
        "label",
        "namespace",
        ns,
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
                ns,
                "--dry-run=server",
                "--type=merge",
                "-p",
                &replicas(7),
            ]);
            dry.status.success() && !stderr(&dry).contains(&format!("rule drift-system/{rule}"))
        },
    );
}

/// Undoes [`opt_out_of_the_webhook`]: waits until the API server sends the namespace's edits to
/// the webhook again (a dry-run patch of `probe` names `rule`).
fn opt_back_in(env: &Env, ns: &str, rule: &str) {
    let labelled = env.kubectl(&["label", "namespace", ns, "drift-sentinel.k8s.io/enabled-"]);
    assert!(labelled.status.success(), "{}", stderr(&labelled));
    wait_for(
        "the API server to send the namespace's edits to the webhook again",
        Duration::from_secs(30),
        || {
            let dry = env.kubectl(&[
                "patch",
                "deploy/probe",
                "-n",
                ns,
                "--dry-run=server",
                "--type=merge",
                "-p",
                &replicas(7),
            ]);
            stderr(&dry).contains(&format!("rule drift-system/{rule}"))
        },
    );
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
            .arg("--record-signing-key")
            .arg(env.record_key())
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

    /// Its admin `/status`.
    fn status(&self) -> Value {
        reqwest::blocking::Client::new()
            .get(format!("{}/status", self.admin))
            .send()
            .and_then(|r| r.json::<Value>())
            .unwrap_or_default()
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
    // Reference §8 "Trust", where an operator looks: the webhook signs its records and has
    // published its public key through the real API server; the audit verifies with the key
    // and read the records.
    wait_for("the record key published", Duration::from_secs(30), || {
        env.agent.status()["recordSigning"]["publicKey"]["state"] == "published"
    });
    assert_eq!(env.agent.status()["recordSigning"]["signed"], true);
    let status = audit.status();
    assert_eq!(status["recordSigning"]["signed"], true, "{status:#}");
    let records = &status["audit"]["evidence"]["records"];
    assert!(
        records["read"].is_u64() && records["error"].is_null(),
        "{status:#}"
    );
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

/// A namespace `name` under an enforce rule of the same name, where carol sets a bypass without
/// an end on `held` (`kubectl patch`).
fn carol_sets_a_bypass(env: &Env, name: &str) -> String {
    let ns = env.namespace(name, &[]);
    env.apply(&deployment(&ns, "held", 2, "nginx:1.0"));
    env.apply(&deployment(&ns, "probe", 1, "nginx:1.0"));
    ruled(env, name, &enforce_rule(&ns), &ns, |ok, err| {
        !ok && err.contains(&format!("rule drift-system/{name}"))
    });
    let bypass = r#"{"metadata":{"annotations":{"drift-sentinel.k8s.io/bypass":"true"}}}"#;
    let set = patch_as(env, &ns, "held", "carol", bypass);
    assert!(set.status.success(), "{}", stderr(&set));
    ns
}

/// [`carol_sets_a_bypass`], once the webhook's record of her edit is an Event.
fn carol_sets_a_recorded_bypass(env: &Env, name: &str) -> String {
    let ns = carol_sets_a_bypass(env, name);
    wait_for("carol's BypassUsed Event", Duration::from_secs(30), || {
        !events(env, &ns, "Deployment", "held", "BypassUsed").is_empty()
    });
    ns
}

/// The bypass listing's line of `held` in `ns`, from an `--audit-once` as `pod`.
fn held_bypass_line(env: &Env, pod: &str, ns: &str) -> String {
    let audit = audit_once(env, pod, &[]);
    let printed = stdout(&audit);
    printed
        .lines()
        .find(|l| l.starts_with(&format!("bypass apps/v1 Deployment {ns}/held ")))
        .unwrap_or_else(|| panic!("no bypass line in\n{printed}{}", stderr(&audit)))
        .to_owned()
}

fn the_bypass_listing_names_the_user_who_set_the_bypass() {
    let env = shared();
    // carol sets the bypass; dave edits under it.
    let ns = carol_sets_a_bypass(&env, "e2e-who-bypass");
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

    let line = held_bypass_line(&env, "e2e-audit-bypass", &ns);
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

/// `kubectl drift audit` (the plugin, cluster mode) tells who and why as the agent's audit
/// does: in the object's own block, and in its `-o json` record (`who[]`).
fn the_plugins_audit_names_the_user_and_the_why_of_a_warned_edit() {
    let env = shared();
    let ns = crate::env::warned_edit_by_alice(&env, "e2e-who-plugin");

    let audit = kubectl_drift(&env, &["audit", "-n", &ns]);
    let printed = stdout(&audit);
    assert_eq!(audit.status.code(), Some(1), "{printed}{}", stderr(&audit));
    let block = drifted_block(&printed, "Deployment", &ns, "web");
    assert!(
        block.contains("  spec.replicas: 2 → 5 (by kubectl-edit at ")
            && block.contains("  who: spec.replicas: user alice, warn mode\n"),
        "{block}\nin\n{printed}"
    );

    let json = kubectl_drift(&env, &["audit", "-n", &ns, "-o", "json"]);
    assert_eq!(json.status.code(), Some(1), "{}", stderr(&json));
    let report: Value = serde_json::from_str(&stdout(&json)).expect("audit -o json");
    let web = report["drifted"]
        .as_array()
        .expect("drifted")
        .iter()
        .find(|r| r["resourceName"] == "web")
        .unwrap_or_else(|| panic!("web not drifted in {report:#}"));
    let who = &web["who"][0];
    assert_eq!(who["path"], "spec.replicas", "{web:#}");
    assert_eq!(who["user"], "alice", "{web:#}");
    assert_eq!(who["why"]["kind"], "warn-mode", "{web:#}");
    assert_eq!(who["rule"], "drift-system/e2e-who-plugin", "{web:#}");
}

/// Installs the OpenReports CRDs (the audit writes Reports only where they exist).
fn install_openreports(env: &Env) {
    let crds =
        std::fs::read_to_string(crate::env::workspace().join("testkit/crds/openreports.yaml"))
            .expect("the OpenReports CRDs");
    env.apply(&crds);
}

/// Deletes the Events in `ns` labelled `selector`, and checks none is left.
fn delete_events_labelled(env: &Env, ns: &str, selector: &str) {
    let deleted = env.kubectl(&["delete", "events.events.k8s.io", "-n", ns, "-l", selector]);
    assert!(deleted.status.success(), "{}", stderr(&deleted));
    let left = env
        .get(&["events.events.k8s.io", "-n", ns, "-l", selector])
        .expect("list the Events");
    assert_eq!(left["items"].as_array().map(Vec::len), Some(0), "{left:#}");
}

/// Deletes the webhook's records of edits in `ns`: what the Events' expiry does.
fn expire_edit_records(env: &Env, ns: &str) {
    delete_events_labelled(env, ns, "drift-sentinel.k8s.io/edit-record=v1");
}

/// The block of `web` in `ns` of an audit run that found drift (exit 1), and all it printed.
fn web_block(output: &Output, ns: &str) -> (String, String) {
    let printed = stdout(output);
    assert_eq!(output.status.code(), Some(1), "{printed}{}", stderr(output));
    (drifted_block(&printed, "Deployment", ns, "web"), printed)
}

/// Deletes the audit's Events in `ns` that carry what it remembers (`DriftDetected`,
/// `Bypassed`).
fn forget_audit_memory(env: &Env, ns: &str) {
    let _forgetting = crate::env::forgetting_audit_memory();
    delete_events_labelled(env, ns, "drift-sentinel.k8s.io/audit-memory=v1");
}

/// Deletes the audit's Reports in `ns` (a reporting run writes one in every namespace it finds
/// drift in), when the OpenReports CRDs are installed; the caller holds
/// [`crate::env::writing_reports`] until its check is done.
fn delete_reports(env: &Env, ns: &str) {
    // Fails only without the CRDs: then there is no Report to delete.
    env.kubectl(&["delete", "reports.openreports.io", "-n", ns, "--all"]);
    if let Some(left) = env.get(&["reports.openreports.io", "-n", ns]) {
        assert_eq!(left["items"].as_array().map(Vec::len), Some(0), "{left:#}");
    }
}

/// Reference §8 "Memory": without Reports (`--audit-reports none`) the audit keeps what it
/// attributed on its own `DriftDetected` Event of the object (annotation
/// `drift-sentinel.k8s.io/who-recorded`); a restarted audit reads it back after the webhook's
/// Event is gone, and only with its signature (§8 "Trust").
fn a_restarted_audit_without_reports_names_the_user_from_its_drift_detected_event() {
    let env = shared();
    let ns = crate::env::warned_edit_by_alice(&env, "e2e-who-memory-events");
    let alice = "  who: spec.replicas: user alice, warn mode\n";
    let (block, printed) = web_block(&audit_once(&env, "e2e-audit-memory-events", &[]), &ns);
    assert!(block.contains(alice), "{block}\nin\n{printed}");
    let detected = events(&env, &ns, "Deployment", "web", "DriftDetected");
    let remembered = detected
        .iter()
        .filter_map(|e| e["metadata"]["annotations"]["drift-sentinel.k8s.io/who-recorded"].as_str())
        .find(|text| text.contains("\"alice\"") && text.contains("sha256:"));
    assert!(remembered.is_some(), "{detected:#?}");

    expire_edit_records(&env, &ns);

    // A new audit process, without Reports: only its DriftDetected Event can tell it.
    let (block, printed) = web_block(&audit_once(&env, "e2e-audit-memory-events", &[]), &ns);
    assert!(block.contains(alice), "{block}\nin\n{printed}");
    // Reference §9: the plugin's audit and blame read the same Event (no Report, no record):
    // other tests' reporting runs write a Report here, so none is written until the end.
    let _reports = crate::env::writing_reports();
    delete_reports(&env, &ns);
    let plugin = kubectl_drift(&env, &["audit", "-n", &ns]);
    let (block, printed) = web_block(&plugin, &ns);
    assert!(
        block.contains(alice),
        "{block}\nin\n{printed}{}",
        stderr(&plugin)
    );
    let blame = kubectl_drift(&env, &["blame", "deploy/web", "-n", &ns]);
    assert!(
        stdout(&blame).contains("who: user alice, warn mode"),
        "{}{}",
        stdout(&blame),
        stderr(&blame)
    );

    // Reference §8 "Trust": the memory is read back only with its signature (whoever may
    // create Events can write the annotation): without it, not known.
    let signature = "drift-sentinel.k8s.io/who-recorded-signature";
    let detected = events(&env, &ns, "Deployment", "web", "DriftDetected");
    assert!(
        detected
            .iter()
            .any(|e| e["metadata"]["annotations"][signature]
                .as_str()
                .is_some_and(|s| s.starts_with("ed25519:"))),
        "{detected:#?}"
    );
    // No audit that read the signed memory before runs while the plugin reads it stripped
    // (it would write it back signed).
    let forgetting = crate::env::forgetting_audit_memory();
    let stripped = env.kubectl(&[
        "annotate",
        "events.events.k8s.io",
        "-n",
        &ns,
        "-l",
        "drift-sentinel.k8s.io/audit-memory=v1",
        &format!("{signature}-"),
    ]);
    assert!(stripped.status.success(), "{}", stderr(&stripped));
    let plugin = kubectl_drift(&env, &["audit", "-n", &ns]);
    let (block, printed) = web_block(&plugin, &ns);
    assert!(
        !block.contains("alice") && stderr(&plugin).contains("did not verify"),
        "{block}\nin\n{printed}{}",
        stderr(&plugin)
    );
    drop(forgetting);
    let (block, printed) = web_block(&audit_once(&env, "e2e-audit-memory-events", &[]), &ns);
    assert!(
        block.contains("  who: spec.replicas: user unknown: ") && !block.contains("alice"),
        "{block}\nin\n{printed}"
    );

    // Without that Event either, not known.
    forget_audit_memory(&env, &ns);
    let (block, printed) = web_block(&audit_once(&env, "e2e-audit-memory-events", &[]), &ns);
    assert!(
        block.contains("  who: spec.replicas: user unknown: ") && !block.contains("alice"),
        "{block}\nin\n{printed}"
    );
}

/// Reference §8 "Memory": without Reports (`--audit-reports none`) who set a bypass is kept on
/// the audit's own `Bypassed` Event of the object (annotation
/// `drift-sentinel.k8s.io/bypass-setter`, signed); a restarted audit reads it back after the
/// webhook's Event naming the setter is gone, for the same managedFields entry. Without that
/// Event either, the user is not known, and the listing says why.
fn a_restarted_audit_without_reports_names_who_set_a_bypass_from_its_bypassed_event() {
    let env = shared();
    let ns = carol_sets_a_recorded_bypass(&env, "e2e-who-bypass-events");
    let carol = "bypass without an end (set by user carol with kubectl-patch at ";
    let pod = "e2e-audit-bypass-events";
    let line = held_bypass_line(&env, pod, &ns);
    assert!(line.contains(carol), "{line}");
    // Other tests' audits (every namespace) write their own.
    let bypassed = events(&env, &ns, "Deployment", "held", "Bypassed");
    let event = bypassed
        .iter()
        .find(|e| e["reportingInstance"] == pod)
        .unwrap_or_else(|| panic!("no Bypassed Event of {pod}: {bypassed:#?}"));
    assert_eq!(event["type"], "Normal", "{event:#}");
    assert_eq!(
        event["reportingController"], "drift-sentinel.k8s.io/audit",
        "{event:#}"
    );
    assert!(
        event["note"].as_str().is_some_and(|n| n.contains(carol)),
        "{event:#}"
    );
    let annotations = &event["metadata"]["annotations"];
    let setter: Value = serde_json::from_str(
        annotations["drift-sentinel.k8s.io/bypass-setter"]
            .as_str()
            .unwrap_or_else(|| panic!("no bypass-setter in {event:#}")),
    )
    .expect("the setter is JSON");
    assert_eq!(setter["user"], "carol", "{setter:#}");
    assert_eq!(setter["manager"], "kubectl-patch", "{setter:#}");
    assert!(
        annotations["drift-sentinel.k8s.io/bypass-setter-signature"]
            .as_str()
            .is_some_and(|s| s.starts_with("ed25519:")),
        "{event:#}"
    );

    expire_edit_records(&env, &ns);
    assert!(events(&env, &ns, "Deployment", "held", "BypassUsed").is_empty());

    // A new audit process, without Reports: only its Bypassed Event can tell it.
    let line = held_bypass_line(&env, pod, &ns);
    assert!(line.contains(carol), "{line}");

    // Without that Event either, not known, and why.
    forget_audit_memory(&env, &ns);
    let line = held_bypass_line(&env, pod, &ns);
    assert!(
        line.contains("(set by kubectl-patch at ")
            && line.contains("; user unknown: no record of the edit kubectl-patch at ")
            && !line.contains("carol"),
        "{line}"
    );
}

/// The line of `held` in `ns` of a bypass listing `printed`.
fn bypass_line_of(printed: &str, ns: &str) -> String {
    printed
        .lines()
        .find(|l| l.starts_with(&format!("bypass apps/v1 Deployment {ns}/held ")))
        .unwrap_or_else(|| panic!("no bypass line of {ns}/held in\n{printed}"))
        .to_owned()
}

/// Reference §8 step 1 and "Memory": who set a bypass, once the audit has it, is kept in the
/// Report's `skip` result (`properties.bypassSetter`) and read back by a restarted audit after
/// the webhook's Event naming the setter is gone; `kubectl drift audit` names the setter too,
/// from the Event and then from the Report (§9).
fn a_restarted_audit_names_who_set_a_bypass_from_its_report_after_the_event_expired() {
    let env = shared();
    install_openreports(&env);
    let ns = carol_sets_a_recorded_bypass(&env, "e2e-who-bypass-memory");
    let carol = "bypass without an end (set by user carol with kubectl-patch at ";

    // The plugin names the setter from the webhook's Event.
    let plugin = kubectl_drift(&env, &["audit", "-n", &ns]);
    let line = bypass_line_of(&stdout(&plugin), &ns);
    assert!(line.contains(carol), "{line}{}", stderr(&plugin));

    // No other test's run rewrites this namespace's Report between the two audits.
    let _reports = crate::env::writing_reports();
    let first = audit_once_reporting(&env, "e2e-audit-bypass-memory", "openreports", &[]);
    let line = bypass_line_of(&stdout(&first), &ns);
    assert!(line.contains(carol), "{line}{}", stderr(&first));
    let report = env
        .get(&["reports.openreports.io", "drift-sentinel-audit", "-n", &ns])
        .expect("the namespace's Report");
    let skip = report["results"]
        .as_array()
        .and_then(|results| results.iter().find(|r| r["result"] == "skip"))
        .unwrap_or_else(|| panic!("no skip result in {report:#}"));
    let setter: Value = serde_json::from_str(
        skip["properties"]["bypassSetter"]
            .as_str()
            .unwrap_or_else(|| panic!("no bypassSetter in {skip:#}")),
    )
    .expect("bypassSetter is JSON");
    assert_eq!(setter["user"], "carol", "{setter:#}");
    assert_eq!(setter["manager"], "kubectl-patch", "{setter:#}");

    expire_edit_records(&env, &ns);

    // A new audit process: only the Report can tell it.
    let second = audit_once_reporting(&env, "e2e-audit-bypass-memory", "openreports", &[]);
    let line = bypass_line_of(&stdout(&second), &ns);
    assert!(line.contains(carol), "{line}{}", stderr(&second));
    // The plugin reads the same memory.
    let plugin = kubectl_drift(&env, &["audit", "-n", &ns]);
    let line = bypass_line_of(&stdout(&plugin), &ns);
    assert!(line.contains(carol), "{line}{}", stderr(&plugin));
    // Without the Report (an audit that writes none, and reads none) and without the audit's
    // Bypassed Event (the other memory) the user is not known, and the listing says why.
    forget_audit_memory(&env, &ns);
    let forgetful = audit_once(&env, "e2e-audit-bypass-memory-none", &[]);
    let line = bypass_line_of(&stdout(&forgetful), &ns);
    assert!(
        line.contains("; user unknown: ") && !line.contains("carol"),
        "{line}"
    );
}

/// Reference §9: `kubectl drift blame` names the user of a drifted field from the Report's
/// memory (`properties.whoRecorded`) once the webhook's Event of the edit is gone.
fn blame_names_the_user_from_the_report_after_the_event_expired() {
    let env = shared();
    install_openreports(&env);
    let ns = crate::env::warned_edit_by_alice(&env, "e2e-who-blame-memory");
    // No other test's run rewrites this namespace's Report before blame reads it.
    let _reports = crate::env::writing_reports();
    let first = audit_once_reporting(&env, "e2e-audit-blame-memory", "openreports", &[]);
    assert_eq!(first.status.code(), Some(1), "{}", stderr(&first));
    expire_edit_records(&env, &ns);

    let output = kubectl_drift(&env, &["blame", "deploy/web", "-n", &ns, "-o", "json"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let document: Value = serde_json::from_slice(&output.stdout).expect("blame -o json");
    let drift = document["drift"].as_array().expect("drift");
    let replicas = drift
        .iter()
        .find(|d| d["path"] == "spec.replicas")
        .unwrap_or_else(|| panic!("spec.replicas not drifted: {document:#}"));
    assert_eq!(replicas["who"]["user"], "alice", "{document:#}");
    assert_eq!(replicas["who"]["why"]["kind"], "warn-mode", "{document:#}");
    let text = kubectl_drift(&env, &["blame", "deploy/web", "-n", &ns]);
    assert!(
        stdout(&text).contains("who: user alice, warn mode"),
        "{}{}",
        stdout(&text),
        stderr(&text)
    );
}

/// Issue 43 item 2: once the audit has the user, it keeps it after the Event expires, across a
/// restart — from what its last Report remembers (`properties.whoRecorded`). Deleting the
/// webhook's Event stands in for its expiry; each `--audit-once` is a new process.
fn a_restarted_audit_names_the_user_from_its_report_after_the_event_expired() {
    let env = shared();
    install_openreports(&env);
    let ns = crate::env::warned_edit_by_alice(&env, "e2e-who-memory");
    let alice = "  who: spec.replicas: user alice, warn mode\n";

    // No other test's run rewrites this namespace's Report between the two audits.
    let _reports = crate::env::writing_reports();
    let first = audit_once_reporting(&env, "e2e-audit-memory", "openreports", &[]);
    let printed = stdout(&first);
    assert_eq!(first.status.code(), Some(1), "{printed}{}", stderr(&first));
    let block = drifted_block(&printed, "Deployment", &ns, "web");
    assert!(block.contains(alice), "{block}\nin\n{printed}");
    let report = env
        .get(&["reports.openreports.io", "drift-sentinel-audit", "-n", &ns])
        .expect("the namespace's Report");
    let result = &report["results"][0];
    assert_eq!(
        result["properties"]["who"],
        "spec.replicas: user alice, warn mode"
    );
    assert!(
        result["properties"]["whoRecorded"]
            .as_str()
            .is_some_and(|r| r.contains("\"alice\"") && r.contains("sha256:")),
        "{result:#}"
    );

    // The Event expires.
    expire_edit_records(&env, &ns);
    assert!(events(&env, &ns, "Deployment", "web", "DriftWarned").is_empty());

    // A new audit process: only the Report can tell it.
    let second = audit_once_reporting(&env, "e2e-audit-memory", "openreports", &[]);
    let (block, printed) = web_block(&second, &ns);
    assert!(block.contains(alice), "{block}\nin\n{printed}");
    // The plugin reads the same memory.
    let plugin = kubectl_drift(&env, &["audit", "-n", &ns]);
    let printed = stdout(&plugin);
    let block = drifted_block(&printed, "Deployment", &ns, "web");
    assert!(
        block.contains(alice),
        "{block}\nin\n{printed}{}",
        stderr(&plugin)
    );

    // Without the Report (an audit that writes none, and reads none) and without the audit's
    // DriftDetected Events (the other memory) the user is not known: never a guess.
    forget_audit_memory(&env, &ns);
    let forgetful = audit_once(&env, "e2e-audit-memory-none", &[]);
    let printed = stdout(&forgetful);
    let block = drifted_block(&printed, "Deployment", &ns, "web");
    assert!(
        block.contains("  who: spec.replicas: user unknown: ") && !block.contains("alice"),
        "{block}\nin\n{printed}"
    );
}

/// Reference §8 step 1: carol sets a bypass (recorded), then an edit by the same field manager
/// that the webhook does not see (the namespace opted out of the webhook) moves the annotation's
/// managedFields entry. Whether that edit rewrote the annotation cannot be told: the listing
/// says why the user is unknown and does not carry carol over.
fn a_bypass_entry_an_unrecorded_edit_took_over_has_no_user() {
    let env = shared();
    let ns = carol_sets_a_recorded_bypass(&env, "e2e-who-bypass-moved");
    opt_out_of_the_webhook(&env, &ns, "e2e-who-bypass-moved");
    // managedFields times are whole seconds.
    std::thread::sleep(Duration::from_millis(1100));
    let moved = patch_as(&env, &ns, "held", "dave", &replicas(7));
    assert!(moved.status.success(), "{}", stderr(&moved));

    let line = held_bypass_line(&env, "e2e-audit-bypass-moved", &ns);
    assert!(
        line.contains("; user unknown: a later edit by kubectl-patch at ")
            && line.contains("after carol set the bypass (kubectl-patch at ")
            && line.contains("whether it rewrote the annotation cannot be told)")
            && !line.contains("set by user carol"),
        "{line}"
    );
}

/// Reference §3 "The record of an edit let through": carol sets a bypass (seen), then the
/// annotation is removed and set again to the same value by edits the webhook does not see (the
/// namespace opted out of it); dave's later edit under the bypass is seen, and its `BypassUsed`
/// Event must not name carol: the annotation's managedFields entry is not the one carol's edit
/// left, so the webhook cannot know who set it.
fn a_bypass_removed_and_set_again_unseen_is_not_carried_over_by_the_webhook() {
    let env = shared();
    let rule = "e2e-who-bypass-reset";
    let ns = carol_sets_a_recorded_bypass(&env, rule);
    opt_out_of_the_webhook(&env, &ns, rule);
    // managedFields times are whole seconds: each write below is a new time.
    for (what, patch) in [
        (
            "removed",
            r#"{"metadata":{"annotations":{"drift-sentinel.k8s.io/bypass":null}}}"#,
        ),
        (
            "set again",
            r#"{"metadata":{"annotations":{"drift-sentinel.k8s.io/bypass":"true"}}}"#,
        ),
    ] {
        std::thread::sleep(Duration::from_millis(1100));
        let unseen = patch_as(&env, &ns, "held", "erin", patch);
        assert!(unseen.status.success(), "{what}: {}", stderr(&unseen));
    }
    opt_back_in(&env, &ns, rule);
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
    assert!(!note.contains("the bypass was set by"), "{note}");
    let record = dave[0]["metadata"]["annotations"]["drift-sentinel.k8s.io/edits"]
        .as_str()
        .unwrap_or_default();
    assert!(!record.contains("carol"), "{record}");
}

/// Reference §8 "Trust": mallory, bound to the default `edit` ClusterRole in the namespace (which
/// may create Events), copies alice's genuine record of `probe` onto an Event about `web`, whose
/// drift no record explains; and an administrator copies `probe`'s remembered attribution onto
/// `web`'s Report result. Neither verifies with the installation's key: the audit and
/// `kubectl drift audit` name nobody for `web` and say why, while alice's genuine record still
/// names her for `probe`.
fn a_record_forged_by_a_user_who_may_create_events_names_nobody() {
    let env = shared();
    let crds =
        std::fs::read_to_string(crate::env::workspace().join("testkit/crds/openreports.yaml"))
            .expect("the OpenReports CRDs");
    env.apply(&crds);
    let name = "e2e-who-forged";
    let ns = env.namespace(name, &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    env.apply(&deployment(&ns, "probe", 1, "nginx:1.0"));
    // web drifts while the namespace is out of the webhook's namespaceSelector: the webhook
    // has no record of it. Then the namespace is in again.
    let label = |value: &str| {
        let labelled = env.kubectl(&[
            "label",
            "namespace",
            &ns,
            &format!("drift-sentinel.k8s.io/enabled{value}"),
            "--overwrite",
        ]);
        assert!(labelled.status.success(), "{}", stderr(&labelled));
    };
    label("=false");
    let patched = env.kubectl(&[
        "patch",
        "deployment",
        "web",
        "-n",
        &ns,
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"replicas":5}}"#,
    ]);
    assert!(patched.status.success(), "{}", stderr(&patched));
    label("-");
    ruled(&env, name, &warn_rule(&ns), &ns, |ok, err| {
        ok && err.contains(&format!("rule drift-system/{name}"))
    });
    crate::env::edit_replicas_as(&env, &ns, "probe", "alice", 1, 5);
    wait_for("alice's edit record", Duration::from_secs(30), || {
        !events(&env, &ns, "Deployment", "probe", "DriftWarned").is_empty()
    });
    let genuine = events(&env, &ns, "Deployment", "probe", "DriftWarned").remove(0);
    let web_uid = env
        .get(&["deployment", "web", "-n", &ns])
        .and_then(|web| web["metadata"]["uid"].as_str().map(str::to_owned))
        .expect("web's uid");
    let probe_uid = genuine["regarding"]["uid"].as_str().expect("probe's uid");

    let bound = env.kubectl(&[
        "create",
        "rolebinding",
        "mallory-edit",
        "--clusterrole=edit",
        "--user=mallory",
        "-n",
        &ns,
    ]);
    assert!(bound.status.success(), "{}", stderr(&bound));
    let mut forged = genuine.clone();
    let annotations = &mut forged["metadata"]["annotations"];
    let text = annotations["drift-sentinel.k8s.io/edits"]
        .as_str()
        .expect("the record")
        .replace(probe_uid, &web_uid);
    annotations["drift-sentinel.k8s.io/edits"] = Value::from(text);
    forged["metadata"] = serde_json::json!({
        "name": "web.forged", "namespace": ns,
        "labels": genuine["metadata"]["labels"],
        "annotations": forged["metadata"]["annotations"],
    });
    forged["regarding"]["name"] = Value::from("web");
    forged["regarding"]["uid"] = Value::from(web_uid.as_str());
    forged["apiVersion"] = Value::from("events.k8s.io/v1");
    forged["kind"] = Value::from("Event");
    let created = env.kubectl_stdin(
        &["--as", "mallory", "create", "-f", "-"],
        &forged.to_string(),
    );
    assert!(
        created.status.success(),
        "mallory may create Events: {}",
        stderr(&created)
    );

    let did_not_verify = "  who: spec.replicas: user unknown: a record of this object's edits did not verify: not signed by this installation's webhook key";
    let audit = audit_once_reporting(&env, "e2e-audit-forged", "openreports", &[]);
    let printed = stdout(&audit);
    let web = drifted_block(&printed, "Deployment", &ns, "web");
    assert!(
        web.contains(did_not_verify) && !web.contains("alice"),
        "{web}\nin\n{printed}{}",
        stderr(&audit)
    );
    let probe = drifted_block(&printed, "Deployment", &ns, "probe");
    assert!(
        probe.contains("  who: spec.replicas: user alice, warn mode\n"),
        "{probe}\nin\n{printed}"
    );
    let plugin = kubectl_drift(&env, &["audit", "-n", &ns]);
    let printed = stdout(&plugin);
    let web = drifted_block(&printed, "Deployment", &ns, "web");
    let probe = drifted_block(&printed, "Deployment", &ns, "probe");
    assert!(
        web.contains(did_not_verify) && !web.contains("alice"),
        "{web}\nin\n{printed}{}",
        stderr(&plugin)
    );
    assert!(probe.contains("user alice, warn mode"), "{probe}");
    assert!(
        stderr(&plugin).contains("did not verify"),
        "{}",
        stderr(&plugin)
    );

    // The forged Report property: probe's signed whoRecorded (and its signature) on web's result.
    let report = env
        .get(&["reports.openreports.io", "drift-sentinel-audit", "-n", &ns])
        .expect("the namespace's Report");
    let results = report["results"].as_array().expect("results");
    let index = |object: &str| {
        results
            .iter()
            .position(|r| r["resources"][0]["name"] == object)
            .unwrap_or_else(|| panic!("{object} in {report:#}"))
    };
    let probe_properties = &results[index("probe")]["properties"];
    assert!(
        probe_properties["whoRecordedSignature"]
            .as_str()
            .is_some_and(|s| s.starts_with("ed25519:")),
        "{probe_properties:#}"
    );
    let forged_property = serde_json::json!([
        {"op": "add", "path": format!("/results/{}/properties/whoRecorded", index("web")),
         "value": probe_properties["whoRecorded"]},
        {"op": "add", "path": format!("/results/{}/properties/whoRecordedSignature", index("web")),
         "value": probe_properties["whoRecordedSignature"]},
    ]);
    let patched = env.kubectl(&[
        "patch",
        "reports.openreports.io",
        "drift-sentinel-audit",
        "-n",
        &ns,
        "--type",
        "json",
        "-p",
        &forged_property.to_string(),
    ]);
    assert!(patched.status.success(), "{}", stderr(&patched));
    // The records gone (expired), a new audit process reads only the Report: web is not alice's.
    let deleted = env.kubectl(&[
        "delete",
        "events.events.k8s.io",
        "-n",
        &ns,
        "-l",
        "drift-sentinel.k8s.io/edit-record=v1",
    ]);
    assert!(deleted.status.success(), "{}", stderr(&deleted));
    let audit = audit_once_reporting(&env, "e2e-audit-forged", "openreports", &[]);
    let printed = stdout(&audit);
    let web = drifted_block(&printed, "Deployment", &ns, "web");
    let probe = drifted_block(&printed, "Deployment", &ns, "probe");
    assert!(!web.contains("alice"), "{web}\nin\n{printed}");
    assert!(
        probe.contains("  who: spec.replicas: user alice, warn mode\n"),
        "the genuine memory is read back: {probe}\nin\n{printed}"
    );
}
