//! §4: list alignment by merge key.

use crate::fixtures::*;

#[test]
fn merge_key_alignment() {
    let env = Env::rules(
        &[
            (
                "ops",
                "align-any",
                "mode: enforce\nnamespaces: [align]\nselectors: [{apiGroup: example.com, kind: Widget}]\n".to_owned(),
            ),
            (
                "ops",
                "align",
                "mode: enforce\nnamespaces: [align]\nselectors: [{apiGroup: apps, kind: Deployment}, {kind: Service}]\n".to_owned(),
            ),
            (
                "ops",
                "align-img",
                format!("mode: enforce\nnamespaces: [align-img]\n{DEPLOY}\nmutable: ['spec.template.spec.containers[*].image']\n"),
            ),
        ],
        &[],
    );
    let d = deployment("align");
    let ab = ctrs(&d, json!([c("a", "1"), c("b", "2")]));
    let abc = ctrs(&d, json!([c("a", "1"), c("b", "2"), c("c", "3")]));
    let field =
        |name: &str, list: Value| ctrs(&d, json!([{"name": "app", "image": "x", name: list}]));
    let env_of = |list: Value| field("env", list);
    let e = |name: &str, value: &str| json!({"name": name, "value": value});
    let mounts = |list: Value| field("volumeMounts", list);
    let devices = |list: Value| field("volumeDevices", list);
    let ports = |list: Value| field("ports", list);
    let args = |list: Value| field("args", list);
    let svc = |ports: Value| {
        object(
            "v1",
            "Service",
            Some("align"),
            json!({"spec": {"ports": ports}}),
        )
    };
    let host = |ip: &str, names: Value| json!({"ip": ip, "hostnames": names});
    let di = deployment("align-img");
    let ab_i = ctrs(&di, json!([c("a", "1"), c("b", "2")]));

    env.run(vec![
        case(
            "the field name decides: ports without a port are aligned by index, not name",
            update(
                &ports(json!([{"name": "a", "x": 1}, {"name": "b", "x": 2}])),
                &ports(json!([{"name": "b", "x": 2}, {"name": "a", "x": 1}])),
            ),
            deny("ops/align", ["[0].name", "[0].x", "[1].name", "[1].x"].map(|s| t(&format!(".containers[0].ports{s}"))).join(", ")),
        ),
        case(
            "the field name decides: volumeMounts without mountPath are aligned by index",
            update(
                &mounts(json!([{"name": "a", "x": 1}, {"name": "b", "x": 2}])),
                &mounts(json!([{"name": "b", "x": 2}, {"name": "a", "x": 1}])),
            ),
            deny("ops/align", ["[0].name", "[0].x", "[1].name", "[1].x"].map(|s| t(&format!(".containers[0].volumeMounts{s}"))).join(", ")),
        ),
        case(
            "merge keys compare numerically",
            update(
                &ports(json!([{"containerPort": 80, "name": "a"}, {"containerPort": 443, "name": "b"}])),
                &ports(json!([{"containerPort": 443.0, "name": "b"}, {"containerPort": 80.0, "name": "a"}])),
            ),
            deny("ops/align", t(".containers[0].ports")),
        ),
        case(
            "service port: missing protocol is TCP",
            update(&svc(json!([{"name": "http", "port": 80}])), &svc(json!([{"name": "http", "port": 80, "protocol": "TCP"}]))),
            deny("ops/align", "spec.ports[0].protocol"),
        ),
        case(
            "scalars removed at the end",
            update(&args(json!(["a", "b", "c"])), &args(json!(["a"]))),
            deny("ops/align", format!("{}, {}", t(".containers[0].args[1]"), t(".containers[0].args[2]"))),
        ),
        case(
            "removed between kept elements: no order change",
            update(&abc, &ctrs(&d, json!([c("a", "1"), c("c", "3")]))),
            deny("ops/align", t(".containers[1]")),
        ),
        case(
            "removed and kept elements swapped",
            update(&abc, &ctrs(&d, json!([c("c", "3"), c("a", "1")]))),
            deny("ops/align", format!("{}, {}", t(".containers"), t(".containers[1]"))),
        ),
        case(
            "scalars reordered: by index, not the list path",
            update(&args(json!(["a", "b"])), &args(json!(["b", "a"]))),
            deny("ops/align", format!("{}, {}", t(".containers[0].args[0]"), t(".containers[0].args[1]"))),
        ),
        case(
            "any list of named objects is keyed by name",
            update(
                &object("example.com/v1", "Widget", Some("align"), json!({"spec": {"items": [{"name": "a", "v": 1}, {"name": "b", "v": 2}]}})),
                &object("example.com/v1", "Widget", Some("align"), json!({"spec": {"items": [{"name": "z", "v": 0}, {"name": "a", "v": 1}, {"name": "b", "v": 2}]}})),
            ),
            deny("ops/align-any", "spec.items[0]"),
        ),
        case("containers reordered", update(&ab, &ctrs(&d, json!([c("b", "2"), c("a", "1")]))), deny("ops/align", t(".containers"))),
        case(
            "reordered and changed: new index",
            update(&ab, &ctrs(&d, json!([c("b", "3"), c("a", "1")]))),
            deny("ops/align", format!("{}, {}", t(".containers"), t(".containers[0].image"))),
        ),
        case("sidecar at index 0", update(&ab, &ctrs(&d, json!([c("s", "9"), c("a", "1"), c("b", "2")]))), deny("ops/align", t(".containers[0]"))),
        case(
            "sidecar at 0 and change in a kept element at its new index",
            update(&ab, &ctrs(&d, json!([c("s", "9"), c("a", "1"), c("b", "3")]))),
            deny("ops/align", format!("{}, {}", t(".containers[0]"), t(".containers[2].image"))),
        ),
        case(
            "reordered and inserted",
            update(&ab, &ctrs(&d, json!([c("b", "2"), c("s", "9"), c("a", "1")]))),
            deny("ops/align", format!("{}, {}", t(".containers"), t(".containers[1]"))),
        ),
        case(
            "non-string name: by index",
            update(&env_of(json!([{"name": 1, "value": "a"}, {"name": 2, "value": "b"}])), &env_of(json!([{"name": 2, "value": "b"}, {"name": 1, "value": "a"}]))),
            deny(
                "ops/align",
                ["[0].name", "[0].value", "[1].name", "[1].value"]
                    .map(|s| t(&format!(".containers[0].env{s}")))
                    .join(", "),
            ),
        ),
        case("sidecar appended", update(&ab, &ctrs(&d, json!([c("a", "1"), c("b", "2"), c("s", "9")]))), deny("ops/align", t(".containers[2]"))),
        case("removed at old index", update(&abc, &ctrs(&d, json!([c("a", "1"), c("c", "3")]))), deny("ops/align", t(".containers[1]"))),
        case(
            "removed and kept element changed",
            update(&ab, &ctrs(&d, json!([c("b", "3")]))),
            deny("ops/align", format!("{}, {}", t(".containers[0]"), t(".containers[0].image"))),
        ),
        case(
            "env by name: inserted and changed",
            update(&env_of(json!([e("A", "1"), e("B", "2")])), &env_of(json!([e("X", "0"), e("A", "1"), e("B", "3")]))),
            deny("ops/align", format!("{}, {}", t(".containers[0].env[0]"), t(".containers[0].env[2].value"))),
        ),
        case(
            "env reordered",
            update(&env_of(json!([e("A", "1"), e("B", "2")])), &env_of(json!([e("B", "2"), e("A", "1")]))),
            deny("ops/align", t(".containers[0].env")),
        ),
        case(
            "env duplicate names: by index",
            update(&env_of(json!([e("A", "1"), e("A", "2")])), &env_of(json!([e("A", "2"), e("A", "1")]))),
            deny("ops/align", format!("{}, {}", t(".containers[0].env[0].value"), t(".containers[0].env[1].value"))),
        ),
        case(
            "env missing name: by index",
            update(&env_of(json!([e("A", "1"), {"value": "x"}])), &env_of(json!([{"value": "x"}, e("A", "1")]))),
            deny(
                "ops/align",
                ["[0].name", "[0].value", "[1].name", "[1].value"]
                    .map(|s| t(&format!(".containers[0].env{s}")))
                    .join(", "),
            ),
        ),
        case(
            "volumeMounts by mountPath",
            update(
                &mounts(json!([{"name": "x", "mountPath": "/a"}, {"name": "y", "mountPath": "/b"}])),
                &mounts(json!([{"name": "y", "mountPath": "/a"}, {"name": "x", "mountPath": "/b"}])),
            ),
            deny("ops/align", format!("{}, {}", t(".containers[0].volumeMounts[0].name"), t(".containers[0].volumeMounts[1].name"))),
        ),
        case(
            "volumeMounts inserted at 0",
            update(
                &mounts(json!([{"name": "d", "mountPath": "/data"}])),
                &mounts(json!([{"name": "c", "mountPath": "/cache"}, {"name": "d", "mountPath": "/data"}])),
            ),
            deny("ops/align", t(".containers[0].volumeMounts[0]")),
        ),
        case(
            "volumeDevices by devicePath",
            update(
                &devices(json!([{"name": "x", "devicePath": "/dev/a"}, {"name": "y", "devicePath": "/dev/b"}])),
                &devices(json!([{"name": "y", "devicePath": "/dev/a"}, {"name": "x", "devicePath": "/dev/b"}])),
            ),
            deny("ops/align", format!("{}, {}", t(".containers[0].volumeDevices[0].name"), t(".containers[0].volumeDevices[1].name"))),
        ),
        case(
            "ports: missing protocol is TCP",
            update(
                &ports(json!([{"containerPort": 80, "name": "http"}])),
                &ports(json!([{"containerPort": 8080, "protocol": "TCP", "name": "alt"}, {"containerPort": 80, "protocol": "TCP", "name": "http"}])),
            ),
            deny("ops/align", format!("{}, {}", t(".containers[0].ports[0]"), t(".containers[0].ports[1].protocol"))),
        ),
        case(
            "ports by containerPort, not name",
            update(
                &ports(json!([{"containerPort": 80, "name": "a"}, {"containerPort": 443, "name": "b"}])),
                &ports(json!([{"containerPort": 80, "name": "b"}, {"containerPort": 443, "name": "a"}])),
            ),
            deny("ops/align", format!("{}, {}", t(".containers[0].ports[0].name"), t(".containers[0].ports[1].name"))),
        ),
        case(
            "ports keyed by (containerPort, protocol)",
            update(
                &ports(json!([{"containerPort": 53, "protocol": "UDP", "name": "dns-udp"}, {"containerPort": 53, "protocol": "TCP", "name": "dns-tcp"}])),
                &ports(json!([{"containerPort": 53, "protocol": "TCP", "name": "dns-tcp"}, {"containerPort": 53, "protocol": "UDP", "name": "dns-udp"}])),
            ),
            deny("ops/align", t(".containers[0].ports")),
        ),
        case(
            "volumes by name",
            update(&pod(&d, "volumes", json!([{"name": "data", "emptyDir": {"medium": "Memory"}}])),
                   &pod(&d, "volumes", json!([{"name": "cache", "emptyDir": {"medium": "Memory"}}, {"name": "data", "emptyDir": {"medium": "Memory"}}]))),
            deny("ops/align", t(".volumes[0]")),
        ),
        case(
            "initContainers by name",
            update(&pod(&d, "initContainers", json!([c("migrate", "1")])), &pod(&d, "initContainers", json!([c("wait", "1"), c("migrate", "1")]))),
            deny("ops/align", t(".initContainers[0]")),
        ),
        case(
            "imagePullSecrets by name",
            update(&pod(&d, "imagePullSecrets", json!([{"name": "r1"}])), &pod(&d, "imagePullSecrets", json!([{"name": "r0"}, {"name": "r1"}]))),
            deny("ops/align", t(".imagePullSecrets[0]")),
        ),
        case(
            "hostAliases by ip",
            update(&pod(&d, "hostAliases", json!([host("10.0.0.1", json!(["a"]))])),
                   &pod(&d, "hostAliases", json!([host("10.0.0.2", json!(["b"])), host("10.0.0.1", json!(["a"]))]))),
            deny("ops/align", t(".hostAliases[0]")),
        ),
        case(
            "hostAliases moved and changed",
            update(&pod(&d, "hostAliases", json!([host("10.0.0.1", json!(["a"])), host("10.0.0.2", json!(["b"]))])),
                   &pod(&d, "hostAliases", json!([host("10.0.0.2", json!(["b", "c"])), host("10.0.0.1", json!(["a"]))]))),
            deny("ops/align", format!("{}, {}", t(".hostAliases"), t(".hostAliases[0].hostnames[1]"))),
        ),
        case(
            "scalars by index",
            update(&args(json!(["a", "b"])), &args(json!(["x", "a", "b"]))),
            deny("ops/align", ["[0]", "[1]", "[2]"].map(|s| t(&format!(".containers[0].args{s}"))).join(", ")),
        ),
        case(
            "objects without name: by index",
            update(&pod(&d, "tolerations", json!([{"key": "a", "operator": "Exists"}])),
                   &pod(&d, "tolerations", json!([{"key": "b", "operator": "Exists"}, {"key": "a", "operator": "Exists"}]))),
            deny("ops/align", format!("{}, {}", t(".tolerations[0].key"), t(".tolerations[1]"))),
        ),
        case(
            "service ports by port",
            update(&svc(json!([{"name": "a", "port": 80}, {"name": "b", "port": 443}])),
                   &svc(json!([{"name": "b", "port": 80}, {"name": "a", "port": 443}]))),
            deny("ops/align", "spec.ports[0].name, spec.ports[1].name"),
        ),
        case(
            "service port inserted at 0",
            update(&svc(json!([{"name": "http", "port": 80}])), &svc(json!([{"name": "metrics", "port": 9090}, {"name": "http", "port": 80}]))),
            deny("ops/align", "spec.ports[0]"),
        ),
        case(
            "service ports keyed by (port, protocol), TCP default",
            update(&svc(json!([{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53}])),
                   &svc(json!([{"name": "dns-tcp", "port": 53}, {"name": "dns", "port": 53, "protocol": "UDP"}]))),
            deny("ops/align", "spec.ports"),
        ),
        case(
            "image mutable: sidecar is not covered",
            update(&ab_i, &ctrs(&di, json!([c("s", "9"), c("a", "1"), c("b", "2")]))),
            deny("ops/align-img", t(".containers[0]")),
        ),
        case(
            "image mutable: sidecar and image change",
            update(&ab_i, &ctrs(&di, json!([c("s", "9"), c("a", "1"), c("b", "3")]))),
            deny("ops/align-img", t(".containers[0]")),
        ),
        case(
            "image mutable: reorder is not covered",
            update(&ab_i, &ctrs(&di, json!([c("b", "3"), c("a", "1")]))),
            deny("ops/align-img", t(".containers")),
        ),
        case(
            "image mutable: removal is not covered",
            update(&ab_i, &ctrs(&di, json!([c("a", "1")]))),
            deny("ops/align-img", t(".containers[1]")),
        ),
        case("image mutable: images", update(&ab_i, &ctrs(&di, json!([c("a", "5"), c("b", "6")]))), allow("ops/align-img", "enforce")),
    ]);
}
