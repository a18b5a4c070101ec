//! `kubectl drift status` in cluster mode, for real: the plugin binary
//! against the API server double (`drift_testkit::ApiServer`, over HTTP on loopback, read with
//! kube-rs) holding the agent pods, the Connection and the ValidatingWebhookConfiguration, and
//! real `drift-sentinel` agents (offline: rules from files, export to a temporary directory)
//! whose admin listeners the double's pod port-forwarding leads to.
//!
//! Needs the agent binary next to the plugin's (`cargo build -p drift-sentinel`; `cargo test
//! --workspace` builds it).

mod support;

use std::process::Output;
use std::time::Duration;

use drift_testkit::agent::Agent;
use drift_testkit::free_port;
use serde_json::{Value, json};
use support::agents::{Cluster, NAMESPACE, rfc3339_ago, run_plugin};

fn entry(pod: &str, active: bool, attempt: u64, success: u64, errors: &[&str]) -> Value {
    let errors: Vec<Value> = errors
        .iter()
        .map(|m| json!({"type": "Publish", "message": m}))
        .collect();
    json!({
        "id": pod, "connectionUID": "00000000-0000-4000-8000-000000000009", "connectionErrors": [],
        "publishStatuses": [{"source": "webhook", "active": active,
            "lastAttemptTime": rfc3339_ago(attempt), "lastSuccessTime": rfc3339_ago(success),
            "errors": errors}]
    })
}

/// `Ns ago`, N from `at_least` to a few seconds more (the time the test took so far).
fn assert_seconds_ago(cell: &str, at_least: u64) {
    let seconds: u64 = cell
        .strip_suffix("s ago")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not `Ns ago`: {cell:?}"));
    assert!((at_least..at_least + 30).contains(&seconds), "{cell:?}");
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The line of a table that starts with `first`, split on runs of two or more spaces.
fn row(text: &str, after: &str, first: &str) -> Vec<String> {
    let section = &text[text
        .find(after)
        .unwrap_or_else(|| panic!("no {after:?} in:\n{text}"))..];
    let line = section
        .lines()
        .find(|l| l.starts_with(&format!("{first} ")))
        .unwrap_or_else(|| panic!("no row {first:?} after {after:?} in:\n{text}"));
    line.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn status_of_a_healthy_installation_exits_0() {
    let cluster = Cluster::start();
    let agent = cluster.agent("drift-sentinel-7d9f-a").start();
    cluster.agent_pod("drift-sentinel-7d9f-a", true, Some(agent.admin_addr()));
    // Another application's pod in the namespace: not an agent pod.
    cluster.api().apply(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "other", "namespace": NAMESPACE, "labels": {"app": "other"}},
        "status": {"phase": "Pending"}
    }));
    cluster.webhook(true);
    cluster.connection(vec![
        entry("drift-sentinel-7d9f-a", true, 10, 10, &[]),
        // An entry left by a pod of an earlier rollout: shown, not judged.
        entry(
            "drift-sentinel-old",
            false,
            3600,
            7200,
            &["cannot create a segment"],
        ),
    ]);

    let output = cluster.plugin(&["status"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}\n{}", stderr(&output));
    assert_eq!(
        row(&text, "Agent pods", "drift-sentinel-7d9f-a"),
        [
            "drift-sentinel-7d9f-a",
            "yes",
            "Running",
            "1",
            "10m",
            "ready",
            "1",
            "0",
            "on"
        ],
        "{text}"
    );
    assert!(!text.contains("other"), "{text}");
    let connection_row = row(&text, "Connection", "drift-sentinel-7d9f-a");
    assert_eq!(
        connection_row[..3],
        ["drift-sentinel-7d9f-a", "webhook", "true"],
        "{text}"
    );
    assert_seconds_ago(&connection_row[3], 10);
    assert_seconds_ago(&connection_row[4], 10);
    assert_eq!(connection_row[5..], ["0", "ok"], "{text}");
    assert_eq!(
        row(&text, "Connection", "drift-sentinel-old (gone)")[6],
        "-",
        "{text}"
    );
    assert_eq!(
        row(
            &text,
            "ValidatingWebhookConfiguration drift-sentinel",
            "validate.drift-sentinel.k8s.io"
        ),
        [
            "validate.drift-sentinel.k8s.io",
            "present",
            "Fail",
            "service drift-sentinel/drift-sentinel:443/validate",
            "drift-sentinel.k8s.io/enabled notin (false), kubernetes.io/metadata.name notin (drift-sentinel,kube-system)"
        ],
        "{text}"
    );
    assert!(text.trim_end().ends_with("Healthy."), "{text}");
    // The agent's /status was read through the double's port-forward.
    assert!(
        cluster.api().requests().iter().any(|r| r.starts_with(
            "GET /api/v1/namespaces/drift-sentinel/pods/drift-sentinel-7d9f-a/portforward?"
        )),
        "{:?}",
        cluster.api().requests()
    );
    // The selector went to the API server.
    assert!(
        cluster
            .api()
            .requests()
            .iter()
            .any(|r| r.contains("labelSelector=")),
        "{:?}",
        cluster.api().requests()
    );

    let yaml = cluster.plugin(&["status", "-o", "yaml"]);
    assert_eq!(yaml.status.code(), Some(0), "{}", stderr(&yaml));
    let document: Value = serde_yaml::from_slice(&yaml.stdout).unwrap();
    assert_eq!(document["healthy"], true);
    assert_eq!(document["problems"], json!([]));
}

