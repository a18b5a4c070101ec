//! Black-box tests of the agent binary over real HTTP(S): the admission protocol (reference §5),
//! decisions on realistic objects, rule files reloaded live, TLS rotation, shutdown.

#[path = "../../engine/benches/fixtures.rs"]
mod fixtures;
mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use drift_testkit::pki::Ca;
use serde_json::{Value, json};
use support::{
    Agent, IMAGE_RULE, https_client, plain_client, post, rule_config_map, small_deployment,
};

const VIOLATION_PREFIX: &str = "Drift Sentinel: immutable fields changed: ";

fn write_rules(dir: &std::path::Path) {
    std::fs::write(
        dir.join("production.yaml"),
        rule_config_map("drift-sentinel", "production", fixtures::RULE_SPEC),
    )
    .unwrap();
    let many: Vec<String> = fixtures::many_rule_specs()
        .into_iter()
        .filter(|(name, _)| name != "production")
        .map(|(name, spec)| rule_config_map("teams", &name, &spec))
        .collect();
    std::fs::write(dir.join("teams.yaml"), many.join("---\n")).unwrap();
}

#[test]
fn https_decisions_on_realistic_objects() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    write_rules(&rules);
    let ca = Ca::new("a");
    let agent = support::https_agent(
        dir.path(),
        &ca,
        &["serve", "--rules", rules.to_str().unwrap()],
    );
    let status = agent.status();
    assert_eq!(status["rulesLoaded"], 50, "{status:#}");
    assert_eq!(status["rulesInvalid"], 0);

    let client = https_client(&ca.cert_pem(), None);
    let url = format!("{}/validate", agent.base);

    // (a) image only: allowed, the rule named.
    let (old, new) = fixtures::image_change();
    let (code, review) = post(&client, &url, &fixtures::review("uid-a", &old, &new));
    assert_eq!(code, 200);
    let response = &review["response"];
    assert_eq!(response["uid"], "uid-a");
    assert_eq!(response["allowed"], true);
    assert_eq!(
        response["auditAnnotations"]["rule"],
        "drift-sentinel/production"
    );
    assert_eq!(response["auditAnnotations"]["result"], "allowed");
    assert_eq!(response["auditAnnotations"]["mode"], "enforce");
    assert!(response["auditAnnotations"].get("denied-paths").is_none());

    // (b) replicas: denied with 403 and the path.
    let (old, new) = fixtures::replicas_change();
    let (_, review) = post(&client, &url, &fixtures::review("uid-b", &old, &new));
    let response = &review["response"];
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(review["kind"], "AdmissionReview");
    assert_eq!(response["uid"], "uid-b");
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 403);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("{VIOLATION_PREFIX}spec.replicas;")),
        "{message}"
    );
    assert!(message.contains("spec.replicas: 3 → 5"), "{message}");
    assert_eq!(
        response["auditAnnotations"]["denied-paths"],
        "spec.replicas"
    );
    assert_eq!(response["auditAnnotations"]["result"], "denied");

    // (c) sidecar at index 0 of a 200-variable container: exactly containers[0].
    let (old, new) = fixtures::sidecar_insert();
    let (_, review) = post(&client, &url, &fixtures::review("uid-c", &old, &new));
    assert_eq!(
        review["response"]["auditAnnotations"]["denied-paths"],
        "spec.template.spec.containers[0]"
    );

    // (d) the other 49 rules have higher priority but other namespaces: the last one wins.
    let mut old = fixtures::deployment(fixtures::IMAGES, 3);
    let mut new = fixtures::deployment(fixtures::IMAGES, 4);
    old["metadata"]["namespace"] = json!("team-07-payments");
    new["metadata"]["namespace"] = json!("team-07-payments");
    let (_, review) = post(&client, &url, &fixtures::review("uid-d", &old, &new));
    assert_eq!(
        review["response"]["auditAnnotations"]["rule"],
        "teams/team-07"
    );
    let (old, new) = fixtures::image_change();
    let (_, review) = post(&client, &url, &fixtures::review("uid-d2", &old, &new));
    assert_eq!(
        review["response"]["auditAnnotations"]["rule"],
        "drift-sentinel/production"
    );

    // Plain HTTP to the TLS port is not answered as HTTP.
    assert!(
        plain_client()
            .get(format!("http://127.0.0.1:{}/healthz", agent.port))
            .send()
            .map(|r| !r.status().is_success())
            .unwrap_or(true)
    );
}

