//! The diff's table and property tests (reference §4).

use super::*;
use crate::json::str_eq;
use proptest::prelude::*;
use serde_json::json;

fn patterns(texts: &[&str]) -> Vec<PathPattern> {
    texts
        .iter()
        .map(|t| PathPattern::parse(t).unwrap())
        .collect()
}

fn changed_paths(old: &Value, new: &Value, scope: &Scope, descend: &[&str]) -> Vec<String> {
    let descend = patterns(descend);
    let mut paths: Vec<String> = diff(old, new, scope, &descend, OmittedZeros::NONE)
        .into_iter()
        .map(|c| c.path.to_string())
        .collect();
    paths.sort();
    paths
}

struct Case {
    name: &'static str,
    old: Value,
    new: Value,
    include: Option<&'static [&'static str]>,
    skip: &'static [&'static str],
    descend: &'static [&'static str],
    want: &'static [&'static str],
}

fn case(name: &'static str, old: Value, new: Value, want: &'static [&'static str]) -> Case {
    Case {
        name,
        old,
        new,
        include: None,
        skip: &[],
        descend: &[],
        want,
    }
}

fn run_cases(cases: Vec<Case>) {
    for case in cases {
        let scope = Scope::new(case.include.map(patterns), patterns(case.skip));
        let got = changed_paths(&case.old, &case.new, &scope, case.descend);
        let mut want: Vec<String> = case.want.iter().map(|s| s.to_string()).collect();
        want.sort();
        assert_eq!(got, want, "{}", case.name);
    }
}

#[test]
fn diff_table() {
    let containers = |items: Value| json!({"spec": {"template": {"spec": {"containers": items}}}});
    let cases = vec![
        case("identical", json!({"a": 1}), json!({"a": 1}), &[]),
        case("scalar change", json!({"a": 1}), json!({"a": 2}), &["a"]),
        case(
            "added key",
            json!({"a": 1}),
            json!({"a": 1, "b": {"c": 1}}),
            &["b"],
        ),
        case(
            "removed key",
            json!({"a": 1, "b": 2}),
            json!({"a": 1}),
            &["b"],
        ),
        case("null equals absent", json!({"a": null}), json!({}), &[]),
        case("empty map equals absent", json!({"a": {}}), json!({}), &[]),
        case(
            "empty list equals absent",
            json!({"a": []}),
            json!({"a": null}),
            &[],
        ),
        case(
            "map emptied by nulls is absent",
            json!({"a": {"b": null, "c": {}}}),
            json!({}),
            &[],
        ),
        case(
            "empty map to filled map",
            json!({"a": {}}),
            json!({"a": {"x": 1}}),
            &["a"],
        ),
        case("type change", json!({"a": "1"}), json!({"a": 1}), &["a"]),
        case(
            "numbers compare numerically",
            json!({"a": 1}),
            json!({"a": 1.0}),
            &[],
        ),
        case(
            "big numbers",
            json!({"a": u64::MAX}),
            json!({"a": u64::MAX}),
            &[],
        ),
        case(
            "nested change",
            json!({"a": {"b": {"c": 1}}}),
            json!({"a": {"b": {"c": 2}}}),
            &["a.b.c"],
        ),
        case(
            "quoted key",
            json!({"m": {"a/b": 1}}),
            json!({"m": {"a/b": 2}}),
            &["m['a/b']"],
        ),
        case(
            "sidecar inserted at index 0",
            containers(json!([{"name": "app", "image": "a"}])),
            containers(json!([{"name": "sidecar", "image": "s"}, {"name": "app", "image": "a"}])),
            &["spec.template.spec.containers[0]"],
        ),
        case(
            "change inside kept element reported at new index",
            containers(json!([{"name": "app", "image": "a"}])),
            containers(json!([{"name": "sidecar", "image": "s"}, {"name": "app", "image": "b"}])),
            &[
                "spec.template.spec.containers[0]",
                "spec.template.spec.containers[1].image",
            ],
        ),
        case(
            "removed element at old index",
            containers(json!([{"name": "a"}, {"name": "b"}, {"name": "c"}])),
            containers(json!([{"name": "a"}, {"name": "c"}])),
            &["spec.template.spec.containers[1]"],
        ),
        case(
            "reordered kept elements report the list",
            containers(json!([{"name": "a"}, {"name": "b"}])),
            containers(json!([{"name": "b"}, {"name": "a"}])),
            &["spec.template.spec.containers"],
        ),
        case(
            "lists of scalars align by index",
            json!({"args": ["a", "b"]}),
            json!({"args": ["x", "a", "b"]}),
            &["args[0]", "args[1]", "args[2]"],
        ),
        case(
            "a shorter list of scalars: changes in the shared part, the tail removed",
            json!({"args": ["a", "b", "c"]}),
            json!({"args": ["x", "b"]}),
            &["args[0]", "args[2]"],
        ),
        case(
            "a removed null element exists",
            json!({"args": [1, null]}),
            json!({"args": [1]}),
            &["args[1]"],
        ),
        case(
            "a mixed list aligns by index, its objects walked",
            json!({"items": [{"name": "a"}, 1]}),
            json!({"items": [{"name": "a", "v": 2}]}),
            &["items[0].v", "items[1]"],
        ),
        case(
            "missing name aligns by index",
            json!({"items": [{"name": "a", "v": 1}, {"v": 2}]}),
            json!({"items": [{"v": 2}, {"name": "a", "v": 1}]}),
            &["items[0].name", "items[0].v", "items[1].name", "items[1].v"],
        ),
        case(
            "repeated name aligns by index",
            json!({"items": [{"name": "a", "v": 1}, {"name": "a", "v": 2}]}),
            json!({"items": [{"name": "a", "v": 1}, {"name": "a", "v": 3}]}),
            &["items[1].v"],
        ),
        case(
            "env keyed by name",
            json!({"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}),
            json!({"env": [{"name": "X", "value": "0"}, {"name": "A", "value": "1"}, {"name": "B", "value": "3"}]}),
            &["env[0]", "env[2].value"],
        ),
        case(
            "volumeMounts keyed by mountPath",
            json!({"volumeMounts": [{"name": "data", "mountPath": "/a"}]}),
            json!({"volumeMounts": [{"name": "data", "mountPath": "/b"}]}),
            &["volumeMounts[0]", "volumeMounts[0]"],
        ),
        case(
            "volumeDevices keyed by devicePath",
            json!({"volumeDevices": [{"name": "d", "devicePath": "/dev/a"}]}),
            json!({"volumeDevices": [{"name": "e", "devicePath": "/dev/a"}]}),
            &["volumeDevices[0].name"],
        ),
        case(
            "hostAliases keyed by ip",
            json!({"hostAliases": [{"ip": "10.0.0.1", "hostnames": ["a"]}, {"ip": "10.0.0.2", "hostnames": ["b"]}]}),
            json!({"hostAliases": [{"ip": "10.0.0.2", "hostnames": ["b"]}]}),
            &["hostAliases[0]"],
        ),
        case(
            "container ports keyed by containerPort and protocol, TCP default",
            json!({"ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 53, "protocol": "UDP"}]}),
            json!({"ports": [{"containerPort": 53, "protocol": "UDP"}, {"containerPort": 80, "protocol": "TCP", "name": "web"}]}),
            &["ports", "ports[1].name", "ports[1].protocol"],
        ),
        case(
            "service ports keyed by port",
            json!({"ports": [{"port": 80, "targetPort": 8080}]}),
            json!({"ports": [{"port": 443, "targetPort": 8443}, {"port": 80, "targetPort": 8081}]}),
            &["ports[0]", "ports[1].targetPort"],
        ),
        case(
            "same port, different protocol are different elements",
            json!({"ports": [{"containerPort": 53, "protocol": "TCP"}]}),
            json!({"ports": [{"containerPort": 53, "protocol": "UDP"}]}),
            &["ports[0]", "ports[0]"],
        ),
        case(
            "list element emptied stays positional",
            json!({"l": [{"a": null}]}),
            json!({"l": [{}]}),
            &[],
        ),
    ];
    run_cases(cases);
}

#[test]
fn scope_table() {
    let dep = |image: &str, replicas: i64, extra: Value| {
        json!({
            "metadata": {"name": "x", "resourceVersion": "1", "annotations": extra},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "app", "image": image}]}}},
            "status": {"ready": replicas}
        })
    };
    let cases = vec![
        Case {
            include: Some(&["spec.replicas"]),
            ..case(
                "include keeps only its subtree",
                dep("a", 1, json!({})),
                dep("b", 2, json!({})),
                &["spec.replicas"],
            )
        },
        Case {
            include: Some(&["spec.template"]),
            ..case(
                "include of a subtree",
                dep("a", 1, json!({})),
                dep("b", 2, json!({})),
                &["spec.template.spec.containers[0].image"],
            )
        },
        Case {
            skip: &["status", "spec.replicas"],
            ..case(
                "skip removes subtrees",
                dep("a", 1, json!({})),
                dep("a", 2, json!({})),
                &[],
            )
        },
        Case {
            skip: &["metadata.annotations['x']"],
            ..case(
                "skipped key inside an added map",
                dep("a", 1, json!(null)),
                dep("a", 1, json!({"x": "1"})),
                &[],
            )
        },
        Case {
            skip: &["metadata.annotations['x']"],
            ..case(
                "added map keeps what is not skipped",
                dep("a", 1, json!(null)),
                dep("a", 1, json!({"x": "1", "y": "2"})),
                &["metadata.annotations"],
            )
        },
        Case {
            include: Some(&["spec.template.spec.containers[*].image"]),
            ..case(
                "added element under include is reported at its index",
                json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "a", "args": ["1"]}]}}}}),
                json!({"spec": {"template": {"spec": {"containers": [{"name": "side", "image": "s"}, {"name": "app", "image": "a", "args": ["2"]}]}}}}),
                &["spec.template.spec.containers[0]"],
            )
        },
        Case {
            include: Some(&["spec.template.spec.containers[*].image"]),
            ..case(
                "alignment is decided before scoping",
                json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "x"}]}}}}),
                json!({"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "x"}]}}}}),
                &["spec.template.spec.containers[0]"],
            )
        },
        Case {
            skip: &["spec.*[1]"],
            ..case(
                "a list of one null is present under partial coverage",
                json!({"spec": {"x": 1, "name": null}}),
                json!({"spec": {"x": 1, "name": [null]}}),
                &["spec.name"],
            )
        },
        Case {
            skip: &["spec.*[0][1]"],
            ..case(
                "a null element of a nested list is present when wholly in scope",
                json!({"spec": {"x": 1}}),
                json!({"spec": {"x": 1, "name": [[null]]}}),
                &["spec.name"],
            )
        },
        Case {
            skip: &["spec.*[0]"],
            ..case(
                "a null element out of scope is not",
                json!({"spec": {"x": 1}}),
                json!({"spec": {"x": 1, "name": [null]}}),
                &[],
            )
        },
    ];
    run_cases(cases);
}

