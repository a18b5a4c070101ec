//! Edits made without `kubectl apply` (no baseline to compare with, or a baseline that
//! `kubectl replace` rewrote), and the `mutable` fields that are never drift.

use super::*;

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
