//! §4 coverage: ancestors, descent into added maps and into added, removed or retyped keys holding lists, no descent into list elements.

use crate::fixtures::*;

#[test]
fn coverage_and_descent() {
    let rule = |ns: &str, mutable: &str| {
        format!("mode: enforce\nnamespaces: [{ns}]\n{DEPLOY}\nmutable: {mutable}\n")
    };
    let env = Env::rules(
        &[
            (
                "ops",
                "cov-podspec",
                rule("cov-podspec", "['spec.template.spec.*']"),
            ),
            ("ops", "cov-all", rule("cov-all", "['*']")),
            (
                "ops",
                "cov-env",
                rule("cov-env", "['spec.template.spec.containers[*].env']"),
            ),
            ("ops", "cov-meta", rule("cov-meta", "['metadata.*']")),
            (
                "ops",
                "cov-ctr",
                rule("cov-ctr", "['spec.template.spec.containers[*]']"),
            ),
            (
                "ops",
                "cov-list",
                rule("cov-list", "['spec.template.spec.containers']"),
            ),
            (
                "ops",
                "cov-idx",
                rule("cov-idx", "['spec.template.spec.containers[0].image']"),
            ),
            (
                "ops",
                "cov-q",
                rule(
                    "cov-q",
                    r#"["metadata.annotations['example.com/note']", 'metadata.annotations["example.com/other"]']"#,
                ),
            ),
            (
                "ops",
                "cov-restart",
                rule(
                    "cov-restart",
                    r#"["spec.template.metadata.annotations['kubectl.kubernetes.io/restartedAt']"]"#,
                ),
            ),
            (
                "ops",
                "cov-none",
                format!("mode: enforce\nnamespaces: [cov-none]\n{DEPLOY}\n"),
            ),
            (
                "ops",
                "cov-star",
                rule("cov-star", "['spec.template.metadata.annotations.*']"),
            ),
            (
                "ops",
                "cov-kinds",
                rule(
                    "cov-kinds",
                    "['spec.template.spec.containers.*.image', 'metadata.labels[*]']",
                ),
            ),
            ("ops", "cov-spec", rule("cov-spec", "[spec]")),
            (
                "ops",
                "cov-envval",
                rule(
                    "cov-envval",
                    "['spec.template.spec.containers[*].env[*].value']",
                ),
            ),
            (
                "ops",
                "cov-deep",
                rule(
                    "cov-deep",
                    "['spec.template.spec.containers[*].resources.limits.cpu']",
                ),
            ),
        ],
        &[],
    );
    let img = |d: &Value, i: usize, image: &str| {
        edit(d, |o| {
            o["spec"]["template"]["spec"]["containers"][i]["image"] = json!(image)
        })
    };
    let env_list = |d: &Value, list: Value| {
        edit(d, |o| {
            o["spec"]["template"]["spec"]["containers"][0]["env"] = list
        })
    };
    let e = |name: &str, value: &str| json!({"name": name, "value": value});
    let tmpl_ann = |d: &Value, ann: Value| {
        edit(d, |o| {
            o["spec"]["template"]["metadata"]["annotations"] = ann
        })
    };
    let no_tmpl_meta = |d: &Value| {
        edit(d, |o| {
            o["spec"]["template"]
                .as_object_mut()
                .unwrap()
                .remove("metadata");
        })
    };
    let restarted = "kubectl.kubernetes.io/restartedAt";

    let env_d = deployment("cov-env");
    let meta = deployment("cov-meta");
    let two = |ns: &str| ctrs(&deployment(ns), json!([c("a", "1"), c("b", "2")]));
    let sidecar = |ns: &str| {
        ctrs(
            &deployment(ns),
            json!([c("s", "9"), c("a", "1"), c("b", "2")]),
        )
    };
    let swapped = |ns: &str| ctrs(&deployment(ns), json!([c("b", "2"), c("a", "1")]));
    let q = with_annotations(&deployment("cov-q"), json!({"example.com/note": "a"}));
    let rs = deployment("cov-restart");
    let none = deployment("cov-none");
    let star = deployment("cov-star");
    let kinds = deployment("cov-kinds");
    let spec = deployment("cov-spec");
    let deep = deployment("cov-deep");
    let envval = deployment("cov-envval");
    let no_template = |d: &Value| {
        edit(d, |o| {
            o["spec"].as_object_mut().unwrap().remove("template");
        })
    };
    let resources = |d: &Value, res: Value| {
        edit(d, |o| {
            o["spec"]["template"]["spec"]["containers"][0]["resources"] = res
        })
    };

    env.run(vec![
        case("spec.template.spec.* covers the list order",
            update(&two("cov-podspec"), &swapped("cov-podspec")), allow("ops/cov-podspec", "enforce")),
        case("containers[*] covers changes inside elements",
            update(&two("cov-ctr"), &img(&two("cov-ctr"), 1, "9")), allow("ops/cov-ctr", "enforce")),
        case("* at the root covers everything",
            update(&deployment("cov-all"), &replicas(&with_labels(&deployment("cov-all"), json!({"x": "y"})), 9)), allow("ops/cov-all", "enforce")),
        case("ancestor covers a value inside a list element",
            update(&env_d, &env_list(&env_d, json!([e("A", "1"), e("B", "3")]))), allow("ops/cov-env", "enforce")),
        case("ancestor covers an added element",
            update(&env_d, &env_list(&env_d, json!([e("A", "1"), e("B", "2"), e("C", "3")]))), allow("ops/cov-env", "enforce")),
        case("pattern covers the list order",
            update(&env_d, &env_list(&env_d, json!([e("B", "2"), e("A", "1")]))), allow("ops/cov-env", "enforce")),
        case("outside the pattern", update(&env_d, &img(&env_d, 0, "nginx:2")), deny("ops/cov-env", t(".containers[0].image"))),
        case("metadata.* covers a label", update(&meta, &with_labels(&meta, json!({"app": "web", "x": "1"}))), allow("ops/cov-meta", "enforce")),
        case("metadata.* covers an added map", update(&meta, &with_annotations(&meta, json!({"a": "1"}))), allow("ops/cov-meta", "enforce")),
        case("metadata.* does not cover spec", update(&meta, &replicas(&meta, 3)), deny("ops/cov-meta", "spec.replicas")),
        case("containers[*] covers a sidecar", update(&two("cov-ctr"), &sidecar("cov-ctr")), allow("ops/cov-ctr", "enforce")),
        case("containers[*] covers a removal", update(&sidecar("cov-ctr"), &two("cov-ctr")), allow("ops/cov-ctr", "enforce")),
        case("containers[*] does not cover the order", update(&two("cov-ctr"), &swapped("cov-ctr")), deny("ops/cov-ctr", t(".containers"))),
        case("containers covers the order", update(&two("cov-list"), &swapped("cov-list")), allow("ops/cov-list", "enforce")),
        case("containers covers a sidecar", update(&two("cov-list"), &sidecar("cov-list")), allow("ops/cov-list", "enforce")),
        case("containers[0] covers index 0", update(&two("cov-idx"), &img(&two("cov-idx"), 0, "7")), allow("ops/cov-idx", "enforce")),
        case("containers[0] does not cover index 1", update(&two("cov-idx"), &img(&two("cov-idx"), 1, "7")), deny("ops/cov-idx", t(".containers[1].image"))),
        case("quoted key ['…']", update(&q, &with_annotations(&q, json!({"example.com/note": "b"}))), allow("ops/cov-q", "enforce")),
        case("quoted key [\"…\"]", update(&q, &with_annotations(&q, json!({"example.com/note": "a", "example.com/other": "c"}))), allow("ops/cov-q", "enforce")),
        case("quoted key: another key", update(&q, &with_annotations(&q, json!({"example.com/note": "a", "example.com/x": "c"}))),
            deny("ops/cov-q", "metadata.annotations['example.com/x']")),
        case("descent: added annotations with restartedAt", update(&rs, &tmpl_ann(&rs, json!({restarted: "2026-01-01T00:00:00Z"}))), allow("ops/cov-restart", "enforce")),
        case("descent: only the uncovered key is reported",
            update(&rs, &tmpl_ann(&rs, json!({restarted: "2026-01-01T00:00:00Z", "foo": "bar"}))),
            deny("ops/cov-restart", "spec.template.metadata.annotations.foo")),
        case("descent: added template metadata",
            update(&no_tmpl_meta(&rs), &tmpl_ann(&no_tmpl_meta(&rs), json!({restarted: "2026-01-01T00:00:00Z"}))),
            allow("ops/cov-restart", "enforce")),
        case("descent: added template metadata with labels",
            update(&no_tmpl_meta(&rs), &tmpl_ann(&rs, json!({restarted: "2026-01-01T00:00:00Z"}))),
            deny("ops/cov-restart", "spec.template.metadata.labels")),
        case("descent: removed annotations",
            update(&tmpl_ann(&rs, json!({restarted: "2026-01-01T00:00:00Z"})), &rs), allow("ops/cov-restart", "enforce")),
        case("restartedAt changed",
            update(&tmpl_ann(&rs, json!({restarted: "1"})), &tmpl_ann(&rs, json!({restarted: "2"}))), allow("ops/cov-restart", "enforce")),
        case("descent: type change",
            update(&tmpl_ann(&rs, json!("oops")), &tmpl_ann(&rs, json!({restarted: "2"}))), allow("ops/cov-restart", "enforce")),
        case("descent stops where no pattern reaches below",
            update(&no_template(&rs), &tmpl_ann(&rs, json!({restarted: "1"}))),
            deny("ops/cov-restart", "spec.template.metadata.labels, spec.template.spec")),
        case("two wildcards cover a value",
            update(&envval, &env_list(&envval, json!([e("A", "7"), e("B", "8")]))), allow("ops/cov-envval", "enforce")),
        case("two wildcards do not cover an added element",
            update(&envval, &env_list(&envval, json!([e("Z", "0"), e("A", "1"), e("B", "2")]))),
            deny("ops/cov-envval", t(".containers[0].env[0]"))),
        case("no deeper pattern: added map reported whole",
            update(&none, &tmpl_ann(&none, json!({"a": "1", "b": "2"}))), deny("ops/cov-none", "spec.template.metadata.annotations")),
        case("no deeper pattern: added parent reported whole",
            update(&no_tmpl_meta(&none), &none), deny("ops/cov-none", "spec.template.metadata")),
        case("* covers every key of an added map",
            update(&star, &tmpl_ann(&star, json!({"a": "1", "x/y": "2"}))), allow("ops/cov-star", "enforce")),
        case("annotations.* does not cover labels",
            update(&star, &edit(&star, |o| o["spec"]["template"]["metadata"]["labels"]["app"] = json!("x"))),
            deny("ops/cov-star", "spec.template.metadata.labels.app")),
        case("* is a map key, not a list index",
            update(&kinds, &img(&kinds, 0, "nginx:2")), deny("ops/cov-kinds", t(".containers[0].image"))),
        case("[*] is a list index, not a map key",
            update(&kinds, &with_labels(&kinds, json!({"app": "x"}))), deny("ops/cov-kinds", "metadata.labels.app")),
        case("spec covers its whole subtree",
            update(&spec, &replicas(&ctrs(&spec, json!([c("s", "1"), c("app", "2")])), 7)), allow("ops/cov-spec", "enforce")),
        case("spec does not cover metadata",
            update(&spec, &with_labels(&spec, json!({"app": "x"}))), deny("ops/cov-spec", "metadata.labels.app")),
        case("descent below a kept list element",
            update(&deep, &resources(&deep, json!({"limits": {"cpu": "1", "memory": "1Gi"}}))),
            deny("ops/cov-deep", t(".containers[0].resources.limits.memory"))),
        case("descent: covered part only",
            update(&deep, &resources(&deep, json!({"limits": {"cpu": "1"}}))), allow("ops/cov-deep", "enforce")),
        case("no descent into an added element",
            update(&deep, &ctrs(&deep, json!([{"name": "s", "resources": {"limits": {"cpu": "1"}}}, deep["spec"]["template"]["spec"]["containers"][0].clone()]))),
            deny("ops/cov-deep", t(".containers[0]"))),
    ]);
}