#[test]
fn descent_table() {
    let cases = vec![
        Case {
            descend: &["spec.template.metadata.annotations['kubectl.kubernetes.io/restartedAt']"],
            ..case(
                "descends into an added map",
                json!({"spec": {"template": {"spec": {"x": 1}}}}),
                json!({"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "now"}}, "spec": {"x": 1}}}}),
                &["spec.template.metadata.annotations['kubectl.kubernetes.io/restartedAt']"],
            )
        },
        Case {
            descend: &["spec.template.metadata.annotations['kubectl.kubernetes.io/restartedAt']"],
            ..case(
                "reports only what the pattern does not reach",
                json!({"spec": {"template": {}}}),
                json!({"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "now", "other": "x"}, "labels": {"a": "b"}}}}}),
                &[
                    "spec.template.metadata.annotations['kubectl.kubernetes.io/restartedAt']",
                    "spec.template.metadata.annotations.other",
                    "spec.template.metadata.labels",
                ],
            )
        },
        Case {
            descend: &["spec.template.spec.containers[*].image"],
            ..case(
                "no descent into an added list element",
                json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "a"}]}}}}),
                json!({"spec": {"template": {"spec": {"containers": [{"name": "side", "image": "s"}, {"name": "app", "image": "a"}]}}}}),
                &["spec.template.spec.containers[0]"],
            )
        },
        Case {
            descend: &["a.b"],
            ..case(
                "descends into a retyped map, the scalar side absent",
                json!({"a": "x"}),
                json!({"a": {"b": 1}}),
                &["a.b"],
            )
        },
        Case {
            descend: &["a"],
            ..case(
                "no descent when the pattern covers the path",
                json!({}),
                json!({"a": {"b": 1}}),
                &["a"],
            )
        },
    ];
    run_cases(cases);
}

