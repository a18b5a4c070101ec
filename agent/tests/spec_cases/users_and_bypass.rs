//! §3 steps 2-4: users, exemptUsers, deletion, bypass.

use crate::fixtures::*;

#[test]
fn users_exemptions_deletion_and_bypass() {
    let env = Env::rules(
        &[
            (
                "ops",
                "scoped",
                format!(
                    "mode: enforce\npriority: 10\nnamespaces: [users, users-warn]\n{DEPLOY}\nusers: [alice, carol]\n"
                ),
            ),
            (
                "ops",
                "fallback",
                format!("mode: enforce\nnamespaces: [users, users-warn]\n{DEPLOY}\n"),
            ),
            (
                "ops",
                "exempt",
                format!(
                    "mode: enforce\nnamespaces: [exempt, exempt-dry]\n{DEPLOY}\nexemptUsers: ['system:serviceaccount:*:argocd-*', flux]\n"
                ),
            ),
            (
                "ops",
                "both",
                format!(
                    "mode: enforce\nnamespaces: [both]\n{DEPLOY}\nusers: [alice]\nexemptUsers: [alice]\n"
                ),
            ),
            (
                "ops",
                "empty-users",
                format!("mode: enforce\nnamespaces: [empty-users]\n{DEPLOY}\nusers: []\n"),
            ),
            (
                "ops",
                "strict",
                format!("mode: enforce\nnamespaces: [strict, strict-warn]\n{DEPLOY}\n"),
            ),
            (
                "ops",
                "exact-users",
                format!("mode: enforce\nnamespaces: [exact-users]\n{DEPLOY}\nusers: ['ali*']\n"),
            ),
            (
                "ops",
                "custom",
                format!(
                    "mode: enforce\nnamespaces: [custom]\n{DEPLOY}\nbypass: example.com/skip\n"
                ),
            ),
        ],
        &[
            ("users-warn", Some("warn")),
            ("exempt-dry", Some("dry-run")),
            ("strict-warn", Some("warn")),
        ],
    );
    let up = |ns: &str| {
        let d = deployment(ns);
        update(&d, &replicas(&d, 3))
    };
    let deleting = |ns: &str| {
        edit(&deployment(ns), |o| {
            o["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            o["metadata"]["finalizers"] = json!(["example.com/cleanup"]);
        })
    };
    let strict = deployment("strict");
    let bypass = |d: &Value, value: &str| {
        with_annotations(
            d,
            json!({"note": "x", "drift-sentinel.k8s.io/bypass": value}),
        )
    };
    let noted = with_annotations(&strict, json!({"note": "x"}));
    let custom = with_annotations(&deployment("custom"), json!({"note": "x"}));
    let strict_warn = deployment("strict-warn");

    env.run(vec![
        case(
            "bypass true -> false is no violation",
            update(&bypass(&strict, "true"), &bypass(&strict, "false")),
            allow("ops/strict", "enforce"),
        ),
        case(
            "deletionTimestamp only on the new object does not count",
            update(&strict, &replicas(&deleting("strict"), 3)),
            deny(
                "ops/strict",
                "metadata.deletionTimestamp, metadata.finalizers, spec.replicas",
            ),
        ),
        case(
            "deletionTimestamp null is absent",
            update(
                &edit(&strict, |o| {
                    o["metadata"]["deletionTimestamp"] = Value::Null
                }),
                &replicas(&strict, 3),
            ),
            deny("ops/strict", "spec.replicas"),
        ),
        case(
            "listed user is judged",
            up("users"),
            deny("ops/scoped", "spec.replicas"),
        ),
        case(
            "second listed user is judged",
            as_user(up("users"), "carol"),
            deny("ops/scoped", "spec.replicas"),
        ),
        case(
            "unlisted user allowed, no fall-through to a lower rule",
            as_user(up("users"), "bob"),
            allow("ops/scoped", "enforce"),
        ),
        case(
            "unlisted user: effective mode reported",
            as_user(up("users-warn"), "bob"),
            allow("ops/scoped", "warn"),
        ),
        case(
            "listed user in warn namespace",
            up("users-warn"),
            warned("ops/scoped", "spec.replicas"),
        ),
        case(
            "exempt user glob",
            as_user(
                up("exempt"),
                "system:serviceaccount:argocd:argocd-application-controller",
            ),
            allow("ops/exempt", "enforce"),
        ),
        case(
            "exempt exact name",
            as_user(up("exempt"), "flux"),
            allow("ops/exempt", "enforce"),
        ),
        case(
            "exempt glob is anchored",
            as_user(up("exempt"), "flux2"),
            deny("ops/exempt", "spec.replicas"),
        ),
        case(
            "exempt glob not matching",
            as_user(up("exempt"), "system:serviceaccount:argocd:repo-server"),
            deny("ops/exempt", "spec.replicas"),
        ),
        case(
            "non-exempt user",
            up("exempt"),
            deny("ops/exempt", "spec.replicas"),
        ),
        case(
            "exempt: effective mode reported",
            as_user(up("exempt-dry"), "flux"),
            allow("ops/exempt", "dry-run"),
        ),
        case(
            "non-exempt in dry-run namespace",
            up("exempt-dry"),
            would_deny("ops/exempt", "spec.replicas"),
        ),
        case(
            "listed and exempt",
            up("both"),
            allow("ops/both", "enforce"),
        ),
        case(
            "users: [] is not set",
            up("empty-users"),
            deny("ops/empty-users", "spec.replicas"),
        ),
        case(
            "users are exact names, not globs",
            up("exact-users"),
            allow("ops/exact-users", "enforce"),
        ),
        case(
            "being deleted: finalizer removal",
            update(
                &deleting("strict"),
                &edit(&deleting("strict"), |o| {
                    o["metadata"]["finalizers"] = json!([])
                }),
            ),
            allow("ops/strict", "enforce"),
        ),
        case(
            "being deleted: any change",
            update(&deleting("strict"), &replicas(&deleting("strict"), 9)),
            allow("ops/strict", "enforce"),
        ),
        case(
            "being deleted: effective mode reported",
            update(
                &deleting("strict-warn"),
                &replicas(&deleting("strict-warn"), 9),
            ),
            allow("ops/strict", "warn"),
        ),
        case(
            "not being deleted: finalizer removal is a change",
            update(
                &edit(&strict, |o| {
                    o["metadata"]["finalizers"] = json!(["example.com/cleanup"])
                }),
                &strict,
            ),
            deny("ops/strict", "metadata.finalizers"),
        ),
        case(
            "bypass true",
            update(&noted, &replicas(&bypass(&strict, "true"), 3)),
            allow("ops/strict", "enforce"),
        ),
        case(
            "bypass TRUE",
            update(&noted, &replicas(&bypass(&strict, "TRUE"), 3)),
            allow("ops/strict", "enforce"),
        ),
        case(
            "bypass True",
            update(&noted, &replicas(&bypass(&strict, "True"), 3)),
            allow("ops/strict", "enforce"),
        ),
        case(
            "bypass yes is not a bypass; the annotation is not a violation",
            update(&noted, &replicas(&bypass(&strict, "yes"), 3)),
            deny("ops/strict", "spec.replicas"),
        ),
        case(
            "bypass false kept",
            update(
                &bypass(&strict, "false"),
                &replicas(&bypass(&strict, "false"), 3),
            ),
            deny("ops/strict", "spec.replicas"),
        ),
        case(
            "bypass annotation added with a non-true value is no violation",
            update(&noted, &bypass(&strict, "no")),
            allow("ops/strict", "enforce"),
        ),
        case(
            "bypass removed",
            update(&bypass(&strict, "true"), &noted),
            allow("ops/strict", "enforce"),
        ),
        case(
            "bypass removed, last annotation",
            update(
                &with_annotations(&strict, json!({"drift-sentinel.k8s.io/bypass": "true"})),
                &strict,
            ),
            allow("ops/strict", "enforce"),
        ),
        case(
            "bypass removed with a change",
            update(&bypass(&strict, "true"), &replicas(&noted, 3)),
            deny("ops/strict", "spec.replicas"),
        ),
        case(
            "bypass: effective mode reported",
            update(&strict_warn, &replicas(&bypass(&strict_warn, "true"), 3)),
            allow("ops/strict", "warn"),
        ),
        case(
            "custom bypass key",
            update(
                &custom,
                &replicas(
                    &with_annotations(&custom, json!({"note": "x", "example.com/skip": "True"})),
                    3,
                ),
            ),
            allow("ops/custom", "enforce"),
        ),
        case(
            "custom bypass: default key is no bypass",
            update(
                &with_annotations(
                    &custom,
                    json!({"note": "x", "drift-sentinel.k8s.io/bypass": "true"}),
                ),
                &replicas(
                    &with_annotations(
                        &custom,
                        json!({"note": "x", "drift-sentinel.k8s.io/bypass": "true"}),
                    ),
                    3,
                ),
            ),
            deny("ops/custom", "spec.replicas"),
        ),
        case(
            "custom bypass: default key is an ordinary annotation",
            update(
                &custom,
                &with_annotations(
                    &custom,
                    json!({"note": "x", "drift-sentinel.k8s.io/bypass": "true"}),
                ),
            ),
            deny(
                "ops/custom",
                "metadata.annotations['drift-sentinel.k8s.io/bypass']",
            ),
        ),
        case(
            "custom bypass removed",
            update(
                &with_annotations(&custom, json!({"note": "x", "example.com/skip": "true"})),
                &custom,
            ),
            allow("ops/custom", "enforce"),
        ),
    ]);
}
