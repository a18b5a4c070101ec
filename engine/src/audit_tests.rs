//! The audit evaluation: matching shared with admission, every result, imperative edits.

use super::*;
use crate::evaluation::ModeSource;
use crate::rule::{RuleId, RuleSource, TierPolicy};
use proptest::prelude::*;
use serde_json::json;

fn rule_source(namespace: &str, name: &str, spec: &str) -> RuleSource {
    RuleSource {
        id: RuleId {
            namespace: namespace.into(),
            name: name.into(),
        },
        spec: crate::SpecText::Yaml(spec.into()),
        origin: None,
    }
}

fn rules(specs: &[(&str, &str)]) -> RuleSet {
    RuleSet::build(
        specs
            .iter()
            .map(|(name, spec)| rule_source("ops", name, spec)),
    )
}

const WEB: &str = "mode: enforce\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\nmutable: [spec.replicas]\n";

fn managers() -> Vec<String> {
    DEFAULT_DRIFT_MANAGERS
        .iter()
        .map(|m| m.to_string())
        .collect()
}

fn declared(image: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "app", "image": image}]}}}
    })
}

/// A live Deployment applied from `applied`, now running `image` with `replicas`.
fn live(applied: &Value, image: &str, replicas: i64, managed: Value) -> Value {
    let mut live = declared(image, replicas);
    live["metadata"]["annotations"] = json!({LAST_APPLIED_ANNOTATION: applied.to_string(), "deployment.kubernetes.io/revision": "2"});
    live["metadata"]["managedFields"] = managed;
    live["metadata"]["uid"] = json!("u");
    live["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = json!("IfNotPresent");
    live["status"] = json!({"replicas": replicas});
    live
}

/// A live Deployment running what was last applied: `image` with `replicas`.
fn live_as_applied(image: &str, replicas: i64, managed: Value) -> Value {
    live(&declared(image, replicas), image, replicas, managed)
}

fn set_image_entry() -> Value {
    json!({"manager": "kubectl-set", "operation": "Update", "time": "2026-07-28T12:00:00Z",
        "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {
            "k:{\"name\":\"app\"}": {"f:image": {}}}}}}}})
}

/// The time the tests' runs judge at.
const NOW: std::time::SystemTime = std::time::SystemTime::UNIX_EPOCH;

fn run<'a>(rules: &'a RuleSet, object: &'a Value, managers: &'a [String]) -> Audit<'a> {
    audit(
        rules,
        object,
        &AuditContext {
            namespace_mode: None,
            drift_managers: managers,
            now: NOW,
        },
        Detail::Verdict,
    )
}

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

#[test]
fn imperative_edits_without_a_baseline() {
    let rules = rules(&[("web", WEB)]);
    let managers = managers();
    let mut object = declared("web:2", 5);
    object["metadata"]["managedFields"] = json!([
        {"manager": "argocd-controller", "operation": "Apply", "time": "2026-07-28T11:00:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:template": {}}}},
        set_image_entry(),
        {"manager": "kubectl", "operation": "Update", "subresource": "scale",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
        {"manager": "kubectl-replace", "operation": "Update", "time": "2026-07-28T13:00:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {".": {},
            "f:kubectl.kubernetes.io/last-applied-configuration": {}}}}},
    ]);
    object["metadata"]["annotations"] = json!({LAST_APPLIED_ANNOTATION: ""});
    let audit = run(&rules, &object, &managers);
    assert_eq!(audit.result_label(), "drifted", "{}", audit.reason());
    assert_eq!(
        audit.drift().unwrap().denied,
        ["spec.template.spec.containers[0].image"]
    );
    let replicas = audit
        .changes()
        .iter()
        .find(|c| c.path == "spec.replicas")
        .expect("replicas owned by kubectl scale");
    assert!(replicas.mutable);
    assert_eq!(replicas.edit.as_ref().unwrap().manager, "kubectl");
    assert_eq!(replicas.edit.as_ref().unwrap().time, None);
    assert!(
        !audit
            .changes()
            .iter()
            .any(|c| c.path.contains("last-applied")),
        "the baseline annotation itself is never drift"
    );

    // Only the managers named count.
    let only_edit = vec!["kubectl-edit".to_owned()];
    assert_eq!(
        run(&rules, &object, &only_edit).result_label(),
        "no_baseline"
    );
}

