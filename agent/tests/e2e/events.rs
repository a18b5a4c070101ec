//! Events on the object (reference §6 "Events") against the real API server, written by the
//! agent under the chart's RBAC: a warned edit by `--as alice` is an Event on the Deployment
//! naming alice, the field and the rule (what `kubectl events --for` shows); a flood of warned
//! edits is one Event with a series count; denials are counted on the rule's ConfigMap; an edit
//! under a bypass names who set the bypass.

use std::time::Duration;

use libtest_mimic::Trial;
use serde_json::Value;

use crate::env::{
    AGENT_NAMESPACE, deployment, events, patch_as, replicas, ruled, shared, stderr, stdout,
    wait_for,
};
use crate::trial;

pub fn tests() -> Vec<Trial> {
    vec![
        trial!(a_warned_edit_is_an_event_naming_the_user_the_fields_and_the_rule),
        trial!(a_flood_of_warned_edits_is_one_event_with_a_series),
        trial!(denials_are_counted_on_the_rule_and_a_bypass_names_who_set_it),
        trial!(the_audit_names_the_user_and_the_why_of_a_warned_edit),
    ]
}

const WARN_NS: &str = "e2e-events";
const WARN_RULE: &str = "mode: warn\npriority: 10\nnamespaces: [e2e-events]\nselectors: [{apiGroup: apps, kind: Deployment}]\nmutable: []\n";
const FLOOD_NS: &str = "e2e-events-flood";
const FLOOD_RULE: &str = "mode: warn\npriority: 10\nnamespaces: [e2e-events-flood]\nselectors: [{apiGroup: apps, kind: Deployment}]\nmutable: []\n";
const DENY_NS: &str = "e2e-events-deny";
const DENY_RULE: &str = "mode: enforce\npriority: 10\nnamespaces: [e2e-events-deny]\nselectors: [{apiGroup: apps, kind: Deployment}]\nmutable: []\n";

