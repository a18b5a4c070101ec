//! Unit tests of `rule` (a file of their own, to keep the module's code short).

use super::*;

fn source(spec: &str) -> RuleSource {
    RuleSource {
        id: RuleId {
            namespace: "drift-sentinel".into(),
            name: "r".into(),
        },
        spec: SpecText::Yaml(spec.into()),
        origin: None,
    }
}

#[test]
fn compiles_the_seed_example() {
    let rule = compile(&source(
        r#"
mode: enforce
priority: 200
namespaces:
  - "prod-*"
selectors:
  - apiGroup: "apps"
    kind: "Deployment"
  - apiGroup: "apps"
    kind: "StatefulSet"
labels:
  - "app=api-service"
  - "team"
users:
  - "system:admin"
exclude:
  - "status"
  - "metadata.managedFields"
mutable:
  - "spec.template.spec.containers[*].image"
  - "spec.template.spec.initContainers[*].image"
bypass: "drift-sentinel.k8s.io/bypass"
"#,
    ))
    .unwrap();
    assert_eq!(rule.mode, Mode::Enforce);
    assert_eq!(rule.priority, 200);
    assert!(rule.matches_namespace("prod-eu"));
    assert!(!rule.matches_namespace("dev"));
    assert!(rule.matches_kind("apps", "StatefulSet"));
    assert!(!rule.matches_kind("", "StatefulSet"));
    assert_eq!(rule.labels.len(), 2);
    assert_eq!(rule.mutable.len(), 2);
    assert_eq!(
        rule.mutable_text,
        "spec.template.spec.containers[*].image, spec.template.spec.initContainers[*].image"
    );
}

#[test]
fn defaults() {
    let rule = compile(&source(
        "mode: warn\nnamespaces: ['*']\nselectors: [{kind: Deployment}]\nlabels:\n",
    ))
    .unwrap();
    assert_eq!(rule.priority, 0);
    assert_eq!(rule.bypass, DEFAULT_BYPASS_ANNOTATION);
    assert_eq!(rule.max_bypass, None);
    assert!(rule.matches_kind("", "Deployment"));
    assert!(!rule.matches_kind("apps", "Deployment"));
    assert!(
        rule.matches_namespace(""),
        "* matches cluster-scoped objects"
    );
    let any = compile(&source(
        "mode: off\nnamespaces: ['*']\nselectors: [{apiGroup: '*', kind: '*'}]",
    ))
    .unwrap();
    assert!(any.matches_kind("argoproj.io", "Rollout"));
    assert_eq!(any.mode, Mode::Off);
}

