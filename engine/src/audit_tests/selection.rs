//! Which objects and rules an audit judges: auditing rules and kinds, the namespace's mode
//! (an invalid one reported), and the resources of a list.

use super::*;

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
