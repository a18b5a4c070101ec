//! `drift-sentinel audit` through the real binary, offline (reference §8): a folder of rules and a
//! `kubectl get deploy -A -o yaml --show-managed-fields` dump taken from a real kube-apiserver
//! v1.37.2 (`tests/fixtures/audit/deployments.yaml`) after these edits of objects applied with
//! `kubectl apply` (namespace `shop`):
//!
//! | object        | edit                                                        |
//! |---------------|-------------------------------------------------------------|
//! | `image`       | `kubectl set image deploy/image app=…:2.0`                  |
//! | `scaled`      | `kubectl scale --replicas=5`                                |
//! | `env`         | `kubectl edit` (EDITOR a script): env `MODE` prod → debug   |
//! | `sidecar`     | `kubectl patch` adding container `proxy`                    |
//! | `untouched`   | none: only the server's defaults and the controller         |
//! | `scaled-back` | `kubectl scale` 2 → 5 → 2                                   |
//! | `ssa`         | `kubectl apply --server-side`, then `kubectl set image`     |
//! | `ssa-clean`   | `kubectl apply --server-side` only                          |
//!
//! and `tests/fixtures/audit/replaced.yaml`, taken the same way after `kubectl replace` of
//! objects applied with replicas 2 (reference §8 step 3):
//!
//! | object           | edit                                                                     |
//! |------------------|--------------------------------------------------------------------------|
//! | `replaced`       | `kubectl get -o yaml`, replicas 2 → 4, `kubectl replace -f -`: the       |
//! |                  | baseline is rewritten to the replaced object, kubectl-replace owns it    |
//! | `replaced-saved` | `kubectl replace --save-config -f` of the manifest with replicas 4       |
//! | `replaced-bare`  | `kubectl replace -f` of the manifest with replicas 4: no baseline left   |
//! | `reapplied`      | as `replaced`, then `kubectl apply` of the declared manifest again       |

#[path = "support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/audit")
}

fn audit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_drift-sentinel"))
        .arg("audit")
        .args(args)
        .output()
        .expect("run drift-sentinel audit")
}

/// What a run printed, once its exit code is `code` (else the test fails showing both streams).
fn stdout_of(output: &Output, code: i32) -> String {
    let stdout = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(code),
        "{stdout}{}",
        text(&output.stderr)
    );
    stdout
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn dump() -> String {
    fixtures().join("deployments.yaml").display().to_string()
}

fn rules() -> String {
    fixtures().join("rules").display().to_string()
}

#[test]
fn a_kubectl_dump_names_exactly_the_drifted_objects_and_paths() {
    let output = audit(&["--once", "--rules", &rules(), "--objects", &dump()]);
    let stdout = stdout_of(&output, 1);
    let drifted: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("drifted "))
        .collect();
    assert_eq!(
        drifted,
        [
            "drifted apps/v1 Deployment shop/env (rule drift-system/workloads, enforce)",
            "drifted apps/v1 Deployment shop/image (rule drift-system/workloads, enforce)",
            "drifted apps/v1 Deployment shop/scaled (rule drift-system/workloads, enforce)",
            "drifted apps/v1 Deployment shop/sidecar (rule drift-system/workloads, enforce)",
            "drifted apps/v1 Deployment shop/ssa (rule drift-system/workloads, enforce)",
        ]
    );
    let paths: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("  "))
        .map(|l| l.trim())
        .collect();
    let expected = [
        "spec.template.spec.containers[0].env[0].value: \"prod\" → \"debug\" (by kubectl-edit at ",
        "spec.template.spec.containers[0].image: \"registry.example/image:1.0\" → \"registry.example/image:2.0\" (by kubectl-set at ",
        "spec.replicas: 2 → 5 (by kubectl)",
        "spec.template.spec.containers[0]: <absent> → {\"image\":\"registry.example/proxy:1\"",
        "spec.template.spec.containers[0].image: <unknown> → \"registry.example/ssa:2.0\" (by kubectl-set at ",
    ];
    assert_eq!(paths.len(), expected.len(), "{stdout}");
    for (line, want) in paths.iter().zip(expected) {
        assert!(
            line.starts_with(want),
            "{line:?} should start with {want:?}"
        );
    }
    assert!(
        stdout.contains(": 8 objects: 5 drifted, 2 clean, 1 no_baseline, 0 skipped"),
        "{stdout}"
    );
}

