use std::time::SystemTime;

use drift_api::events::{Why, reason};
use drift_engine::{Context, Detail, RuleSet, evaluate, parse_review};
use serde_json::{Value, json};

use super::*;

fn rules(mode: &str) -> RuleSet {
    RuleSet::build([drift_engine::RuleSource {
        id: drift_engine::RuleId {
            namespace: "ops".into(),
            name: "web".into(),
        },
        spec: drift_engine::SpecText::Yaml(format!(
            "mode: {mode}\nnamespaces: ['*']\nselectors: [{{apiGroup: apps, kind: Deployment}}]\nmutable: ['spec.template.spec.containers[*].image']\nexemptUsers: [ci-bot]\n"
        )),
        origin: None,
    }])
}

fn deployment(replicas: u32, annotations: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "uid": "u-1", "annotations": annotations},
        "spec": {"replicas": replicas}})
}

fn intents(mode: &str, old: Value, new: Value, user: &str) -> Vec<Intent> {
    let review = drift_engine::review::update_review(old, new, user, "req-1").unwrap();
    let parsed = parse_review(review.to_string().as_bytes()).unwrap();
    let request = parsed.request.unwrap();
    let rules = rules(mode);
    let now = SystemTime::now();
    let evaluation = evaluate(&rules, &request, &Context::at(now), Detail::Verdict);
    assert!(rules.invalid().is_empty(), "{:?}", rules.invalid());
    intents_of(&request, &evaluation, now)
}

#[test]
fn each_finding_makes_its_event() {
    let none = json!({});
    let bypass = json!({"drift-sentinel.k8s.io/bypass": "true"});
    let expired = json!({"drift-sentinel.k8s.io/bypass": "2020-01-01T00:00:00Z"});
    let cases: [(&str, Value, Value, &str, &[&str]); 7] = [
        (
            "warn",
            deployment(3, none.clone()),
            deployment(5, none.clone()),
            "alice",
            &[reason::DRIFT_WARNED],
        ),
        (
            "dry-run",
            deployment(3, none.clone()),
            deployment(5, none.clone()),
            "alice",
            &[reason::DRIFT_DRY_RUN],
        ),
        (
            "enforce",
            deployment(3, none.clone()),
            deployment(5, none.clone()),
            "alice",
            &[reason::DRIFT_DENIED],
        ),
        (
            "enforce",
            deployment(3, bypass.clone()),
            deployment(5, bypass.clone()),
            "alice",
            &[reason::BYPASS_USED],
        ),
        (
            "warn",
            deployment(3, expired.clone()),
            deployment(5, expired.clone()),
            "alice",
            &[reason::BYPASS_NOT_HONOURED, reason::DRIFT_WARNED],
        ),
        (
            "enforce",
            deployment(3, none.clone()),
            deployment(5, none.clone()),
            "ci-bot",
            &[reason::EDIT_NOT_COMPARED],
        ),
        // Nothing to tell: no change.
        (
            "warn",
            deployment(3, none.clone()),
            deployment(3, none.clone()),
            "alice",
            &[],
        ),
    ];
    for (mode, old, new, user, want) in cases {
        let got: Vec<&str> = intents(mode, old, new, user)
            .iter()
            .map(|i| i.reason)
            .collect();
        assert_eq!(got, want, "{mode} {user}");
    }
}

#[test]
fn a_warned_edit_names_the_user_the_fields_and_the_rule_and_records_the_edit() {
    let intents = intents(
        "warn",
        deployment(3, json!({})),
        deployment(5, json!({})),
        "alice",
    );
    let [intent] = intents.as_slice() else {
        panic!("{intents:?}")
    };
    assert_eq!(intent.regarding.uid, "u-1");
    assert_eq!(intent.regarding.kind, "Deployment");
    assert_eq!(intent.regarding.api_version, "apps/v1");
    let Note::Latest(note) = &intent.note else {
        panic!()
    };
    assert!(
        note.contains("alice") && note.contains("spec.replicas: 3 → 5") && note.contains("ops/web"),
        "{note}"
    );
    let (why, edit) = intent.record.as_ref().unwrap();
    assert_eq!(why, &Why::WarnMode);
    assert_eq!(edit.fields.len(), 1);
    assert_eq!(edit.fields[0].path, "spec.replicas");
    assert_eq!(
        edit.fields[0].new,
        drift_engine::attribution::fingerprint(Some(&json!(5)))
    );
}

