//! The cluster commands through the real binary against the API server double over real HTTP:
//! `explain KIND/NAME` (kinds resolved through discovery, the cluster's rule ConfigMaps, the
//! context's namespace), its errors, and the rules judged in the agent's tiers (as
//! `--cluster-rule-namespaces` or an agent pod's `/status` says, else the agent's default).

mod support;

use std::process::{Command, Output};

use serde_json::{Value, json};
use support::cluster::{
    AGENT_NAMESPACE, Cluster, assert_contains, edited, json_of, rule, screen, workload,
};

#[test]
fn explain_resolves_kinds_like_kubectl_and_reads_the_cluster_rules() {
    let cluster = Cluster::start("default");

    let output = cluster.plugin(&["explain", "deploy/web", "-n", "prod"]);
    assert_eq!(output.status.code(), Some(0), "{}", screen(&output));
    assert_contains(
        &output,
        &[
            "Object:  Deployment prod/web",
            "RULES IN PRIORITY ORDER",
            "WINS     ops/images",
            "matches  ops/catch-all",
            "(a higher-priority rule wins)",
            "no       ops/rollouts",
            "apps/Deployment matches none of the selectors",
            "Winner:  ops/images",
            "Mode:    enforce (from the rule)",
            "Exclude: metadata.labels",
            "Mutable: spec.template.spec.containers[*].image",
            "Bypass:  annotation drift-sentinel.k8s.io/bypass not set",
            "Invalid rules (not applied):",
            "rule ConfigMap ops/broken",
            "mutabel",
        ],
    );
    assert!(
        !screen(&output).contains("ops/plain"),
        "{}",
        screen(&output)
    );

    // The same object by every name kubectl accepts.
    for kind in [
        "deployment",
        "deployments",
        "Deployment",
        "deployment.apps",
        "deployments.apps",
        "deployments.v1.apps",
        "DEPLOY",
    ] {
        let output = cluster.plugin(&[
            "explain",
            &format!("{kind}/web"),
            "-n",
            "prod",
            "-o",
            "json",
        ]);
        assert_eq!(output.status.code(), Some(0), "{kind}: {}", screen(&output));
        let document = json_of(&output);
        assert_eq!(document["object"]["kind"], "Deployment", "{kind}");
        assert_eq!(document["winner"], "ops/images", "{kind}");
    }

    // A StatefulSet and an Argo Rollout, by their short names.
    let output = cluster.plugin(&["explain", "sts/db", "-n", "prod"]);
    assert_eq!(output.status.code(), Some(0), "{}", screen(&output));
    assert_contains(
        &output,
        &["Object:  StatefulSet prod/db", "Winner:  ops/images"],
    );
    for kind in ["ro", "rollout", "rollouts.argoproj.io"] {
        let output = cluster.plugin(&["explain", &format!("{kind}/canary"), "-n", "prod"]);
        assert_eq!(output.status.code(), Some(0), "{kind}: {}", screen(&output));
        assert_contains(
            &output,
            &["Object:  Rollout prod/canary", "Winner:  ops/rollouts"],
        );
    }

    // The mode from the live Namespace's annotation; JSON for scripts.
    let output = cluster.plugin(&["explain", "deploy/web", "-n", "staging", "-o", "json"]);
    assert_eq!(output.status.code(), Some(0), "{}", screen(&output));
    let document = json_of(&output);
    assert_eq!(document["winner"], "ops/images");
    assert_eq!(document["mode"], "warn");
    assert_eq!(
        document["modeSource"], "namespace-annotation",
        "{document:#}"
    );
    assert_eq!(document["namespaceModeAnnotation"], "warn");
    assert_eq!(
        document["mutable"],
        json!([
            "spec.template.spec.containers[*].image",
            "metadata.annotations['kubectl.kubernetes.io/last-applied-configuration']"
        ])
    );
    let invalid = document["invalidRules"].as_array().unwrap();
    assert_eq!(invalid.len(), 1, "{document:#}");
    assert!(invalid[0].as_str().unwrap().contains("ops/broken"));
    assert_eq!(document["rules"].as_array().unwrap().len(), 3);

    // -f FILE: an object not (yet) in the cluster, judged by the cluster's rules; --user.
    let mut file = workload("StatefulSet", "staging", "new-db", 1, "postgres:16");
    file["metadata"]["annotations"] = json!({"drift-sentinel.k8s.io/bypass": "yes"});
    let file = cluster.file("new-db.yaml", &file);
    let output = cluster.plugin(&["explain", "-f", &file, "--user", "alice"]);
    assert_eq!(output.status.code(), Some(0), "{}", screen(&output));
    assert_contains(
        &output,
        &[
            "Object:  StatefulSet staging/new-db",
            "Winner:  ops/images",
            "Mode:    warn (from namespace annotation drift-sentinel.k8s.io/mode)",
            "Bypass:  annotation drift-sentinel.k8s.io/bypass set to \"yes\" but no bypass: \"yes\" is neither \"true\" nor an RFC 3339 time such as 2026-12-10T18:00:00Z",
        ],
    );
}

