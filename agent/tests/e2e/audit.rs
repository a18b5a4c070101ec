//! The audit (reference §8) against the real API server: Deployments edited with the real kubectl in
//! a namespace the webhook does not intercept (`drift-sentinel.k8s.io/enabled: "false"`) show up
//! in the next run's export file and in the namespace's OpenReports `Report`, with the field
//! manager that changed them; `kubectl replace`, which rewrites the baseline, is drift too (§8
//! step 3); an object put back as declared (`kubectl apply`) leaves the report at the next run;
//! the Connection's status gets the audit's `source: audit` entry.

use std::path::Path;
use std::process::{Command, Output};

use libtest_mimic::Trial;
use serde_json::{Value, json};

use crate::env::{AGENT_NAMESPACE, Env, deployment, shared, stderr, stdout, workspace};
use crate::trial;

pub fn tests() -> Vec<Trial> {
    vec![trial!(
        imperative_edits_show_up_in_the_run_files_and_the_report
    )]
}

const NS: &str = "e2e-drift-audit";
const CONNECTION: &str = "audit-e2e";
const POD: &str = "e2e-audit-0";

fn kubectl_ok(env: &Env, args: &[&str]) {
    let output = env.kubectl(args);
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        stderr(&output)
    );
}

/// `kubectl edit` with an EDITOR script that rewrites one value.
fn kubectl_edit(env: &Env, dir: &Path, object: &str, from: &str, to: &str) {
    let editor = dir.join("editor.sh");
    std::fs::write(
        &editor,
        format!("#!/bin/sh\nsed -i 's/{from}/{to}/' \"$1\"\n"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755)).unwrap();
    let output = env
        .cluster
        .kubectl_command()
        .args(["edit", object, "-n", NS])
        .env("EDITOR", &editor)
        .output()
        .expect("kubectl edit");
    assert!(output.status.success(), "kubectl edit: {}", stderr(&output));
}

fn run_audit(env: &Env) -> Output {
    let _auditing = crate::env::auditing();
    Command::new(env!("CARGO_BIN_EXE_drift-sentinel"))
        .args(["audit", "--once", "--kubeconfig"])
        .arg(env.cluster.admin_kubeconfig())
        .arg("--record-signing-key")
        .arg(env.record_key())
        .args([
            "--pod-namespace",
            AGENT_NAMESPACE,
            "--pod-name",
            POD,
            "--enable-violation-export",
            "--audit-connection",
            CONNECTION,
            // Small pages: the run must follow continue tokens.
            "--audit-chunk-size",
            "2",
        ])
        .output()
        .expect("run drift-sentinel audit")
}

/// The audit records of this test's namespace in the newest completed run.
fn last_run_records(channel: &Path) -> Vec<Value> {
    let mut runs: Vec<_> = std::fs::read_dir(channel)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    runs.sort();
    let last = runs.last().expect("a completed run");
    std::fs::read_to_string(last)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["resourceNamespace"] == NS)
        .collect()
}

fn namespace_report(env: &Env) -> Value {
    env.get(&["reports.openreports.io", "drift-sentinel-audit", "-n", NS])
        .expect("the namespace's Report")
}

fn reported_objects(report: &Value) -> Vec<String> {
    let mut names: Vec<String> = report["results"]
        .as_array()
        .map(|r| r.as_slice())
        .unwrap_or(&[])
        .iter()
        .map(|r| r["resources"][0]["name"].as_str().unwrap_or("").to_owned())
        .collect();
    names.sort();
    names
}

