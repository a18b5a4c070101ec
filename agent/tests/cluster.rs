//! Cluster mode against the API server double over real HTTP: the real kube-rs client and
//! watches, rule ConfigMaps created, changed, broken and deleted while requests flow, Namespace
//! mode annotations, and faults (410 Gone, dropped watches, failing requests). What a real API
//! server covers better (server-side apply of the Connection status by two agents, restarts,
//! compaction) is in the end-to-end suite (tests/e2e); what stays here needs the double: its
//! request log, watches closed and faults injected on demand.

mod support;

use std::time::{Duration, Instant};

use drift_testkit::{ApiServer, Fault};
use serde_json::{Value, json};
use support::{Agent, IMAGE_RULE as RULE, plain_client, post};

fn config_map(namespace: &str, name: &str, rule: Option<&str>) -> Value {
    let mut object = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"spec": rule.unwrap_or("not a rule"), "other": "x".repeat(2048)}
    });
    if rule.is_some() {
        object["metadata"]["annotations"] = json!({"drift-sentinel.k8s.io/rule": "true"});
    }
    object
}

fn namespace(name: &str, mode: Option<&str>) -> Value {
    let mut object = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    if let Some(mode) = mode {
        object["metadata"]["annotations"] = json!({"drift-sentinel.k8s.io/mode": mode});
    }
    object
}

struct Cluster {
    runtime: tokio::runtime::Runtime,
    server: Option<ApiServer>,
    dir: tempfile::TempDir,
}

impl Cluster {
    fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let server = runtime.block_on(ApiServer::start()).unwrap();
        Self {
            runtime,
            server: Some(server),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// A cluster with Namespace `prod` and the rule ConfigMap `ops/rule` ([`RULE`]).
    fn with_rule() -> Self {
        let cluster = Self::start();
        cluster.api().apply(namespace("prod", None));
        cluster.api().apply(config_map("ops", "rule", Some(RULE)));
        cluster
    }

    fn api(&self) -> &ApiServer {
        self.server.as_ref().unwrap()
    }

    /// [`Cluster::agent`], once it is ready.
    fn ready_agent(&self) -> Agent {
        let agent = self.agent();
        agent.wait_until("ready", || ready(&agent).0 == 200);
        agent
    }

    fn agent(&self) -> Agent {
        let kubeconfig = self.api().write_kubeconfig(self.dir.path()).unwrap();
        Agent::start(
            &[
                "--kubeconfig",
                kubeconfig.to_str().unwrap(),
                "--startup-sync-timeout",
                "2s",
                "--watch-resync",
                "1s",
                // These tests put rules in several namespaces and are not about tiers (the
                // real-server suite and the engine's tests are).
                "--cluster-rule-namespaces",
                "*",
            ],
            false,
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _guard = self.runtime.enter();
        self.server.take();
    }
}

fn ready(agent: &Agent) -> (u16, String) {
    let response = plain_client()
        .get(format!("{}/readyz", agent.base))
        .send()
        .unwrap();
    (response.status().as_u16(), response.text().unwrap())
}

fn decision(agent: &Agent, namespace: &str) -> Value {
    post(
        &plain_client(),
        &format!("{}/validate", agent.base),
        &support::replicas_review(namespace),
    )
    .1["response"]
        .clone()
}

#[test]
fn rules_and_namespaces_follow_the_cluster() {
    let cluster = Cluster::start();
    let api = cluster.api();
    api.apply(namespace("prod", None));
    api.apply(namespace("relaxed", Some("warn")));
    api.apply(config_map("ops", "rule", Some(RULE)));
    for i in 0..200 {
        api.apply(config_map("apps", &format!("plain-{i}"), None));
    }
    let agent = cluster.ready_agent();
    let status = agent.status();
    assert_eq!(status["rulesLoaded"], 1, "{status:#}");
    assert_eq!(status["source"]["kind"], "cluster");

    // Only rule ConfigMaps are fetched whole; the others are seen as metadata only.
    let requests = api.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("GET /api/v1/namespaces/ops/configmaps/rule")),
        "{requests:?}"
    );
    assert!(
        !requests.iter().any(|r| r.contains("/configmaps/plain-")),
        "a plain ConfigMap was fetched"
    );

