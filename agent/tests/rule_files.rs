//! Rule files rewritten in place under a running agent (reference §6 Sources): a writer truncating
//! the file and writing it again in pieces, as fast as it can, while violating requests flow —
//! not one of them allowed; the file shown stale (`/status`, gauge) while it keeps changing,
//! empty or broken; a removed file removing its rules.

mod support;

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Agent, plain_client, post, rule_config_map};

/// Denies any change of `spec.replicas`; enough text that a partial write can cut it
/// anywhere, including inside `mutable` (where a cut pattern such as `spec` would allow it).
const RULE: &str = "mode: enforce\npriority: 10\nnamespaces: ['*']\nselectors:\n  - apiGroup: apps\n    kind: Deployment\n  - apiGroup: apps\n    kind: StatefulSet\nexemptUsers:\n  - system:serviceaccount:kube-system:deployment-controller\nmutable:\n  - spec.template.spec.containers[*].image\n  - spec.template.metadata.annotations\n  - metadata.annotations\n";

fn review(uid: &str) -> Value {
    let deployment = |replicas: i64| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "prod"},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "app", "image": "nginx"}]}}}})
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "namespace": "prod", "name": "web", "operation": "UPDATE", "userInfo": {"username": "alice"},
        "object": deployment(5), "oldObject": deployment(2)}})
}

/// Rewrites `path` in place: truncate, then the text in pieces.
fn rewrite_in_pieces(path: &Path, text: &str, piece: usize) {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .expect("open the rule file");
    for chunk in text.as_bytes().chunks(piece) {
        file.write_all(chunk).expect("write a piece");
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn metrics(agent: &Agent) -> String {
    plain_client()
        .get(format!("{}/metrics", agent.base))
        .send()
        .and_then(|r| r.text())
        .expect("/metrics")
}

fn stale_sources(status: &Value) -> Vec<Value> {
    status["staleSources"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn a_rule_file_rewritten_in_place_never_opens_a_hole() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    let file = rules.join("replicas.yaml");
    let text = rule_config_map("ops", "replicas", RULE);
    std::fs::write(&file, &text).unwrap();
    let agent = Agent::start(&["--rules", rules.to_str().unwrap()], false);
    let client = plain_client();
    let url = format!("{}/validate", agent.base);
    assert_eq!(
        post(&client, &url, &review("first")).1["response"]["allowed"],
        false
    );

    // A writer rewriting the file in place as fast as it can.
    let stop = Arc::new(AtomicBool::new(false));
    let rewrites = Arc::new(AtomicU64::new(0));
    let writer = {
        let (stop, rewrites, file, text) =
            (stop.clone(), rewrites.clone(), file.clone(), text.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                rewrite_in_pieces(&file, &text, 24);
                rewrites.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let started = Instant::now();
    let (mut sent, mut allowed) = (0u64, 0u64);
    let mut stale_seen = None;
    while started.elapsed() < Duration::from_secs(5) {
        let response = post(&client, &url, &review(&format!("r-{sent}"))).1;
        sent += 1;
        if response["response"]["allowed"] != false {
            allowed += 1;
        }
        // Still changing after the settle limit (1 s here): stale, shown with since when.
        if stale_seen.is_none() && started.elapsed() > Duration::from_secs(2) {
            let status = agent.status();
            stale_seen = stale_sources(&status).first().cloned();
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    eprintln!(
        "{sent} violating requests during {} in-place rewrites: {allowed} allowed",
        rewrites.load(Ordering::Relaxed)
    );
    assert_eq!(
        allowed, 0,
        "requests allowed while the rule file was rewritten"
    );
    let stale = stale_seen.expect("the file was not shown stale while it kept changing");
    assert!(
        stale["source"].as_str().unwrap().ends_with("replicas.yaml"),
        "{stale}"
    );
    assert!(
        stale["reason"]
            .as_str()
            .unwrap()
            .contains("being rewritten"),
        "{stale}"
    );
    assert!(
        stale["since"].as_str().is_some_and(|s| s.ends_with('Z')),
        "{stale}"
    );

    // The writer done (the file complete): no longer stale.
    agent.wait_for_status("the settled file", |s| stale_sources(s).is_empty());
    assert!(metrics(&agent).contains("drift_sentinel_rule_sources_stale 0"));

    // Truncated and left broken: stale with the parse error, a WARN naming the file, still
    // denied; the gauge says so.
    let broken = text.replace("kind: ConfigMap", "kind: [ConfigMap");
    rewrite_in_pieces(&file, &broken[..broken.len() - 30], 4096);
    // While the pieces are written the file is "being rewritten"; once it has stayed
    // unchanged for a second, it is judged for what it holds.
    let status = agent.wait_for_status("the broken file", |s| {
        stale_sources(s).first().is_some_and(|stale| {
            stale["reason"]
                .as_str()
                .is_some_and(|r| !r.starts_with("being rewritten"))
        })
    });
    let stale = &stale_sources(&status)[0];
    assert!(
        stale["reason"].as_str().unwrap().contains("not valid YAML"),
        "{stale}"
    );
    assert_eq!(status["rulesLoaded"], 1);
    assert!(metrics(&agent).contains("drift_sentinel_rule_sources_stale 1"));
    assert!(
        agent.logs().iter().any(|l| l.contains("\"level\":\"WARN\"")
            && l.contains("replicas.yaml")
            && l.contains("not valid YAML")),
        "no WARN naming the file and the error:\n{}",
        agent.logs().join("\n")
    );
    assert_eq!(
        post(&client, &url, &review("broken")).1["response"]["allowed"],
        false
    );

    // A rule that no longer compiles (a typo'd key): the last rules are kept too.
    std::fs::write(&file, text.replace("mutable:", "mutabel:")).unwrap();
    agent.wait_for_status("the typo", |s| {
        stale_sources(s)
            .first()
            .is_some_and(|f| f["reason"].as_str().unwrap_or("").contains("mutabel"))
    });
    assert_eq!(
        post(&client, &url, &review("typo")).1["response"]["allowed"],
        false
    );

    // Emptied: still the last rules.
    std::fs::write(&file, "").unwrap();
    agent.wait_for_status("the empty file", |s| {
        stale_sources(s)
            .first()
            .is_some_and(|f| f["reason"].as_str().unwrap_or("").contains("empty"))
    });
    assert_eq!(
        post(&client, &url, &review("empty")).1["response"]["allowed"],
        false
    );

    // Removed: its rules go.
    std::fs::remove_file(&file).unwrap();
    agent.wait_for_status("the removed file", |s| {
        s["rulesLoaded"] == 0 && stale_sources(s).is_empty()
    });
    let response = post(&client, &url, &review("removed")).1;
    assert_eq!(response["response"]["allowed"], true);
    assert!(metrics(&agent).contains("drift_sentinel_rule_sources_stale 0"));
}