fn a_warned_edit_is_an_event_naming_the_user_the_fields_and_the_rule() {
    let env = shared();
    let ns = env.namespace(WARN_NS, &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    env.apply(&deployment(&ns, "probe", 1, "nginx:1.0"));
    ruled(&env, "e2e-events", WARN_RULE, &ns, |ok, err| {
        ok && err.contains("rule drift-system/e2e-events")
    });
    let uid = env.get(&["deploy", "web", "-n", &ns]).expect("web")["metadata"]["uid"].clone();

    let edited = patch_as(&env, &ns, "web", "alice", &replicas(5));
    assert!(edited.status.success(), "{}", stderr(&edited));
    let mut found = Vec::new();
    wait_for("alice's DriftWarned Event", Duration::from_secs(30), || {
        found = events(&env, &ns, "Deployment", "web", "DriftWarned");
        !found.is_empty()
    });
    let [event] = found.as_slice() else {
        panic!("{found:#?}")
    };
    let note = event["note"].as_str().expect("a note");
    for part in [
        "alice",
        "spec.replicas: 2 → 5",
        "drift-system/e2e-events",
        "warn mode",
    ] {
        assert!(note.contains(part), "{part:?} not in {note:?}");
    }
    assert_eq!(event["type"], "Warning");
    assert_eq!(
        event["reportingController"],
        "drift-sentinel.k8s.io/webhook"
    );
    assert_eq!(event["reportingInstance"], "e2e-agent-0");
    assert_eq!(event["regarding"]["uid"], uid);
    assert_eq!(event["regarding"]["apiVersion"], "apps/v1");
    assert_eq!(
        event["metadata"]["labels"]["drift-sentinel.k8s.io/edit-record"],
        "v1"
    );
    let record: Value = serde_json::from_str(
        event["metadata"]["annotations"]["drift-sentinel.k8s.io/edits"]
            .as_str()
            .expect("the edit record"),
    )
    .expect("JSON");
    assert_eq!(record["user"], "alice");
    assert_eq!(record["why"]["kind"], "warn-mode");
    assert_eq!(record["edits"][0]["fields"][0]["path"], "spec.replicas");
    assert_eq!(record["edits"][0]["manager"], "kubectl-patch");

    // What an operator types.
    let shown = env.kubectl(&["events", "-n", &ns, "--for", "deployment/web"]);
    assert!(
        stdout(&shown).contains("DriftWarned") && stdout(&shown).contains("alice"),
        "{}{}",
        stdout(&shown),
        stderr(&shown)
    );
}

fn a_flood_of_warned_edits_is_one_event_with_a_series() {
    let env = shared();
    // Its own namespace and rule: tests run in parallel, and two creating one rule race.
    let ns = env.namespace(FLOOD_NS, &[]);
    env.apply(&deployment(&ns, "flood", 1, "nginx:1.0"));
    env.apply(&deployment(&ns, "probe", 1, "nginx:1.0"));
    ruled(&env, "e2e-events-flood", FLOOD_RULE, &ns, |ok, err| {
        ok && err.contains("rule drift-system/e2e-events-flood")
    });
    const EDITS: u32 = 40;
    for n in 0..EDITS {
        let edited = patch_as(&env, &ns, "flood", "alice", &replicas(2 + n % 2));
        assert!(edited.status.success(), "{}", stderr(&edited));
    }
    let mut found = Vec::new();
    wait_for(
        "the series to count every warned edit",
        Duration::from_secs(60),
        || {
            found = events(&env, &ns, "Deployment", "flood", "DriftWarned");
            let counted: u64 = found
                .iter()
                .map(|e| e["series"]["count"].as_u64().unwrap_or(1))
                .sum();
            // At least: the API server calls the webhook again when it retries an update
            // after a conflict (the deployment controller writes the object too).
            counted >= u64::from(EDITS)
        },
    );
    assert!(found.len() <= 2, "{found:#?}");
    let dropped = env.metric_sum("drift_sentinel_events_dropped_total");
    assert_eq!(dropped, 0.0);
}

fn denials_are_counted_on_the_rule_and_a_bypass_names_who_set_it() {
    let env = shared();
    let ns = env.namespace(DENY_NS, &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    env.apply(&deployment(&ns, "held", 2, "nginx:1.0"));
    env.apply(&deployment(&ns, "probe", 1, "nginx:1.0"));
    ruled(&env, "e2e-events-deny", DENY_RULE, &ns, |ok, err| {
        !ok && err.contains("rule drift-system/e2e-events-deny")
    });
    for n in [5, 6] {
        let denied = patch_as(&env, &ns, "web", "bob", &replicas(n));
        assert!(!denied.status.success(), "{}", stdout(&denied));
    }
    let mut found = Vec::new();
    wait_for(
        "two denials counted on the rule",
        Duration::from_secs(40),
        || {
            found = events(
                &env,
                AGENT_NAMESPACE,
                "ConfigMap",
                "e2e-events-deny",
                "DriftDenied",
            );
            found.len() == 1 && found[0]["series"]["count"] == 2
        },
    );
    let note = found[0]["note"].as_str().unwrap();
    assert!(
        note.contains("the first: Deployment e2e-events-deny/web by bob: spec.replicas: 2 → 5"),
        "{note}"
    );
    let last = &found[0]["metadata"]["annotations"]["drift-sentinel.k8s.io/last-denied"];
    assert!(
        last.as_str().is_some_and(
            |l| l.starts_with("Deployment e2e-events-deny/web by bob: spec.replicas: 2 → 6")
        ),
        "{last}"
    );
    assert!(events(&env, &ns, "Deployment", "web", "DriftDenied").is_empty());

    // carol sets a bypass; dave edits under it: the Event names both.
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
    let note = dave[0]["note"].as_str().unwrap();
    assert!(note.contains("the bypass was set by carol"), "{note}");
    assert_eq!(dave[0]["type"], "Normal");
}

/// Reference §8 "Who and why": the audit joins the drifted field with the webhook's record of
/// the edit: the user and "warn mode", in its output and in a `DriftDetected` Event.
fn the_audit_names_the_user_and_the_why_of_a_warned_edit() {
    let env = shared();
    let ns = crate::env::warned_edit_by_alice(&env, "e2e-events-audit");

    let audit = crate::who::audit_once(&env, "e2e-audit-events", &[]);
    let printed = stdout(&audit);
    assert_eq!(audit.status.code(), Some(1), "{printed}{}", stderr(&audit));
    // In web's own block: other tests' objects may have their own alice.
    let block = crate::who::drifted_block(&printed, "Deployment", &ns, "web");
    assert!(
        block.contains("  spec.replicas: 2 → 5 (by kubectl-edit at ")
            && block.contains("  who: spec.replicas: user alice, warn mode\n"),
        "{block}\nin\n{printed}"
    );

    let mut found = Vec::new();
    // This run's own Event: another test's audit, run against the same API server before
    // alice's record was written, may have told of the same drift with the user unknown.
    wait_for("the DriftDetected Event", Duration::from_secs(30), || {
        found = events(&env, &ns, "Deployment", "web", "DriftDetected");
        found.retain(|e| e["reportingInstance"] == "e2e-audit-events");
        !found.is_empty()
    });
    let event = &found[0];
    let note = event["note"].as_str().expect("a note");
    assert!(
        note.contains("spec.replicas: 2 → 5 (by kubectl-edit at ")
            && note.contains("user alice, warn mode")
            && note.contains("rule drift-system/e2e-events-audit"),
        "{note}"
    );
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reportingController"], "drift-sentinel.k8s.io/audit");
    assert_eq!(event["reportingInstance"], "e2e-audit-events");
}
