//! Black-box tests of reference §5, "Memory", for the inputs the engine reads (issue 40; the
//! serving side's are in memory.rs): a rule whose YAML aliases stand for far more than its
//! text, on `/validate-rule`, in rule and Namespace files and in the audit's objects; a YAML
//! tag in a rule; reviews that add a huge value, of which a message shows 64 characters. Each
//! measures the agent's peak memory (VmHWM) before and after, requires an answer within the
//! webhook's timeout, and judges an ordinary request after it.

mod support;

use std::time::{Duration, Instant};

use drift_testkit::objects::{deployment_with, review};
use drift_testkit::peak_rss;
use serde_json::{Value, json};
use support::{
    Agent, assert_still_judging, image_review, post_timed, rule_config_map,
    rules_dir_with_a_fine_rule,
};

const MIB: u64 = 1024 * 1024;
/// The chart's webhook timeout; a debug build on a shared machine must still answer within it.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// reference §5: one request raises the peak by at most 4× its body plus 1 MiB.
fn assert_within_bound(what: &str, before: u64, after: u64, body: usize) {
    let bound = 4 * body as u64 + MIB;
    assert!(
        after.saturating_sub(before) <= bound,
        "{what}: peak memory rose from {} to {} MiB, more than 4× the body ({} bytes) + 1 MiB",
        before / MIB,
        after / MIB,
        body
    );
}

/// The issue's rule: one 4 KiB string anchored, then aliased `aliases` times.
fn aliased_spec(aliases: usize) -> String {
    format!(
        "mode: enforce\nselectors: [{{apiGroup: apps, kind: Deployment}}]\nnamespaces: [&a \"{}\", {}]\n",
        "x".repeat(4096),
        vec!["*a"; aliases].join(",")
    )
}

fn rule_review(uid: &str, spec: &str) -> String {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "operation": "CREATE", "namespace": "team-a", "name": "tenant-rule",
        "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
        "userInfo": {"username": "tenant"},
        "object": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "tenant-rule", "namespace": "team-a",
                "annotations": {"drift-sentinel.k8s.io/rule": "true"}},
            "data": {"spec": spec}}}})
    .to_string()
}

/// reference §2, §5: a rule spec may not use an alias, nor a tag outside YAML's core schema;
/// `/validate-rule` refuses both at once, naming what and the fix, with memory flat (the
/// aliased rule peaked the agent at 546 MiB with 2,000 aliases, 5.3 GiB with 20,000).
#[test]
fn aliased_and_tagged_rules_are_refused_on_validate_rule_with_memory_flat() {
    let agent = Agent::start(&[], false);
    assert_still_judging(&agent, &image_review(), true);
    let url = format!("{}/validate-rule", agent.base);
    // Warmed by one valid rule: what a first rule sets up once (its thread, the linter) is not
    // the aliases' doing.
    let valid =
        "mode: enforce\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\n";
    let (status, text, _) = post_timed(&url, rule_review("valid", valid));
    assert!(status == 200 && text.contains("\"allowed\":true"), "{text}");
    for aliases in [2_000, 20_000] {
        let body = rule_review("aliased", &aliased_spec(aliases));
        let size = body.len();
        let before = peak_rss(agent.pid());
        let (status, text, took) = post_timed(&url, body);
        let after = peak_rss(agent.pid());
        assert_eq!(status, 200, "{text}");
        assert!(took < WEBHOOK_TIMEOUT, "{aliases} aliases took {took:?}");
        let answer: Value = serde_json::from_str(&text).expect("a review");
        assert_eq!(answer["response"]["allowed"], false, "{answer}");
        let message = answer["response"]["status"]["message"].as_str().unwrap();
        assert!(
            message.contains("rule ConfigMap team-a/tenant-rule: data.spec line 3")
                && message.contains("uses the YAML alias *a")
                && message.contains("a rule spec may not use aliases: write out the value"),
            "{message}"
        );
        assert_within_bound(&format!("{aliases} aliases"), before, after, size);
    }

    let tagged =
        "mode: !enforce\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\n";
    let (status, text, _) = post_timed(&url, rule_review("tagged", tagged));
    assert_eq!(status, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).expect("a review");
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    let message = answer["response"]["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("data.spec line 1 column 7")
            && message.contains("YAML tag !enforce")
            && message.contains("remove the tag"),
        "{message}"
    );
    assert_still_judging(&agent, &image_review(), true);
}