    assert_eq!(decision(&agent, "prod")["allowed"], false);
    assert_eq!(
        decision(&agent, "relaxed")["auditAnnotations"]["result"],
        "warned"
    );

    // A change of the rule applies.
    set_rule_mode(api, "dry-run");
    agent.wait_until("the rule change", || {
        decision(&agent, "prod")["auditAnnotations"]["result"] == "would-deny"
    });

    // A namespace annotation change applies.
    api.apply(namespace("prod", Some("off")));
    agent.wait_until("the namespace change", || {
        decision(&agent, "prod")["auditAnnotations"]["mode"] == "off"
    });

    // A broken rule is reported (status, metrics, one Warning Event) and the other rule stays.
    api.apply(config_map(
        "ops",
        "typo",
        Some("mode: enforce\nnamespaces: ['*']\nselectors: [{kind: Deployment}]\nmutabel: [x]\n"),
    ));
    agent.wait_for_status("the invalid rule", |s| s["rulesInvalid"] == 1);
    assert_eq!(agent.status()["rulesLoaded"], 1);
    assert_eq!(
        decision(&agent, "relaxed")["auditAnnotations"]["rule"],
        "ops/rule"
    );
    let invalid_events = || {
        api.list("events.k8s.io/v1", "Event")
            .into_iter()
            .filter(|e| e["reason"] == "InvalidRule" && e["regarding"]["name"] == "typo")
            .collect::<Vec<Value>>()
    };
    agent.wait_until("the InvalidRule event", || invalid_events().len() == 1);
    let event = &invalid_events()[0];
    assert_eq!(event["type"], "Warning");
    assert!(
        event["note"].as_str().unwrap().contains("mutabel"),
        "{event}"
    );
    // Unrelated changes (and relists) do not repeat the Event for the same version.
    api.apply(config_map("apps", "plain-0", None));
    api.close_watches();
    std::thread::sleep(Duration::from_secs(2));
    let event = &invalid_events()[0];
    assert!(
        event.get("series").is_none_or(Value::is_null),
        "event repeated: {event}"
    );

