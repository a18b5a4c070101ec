//! §2, §3 step 1: which rule matches.

use crate::fixtures::*;

#[test]
fn rule_matching_priority_ties_globs_selectors_labels() {
    let r = |mode: &str, priority: i64, namespaces: &str, rest: &str| {
        format!("mode: {mode}\npriority: {priority}\nnamespaces: {namespaces}\n{rest}\n")
    };
    let mut files = rule_files(&[
        (
            "ops",
            "glob-range",
            r("enforce", 0, "['rng-[0-9]']", DEPLOY),
        ),
        (
            "ops",
            "by-request-kind",
            r("enforce", 0, "[reqkind]", DEPLOY),
        ),
        (
            "ops",
            "core-any",
            r("enforce", 0, "[core-any]", "selectors: [{kind: '*'}]"),
        ),
        ("ops", "prio-low", r("enforce", 0, "[prio]", DEPLOY)),
        ("ops", "prio-high", r("warn", 10, "[prio]", DEPLOY)),
        ("ops", "prio-neg", r("enforce", -5, "[prio-neg]", DEPLOY)),
        (
            "ops",
            "prio-default",
            format!("mode: dry-run\nnamespaces: [prio-neg]\n{DEPLOY}\n"),
        ),
        // Ties: (namespace, name) as byte strings, ascending. "a" < "a-b" < "b" although
        // the joined "a-b/a" sorts before "a/z".
        ("b", "a", r("dry-run", 3, "[tie-ns]", DEPLOY)),
        ("a-b", "a", r("enforce", 3, "[tie-ns]", DEPLOY)),
        ("a", "z", r("warn", 3, "[tie-ns]", DEPLOY)),
        ("same", "rule-b", r("enforce", 1, "[tie-name]", DEPLOY)),
        ("same", "rule-a-x", r("dry-run", 1, "[tie-name]", DEPLOY)),
        ("same", "rule-a", r("warn", 1, "[tie-name]", DEPLOY)),
        ("ops", "glob-q", r("enforce", 0, "['team-?']", DEPLOY)),
        ("ops", "glob-set", r("enforce", 0, "['shop-[ab]']", DEPLOY)),
        (
            "ops",
            "cluster",
            r(
                "enforce",
                0,
                "['*']",
                "selectors: [{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole}]",
            ),
        ),
        (
            "ops",
            "kube-only",
            r(
                "enforce",
                0,
                "['kube-*']",
                "selectors: [{apiGroup: rbac.authorization.k8s.io, kind: ClusterRoleBinding}]",
            ),
        ),
        (
            "ops",
            "core",
            r("enforce", 0, "[sel]", "selectors: [{kind: ConfigMap}]"),
        ),
        (
            "ops",
            "core-empty",
            r(
                "enforce",
                0,
                "[sel]",
                "selectors: [{apiGroup: '', kind: Service}]",
            ),
        ),
        (
            "ops",
            "any-group",
            r(
                "enforce",
                0,
                "[sel]",
                "selectors: [{apiGroup: '*', kind: Widget}]",
            ),
        ),
        (
            "ops",
            "any-kind",
            r(
                "enforce",
                0,
                "[sel]",
                "selectors: [{apiGroup: batch, kind: '*'}]",
            ),
        ),
        (
            "ops",
            "labels",
            r(
                "enforce",
                0,
                "[lbl]",
                &format!("{DEPLOY}\nlabels: [tier=frontend, managed]"),
            ),
        ),
        (
            "ops",
            "multi",
            r(
                "enforce",
                0,
                "[multi, 'other-*']",
                "selectors: [{apiGroup: apps, kind: StatefulSet}, {apiGroup: apps, kind: Deployment}]",
            ),
        ),
    ]);
    // The rule annotation is compared case-insensitively after trimming.
    files.push((
        "annot-trim.yaml".into(),
        rule_config_map("ops", "annot-trim", &r("enforce", 0, "[annot]", DEPLOY)).replace(
            "drift-sentinel.k8s.io/rule: \"true\"",
            "drift-sentinel.k8s.io/rule: \" True \"",
        ),
    ));
    files.push((
        "annot-false.yaml".into(),
        rule_config_map(
            "ops",
            "annot-false",
            &r("enforce", 0, "[annot-false]", DEPLOY),
        )
        .replace(
            "drift-sentinel.k8s.io/rule: \"true\"",
            "drift-sentinel.k8s.io/rule: \"false\"",
        ),
    ));
    let env = Env::start(files, &[]);

    let scale_up = |ns: &str| {
        let d = deployment(ns);
        update(&d, &replicas(&d, 3))
    };
    let kind_change = |api: &str, kind: &str, ns: &str| {
        let old = object(api, kind, Some(ns), json!({"spec": {"size": 1}}));
        update(&old, &edit(&old, |o| o["spec"]["size"] = json!(2)))
    };
    let role = object(
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
        None,
        json!({"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
    );
    let role_new = edit(&role, |o| o["rules"][0]["verbs"] = json!(["get", "list"]));
    let binding = object(
        "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding",
        None,
        json!({"subjects": [{"kind": "User", "name": "a"}]}),
    );
    let binding_new = edit(&binding, |o| o["subjects"][0]["name"] = json!("b"));
    let cm = object(
        "v1",
        "ConfigMap",
        Some("sel"),
        json!({"data": {"key": "a"}}),
    );
    let cm_new = edit(&cm, |o| o["data"]["key"] = json!("b"));
    let foreign_cm = object(
        "example.com/v1",
        "ConfigMap",
        Some("sel"),
        json!({"data": {"key": "a"}}),
    );
    let foreign_cm_new = edit(&foreign_cm, |o| o["data"]["key"] = json!("b"));
    let svc = object(
        "v1",
        "Service",
        Some("sel"),
        json!({"spec": {"type": "ClusterIP"}}),
    );
    let svc_new = edit(&svc, |o| o["spec"]["type"] = json!("NodePort"));
    let lbl = deployment("lbl");
    let front = with_labels(
        &lbl,
        json!({"app": "web", "tier": "frontend", "managed": ""}),
    );
    let sts = edit(&deployment("multi"), |o| o["kind"] = json!("StatefulSet"));

    env.run(vec![
        case(
            "* matches an explicitly empty namespace",
            {
                let mut review = update(&role, &role_new);
                review["request"]["namespace"] = json!("");
                review
            },
            deny("ops/cluster", "rules[0].verbs[1]"),
        ),
        case(
            "glob [0-9] matches a digit",
            scale_up("rng-7"),
            deny("ops/glob-range", "spec.replicas"),
        ),
        case(
            "glob [0-9] does not match a letter",
            scale_up("rng-x"),
            no_rule(),
        ),
        case(
            "selector matches the request kind",
            {
                let d = deployment("reqkind");
                let mut review = update(&d, &replicas(&d, 3));
                for side in ["object", "oldObject"] {
                    review["request"][side]["apiVersion"] = json!("example.com/v1");
                    review["request"][side]["kind"] = json!("Other");
                }
                review
            },
            deny("ops/by-request-kind", "spec.replicas"),
        ),
        case(
            "{kind: '*'} is any core kind",
            update(
                &object(
                    "v1",
                    "ConfigMap",
                    Some("core-any"),
                    json!({"data": {"k": "a"}}),
                ),
                &object(
                    "v1",
                    "ConfigMap",
                    Some("core-any"),
                    json!({"data": {"k": "b"}}),
                ),
            ),
            deny("ops/core-any", "data.k"),
        ),
        case(
            "{kind: '*'} is only the core group",
            scale_up("core-any"),
            no_rule(),
        ),
        case(
            "higher priority wins",
            scale_up("prio"),
            warned("ops/prio-high", "spec.replicas"),
        ),
        case(
            "default priority 0 beats -5",
            scale_up("prio-neg"),
            would_deny("ops/prio-default", "spec.replicas"),
        ),
        case(
            "tie: namespace byte order first",
            scale_up("tie-ns"),
            warned("a/z", "spec.replicas"),
        ),
        case(
            "tie: then name byte order",
            scale_up("tie-name"),
            warned("same/rule-a", "spec.replicas"),
        ),
        case(
            "glob ? matches one character",
            scale_up("team-1"),
            deny("ops/glob-q", "spec.replicas"),
        ),
        case("glob ? does not match two", scale_up("team-10"), no_rule()),
        case(
            "glob [ab] matches a",
            scale_up("shop-a"),
            deny("ops/glob-set", "spec.replicas"),
        ),
        case(
            "glob [ab] matches b",
            scale_up("shop-b"),
            deny("ops/glob-set", "spec.replicas"),
        ),
        case("glob [ab] does not match c", scale_up("shop-c"), no_rule()),
        case(
            "* matches cluster-scoped",
            update(&role, &role_new),
            deny("ops/cluster", "rules[0].verbs[1]"),
        ),
        case(
            "kube-* does not match cluster-scoped",
            update(&binding, &binding_new),
            no_rule(),
        ),
        case(
            "apiGroup absent is the core group",
            update(&cm, &cm_new),
            deny("ops/core", "data.key"),
        ),
        case(
            "core selector does not match another group",
            update(&foreign_cm, &foreign_cm_new),
            no_rule(),
        ),
        case(
            "apiGroup '' is the core group",
            update(&svc, &svc_new),
            deny("ops/core-empty", "spec.type"),
        ),
        case(
            "apiGroup * matches a named group",
            kind_change("a.example.com/v1", "Widget", "sel"),
            deny("ops/any-group", "spec.size"),
        ),
        case(
            "apiGroup * matches the core group",
            kind_change("v1", "Widget", "sel"),
            deny("ops/any-group", "spec.size"),
        ),
        case(
            "kind * matches Job",
            kind_change("batch/v1", "Job", "sel"),
            deny("ops/any-kind", "spec.size"),
        ),
        case(
            "kind * matches CronJob",
            kind_change("batch/v1", "CronJob", "sel"),
            deny("ops/any-kind", "spec.size"),
        ),
        case("selector kind mismatch", scale_up("sel"), no_rule()),
        case(
            "second selector matches",
            update(&sts, &replicas(&sts, 3)),
            deny("ops/multi", "spec.replicas"),
        ),
        case(
            "second namespace glob matches",
            scale_up("other-x"),
            deny("ops/multi", "spec.replicas"),
        ),
        case(
            "labels key=value and key hold",
            update(&front, &replicas(&front, 3)),
            deny("ops/labels", "spec.replicas"),
        ),
        case(
            "label key missing",
            update(
                &lbl,
                &replicas(&with_labels(&lbl, json!({"tier": "frontend"})), 3),
            ),
            no_rule(),
        ),
        case(
            "label value differs",
            update(
                &lbl,
                &replicas(
                    &with_labels(&lbl, json!({"tier": "backend", "managed": "x"})),
                    3,
                ),
            ),
            no_rule(),
        ),
        case(
            "labels are read from the new object (removed)",
            update(&front, &lbl),
            no_rule(),
        ),
        case(
            "no labels at all",
            update(
                &lbl,
                &edit(&lbl, |o| {
                    o["metadata"].as_object_mut().unwrap().remove("labels");
                }),
            ),
            no_rule(),
        ),
        case(
            "labels are read from the new object (added)",
            update(
                &lbl,
                &with_labels(
                    &lbl,
                    json!({"app": "web", "tier": "frontend", "managed": "true"}),
                ),
            ),
            deny(
                "ops/labels",
                "metadata.labels.managed, metadata.labels.tier",
            ),
        ),
        case(
            "rule annotation trimmed, case-insensitive",
            scale_up("annot"),
            deny("ops/annot-trim", "spec.replicas"),
        ),
        case(
            "rule annotation false is not a rule",
            scale_up("annot-false"),
            no_rule(),
        ),
    ]);
}
