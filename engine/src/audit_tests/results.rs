//! What the audit finds: drift from the baseline, every kind of result, and the matching,
//! modes and tiers it shares with admission.

use super::*;

#[test]
fn drift_from_the_baseline_names_the_manager() {
    let rules = rules(&[("web", WEB)]);
    let managers = managers();
    let object = live(
        &declared("web:1", 2),
        "web:2",
        2,
        json!([set_image_entry()]),
    );
    let audit = run(&rules, &object, &managers);
    assert_eq!(audit.result_label(), "drifted");
    assert_eq!(audit.rule().unwrap().id.to_string(), "ops/web");
    let drift = audit.drift().unwrap();
    assert_eq!(drift.denied, ["spec.template.spec.containers[0].image"]);
    assert!(
        audit.reason().starts_with("Drift Sentinel: drift from the declared state: spec.template.spec.containers[0].image; spec.template.spec.containers[0].image: \"web:1\" → \"web:2\" (by kubectl-set at 2026-07-28T12:00:00Z); rule ops/web"),
        "{}",
        audit.reason()
    );
    let change = &audit.changes()[0];
    assert_eq!(change.change.old, Some(LazyValue::from(json!("web:1"))));
    assert_eq!(change.change.new, Some(LazyValue::from(json!("web:2"))));
    assert_eq!(change.edit.as_ref().unwrap().manager, "kubectl-set");
}

#[test]
fn results_of_every_kind() {
    let rules = rules(&[("web", WEB)]);
    let managers = managers();
    let applied = declared("web:1", 2);
    let scaled = json!({"manager": "kubectl", "operation": "Update", "subresource": "scale",
        "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}});
    let with = |f: &dyn Fn(&mut Value)| {
        let mut o = live(&applied, "web:1", 2, json!([]));
        f(&mut o);
        o
    };
    let cases: Vec<(&str, Value, &str, &str)> = vec![
        (
            "clean",
            with(&|_| {}),
            "clean",
            "no drift from the declared state",
        ),
        (
            "mutable drift is clean",
            live(&applied, "web:1", 5, json!([scaled.clone()])),
            "clean",
            "only mutable fields drifted",
        ),
        (
            "scaled 2 → 5 → 2 is not drift",
            live(&applied, "web:1", 2, json!([scaled.clone()])),
            "clean",
            "no drift",
        ),
        (
            "no baseline, no imperative edit",
            with(&|o| {
                o["metadata"]["annotations"] = json!({});
            }),
            "no_baseline",
            "no baseline",
        ),
        (
            "being deleted",
            with(&|o| o["metadata"]["deletionTimestamp"] = json!("2026-07-28T12:00:00Z")),
            "skipped",
            "object is being deleted",
        ),
        (
            "bypassed",
            with(&|o| o["metadata"]["annotations"]["drift-sentinel.k8s.io/bypass"] = json!("TRUE")),
            "skipped",
            "bypass annotation present",
        ),
        (
            "no matching rule",
            with(&|o| o["kind"] = json!("StatefulSet")),
            "skipped",
            "no matching rule",
        ),
        (
            "no kind",
            with(&|o| {
                o.as_object_mut().unwrap().remove("kind");
            }),
            "skipped",
            "no kind",
        ),
        (
            "unreadable baseline",
            with(&|o| o["metadata"]["annotations"][LAST_APPLIED_ANNOTATION] = json!("{nope")),
            "skipped",
            "is not JSON",
        ),
    ];
    for (name, object, label, reason) in cases {
        let audit = run(&rules, &object, &managers);
        assert_eq!(audit.result_label(), label, "{name}: {}", audit.reason());
        assert!(
            audit.reason().contains(reason),
            "{name}: {}",
            audit.reason()
        );
    }
}

#[test]
fn matching_mode_and_tiers_are_those_of_admission() {
    let off = "mode: off\npriority: 10\nnamespaces: [shop]\nselectors: [{apiGroup: apps, kind: Deployment}]\n";
    let rules = rules(&[("web", WEB), ("quiet", off)]);
    let managers = managers();
    let object = live(&declared("web:1", 2), "web:2", 2, json!([]));
    let audit = run(&rules, &object, &managers);
    assert_eq!(audit.rule().unwrap().id.name, "quiet", "priority wins");
    assert_eq!(audit.reason(), "skipped: mode off");

    // The namespace annotation switches the mode, as at admission.
    let audit = super::audit(
        &rules,
        &object,
        &AuditContext {
            namespace_mode: Some("warn"),
            drift_managers: &managers,
            now: NOW,
        },
        Detail::Verdict,
    );
    assert_eq!(audit.mode(), Some(Mode::Warn));
    assert!(audit.is_drifted());

    // A namespace rule never applies where a cluster rule matches.
    let tiered = RuleSet::build_with(
        [
            rule_source("ops", "web", WEB),
            rule_source("shop", "mine", off),
        ],
        &TierPolicy::cluster_namespaces(&["ops"]).unwrap(),
    );
    let audit = run(&tiered, &object, &managers);
    assert_eq!(audit.rule().unwrap().id.name, "web");
    // Labels select as at admission.
    let labelled = rules_with_labels();
    assert_eq!(run(&labelled, &object, &managers).result_label(), "skipped");
}

fn rules_with_labels() -> RuleSet {
    rules(&[(
        "tiered",
        "mode: enforce\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\nlabels: [tier=gold]\n",
    )])
}