/// Rule and Namespace files whose aliases stand for far more than the file are refused (the
/// file's rules, a rule whose spec aliases), naming the file and why; the other rules are
/// served, and the agent's peak stays within reach of an agent that read none of them.
#[test]
fn rule_and_namespace_files_that_alias_too_much_are_refused_and_the_rest_served() {
    let (dir, rules) = rules_dir_with_a_fine_rule();
    let bare = Agent::start(&["--rules", rules.to_str().unwrap()], false);
    let baseline = peak_rss(bare.pid());
    drop(bare);

    // The file's own YAML: a List of 20,000 ConfigMaps whose data each alias one 4 KiB
    // string (80 MB written out, from 100 KB of text).
    let mut file = format!(
        "apiVersion: v1\nkind: List\nitems:\n- {{apiVersion: v1, kind: ConfigMap, metadata: {{name: big}}, data: {{big: &big \"{}\"}}}}\n",
        "x".repeat(4096)
    );
    for i in 0..20_000 {
        file.push_str(&format!(
            "- {{apiVersion: v1, kind: ConfigMap, metadata: {{name: c{i}}}, data: {{v: *big}}}}\n"
        ));
    }
    std::fs::write(rules.join("aliases.yaml"), &file).unwrap();
    // A rule whose spec aliases (the file itself is fine).
    std::fs::write(
        rules.join("aliased-spec.yaml"),
        rule_config_map("drift-sentinel", "aliased", &aliased_spec(2_000)),
    )
    .unwrap();
    let namespaces = dir.path().join("namespaces.yaml");
    let mut namespace_file = format!(
        "apiVersion: v1\nkind: List\nitems:\n- {{apiVersion: v1, kind: Namespace, metadata: {{name: x, labels: {{l: &l \"{}\"}}}}}}\n",
        "x".repeat(4096)
    );
    for i in 0..20_000 {
        namespace_file.push_str(&format!(
            "- {{apiVersion: v1, kind: Namespace, metadata: {{name: n{i}, labels: {{l: *l}}}}}}\n"
        ));
    }
    std::fs::write(&namespaces, &namespace_file).unwrap();

    let started = Instant::now();
    let agent = Agent::start(
        &[
            "--rules",
            rules.to_str().unwrap(),
            "--namespaces",
            namespaces.to_str().unwrap(),
        ],
        false,
    );
    assert!(started.elapsed() < Duration::from_secs(15));
    let text = agent.status().to_string() + &agent.logs().join("\n");
    assert!(text.contains("drift-sentinel/fine"), "{text}");
    // The valid rule beside the refused files is the one served.
    assert_eq!(agent.status()["rulesLoaded"], 1, "{text}");
    assert!(
        text.contains("aliases.yaml")
            && text.contains("expands through YAML aliases to more than")
            && text.contains("namespaces.yaml"),
        "the file refusals are named: {text}"
    );
    assert!(
        text.contains("drift-sentinel/aliased") && text.contains("uses the YAML alias *a"),
        "the rule refusal is named: {text}"
    );
    let files = (file.len() + namespace_file.len()) as u64;
    assert!(
        peak_rss(agent.pid()) <= baseline + 4 * files + MIB,
        "{} MiB against {} MiB without the files",
        peak_rss(agent.pid()) / MIB,
        baseline / MIB
    );
    assert_still_judging(&agent, &image_review(), true);
}