// ---------------------------------------------------------------------------------------------
// §4 coverage: descent into an added / removed / type-changed map key whose value is a list
// ---------------------------------------------------------------------------------------------

/// reference §4: "When a changed path names a **map key** that was added, removed or whose value
/// changed type, and a deeper `mutable` pattern reaches below it […], the diff descends into it
/// (missing side = absent) so that only the uncovered parts are reported. There is no descent
/// into an added or removed **list element** […]: those are reported at the element path
/// (`…containers[0]`)". A map key whose value is a list is still a map key: descending into it
/// against an absent side reports its elements at their element paths, which `…[*]` covers.
#[test]
fn descent_into_a_list_valued_map_key() {
    let rule = |ns: &str, mutable: &str| {
        format!(
            "mode: enforce\nnamespaces: [{ns}]\nselectors: [{{apiGroup: apps, kind: Deployment}}, {{apiGroup: example.com, kind: Widget}}]\nmutable: {mutable}\n"
        )
    };
    let env = Env::rules(
        &[
            (
                "ops",
                "tolerations",
                rule("tol", "['spec.template.spec.tolerations[*]']"),
            ),
            ("ops", "items", rule("items", "['spec.extra.items[*]']")),
            (
                "ops",
                "images",
                rule("img", "['spec.template.spec.containers[*].image']"),
            ),
        ],
        &[],
    );
    let tol = deployment("tol");
    let with_tol = |v: Value| pod(&tol, "tolerations", v);
    let one = json!([{"key": "a", "operator": "Exists"}]);
    let two = json!([{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}]);
    let widget = |spec: Value| {
        object(
            "example.com/v1",
            "Widget",
            Some("items"),
            json!({"spec": spec}),
        )
    };
    let img = deployment("img");
    let no_template = edit(&img, |o| {
        o["spec"].as_object_mut().unwrap().remove("template");
    });

    // Sanity: with the list present on both sides, an added element is covered.
    env.run(vec![case(
        "element added to an existing list",
        update(&with_tol(one.clone()), &with_tol(two.clone())),
        allow("ops/tolerations", "enforce"),
    )]);
    // A list-valued map key that appears, disappears or changes type is descended into when a
    // deeper mutable pattern reaches below it: its elements are reported whole at their index.
    env.run(vec![
        case(
            "list added where the key was absent",
            update(&tol, &with_tol(one.clone())),
            allow("ops/tolerations", "enforce"),
        ),
        case(
            "list removed",
            update(&with_tol(two.clone()), &tol),
            allow("ops/tolerations", "enforce"),
        ),
        case(
            "scalar replaced by a list",
            update(&with_tol(json!("none")), &with_tol(one.clone())),
            allow("ops/tolerations", "enforce"),
        ),
        case(
            "added map holding a list",
            update(
                &widget(json!({"size": 1})),
                &widget(json!({"size": 1, "extra": {"items": [{"name": "a"}]}})),
            ),
            allow("ops/items", "enforce"),
        ),
        case(
            "added template: containers reported at the element path",
            update(&no_template, &img),
            deny(
                "ops/images",
                format!("spec.template.metadata, {}", t(".containers[0]")),
            ),
        ),
    ]);
}