fn offline_agent(rule_spec: &str, namespaces: Option<&str>) -> (tempfile::TempDir, Agent) {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.yaml");
    std::fs::write(&rules, rule_config_map("ops", "r", rule_spec)).unwrap();
    let mut args = vec!["--rules".to_owned(), rules.to_str().unwrap().to_owned()];
    if let Some(namespaces) = namespaces {
        let file = dir.path().join("namespaces.yaml");
        std::fs::write(&file, namespaces).unwrap();
        args.push("--namespaces".into());
        args.push(file.to_str().unwrap().into());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let agent = Agent::start(&args, false);
    (dir, agent)
}

/// The review (uid `uid`) of an UPDATE of the small Deployment in `namespace` from 1 to 2
/// replicas.
fn small_review(uid: &str, namespace: &str) -> Value {
    fixtures::review(
        uid,
        &small_deployment(namespace, 1),
        &small_deployment(namespace, 2),
    )
}

#[test]
fn admission_protocol_edges() {
    let (_dir, agent) = offline_agent(IMAGE_RULE, None);
    let client = plain_client();
    let url = format!("{}/validate", agent.base);
    let send = |content_type: &str, body: Vec<u8>| {
        let response = client
            .post(&url)
            .header("Content-Type", content_type)
            .body(body)
            .send()
            .unwrap();
        (response.status().as_u16(), response.text().unwrap())
    };

    // 415 for anything but JSON.
    let (code, text) = send("text/plain", b"{}".to_vec());
    assert_eq!(code, 415, "{text}");
    let (code, _) = send("application/x-www-form-urlencoded", b"{}".to_vec());
    assert_eq!(code, 415);
    // 400 with a plain message for what is not an AdmissionReview.
    let (code, text) = send("application/json", b"not json".to_vec());
    assert_eq!(code, 400);
    assert!(text.contains("not valid JSON"), "{text}");
    let (code, text) = send(
        "application/json",
        br#"{"kind":"Pod","apiVersion":"v1"}"#.to_vec(),
    );
    assert_eq!(code, 400);
    assert!(text.contains("not an AdmissionReview"), "{text}");
    // 413 beyond 8 MiB: declared by Content-Length (answered before the body is sent) and
    // streamed in chunks without a length.
    let declared = raw_exchange(
        agent.port,
        &format!(
            "POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            8 * 1024 * 1024 + 1
        ),
        &[],
    );
    assert!(declared.starts_with("HTTP/1.1 413"), "{declared}");
    let chunk = format!("{:x}\r\n{}\r\n", 1024 * 1024, " ".repeat(1024 * 1024));
    let chunks: Vec<&[u8]> = (0..9).map(|_| chunk.as_bytes()).collect();
    let streamed = raw_exchange(
        agent.port,
        "POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        &chunks,
    );
    assert!(streamed.starts_with("HTTP/1.1 413"), "{streamed}");
    // Exactly at the limit is read (and is not a review).
    let mut at_limit = vec![b' '; 8 * 1024 * 1024 - 2];
    at_limit.splice(0..0, *b"{}");
    let (code, _) = send("application/json", at_limit);
    assert_eq!(code, 400);
    // Wrong method.
    let code = client.get(&url).send().unwrap().status().as_u16();
    assert_eq!(code, 405);

    // A review without a request: an AdmissionReview with allowed false and code 400.
    let (code, review) = post(
        &client,
        &url,
        &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
    );
    assert_eq!(code, 200);
    assert_eq!(review["response"]["allowed"], false);
    assert_eq!(review["response"]["status"]["code"], 400);

    // An UPDATE whose oldObject is not an object.
    let mut bad = small_review("uid-bad", "prod");
    bad["request"]["oldObject"] = json!("nope");
    let (_, review) = post(&client, &url, &bad);
    assert_eq!(review["response"]["uid"], "uid-bad");
    assert_eq!(review["response"]["allowed"], false);
    assert_eq!(review["response"]["status"]["code"], 400);
    assert!(
        review["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .contains("oldObject")
    );

    // Other operations are allowed whatever their objects, without audit annotations.
    for operation in ["CREATE", "DELETE", "CONNECT"] {
        let mut review_in = small_review("uid-op", "prod");
        review_in["request"]["operation"] = json!(operation);
        review_in["request"]["object"] = Value::Null;
        let (_, review) = post(&client, &url, &review_in);
        assert_eq!(review["response"]["allowed"], true, "{operation}");
        assert!(
            review["response"].get("auditAnnotations").is_none(),
            "{operation}: {review}"
        );
    }

    // v1beta1 is answered in v1beta1.
    let mut beta = small_review("uid-beta", "prod");
    beta["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let (_, review) = post(&client, &url, &beta);
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1beta1");
    assert_eq!(review["response"]["uid"], "uid-beta");
    assert_eq!(review["response"]["allowed"], false);

    // dryRun requests are decided like any other.
    let mut dry = small_review("uid-dry", "prod");
    dry["request"]["dryRun"] = json!(true);
    let (_, review) = post(&client, &url, &dry);
    assert_eq!(review["response"]["allowed"], false);

    probes_metrics_and_decision_logs(&agent);
}

/// After [`admission_protocol_edges`]: the probes answer, its requests are counted in the
/// metrics, and every log line is one JSON object.
fn probes_metrics_and_decision_logs(agent: &Agent) {
    let client = plain_client();
    assert_eq!(
        client
            .get(format!("{}/healthz", agent.base))
            .send()
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        client
            .get(format!("{}/readyz", agent.base))
            .send()
            .unwrap()
            .status(),
        200
    );
    let metrics = agent.metrics();
    for name in [
        // The label `resource` is group/version/resource, as the original's (reference §10).
        "drift_sentinel_admission_requests_total{namespace=\"prod\",resource=\"apps/v1/deployments\",result=\"denied\"}",
        "drift_sentinel_violations_total{field=\"spec.replicas\",mode=\"enforce\",namespace=\"prod\",resource=\"apps/v1/deployments\"}",
        "drift_sentinel_admission_duration_seconds_bucket",
        "drift_sentinel_rules_loaded_total 1",
        "drift_sentinel_rules_invalid 0",
        "drift_sentinel_config_events_total{event_type=\"added\"} 1",
    ] {
        assert!(metrics.contains(name), "missing {name} in\n{metrics}");
    }

    // Every log line is one JSON object; the decision line has the fields of reference §6.
    let logs = agent.logs();
    let decisions: Vec<Value> = logs
        .iter()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("not JSON: {line}: {e}"))
        })
        .filter(|entry| entry["message"] == "admission decision")
        .collect();
    let denied = decisions
        .iter()
        .find(|d| d["uid"] == "uid-beta")
        .expect("decision logged");
    for field in [
        "operation",
        "namespace",
        "resource",
        "name",
        "user",
        "rule",
        "mode",
        "result",
        "reason",
        "changed_fields",
        "latency_us",
    ] {
        assert!(denied.get(field).is_some(), "{field} missing in {denied}");
    }
    assert_eq!(denied["result"], "denied");
}

