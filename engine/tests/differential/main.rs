//! Differential test of reference §3 step 6 and §4: the engine's verdict against a plain model of
//! the specification (`model.rs`) on generated workloads, edits and patterns.
//!
//! The engine reports a change at the highest node it can; the model breaks every difference
//! into atoms. They agree when
//! 1. every uncovered atom of the model lies at or under a path the engine reports uncovered,
//! 2. every path the engine reports uncovered has an uncovered atom of the model at or under it,
//!
//! which also makes "denied" the same verdict on both sides.
//!
//! Numbers a `Value` cannot hold exactly (past 64 bits, past a double's precision, integer and
//! float texts of one value) are generated as marked strings (`model::NUMBER_MARK`) and written
//! into the review's text as bare numbers: the raw reading (the agent) is checked against the
//! model of the exact numbers, the parsed reading (plugin, audit) against the model of the
//! numbers as serde_json parsed them.
//!
//! Every CI run tries `PROPTEST_CASES` cases (default 1,000, a few seconds); a long run:
//! `PROPTEST_CASES=200000 cargo test --release -p drift-engine --test differential`.
//! Shrunk failures are kept in `proptest-regressions/` and as named cases in `regressions`.

mod model;
mod workload;

use drift_engine::review::{parse_review, parse_review_raw};
use drift_engine::{Context, Detail, PathSegment, RuleId, RuleSet, RuleSource, SpecText, evaluate};
use model::{Path, Scoping, Seg};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use serde_json::{Value, json};

const BYPASS: &str = "drift-sentinel.k8s.io/bypass";

fn rule_yaml(scoping: &Scoping) -> String {
    let list = |patterns: &[model::Pattern]| -> Value {
        patterns
            .iter()
            .map(|p| json!(workload::render(p)))
            .collect()
    };
    let mut spec = json!({
        "mode": "enforce",
        "namespaces": ["*"],
        "selectors": [{"apiGroup": "apps", "kind": "Deployment"}],
    });
    for (field, patterns) in [
        ("include", &scoping.include),
        ("exclude", &scoping.exclude),
        ("mutable", &scoping.mutable),
    ] {
        if !patterns.is_empty() {
            spec[field] = list(patterns);
        }
    }
    // JSON is YAML: the rule text needs no YAML writer.
    spec.to_string()
}

fn to_model_path(segments: &[PathSegment]) -> Path {
    segments
        .iter()
        .map(|s| match s {
            PathSegment::Key(k) => Seg::Key(k.clone()),
            PathSegment::Index(i) => Seg::Index(*i),
        })
        .collect()
}

fn render_path(path: &Path) -> String {
    let mut out = String::new();
    for s in path {
        match s {
            Seg::Key(k) => out.push_str(&format!(".{k:?}")),
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    if out.is_empty() { "<root>".into() } else { out }
}

/// `json` with every marked number string (`model::NUMBER_MARK`) written as the bare number.
fn with_numbers(json: &str) -> String {
    // serde_json writes the mark's control character as `\u0001`.
    let mark = format!("\"{}", model::NUMBER_MARK.replace('\u{1}', "\\u0001"));
    let mut out = String::with_capacity(json.len());
    let mut rest = json;
    while let Some(at) = rest.find(&mark) {
        out.push_str(&rest[..at]);
        let number = &rest[at + mark.len()..];
        let end = number.find('"').expect("a closing quote");
        out.push_str(&number[..end]);
        rest = &number[end + 1..];
    }
    out.push_str(rest);
    out
}

/// The uncovered paths of one reading of the review.
type Uncovered = Vec<Path>;

/// The engine's uncovered paths for one update under one rule, from the raw text (the agent)
/// and from parsed documents (the plugin, the audit).
fn engine_uncovered(
    old: &Value,
    new: &Value,
    scoping: &Scoping,
) -> Result<(Uncovered, Uncovered), String> {
    let rules = RuleSet::build([RuleSource {
        id: RuleId {
            namespace: "platform".into(),
            name: "rule".into(),
        },
        spec: SpecText::Yaml(rule_yaml(scoping)),
        origin: None,
    }]);
    if let Some(error) = rules.invalid().first() {
        return Err(format!("generated rule is invalid: {error}"));
    }
    let body = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u",
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "name": "web", "namespace": "prod", "operation": "UPDATE",
            "userInfo": {"username": "alice"},
            "object": new, "oldObject": old,
        }
    })
    .to_string();
    let body = with_numbers(&body);
    let parsed = parse_review(body.as_bytes()).map_err(|e| e.to_string())?;
    let raw = parse_review_raw(body.as_bytes()).map_err(|e| e.to_string())?;
    let (parsed, raw) = (parsed.request?, raw.request?);
    let evaluation = evaluate(
        &rules,
        &parsed,
        &Context::at(std::time::SystemTime::UNIX_EPOCH),
        Detail::Full,
    );
    let from_raw = evaluate(
        &rules,
        &raw,
        &Context::at(std::time::SystemTime::UNIX_EPOCH),
        Detail::Full,
    );
    let uncovered = |evaluation: &drift_engine::Evaluation<'_>| -> Uncovered {
        evaluation
            .changes()
            .iter()
            .filter(|c| !c.mutable)
            .map(|c| to_model_path(c.change.path.segments()))
            .collect()
    };
    // Where a parsed document holds every number exactly, the two readings judge alike, change
    // for change, mutable ones included.
    if model::parses_exactly(old) && model::parses_exactly(new) {
        let judged = |evaluation: &drift_engine::Evaluation<'_>| -> Vec<(String, bool)> {
            evaluation
                .changes()
                .iter()
                .map(|c| (c.path.clone(), c.mutable))
                .collect()
        };
        if judged(&evaluation) != judged(&from_raw) {
            return Err(format!(
                "parsed and raw documents judge differently:\nparsed: {:?}\nraw:    {:?}",
                judged(&evaluation),
                judged(&from_raw)
            ));
        }
    }
    Ok((uncovered(&from_raw), uncovered(&evaluation)))
}