#[test]
fn the_namespace_defaults_to_the_context_s() {
    let cluster = Cluster::start("staging");
    let output = cluster.plugin(&["explain", "deploy/web"]);
    assert_eq!(output.status.code(), Some(0), "{}", screen(&output));
    assert_contains(
        &output,
        &[
            "Object:  Deployment staging/web",
            "Mode:    warn (from namespace annotation drift-sentinel.k8s.io/mode)",
        ],
    );
    // -n wins over the context; --context chooses another context.
    let output = cluster.plugin(&["explain", "deploy/web", "-n", "prod"]);
    assert_contains(&output, &["Object:  Deployment prod/web"]);
    let cluster = Cluster::start("prod");
    let output = cluster.plugin(&["explain", "deploy/web", "--context", "other"]);
    assert_eq!(output.status.code(), Some(0), "{}", screen(&output));
    assert_contains(&output, &["Object:  Deployment staging/web"]);
}

#[test]
fn unknown_kinds_missing_objects_and_bad_input_exit_2_with_one_line() {
    let cluster = Cluster::start("prod");
    let one_line_error = |output: &Output, expected: &str| {
        assert_eq!(output.status.code(), Some(2), "{}", screen(output));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with("error: "), "{stderr}");
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in {stderr}"
        );
    };

    let output = cluster.plugin(&["explain", "foo/web"]);
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "error: the server doesn't have a resource type \"foo\"\n"
    );
    assert_eq!(output.status.code(), Some(2));
    // A resource known only in another group is not found in this one.
    one_line_error(
        &cluster.plugin(&["explain", "deploy.argoproj.io/web"]),
        "the server doesn't have a resource type \"deploy.argoproj.io\"",
    );
    one_line_error(
        &cluster.plugin(&["explain", "deploy/nope"]),
        "deployments.apps \"nope\" not found in namespace \"prod\"",
    );
    one_line_error(
        &cluster.plugin(&["explain", "web"]),
        "expected KIND/NAME (e.g. deploy/web), got \"web\"",
    );
    let missing = cluster.file("missing.yaml", &{
        let mut object = edited("Deployment", "prod", 2, "nginx:1");
        object["metadata"]["name"] = json!("nope");
        object
    });
    one_line_error(
        &cluster.plugin(&["preview", "-f", &missing]),
        "deployments.apps \"nope\" not found in namespace \"prod\"",
    );
    let unknown = cluster.file(
        "unknown.yaml",
        &json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}),
    );
    one_line_error(
        &cluster.plugin(&["preview", "-f", &unknown]),
        "no matches for kind \"Widget\" in version \"example.com/v1\"",
    );
    let web = cluster.file("web.yaml", &edited("Deployment", "prod", 2, "nginx:1"));
    one_line_error(
        &cluster.plugin(&["preview", "-f", &web, "-n", "staging"]),
        "the namespace from the provided object \"prod\" does not match the namespace \"staging\"",
    );
    one_line_error(&cluster.plugin(&["preview"]), "preview needs -f FILE");
    // The cluster unreachable: the error names it.
    let dead = cluster.path().join("dead-kubeconfig");
    std::fs::write(
        &dead,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: x\n  cluster:\n    server: http://127.0.0.1:1\ncontexts:\n- name: x\n  context:\n    cluster: x\n    user: u\ncurrent-context: x\nusers:\n- name: u\n  user:\n    token: t\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_kubectl-drift"))
        .args([
            "explain",
            "deploy/web",
            "--kubeconfig",
            dead.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    one_line_error(&output, "127.0.0.1:1");
    one_line_error(
        &cluster.plugin(&["explain", "deploy/web", "--context", "nope"]),
        "context \"nope\"",
    );
}

/// The line of explain's rule list starting with `start` (after its indent) holds every one of
/// `cells`.
fn assert_row(output: &Output, start: &str, cells: &[&str]) {
    let screen = screen(output);
    let line = screen
        .lines()
        .find(|l| l.trim_start().starts_with(start))
        .unwrap_or_else(|| panic!("no row {start:?} in\n{screen}"));
    for cell in cells {
        assert!(
            line.contains(cell),
            "missing {cell:?} in {line:?}\n{screen}"
        );
    }
}

/// An agent pod in the agent namespace whose admin port answers `/status` with `status`.
fn agent_pod(cluster: &Cluster, status: &Value) {
    let body = status.to_string();
    let answer = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let admin = support::serve_raw(answer, usize::MAX);
    cluster.api().apply(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "agent-a", "namespace": AGENT_NAMESPACE,
            "labels": {"app.kubernetes.io/name": "drift-sentinel",
                "app.kubernetes.io/component": "webhook"}},
        "spec": {"containers": [{"name": "drift-sentinel", "image": "drift-sentinel:test"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    }));
    cluster
        .api()
        .set_pod_port_target(AGENT_NAMESPACE, "agent-a", 9090, admin);
}

fn agent_status(cluster_rule_namespaces: Option<&[&str]>) -> Value {
    let mut status = json!({
        "ready": true, "source": {"kind": "cluster"}, "loadedAt": "2026-07-28T12:00:00Z",
        "rulesLoaded": 0, "rulesInvalid": 0, "namespacesKnown": 0, "export": {"enabled": false}
    });
    if let Some(globs) = cluster_rule_namespaces {
        status["clusterRuleNamespaces"] = json!(globs);
    }
    status
}

/// reference §2 "Who may write a rule": the rules are built with the agent's tiers. A tenant's rule
/// in `prod` (priority 1000, every namespace, nothing mutable) is a namespace rule: it never
/// beats the platform's cluster rule, and the verdict (and the server's dry run) agree with the
/// agent's. The tiers come from `--cluster-rule-namespaces`, else an agent pod's `/status`,
/// else the agent's default (its own namespace, with a warning).
#[test]
fn rules_are_judged_in_the_agents_tiers() {
    let cluster = Cluster::start("prod");
    cluster.api().apply(rule(
        "prod",
        "tenant",
        "mode: enforce\npriority: 1000\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\n",
    ));
    let image = cluster.file("image.yaml", &edited("Deployment", "prod", 2, "nginx:2"));

    // No agent pod: the agent's default, said on stderr.
    let output = cluster.plugin(&["explain", "deploy/web"]);
    assert_eq!(output.status.code(), Some(0), "{}", screen(&output));
    assert_contains(&output, &["Winner:  ops/images (cluster rule)"]);
    assert_row(&output, "WINS     ops/images", &["cluster rule"]);
    assert_row(
        &output,
        "no       prod/tenant",
        &[
            "namespace rule",
            "a namespace rule, and a cluster rule matches",
        ],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no running agent pod in namespace ops")
            && stderr.contains(
                "rule ConfigMaps in its namespace \"ops\" (--agent-namespace) are cluster rules"
            ),
        "{stderr}"
    );
    let document = json_of(&cluster.plugin(&["explain", "deploy/web", "-o", "json"]));
    let tiers: Vec<(String, String)> = document["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["rule"].as_str().unwrap().to_owned(),
                r["tier"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        tiers.contains(&("prod/tenant".into(), "namespace".into()))
            && tiers.contains(&("ops/images".into(), "cluster".into())),
        "{tiers:?}"
    );
    // The image edit: the platform allows it, the tenant's rule cannot deny it; the server's
    // dry run (an agent that allows it) agrees.
    let output = cluster.plugin(&["preview", "-f", &image, "--server-dry-run"]);
    assert_eq!(output.status.code(), Some(0), "{}", screen(&output));
    assert_contains(
        &output,
        &["Rule:    ops/images (cluster rule", "They agree."],
    );

    // An agent pod that lists prod among its cluster rule namespaces: the tenant's rule is a
    // cluster rule there, and wins; nothing is assumed.
    agent_pod(&cluster, &agent_status(Some(&["ops", "prod"])));
    let output = cluster.plugin(&["explain", "deploy/web"]);
    assert_eq!(output.status.code(), Some(0), "{}", screen(&output));
    assert_contains(&output, &["Winner:  prod/tenant (cluster rule)"]);
    assert_row(&output, "WINS     prod/tenant", &["cluster rule"]);
    assert!(output.stderr.is_empty(), "{}", screen(&output));
    assert!(
        cluster
            .api()
            .requests()
            .iter()
            .any(|r| r.contains("/namespaces/ops/pods/agent-a/portforward?")),
        "the agent's /status was read through a port-forward"
    );
    let output = cluster.plugin(&["preview", "-f", &image]);
    assert_eq!(output.status.code(), Some(1), "{}", screen(&output));
    assert_contains(&output, &["Rule:    prod/tenant (cluster rule"]);

    // The flag wins over the agent's answer.
    let output = cluster.plugin(&["explain", "deploy/web", "--cluster-rule-namespaces", "ops"]);
    assert_contains(&output, &["Winner:  ops/images (cluster rule)"]);
    let output = cluster.plugin(&["explain", "deploy/web", "--cluster-rule-namespaces", "*"]);
    assert_contains(&output, &["Winner:  prod/tenant (cluster rule)"]);
}

/// An agent that does not report its cluster rule namespaces (older than the field): the
/// default is assumed, and the warning says why.
#[test]
fn an_agent_without_cluster_rule_namespaces_gets_the_default() {
    let cluster = Cluster::start("prod");
    cluster.api().apply(rule(
        "prod",
        "tenant",
        "mode: enforce\npriority: 1000\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\n",
    ));
    agent_pod(&cluster, &agent_status(None));
    let output = cluster.plugin(&["explain", "deploy/web"]);
    assert_eq!(output.status.code(), Some(0), "{}", screen(&output));
    assert_contains(
        &output,
        &[
            "Winner:  ops/images (cluster rule)",
            "pod agent-a: its /status does not report the cluster rule namespaces",
        ],
    );
}

/// The plugin without `--agent-namespace`, as a person runs it.
fn explain_unaided(cluster: &Cluster) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-drift"))
        .args(["explain", "deploy/web", "--kubeconfig"])
        .arg(cluster.kubeconfig())
        .env("NO_COLOR", "1")
        .env("KUBECONFIG", cluster.path().join("no-such-kubeconfig"))
        .output()
        .expect("run kubectl-drift")
}

fn webhook_configuration(client_config: Value, annotations: Value) -> Value {
    serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "drift-sentinel", "annotations": annotations},
        "webhooks": [{"name": "validate.drift-sentinel.k8s.io", "clientConfig": client_config,
            "admissionReviewVersions": ["v1"], "sideEffects": "None"}]
    })
}

