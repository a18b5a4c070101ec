//! A bypass that ends (reference §3 step 4), through the public API at a fixed time: which
//! annotation values are honoured at the boundaries (an end exactly now, a second past,
//! `maxBypass` exactly and a second over, time zones), the warning every bypassed edit gets,
//! and the reason of an edit whose bypass was not honoured.

#[path = "common/requests.rs"]
mod requests;

use drift_engine::{Context, Detail, RuleSet, Step, evaluate};
use requests::{deployment, rule, update};
use serde_json::json;
use std::time::SystemTime;

const RULE: &str =
    "mode: enforce\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\n";
const CAPPED: &str = "mode: enforce\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\nmaxBypass: 72h\n";
const WARN_CAPPED: &str = "mode: warn\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\nmaxBypass: 72h\n";

fn now() -> SystemTime {
    drift_engine::time::parse_rfc3339("2026-12-04T12:00:00Z").unwrap()
}

/// A replicas edit 3 → 5 whose new object carries the bypass annotation `value`.
fn bypassed_edit(value: &str) -> drift_engine::AdmissionRequest {
    let mut new = deployment("nginx:1", 5);
    new["metadata"]["annotations"] = json!({"drift-sentinel.k8s.io/bypass": value});
    update(deployment("nginx:1", 3), new)
}

struct Case {
    spec: &'static str,
    value: &'static str,
    step: Step,
    allowed: bool,
    /// What the first warning (bypassed) or the reason (judged) says about the bypass.
    says: &'static str,
}

#[test]
fn bypass_ends_at_the_boundaries() {
    let honoured = |spec, value, says| Case {
        spec,
        value,
        step: Step::Bypassed,
        allowed: true,
        says,
    };
    let refused = |spec, value, says| Case {
        spec,
        value,
        step: Step::Violation,
        allowed: false,
        says,
    };
    let cases = [
        honoured(
            RULE,
            "true",
            "Drift Sentinel: bypass without an end: rule ops/r does not judge edits of this object while annotation drift-sentinel.k8s.io/bypass is set",
        ),
        honoured(RULE, " True ", "bypass without an end"),
        honoured(
            RULE,
            "2026-12-04T12:00:01Z",
            "Drift Sentinel: bypass until 2026-12-04T12:00:01Z, in 1s: rule ops/r",
        ),
        honoured(
            RULE,
            "2026-12-06T16:00:00Z",
            "bypass until 2026-12-06T16:00:00Z, in 2d4h",
        ),
        // Time zones: the same instant written with an offset.
        honoured(
            RULE,
            "2026-12-06T18:00:00+02:00",
            "bypass until 2026-12-06T16:00:00Z, in 2d4h",
        ),
        honoured(
            RULE,
            "2026-12-04T07:00:01-05:00",
            "bypass until 2026-12-04T12:00:01Z, in 1s",
        ),
        // The last second RFC 3339 can write (jiff's own timestamps stop a day short).
        honoured(
            RULE,
            "9999-12-31T23:59:59Z",
            "Drift Sentinel: bypass until 9999-12-31T23:59:59Z, in 2912105d11h: rule ops/r",
        ),
        honoured(
            RULE,
            "9999-12-31T22:59:59-01:00",
            "bypass until 9999-12-31T23:59:59Z, in 2912105d11h",
        ),
        // A time whose offset puts it past year 9999 in UTC is none.
        refused(
            RULE,
            "9999-12-31T23:59:59-00:01",
            "is no bypass: \"9999-12-31T23:59:59-00:01\" is neither",
        ),
        // maxBypass exactly is honoured.
        honoured(
            CAPPED,
            "2026-12-07T12:00:00Z",
            "bypass until 2026-12-07T12:00:00Z, in 3d",
        ),
        // An end exactly now has ended; a second past too.
        refused(
            RULE,
            "2026-12-04T12:00:00Z",
            "; annotation drift-sentinel.k8s.io/bypass is no bypass: its end 2026-12-04T12:00:00Z passed 0s ago; rule ops/r",
        ),
        refused(
            RULE,
            "2026-12-04T11:59:59Z",
            "is no bypass: its end 2026-12-04T11:59:59Z passed 1s ago",
        ),
        refused(
            RULE,
            "2026-12-04T13:59:59+02:00",
            "is no bypass: its end 2026-12-04T11:59:59Z passed 1s ago",
        ),
        // A second over maxBypass; `true` under maxBypass.
        refused(
            CAPPED,
            "2026-12-07T12:00:01Z",
            "is no bypass: its end 2026-12-07T12:00:01Z is 3d ahead, more than the rule's maxBypass of 3d",
        ),
        refused(
            CAPPED,
            "true",
            "is no bypass: \"true\" has no end, and the rule's maxBypass allows at most 3d ahead",
        ),
        // Any other value.
        refused(
            RULE,
            "false",
            "is no bypass: \"false\" is neither \"true\" nor an RFC 3339 time",
        ),
        refused(
            RULE,
            "2026-12-07T12:00:00",
            "is no bypass: \"2026-12-07T12:00:00\" is neither",
        ),
        refused(RULE, "", "is no bypass: \"\" is neither"),
    ];
    for case in cases {
        let rules = RuleSet::build([rule("ops", "r", case.spec)]);
        let request = bypassed_edit(case.value);
        let evaluation = evaluate(&rules, &request, &Context::at(now()), Detail::Verdict);
        let name = format!("{:?} under {:?}", case.value, case.spec);
        assert_eq!(
            evaluation.step(),
            case.step,
            "{name}: {}",
            evaluation.reason()
        );
        assert_eq!(evaluation.allowed(), case.allowed, "{name}");
        let warnings = evaluation.warnings();
        if case.step == Step::Bypassed {
            assert_eq!(warnings.len(), 1, "{name}: {warnings:?}");
            assert!(warnings[0].contains(case.says), "{name}: {warnings:?}");
            assert!(warnings[0].starts_with("Drift Sentinel: bypass "), "{name}");
        } else {
            assert!(warnings.is_empty(), "{name}: {warnings:?}");
            let reason = evaluation.reason();
            assert!(reason.contains(case.says), "{name}: {reason}");
            assert_eq!(evaluation.denied_paths(), ["spec.replicas"], "{name}");
        }
    }
}

