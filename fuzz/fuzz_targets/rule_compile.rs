//! (b) Rule compilation: any bytes as a rule's `data.spec` (YAML), compiled; an error names a
//! line and column inside the text; a valid rule's patterns render to text that parses back to
//! themselves, it is linted, and it decides a fixed request without panicking.
#![no_main]

use std::sync::LazyLock;

use drift_engine::lint::{LintContext, lint};
use drift_engine::review::parse_review;
use drift_engine::rule::compile;
use drift_engine::{
    AdmissionRequest, Context, Detail, PathPattern, RuleId, RuleSet, RuleSource, SpecText, evaluate,
};
use libfuzzer_sys::fuzz_target;

#[path = "../../engine/tests/common/admission_bounds.rs"]
mod admission_bounds;

static REQUEST: LazyLock<AdmissionRequest> = LazyLock::new(|| {
    let old = serde_json::json!({
        "metadata": {"name": "x", "labels": {"team": "payments", "tier": "web"}, "annotations": {"a": "1"}},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}]}]}}},
        "data": {"k": "v"}
    });
    let mut new = old.clone();
    new["spec"]["replicas"] = 3.into();
    new["spec"]["template"]["spec"]["containers"][0]["image"] = "app:2".into();
    new["metadata"]["annotations"]["b"] = "2".into();
    new["data"]["k2"] = "v2".into();
    let body = admission_bounds::update_body(0, old, new);
    parse_review(&body).unwrap().request.unwrap()
});

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let source = RuleSource {
        id: RuleId {
            namespace: "fuzz".into(),
            name: "rule".into(),
        },
        spec: SpecText::Yaml(text.to_owned()),
        origin: Some("fuzz.yaml".into()),
    };
    match compile(&source) {
        Err(error) => {
            let message = error.to_string();
            assert!(!message.is_empty());
            if let Some(line) = error.line {
                assert!(line >= 1 && line <= text.lines().count() + 1, "line {line}: {message}");
            }
            if let Some(column) = error.column {
                assert!(column >= 1, "column {column}: {message}");
            }
        }
        Ok(rule) => {
            for pattern in rule.mutable.iter().chain(&rule.include).chain(&rule.exclude) {
                let text = pattern.to_string();
                let back = PathPattern::parse(&text)
                    .unwrap_or_else(|e| panic!("{pattern:?} renders as {text:?}: {e}"));
                assert_eq!(&back, pattern, "{text:?}");
            }
            let _ = lint(&rule, &LintContext::default());
            let set = RuleSet::build([source]);
            assert_eq!(set.rules().len(), 1);
            for detail in [Detail::Verdict, Detail::Full] {
                let evaluation = evaluate(&set, &REQUEST, &Context::at(std::time::SystemTime::UNIX_EPOCH), detail);
                let response = evaluation.response("fuzz");
                assert!(serde_json::to_string(&response).unwrap().len() <= 64 * 1024);
            }
        }
    }
});