#[test]
fn an_undeclared_field_an_edit_added_drifts_a_declared_one_only_when_changed() {
    let rules = rules(&[("web", WEB)]);
    let managers = managers();
    let applied = declared("web:1", 2);
    let mut object = live(
        &applied,
        "web:1",
        2,
        json!([{"manager": "kubectl-label", "operation": "Update", "time": "2026-07-28T12:00:00Z",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:tier": {}, "f:app": {}}}}},
            {"manager": "kubectl-edit", "operation": "Update", "time": "2026-07-28T12:30:00Z",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {
                "k:{\"name\":\"sidecar\"}": {".": {}, "f:name": {}, "f:image": {}}}}}}}}]),
    );
    object["metadata"]["labels"]["tier"] = json!("gold");
    object["spec"]["template"]["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "sidecar", "image": "s:1", "imagePullPolicy": "Always"}));
    let audit = run(&rules, &object, &managers);
    assert_eq!(
        audit.drift().unwrap().denied,
        ["metadata.labels.tier", "spec.template.spec.containers[1]"],
        "app is declared and unchanged: not drift"
    );
    let sidecar = &audit.changes()[1];
    assert_eq!(sidecar.change.old, None);
    assert_eq!(sidecar.edit.as_ref().unwrap().manager, "kubectl-edit");
}

#[test]
fn scope_applies_to_imperative_edits() {
    let rules = rules(&[(
        "web",
        "mode: warn\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\nexclude: [metadata.labels]\ninclude: [metadata, spec.replicas]\n",
    )]);
    let managers = managers();
    let mut object = declared("web:9", 2);
    object["metadata"]["labels"]["tier"] = json!("gold");
    object["metadata"]["managedFields"] = json!([set_image_entry(),
        {"manager": "kubectl-label", "operation": "Update",
         "fieldsV1": {"f:metadata": {"f:labels": {"f:tier": {}}}}}]);
    let audit = run(&rules, &object, &managers);
    assert_eq!(audit.result_label(), "clean", "{:?}", audit.changes());
}

proptest! {
    /// Whatever drifted, a change covered by `mutable` is never drift.
    #[test]
    fn a_change_covered_by_mutable_is_never_drift(
        image in "[a-z]{1,3}", replicas in 0i64..5, label in "[a-z]{1,3}", sidecar in any::<bool>()
    ) {
        let rules = rules(&[(
            "web",
            "mode: enforce\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\nmutable: [spec.replicas, 'spec.template.spec.containers[*]', metadata.labels]\n",
        )]);
        let managers = managers();
        let mut object = live(&declared("web:1", 2), &image, replicas, json!([set_image_entry()]));
        object["metadata"]["labels"]["x"] = json!(label);
        if sidecar {
            object["spec"]["template"]["spec"]["containers"].as_array_mut().unwrap()
                .insert(0, json!({"name": "side", "image": "s"}));
        }
        let audit = run(&rules, &object, &managers);
        prop_assert!(!audit.is_drifted(), "{}", audit.reason());
        prop_assert!(audit.changes().iter().all(|c| c.mutable));
    }
}

#[test]
fn selection_is_by_auditing_rules_and_kinds() {
    let off = "mode: off\nnamespaces: [quiet]\nselectors: [{apiGroup: apps, kind: Deployment}]\n";
    let any = "mode: dry-run\nnamespaces: [shop]\nselectors: [{apiGroup: '*', kind: '*'}]\n";
    let rules = rules(&[("web", WEB), ("quiet", off), ("any", any)]);
    let mut object = declared("web:1", 2);
    assert!(is_selected(&rules, &object));
    object["metadata"]["namespace"] = json!("quiet");
    assert!(
        is_selected(&rules, &object),
        "web (enforce, '*') selects it"
    );
    let only_off = self::rules(&[("quiet", off)]);
    assert!(
        !is_selected(&only_off, &object),
        "an off rule audits nothing"
    );
    assert!(!is_selected(&rules, &json!({"metadata": {}})), "no kind");

    assert!(selects_kind(&rules, "apps", "Deployment", false));
    assert!(
        !selects_kind(&rules, "", "ConfigMap", false),
        "'*' only selects the webhook's resources"
    );
    assert!(selects_kind(&rules, "", "ConfigMap", true));
    assert!(!selects_kind(&only_off, "apps", "Deployment", true));
}

