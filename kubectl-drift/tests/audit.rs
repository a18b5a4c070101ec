//! `kubectl drift audit`, offline, through the real binary — and beside it the agent's own
//! `drift-sentinel audit --once` on the same files: both must name the same drifted objects and
//! paths (they share the engine, `drift_load` and `drift_api`). The files are the agent's fixture, a
//! `kubectl get deploy -A -o yaml --show-managed-fields` dump taken from a real kube-apiserver
//! (`agent/tests/fixtures/audit`, described in `agent/tests/audit.rs`).
//!
//! Also `status` and `tail` with a real periodic audit process: its admin `/status` (the last
//! run) and `/violations?source=audit` (its records), reached through the API server double's
//! pod port-forwarding and directly.
//!
//! Needs the agent binary next to the plugin's (`cargo build -p drift-sentinel`; `cargo test
//! --workspace` builds it).

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use drift_testkit::ApiServer;
use drift_testkit::agent::{Agent, agent_bin};
use drift_testkit::client;
use serde_json::{Value, json};
use support::{NoTui, plugin_bin};

fn fixtures() -> PathBuf {
    drift_testkit::workspace().join("agent/tests/fixtures/audit")
}

fn rules() -> String {
    fixtures().join("rules").display().to_string()
}

fn dump() -> String {
    fixtures().join("deployments.yaml").display().to_string()
}

fn plugin(args: &[&str]) -> Output {
    Command::new(plugin_bin())
        .args(args)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("run kubectl-drift")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `(object, path)` of every drifted path in the text both binaries print.
fn drifted_paths(stdout: &str) -> BTreeSet<(String, String)> {
    let mut found = BTreeSet::new();
    let mut object = String::new();
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("drifted ") {
            object = rest.split(' ').nth(2).unwrap_or_default().to_owned();
        } else if let Some(change) = line.strip_prefix("  ") {
            let path = change.split(": ").next().unwrap_or_default().to_owned();
            found.insert((object.clone(), path));
        }
    }
    found
}

/// The agent's `drift-sentinel audit --once` and the plugin's `kubectl drift audit` on the same
/// objects: both find drift (exit 1), and print the same text line for line (but the summary,
/// where the agent names its run). The plugin's text and the agent's.
fn audit_both(objects: &str) -> (String, String) {
    let agent = Command::new(agent_bin())
        .args(["audit", "--once", "--rules", &rules(), "--objects", objects])
        .output()
        .expect("run drift-sentinel audit");
    assert_eq!(agent.status.code(), Some(1), "{}", text(&agent.stderr));
    let ours = plugin(&["audit", "--rules", &rules(), "-f", objects]);
    let stdout = text(&ours.stdout);
    assert_eq!(
        ours.status.code(),
        Some(1),
        "{stdout}{}",
        text(&ours.stderr)
    );
    let lines = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| !l.contains(" objects"))
            .map(str::to_owned)
            .collect()
    };
    let theirs = text(&agent.stdout);
    assert_eq!(lines(&stdout), lines(&theirs));
    (stdout, theirs)
}

/// `kubectl replace` rewrote three baselines (reference §8 step 3): the plugin names them as the
/// agent does, line for line, and the object applied again is clean.
#[test]
fn a_replaced_baseline_is_drift_in_the_plugin_as_in_the_agent() {
    let replaced = fixtures().join("replaced.yaml").display().to_string();
    let (stdout, _) = audit_both(&replaced);
    let found: Vec<(String, String)> = drifted_paths(&stdout).into_iter().collect();
    let want = |o: &str| ("shop/".to_owned() + o, "spec.replicas".to_owned());
    assert_eq!(
        found,
        [
            want("replaced"),
            want("replaced-bare"),
            want("replaced-saved")
        ],
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "  spec.replicas: <unknown> → 4 (by kubectl-replace at 2026-12-04T10:08:13Z)\n"
        ),
        "{stdout}"
    );
    assert!(
        stdout.ends_with("4 objects: 3 drifted, 1 clean, 0 no_baseline, 0 skipped\n"),
        "{stdout}"
    );
}