/// Issue 42: what `helm install` gives by default reads clean — export off, so no Connection;
/// the admission webhook leaving the agent's namespace alone and the rule webhook (`Ignore`,
/// every namespace: the rule ConfigMaps live in the agent's) beside it. A webhook that fails
/// closed in the agent's namespace is still a warning.
#[test]
fn status_of_a_default_install_has_no_warning() {
    let cluster = Cluster::start();
    let agent = cluster
        .agent("drift-sentinel-7d9f-a")
        .without_export()
        .start();
    cluster.agent_pod("drift-sentinel-7d9f-a", true, Some(agent.admin_addr()));
    cluster.webhook(true);
    // The chart's audit pod, exporting nothing either, once it has run.
    let fixtures = drift_testkit::workspace().join("agent/tests/fixtures/audit");
    let audit = Agent::audit(&cluster.dir().join("audit"))
        .rules(fixtures.join("rules"))
        .objects(fixtures.join("deployments.yaml"))
        .args(["--audit-interval", "1s"])
        .without_export()
        .ready_when(Duration::from_secs(30), |status| {
            status["audit"]["lastCompleted"].is_string()
        })
        .start();
    cluster.api().apply(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "drift-sentinel-audit-5c7d-x", "namespace": NAMESPACE,
            "creationTimestamp": rfc3339_ago(600),
            "labels": {"app.kubernetes.io/name": "drift-sentinel",
                "app.kubernetes.io/instance": "drift-sentinel",
                "app.kubernetes.io/component": "audit"}},
        "spec": {"containers": [{"name": "audit", "image": "drift-sentinel:test"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    }));
    cluster.api().set_pod_port_target(
        NAMESPACE,
        "drift-sentinel-audit-5c7d-x",
        9090,
        audit.admin_addr(),
    );
    let with_rule_webhook = |failure_policy: &str| {
        let mut configuration = cluster
            .api()
            .get(
                "admissionregistration.k8s.io/v1",
                "ValidatingWebhookConfiguration",
                "",
                "drift-sentinel",
            )
            .unwrap();
        let mut rules = configuration["webhooks"][0].clone();
        rules["name"] = json!("rules.drift-sentinel.k8s.io");
        rules["failurePolicy"] = json!(failure_policy);
        rules["clientConfig"]["service"]["path"] = json!("/validate-rule");
        rules["namespaceSelector"] = json!({});
        rules["rules"] = json!([{"apiGroups": [""], "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"], "scope": "Namespaced"}]);
        configuration["webhooks"] = json!([configuration["webhooks"][0].clone(), rules]);
        configuration["metadata"] = json!({"name": "drift-sentinel",
            "labels": configuration["metadata"]["labels"].clone()});
        cluster.api().apply(configuration);
    };
    with_rule_webhook("Ignore");

    let output = cluster.plugin(&["status", "-o", "json"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let document: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        document["pods"][0]["admin"]["exportEnabled"], false,
        "{document:#}"
    );
    assert_eq!(document["connection"]["found"], false, "{document:#}");
    assert_eq!(
        (&document["problems"], &document["warnings"]),
        (&json!([]), &json!([])),
        "{document:#}"
    );
    let output = cluster.plugin(&["status"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(
        text.contains("Connection drift-sentinel/audit-connection: not found (violation export is off on the agent pods read: none is needed)"),
        "{text}"
    );
    assert!(text.contains("rules.drift-sentinel.k8s.io"), "{text}");
    assert!(text.trim_end().ends_with("Healthy."), "{text}");

    with_rule_webhook("Fail");
    let output = cluster.plugin(&["status", "-o", "json"]);
    let document: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        document["warnings"],
        json!([
            "webhook rules.drift-sentinel.k8s.io of drift-sentinel may intercept the agent's own namespace drift-sentinel with failurePolicy Fail (namespaceSelector: (all namespaces)): while no agent answers, updates there are refused"
        ]),
        "{document:#}"
    );
}

/// An unhealthy installation: three pods with one agent behind them all (its rules include a
/// broken one; agent-c not ready), agent-d's admin port leading nowhere, the webhook without a
/// caBundle, and the Connection's sources stale, erring and idle. The agent runs while the
/// returned value lives.
fn unhealthy_installation(cluster: &Cluster) -> Agent {
    let broken = cluster.dir().join("broken.yaml");
    std::fs::write(
        &broken,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: broken\n  namespace: ops\n  annotations:\n    drift-sentinel.k8s.io/rule: \"true\"\ndata:\n  spec: |\n    mode: enforce\n    namespaces: ['*']\n    selectors: [{apiGroup: apps, kind: Deployment}]\n    mdoe: warn\n",
    )
    .unwrap();
    let agent = cluster.agent("agent").rules(&broken).start();
    cluster.agent_pod("agent-a", true, Some(agent.admin_addr()));
    cluster.agent_pod("agent-b", true, Some(agent.admin_addr()));
    cluster.agent_pod("agent-c", false, Some(agent.admin_addr()));
    cluster.agent_pod("agent-d", true, None);
    cluster.webhook(false);
    cluster.connection(vec![
        entry("agent-a", true, 5, 5, &[]),
        // Attempted 5 s ago, last success 10 minutes ago: stale.
        entry("agent-b", false, 5, 600, &[]),
        entry(
            "agent-c",
            true,
            5,
            5,
            &["cannot create a segment in spool directory /tmp/violations/topics/audit-channel"],
        ),
        // Nothing attempted since its last success, long ago: flagged stale (idle), a warning.
        entry("agent-d", true, 900, 900, &[]),
    ]);
    agent
}

/// What `status` prints of the unhealthy installation: each pod and source in its table, the
/// invalid rule once for the pods that report it, every problem.
fn assert_unhealthy_text(text: &str) {
    let pods = "Agent pods";
    assert_eq!(
        row(text, pods, "agent-a")[5..],
        ["ready", "1", "1", "on"],
        "{text}"
    );
    assert_eq!(row(text, pods, "agent-c")[1], "no", "{text}");
    assert_eq!(
        row(text, pods, "agent-d")[5..],
        ["unreachable", "-", "-", "-"],
        "{text}"
    );
    let status = "Connection drift-sentinel/audit-connection, status by pod";
    let a = row(text, status, "agent-a");
    assert_eq!(a[..3], ["agent-a", "webhook", "true"], "{text}");
    assert_seconds_ago(&a[3], 5);
    assert_seconds_ago(&a[4], 5);
    assert_eq!(a[5..], ["0", "ok"], "{text}");
    let b = row(text, status, "agent-b");
    assert_eq!(b[..3], ["agent-b", "webhook", "false"], "{text}");
    assert_seconds_ago(&b[3], 5);
    assert_eq!(b[4..], ["10m ago", "0", "STALE"], "{text}");
    assert_eq!(row(text, status, "agent-c")[5..], ["1", "ERRORS"], "{text}");
    assert_eq!(row(text, status, "agent-d")[6], "stale (idle)", "{text}");
    assert_eq!(
        row(
            text,
            "ValidatingWebhookConfiguration",
            "validate.drift-sentinel.k8s.io"
        )[1],
        "MISSING",
        "{text}"
    );
    assert!(
        text.contains("\nInvalid rules:\n  ops/broken (pod agent-a, agent-b, agent-c): rule ConfigMap ops/broken (from "),
        "{text}"
    );
    let problems = &text[text.find("Unhealthy (").expect(text)..];
    for expected in [
        "pod agent-b source webhook: stale: last success 10m ago (more than 2 minutes ago), last attempt ",
        "pod agent-c source webhook: 1 publish error: cannot create a segment in spool directory /tmp/violations/topics/audit-channel",
        "pod agent-c is not ready (phase Running)",
        "invalid rule ops/broken (pod agent-a, agent-b, agent-c): rule ConfigMap ops/broken (from ",
        "pod agent-d: cannot read the admin API (port 9090) through port-forwarding: error forwarding port 9090 to pod drift-sentinel/agent-d",
        "webhook validate.drift-sentinel.k8s.io of drift-sentinel has no caBundle",
    ] {
        assert!(problems.contains(expected), "{expected:?} in:\n{text}");
    }
    assert!(!problems.contains("agent-d source"), "{text}");
}

/// The same facts in `status -o json`.
fn assert_unhealthy_document(document: &Value) {
    assert_eq!(document["healthy"], false);
    assert_eq!(document["namespace"], NAMESPACE);
    let pods = document["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 4);
    assert_eq!(pods[0]["name"], "agent-a");
    assert_eq!(pods[0]["ready"], true);
    assert_eq!(pods[0]["admin"]["rulesLoaded"], 1);
    assert_eq!(pods[0]["admin"]["rulesInvalid"], 1);
    assert_eq!(pods[0]["admin"]["invalidRules"][0]["rule"], "ops/broken");
    assert_eq!(pods[0]["admin"]["exportEnabled"], true);
    assert_eq!(pods[3]["admin"]["reachable"], false);
    let states: Vec<(&str, &str)> = document["connection"]["byPod"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["pod"].as_str().unwrap(),
                e["sources"][0]["state"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            ("agent-a", "ok"),
            ("agent-b", "stale"),
            ("agent-c", "errors"),
            ("agent-d", "idle")
        ]
    );
    let webhook = &document["webhookConfigurations"][0]["webhooks"][0];
    assert_eq!(webhook["caBundle"], false);
    assert_eq!(webhook["failurePolicy"], "Fail");
    assert_eq!(webhook["interceptsAgentNamespace"], false);
    assert_eq!(
        webhook["namespaceSelector"]["matchExpressions"][1]["values"],
        json!([NAMESPACE, "kube-system"])
    );
    assert_eq!(
        document["problems"].as_array().unwrap().len(),
        6,
        "{document:#}"
    );
    let warnings = document["warnings"].as_array().unwrap();
    // This installation has no audit pods: said, not a problem.
    assert_eq!(warnings.len(), 2, "{document:#}");
    assert!(
        warnings[1]
            .as_str()
            .unwrap()
            .starts_with("no audit pods in namespace drift-sentinel"),
        "{document:#}"
    );
    assert!(
        warnings[0]
            .as_str()
            .unwrap()
            .starts_with("pod agent-d source webhook: stale: last success"),
        "{document:#}"
    );
}

#[test]
fn status_flags_stale_sources_errors_unready_pods_and_invalid_rules_and_exits_1() {
    let cluster = Cluster::start();
    let _agent = unhealthy_installation(&cluster);

    let output = cluster.plugin(&["status", "--agent-namespace", NAMESPACE]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{text}\n{}", stderr(&output));
    assert_unhealthy_text(&text);

    let json_output = cluster.plugin(&["status", "-o", "json"]);
    assert_eq!(
        json_output.status.code(),
        Some(1),
        "{}",
        stderr(&json_output)
    );
    let document: Value = serde_json::from_slice(&json_output.stdout).unwrap();
    assert_unhealthy_document(&document);
}

#[test]
fn status_names_what_is_missing() {
    let cluster = Cluster::start();
    // No webhook configuration: where the agent runs cannot be told, and the plugin does not
    // guess.
    let output = cluster.plugin(&["status"]);
    assert_eq!(output.status.code(), Some(2), "{}", stdout(&output));
    assert_eq!(
        stderr(&output).trim_end(),
        "error: cannot tell the agent's namespace: no ValidatingWebhookConfiguration has the webhook validate.drift-sentinel.k8s.io (is Drift Sentinel installed?); give --agent-namespace"
    );
    // No pods, no Connection, no webhook configuration in the namespace given.
    let output = cluster.plugin(&["status", "--agent-namespace", "drift-sentinel"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{text}\n{}", stderr(&output));
    assert!(
        text.contains("no agent pods in namespace drift-sentinel match the selector app.kubernetes.io/name=drift-sentinel,app.kubernetes.io/component=webhook"),
        "{text}"
    );
    assert!(
        text.contains("Connection drift-sentinel/audit-connection: not found"),
        "{text}"
    );
    assert!(
        text.contains("no ValidatingWebhookConfiguration of Drift Sentinel found"),
        "{text}"
    );

    // Named ones that do not exist; another selector and admin port.
    cluster.webhook(true);
    let output = cluster.plugin(&[
        "status",
        "--webhook",
        "mine",
        "--connection",
        "other",
        "-l",
        "app=agent",
        "--admin-port",
        "9443",
    ]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(
        text.contains("ValidatingWebhookConfiguration mine not found"),
        "{text}"
    );
    assert!(
        text.contains("Connection drift-sentinel/other: not found"),
        "{text}"
    );
    assert!(text.contains("match the selector app=agent"), "{text}");

    // A webhook configuration found by its webhook's name when it lacks the chart's labels.
    let mut unlabelled = cluster
        .api()
        .get(
            "admissionregistration.k8s.io/v1",
            "ValidatingWebhookConfiguration",
            "",
            "drift-sentinel",
        )
        .unwrap();
    cluster.api().delete(
        "admissionregistration.k8s.io/v1",
        "ValidatingWebhookConfiguration",
        "",
        "drift-sentinel",
    );
    unlabelled["metadata"] = json!({"name": "renamed"});
    cluster.api().apply(unlabelled);
    let text = stdout(&cluster.plugin(&["status"]));
    assert!(
        text.contains("ValidatingWebhookConfiguration renamed:"),
        "{text}"
    );

    // The admin port given: a pod whose 9443 leads to the agent.
    let agent = cluster.agent("agent").start();
    cluster.agent_pod("agent-a", true, None);
    cluster
        .api()
        .set_pod_port_target(NAMESPACE, "agent-a", 9443, agent.admin_addr());
    let output = cluster.plugin(&["status", "--admin-port", "9443", "-o", "json"]);
    let document: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        document["pods"][0]["admin"]["rulesLoaded"], 1,
        "{document:#}"
    );
    // Export is on at the agent but there is no Connection: that is a problem.
    assert!(
        document["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p == "Connection drift-sentinel/audit-connection not found, but export is enabled on pod agent-a"),
        "{document:#}"
    );
}

#[test]
fn status_exits_2_with_one_line_when_the_cluster_cannot_be_asked() {
    let cluster = Cluster::start();
    let dir = cluster.dir();
    // An API server that is not there.
    let gone = dir.join("gone");
    std::fs::write(
        &gone,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'http://127.0.0.1:{}'}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\nusers:\n- name: u\n  user: {{token: t}}\n",
            free_port()
        ),
    )
    .unwrap();
    let missing = dir.join("missing");
    for (args, expected) in [
        (
            vec!["status", "--kubeconfig", gone.to_str().unwrap()],
            "cannot tell the agent's namespace: cannot list the ValidatingWebhookConfigurations at http://127.0.0.1:",
        ),
        (
            vec![
                "status",
                "--kubeconfig",
                gone.to_str().unwrap(),
                "--agent-namespace",
                "drift-sentinel",
            ],
            "cannot list the agent pods (namespace drift-sentinel, selector app.kubernetes.io/name=drift-sentinel,app.kubernetes.io/component=webhook) at http://127.0.0.1:",
        ),
        (
            vec!["status", "--kubeconfig", missing.to_str().unwrap()],
            "cannot read kubeconfig",
        ),
        (
            vec![
                "status",
                "--kubeconfig",
                cluster.kubeconfig(),
                "--context",
                "nope",
            ],
            "(context \"nope\")",
        ),
        (vec!["status", "-o", "xml"], "invalid value 'xml'"),
        (
            vec!["status", "--admin-port", "http"],
            "invalid value 'http'",
        ),
    ] {
        let output = run_plugin(&args);
        let text = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {text}");
        assert!(text.contains(expected), "{args:?}: {text}");
        if !expected.starts_with("invalid value") {
            assert_eq!(text.lines().count(), 1, "{args:?}: {text}");
        }
    }
    // A failing API server (500 on every request) is a cluster error too.
    cluster.api().inject(drift_testkit::Fault::FailPath {
        contains: "/pods".to_owned(),
        status: 500,
    });
    let output = cluster.plugin(&["status", "--agent-namespace", "drift-sentinel"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("injected failure"),
        "{}",
        stderr(&output)
    );
}

/// An admin port whose answer is hostile (a chunk size past 64 bits, which overflowed the
/// hand-written parser this plugin had) is an unreachable admin API, named in the report —
/// through the real path: the API server's port-forward to the pod, then the HTTP client.
#[test]
fn status_reports_a_hostile_admin_answer_as_an_error_not_a_panic() {
    let cluster = Cluster::start();
    cluster.webhook(true);
    let hostile = support::serve_raw(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nx\r\n",
        4,
    );
    cluster.agent_pod("agent-hostile", true, Some(hostile));
    let output = cluster.plugin(&["status", "-o", "json"]);
    let text = stderr(&output);
    assert!(!text.contains("panicked"), "{text}");
    assert_eq!(output.status.code(), Some(1), "{text}");
    let document: Value = serde_json::from_slice(&output.stdout).unwrap();
    let admin = &document["pods"][0]["admin"];
    assert_eq!(admin["reachable"], false, "{document:#}");
    let error = admin["error"].as_str().unwrap();
    // hyper takes the size as announced and finds the body cut short.
    assert!(error.starts_with("the admin API's answer: "), "{error}");
    assert!(
        document["problems"].as_array().unwrap().iter().any(|p| p
            .as_str()
            .unwrap()
            .contains("pod agent-hostile: cannot read the admin API (port 9090)")),
        "{document:#}"
    );
}

/// `--request-timeout` bounds every request: an API server that accepts and never answers is
/// a cluster error (exit 2) within the limit, naming it; `0` is kubectl's "no limit", and a
/// value that is not a duration is a usage error.
#[test]
fn status_gives_up_on_a_silent_api_server_after_the_request_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = std::thread::spawn(move || {
        // Accept and hold every connection, answering nothing.
        let mut held = Vec::new();
        for stream in listener.incoming().take(8) {
            held.push(stream);
        }
    });
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'http://127.0.0.1:{port}'}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\nusers:\n- name: u\n  user: {{token: t}}\n"
        ),
    )
    .unwrap();
    let kubeconfig = kubeconfig.to_str().unwrap();
    let started = std::time::Instant::now();
    let output = run_plugin(&[
        "status",
        "--kubeconfig",
        kubeconfig,
        "--request-timeout",
        "1s",
    ]);
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert!(
        text.contains("no answer within 1s (see --request-timeout)"),
        "{text}"
    );
    assert!(started.elapsed() < Duration::from_secs(15), "{text}");
    assert_eq!(text.lines().count(), 1, "{text}");
    drop(held);

    let output = run_plugin(&["status", "--request-timeout", "soon"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("--request-timeout \"soon\" is not a duration"));
}

/// `-n` is the namespace of objects, as in kubectl; the agent's is --agent-namespace.
#[test]
fn status_takes_the_agent_namespace_flag_not_n() {
    let output = run_plugin(&["status", "-n", "drift-sentinel"]);
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert!(
        text.contains("try --agent-namespace drift-sentinel"),
        "{text}"
    );
}

/// Each rule's tier and the rules served in their last valid version (stale, with the reason),
/// from the agents' `/status`: a stale rule is a problem to fix (exit 1).
#[test]
fn status_shows_tiers_and_stale_rules() {
    let cluster = Cluster::start();
    cluster.webhook(true);
    let body = json!({
        "ready": true, "source": {"kind": "cluster"}, "loadedAt": "2026-07-28T12:00:00Z",
        "rulesLoaded": 2, "rulesInvalid": 0,
        "rules": [{"rule": "drift-sentinel/platform", "mode": "enforce", "priority": 10, "tier": "cluster"},
                  {"rule": "team-a/own", "mode": "warn", "priority": 500, "tier": "namespace"}],
        "staleRules": [{"rule": "drift-sentinel/platform",
                        "reason": "data.spec line 4 column 1: field mutabel: unknown field `mutabel`",
                        "since": "2026-07-28T12:01:00Z", "servedResourceVersion": "7", "resourceVersion": "9"}],
        "clusterRuleNamespaces": ["drift-sentinel"],
        "namespacesKnown": 3, "export": {"enabled": false}
    })
    .to_string();
    let answer: &'static [u8] = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .leak()
    .as_bytes();
    let admin = support::serve_raw(answer, 8);
    cluster.agent_pod("agent-a", true, Some(admin));
    let output = cluster.plugin(&["status"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{text}\n{}", stderr(&output));
    assert_eq!(
        row(&text, "Rules in force:", "  drift-sentinel/platform"),
        [
            "drift-sentinel/platform",
            "cluster rule",
            "enforce",
            "10",
            "stale",
            "agent-a"
        ],
        "{text}"
    );
    assert_eq!(
        row(&text, "Rules in force:", "  team-a/own"),
        [
            "team-a/own",
            "namespace rule",
            "warn",
            "500",
            "current",
            "agent-a"
        ],
        "{text}"
    );
    for expected in [
        "Cluster rule namespaces: drift-sentinel (rule ConfigMaps elsewhere are namespace rules)",
        "Stale rules (the last valid version is served):",
        "  drift-sentinel/platform (pod agent-a): its last valid version (resourceVersion 7) is served since 2026-07-28T12:01:00Z, not the current 9: data.spec line 4 column 1: field mutabel: unknown field `mutabel`",
        "  - stale rule drift-sentinel/platform (pod agent-a): its last valid version",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in\n{text}");
    }
    let output = cluster.plugin(&["status", "-o", "json"]);
    let document: Value = serde_json::from_slice(&output.stdout).unwrap();
    let admin = &document["pods"][0]["admin"];
    assert_eq!(admin["rules"][1]["tier"], "namespace", "{document:#}");
    assert_eq!(admin["staleRules"][0]["servedResourceVersion"], "7");
    assert_eq!(admin["clusterRuleNamespaces"], json!(["drift-sentinel"]));
}