#[test]
fn the_agent_is_found_where_the_webhook_points_or_the_plugin_says_it_cannot_tell() {
    let cluster = Cluster::start("prod");
    // A team's rule in prod: a namespace rule unless prod is the agent's namespace.
    cluster.api().apply(rule(
        "prod",
        "tenant",
        "mode: enforce\npriority: 1000\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\n",
    ));

    // No webhook configuration: it says so in one line and exits 2, rather than guess.
    let output = explain_unaided(&cluster);
    assert_eq!(output.status.code(), Some(2), "{}", screen(&output));
    let error = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(
        error.trim_end(),
        "error: cannot tell the agent's namespace: no ValidatingWebhookConfiguration has the webhook validate.drift-sentinel.k8s.io (is Drift Sentinel installed?); give --agent-namespace"
    );

    // The webhook's Service in ops: ops is the agent's namespace, its rules cluster rules.
    cluster.api().apply(webhook_configuration(
        serde_json::json!({"service": {"name": "drift-sentinel", "namespace": "ops"}}),
        serde_json::json!({}),
    ));
    let output = explain_unaided(&cluster);
    assert_eq!(output.status.code(), Some(0), "{}", screen(&output));
    assert_contains(&output, &["Winner:  ops/images (cluster rule)"]);

    // Called by URL, installed by Helm in prod: prod's rules are the cluster rules now.
    cluster.api().apply(webhook_configuration(
        serde_json::json!({"url": "https://10.0.0.9:8443/validate"}),
        serde_json::json!({"meta.helm.sh/release-namespace": "prod"}),
    ));
    let output = explain_unaided(&cluster);
    assert_eq!(output.status.code(), Some(0), "{}", screen(&output));
    assert_contains(&output, &["Winner:  prod/tenant (cluster rule)"]);

    // By URL without a release: it cannot tell.
    cluster.api().apply(webhook_configuration(
        serde_json::json!({"url": "https://10.0.0.9:8443/validate"}),
        serde_json::json!({}),
    ));
    let output = explain_unaided(&cluster);
    assert_eq!(output.status.code(), Some(2), "{}", screen(&output));
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("calls validate.drift-sentinel.k8s.io by URL and names no Helm release"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
