//! The audit's texts and ids: the same at every run for the same finding.

use super::*;

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