/// The zeros a Deployment leaves out (§4), read from the engine's table as data: the model
/// applies them on its own.
fn omitted_zeros() -> Vec<model::OmittedZero> {
    use drift_engine::omitted::{OmittedZeros, Zero};
    OmittedZeros::of_kind("apps", "Deployment")
        .fields()
        .into_iter()
        .map(|(path, zero)| {
            let pattern = path
                .split('.')
                .flat_map(|part| {
                    let (key, list) = match part.strip_suffix("[*]") {
                        Some(key) => (key, true),
                        None => (part, false),
                    };
                    let key = match key {
                        "*" => model::PatSeg::AnyKey,
                        key => model::PatSeg::Key(key.to_owned()),
                    };
                    std::iter::once(key).chain(list.then_some(model::PatSeg::AnyIndex))
                })
                .collect();
            let zero = match zero {
                Zero::Bool => json!(false),
                Zero::Number => json!(0),
                Zero::String => json!(""),
            };
            (pattern, zero)
        })
        .collect()
}

/// The model's uncovered atoms.
fn model_uncovered(old: &Value, new: &Value, scoping: &Scoping) -> Uncovered {
    model::judge(old, new, BYPASS, &omitted_zeros(), scoping)
        .into_iter()
        .filter(|(_, mutable)| !mutable)
        .map(|(path, _)| path)
        .collect()
}

/// Checks the two conditions of the module comment for both readings of the review: the raw
/// text against the model of the exact numbers, the parsed documents against the model of the
/// numbers as they were parsed (a double where the text needs more); the error names the first
/// disagreement.
fn check(old: &Value, new: &Value, scoping: &Scoping) -> Result<(), String> {
    let (raw, parsed) = engine_uncovered(old, new, scoping)?;
    let reparse = |v: &Value| -> Value {
        serde_json::from_str(&with_numbers(&v.to_string())).expect("generated numbers parse")
    };
    let (parsed_old, parsed_new) = (reparse(old), reparse(new));
    agree(
        "raw text",
        &raw,
        &model_uncovered(old, new, scoping),
        old,
        new,
        scoping,
    )?;
    agree(
        "parsed documents",
        &parsed,
        &model_uncovered(&parsed_old, &parsed_new, scoping),
        &parsed_old,
        &parsed_new,
        scoping,
    )
}