#[test]
fn a_denial_is_counted_on_the_rule_config_map_and_a_dry_run_request_makes_none() {
    let intents = intents(
        "enforce",
        deployment(3, json!({})),
        deployment(5, json!({})),
        "alice",
    );
    let [intent] = intents.as_slice() else {
        panic!("{intents:?}")
    };
    assert_eq!(
        (
            intent.regarding.kind.as_str(),
            intent.regarding.namespace.as_str(),
            intent.regarding.name.as_str()
        ),
        ("ConfigMap", "ops", "web")
    );
    let Note::Counted { last, .. } = &intent.note else {
        panic!()
    };
    assert!(
        last.starts_with("Deployment shop/web by alice: spec.replicas: 3 → 5"),
        "{last}"
    );

    let mut review = drift_engine::review::update_review(
        deployment(3, json!({})),
        deployment(5, json!({})),
        "alice",
        "r",
    )
    .unwrap();
    review["request"]["dryRun"] = json!(true);
    let request = parse_review(review.to_string().as_bytes())
        .unwrap()
        .request
        .unwrap();
    let rules = rules("warn");
    let now = SystemTime::now();
    let evaluation = evaluate(&rules, &request, &Context::at(now), Detail::Verdict);
    assert!(intents_of(&request, &evaluation, now).is_empty());
}

/// A deployment whose bypass annotation `value` is owned by `manager`'s `Update` at `time`.
fn bypassed_by(replicas: u32, manager: &str, time: &str) -> Value {
    let mut object = deployment(replicas, json!({"drift-sentinel.k8s.io/bypass": "true"}));
    object["metadata"]["managedFields"] = json!([
        {"manager": "kubectl-client-side-apply", "operation": "Update",
         "time": "2027-01-15T07:00:00Z", "fieldsType": "FieldsV1",
         "fieldsV1": {"f:spec": {"f:replicas": {}}}},
        {"manager": manager, "operation": "Update", "time": time, "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:annotations": {"f:drift-sentinel.k8s.io/bypass": {}}}}},
    ]);
    object
}

#[test]
fn an_edit_under_a_bypass_names_its_setter_only_while_the_annotation_keeps_its_owner() {
    let set_by =
        |old: Value, new: Value, user: &str, setters: &mut super::super::setters::Setters| {
            let intents = intents("enforce", old, new, user);
            let [intent] = intents.as_slice() else {
                panic!("{intents:?}")
            };
            assert_eq!(intent.reason, reason::BYPASS_USED);
            setters.observe("u-1", user, intent.bypass.as_ref().unwrap(), intent.at)
        };
    let mut setters = super::super::setters::Setters::default();
    let unbypassed = deployment(3, json!({}));
    let carol = bypassed_by(3, "kubectl-annotate", "2027-01-15T08:00:00Z");
    // carol sets the bypass in an edit seen.
    assert_eq!(
        set_by(unbypassed, carol.clone(), "carol", &mut setters),
        Some("carol".into())
    );
    // dave scales under it: the annotation is carol's entry's still.
    let mut scaled = carol.clone();
    scaled["spec"]["replicas"] = json!(5);
    assert_eq!(
        set_by(carol, scaled, "dave", &mut setters),
        Some("carol".into())
    );
    // Removed and set again by edits not seen: the annotation's entry has another time.
    let again = bypassed_by(5, "kubectl-annotate", "2027-01-15T09:00:00Z");
    let mut scaled = again.clone();
    scaled["spec"]["replicas"] = json!(7);
    assert_eq!(set_by(again, scaled, "dave", &mut setters), None);
}