#[test]
fn the_plugin_and_the_agent_name_the_same_objects_and_paths() {
    let (stdout, agent) = audit_both(&dump());
    let theirs = drifted_paths(&agent);
    assert_eq!(theirs.len(), 5, "{agent}");
    assert_eq!(drifted_paths(&stdout), theirs, "{stdout}");
    assert!(
        stdout.contains(
            "  spec.template.spec.containers[0].image: \"registry.example/image:1.0\" → \"registry.example/image:2.0\" (by kubectl-set at 2026-12-03T11:31:58Z)"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("  spec.replicas: 2 → 5 (by kubectl)\n"),
        "{stdout}"
    );
    assert!(
        stdout.ends_with("8 objects: 5 drifted, 2 clean, 1 no_baseline, 0 skipped\n"),
        "{stdout}"
    );

    // -o json: the agent's export records, the same objects and paths.
    let json_out = plugin(&["audit", "--rules", &rules(), "-f", &dump(), "-o", "json"]);
    assert_eq!(json_out.status.code(), Some(1));
    let document: Value = serde_json::from_slice(&json_out.stdout).unwrap();
    assert_eq!(
        document["counts"],
        json!({"drifted": 5, "clean": 2, "noBaseline": 1, "skipped": 0,
            "bypassed": {"none": 0, "active": 0, "expired": 0, "notHonoured": 0}})
    );
    assert_eq!(document["namespace"], Value::Null);
    let records = document["drifted"].as_array().unwrap();
    let from_records: BTreeSet<(String, String)> = records
        .iter()
        .flat_map(|r| {
            let object = format!(
                "{}/{}",
                r["resourceNamespace"].as_str().unwrap(),
                r["resourceName"].as_str().unwrap()
            );
            r["details"]["deniedPaths"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |p| (object.clone(), p.as_str().unwrap().to_owned()))
        })
        .collect();
    assert_eq!(from_records, theirs);
    let image = records
        .iter()
        .find(|r| r["resourceName"] == "image")
        .unwrap();
    assert_eq!(image["eventType"], "violation_audited");
    assert_eq!(image["id"], document["id"]);
    assert_eq!(image["resource"], "deployments");
    assert_eq!(image["ruleNamespace"], "drift-system");
    assert_eq!(image["enforcementAction"], "deny");
    let change = &image["details"]["changes"][0];
    assert_eq!(
        (&change["old"], &change["new"], &change["manager"]),
        (
            &json!("registry.example/image:1.0"),
            &json!("registry.example/image:2.0"),
            &json!("kubectl-set")
        )
    );
    assert!(image.get("userName").is_none(), "no request, no user");

    // -o yaml: the same document.
    let yaml_out = plugin(&["audit", "--rules", &rules(), "-f", &dump(), "-o", "yaml"]);
    let from_yaml: Value = serde_yaml::from_slice(&yaml_out.stdout).unwrap();
    assert_eq!(from_yaml["counts"], document["counts"]);
}

/// Every object carrying the bypass annotation is listed (reference §8 step 1, §9): the object,
/// its end or "without an end", and who set it when — in the text, line for line as the agent
/// prints it, and in `-o json` as the agent's `bypass` records; the summary counts them by end.
/// The dump's `image` Deployment (its image changed by `kubectl set image`) under four bypasses.
#[test]
fn bypassed_objects_are_listed_with_their_ends() {
    let dump = std::fs::read_to_string(dump()).unwrap();
    let documents = drift_engine::manifests::parse_documents(&dump, "deployments.yaml").unwrap();
    let image = documents
        .iter()
        .find(|d| d["metadata"]["name"] == "image")
        .expect("the dump's image Deployment");
    let now = std::time::SystemTime::now();
    let hour = Duration::from_secs(3600);
    let time = drift_engine::time::format_rfc3339_seconds;
    let (set_at, ahead, past) = (time(now - hour), time(now + 4 * hour), time(now - hour));
    let with_bypass = drift_testkit::objects::with_bypass;
    let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
        with_bypass(image, "forever", "true", &set_at),
        with_bypass(image, "ahead", &ahead, &set_at),
        with_bypass(image, "expired", &past, &set_at),
        with_bypass(image, "garbled", "next tuesday", &set_at),
    ]});
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("objects.json");
    std::fs::write(&file, objects.to_string()).unwrap();
    let file = file.display().to_string();

    let (stdout, _) = audit_both(&file);
    let rule = "(rule drift-system/workloads)";
    let by = format!("(set by kubectl-annotate at {set_at})");
    for line in [
        format!("bypass apps/v1 Deployment shop/forever {rule}: bypass without an end {by}\n"),
        format!("bypass apps/v1 Deployment shop/ahead {rule}: bypass until {ahead} {by}\n"),
        format!(
            "bypass apps/v1 Deployment shop/expired {rule}: no bypass: its end {past} has passed {by}\n"
        ),
        format!(
            "bypass apps/v1 Deployment shop/garbled {rule}: no bypass: \"next tuesday\" is neither"
        ),
    ] {
        assert!(stdout.contains(&line), "{line}\nnot in:\n{stdout}");
    }
    assert!(
        stdout.ends_with(
            "4 objects: 2 drifted, 0 clean, 0 no_baseline, 2 skipped; bypass annotations: 1 without an end, 1 active, 1 expired, 1 not honoured\n"
        ),
        "{stdout}"
    );

    let json_out = plugin(&["audit", "--rules", &rules(), "-f", &file, "-o", "json"]);
    assert_eq!(json_out.status.code(), Some(1));
    let document: Value = serde_json::from_slice(&json_out.stdout).unwrap();
    let listed: Vec<(&str, &str, Option<&str>, &str)> = document["bypassed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r["eventType"], "bypass");
            assert_eq!(r["bypass"]["since"], set_at.as_str());
            (
                r["resourceName"].as_str().unwrap(),
                r["bypass"]["endState"].as_str().unwrap(),
                r["bypass"]["end"].as_str(),
                r["bypass"]["setBy"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("forever", "none", None, "kubectl-annotate"),
            ("ahead", "active", Some(ahead.as_str()), "kubectl-annotate"),
            (
                "expired",
                "expired",
                Some(past.as_str()),
                "kubectl-annotate"
            ),
            ("garbled", "not-honoured", None, "kubectl-annotate"),
        ]
    );
    assert_eq!(document["drifted"].as_array().unwrap().len(), 2);
}

