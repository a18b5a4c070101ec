//! reference §8 step 2, row by row, and the properties every baseline comparison keeps.

use super::*;
use crate::json::LazyValue;
use crate::path::PathPattern;
use crate::rule::never_compared;
use proptest::prelude::*;
use serde_json::json;

fn patterns(texts: &[&str]) -> Vec<PathPattern> {
    texts
        .iter()
        .map(|t| PathPattern::parse(t).unwrap())
        .collect()
}

fn rule_scope(include: &[&str], exclude: &[&str]) -> Scope {
    let mut skip = never_compared(crate::rule::DEFAULT_BYPASS_ANNOTATION);
    skip.extend(patterns(exclude));
    Scope::new((!include.is_empty()).then(|| patterns(include)), skip)
}

fn drifted(declared: &Value, live: &Value, include: &[&str], exclude: &[&str]) -> Vec<String> {
    let mut paths: Vec<String> = changes(
        declared,
        live,
        &rule_scope(include, exclude),
        &[],
        OmittedZeros::NONE,
    )
    .into_iter()
    .map(|c| c.path.to_string())
    .collect();
    paths.sort();
    paths
}

fn deployment(containers: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
        "spec": {"replicas": 2, "template": {"spec": {"containers": containers}}}
    })
}

/// The live object as the API server returns it: the declared one plus server defaults,
/// controller fields and system fields.
fn served(declared: &Value) -> Value {
    let mut live = declared.clone();
    live["metadata"]["uid"] = json!("u-1");
    live["metadata"]["resourceVersion"] = json!("42");
    live["metadata"]["generation"] = json!(3);
    live["metadata"]["managedFields"] = json!([{"manager": "kube-controller-manager"}]);
    live["metadata"]["annotations"] = json!({"deployment.kubernetes.io/revision": "3"});
    live["spec"]["strategy"] = json!({"type": "RollingUpdate"});
    live["spec"]["revisionHistoryLimit"] = json!(10);
    if let Some(containers) = live["spec"]["template"]["spec"]["containers"].as_array_mut() {
        for c in containers {
            c["imagePullPolicy"] = json!("IfNotPresent");
            c["terminationMessagePath"] = json!("/dev/termination-log");
        }
    }
    live["status"] = json!({"replicas": 2, "readyReplicas": 1});
    live
}

struct Row {
    name: &'static str,
    declared: Value,
    live: Value,
    include: &'static [&'static str],
    exclude: &'static [&'static str],
    want: &'static [&'static str],
}