/// [`drift_testkit::raw_exchange`] to the agent's loopback `port`.
fn raw_exchange(port: u16, head: &str, pieces: &[&[u8]]) -> String {
    drift_testkit::raw_exchange(("127.0.0.1", port), head, pieces)
}

#[test]
fn namespace_mode_annotation() {
    let namespaces = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: relaxed\n  annotations:\n    drift-sentinel.k8s.io/mode: warn\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: typo\n  annotations:\n    drift-sentinel.k8s.io/mode: Warn\n";
    let (_dir, agent) = offline_agent(IMAGE_RULE, Some(namespaces));
    let client = plain_client();
    let url = format!("{}/validate", agent.base);

    let (_, review) = post(&client, &url, &small_review("w", "relaxed"));
    let response = &review["response"];
    assert_eq!(response["allowed"], true);
    assert_eq!(response["auditAnnotations"]["mode"], "warn");
    assert_eq!(response["auditAnnotations"]["result"], "warned");
    let warnings = response["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].as_str().unwrap().starts_with(VIOLATION_PREFIX));

    let (_, review) = post(&client, &url, &small_review("t", "typo"));
    let response = &review["response"];
    assert_eq!(response["allowed"], false);
    assert_eq!(response["auditAnnotations"]["mode"], "enforce");
    let warnings = response["warnings"].as_array().unwrap();
    assert!(
        warnings[0].as_str().unwrap().contains("\"Warn\""),
        "{warnings:?}"
    );
}

#[test]
fn namespace_files_alone_are_reloaded_with_the_default_rule() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("namespaces.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n",
    )
    .unwrap();
    let agent = Agent::start(&["--namespaces", file.to_str().unwrap()], false);
    let client = plain_client();
    let url = format!("{}/validate", agent.base);
    let replicas = small_review("n", "shop");
    let response = post(&client, &url, &replicas).1["response"].clone();
    assert_eq!(
        response["auditAnnotations"]["rule"],
        "built-in/default-rule"
    );
    assert_eq!(response["allowed"], false);
    std::fs::write(&file, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  annotations:\n    drift-sentinel.k8s.io/mode: warn\n").unwrap();
    agent.wait_until("the namespace file change to be picked up", || {
        post(&client, &url, &replicas).1["response"]["auditAnnotations"]["mode"] == "warn"
    });
}

#[test]
fn rule_files_reload_and_an_invalid_rule_is_isolated() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    std::fs::write(
        rules.join("good.yaml"),
        rule_config_map("ops", "good", IMAGE_RULE),
    )
    .unwrap();
    let agent = Agent::start(&["--rules", rules.to_str().unwrap()], false);
    let client = plain_client();
    let url = format!("{}/validate", agent.base);
    let replicas = small_review("r", "prod");
    assert_eq!(
        post(&client, &url, &replicas).1["response"]["allowed"],
        false
    );

    // A typo'd key: that rule is rejected by name and key; the good rule keeps working.
    let typo = "mode: off\npriority: 100\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\nmutabel: [spec.replicas]\n";
    std::fs::write(
        rules.join("typo.yaml"),
        rule_config_map("ops", "typo", typo),
    )
    .unwrap();
    let status =
        agent.wait_for_status("the typo'd rule to be reported", |s| s["rulesInvalid"] == 1);
    let invalid = &status["invalidRules"][0];
    assert_eq!(invalid["rule"], "ops/typo");
    assert_eq!(invalid["field"], "mutabel");
    assert_eq!(invalid["line"], 5);
    assert!(
        invalid["message"].as_str().unwrap().contains("ops/typo"),
        "{invalid}"
    );
    assert!(
        invalid["message"].as_str().unwrap().contains("mutabel"),
        "{invalid}"
    );
    assert_eq!(status["rulesLoaded"], 1);
    assert_eq!(
        post(&client, &url, &replicas).1["response"]["allowed"],
        false
    );
    assert!(
        agent
            .logs()
            .iter()
            .any(|l| l.contains("invalid rule") && l.contains("mutabel"))
    );
    let metrics = agent.metrics();
    assert!(
        metrics.contains("drift_sentinel_rules_invalid 1"),
        "{metrics}"
    );

    // Fixing it makes it apply (priority 100, mode off).
    std::fs::write(
        rules.join("typo.yaml"),
        rule_config_map("ops", "typo", &typo.replace("mutabel", "mutable")),
    )
    .unwrap();
    agent.wait_for_status("the fixed rule to load", |s| {
        s["rulesLoaded"] == 2 && s["rulesInvalid"] == 0
    });
    let review = post(&client, &url, &replicas).1;
    assert_eq!(review["response"]["allowed"], true);
    assert_eq!(review["response"]["auditAnnotations"]["rule"], "ops/typo");

    // A file that is not YAML is a source error; the other files still load.
    std::fs::write(rules.join("broken.yaml"), "kind: [unclosed\n").unwrap();
    let status = agent.wait_for_status("the broken file to be reported", |s| {
        s["sourceErrors"].as_array().is_some_and(|e| !e.is_empty())
    });
    assert!(
        status["sourceErrors"][0]["source"]
            .as_str()
            .unwrap()
            .ends_with("broken.yaml")
    );
    assert_eq!(status["rulesLoaded"], 2);

    // Deleting a file removes its rules.
    std::fs::remove_file(rules.join("typo.yaml")).unwrap();
    agent.wait_for_status("the deleted rule to go", |s| s["rulesLoaded"] == 1);
    assert_eq!(
        post(&client, &url, &replicas).1["response"]["allowed"],
        false
    );
}