#[test]
fn an_invalid_mode_annotation_is_ignored_and_reported() {
    let rules = rules(&[("web", WEB)]);
    let managers = managers();
    let object = live(&declared("web:1", 2), "web:2", 2, json!([]));
    let audit = super::audit(
        &rules,
        &object,
        &AuditContext {
            namespace_mode: Some("loud"),
            drift_managers: &managers,
            now: NOW,
        },
        Detail::Full,
    );
    let matched = audit.matched.as_ref().unwrap();
    assert_eq!(matched.mode, Mode::Enforce);
    assert_eq!(matched.mode_source, ModeSource::Rule);
    assert_eq!(
        matched
            .ignored_mode_annotation
            .map(|i| (i.namespace, i.value)),
        Some(("shop", "loud"))
    );
    assert_eq!(audit.considered.len(), 1);
    assert!(audit.is_drifted());
}

/// The managedFields entry of `manager` (operation `Update`) owning the baseline annotation
/// and `fields` under `spec`.
fn rewrote_baseline(manager: &str, time: &str, spec_fields: Value) -> Value {
    json!({"manager": manager, "operation": "Update", "time": time, "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:annotations": {"f:kubectl.kubernetes.io/last-applied-configuration": {}}},
            "f:spec": spec_fields}})
}

/// §8 step 3: `kubectl replace` rewrites the baseline to the replaced manifest and owns it;
/// what the rewritten baseline says is not what was declared. What a real API server wrote
/// (agent/tests/fixtures/audit/deployments.yaml, objects `replaced*` and `reapplied`).
#[test]
fn a_rewritten_baseline_makes_every_field_an_imperative_edit_owns_drift() {
    let managers = managers();
    let strict = rules(&[(
        "web",
        "mode: enforce\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\n",
    )]);
    let lenient = rules(&[("web", WEB)]);
    let replaced_at = "2026-07-28T13:00:00Z";
    let replicas_owned = json!({"f:replicas": {}});
    // Applied with replicas 2, replaced with 4: the baseline now says 4.
    let replaced = live_as_applied(
        "web:1",
        4,
        json!([rewrote_baseline(
            "kubectl-replace",
            replaced_at,
            replicas_owned.clone()
        )]),
    );
    // Then applied again as declared: kubectl apply takes the annotation and the field back.
    let reapplied = live_as_applied(
        "web:1",
        2,
        json!([{"manager": "kubectl-client-side-apply", "operation": "Update", "time": "2026-07-28T14:00:00Z",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {
                "f:kubectl.kubernetes.io/last-applied-configuration": {}}}, "f:spec": {"f:replicas": {}}}}]),
    );
    // Replaced after a `kubectl set image`: the image the replace kept is drift too.
    let set_then_replaced = live_as_applied(
        "web:2",
        4,
        json!([
            set_image_entry(),
            rewrote_baseline("kubectl-replace", replaced_at, replicas_owned.clone())
        ]),
    );
    // A `kubectl edit` of the annotation alone rewrites it just the same.
    let annotation_edited = live_as_applied(
        "web:1",
        3,
        json!([rewrote_baseline(
            "kubectl-edit",
            replaced_at,
            json!({"f:replicas": {}})
        )]),
    );
    // The rewriting manager is not one of `--audit-drift-managers`: the baseline is trusted.
    let others: Vec<String> = vec!["kubectl-set".into()];
    struct Case<'a> {
        name: &'a str,
        rules: &'a RuleSet,
        object: &'a Value,
        managers: &'a [String],
        label: &'a str,
        /// (path, manager) of each uncovered change, whose `old` is unknown.
        drifted: &'a [(&'a str, &'a str)],
    }
    let cases = [
        Case {
            name: "replaced",
            rules: &strict,
            object: &replaced,
            managers: &managers,
            label: "drifted",
            drifted: &[("spec.replicas", "kubectl-replace")],
        },
        Case {
            name: "replaced, replicas mutable",
            rules: &lenient,
            object: &replaced,
            managers: &managers,
            label: "clean",
            drifted: &[],
        },
        Case {
            name: "applied again",
            rules: &strict,
            object: &reapplied,
            managers: &managers,
            label: "clean",
            drifted: &[],
        },
        Case {
            name: "set, then replaced",
            rules: &strict,
            object: &set_then_replaced,
            managers: &managers,
            label: "drifted",
            drifted: &[
                ("spec.replicas", "kubectl-replace"),
                ("spec.template.spec.containers[0].image", "kubectl-set"),
            ],
        },
        Case {
            name: "annotation edited",
            rules: &strict,
            object: &annotation_edited,
            managers: &managers,
            label: "drifted",
            drifted: &[("spec.replicas", "kubectl-edit")],
        },
        Case {
            name: "rewriter not named",
            rules: &strict,
            object: &replaced,
            managers: &others,
            label: "clean",
            drifted: &[],
        },
    ];
    for case in cases {
        let audit = run(case.rules, case.object, case.managers);
        assert_eq!(
            audit.result_label(),
            case.label,
            "{}: {}",
            case.name,
            audit.reason()
        );
        let uncovered: Vec<_> = audit.changes().iter().filter(|c| !c.mutable).collect();
        let found: Vec<(&str, &str)> = uncovered
            .iter()
            .map(|c| {
                (
                    c.path.as_str(),
                    c.edit.as_ref().map_or("", |e| e.manager.as_ref()),
                )
            })
            .collect();
        assert_eq!(found, case.drifted, "{}", case.name);
        for change in &uncovered {
            assert_eq!(
                change.change.old, None,
                "{}: no declared value is known",
                case.name
            );
            assert!(change.declared_unknown, "{}", case.name);
            assert!(
                change.text().contains(": <unknown> → "),
                "{}: {}",
                case.name,
                change.text()
            );
        }
        if case.label == "drifted" {
            let AuditResult::Drifted(comparison) = &audit.result else {
                unreachable!()
            };
            let rewriter = comparison
                .baseline_rewritten_by
                .as_ref()
                .expect("the rewriting edit");
            assert_eq!(rewriter.time.as_deref(), Some(replaced_at));
            let reason = audit.reason();
            assert!(
                reason.starts_with(&format!(
                    "Drift Sentinel: drift from the declared state ({rewriter} rewrote the kubectl.kubernetes.io/last-applied-configuration baseline, so every field an imperative edit owns is drift): {}",
                    case.drifted[0].0
                )),
                "{}: {reason}",
                case.name
            );
        }
    }
    // The value the rewritten baseline holds is never shown as the declared one.
    let audit = run(&strict, &replaced, &managers);
    assert!(!audit.reason().contains("4 → 4"), "{}", audit.reason());
}