    // Deleting the rule leaves no matching rule; the annotation removed likewise.
    api.delete("v1", "ConfigMap", "ops", "rule");
    agent.wait_until("the deletion", || {
        decision(&agent, "relaxed")
            .get("auditAnnotations")
            .is_none()
    });
    let metrics = agent.metrics();
    assert!(
        metrics.contains("drift_sentinel_rules_loaded_total 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("drift_sentinel_config_events_total{event_type=\"deleted\"}"),
        "{metrics}"
    );
}

#[test]
fn watch_faults_are_survived_with_the_rule_set_intact() {
    let cluster = Cluster::with_rule();
    let api = cluster.api();
    let agent = cluster.ready_agent();
    assert_eq!(decision(&agent, "prod")["allowed"], false);

    // Watches dropped and the history compacted: the next watch gets 410 Gone and the agent
    // relists. Requests keep seeing the rule throughout.
    let lists_before = count_lists(api);
    api.compact();
    api.inject(Fault::GoneOnNextWatch);
    api.close_watches();
    for _ in 0..20 {
        assert_eq!(decision(&agent, "prod")["allowed"], false);
        std::thread::sleep(Duration::from_millis(50));
    }
    set_rule_mode(api, "warn");
    agent.wait_until("the change after the relist", || {
        decision(&agent, "prod")["auditAnnotations"]["result"] == "warned"
    });
    assert!(count_lists(api) > lists_before, "no relist after 410 Gone");

    // A burst of server errors: backoff, then recovery; the rule set never disappears.
    api.inject(Fault::Fail {
        count: 6,
        status: 500,
    });
    api.close_watches();
    for _ in 0..10 {
        assert_eq!(
            decision(&agent, "prod")["auditAnnotations"]["rule"],
            "ops/rule"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    api.apply(config_map("ops", "rule", Some(RULE)));
    agent.wait_until("recovery after errors", || {
        decision(&agent, "prod")["allowed"] == false
    });
    assert!(
        agent.logs().iter().any(|l| l.contains("watch failed")),
        "no watch error logged"
    );
    let metrics = agent.metrics();
    assert!(
        metrics.contains("drift_sentinel_watch_failures_total{resource=\"configmaps\"}"),
        "{metrics}"
    );
    assert_eq!(ready(&agent).0, 200);
}

/// Applies `ops/rule` ([`RULE`]) in `mode`.
fn set_rule_mode(api: &ApiServer, mode: &str) {
    api.apply(config_map(
        "ops",
        "rule",
        Some(&RULE.replace("enforce", mode)),
    ));
}

/// List requests (GETs without `watch=true`) of rule ConfigMaps served so far.
fn count_lists(api: &ApiServer) -> usize {
    api.requests()
        .iter()
        .filter(|r| r.starts_with("GET /api/v1/configmaps") && !r.contains("watch=true"))
        .count()
}

#[test]
fn not_ready_until_the_first_sync() {
    let cluster = Cluster::start();
    let api = cluster.api();
    api.apply(config_map("ops", "rule", Some(RULE)));
    api.inject(Fault::Fail {
        count: 100_000,
        status: 503,
    });
    let agent = cluster.agent();
    let (code, text) = ready(&agent);
    assert_eq!(code, 503);
    assert!(text.contains("first sync"), "{text}");
    // After the startup sync timeout the reason says so.
    agent.wait_until("the startup timeout", || {
        ready(&agent).1.contains("not complete after")
    });
    assert_eq!(decision(&agent, "prod").get("auditAnnotations"), None);
    api.heal();
    agent.wait_until("ready after healing", || ready(&agent).0 == 200);
    assert_eq!(decision(&agent, "prod")["allowed"], false);
}

#[test]
fn an_unreadable_rule_config_map_is_reported_then_fetched_again() {
    let cluster = Cluster::with_rule();
    let api = cluster.api();
    api.inject(Fault::FailPath {
        contains: "/namespaces/ops/configmaps/rule".into(),
        status: 500,
    });
    let agent = cluster.ready_agent();
    let status = agent.wait_for_status("the unreadable rule", |s| s["rulesInvalid"] == 1);
    assert_eq!(status["invalidRules"][0]["rule"], "ops/rule");
    assert!(
        status["invalidRules"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("cannot read the ConfigMap"),
        "{status:#}"
    );
    assert_eq!(decision(&agent, "prod").get("auditAnnotations"), None);
    api.heal();
    agent.wait_for_status("the rule fetched on resync", |s| {
        s["rulesLoaded"] == 1 && s["rulesInvalid"] == 0
    });
    assert_eq!(decision(&agent, "prod")["allowed"], false);

    // A new version that cannot be read keeps the last good one in force until it can.
    api.inject(Fault::FailPath {
        contains: "/namespaces/ops/configmaps/rule".into(),
        status: 500,
    });
    set_rule_mode(api, "warn");
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        decision(&agent, "prod")["auditAnnotations"]["result"],
        "denied"
    );
    assert_eq!(agent.status()["rulesInvalid"], 0);
    api.heal();
    agent.wait_until("the new version after healing", || {
        decision(&agent, "prod")["auditAnnotations"]["result"] == "warned"
    });
}

/// A GET of rule data that hangs stalls nothing else: namespace and rule changes keep arriving,
/// the hung fetch gives up after its timeout (the rule reported unreadable), and SIGTERM ends
/// the agent at once.
#[test]
fn a_hung_fetch_stalls_neither_other_changes_nor_shutdown() {
    let cluster = Cluster::start();
    let api = cluster.api();
    api.apply(namespace("prod", None));
    api.apply(namespace("plain", None));
    api.apply(config_map("ops", "rule", Some(RULE)));
    let mut agent = cluster.ready_agent();
    api.inject(Fault::SlowPath {
        contains: "/configmaps/stuck".into(),
        delay: Duration::from_secs(120),
    });
    api.apply(config_map("ops", "stuck", Some(RULE)));
    agent.wait_until("the hung fetch", || {
        api.requests()
            .iter()
            .any(|r| r.contains("/namespaces/ops/configmaps/stuck"))
    });

    let started = Instant::now();
    api.apply(namespace("prod", Some("warn")));
    agent.wait_until("the namespace change", || {
        decision(&agent, "prod")["auditAnnotations"]["result"] == "warned"
    });
    set_rule_mode(api, "dry-run");
    agent.wait_until("the rule change", || {
        decision(&agent, "plain")["auditAnnotations"]["result"] == "would-deny"
    });
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "changes took {took:?} while a fetch hung"
    );

    let status = agent.wait_for_status("the hung fetch to time out", |s| {
        s["invalidRules"]
            .as_array()
            .is_some_and(|rules| rules.iter().any(|r| r["rule"] == "ops/stuck"))
    });
    assert!(
        status.to_string().contains("no answer within 10s"),
        "{status:#}"
    );

    // Another version of it: a fetch hangs again, and shutdown does not wait for it.
    api.apply(config_map(
        "ops",
        "stuck",
        Some(&RULE.replace("enforce", "warn")),
    ));
    std::thread::sleep(Duration::from_millis(300));
    let stopping = Instant::now();
    agent.signal("TERM");
    let exit = agent.wait_exit(Duration::from_secs(5));
    assert!(
        exit.is_some_and(|s| s.success()),
        "no clean exit within 5 s of SIGTERM ({:?})",
        stopping.elapsed()
    );
}

/// A rule made invalid behind the webhook's back keeps being enforced in its last valid version
/// (stale in `/status` and the metric, its InvalidRule Event emitted), also by an agent started
/// afterwards (the last-good ConfigMap); deleting it removes the rule and its kept version.
#[test]
fn an_invalid_version_keeps_the_last_good_one_across_restarts() {
    let cluster = Cluster::with_rule();
    let api = cluster.api();
    let agent = cluster.ready_agent();
    // The agent created its ConfigMap (absent, and it may) and keeps the valid version there.
    let kept = || {
        api.get(
            "v1",
            "ConfigMap",
            "default",
            "drift-sentinel-last-good-rules",
        )
        .and_then(|c| c["data"]["ops_rule"].as_str().map(str::to_owned))
    };
    agent.wait_until("the kept version", || {
        kept().is_some_and(|k| k.contains("mode: enforce"))
    });

    api.apply(config_map(
        "ops",
        "rule",
        Some(&format!("{RULE}mutabel: [x]\n")),
    ));
    let status = agent.wait_for_status("the stale rule", |s| {
        s["staleRules"].as_array().is_some_and(|r| r.len() == 1)
    });
    let stale = &status["staleRules"][0];
    assert_eq!(stale["rule"], "ops/rule");
    // `--cluster-rule-namespaces '*'`, as kubectl drift reads it back.
    assert_eq!(status["clusterRuleNamespaces"], json!(["*"]));
    assert!(
        stale["reason"].as_str().unwrap().contains("mutabel"),
        "{stale}"
    );
    assert_eq!(status["rulesLoaded"], 1);
    assert_eq!(decision(&agent, "prod")["allowed"], false);
    let metrics = agent.metrics();
    assert!(
        metrics.contains("drift_sentinel_rules_stale 1"),
        "{metrics}"
    );
    agent.wait_until("the InvalidRule event", || {
        api.list("events.k8s.io/v1", "Event")
            .iter()
            .any(|e| e["reason"] == "InvalidRule" && e["regarding"]["name"] == "rule")
    });
    assert!(kept().is_some_and(|k| k.contains("mode: enforce") && !k.contains("mutabel")));

    // A new agent (a restart, a new replica) enforces the kept version from its first sync.
    drop(agent);
    let agent = cluster.ready_agent();
    assert_eq!(decision(&agent, "prod")["allowed"], false);
    assert_eq!(agent.status()["staleRules"][0]["rule"], "ops/rule");

    // Deleted: the rule and its kept version go.
    api.delete("v1", "ConfigMap", "ops", "rule");
    agent.wait_until("the deletion", || {
        decision(&agent, "prod").get("auditAnnotations").is_none() && kept().is_none()
    });
}

fn scale_review(name: &str, old: i64, new: i64) -> Value {
    let scale = |replicas: i64| {
        json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": name, "namespace": "prod"}, "spec": {"replicas": replicas}})
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "s", "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "subResource": "scale", "namespace": "prod", "name": name, "operation": "UPDATE",
        "userInfo": {"username": "alice"}, "object": scale(new), "oldObject": scale(old)}})
}