#[test]
fn invalid_rules_table() {
    // (spec, field named, fragment of the reason, line)
    let cases: &[(&str, &str, &str, Option<usize>)] = &[
        (
            "mode: enforce\nnamespaces: ['*']\nselectors: [{kind: Deployment}]\nmutabel: [spec.replicas]\n",
            "mutabel",
            "unknown field `mutabel`",
            Some(4),
        ),
        (
            "mode: Enforce\nnamespaces: ['*']\nselectors: [{kind: Deployment}]\n",
            "mode",
            "unknown variant `Enforce`",
            Some(1),
        ),
        (
            "namespaces: ['*']\nselectors: [{kind: Deployment}]\n",
            "mode",
            "missing field `mode`",
            None,
        ),
        (
            "mode: enforce\npriority: high\nnamespaces: ['*']\nselectors: [{kind: Deployment}]\n",
            "priority",
            "invalid type",
            Some(2),
        ),
        (
            "mode: enforce\nnamespaces: []\nselectors: [{kind: Deployment}]\n",
            "namespaces",
            "at least one namespace",
            Some(2),
        ),
        (
            "mode: enforce\nselectors: [{kind: Deployment}]\n",
            "namespaces",
            "at least one namespace",
            None,
        ),
        (
            "mode: enforce\nnamespaces: ['*']\nselectors: []\n",
            "selectors",
            "at least one",
            Some(3),
        ),
        (
            "mode: enforce\nnamespaces: ['*']\nselectors: [{apiGroup: apps}]\n",
            "selectors[0].kind",
            "needs a kind",
            Some(3),
        ),
        (
            "mode: enforce\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kinds: Deployment}]\n",
            "selectors[0].kinds",
            "unknown field",
            Some(3),
        ),
        (
            "mode: enforce\nnamespaces: ['prod-[a']\nselectors: [{kind: Deployment}]\n",
            "namespaces[0]",
            "unterminated character class",
            Some(2),
        ),
        (
            "mode: enforce\nnamespaces: ['*']\nselectors: [{kind: Deployment}]\nmutable:\n  - spec.replicas\n  - spec.template.spec.containers[*.image\n",
            "mutable[1]",
            "column",
            Some(6),
        ),
        (
            "mode: enforce\nnamespaces: ['*']\nselectors: [{kind: Deployment}]\nexclude: ['a..b']\n",
            "exclude[0]",
            "empty segment",
            Some(4),
        ),
        (
            "mode: enforce\nnamespaces: ['*']\nselectors: [{kind: Deployment}]\ninclude: ['a[x]']\n",
            "include[0]",
            "bad index",
            Some(4),
        ),
        (
            "mode: enforce\nnamespaces: ['*']\nselectors: [{kind: Deployment}]\nlabels: ['=x']\n",
            "labels[0]",
            "empty key",
            Some(4),
        ),
        (
            "mode: enforce\nnamespaces: ['*']\nselectors: [{kind: Deployment}]\nbypass: ''\n",
            "bypass",
            "non-empty",
            Some(4),
        ),
        (
            "mode: enforce\nnamespaces: ['*']\nselectors: [{kind: Deployment}]\nmaxBypass: soon\n",
            "maxBypass",
            "is not a duration like 72h",
            Some(4),
        ),
        (
            "mode: enforce\nnamespaces: ['*']\nselectors: [{kind: Deployment}]\nmaxBypass: 0s\n",
            "maxBypass",
            "not longer than zero",
            Some(4),
        ),
        (
            "mode: enforce\nnamespaces: ['*']\nselectors: [{kind: Deployment}]\nmaxBypass: 500ms\n",
            "maxBypass",
            "whole number of seconds",
            Some(4),
        ),
        (
            "mode: enforce\nnamespaces: ['*']\nselectors: [{kind: Deployment}]\nmaxBypass: [72h]\n",
            "maxBypass",
            "invalid type",
            Some(4),
        ),
        (
            "mode: enforce\nnamespaces: '*'\nselectors: [{kind: Deployment}]\n",
            "namespaces",
            "invalid type",
            Some(2),
        ),
        // A rule is as large as its text (reference §2, §5): no alias, no tag serde_yaml would
        // read as something else.
        (
            "mode: enforce\nnamespaces: &ns ['*']\nselectors: [{kind: Deployment}]\nexemptUsers: *ns\n",
            "",
            "uses the YAML alias *ns (at byte 81); a rule spec may not use aliases: write out the value that its anchor &ns marks",
            Some(4),
        ),
        (
            "mode: !enforce\nnamespaces: ['*']\nselectors: [{kind: Deployment}]\n",
            "",
            "has the YAML tag !enforce (at byte 6)",
            Some(1),
        ),
        (
            "mode: enforce\nnamespaces: ['*']\nselectors: [{kind: !!str Deployment}]\nmutable: !paths [spec.replicas]\n",
            "",
            "has the YAML tag !paths",
            Some(4),
        ),
        ("- a\n- b\n", "", "invalid type", Some(1)),
        ("mode: [enforce\n", "", "", None),
    ];
    for (spec, field, fragment, line) in cases {
        let err = compile(&source(spec)).expect_err(spec);
        if !field.is_empty() {
            assert_eq!(err.field.as_deref(), Some(*field), "{spec}: {err}");
        }
        assert!(err.reason.contains(fragment), "{spec}: {err}");
        if line.is_some() {
            assert_eq!(err.line, *line, "{spec}: {err}");
        }
        let text = err.to_string();
        assert!(
            text.starts_with("rule ConfigMap drift-sentinel/r"),
            "{text}"
        );
    }
}

#[test]
fn a_spec_is_at_most_64_kib() {
    let head = "mode: enforce\nnamespaces: ['*']\nselectors: [{kind: Deployment}]\n";
    let padded = |len: usize| format!("{head}#{}\n", "x".repeat(len - head.len() - 2));
    assert!(compile(&source(&padded(crate::rule::MAX_SPEC_BYTES))).is_ok());
    let err = compile(&source(&padded(crate::rule::MAX_SPEC_BYTES + 1))).unwrap_err();
    assert_eq!(err.field.as_deref(), Some("data.spec"));
    assert!(
        err.reason
            .contains("data.spec is 65537 bytes, more than the 64 KiB a rule may have; split it"),
        "{err}"
    );
}

#[test]
fn missing_or_empty_spec_is_invalid() {
    let mut s = source("");
    assert!(compile(&s).unwrap_err().reason.contains("empty"));
    s.spec = SpecText::Missing;
    assert!(compile(&s).unwrap_err().reason.contains("no data.spec"));
}

#[test]
fn pattern_errors_point_at_the_character() {
    let err = compile(&source(
            "mode: enforce\nnamespaces: ['*']\nselectors: [{kind: Deployment}]\nmutable: ['spec.a..b']\n",
        ))
        .unwrap_err();
    // The pattern starts at column 12 of line 4; the empty segment is its 8th character.
    assert_eq!((err.line, err.column), (Some(4), Some(19)), "{err}");
}