#[test]
fn change_values_are_reported() {
    let old = json!({"spec": {"replicas": 3}});
    let new = json!({"spec": {"replicas": 5}});
    let changes = diff(&old, &new, &Scope::everything(), &[], OmittedZeros::NONE);
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].kind, ChangeKind::Modified);
    assert_eq!(changes[0].old, Some(LazyValue::from(json!(3))));
    assert_eq!(changes[0].new, Some(LazyValue::from(json!(5))));
}

pub(crate) fn arb_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-1e6f64..1e6).prop_map(|n| json!(n)),
        "[a-z]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            proptest::collection::btree_map("(name|image|[a-z]{1,4})", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

#[test]
fn string_equality_at_every_length() {
    let text = "abcdefghijklmnopqrstuvwxyz0123456789";
    for n in 0..text.len() {
        let a = &text[..n];
        assert!(str_eq(a, a.to_owned().as_str()), "{n}");
        for i in 0..n {
            let mut b = a.as_bytes().to_vec();
            b[i] = b'#';
            let b = String::from_utf8(b).unwrap();
            assert!(!str_eq(a, &b), "{n} {i}");
        }
        assert!(!str_eq(a, &text[..n + 1]));
    }
}

#[test]
fn maps_in_any_key_order_compare_alike() {
    let a: Value = serde_json::from_str(r#"{"b": 1, "a": {"x": 2, "y": null}, "c": 3}"#).unwrap();
    let b: Value = serde_json::from_str(r#"{"c": 3, "a": {"x": 2}, "b": 1}"#).unwrap();
    assert!(value_eq(&a, &b));
    assert!(diff(&a, &b, &Scope::everything(), &[], OmittedZeros::NONE).is_empty());
    let c: Value = serde_json::from_str(r#"{"c": 4, "d": 1, "b": 1}"#).unwrap();
    let paths: Vec<String> = diff(&a, &c, &Scope::everything(), &[], OmittedZeros::NONE)
        .into_iter()
        .map(|change| change.path.to_string())
        .collect();
    assert_eq!(paths.len(), 3, "{paths:?}");
    for path in ["a", "c", "d"] {
        assert!(paths.contains(&path.to_owned()), "{paths:?}");
    }
}

proptest! {
    #[test]
    fn diff_of_an_object_with_itself_is_empty(value in arb_value()) {
        let object = json!({"spec": value});
        prop_assert!(diff(&object, &object.clone(), &Scope::everything(), &[], OmittedZeros::NONE).is_empty());
    }

    #[test]
    fn diff_is_empty_exactly_when_values_are_equal(a in arb_value(), b in arb_value()) {
        let old = json!({"spec": a});
        let new = json!({"spec": b});
        let changes = diff(&old, &new, &Scope::everything(), &[], OmittedZeros::NONE);
        prop_assert_eq!(changes.is_empty(), value_eq(&old, &new));
    }
}

/// The text read as the agent reads a request's objects (within a document, indexed).
fn raw(text: &str) -> crate::json::RawJson<'_> {
    use crate::json::Document as _;
    let value: &serde_json::value::RawValue = serde_json::from_str(text).expect("valid JSON");
    Box::leak(Box::new(crate::json::RawDocument::new(value))).node()
}

/// The scopes and descent patterns the raw/parsed agreement is checked under.
fn scoping(which: usize) -> (Scope, Vec<PathPattern>) {
    match which {
        0 => (Scope::everything(), Vec::new()),
        1 => (
            Scope::new(Some(patterns(&["spec.name", "spec[*].image"])), Vec::new()),
            Vec::new(),
        ),
        2 => (
            Scope::new(None, patterns(&["spec.image", "spec[*].name"])),
            Vec::new(),
        ),
        _ => (
            Scope::everything(),
            patterns(&["spec.name.image", "spec[*].name"]),
        ),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// One diff, two documents: raw text read lazily finds exactly the changes — paths,
    /// kinds, values, order — that the parsed documents of the same text give.
    #[test]
    fn raw_text_and_parsed_documents_diff_alike(
        a in arb_value(),
        b in arb_value(),
        pretty in any::<bool>(),
        which in 0..4usize,
    ) {
        let old = json!({"keep": {"x": 1}, "spec": a});
        let new = json!({"keep": {"x": 1}, "spec": b});
        let text = |v: &Value| if pretty {
            serde_json::to_string_pretty(v).unwrap_or_default()
        } else {
            v.to_string()
        };
        let (old_text, new_text) = (text(&old), text(&new));
        let (old, new): (Value, Value) = (
            serde_json::from_str(&old_text).unwrap(),
            serde_json::from_str(&new_text).unwrap(),
        );
        let (scope, descend) = scoping(which);
        let parsed = diff(&old, &new, &scope, &descend, OmittedZeros::NONE);
        let read = diff(raw(&old_text), raw(&new_text), &scope, &descend, OmittedZeros::NONE);
        prop_assert_eq!(parsed, read);
    }
}

#[test]
fn raw_text_numbers_compare_exactly() {
    let old = r#"{"spec": {"big": 9007199254740993, "huge": 18446744073709551617, "same": 1.0}}"#;
    let new = r#"{"spec": {"big": 9007199254740992.0, "huge": 18446744073709551616, "same": 1}}"#;
    let paths: Vec<String> = diff(
        raw(old),
        raw(new),
        &Scope::everything(),
        &[],
        OmittedZeros::NONE,
    )
    .into_iter()
    .map(|c| c.path.to_string())
    .collect();
    assert_eq!(paths, ["spec.big", "spec.huge"]);
}

/// Under partial coverage (`spec` partly excluded) a scalar is compared as exactly as under full
/// coverage: big integers, decimal texts past a double's precision, and an integer against a
/// float of the same value, in a map and in a list.
#[test]
fn raw_text_numbers_compare_exactly_under_partial_coverage() {
    let partial = Scope::new(
        None,
        patterns(&["spec.*.metadata", "spec.list[*].metadata"]),
    );
    let cases = [
        ("18446744073709551616", "18446744073709551617", true),
        ("-18446744073709551617", "-18446744073709551616", true),
        ("9007199254740993", "9007199254740992", true),
        ("0.10000000000000000001", "0.1", true),
        ("1e400", "2e400", true),
        ("18446744073709551616", "18446744073709551616.0", false),
        ("1", "1.0", false),
        ("1e2", "100", false),
        ("5", "6", true),
    ];
    for (a, b, changed) in cases {
        for (template, path) in [
            (
                r#"{"spec": {"minReadySeconds": N, "x": {"metadata": 1}}}"#,
                "spec.minReadySeconds",
            ),
            (
                r#"{"spec": {"list": [{"n": N, "metadata": {}}]}}"#,
                "spec.list[0].n",
            ),
            (r#"{"spec": {"list": [N]}}"#, "spec.list[0]"),
        ] {
            let (old, new) = (template.replace('N', a), template.replace('N', b));
            let found: Vec<String> = diff(raw(&old), raw(&new), &partial, &[], OmittedZeros::NONE)
                .into_iter()
                .map(|c| c.path.to_string())
                .collect();
            let want: &[&str] = if changed { &[path] } else { &[] };
            assert_eq!(found, want, "{old} → {new}");
            // What the change reports shows the two numbers apart.
            for change in diff(raw(&old), raw(&new), &partial, &[], OmittedZeros::NONE) {
                assert_ne!(change.old, change.new, "{old} → {new}");
            }
        }
    }
}

/// Whole subtrees compared at a place of a kind's table (lists compared whole, partial scopes):
/// an entry one side lacks is absent when it is a zero the kind leaves out, and only then.
#[test]
fn whole_values_compare_omitted_zeros_as_absent() {
    let zeros = OmittedZeros::of_kind("apps", "Deployment");
    let place = |path: &str| {
        let path = PathPattern::parse(path).unwrap();
        let segments: Vec<PathSegment> = path
            .segments()
            .iter()
            .map(|s| match s {
                crate::PatternSegment::Key(key) => PathSegment::Key(key.clone()),
                crate::PatternSegment::Index(index) => PathSegment::Index(*index),
                other => panic!("{other:?}"),
            })
            .collect();
        zeros.place_at(&segments)
    };
    let containers = place("spec.template.spec.containers");
    let spelled = json!([{"name": "app", "tty": false, "volumeMounts": [{"mountPath": "/d", "readOnly": false}]}]);
    let stored = json!([{"name": "app", "volumeMounts": [{"mountPath": "/d"}]}]);
    assert!(value_eq_at(&spelled, &stored, containers));
    assert!(value_eq_at(&stored, &spelled, containers));
    assert!(
        !value_eq(&spelled, &stored),
        "without the table every zero counts"
    );
    let changed = json!([{"name": "app", "tty": true, "volumeMounts": [{"mountPath": "/d"}]}]);
    assert!(!value_eq_at(&spelled, &changed, containers));
    // A map value and a pointer field keep their zero.
    let pod = place("spec.template.spec");
    assert!(!value_eq_at(
        &json!({"nodeSelector": {"a": ""}}),
        &json!({}),
        pod
    ));
    assert!(!value_eq_at(
        &json!({"automountServiceAccountToken": false}),
        &json!({}),
        pod
    ));
    assert!(value_eq_at(&json!({"hostNetwork": false}), &json!({}), pod));
    // Elsewhere in the object, or without a place, nothing is left out.
    assert!(!value_eq_at(
        &json!({"hostNetwork": false}),
        &json!({}),
        place("spec")
    ));
    assert!(!value_eq_at(
        &json!({"hostNetwork": false}),
        &json!({}),
        None
    ));
}