#[test]
fn sigterm_finishes_in_flight_requests_and_exits_zero() {
    let (_dir, mut agent) = offline_agent(IMAGE_RULE, None);
    let body = small_review("inflight", "prod").to_string();
    let mut stream = TcpStream::connect(("127.0.0.1", agent.port)).unwrap();
    let head = format!(
        "POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    let (first_half, second_half) = body.as_bytes().split_at(body.len() / 2);
    stream.write_all(first_half).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    agent.signal("TERM");
    std::thread::sleep(Duration::from_millis(300));
    // No new connections once shutdown started.
    assert!(
        TcpStream::connect(("127.0.0.1", agent.port)).is_err(),
        "listener still accepting after SIGTERM"
    );
    stream.write_all(second_half).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut response = Vec::new();
    let mut buffer = [0u8; 4096];
    while !String::from_utf8_lossy(&response).contains("\"uid\":\"inflight\"") {
        let n = stream.read(&mut buffer).unwrap();
        assert!(
            n > 0,
            "connection closed before the response: {}",
            String::from_utf8_lossy(&response)
        );
        response.extend_from_slice(&buffer[..n]);
    }
    let text = String::from_utf8_lossy(&response);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    drop(stream);
    let status = agent
        .wait_exit(Duration::from_secs(10))
        .expect("agent exited after SIGTERM");
    assert!(status.success(), "{status:?}");
}

fn default_rule_deployment() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {
            "name": "web", "namespace": "shop", "generation": 4, "resourceVersion": "100",
            "annotations": {
                "deployment.kubernetes.io/revision": "3",
                "kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{\"template\":{\"spec\":{\"containers\":[{\"image\":\"shop:1.0\",\"name\":\"web\"}]}}}}\n"
            }
        },
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "shop:1.0"}]}}},
        "status": {"observedGeneration": 4}
    })
}

