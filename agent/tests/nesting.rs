//! Black-box tests of reference §5, "No input stops the agent": each kind of text the agent did
//! not write, at the deepest level it is read to (answered), one more (refused, saying why) and
//! 1,000,000 within 8 MiB (refused, the agent still answering), entering where it enters — a
//! review on `/validate` (10,000 levels, kube-apiserver's limit), a rule on `/validate-rule`,
//! rule, Namespace and Connection files on disk (YAML: 128 levels, serde_yaml's limit).

mod support;

use std::time::{Duration, Instant};

use drift_testkit::objects::nested;
use serde_json::{Value, json};
use support::{
    Agent, assert_still_judging, image_review, plain_client, post_timed, rule_config_map,
    rules_dir_with_a_fine_rule,
};

const LIMIT: usize = 10_000;
/// How deep YAML is read (serde_yaml's own limit).
const YAML_LIMIT: usize = 128;

#[derive(Clone, Copy, Debug)]
enum Shape {
    Lists,
    Maps,
}

fn nest(shape: Shape, levels: usize, leaf: &str) -> String {
    nested(levels, leaf, matches!(shape, Shape::Maps))
}

fn deep_review(shape: Shape, depth: usize) -> String {
    drift_testkit::objects::deep_review("deep-1", depth, matches!(shape, Shape::Maps))
}

#[test]
fn reviews_are_answered_to_the_limit_and_refused_past_it() {
    let agent = Agent::start(&[], false);
    let url = format!("{}/validate", agent.base);
    for shape in [Shape::Lists, Shape::Maps] {
        // At the limit: decided like any review (replicas changed: denied by the default rule).
        let (status, body, took) = post_timed(&url, deep_review(shape, LIMIT));
        assert_eq!(status, 200, "{shape:?}: {}", &body[..body.len().min(300)]);
        let answer: Value = serde_json::from_str(&body).expect("a review");
        assert_eq!(answer["response"]["uid"], "deep-1");
        assert_eq!(answer["response"]["allowed"], false, "{shape:?}");
        let message = answer["response"]["status"]["message"].as_str().unwrap();
        assert!(message.contains("spec.replicas"), "{message}");
        assert!(body.len() <= 64 * 1024);
        // A debug build on a shared machine; a walk that costs the square of the depth takes
        // seconds even optimised.
        assert!(took < Duration::from_secs(5), "{shape:?} took {took:?}");

        let (status, body, _) = post_timed(&url, deep_review(shape, LIMIT + 1));
        assert_eq!(status, 400, "{shape:?}: {body}");
        assert!(
            body.contains("nested deeper than 10000 levels"),
            "{shape:?}: {body}"
        );
    }
    // A million levels in 2 MB: refused as quickly, and the agent still answers.
    let million = deep_review(Shape::Lists, 1_000_000);
    assert!(million.len() < 8 * 1024 * 1024);
    let (status, body, took) = post_timed(&url, million);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("nested deeper than 10000 levels"), "{body}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert_still_judging(&agent, &image_review(), true);
    // Nothing of it was recorded as a decision.
    let metrics = plain_client()
        .get(format!("{}/metrics", agent.base))
        .send()
        .and_then(|r| r.text())
        .expect("metrics");
    assert!(
        metrics.contains(
            r#"drift_sentinel_admission_requests_total{namespace="",resource="",result="error"} 3"#
        ),
        "{metrics}"
    );
}

/// A rule spec of `levels` nested YAML flow sequences.
fn deep_rule_spec(levels: usize) -> String {
    format!(
        "mode: enforce\nnamespaces: ['*']\nselectors: [{{apiGroup: apps, kind: Deployment}}]\nmutable: {}\n",
        nest(Shape::Lists, levels - 1, "spec.replicas")
    )
}

fn rule_review(spec: &str) -> String {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "rule-deep", "operation": "CREATE", "namespace": "team-a", "name": "deep",
        "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
        "userInfo": {"username": "tenant"},
        "object": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "deep", "namespace": "team-a",
                "annotations": {"drift-sentinel.k8s.io/rule": "true"}},
            "data": {"spec": spec}}}})
    .to_string()
}

#[test]
fn rule_yaml_is_refused_past_the_limit_without_stalling() {
    let agent = Agent::start(&[], false);
    let url = format!("{}/validate-rule", agent.base);
    let judge = |levels: usize| {
        let (status, body, took) = post_timed(&url, rule_review(&deep_rule_spec(levels)));
        assert_eq!(status, 200, "{body}");
        let answer: Value = serde_json::from_str(&body).expect("a review");
        assert_eq!(answer["response"]["uid"], "rule-deep");
        // The API server's webhook timeout is 10 s at most; a stall would run into it.
        assert!(
            took < Duration::from_secs(8),
            "{levels} levels took {took:?}"
        );
        answer["response"].clone()
    };
    // YAML is read to 128 levels, serde_yaml's own limit (the rule is then refused for what it
    // says: a list of lists is no list of paths); one level more is not read at all.
    let at_limit = judge(YAML_LIMIT);
    assert_eq!(at_limit["allowed"], false, "{at_limit}");
    let message = at_limit["status"]["message"].as_str().unwrap();
    assert!(!message.contains("nested deeper"), "{message}");
    for levels in [YAML_LIMIT + 1, LIMIT + 1] {
        let refused = judge(levels);
        assert_eq!(refused["allowed"], false);
        let message = refused["status"]["message"].as_str().unwrap();
        assert!(
            message.contains("rule ConfigMap team-a/deep: data.spec line 4")
                && message.contains("nested deeper than 128 levels"),
            "{message}"
        );
    }
    // A million levels are 2 MB: longer than a rule may be (64 KiB), refused before it is read.
    let refused = judge(1_000_000);
    assert_eq!(refused["allowed"], false);
    let message = refused["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("rule ConfigMap team-a/deep: field data.spec: data.spec is 2000101 bytes, more than the 64 KiB a rule may have"),
        "{message}"
    );
    assert_still_judging(&agent, &image_review(), true);
}