/// In cluster mode a `/scale` request is matched against the labels of the scaled object.
#[test]
fn scale_requests_match_rules_by_the_parent_labels() {
    let cluster = Cluster::start();
    let api = cluster.api();
    api.apply(namespace("prod", None));
    api.apply(config_map(
        "ops",
        "labelled",
        Some(&format!("{RULE}labels: [team=payments]\n")),
    ));
    for (name, team) in [("checkout", "payments"), ("search", "discovery")] {
        api.apply(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "prod", "labels": {"team": team}},
            "spec": {"replicas": 2}}));
    }
    let agent = cluster.ready_agent();
    let url = format!("{}/validate", agent.base);
    let response =
        post(&plain_client(), &url, &scale_review("checkout", 2, 5)).1["response"].clone();
    assert_eq!(response["allowed"], false, "{response:#}");
    assert_eq!(
        response["auditAnnotations"]["denied-paths"],
        "spec.replicas"
    );
    let response = post(&plain_client(), &url, &scale_review("search", 2, 5)).1["response"].clone();
    assert_eq!(response["allowed"], true);
    assert!(response.get("auditAnnotations").is_none(), "{response:#}");
    // A scaled object that cannot be read: its labels are unknown, the rule does not match.
    let response = post(&plain_client(), &url, &scale_review("gone", 2, 5)).1["response"].clone();
    assert_eq!(response["allowed"], true);
}