#[test]
fn the_built_in_default_rule_allows_normal_operations() {
    let agent = Agent::start(&[], false);
    let status = agent.status();
    assert_eq!(status["source"]["kind"], "builtIn");
    assert!(
        agent
            .logs()
            .iter()
            .any(|l| l.contains("built-in default rule"))
    );
    let client = plain_client();
    let url = format!("{}/validate", agent.base);
    let old = default_rule_deployment();

    // kubectl apply of a new image: the image and the last-applied annotation change.
    let mut apply = old.clone();
    apply["spec"]["template"]["spec"]["containers"][0]["image"] = json!("shop:1.1");
    apply["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = json!(
        "{\"spec\":{\"template\":{\"spec\":{\"containers\":[{\"image\":\"shop:1.1\",\"name\":\"web\"}]}}}}\n"
    );
    apply["metadata"]["generation"] = json!(5);
    // kubectl rollout restart: the pod template gains an annotations map.
    let mut restart = old.clone();
    restart["spec"]["template"]["metadata"]["annotations"] =
        json!({"kubectl.kubernetes.io/restartedAt": "2026-12-02T12:00:00Z"});
    // The Deployment controller bumps its revision annotation.
    let mut revision = old.clone();
    revision["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = json!("4");
    for (name, new) in [
        ("apply", apply),
        ("restart", restart),
        ("revision", revision),
    ] {
        let (_, review) = post(&client, &url, &fixtures::review(name, &old, &new));
        assert_eq!(review["response"]["allowed"], true, "{name}: {review:#}");
        assert_eq!(
            review["response"]["auditAnnotations"]["rule"],
            "built-in/default-rule"
        );
    }
    let mut scaled = old.clone();
    scaled["spec"]["replicas"] = json!(5);
    let (_, review) = post(&client, &url, &fixtures::review("scale", &old, &scaled));
    assert_eq!(review["response"]["allowed"], false);
    assert_eq!(
        review["response"]["auditAnnotations"]["denied-paths"],
        "spec.replicas"
    );
}

#[test]
fn command_line_errors_are_clear() {
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_drift-sentinel"))
            .env_clear()
            .args(args)
            .output()
            .unwrap()
    };
    let help = run(&["serve", "--help"]);
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(help.status.success());
    for flag in [
        "--rules",
        "--namespaces",
        "--tls-cert-file",
        "DRIFT_SENTINEL_ADDRESS",
        "DRIFT_SENTINEL_SHUTDOWN_TIMEOUT",
        "--admin-address",
    ] {
        assert!(text.contains(flag), "{flag} missing from help:\n{text}");
    }
    let admin = run(&["--admin-address", "0.0.0.0:9090"]);
    assert!(!admin.status.success());
    assert!(String::from_utf8_lossy(&admin.stderr).contains("loopback"));
    let missing = run(&[
        "--rules",
        "/nonexistent/rules.yaml",
        "--address",
        "127.0.0.1:0",
        "--admin-address",
        "127.0.0.1:0",
    ]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/rules.yaml"));
    let duration = run(&["--shutdown-timeout", "ten"]);
    assert!(!duration.status.success());
    assert!(String::from_utf8_lossy(&duration.stderr).contains("invalid duration"));
}

/// Issue 16: an `exclude` pattern that reaches below a changed scalar must not remove it.
#[test]
fn exclude_reaching_below_a_scalar_does_not_hide_it() {
    let cases = [
        ("spec.*.metadata.annotations", "spec.replicas"),
        (
            "spec.template.spec.*[*].resources",
            "spec.template.spec.serviceAccountName",
        ),
    ];
    for (exclude, changed) in cases {
        let rule = format!(
            "mode: enforce\nnamespaces: ['*']\nselectors: [{{apiGroup: apps, kind: Deployment}}]\nexclude: ['{exclude}']\n"
        );
        let (_dir, agent) = offline_agent(&rule, None);
        let old = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "prod"},
            "spec": {"replicas": 2, "template": {
                "metadata": {"annotations": {"a": "1"}},
                "spec": {"serviceAccountName": "web", "containers": [
                    {"name": "app", "image": "nginx", "resources": {"limits": {"cpu": "1"}}}]}}}});
        let mut new = old.clone();
        match changed {
            "spec.replicas" => new["spec"]["replicas"] = json!(5),
            _ => new["spec"]["template"]["spec"]["serviceAccountName"] = json!("other"),
        }
        let review = drift_engine::review::update_review(old, new, "alice", "uid-16").unwrap();
        let (code, body) = post(
            &plain_client(),
            &format!("{}/validate", agent.base),
            &review,
        );
        assert_eq!(code, 200);
        let response = &body["response"];
        assert_eq!(response["allowed"], false, "{exclude}: {body:#}");
        assert_eq!(response["status"]["code"], 403);
        let message = response["status"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!(
                "Drift Sentinel: immutable fields changed: {changed}; "
            )),
            "{message}"
        );
        assert_eq!(response["auditAnnotations"]["denied-paths"], changed);
    }
}