fn row(name: &'static str, declared: Value, live: Value, want: &'static [&'static str]) -> Row {
    Row {
        name,
        declared,
        live,
        include: &[],
        exclude: &[],
        want,
    }
}

#[test]
fn section_8_step_2() {
    let app = |image: &str| json!([{"name": "app", "image": image}]);
    let declared = deployment(app("web:1"));
    let rows = vec![
        row(
            "the live object as served (defaults, system fields) does not drift",
            declared.clone(),
            served(&declared),
            &[],
        ),
        row(
            "a declared field whose live value differs is a change",
            declared.clone(),
            served(&deployment(app("web:2"))),
            &["spec.template.spec.containers[0].image"],
        ),
        {
            let mut live = served(&declared);
            live["spec"]["replicas"] = json!(2.0);
            row("numbers compare numerically", declared.clone(), live, &[])
        },
        {
            let mut live = served(&declared);
            live["spec"]["replicas"] = json!(5);
            row(
                "a declared scalar changed",
                declared.clone(),
                live,
                &["spec.replicas"],
            )
        },
        {
            let mut declared = declared.clone();
            declared["spec"]["paused"] = json!(null);
            declared["spec"]["template"]["metadata"] = json!({});
            let mut live = served(&declared);
            live["spec"]["paused"] = json!(true);
            live["spec"]["template"]["metadata"] = json!({"labels": {"x": "1"}});
            row(
                "null and {} declare nothing (§4 normalisation)",
                declared,
                live,
                &[],
            )
        },
        {
            let mut live = served(&declared);
            live["spec"]["progressDeadlineSeconds"] = json!(600);
            live["metadata"]["labels"]["team"] = json!("b");
            row(
                "fields the baseline does not declare never drift",
                declared.clone(),
                live,
                &[],
            )
        },
        {
            let mut live = served(&declared);
            live["metadata"]["labels"] = json!({"team": "b"});
            row(
                "a declared map entry missing live is a change at its key",
                declared.clone(),
                live,
                &["metadata.labels.app"],
            )
        },
        {
            let mut live = served(&declared);
            live["spec"]["replicas"] = json!("2");
            row(
                "a value of another type",
                declared.clone(),
                live,
                &["spec.replicas"],
            )
        },
        {
            let declared =
                deployment(json!([{"name": "app", "image": "a"}, {"name": "log", "image": "l"}]));
            let live = served(&deployment(json!([{"name": "app", "image": "a"}])));
            row(
                "a declared element missing live is a change at the element's path",
                declared,
                live,
                &["spec.template.spec.containers[1]"],
            )
        },
        {
            let declared =
                deployment(json!([{"name": "app", "image": "a"}, {"name": "log", "image": "l"}]));
            let live = served(&deployment(
                json!([{"name": "sidecar", "image": "s"}, {"name": "log", "image": "l2"}, {"name": "app", "image": "a"}]),
            ));
            row(
                "a keyed element differing in a declared field, at its live index; live-only elements are not drift",
                declared,
                live,
                &["spec.template.spec.containers[1].image"],
            )
        },
        {
            let declared = deployment(
                json!([{"name": "app", "image": "a", "env": [{"name": "A", "value": "1"}]}]),
            );
            let live = served(&deployment(
                json!([{"name": "app", "image": "a", "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "9"}]}]),
            ));
            row(
                "nested keyed lists (env by name)",
                declared,
                live,
                &["spec.template.spec.containers[0].env[1].value"],
            )
        },
        {
            let declared = deployment(json!([{"name": "app", "ports": [{"containerPort": 80}]}]));
            let live = served(&deployment(
                json!([{"name": "app", "ports": [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 53, "protocol": "UDP"}]}]),
            ));
            row(
                "ports keyed by (containerPort, protocol), TCP by default",
                declared,
                live,
                &[],
            )
        },
        {
            let declared = deployment(json!([{"name": "app", "args": ["--a", "--b"]}]));
            let live = served(&deployment(
                json!([{"name": "app", "args": ["--a", "--b", "--debug"]}]),
            ));
            row(
                "lists of scalars compare whole: an extra live element drifts",
                declared,
                live,
                &["spec.template.spec.containers[0].args[2]"],
            )
        },
        {
            let declared = json!({"kind": "X", "spec": {"rules": [{"host": "a"}, {"host": "b"}]}});
            let live = json!({"kind": "X", "spec": {"rules": [{"host": "a"}, {"host": "b"}, {"host": "c"}]}});
            row(
                "lists without a key compare whole",
                declared,
                live,
                &["spec.rules[2]"],
            )
        },
        {
            let mut declared = declared.clone();
            declared["status"] = json!({"replicas": 9});
            declared["metadata"]["resourceVersion"] = json!("1");
            row(
                "system fields are never compared",
                declared.clone(),
                served(&deployment(app("web:1"))),
                &[],
            )
        },
        {
            let mut live = served(&deployment(app("web:2")));
            live["spec"]["replicas"] = json!(7);
            Row {
                include: &["spec.replicas"],
                ..row(
                    "include keeps only its subtrees",
                    declared.clone(),
                    live,
                    &["spec.replicas"],
                )
            }
        },
        {
            let mut live = served(&deployment(app("web:2")));
            live["spec"]["replicas"] = json!(7);
            Row {
                exclude: &["spec.template"],
                ..row(
                    "exclude removes its subtrees",
                    declared.clone(),
                    live,
                    &["spec.replicas"],
                )
            }
        },
    ];
    for row in rows {
        let got = drifted(&row.declared, &row.live, row.include, row.exclude);
        assert_eq!(got, row.want, "{}", row.name);
    }
}

#[test]
fn changes_carry_declared_and_live_values() {
    let declared =
        deployment(json!([{"name": "app", "image": "a"}, {"name": "log", "image": "l"}]));
    let live = served(&deployment(json!([{"name": "app", "image": "b"}])));
    let found = changes(
        &declared,
        &live,
        &rule_scope(&[], &[]),
        &[],
        OmittedZeros::NONE,
    );
    let image = found
        .iter()
        .find(|c| c.path.to_string() == "spec.template.spec.containers[0].image")
        .expect("image change");
    assert_eq!(image.old, Some(LazyValue::from(json!("a"))));
    assert_eq!(image.new, Some(LazyValue::from(json!("b"))));
    let missing = found
        .iter()
        .find(|c| c.path.to_string() == "spec.template.spec.containers[1]")
        .expect("missing element");
    assert_eq!(
        missing.old,
        Some(LazyValue::from(json!({"name": "log", "image": "l"})))
    );
    assert_eq!(missing.new, None);
}

#[test]
fn declares_follows_keyed_lists_by_key() {
    let declared = deployment(json!([{"name": "app", "image": "a", "args": ["x"]}]));
    let live = served(&deployment(
        json!([{"name": "side", "image": "s"}, {"name": "app", "image": "a", "args": ["x", "y"]}]),
    ));
    let path = |text: &str| -> Vec<crate::path::PathSegment> {
        let pattern = PathPattern::parse(text).unwrap();
        pattern
            .segments()
            .iter()
            .map(|s| match s {
                crate::path::PatternSegment::Key(k) => crate::path::PathSegment::Key(k.clone()),
                crate::path::PatternSegment::Index(i) => crate::path::PathSegment::Index(*i),
                other => panic!("{other:?}"),
            })
            .collect()
    };
    assert!(declares(
        &declared,
        &live,
        &path("spec.template.spec.containers[1].image"),
        OmittedZeros::NONE
    ));
    assert!(!declares(
        &declared,
        &live,
        &path("spec.template.spec.containers[0]"),
        OmittedZeros::NONE
    ));
    assert!(declares(
        &declared,
        &live,
        &path("spec.template.spec.containers[1].args[1]"),
        OmittedZeros::NONE
    ));
    assert!(!declares(
        &declared,
        &live,
        &path("metadata.labels.team"),
        OmittedZeros::NONE
    ));
    assert!(!declares(
        &declared,
        &live,
        &path("spec.template.spec.containers[7]"),
        OmittedZeros::NONE
    ));
}

#[test]
fn an_unreadable_baseline_is_an_error() {
    let with = |text: &str| json!({"metadata": {"annotations": {LAST_APPLIED_ANNOTATION: text}}});
    assert_eq!(baseline_of(&json!({"metadata": {}})), None);
    assert_eq!(baseline_of(&with(" ")), None);
    assert!(matches!(
        baseline_of(&with("{")),
        Some(Err(BaselineError::NotJson(_)))
    ));
    assert_eq!(
        baseline_of(&with("[1]")),
        Some(Err(BaselineError::NotAnObject))
    );
    assert_eq!(baseline_of(&with("{\"a\":1}")), Some(Ok(json!({"a": 1}))));
    // Nested past the limit: refused as such, before serde_json reads it.
    let deep = format!("{{\"a\":{}1{}}}", "[".repeat(10_000), "]".repeat(10_000));
    match baseline_of(&with(&deep)) {
        Some(Err(BaselineError::NotJson(reason))) => {
            assert!(
                reason.contains("nested deeper than 10000 levels"),
                "{reason}"
            )
        }
        other => panic!("{other:?}"),
    }
}

/// Adds fields the baseline does not declare: new keys in maps, new elements in keyed lists.
fn add_undeclared(value: &mut Value, salt: u8) {
    match value {
        Value::Object(map) => {
            for child in map.values_mut() {
                add_undeclared(child, salt);
            }
            map.insert(format!("zz{salt}"), json!({"server": "default"}));
        }
        Value::Array(items) => {
            let keyed = !items.is_empty()
                && items
                    .iter()
                    .all(|i| i.get("name").and_then(Value::as_str).is_some());
            if keyed {
                for item in items.iter_mut() {
                    add_undeclared(item, salt);
                }
                items.push(json!({"name": format!("live-only-{salt}"), "v": 1}));
            }
        }
        _ => {}
    }
}

fn arb_object() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(|n| json!(n)),
        "[a-z]{0,4}".prop_map(Value::String),
    ];
    let value = leaf.prop_recursive(3, 32, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z]{1,3}", inner.clone(), 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            // Keyed lists, as containers and env are.
            proptest::collection::btree_map("[a-z]{1,3}", inner, 1..4).prop_map(|m| {
                Value::Array(
                    m.into_iter()
                        .map(|(name, v)| json!({"name": name, "value": v}))
                        .collect(),
                )
            }),
        ]
    });
    proptest::collection::btree_map("[a-z]{1,3}", value, 0..5)
        .prop_map(|m| json!({"kind": "X", "spec": Value::Object(m.into_iter().collect())}))
}