#[test]
fn rule_and_namespace_files_nested_too_deep_are_refused_and_the_rest_served() {
    let (dir, rules) = rules_dir_with_a_fine_rule();
    // A file whose rule nests a million levels, and one whose own YAML does.
    std::fs::write(
        rules.join("deep-spec.yaml"),
        rule_config_map("drift-sentinel", "deep", &deep_rule_spec(LIMIT + 1)),
    )
    .unwrap();
    std::fs::write(
        rules.join("deep-file.yaml"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n",
            nest(Shape::Lists, LIMIT + 1, "1")
        ),
    )
    .unwrap();
    let namespaces = dir.path().join("namespaces.yaml");
    std::fs::write(
        &namespaces,
        format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n  labels: {}\n",
            nest(Shape::Lists, 1_000_000, "1")
        ),
    )
    .unwrap();
    let started = Instant::now();
    let rules_arg = rules.display().to_string();
    let namespaces_arg = namespaces.display().to_string();
    let agent = Agent::start(
        &["--rules", &rules_arg, "--namespaces", &namespaces_arg],
        false,
    );
    assert!(started.elapsed() < Duration::from_secs(15));
    let status = agent.status();
    let text = status.to_string();
    assert!(text.contains("drift-sentinel/fine"), "{text}");
    // The valid rule beside the refused files is the one served.
    assert_eq!(status["rulesLoaded"], 1, "{text}");
    assert!(
        text.contains("nested deeper than 128 levels"),
        "the refusals are named: {text}"
    );
    assert_still_judging(&agent, &image_review(), true);
}

#[test]
fn a_connection_file_nested_too_deep_stops_the_start_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let connection = dir.path().join("connection.yaml");
    let config = nest(Shape::Lists, 1_000_000, "1");
    std::fs::write(&connection, support::connection_yaml(&config)).unwrap();
    let started = Instant::now();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_drift-sentinel"))
        .args([
            "--enable-admission-violation-export",
            "--connection",
            connection.to_str().unwrap(),
            "--address",
            "127.0.0.1:0",
            "--admin-address",
            "127.0.0.1:0",
        ])
        .output()
        .expect("run the agent");
    assert!(!output.status.success());
    assert!(started.elapsed() < Duration::from_secs(15));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(connection.to_str().unwrap())
            && stderr.contains("nested deeper than 128 levels"),
        "{stderr}"
    );
}

/// `managedFields` and `last-applied-configuration` of an object given to the offline audit:
/// a `fieldsV1` nested 200,000 YAML levels (the issue's 30 s of CPU) is refused at once, naming
/// the file; a baseline nested past 10,000 JSON levels is reported for its object while the
/// other objects are audited.
#[test]
fn the_audit_refuses_deep_objects_at_once() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/audit");
    let rules = fixtures.join("rules").display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let audit = |objects: &std::path::Path| {
        let started = Instant::now();
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_drift-sentinel"))
            .args(["audit", "--once", "--rules", &rules, "--objects"])
            .arg(objects)
            .output()
            .expect("run the audit");
        assert!(started.elapsed() < Duration::from_secs(15));
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned()
                + &String::from_utf8_lossy(&output.stderr),
        )
    };
    let deployment = |extra: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: deep\n  namespace: shop\n{extra}spec:\n  replicas: 1\n  selector: {{matchLabels: {{app: deep}}}}\n  template:\n    metadata: {{labels: {{app: deep}}}}\n    spec: {{containers: [{{name: app, image: app:1}}]}}\n"
        )
    };
    let fields = dir.path().join("fields.yaml");
    std::fs::write(
        &fields,
        deployment(&format!(
            "  managedFields:\n  - manager: kubectl-edit\n    operation: Update\n    fieldsType: FieldsV1\n    fieldsV1: {}\n",
            nested(200_000, "1", false)
        )),
    )
    .unwrap();
    let (code, printed) = audit(&fields);
    assert_ne!(code, Some(0), "{printed}");
    assert!(
        printed.contains("fields.yaml") && printed.contains("nested deeper than 128 levels"),
        "{printed}"
    );

    // The same object with a baseline nested past 10,000 JSON levels is skipped (its baseline
    // cannot be read: engine::baseline's test names the reason); with a readable one it is
    // clean.
    for (levels, summary) in [
        (
            10_001,
            "1 objects: 0 drifted, 0 clean, 0 no_baseline, 1 skipped",
        ),
        (1, "1 objects: 0 drifted, 1 clean, 0 no_baseline, 0 skipped"),
    ] {
        let baseline = dir.path().join(format!("baseline-{levels}.yaml"));
        let declared = if levels == 1 {
            "{\"spec\":{\"replicas\":1}}".to_owned()
        } else {
            format!("{{\"spec\":{}}}", nested(levels, "1", false))
        };
        std::fs::write(
            &baseline,
            deployment(&format!(
                "  annotations:\n    kubectl.kubernetes.io/last-applied-configuration: '{declared}'\n"
            )),
        )
        .unwrap();
        let (_, printed) = audit(&baseline);
        assert!(printed.contains(summary), "{levels}: {printed}");
    }
}