fn agree(
    reading: &str,
    engine: &[Path],
    model: &[Path],
    old: &Value,
    new: &Value,
    scoping: &Scoping,
) -> Result<(), String> {
    let under = |ancestor: &Path, path: &Path| path.starts_with(ancestor);
    let describe = || {
        let engine: Vec<String> = engine.iter().map(render_path).collect();
        let model: Vec<String> = model.iter().map(render_path).collect();
        format!(
            "\nreading: {reading}\nrule: {}\nengine uncovered: {engine:?}\nmodel uncovered:  {model:?}\nold: {}\nnew: {}",
            rule_yaml(scoping),
            with_numbers(&old.to_string()),
            with_numbers(&new.to_string())
        )
    };
    if let Some(atom) = model.iter().find(|a| !engine.iter().any(|d| under(d, a))) {
        return Err(format!(
            "the model finds {} uncovered, the engine reports nothing at or above it{}",
            render_path(atom),
            describe()
        ));
    }
    if let Some(report) = engine.iter().find(|d| !model.iter().any(|a| under(d, a))) {
        return Err(format!(
            "the engine reports {} uncovered, the model finds nothing uncovered at or under it{}",
            render_path(report),
            describe()
        ));
    }
    Ok(())
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        max_shrink_iters: 20_000,
        // Relative to the package directory, where cargo runs the test.
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "tests/differential/regressions.txt"
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn engine_agrees_with_the_model_of_spec_4(case in workload::case()) {
        if let Err(message) = check(&case.old, &case.new, &case.scoping) {
            prop_assert!(false, "{}", message);
        }
    }
}

/// Cases the property test found on the engine (shrunk, then cut to what matters), kept by
/// name. Each failed before its fix.
mod regressions {
    use super::*;
    use model::PatSeg::{AnyIndex, AnyKey, Index, Key};

    fn key(k: &str) -> model::PatSeg {
        Key(k.into())
    }