/// `POST /validate-rule` (reference §2): a broken rule is refused with its line and column, a valid
/// rule with a likely mistake is admitted with a warning, anything else is admitted as it is.
#[test]
fn rule_config_maps_are_validated_before_they_are_stored() {
    let (_dir, agent) = offline_agent(IMAGE_RULE, None);
    let url = format!("{}/validate-rule", agent.base);
    let review = |annotated: bool, spec: &str| {
        let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "guard", "namespace": "drift-system"},
            "data": {"spec": spec}});
        if annotated {
            object["metadata"]["annotations"] = json!({"drift-sentinel.k8s.io/rule": " TRUE "});
        }
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "rule-1", "operation": "CREATE", "namespace": "drift-system", "name": "guard",
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "userInfo": {"username": "alice"}, "object": object}})
    };
    let send = |body: Value| {
        let (code, answer) = post(&plain_client(), &url, &body);
        assert_eq!(code, 200, "{answer}");
        assert_eq!(answer["response"]["uid"], "rule-1");
        answer["response"].clone()
    };

    let typo = send(review(
        true,
        "mode: enforce\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\nmutabel: [spec.replicas]\n",
    ));
    assert_eq!(typo["allowed"], false, "{typo}");
    assert_eq!(typo["status"]["code"], 422);
    assert_eq!(typo["status"]["reason"], "Invalid");
    let message = typo["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("rule ConfigMap drift-system/guard: data.spec line 4 column 1")
            && message.contains("mutabel"),
        "{message}"
    );

    let empty_bypass = send(review(
        true,
        "mode: enforce\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\nbypass: ''\n",
    ));
    assert_eq!(empty_bypass["allowed"], false, "{empty_bypass}");
    assert!(
        empty_bypass["status"]["message"]
            .as_str()
            .unwrap()
            .contains("bypass")
    );

    let misspelt_path = send(review(
        true,
        "mode: enforce\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\nmutable: ['spec.template.spec.containerz[*].image']\n",
    ));
    assert_eq!(misspelt_path["allowed"], true, "{misspelt_path}");
    let warnings = misspelt_path["warnings"].as_array().expect("warnings");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0]
            .as_str()
            .unwrap()
            .contains("mutable pattern spec.template.spec.containerz[*].image"),
        "{warnings:?}"
    );

    let fine = send(review(true, IMAGE_RULE));
    assert_eq!(fine["allowed"], true);
    assert!(fine.get("warnings").is_none(), "{fine}");
    let not_a_rule = send(review(false, "not a rule at all"));
    assert_eq!(not_a_rule["allowed"], true);
}

