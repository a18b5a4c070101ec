//! §4: rendering and order of paths.

use crate::fixtures::*;

#[test]
fn path_rendering_and_byte_order() {
    let env = Env::rules(
        &[
            (
                "ops",
                "render",
                format!("mode: enforce\nnamespaces: [render]\n{DEPLOY}\n"),
            ),
            (
                "ops",
                "explain",
                format!(
                    "mode: enforce\nnamespaces: [explain]\n{DEPLOY}\nmutable: ['spec.template.spec.containers[*].image', \"metadata.annotations['example.com/x']\"]\nbypass: example.com/let-me-through\n"
                ),
            ),
        ],
        &[],
    );
    let d = with_annotations(&deployment("render"), json!({"keep": "x"}));
    let labels = |extra: Value| {
        let mut l = json!({"app": "web"});
        for (k, v) in extra.as_object().unwrap() {
            l[k] = v.clone();
        }
        with_labels(&d, l)
    };
    let eleven: Vec<Value> = (0..11).map(|i| c(&format!("c{i}"), "1")).collect();
    let eleven_d = ctrs(&d, Value::Array(eleven.clone()));
    let mut changed = eleven.clone();
    changed[2]["image"] = json!("2");
    changed[10]["image"] = json!("2");
    let twelve: serde_json::Map<String, Value> =
        (0..12).map(|i| (format!("k{i:02}"), json!("v"))).collect();
    let twelve_paths: Vec<String> = (0..12)
        .map(|i| format!("metadata.labels.k{i:02}"))
        .collect();

    env.run(vec![
        case("byte order, not segment order",
            update(&d, &edit(&d, |o| {
                o["spec"]["a"] = json!({"c": 1});
                o["spec"]["a-b"] = json!(1);
                o["spec"]["x"] = json!([1]);
                o["spec"]["x-y"] = json!(1);
            })),
            deny("ops/render", "spec.a, spec.a-b, spec.x, spec.x-y")),
        case("byte order of nested paths, not segment order",
            update(&edit(&d, |o| {
                o["spec"]["a"] = json!({"c": 1});
                o["spec"]["a-b"] = json!(1);
                o["spec"]["x"] = json!([1]);
                o["spec"]["x-y"] = json!(1);
            }), &edit(&d, |o| {
                o["spec"]["a"] = json!({"c": 2});
                o["spec"]["a-b"] = json!(2);
                o["spec"]["x"] = json!([2]);
                o["spec"]["x-y"] = json!(2);
            })),
            deny("ops/render", "spec.a-b, spec.a.c, spec.x-y, spec.x[0]")),
        case("key with . and /", update(&d, &labels(json!({"app.kubernetes.io/name": "x"}))),
            deny("ops/render", "metadata.labels['app.kubernetes.io/name']")),
        case("letters digits _ - joined with .", update(&d, &labels(json!({"a_b-C9": "x"}))),
            deny("ops/render", "metadata.labels.a_b-C9")),
        case("digits only", update(&d, &labels(json!({"123": "x"}))), deny("ops/render", "metadata.labels.123")),
        case("key with a space", update(&d, &with_annotations(&d, json!({"keep": "x", "a b": "1"}))),
            deny("ops/render", "metadata.annotations['a b']")),
        case("byte order of rendered paths",
            update(&d, &replicas(&labels(json!({"a": "1", "B": "1", "a.b": "1", "a-b": "1"})), 3)),
            deny("ops/render", "metadata.labels.B, metadata.labels.a, metadata.labels.a-b, metadata.labels['a.b'], spec.replicas")),
        case("indices in byte order", update(&eleven_d, &ctrs(&d, Value::Array(changed))),
            deny("ops/render", format!("{}, {}", t(".containers[10].image"), t(".containers[2].image")))),
        case("more than 10 paths are all listed", update(&d, &labels(Value::Object(twelve))),
            deny("ops/render", twelve_paths.join(", "))),
    ]);

    // The reason names the rule, its mutable patterns and how to bypass (the rule's key);
    // values are truncated to 64 characters.
    let e = deployment("explain");
    let long = "v".repeat(200);
    let (_, got) = env.send(&update(
        &e,
        &replicas(&with_labels(&e, json!({"app": long})), 3),
    ));
    let r = response_of(&got);
    assert_eq!(r["allowed"], false, "{got}");
    let message = r["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("{PREFIX}metadata.labels.app, spec.replicas")),
        "{message}"
    );
    for needle in [
        "ops/explain",
        "spec.template.spec.containers[*].image",
        "metadata.annotations['example.com/x']",
        "example.com/let-me-through",
    ] {
        assert!(
            message.contains(needle),
            "{needle:?} missing from {message}"
        );
    }
    assert!(
        !message.contains(&"v".repeat(65)),
        "value not truncated to 64 characters: {message}"
    );
}