const SELECTING_RULE: &str =
    "mode: enforce\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\n";

#[test]
fn the_namespace_mode_applies_and_unselected_objects_are_not_judged() {
    let rules = rules(&[("web", SELECTING_RULE)]);
    let documents = crate::manifests::parse_documents(
        "kind: Namespace\nmetadata: {name: shop, annotations: {drift-sentinel.k8s.io/mode: 'off'}}\n",
        "ns.yaml",
    )
    .unwrap();
    let namespaces = crate::manifests::namespaces(&documents);
    let object = declared("nginx:1", 5);
    let audit = audit_object(&rules, &namespaces, &object, &[], NOW).unwrap();
    assert_eq!(audit.result_label(), "skipped");
    let unannotated = crate::manifests::Namespaces::new();
    let audit = audit_object(&rules, &unannotated, &object, &[], NOW).unwrap();
    assert_eq!(audit.result_label(), "no_baseline");
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
    assert!(audit_object(&rules, &namespaces, &pod, &[], NOW).is_none());
}

#[test]
fn resources_of_a_list() {
    assert_eq!(
        parse_resources(&["apps/deployments,/pods", "x/", "services"]),
        [
            ("apps".to_owned(), "deployments".to_owned()),
            (String::new(), "pods".to_owned()),
            (String::new(), "services".to_owned())
        ]
    );
}