    fn deployment(spec: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "prod"}, "spec": spec})
    }

    fn assert_agree(old: Value, new: Value, scoping: Scoping) {
        if let Err(message) = check(&old, &new, &scoping) {
            panic!("{message}");
        }
    }

    /// Zeros a Deployment leaves out (`paused: false`, `tty: false`, `readOnly: false`),
    /// spelled on one side only, beside a real change of one of them.
    #[test]
    fn spelled_zeros_are_absent_and_a_zero_changed_is_a_change() {
        let old = deployment(
            json!({"paused": false, "template": {"spec": {"containers": [
                {"name": "app", "tty": false, "volumeMounts": [{"mountPath": "/d", "readOnly": false}]}
            ]}}}),
        );
        let new = deployment(json!({"template": {"spec": {"containers": [
            {"name": "app", "volumeMounts": [{"mountPath": "/d", "readOnly": true}]}
        ]}}}));
        assert_agree(old.clone(), new.clone(), Scoping::default());
        let mutable = Scoping {
            mutable: vec![vec![key("spec"), key("paused")]],
            ..Scoping::default()
        };
        assert_agree(new, old, mutable);
    }

    /// An object of nothing but omitted zeros that becomes a scalar, with a `mutable` pattern
    /// reaching into it: the object is absent (§4), so the key was added, not retyped, and the
    /// scalar is judged (the engine first descended into the object and dropped the scalar).
    #[test]
    fn an_object_of_omitted_zeros_that_becomes_a_scalar_is_an_added_key() {
        let old = deployment(json!({"template": {"spec": {"volumes": [
            {"name": "v", "emptyDir": {"medium": ""}}
        ]}}}));
        let mut new = old.clone();
        new["spec"]["template"]["spec"]["volumes"][0]["emptyDir"] = json!("x");
        let scoping = Scoping {
            mutable: vec![vec![
                key("spec"),
                key("template"),
                key("spec"),
                key("volumes"),
                AnyIndex,
                key("emptyDir"),
                key("medium"),
            ]],
            ..Scoping::default()
        };
        assert_agree(old.clone(), new.clone(), scoping.clone());
        assert_agree(new, old, scoping);
    }

    /// An `exclude` reaching below a scalar removed the scalar (`*.*` hid `apiVersion`).
    #[test]
    fn exclude_below_a_scalar_keeps_the_scalar() {
        let old = deployment(json!({"replicas": 2}));
        let mut new = old.clone();
        new["apiVersion"] = Value::Null;
        new["spec"]["replicas"] = json!(5);
        let scoping = Scoping {
            exclude: vec![vec![AnyKey, AnyKey]],
            ..Scoping::default()
        };
        assert_agree(old, new, scoping);
    }

    /// A list replaced by a scalar, with a `mutable` pattern reaching into the list's
    /// elements: §4 descends into the retyped key with the scalar side absent ("missing side
    /// = absent"), so only the removed elements are judged. The model first read this
    /// differently; this pins the specification's reading on both.
    #[test]
    fn a_list_replaced_by_a_scalar_descends_with_the_scalar_side_absent() {
        let old = deployment(json!({"template": {"spec": {"containers": [
            {"name": "app", "volumeMounts": [{"name": "v", "mountPath": "/data"}]}
        ]}}}));
        let mut new = old.clone();
        new["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = json!("v0");
        let scoping = Scoping {
            mutable: vec![vec![
                key("spec"),
                key("template"),
                key("spec"),
                key("containers"),
                Index(0),
                AnyKey,
                Index(0),
            ]],
            ..Scoping::default()
        };
        assert_agree(old, new, scoping);
    }

    /// `protocol: {}` is an absent protocol, so TCP: the port's key changes from UDP to TCP.
    #[test]
    fn an_empty_protocol_keys_the_port_as_tcp() {
        let old = deployment(json!({"ports": [
            {"containerPort": 80}, {"containerPort": 443, "protocol": "UDP"}
        ]}));
        let mut new = old.clone();
        new["spec"]["ports"][1]["protocol"] = json!({});
        assert_agree(old, new, Scoping::default());
    }

    /// A key that appears as a list of one `null` under an `exclude` reaching into the list:
    /// `[null]` is not `[]`, its element exists and is wholly in scope, so the key is judged
    /// (the engine's projection dropped the element as if it were an absent map entry).
    #[test]
    fn a_list_of_one_null_is_present_under_partial_coverage() {
        let old = deployment(json!({"template": {"spec": {"serviceAccountName": null}}}));
        let mut new = old.clone();
        new["spec"]["template"]["spec"]["serviceAccountName"] = json!([null]);
        let below = |tail: &[model::PatSeg]| {
            let mut p = vec![key("spec"), key("template"), key("spec"), AnyKey];
            p.extend_from_slice(tail);
            Scoping {
                exclude: vec![p],
                ..Scoping::default()
            }
        };
        assert_agree(old.clone(), new.clone(), below(&[Index(1)]));
        // The element itself excluded: nothing of the key is in scope.
        assert_agree(old.clone(), new, below(&[Index(0)]));
        // One level deeper, the same rule.
        let mut nested = old.clone();
        nested["spec"]["template"]["spec"]["serviceAccountName"] = json!([[null]]);
        assert_agree(old, nested, below(&[Index(0), Index(1)]));
    }

    /// Issue 24: `spec` partly in scope (`exclude: [spec.*.metadata]`), a number past 64 bits
    /// changed by one: the projection compared copies, whose numbers are doubles, and saw no
    /// change. Also past 2^53, past a double's precision, and an equal integer/float pair.
    #[test]
    fn numbers_past_a_double_compare_exactly_under_partial_coverage() {
        let scoping = Scoping {
            exclude: vec![vec![key("spec"), AnyKey, key("metadata")]],
            ..Scoping::default()
        };
        let number = |text: &str| json!(format!("{}{text}", model::NUMBER_MARK));
        for (a, b) in [
            ("18446744073709551616", "18446744073709551617"),
            ("9007199254740993", "9007199254740992"),
            ("0.1", "0.10000000000000000001"),
            ("18446744073709551616", "18446744073709551616.0"),
        ] {
            let old =
                deployment(json!({"minReadySeconds": number(a), "template": {"metadata": {}}}));
            let mut new = old.clone();
            new["spec"]["minReadySeconds"] = number(b);
            assert_agree(old.clone(), new, scoping.clone());
            // As a list element, too.
            let old = deployment(json!({"args": [number(a)], "template": {"metadata": {}}}));
            let mut new = old.clone();
            new["spec"]["args"][0] = number(b);
            assert_agree(old, new, scoping.clone());
        }
    }

    /// The model's own first mistake, kept so that it stays fixed: an element that becomes
    /// `null` at a kept position is judged whole (no descent below a list index).
    #[test]
    fn an_element_that_becomes_null_is_judged_whole() {
        let old =
            deployment(json!({"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "1"}]}));
        let mut new = old.clone();
        new["spec"]["env"][0] = Value::Null;
        let scoping = Scoping {
            mutable: vec![vec![key("spec"), key("env"), Index(0), AnyKey]],
            ..Scoping::default()
        };
        assert_agree(old.clone(), new.clone(), scoping);
        let scoping = Scoping {
            mutable: vec![vec![key("spec"), key("env"), AnyIndex]],
            ..Scoping::default()
        };
        assert_agree(old, new, scoping);
    }
}