#[test]
fn an_allowed_edit_names_a_bypass_that_was_not_honoured() {
    let rules = RuleSet::build([rule("ops", "r", WARN_CAPPED)]);
    // Warn mode: the violation is the first warning, and its reason says why.
    let request = bypassed_edit("2026-12-04T11:00:00Z");
    let evaluation = evaluate(&rules, &request, &Context::at(now()), Detail::Verdict);
    assert_eq!(evaluation.step(), Step::Violation);
    let warnings = evaluation.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("its end 2026-12-04T11:00:00Z passed 1h ago"),
        "{warnings:?}"
    );

    // No change at all: the edit is allowed, and a warning says the annotation is no bypass.
    let mut object = deployment("nginx:1", 3);
    object["metadata"]["annotations"] = json!({"drift-sentinel.k8s.io/bypass": "true"});
    let request = update(object.clone(), object);
    let evaluation = evaluate(&rules, &request, &Context::at(now()), Detail::Verdict);
    assert_eq!(evaluation.step(), Step::NoChanges);
    assert_eq!(
        evaluation.warnings(),
        [
            "Drift Sentinel: annotation drift-sentinel.k8s.io/bypass is no bypass: \"true\" has no end, and the rule's maxBypass allows at most 3d ahead; rule ops/r judges edits of this object"
        ]
    );
}

#[test]
fn the_denial_says_how_to_bypass_under_the_rule() {
    let edit = update(deployment("nginx:1", 3), deployment("nginx:1", 5));
    for (spec, hint) in [
        (
            RULE,
            "to bypass, set annotation drift-sentinel.k8s.io/bypass to an RFC 3339 end (kubectl drift bypass KIND/NAME --for DURATION), or \"true\" for no end",
        ),
        (
            CAPPED,
            "to bypass, set annotation drift-sentinel.k8s.io/bypass to an RFC 3339 end at most 3d ahead (kubectl drift bypass KIND/NAME --for DURATION)",
        ),
    ] {
        let rules = RuleSet::build([rule("ops", "r", spec)]);
        let evaluation = evaluate(&rules, &edit, &Context::at(now()), Detail::Verdict);
        assert!(
            evaluation.reason().ends_with(hint),
            "{}",
            evaluation.reason()
        );
    }
}

#[test]
fn clearing_a_bypass_and_its_reason_is_no_change() {
    let rules = RuleSet::build([rule("ops", "r", RULE)]);
    let mut old = deployment("nginx:1", 3);
    old["metadata"]["annotations"] = json!({
        "drift-sentinel.k8s.io/bypass": "2026-12-04T16:00:00Z",
        "drift-sentinel.k8s.io/bypass-reason": "INC-42: scaling by hand"
    });
    let request = update(old, deployment("nginx:1", 3));
    let evaluation = evaluate(&rules, &request, &Context::at(now()), Detail::Verdict);
    assert_eq!(
        evaluation.step(),
        Step::NoChanges,
        "{}",
        evaluation.reason()
    );
    assert!(evaluation.warnings().is_empty());
}