fn resident_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Memory does not grow with the ConfigMaps that are not rules: the agent's resident memory
/// with 10,000 of them (2 KiB of data each, 20 MiB in all) stays within a few MiB of its
/// memory with none.
#[test]
fn memory_does_not_grow_with_non_rule_config_maps() {
    let measure = |plain: usize| {
        let cluster = Cluster::start();
        let api = cluster.api();
        api.apply(config_map("ops", "rule", Some(RULE)));
        for i in 0..plain {
            api.apply(config_map(
                &format!("ns-{}", i % 50),
                &format!("plain-{i}"),
                None,
            ));
        }
        let agent = cluster.ready_agent();
        // Let the allocator settle after the initial list.
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(decision(&agent, "prod")["allowed"], false);
        resident_kib(agent.pid())
    };
    let baseline = measure(0);
    let loaded = measure(10_000);
    eprintln!("agent RSS: {baseline} KiB with no plain ConfigMaps, {loaded} KiB with 10,000");
    assert!(baseline > 0 && loaded > 0);
    assert!(
        loaded < baseline + 16 * 1024,
        "RSS grew from {baseline} KiB to {loaded} KiB with 10,000 plain ConfigMaps"
    );
}

/// Reference §8 "Trust": the webhook's `/status` says whether its records are signed and where
/// the publication of its public key stands: failing with the API server's error while the
/// ConfigMap is missing (the chart creates it), then published once it exists (retried 5 s
/// later).
#[test]
fn the_record_key_publication_is_in_status_until_it_succeeds() {
    let cluster = Cluster::with_rule();
    let agent = cluster.ready_agent();
    let status = agent.wait_for_status("a failed publication", |s| {
        s["recordSigning"]["publicKey"]["state"] == "failing"
    });
    let signing = &status["recordSigning"];
    // No --record-signing-key: records are unsigned, and the key published is empty.
    assert_eq!(signing["signed"], false, "{status:#}");
    let public_key = &signing["publicKey"];
    assert!(
        public_key["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("not found")),
        "{status:#}"
    );
    assert!(public_key["attempts"].as_u64() >= Some(1), "{status:#}");
    let config_map = public_key["configMap"].as_str().unwrap_or_default();
    let (namespace, name) = config_map.split_once('/').expect("namespace/name");
    cluster.api().apply(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace}, "data": {}
    }));
    let status = agent.wait_for_status("the key published", |s| {
        s["recordSigning"]["publicKey"]["state"] == "published"
    });
    assert_eq!(
        status["recordSigning"]["publicKey"].get("lastError"),
        None,
        "{status:#}"
    );
}