/// The offline audit refuses an objects file whose aliases stand for far more than it, at
/// once and naming the file, its peak far below what the file stands for.
#[test]
fn the_audit_refuses_an_objects_file_that_aliases_too_much() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/audit");
    let dir = tempfile::tempdir().unwrap();
    let objects = dir.path().join("objects.yaml");
    let mut text = format!(
        "apiVersion: v1\nkind: List\nitems:\n- {{apiVersion: apps/v1, kind: Deployment, metadata: {{name: a, namespace: shop, annotations: {{big: &big \"{}\"}}}}}}\n",
        "x".repeat(4096)
    );
    for i in 0..20_000 {
        text.push_str(&format!(
            "- {{apiVersion: apps/v1, kind: Deployment, metadata: {{name: d{i}, namespace: shop, annotations: {{big: *big}}}}}}\n"
        ));
    }
    std::fs::write(&objects, &text).unwrap();
    let started = Instant::now();
    let (code, printed, peak) = support::run_measured(
        std::process::Command::new(env!("CARGO_BIN_EXE_drift-sentinel"))
            .args(["audit", "--once", "--rules"])
            .arg(fixtures.join("rules"))
            .arg("--objects")
            .arg(&objects),
    );
    assert!(started.elapsed() < Duration::from_secs(15));
    assert_ne!(code, Some(0), "{printed}");
    assert!(
        printed.contains("objects.yaml") && printed.contains("expands through YAML aliases"),
        "{printed}"
    );
    // 80 MB written out; the process with its runtime stays far below it.
    assert!(peak < 64 * MIB, "{} MiB", peak / MIB);
}

/// A review that replaces `spec.template.spec` with `extra` added under
/// `spec.template.spec.containers[0]` (denied by the default rule).
fn adding_review(uid: &str, field: &str, value: Value) -> String {
    let old = deployment_with(["api:1", "worker:1", "proxy:1"], 3, 4);
    let mut new = old.clone();
    new["spec"]["template"]["spec"]["containers"][0][field] = value;
    review(uid, &old, &new).to_string()
}

/// reference §5 "Bounded answers": a value shown in a message is never built whole to be cut.
/// A 7.9 MiB review adding a list of 4 million zeros added 300 MiB to the agent's peak, one
/// adding a map of 600,000 entries 98 MiB; each is answered within the bound of 4× its body
/// plus 1 MiB, the message showing the value's first 64 characters.
#[test]
fn a_huge_added_value_is_shown_without_being_built() {
    let zeros = Value::Array(vec![json!(0); 4_000_000]);
    let map: serde_json::Map<String, Value> = (0..600_000)
        .map(|i| (format!("k{i:06}"), json!(0)))
        .collect();
    for (field, value, shown) in [
        (
            "command",
            zeros,
            "spec.template.spec.containers[0].command: <absent> → [0,0,0,0,",
        ),
        (
            "nodeSelector",
            Value::Object(map),
            r#"spec.template.spec.containers[0].nodeSelector: <absent> → {"k000000":0,"k000001":0,"#,
        ),
    ] {
        // A fresh agent for each, warmed by one ordinary request: the peak each one raises.
        let agent = Agent::start(&[], false);
        assert_still_judging(&agent, &image_review(), true);
        let url = format!("{}/validate", agent.base);
        let body = adding_review(field, field, value);
        assert!(body.len() < 8 * 1024 * 1024, "{}", body.len());
        let size = body.len();
        let before = peak_rss(agent.pid());
        let (status, text, took) = post_timed(&url, body);
        let after = peak_rss(agent.pid());
        assert_eq!(status, 200, "{}", &text[..text.len().min(500)]);
        assert!(took < WEBHOOK_TIMEOUT, "{field} took {took:?}");
        let answer: Value = serde_json::from_str(&text).expect("a review");
        assert_eq!(answer["response"]["uid"], field);
        assert_eq!(answer["response"]["allowed"], false);
        let message = answer["response"]["status"]["message"].as_str().unwrap();
        assert!(message.contains(shown), "{message}");
        assert!(text.len() <= 64 * 1024);
        assert_within_bound(field, before, after, size);
        assert_still_judging(&agent, &image_review(), true);
    }
}