#[test]
fn no_drift_exits_0_and_namespaces_filter_and_annotate() {
    // -n: only that namespace's objects.
    let other = plugin(&[
        "audit",
        "--rules",
        &rules(),
        "-f",
        &dump(),
        "-n",
        "elsewhere",
    ]);
    let stdout = text(&other.stdout);
    assert_eq!(
        other.status.code(),
        Some(0),
        "{stdout}{}",
        text(&other.stderr)
    );
    assert!(
        stdout.contains("No object is selected by an auditing rule"),
        "{stdout}"
    );
    assert!(
        stdout.ends_with(
            "0 objects in namespace elsewhere: 0 drifted, 0 clean, 0 no_baseline, 0 skipped\n"
        ),
        "{stdout}"
    );
    // The namespace's mode annotation applies: `off` skips every object, nothing drifts.
    let dir = tempfile::tempdir().unwrap();
    let namespaces = dir.path().join("namespaces.yaml");
    std::fs::write(
        &namespaces,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  annotations: {drift-sentinel.k8s.io/mode: \"off\"}\n",
    )
    .unwrap();
    let off = plugin(&[
        "audit",
        "--rules",
        &rules(),
        "--namespace-file",
        namespaces.to_str().unwrap(),
        "-f",
        &dump(),
        "-n",
        "shop",
    ]);
    let stdout = text(&off.stdout);
    assert_eq!(off.status.code(), Some(0), "{stdout}{}", text(&off.stderr));
    assert!(
        stdout.ends_with(
            "8 objects in namespace shop: 0 drifted, 0 clean, 0 no_baseline, 8 skipped\n"
        ),
        "{stdout}"
    );
    // A directory of object files is read as the agent reads one (List documents flattened).
    std::fs::copy(dump(), dir.path().join("live.yaml")).unwrap();
    let from_dir = plugin(&[
        "audit",
        "--rules",
        &rules(),
        "-f",
        dir.path().to_str().unwrap(),
        "-o",
        "json",
    ]);
    let document: Value = serde_json::from_slice(&from_dir.stdout).unwrap();
    assert_eq!(document["counts"]["drifted"], 5);
    // --drift-managers: without kubectl's managers, the scale (plain `kubectl`) is still a
    // change from the baseline, but no longer names who made it.
    let managers = plugin(&[
        "audit",
        "--rules",
        &rules(),
        "-f",
        &dump(),
        "--drift-managers",
        "nobody",
    ]);
    let stdout = text(&managers.stdout);
    assert!(stdout.contains("  spec.replicas: 2 → 5\n"), "{stdout}");
}

#[test]
fn errors_exit_2_with_one_line() {
    for (args, expected) in [
        (
            vec!["audit", "--rules", &rules(), "-f", "/nonexistent/live.yaml"],
            "/nonexistent/live.yaml does not exist",
        ),
        (
            vec!["audit", "--rules", &rules()],
            "needs the objects: -f FILE",
        ),
        (vec!["audit", "-f", &dump()], "-f is for offline audit"),
        (vec!["audit", "-n", "a", "-A"], "cannot be used with"),
    ] {
        let output = plugin(&args);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}");
    }
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.yaml");
    std::fs::write(&broken, "kind: Deployment\nmetadata: [\n").unwrap();
    let output = plugin(&["audit", "--rules", &rules(), "-f", broken.to_str().unwrap()]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("broken.yaml: line"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

/// A periodic `drift-sentinel audit` on the fixture, every second, exporting its runs; ready
/// once a run completed.
fn periodic_audit(dir: &Path) -> Agent {
    Agent::audit(dir)
        .rules(rules())
        .objects(dump())
        .args(["--audit-interval", "1s"])
        .ready_when(Duration::from_secs(30), |status| {
            status["audit"]["lastCompleted"].is_string()
        })
        .start()
}

#[test]
fn tail_shows_the_records_of_real_audit_runs_by_source() {
    let dir = tempfile::tempdir().unwrap();
    let audit = periodic_audit(dir.path());
    let base = audit.url("");
    let mut audits = NoTui::start(dir.path(), &["--url", &base, "--source", "audit"]);
    let lines = audits.wait_lines(5, Duration::from_secs(20)).to_vec();
    assert!(lines.len() >= 5, "{lines:?}\n{}", audits.stderr());
    let records: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        records
            .iter()
            .all(|r| r["eventType"] == "violation_audited"),
        "{records:?}"
    );
    let names: BTreeSet<&str> = records
        .iter()
        .map(|r| r["resourceName"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from(["env", "image", "scaled", "sidecar", "ssa"])
    );
    // -o text: the source column says audit.
    let mut as_text = NoTui::start(
        dir.path(),
        &["--url", &base, "--source", "audit", "-o", "text"],
    );
    let lines = as_text.wait_lines(5, Duration::from_secs(20)).to_vec();
    assert!(
        lines.len() >= 5 && lines.iter().all(|l| l.split("  ").nth(1) == Some("audit")),
        "{lines:?}"
    );
    // The webhook's records only: none from an audit process.
    let mut webhooks = NoTui::start(dir.path(), &["--url", &base, "--source", "webhook"]);
    let lines = webhooks.wait_lines(1, Duration::from_secs(3)).to_vec();
    assert!(lines.is_empty(), "{lines:?}");
    // The filter is the admin API's: ?source= reaches the audit process.
    let direct = client()
        .get(audit.url("/violations?source=webhook"))
        .send()
        .and_then(|r| r.text())
        .unwrap();
    assert!(direct.trim().is_empty(), "{direct}");
}

#[test]
fn status_shows_the_last_run_of_the_audit_pods() {
    let dir = tempfile::tempdir().unwrap();
    let audit = periodic_audit(dir.path());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = runtime.block_on(ApiServer::start()).unwrap();
    let kubeconfig = server.write_kubeconfig(dir.path()).unwrap();
    let created =
        humantime::format_rfc3339_seconds(std::time::SystemTime::now() - Duration::from_secs(600))
            .to_string();
    for (name, component) in [
        ("drift-sentinel-audit-5c7d-x", "audit"),
        ("drift-sentinel-7d9f-a", "webhook"),
    ] {
        server.apply(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "drift-sentinel", "creationTimestamp": created,
                "labels": {"app.kubernetes.io/name": "drift-sentinel",
                    "app.kubernetes.io/instance": "drift-sentinel",
                    "app.kubernetes.io/component": component}},
            "spec": {"containers": [{"name": "audit", "image": "drift-sentinel:test"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }));
    }
    let admin = audit.admin_addr();
    server.set_pod_port_target("drift-sentinel", "drift-sentinel-audit-5c7d-x", 9090, admin);
    let output = plugin(&[
        "status",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--agent-namespace",
        "drift-sentinel",
        "-o",
        "json",
    ]);
    let document: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", text(&output.stdout), text(&output.stderr)));
    let pods = document["audit"]["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 1, "{document:#}");
    let pod = &pods[0];
    assert_eq!(pod["name"], "drift-sentinel-audit-5c7d-x");
    assert_eq!(pod["admin"]["state"], "ok", "{document:#}");
    assert_eq!(pod["admin"]["intervalSeconds"], 1.0);
    assert_eq!(
        pod["admin"]["lastRun"]["counts"],
        json!({"drifted": 5, "clean": 2, "noBaseline": 1, "skipped": 0,
            "bypassed": {"none": 0, "active": 0, "expired": 0, "notHonoured": 0}})
    );
    let problems = document["problems"].as_array().unwrap();
    assert!(
        !problems
            .iter()
            .any(|p| p.as_str().unwrap().contains("audit")),
        "{problems:?}"
    );
    let output = plugin(&[
        "status",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--agent-namespace",
        "drift-sentinel",
    ]);
    let stdout = text(&output.stdout);
    let section = &stdout[stdout.find("Audit pods").expect("an audit section")..];
    let row = section
        .lines()
        .find(|l| l.starts_with("drift-sentinel-audit-5c7d-x "))
        .unwrap_or_else(|| panic!("{stdout}"));
    // Drifted/clean/no-baseline/skipped, then the bypasses (none in the dump).
    assert!(row.contains(" 5/2/1/0 "), "{row}");
    assert!(row.contains(" 0/0/0 "), "{row}");
    assert!(
        section.contains("BYPASSED NO-END/ACTIVE/ENDED"),
        "{section}"
    );
    assert!(row.trim_end().ends_with("ok"), "{row}");
    // Issue 43 item 6: where the findings are by default.
    assert!(
        section.contains("5 drifted objects in the last run, each with a DriftDetected Event")
            && section.contains("kubectl get events -A --field-selector reason=DriftDetected"),
        "{section}"
    );
    let _guard = runtime.enter();
    drop(server);
}