#[test]
fn rule_annotation_values() {
    let cases = [
        (Some("true"), true),
        (Some(" TRUE "), true),
        (Some("True"), true),
        (Some("false"), false),
        (Some("yes"), false),
        (None, false),
    ];
    for (value, want) in cases {
        let mut annotations = serde_json::Map::new();
        if let Some(v) = value {
            annotations.insert(RULE_ANNOTATION.into(), Value::String(v.into()));
        }
        assert_eq!(is_rule_annotation(Some(&annotations)), want, "{value:?}");
    }
}

#[test]
fn rule_set_orders_and_isolates_invalid_rules() {
    let spec = |priority: i64| {
        format!(
            "mode: enforce\npriority: {priority}\nnamespaces: ['*']\nselectors: [{{kind: Deployment}}]\n"
        )
    };
    let make = |ns: &str, name: &str, spec: String| RuleSource {
        id: RuleId {
            namespace: ns.into(),
            name: name.into(),
        },
        spec: SpecText::Yaml(spec),
        origin: None,
    };
    let set = RuleSet::build(vec![
        make("b", "x", spec(10)),
        make("a", "y", spec(10)),
        make("a", "x", spec(10)),
        make("z", "top", spec(100)),
        make("a", "broken", "mode: nope".into()),
        make("a", "x", spec(1)),
        make("B", "x", spec(10)),
    ]);
    let order: Vec<String> = set.rules().iter().map(|r| r.id.to_string()).collect();
    assert_eq!(order, ["z/top", "B/x", "a/x", "a/y", "b/x"]);
    assert_eq!(set.invalid().len(), 2);
    assert!(set.invalid().iter().any(|e| e.name == "broken"));
    assert!(
        set.invalid()
            .iter()
            .any(|e| e.reason.contains("more than once"))
    );
}

#[test]
fn config_map_reading() {
    let cm = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "r1", "annotations": {RULE_ANNOTATION: "true"}},
        "data": {"spec": "mode: off"}
    });
    let source = rule_source_from_config_map(&cm, "default", Some("f.yaml")).unwrap();
    assert_eq!(source.id.to_string(), "default/r1");
    assert_eq!(source.spec.yaml(), Some("mode: off"));
    let unannotated = serde_json::json!({"kind": "ConfigMap", "metadata": {"name": "x"}});
    assert!(rule_source_from_config_map(&unannotated, "default", None).is_none());
    let secret = serde_json::json!({"kind": "Secret", "metadata": {"name": "x", "annotations": {RULE_ANNOTATION: "true"}}});
    assert!(rule_source_from_config_map(&secret, "default", None).is_none());
    // A `data.spec` that is not a string is named as such, not as missing.
    for (spec, kind) in [
        (serde_json::json!(5), "a number"),
        (serde_json::json!(true), "a boolean"),
        (serde_json::json!({"mode": "off"}), "a map"),
        (serde_json::json!(["x"]), "a list"),
    ] {
        let cm = serde_json::json!({
            "kind": "ConfigMap",
            "metadata": {"name": "r1", "annotations": {RULE_ANNOTATION: "true"}},
            "data": {"spec": spec}
        });
        let source = rule_source_from_config_map(&cm, "default", None).unwrap();
        assert_eq!(source.spec, SpecText::NotAString(kind));
        let error = compile(&source).unwrap_err();
        assert_eq!(error.field.as_deref(), Some("data.spec"));
        assert!(
            error.reason.starts_with(&format!(
                "expected the rule YAML as a string, found {kind};"
            )),
            "{error}"
        );
    }
    let missing = serde_json::json!({"kind": "ConfigMap", "metadata": {"name": "r1", "annotations": {RULE_ANNOTATION: "true"}}});
    let source = rule_source_from_config_map(&missing, "default", None).unwrap();
    assert_eq!(source.spec, SpecText::Missing);
}

#[test]
fn max_bypass_is_a_duration() {
    for (text, seconds) in [
        ("72h", 259_200),
        ("30m", 1_800),
        ("1h30m", 5_400),
        ("7d", 604_800),
    ] {
        let rule = compile(&source(&format!(
            "mode: enforce\nnamespaces: ['*']\nselectors: [{{kind: Deployment}}]\nmaxBypass: {text}\n"
        )))
        .unwrap();
        assert_eq!(
            rule.max_bypass,
            Some(std::time::Duration::from_secs(seconds)),
            "{text}"
        );
    }
}

#[test]
fn tier_policy_globs_as_the_flag_gives_them() {
    let given = |globs: &[&str]| TierPolicy::given(globs).unwrap();
    assert!(given(&[]).is_none());
    assert!(given(&["", "  "]).is_none());
    let policy = given(&[" drift-system ", "", "team-*"]).unwrap();
    assert_eq!(policy.cluster_namespace_globs(), ["drift-system", "team-*"]);
    assert_eq!(policy.tier_of("team-a"), Tier::Cluster);
    assert_eq!(policy.tier_of("shop"), Tier::Namespace);
    assert!(given(&["x", "*"]).unwrap().is_all_cluster());
    assert!(TierPolicy::given(&["[oops"]).is_err());
}
