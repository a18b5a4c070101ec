//! §2 validation: invalid rules are reported and never applied; the others keep working.

use crate::fixtures::*;

#[test]
fn invalid_rules_are_reported_and_isolated() {
    let base = |mode: &str| format!("mode: {mode}\npriority: 100\nnamespaces: ['*']\n{DEPLOY}\n");
    let off = base("off");
    // (name, spec, text the reason must contain)
    let bad: Vec<(&str, String, Option<&str>)> = vec![
        (
            "wrong-type-string-priority",
            format!("mode: off\npriority: \"5\"\nnamespaces: ['*']\n{DEPLOY}\n"),
            Some("priority"),
        ),
        (
            "wrong-type-namespaces",
            format!("mode: off\npriority: 100\nnamespaces: '*'\n{DEPLOY}\n"),
            Some("namespaces"),
        ),
        (
            "bad-user-glob",
            format!("{off}exemptUsers: ['robot-[']\n"),
            None,
        ),
        (
            "negative-index",
            format!("{off}include: ['spec.template.spec.containers[-1]']\n"),
            Some("containers[-1]"),
        ),
        (
            "trailing-dot",
            format!("{off}mutable: ['spec.']\n"),
            Some("spec."),
        ),
        (
            "leading-dot",
            format!("{off}mutable: ['.spec']\n"),
            Some(".spec"),
        ),
        (
            "unknown-key",
            format!("{off}mutabel: [spec.replicas]\n"),
            Some("mutabel"),
        ),
        ("bad-mode", base("block"), Some("block")),
        (
            "missing-mode",
            format!("priority: 100\nnamespaces: ['*']\n{DEPLOY}\n"),
            None,
        ),
        (
            "empty-namespaces",
            format!("mode: off\npriority: 100\nnamespaces: []\n{DEPLOY}\n"),
            None,
        ),
        (
            "missing-namespaces",
            format!("mode: off\npriority: 100\n{DEPLOY}\n"),
            None,
        ),
        (
            "empty-selectors",
            "mode: off\npriority: 100\nnamespaces: ['*']\nselectors: []\n".to_owned(),
            None,
        ),
        (
            "selector-without-kind",
            "mode: off\npriority: 100\nnamespaces: ['*']\nselectors: [{apiGroup: apps}]\n"
                .to_owned(),
            None,
        ),
        (
            "bad-glob",
            format!("mode: off\npriority: 100\nnamespaces: ['prod-[abc']\n{DEPLOY}\n"),
            None,
        ),
        (
            "unterminated-bracket",
            format!("{off}mutable: ['spec.template.spec.containers[0']\n"),
            Some("spec.template.spec.containers[0"),
        ),
        (
            "empty-segment",
            format!("{off}mutable: ['spec..replicas']\n"),
            Some("spec..replicas"),
        ),
        (
            "bad-index",
            format!("{off}include: ['spec.template.spec.containers[x].image']\n"),
            Some("containers[x]"),
        ),
        (
            "unterminated-quote",
            format!("{off}exclude: [\"metadata.annotations['a/b\"]\n"),
            Some("metadata.annotations['a/b"),
        ),
        (
            "wrong-type-priority",
            format!("mode: off\npriority: high\nnamespaces: ['*']\n{DEPLOY}\n"),
            Some("priority"),
        ),
        (
            "wrong-type-list",
            format!("{off}mutable: spec.replicas\n"),
            Some("mutable"),
        ),
        (
            "wrong-type-float",
            format!("mode: off\npriority: 1.5\nnamespaces: ['*']\n{DEPLOY}\n"),
            Some("priority"),
        ),
        ("mode-case", base("Enforce"), Some("Enforce")),
        (
            "selector-unknown-key",
            off.replace(
                DEPLOY,
                "selectors: [{apiGroup: apps, kind: Deployment, version: v1}]",
            ),
            Some("version"),
        ),
        ("spec-not-a-map", "- mode: off\n".to_owned(), None),
    ];
    let mut files: Files = vec![(
        "good.yaml".into(),
        rule_config_map(
            "ops",
            "good",
            &format!("mode: enforce\nnamespaces: ['*']\n{DEPLOY}\n"),
        ),
    )];
    files.push((
        "bad.yaml".into(),
        bad.iter()
            .map(|(name, spec, _)| rule_config_map("bad", name, spec))
            .collect::<Vec<_>>()
            .join("---\n"),
    ));
    files.push((
        "extra.yml".into(),
        rule_config_map(
            "ops",
            "full",
            &format!(
                "mode: enforce\npriority: 200\nnamespaces: [full-ns]\n{DEPLOY}\nlabels: [app=web]\nusers: [alice, bob]\nexemptUsers: ['robot-*']\ninclude: [spec, metadata.labels]\nexclude: [spec.template.metadata]\nmutable: ['spec.template.spec.containers[*].image']\nbypass: example.com/bypass\n"
            ),
        ),
    ));
    // A rule ConfigMap without `data.spec`: no mode, so invalid.
    files.push((
        "no-spec.yaml".into(),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: no-spec\n  namespace: bad\n  annotations:\n    drift-sentinel.k8s.io/rule: \"true\"\ndata:\n  other: x\n".into(),
    ));
    // Only `*.yaml`/`*.yml` files are read.
    files.push((
        "ignored.txt".into(),
        rule_config_map(
            "ops",
            "txt",
            &format!("mode: off\npriority: 1000\nnamespaces: ['*']\n{DEPLOY}\n"),
        ),
    ));
    // A ConfigMap without the rule annotation is not a rule (neither valid nor invalid).
    files.push((
        "plain-configmap.yaml".into(),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: ops\ndata:\n  spec: |\n    mode: nonsense\n".into(),
    ));
    let env = Env::start(files, &[]);
    let status = env
        .agent
        .wait_for_status("invalid rules to be reported", |s| {
            s["invalidRules"]
                .as_array()
                .is_some_and(|a| a.len() > bad.len())
        });
    let invalid = status["invalidRules"].as_array().unwrap();
    let mut problems = Vec::new();
    if invalid.len() != bad.len() + 1 {
        problems.push(format!(
            "{} invalid rules reported, want {}",
            invalid.len(),
            bad.len() + 1
        ));
    }
    for (name, _, text) in bad.iter().chain([&("no-spec", String::new(), None)]) {
        let id = format!("bad/{name}");
        let entry = invalid.iter().find(|e| {
            e.as_object().is_some_and(|m| {
                m.values()
                    .any(|v| v.as_str().is_some_and(|s| s == id || s.contains(&id)))
            })
        });
        let Some(entry) = entry else {
            problems.push(format!("{id} is not reported as invalid"));
            continue;
        };
        let strings: Vec<&str> = entry
            .as_object()
            .unwrap()
            .values()
            .filter_map(Value::as_str)
            .collect();
        if strings.iter().any(|s| s.contains('\n')) {
            problems.push(format!("{id}: reason is not one line: {entry}"));
        }
        if let Some(text) = text
            && !strings.iter().any(|s| s.contains(text))
        {
            problems.push(format!("{id}: reason does not name {text:?}: {entry}"));
        }
    }
    if invalid.iter().any(|e| {
        e.to_string().contains("ops/settings")
            || e.to_string().contains("ops/full")
            || e.to_string().contains("ops/good")
    }) {
        problems.push(format!(
            "a valid rule or non-rule ConfigMap reported invalid: {invalid:?}"
        ));
    }
    assert!(
        problems.is_empty(),
        "{}\nstatus: {status:#}",
        problems.join("\n")
    );

    let any = deployment("anywhere");
    let full = deployment("full-ns");
    env.run(vec![
        case(
            "invalid rules are never applied",
            update(&any, &replicas(&any, 3)),
            deny("ops/good", "spec.replicas"),
        ),
        case(
            "a rule using every field loads",
            update(&full, &replicas(&full, 3)),
            deny("ops/full", "spec.replicas"),
        ),
        case(
            "every field applies",
            update(
                &full,
                &edit(&full, |o| {
                    o["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2")
                }),
            ),
            allow("ops/full", "enforce"),
        ),
        case(
            "exemptUsers applies",
            as_user(update(&full, &replicas(&full, 3)), "robot-1"),
            allow("ops/full", "enforce"),
        ),
        case(
            "users applies",
            as_user(update(&full, &replicas(&full, 3)), "carol"),
            allow("ops/full", "enforce"),
        ),
    ]);
}