#[test]
fn kubectl_replace_is_drift_until_the_declared_manifest_is_applied_again() {
    let dir = tempfile::tempdir().unwrap();
    let (connection, topics) = support::connection_file(dir.path(), "");
    let replaced = fixtures().join("replaced.yaml").display().to_string();
    let connection = connection.display().to_string();
    let output = audit(&[
        "--once",
        "--rules",
        &rules(),
        "--objects",
        &replaced,
        "--enable-violation-export",
        "--connection",
        &connection,
    ]);
    let stdout = stdout_of(&output, 1);
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|l| !l.starts_with("audit "))
        .collect();
    let at = "2026-12-04T10:08:13Z";
    assert_eq!(
        lines,
        [
            "drifted apps/v1 Deployment shop/replaced (rule drift-system/workloads, enforce)"
                .to_owned(),
            format!("  spec.replicas: <unknown> → 4 (by kubectl-replace at {at})"),
            "drifted apps/v1 Deployment shop/replaced-bare (rule drift-system/workloads, enforce)"
                .to_owned(),
            format!("  spec.replicas: <unknown> → 4 (by kubectl-replace at {at})"),
            "drifted apps/v1 Deployment shop/replaced-saved (rule drift-system/workloads, enforce)"
                .to_owned(),
            format!("  spec.replicas: <unknown> → 4 (by kubectl-replace at {at})"),
        ],
        "{stdout}"
    );
    assert!(
        stdout.contains(": 4 objects: 3 drifted, 1 clean, 0 no_baseline, 0 skipped"),
        "`reapplied` is clean again: {stdout}"
    );

    let records: Vec<Value> = support::completed_run_records(&topics.join("audit-channel"))
        .into_iter()
        .filter(|r| r["eventType"] == "violation_audited")
        .collect();
    let names: Vec<&str> = records
        .iter()
        .map(|r| r["resourceName"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["replaced", "replaced-bare", "replaced-saved"]);
    let replaced = &records[0];
    assert_eq!(
        replaced["details"]["changes"],
        serde_json::json!([{"path": "spec.replicas", "new": 4, "manager": "kubectl-replace", "time": at}]),
        "no `old`: the rewritten baseline's 4 is not what was declared"
    );
    assert!(
        replaced["message"].as_str().unwrap().starts_with(&format!(
            "Drift Sentinel: drift from the declared state (kubectl-replace at {at} rewrote the kubectl.kubernetes.io/last-applied-configuration baseline, so every field an imperative edit owns is drift): spec.replicas;"
        )),
        "{replaced}"
    );
}