proptest! {
    #[test]
    fn an_object_equal_to_its_baseline_has_no_drift(object in arb_object()) {
        prop_assert!(changes(&object, &object, &rule_scope(&[], &[]), &[], OmittedZeros::NONE).is_empty());
        prop_assert!(changes(&object, &served_like(&object), &rule_scope(&[], &[]), &[], OmittedZeros::NONE).is_empty());
    }

    #[test]
    fn fields_the_baseline_does_not_declare_never_drift(object in arb_object(), salt in 0u8..4) {
        let mut live = object.clone();
        add_undeclared(&mut live, salt);
        let found = changes(&object, &live, &rule_scope(&[], &[]), &[], OmittedZeros::NONE);
        prop_assert!(found.is_empty(), "{:?}", found.iter().map(|c| c.path.to_string()).collect::<Vec<_>>());
    }

    #[test]
    fn every_change_is_at_a_declared_path(declared in arb_object(), live in arb_object()) {
        for change in changes(&declared, &live, &rule_scope(&[], &[]), &[], OmittedZeros::NONE) {
            let path = change.path.segments();
            // Reported at a path the baseline declares, or at a whole-compared list's element
            // (added live), or at a declared element's place.
            prop_assert!(
                declares(&declared, &live, path, OmittedZeros::NONE) || change.old.is_some(),
                "{} is not declared", change.path
            );
        }
    }
}

/// The object with system fields the API server adds.
fn served_like(object: &Value) -> Value {
    let mut live = object.clone();
    live["metadata"] =
        json!({"uid": "x", "resourceVersion": "9", "managedFields": [{"manager": "m"}]});
    live["status"] = json!({"observed": 1});
    live
}
