//! §3 step 6, §4: system fields, include/exclude, normalisation, numbers, types.

use crate::fixtures::*;

#[test]
fn system_fields_scoping_and_normalisation() {
    let env = Env::rules(
        &[
            (
                "ops",
                "exc-q",
                format!(
                    "mode: enforce\nnamespaces: [exc-q]\n{DEPLOY}\nexclude: [\"metadata.annotations['example.com/skip-me']\"]\n"
                ),
            ),
            (
                "ops",
                "inc-ann",
                format!(
                    "mode: enforce\nnamespaces: [inc-ann]\n{DEPLOY}\ninclude: [spec.template.metadata.annotations]\n"
                ),
            ),
            (
                "ops",
                "plain",
                format!("mode: enforce\nnamespaces: [plain]\n{DEPLOY}\n"),
            ),
            (
                "ops",
                "inc",
                format!("mode: enforce\nnamespaces: [inc]\n{DEPLOY}\ninclude: [spec]\n"),
            ),
            (
                "ops",
                "exc",
                format!(
                    "mode: enforce\nnamespaces: [exc]\n{DEPLOY}\nexclude: [spec.replicas, metadata.annotations]\n"
                ),
            ),
            (
                "ops",
                "incexc",
                format!(
                    "mode: enforce\nnamespaces: [incexc]\n{DEPLOY}\ninclude: [spec.template]\nexclude: [spec.template.metadata]\n"
                ),
            ),
            (
                "ops",
                "inc-img",
                format!(
                    "mode: enforce\nnamespaces: [inc-img]\n{DEPLOY}\ninclude: ['spec.template.spec.containers[*].image']\n"
                ),
            ),
            (
                "ops",
                "exc-name",
                format!(
                    "mode: enforce\nnamespaces: [exc-name]\n{DEPLOY}\nexclude: ['spec.template.spec.containers[*].name']\nmutable: ['spec.template.spec.containers[*].image']\n"
                ),
            ),
            (
                "ops",
                "exc-env",
                format!(
                    "mode: enforce\nnamespaces: [exc-env]\n{DEPLOY}\nexclude: ['spec.template.spec.containers[*].env']\n"
                ),
            ),
        ],
        &[],
    );
    let d = deployment("plain");
    let sys_old = edit(&d, |o| {
        let m = &mut o["metadata"];
        m["resourceVersion"] = json!("10");
        m["generation"] = json!(3);
        m["uid"] = json!("6f1c-aaaa");
        m["creationTimestamp"] = json!("2024-01-01T00:00:00Z");
        m["selfLink"] = json!("/apis/apps/v1/namespaces/plain/deployments/web");
        m["managedFields"] =
            json!([{"manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1"}]);
        o["status"] = json!({"replicas": 2, "readyReplicas": 2});
    });
    let sys_new = edit(&d, |o| {
        let m = &mut o["metadata"];
        m["resourceVersion"] = json!("11");
        m["generation"] = json!(4);
        m["uid"] = json!("6f1c-bbbb");
        m["creationTimestamp"] = json!("2025-01-01T00:00:00Z");
        m["selfLink"] = json!("/apis/apps/v1/namespaces/plain/deployments/web2");
        m["managedFields"] =
            json!([{"manager": "helm", "operation": "Update", "apiVersion": "apps/v1"}]);
        o["status"] = json!({"replicas": 3, "conditions": [{"type": "Available"}]});
    });
    let node_selector = |v: Value| pod(&d, "nodeSelector", v);
    let img = |d: &Value, image: &str| {
        edit(d, |o| {
            o["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image)
        })
    };
    let add_template_annotation = |d: &Value| {
        edit(d, |o| {
            o["spec"]["template"]["metadata"]["annotations"] = json!({"a": "1"})
        })
    };
    let inc = deployment("inc");
    let exc = deployment("exc");
    let incexc = deployment("incexc");
    let inc_img = deployment("inc-img");
    let exc_name = ctrs(&deployment("exc-name"), json!([c("a", "1"), c("b", "2")]));
    let exc_env = deployment("exc-env");
    let env_changed = |d: &Value| {
        edit(
            d,
            |o| {
                o["spec"]["template"]["spec"]["containers"][0]["env"] =
                    json!([{"name": "B", "value": "2"}, {"name": "A", "value": "9"}])
            },
        )
    };
    let tolerations = json!([{"key": "a", "operator": "Exists"}]);
    let exc_q = with_annotations(&deployment("exc-q"), json!({"example.com/skip-me": "1"}));
    let inc_ann = deployment("inc-ann");

    env.run(vec![
        case(
            "empties inside a list element",
            update(&ctrs(&d, json!([{"name": "a", "image": "1", "env": [], "resources": {}, "args": null}])), &ctrs(&d, json!([c("a", "1")]))),
            allow("ops/plain", "enforce"),
        ),
        case("exclude with a quoted key",
            update(&exc_q, &with_annotations(&exc_q, json!({"example.com/skip-me": "2"}))), allow("ops/exc-q", "enforce")),
        case("exclude with a quoted key: other key",
            update(&exc_q, &with_annotations(&exc_q, json!({"example.com/skip-me": "1", "example.com/other": "2"}))),
            deny("ops/exc-q", "metadata.annotations['example.com/other']")),
        case("include: everything else ignored",
            update(&inc_ann, &replicas(&with_labels(&inc_ann, json!({"x": "y"})), 9)), allow("ops/inc-ann", "enforce")),
        case("include: inside compared",
            update(&edit(&inc_ann, |o| o["spec"]["template"]["metadata"]["annotations"] = json!({"a": "1"})),
                   &edit(&inc_ann, |o| o["spec"]["template"]["metadata"]["annotations"] = json!({"a": "2"}))),
            deny("ops/inc-ann", "spec.template.metadata.annotations.a")),
        case("system fields changed", update(&sys_old, &sys_new), allow("ops/plain", "enforce")),
        case("system fields removed", update(&sys_old, &d), allow("ops/plain", "enforce")),
        case("system fields and replicas", update(&sys_old, &replicas(&sys_new, 3)), deny("ops/plain", "spec.replicas")),
        case("[] == absent", update(&pod(&d, "volumes", json!([])), &d), allow("ops/plain", "enforce")),
        case("{} == null", update(&node_selector(json!({})), &node_selector(Value::Null)), allow("ops/plain", "enforce")),
        case("absent == null", update(&d, &pod(&d, "tolerations", Value::Null)), allow("ops/plain", "enforce")),
        case(
            "emptiness cascades",
            update(&edit(&d, |o| o["spec"]["strategy"] = json!({"rollingUpdate": {"maxSurge": null}, "type": null})), &d),
            allow("ops/plain", "enforce"),
        ),
        case(
            "null map value == absent",
            update(&with_labels(&d, json!({"app": "web", "gone": null})), &d),
            allow("ops/plain", "enforce"),
        ),
        case(
            "{} -> {x} reported at the map",
            update(&node_selector(json!({})), &node_selector(json!({"disktype": "ssd"}))),
            deny("ops/plain", t(".nodeSelector")),
        ),
        case(
            "absent -> map reported at the key",
            update(&d, &with_annotations(&d, json!({"a": "1", "b": "2"}))),
            deny("ops/plain", "metadata.annotations"),
        ),
        case("[] -> [x]", update(&pod(&d, "tolerations", json!([])), &pod(&d, "tolerations", tolerations.clone())), deny("ops/plain", t(".tolerations"))),
        case("[x] -> []", update(&pod(&d, "tolerations", tolerations.clone()), &pod(&d, "tolerations", json!([]))), deny("ops/plain", t(".tolerations"))),
        case("1 == 1.0", update(&d, &edit(&d, |o| o["spec"]["replicas"] = json!(2.0))), allow("ops/plain", "enforce")),
        case("20 == 2e1", update(&replicas(&d, 20), &edit(&d, |o| o["spec"]["replicas"] = serde_json::from_str("2e1").unwrap())), allow("ops/plain", "enforce")),
        case("1.0 == 1 inside a list element", update(&ctrs(&d, json!([{"name": "a", "ports": [{"containerPort": 80.0}]}])), &ctrs(&d, json!([{"name": "a", "ports": [{"containerPort": 80}]}]))), allow("ops/plain", "enforce")),
        case(
            "other metadata is not a system field",
            update(&d, &edit(&d, |o| o["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "1"}]))),
            deny("ops/plain", "metadata.ownerReferences"),
        ),
        case(
            "only the top-level status is a system field",
            update(&edit(&d, |o| o["spec"]["status"] = json!("a")), &edit(&d, |o| o["spec"]["status"] = json!("b"))),
            deny("ops/plain", "spec.status"),
        ),
        case("2 -> 2.5", update(&d, &edit(&d, |o| o["spec"]["replicas"] = json!(2.5))), deny("ops/plain", "spec.replicas")),
        case("number -> string", update(&d, &edit(&d, |o| o["spec"]["replicas"] = json!("2"))), deny("ops/plain", "spec.replicas")),
        case("map -> string", update(&node_selector(json!({"a": "1"})), &node_selector(json!("a=1"))), deny("ops/plain", t(".nodeSelector"))),
        case("include: outside ignored", update(&inc, &with_labels(&inc, json!({"app": "x"}))), allow("ops/inc", "enforce")),
        case("include: inside compared", update(&inc, &replicas(&with_labels(&inc, json!({"app": "x"})), 3)), deny("ops/inc", "spec.replicas")),
        case("exclude: subtree removed", update(&exc, &replicas(&exc, 3)), allow("ops/exc", "enforce")),
        case(
            "exclude: added map excluded, rest compared",
            update(&exc, &img(&with_annotations(&exc, json!({"a": "1"})), "nginx:2")),
            deny("ops/exc", t(".containers[0].image")),
        ),
        case(
            "exclude is by segment, not by prefix",
            update(&edit(&exc, |o| o["spec"]["replicasMax"] = json!(3)), &edit(&exc, |o| o["spec"]["replicasMax"] = json!(4))),
            deny("ops/exc", "spec.replicasMax"),
        ),
        case("include+exclude: excluded part of include", update(&incexc, &add_template_annotation(&incexc)), allow("ops/incexc", "enforce")),
        case("include+exclude: outside include", update(&incexc, &replicas(&incexc, 3)), allow("ops/incexc", "enforce")),
        case("include+exclude: inside", update(&incexc, &img(&incexc, "nginx:2")), deny("ops/incexc", t(".containers[0].image"))),
        case("include [*]: other field", update(&inc_img, &env_changed(&inc_img)), allow("ops/inc-img", "enforce")),
        case("include [*]: included field", update(&inc_img, &img(&inc_img, "nginx:2")), deny("ops/inc-img", t(".containers[0].image"))),
        case(
            "alignment is decided before exclude",
            update(&exc_name, &ctrs(&exc_name, json!([c("b", "2"), c("a", "1")]))),
            deny("ops/exc-name", t(".containers")),
        ),
        case(
            "exclude + mutable",
            update(&exc_name, &ctrs(&exc_name, json!([c("a", "3"), c("b", "2")]))),
            allow("ops/exc-name", "enforce"),
        ),
        case("exclude: changes and order inside excluded list", update(&exc_env, &env_changed(&exc_env)), allow("ops/exc-env", "enforce")),
    ]);
}
