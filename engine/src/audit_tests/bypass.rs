//! Bypassed objects: listed, and an expired bypass no longer hides drift.

use super::*;

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