fn imperative_edits_show_up_in_the_run_files_and_the_report() {
    let env = shared();
    let dir = tempfile::tempdir().unwrap();
    env.apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NS}\n  labels:\n    drift-sentinel.k8s.io/enabled: \"false\"\n"
    ));
    let crds = std::fs::read_to_string(workspace().join("testkit/crds/openreports.yaml")).unwrap();
    env.apply(&crds);
    env.rule(
        "audit-e2e",
        &format!(
            "mode: enforce\npriority: 1000\nnamespaces: [{NS}]\nselectors: [{{apiGroup: apps, kind: Deployment}}]\nmutable: [\"spec.template.metadata.annotations['kubectl.kubernetes.io/restartedAt']\"]\n"
        ),
    );
    let channel_root = dir.path().join("topics");
    env.apply(&format!(
        "apiVersion: connection.drift-sentinel.io/v1alpha1\nkind: Connection\nmetadata:\n  name: {CONNECTION}\n  namespace: {AGENT_NAMESPACE}\nspec:\n  driver: disk\n  config:\n    path: {}\n    maxAuditResults: 2\n",
        channel_root.display()
    ));
    for name in ["image", "scaled", "sidecar", "clean", "replaced"] {
        let manifest = deployment(NS, name, 2, "nginx:1.0");
        env.apply(&manifest);
    }
    // Imperative edits, none of them seen by the webhook.
    kubectl_ok(
        &env,
        &[
            "set",
            "image",
            "deployment/image",
            "app=nginx:2.0",
            "-n",
            NS,
        ],
    );
    kubectl_ok(
        &env,
        &["scale", "deployment/scaled", "--replicas=5", "-n", NS],
    );
    // An env var the manifest declares, edited by hand.
    env.apply(&deployment(NS, "env", 2, "nginx:1.0").replace(
        "          image: nginx:1.0\n",
        "          image: nginx:1.0\n          env:\n            - name: MODE\n              value: prod\n",
    ));
    kubectl_edit(
        &env,
        dir.path(),
        "deployment/env",
        "value: prod",
        "value: debug",
    );
    kubectl_ok(
        &env,
        &[
            "patch",
            "deployment/sidecar",
            "-n",
            NS,
            "-p",
            r#"{"spec":{"template":{"spec":{"containers":[{"name":"proxy","image":"envoy:1"}]}}}}"#,
        ],
    );

    // The object as the server has it, replicas 2 → 4, replaced: kubectl rewrites the baseline
    // to it (the annotation is in what it sends) and kubectl-replace owns the annotation.
    // The controller manager may write the object between the get and the replace (a
    // Conflict on its resourceVersion): then get it again, as a person would.
    crate::env::wait_for(
        "kubectl replace without a conflict",
        std::time::Duration::from_secs(30),
        || {
            let current = env.kubectl(&["get", "deployment/replaced", "-n", NS, "-o", "yaml"]);
            assert!(current.status.success(), "{}", stderr(&current));
            let replaced = stdout(&current).replace("\n  replicas: 2\n", "\n  replicas: 4\n");
            assert!(replaced.contains("\n  replicas: 4\n"), "{replaced}");
            let output = env.kubectl_stdin(&["replace", "-f", "-"], &replaced);
            let printed = stderr(&output);
            assert!(
                output.status.success() || printed.contains("(Conflict)"),
                "kubectl replace: {printed}"
            );
            output.status.success()
        },
    );
    let baseline = env
        .get(&["deployment", "replaced", "-n", NS])
        .expect("the replaced Deployment")["metadata"]["annotations"]
        ["kubectl.kubernetes.io/last-applied-configuration"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_default();
    assert!(
        baseline.contains("\"replicas\":4"),
        "the baseline was rewritten: {baseline}"
    );

    // Its runs write every namespace's Report: no other test's run between them and the checks.
    let _reports = crate::env::writing_reports();
    let output = run_audit(&env);
    crate::env::assert_exit(&output, 1);
    let channel = channel_root.join("audit-channel");
    let records = last_run_records(&channel);
    let mut found: Vec<(String, String, String)> = records
        .iter()
        .flat_map(|r| {
            let name = r["resourceName"].as_str().unwrap_or("").to_owned();
            r["details"]["changes"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |c| {
                    (
                        name.clone(),
                        c["path"].as_str().unwrap_or("").to_owned(),
                        c["manager"].as_str().unwrap_or("").to_owned(),
                    )
                })
        })
        .collect();
    found.sort();
    let want = |n: &str, p: &str, m: &str| (n.to_owned(), p.to_owned(), m.to_owned());
    assert_eq!(
        found,
        [
            want(
                "env",
                "spec.template.spec.containers[0].env[0].value",
                "kubectl-edit"
            ),
            want(
                "image",
                "spec.template.spec.containers[0].image",
                "kubectl-set"
            ),
            want("replaced", "spec.replicas", "kubectl-replace"),
            want("scaled", "spec.replicas", "kubectl"),
            want(
                "sidecar",
                "spec.template.spec.containers[0]",
                "kubectl-patch"
            ),
        ],
        "{}",
        stdout(&output)
    );

    let report = namespace_report(&env);
    assert_eq!(
        reported_objects(&report),
        ["env", "image", "replaced", "scaled", "sidecar"]
    );
    assert_eq!(report["summary"]["fail"], 5);
    assert_eq!(report["summary"]["pass"], 1);
    let image = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resources"][0]["name"] == "image")
        .unwrap();
    assert_eq!(image["policy"], format!("{AGENT_NAMESPACE}/audit-e2e"));
    assert_eq!(image["result"], "fail");
    // What Policy Reporter reads (docs/audit.md "Policy Reporter"), as the real API server
    // stored it: rule, severity by mode, category, a stable resultID.
    assert_eq!(image["rule"], image["policy"]);
    assert_eq!(
        (&image["severity"], &image["category"]),
        (&json!("high"), &json!("Drift"))
    );
    assert_eq!(
        image["properties"]["resultID"].as_str().map(str::len),
        Some(32),
        "{image}"
    );
    let first_run = report["results"].clone();
    assert!(
        image["properties"]["changedBy"]
            .as_str()
            .unwrap()
            .starts_with("kubectl-set at "),
        "{image}"
    );

    let connection = env
        .get(&[
            "connections.connection.drift-sentinel.io",
            CONNECTION,
            "-n",
            AGENT_NAMESPACE,
        ])
        .expect("the Connection");
    let entry = connection["status"]["byPod"]
        .as_array()
        .and_then(|pods| pods.iter().find(|p| p["id"] == POD))
        .cloned()
        .unwrap_or_else(|| panic!("no status entry for {POD}: {connection}"));
    assert_eq!(entry["publishStatuses"][0]["source"], "audit", "{entry}");
    assert_eq!(entry["publishStatuses"][0]["active"], true, "{entry}");

    let replaced = records
        .iter()
        .find(|r| r["resourceName"] == "replaced")
        .expect("the replaced object's record");
    let change = &replaced["details"]["changes"][0];
    assert!(
        change.get("old").is_none(),
        "no declared value is known: {change}"
    );
    assert_eq!(change["new"], 4, "{change}");

    // Put back as declared: the objects leave the report and the next run's file.
    env.apply(&deployment(NS, "image", 2, "nginx:1.0"));
    env.apply(&deployment(NS, "replaced", 2, "nginx:1.0"));
    let output = run_audit(&env);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let second_report = namespace_report(&env);
    assert_eq!(
        reported_objects(&second_report),
        ["env", "scaled", "sidecar"]
    );
    // The findings that stayed are the same results, id and message, on the next run: a
    // reader that notifies on new ids notifies them once.
    let identity = |result: &Value| {
        (
            result["resources"][0]["name"].clone(),
            result["properties"]["resultID"].clone(),
            result["message"].clone(),
        )
    };
    let mut stayed: Vec<_> = first_run
        .as_array()
        .unwrap()
        .iter()
        .map(identity)
        .filter(|(name, ..)| name != "image" && name != "replaced")
        .collect();
    let mut again: Vec<_> = second_report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(identity)
        .collect();
    stayed.sort_by_key(|(name, ..)| name.to_string());
    again.sort_by_key(|(name, ..)| name.to_string());
    assert_eq!(again, stayed);
    let names: Vec<Value> = last_run_records(&channel)
        .iter()
        .map(|r| r["resourceName"].clone())
        .collect();
    assert!(
        !names.iter().any(|n| n == "image" || n == "replaced"),
        "{names:?}"
    );
}