/// reference §4: numbers compare exactly whatever their exponent. Past i64's end an exponent
/// was saturated, so `1e9223372036854775807 → 1e9223372036854775808` read as no change; the
/// agent judges it (and the same value written another way is no change).
#[test]
fn numbers_compare_exactly_past_every_exponent_width() {
    let agent = Agent::start(&[], false);
    let url = format!("{}/validate", agent.base);
    let body = |old: &str, new: &str| {
        let (mut before, mut after) = (default_rule_deployment(), default_rule_deployment());
        before["spec"]["replicas"] = json!(111);
        after["spec"]["replicas"] = json!(222);
        // The numbers are written into the text: no `Value` holds them.
        drift_testkit::objects::review("numbers", &before, &after)
            .to_string()
            .replace("\"replicas\":111", &format!("\"replicas\":{old}"))
            .replace("\"replicas\":222", &format!("\"replicas\":{new}"))
    };
    for (old, new, allowed) in [
        ("1e9223372036854775807", "1e9223372036854775808", false),
        ("1e-9223372036854775809", "1e-9223372036854775808", false),
        ("1e9223372036854775807", "10e9223372036854775806", true),
        (
            "5e99999999999999999999999999999999999999999",
            "0.5e100000000000000000000000000000000000000000",
            true,
        ),
    ] {
        let (status, text) = support::post_text(&plain_client(), &url, body(old, new));
        assert_eq!(status, 200, "{text}");
        let answer: Value = serde_json::from_str(&text).expect("a review");
        assert_eq!(
            answer["response"]["allowed"], allowed,
            "{old} → {new}: {answer}"
        );
        if !allowed {
            let message = answer["response"]["status"]["message"].as_str().unwrap();
            assert!(message.contains("spec.replicas"), "{message}");
        }
    }
}