#[test]
fn bypasses_are_listed_and_an_expired_one_no_longer_hides_drift() {
    let rules = rules(&[("web", WEB)]);
    let now = crate::time::parse_rfc3339("2026-12-04T12:00:00Z").unwrap();
    let context = |managers| AuditContext {
        namespace_mode: None,
        drift_managers: managers,
        now,
    };
    let managers = managers();
    let annotated = |value: &str| {
        let mut object = live(
            &declared("web:1", 2),
            "web:2",
            2,
            json!([
                {"manager": "kubectl-annotate", "operation": "Update", "time": "2026-12-04T08:00:00Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {"f:drift-sentinel.k8s.io/bypass": {}}}}},
                {"manager": "kubectl-client-side-apply", "operation": "Update", "time": "2026-12-01T08:00:00Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {"f:kubectl.kubernetes.io/last-applied-configuration": {}}}}}
            ]),
        );
        object["metadata"]["annotations"]["drift-sentinel.k8s.io/bypass"] = json!(value);
        object
    };
    // (value, result, end label, what the finding says)
    let cases = [
        (
            "true",
            "skipped",
            "none",
            "bypass without an end (set by kubectl-annotate at 2026-12-04T08:00:00Z)",
        ),
        (
            "2026-12-04T16:00:00Z",
            "skipped",
            "active",
            "bypass until 2026-12-04T16:00:00Z (set by kubectl-annotate at 2026-12-04T08:00:00Z)",
        ),
        (
            "2026-12-04T12:00:00Z",
            "drifted",
            "expired",
            "no bypass: its end 2026-12-04T12:00:00Z has passed (set by kubectl-annotate at 2026-12-04T08:00:00Z)",
        ),
        (
            "someday",
            "drifted",
            "not-honoured",
            "no bypass: \"someday\" is neither",
        ),
    ];
    for (value, result, end, says) in cases {
        let object = annotated(value);
        let audit = audit(&rules, &object, &context(&managers), Detail::Verdict);
        assert_eq!(audit.result_label(), result, "{value}: {}", audit.reason());
        let finding = audit.bypass.as_ref().expect("the bypass is found");
        assert_eq!(finding.end().as_str(), end, "{value}");
        assert!(finding.to_string().starts_with(says), "{value}: {finding}");
        if result == "drifted" {
            // The drift made under the bypass shows once it is none, and the reason says why.
            assert_eq!(
                audit.drift().unwrap().denied,
                ["spec.template.spec.containers[0].image"]
            );
            assert!(
                audit
                    .reason()
                    .contains("; annotation drift-sentinel.k8s.io/bypass is no bypass: "),
                "{}",
                audit.reason()
            );
        }
    }
    // Who set it, when the audit knows the user (from the webhook's record of that edit).
    let object = annotated("true");
    let mut bypassed = audit(&rules, &object, &context(&managers), Detail::Verdict);
    let finding = bypassed.bypass.as_mut().expect("the bypass is found");
    assert_eq!(finding.user, None);
    finding.user = Some("carol".into());
    assert_eq!(
        finding.to_string(),
        "bypass without an end (set by user carol with kubectl-annotate at 2026-12-04T08:00:00Z)"
    );
    // No annotation: nothing to list.
    let object = live(&declared("web:1", 2), "web:2", 2, json!([]));
    assert!(
        audit(&rules, &object, &context(&managers), Detail::Verdict)
            .bypass
            .is_none()
    );
}

/// The audit's texts and ids of one finding judged at two times: the same id, texts without a
/// relative time (Policy Reporter derives a result's id from its message, and notifies on new
/// ids); a different finding, a different id.
#[test]
fn a_finding_has_the_same_id_and_text_at_every_run() {
    let rules = rules(&[("web", WEB)]);
    let capped = self::rules(&[("web", &format!("{WEB}maxBypass: 1h\n"))]);
    let managers = managers();
    let at = |time: &str| crate::time::parse_rfc3339(time).unwrap();
    let (run_1, run_2) = (at("2026-12-04T12:00:00Z"), at("2026-12-04T12:10:04Z"));
    let with_bypass = |name: &str, value: &str| {
        let mut object = live(&declared("web:1", 2), "web:2", 2, json!([]));
        object["metadata"]["name"] = json!(name);
        object["metadata"]["uid"] = json!(format!("uid-{name}"));
        object["metadata"]["annotations"]["drift-sentinel.k8s.io/bypass"] = json!(value);
        object
    };
    // (rules, object, result): drift under a bypass that is none (expired, beyond maxBypass,
    // garbled), and the bypasses honoured, with and without an end.
    let objects = [
        (
            &rules,
            with_bypass("expired", "2026-12-04T11:00:00Z"),
            "drifted",
        ),
        (
            &capped,
            with_bypass("beyond", "2026-12-05T11:00:00Z"),
            "drifted",
        ),
        (&rules, with_bypass("garbled", "next tuesday"), "drifted"),
        (
            &rules,
            with_bypass("ahead", "2026-12-04T18:00:00Z"),
            "skipped",
        ),
        (&rules, with_bypass("forever", "true"), "skipped"),
    ];
    let mut ids = std::collections::BTreeSet::new();
    for (rules, object, result) in &objects {
        let identity = AuditedObject::of(object, "deployments");
        let judged = |now| {
            let context = AuditContext {
                namespace_mode: None,
                drift_managers: &managers,
                now,
            };
            let audit = audit(rules, object, &context, Detail::Verdict);
            let text = audit
                .bypass
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default();
            (
                audit.result_label(),
                audit.finding_id(&identity),
                audit.reason(),
                text,
            )
        };
        let (first, second) = (judged(run_1), judged(run_2));
        assert_eq!(first.0, *result, "{}", first.2);
        assert_eq!(first, second, "the same finding ten minutes later");
        let id = first.1.expect("a drift or a bypass has an id");
        assert_eq!(id.len(), 32);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        assert!(ids.insert(id), "a different finding, a different id");
        for text in [&first.2, &first.3] {
            assert!(
                !text.contains(" ago") && !text.contains(", in "),
                "no relative time: {text}"
            );
        }
    }
    for (index, says) in [
        (0, "is no bypass: its end 2026-12-04T11:00:00Z has passed;"),
        (
            1,
            "is no bypass: its end 2026-12-05T11:00:00Z is further ahead than the rule's maxBypass of 1h;",
        ),
    ] {
        let (rules, object, _) = &objects[index];
        let reason = judged_reason(rules, object, &managers, run_2);
        assert!(reason.contains(says), "{reason}");
    }

    // The same object with another drifted path, another mode, another uid or another bypass
    // value is another finding; a changed live value of the same path is the same one.
    let base = with_bypass("expired", "2026-12-04T11:00:00Z");
    let id_of = |object: &Value, rules: &RuleSet| {
        let context = AuditContext {
            namespace_mode: None,
            drift_managers: &managers,
            now: run_1,
        };
        audit(rules, object, &context, Detail::Verdict)
            .finding_id(&AuditedObject::of(object, "deployments"))
            .unwrap()
    };
    let same = id_of(&base, &rules);
    let mut other_value = base.clone();
    other_value["spec"]["template"]["spec"]["containers"][0]["image"] = json!("web:3");
    assert_eq!(
        id_of(&other_value, &rules),
        same,
        "same path, another value"
    );
    let mut other_path = base.clone();
    other_path["spec"]["template"]["spec"]["containers"][0]["name"] = json!("renamed");
    let mut other_uid = base.clone();
    other_uid["metadata"]["uid"] = json!("uid-recreated");
    let warn_rules = rules_warn();
    for (what, id) in [
        ("another path", id_of(&other_path, &rules)),
        ("another uid", id_of(&other_uid, &rules)),
        ("another mode", id_of(&base, &warn_rules)),
    ] {
        assert_ne!(id, same, "{what}");
    }
    let ahead = |value: &str| id_of(&with_bypass("ahead", value), &rules);
    assert_ne!(ahead("2026-12-04T18:00:00Z"), ahead("2026-12-04T19:00:00Z"));

    // Nothing reported, no id.
    let clean = live_as_applied("web:1", 2, json!([]));
    let audit = run(&rules, &clean, &managers);
    assert_eq!(audit.result_label(), "clean");
    assert!(
        audit
            .finding_id(&AuditedObject::of(&clean, "deployments"))
            .is_none()
    );
}

fn rules_warn() -> RuleSet {
    rules(&[("web", &WEB.replace("mode: enforce", "mode: warn"))])
}

fn judged_reason(
    rules: &RuleSet,
    object: &Value,
    managers: &[String],
    now: std::time::SystemTime,
) -> String {
    let context = AuditContext {
        namespace_mode: None,
        drift_managers: managers,
        now,
    };
    audit(rules, object, &context, Detail::Verdict).reason()
}