#[test]
fn mutable_fields_and_an_undrifted_dump_exit_zero() {
    let dir = tempfile::tempdir().unwrap();
    let rule = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: lenient\n  namespace: ops\n  annotations: {drift-sentinel.k8s.io/rule: \"true\"}\ndata:\n  spec: |\n    mode: warn\n    namespaces: [\"*\"]\n    selectors: [{apiGroup: apps, kind: Deployment}]\n    mutable: [spec.replicas, \"spec.template.spec.containers[*]\"]\n";
    std::fs::write(dir.path().join("rule.yaml"), rule).unwrap();
    let rules = dir.path().join("rule.yaml").display().to_string();
    let output = audit(&["--audit-once", "--rules", &rules, "--objects", &dump()]);
    let stdout = stdout_of(&output, 0);
    assert!(
        stdout.contains(": 8 objects: 0 drifted, 7 clean, 1 no_baseline, 0 skipped"),
        "{stdout}"
    );

    // Only the managers named count: without kubectl-set, the server-side applied object's
    // image edit is invisible (it has no baseline).
    let strict = audit(&[
        "--once",
        "--rules",
        &self::rules(),
        "--objects",
        &dump(),
        "--audit-drift-managers",
        "kubectl-edit",
    ]);
    let stdout = text(&strict.stdout);
    assert!(!stdout.contains("shop/ssa "), "{stdout}");
    assert!(
        stdout.contains("shop/image "),
        "the baseline still tells: {stdout}"
    );
}

#[test]
fn errors_exit_two() {
    let output = audit(&[
        "--once",
        "--rules",
        &rules(),
        "--objects",
        "/nonexistent/dump.yaml",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("/nonexistent/dump.yaml does not exist"),
        "{}",
        text(&output.stderr)
    );
    let output = audit(&["--once", "--objects", &dump()]);
    assert_eq!(output.status.code(), Some(2), "--objects needs --rules");
}

/// Issue 41's report, offline: a Deployment whose manifest says `paused: false`,
/// `hostNetwork: false` and `readOnly: false`, stored by the API server without them (Go
/// `omitempty`), is clean as applied; the same object with `paused: true` live is drifted at
/// `spec.paused` alone (reference §8 step 2).
#[test]
fn zeros_the_api_server_leaves_out_are_no_drift_offline() {
    let declared = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"NAME","namespace":"default"},"spec":{"paused":false,"replicas":1,"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},"spec":{"hostNetwork":false,"containers":[{"name":"web","image":"nginx:1.27","volumeMounts":[{"name":"data","mountPath":"/data","readOnly":false}]}],"volumes":[{"name":"data","emptyDir":{}}]}}}}"#;
    let object = |name: &str, paused: &str| {
        format!(
            r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: default
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: '{}'
spec:
  replicas: 1{paused}
  progressDeadlineSeconds: 600
  revisionHistoryLimit: 10
  selector: {{matchLabels: {{app: web}}}}
  strategy: {{type: RollingUpdate, rollingUpdate: {{maxSurge: 25%, maxUnavailable: 25%}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
        - name: web
          image: nginx:1.27
          imagePullPolicy: IfNotPresent
          resources: {{}}
          terminationMessagePath: /dev/termination-log
          terminationMessagePolicy: File
          volumeMounts: [{{name: data, mountPath: /data}}]
      dnsPolicy: ClusterFirst
      restartPolicy: Always
      schedulerName: default-scheduler
      securityContext: {{}}
      terminationGracePeriodSeconds: 30
      volumes: [{{name: data, emptyDir: {{}}}}]
"#,
            declared.replace("NAME", name)
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let objects = dir.path().join("objects.yaml");
    let file = [object("web", ""), object("paused", "\n  paused: true")].join("---\n");
    std::fs::write(&objects, file).unwrap();
    let output = audit(&[
        "--once",
        "--rules",
        &rules(),
        "--objects",
        &objects.display().to_string(),
    ]);
    let stdout = stdout_of(&output, 1);
    let reported: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("drifted ") || l.starts_with("  "))
        .collect();
    assert_eq!(
        reported,
        [
            "drifted apps/v1 Deployment default/paused (rule drift-system/workloads, enforce)",
            "  spec.paused: false → true",
        ],
        "{stdout}"
    );
    assert!(
        stdout.contains(": 2 objects: 1 drifted, 1 clean, 0 no_baseline, 0 skipped"),
        "{stdout}"
    );
}

/// An objects file holding what JSON cannot (`.inf`, a key given twice) is refused naming the
/// file, the line and the fix; it is never read as something else (`.inf` as `null` would make
/// `replicas` look removed).
#[test]
fn an_objects_file_json_cannot_hold_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (file, says) in [
        (
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a, namespace: shop}\nspec:\n  replicas: .inf\n",
            "line 5 column 13: spec.replicas: the number inf cannot be written in JSON",
        ),
        (
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: a\n  namespace: shop\n  name: b\n",
            "gives the key \"name\" twice; keep one",
        ),
    ] {
        let objects = dir.path().join("objects.yaml");
        std::fs::write(&objects, file).unwrap();
        let output = audit(&[
            "--once",
            "--rules",
            &rules(),
            "--objects",
            &objects.display().to_string(),
        ]);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("objects.yaml") && stderr.contains(says),
            "{stderr}"
        );
    }
}

#[test]
fn the_export_file_of_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let (connection, topics) = support::connection_file(dir.path(), ", maxAuditResults: 2");
    let channel = topics.join("audit-channel");
    std::fs::create_dir_all(&channel).unwrap();
    // An abandoned run and an admission segment: the first is removed, the second untouched.
    std::fs::write(channel.join("2020-01-01T00:00:00Z.txt"), "{\"id\":\"x\"}\n").unwrap();
    std::fs::write(
        channel.join("admission-20270115T080000.000000Z-00000000000000aa.log"),
        "{}\n",
    )
    .unwrap();
    let connection = connection.display().to_string();
    let args = [
        "--once",
        "--rules",
        &rules(),
        "--objects",
        &dump(),
        "--enable-violation-export",
        "--connection",
        &connection,
    ];
    for _ in 0..3 {
        let output = audit(&args);
        assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
        std::thread::sleep(std::time::Duration::from_millis(1100));
    }
    let mut names: Vec<String> = std::fs::read_dir(&channel)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names.len(),
        3,
        "two runs (maxAuditResults) and the admission segment: {names:?}"
    );
    assert!(names[2].starts_with("admission-"), "{names:?}");
    assert!(names[0].ends_with(".log") && names[1].ends_with(".log"));

    let run = std::fs::read_to_string(channel.join(&names[1])).unwrap();
    let lines: Vec<Value> = run
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let id = names[1].trim_end_matches(".log");
    assert_eq!(
        lines[0],
        serde_json::json!({"id": id, "message": "audit is started"})
    );
    assert_eq!(
        lines[lines.len() - 1],
        serde_json::json!({"id": id, "message": "audit is completed"})
    );
    let records = &lines[1..lines.len() - 1];
    assert_eq!(records.len(), 5);
    let image = records
        .iter()
        .find(|r| r["resourceName"] == "image")
        .unwrap();
    assert_eq!(image["eventType"], "violation_audited");
    assert_eq!(image["id"], id);
    assert_eq!(image["resource"], "deployments");
    assert_eq!(image["resourceNamespace"], "shop");
    assert_eq!(image["ruleNamespace"], "drift-system");
    assert_eq!(image["enforcementAction"], "deny");
    assert!(image.get("userName").is_none(), "no request user: {image}");
    let change = &image["details"]["changes"][0];
    assert_eq!(change["path"], "spec.template.spec.containers[0].image");
    assert_eq!(change["old"], "registry.example/image:1.0");
    assert_eq!(change["new"], "registry.example/image:2.0");
    assert_eq!(change["manager"], "kubectl-set");
    assert!(change["time"].as_str().unwrap().ends_with('Z'));
    let scaled = records
        .iter()
        .find(|r| r["resourceName"] == "scaled")
        .unwrap();
    assert_eq!(scaled["details"]["changes"][0]["old"], 2);
    assert_eq!(scaled["details"]["changes"][0]["new"], 5);
    assert_eq!(scaled["details"]["changes"][0]["manager"], "kubectl");
    assert!(scaled["details"]["changes"][0].get("time").is_none());
}

/// Kills the periodic audit when the test ends, whatever happens.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

use drift_testkit::free_port;

#[test]
fn periodic_runs_serve_metrics_status_and_their_records() {
    let dir = tempfile::tempdir().unwrap();
    let connection = dir.path().join("connection.yaml");
    std::fs::write(
        &connection,
        format!(
            "apiVersion: connection.drift-sentinel.io/v1alpha1\nkind: Connection\nmetadata: {{name: audit-connection}}\nspec: {{driver: disk, config: {{path: {}}}}}\n",
            dir.path().join("topics").display()
        ),
    )
    .unwrap();
    let (port, admin_port) = (free_port(), free_port());
    let _audit = Running(
        Command::new(env!("CARGO_BIN_EXE_drift-sentinel"))
            .arg("audit")
            .args(["--rules", &rules(), "--objects", &dump()])
            .args(["--audit-interval", "1s", "--enable-violation-export"])
            .arg("--connection")
            .arg(&connection)
            .args(["--address", &format!("127.0.0.1:{port}")])
            .args(["--admin-address", &format!("127.0.0.1:{admin_port}")])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the audit"),
    );
    let client = reqwest::blocking::Client::builder()
        .timeout(std::time::Duration::from_secs(5))
        .build()
        .unwrap();
    let get = |url: String| -> Option<String> {
        client
            .get(url)
            .send()
            .ok()
            .filter(|r| r.status().is_success())
            .and_then(|r| r.text().ok())
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status: Value = loop {
        let status = get(format!("http://127.0.0.1:{admin_port}/status"))
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .filter(|s| s.get("audit").is_some());
        if let Some(status) = status {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no audit run in /status"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(
        status["audit"]["counts"],
        serde_json::json!({"drifted": 5, "clean": 2, "noBaseline": 1, "skipped": 0,
            "bypassed": {"none": 0, "active": 0, "expired": 0, "notHonoured": 0}})
    );
    assert!(status["audit"]["id"].as_str().unwrap().ends_with('Z'));
    // What `kubectl drift status` judges a late audit by: the interval and the last completion.
    assert_eq!(status["auditIntervalSeconds"], 1.0);
    assert_eq!(status["audit"]["lastCompleted"], status["audit"]["start"]);

    let metrics = get(format!("http://127.0.0.1:{port}/metrics")).expect("/metrics");
    for line in [
        "drift_sentinel_audit_objects{result=\"drifted\"} 5",
        "drift_sentinel_audit_objects{result=\"no_baseline\"} 1",
        "drift_sentinel_audit_drifted_objects{rule=\"drift-system/workloads\"} 5",
        "drift_sentinel_audit_duration_seconds ",
        "drift_sentinel_audit_last_run_timestamp_seconds ",
    ] {
        assert!(metrics.contains(line), "{line} missing from\n{metrics}");
    }
    assert!(get(format!("http://127.0.0.1:{port}/readyz")).is_some());

    let records = get(format!(
        "http://127.0.0.1:{admin_port}/violations?source=audit"
    ))
    .expect("/violations");
    let records: Vec<Value> = records
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(records.len() >= 5, "{records:?}");
    assert!(
        records
            .iter()
            .all(|r| r["eventType"] == "violation_audited" && r.get("message").is_some()),
        "no control records in the stream: {records:?}"
    );
}
