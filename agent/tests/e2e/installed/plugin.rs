//! The plugin and the export against the real pods: `kubectl drift status`, `explain` and
//! `tail` through real port-forwarding (API server → kubelet → containerd → the pod); the
//! plugin installed by krew from the release archive and found by kubectl's own plugin
//! discovery; the audit pod's Report and export and the Connection's status by pod; and spool
//! records that survive a killed webhook container.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use libtest_mimic::Trial;
use serde_json::Value;

use super::env::{Installed, NAMESPACE, WEBHOOK_PODS, container, installed, pod_name, pod_ready};
use crate::env::{stderr, stdout, wait_for};
use crate::trial;

pub fn tests() -> Vec<Trial> {
    vec![
        trial!(status_and_explain_through_port_forwarding),
        trial!(krew_installs_the_release_archive),
        trial!(audit_report_export_and_connection),
        trial!(spool_records_survive_a_killed_container),
    ]
}

/// The `kubectl drift status` command the install's NOTES print.
fn notes_status_command(env: &Installed) -> String {
    env.install_output
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("kubectl drift status"))
        .unwrap_or_else(|| panic!("no status command in the NOTES:\n{}", env.install_output))
        .to_owned()
}

fn status_and_explain_through_port_forwarding() {
    let env = installed();
    let output = env.shell(&notes_status_command(&env));
    let text = format!("{}{}", stdout(&output), stderr(&output));
    for pod in env.pods(WEBHOOK_PODS) {
        // Each pod's admin API answered through its own port-forward: its rules are counted.
        let name = pod_name(&pod);
        let line = text
            .lines()
            .find(|l| l.starts_with(&name))
            .unwrap_or_else(|| panic!("{name} is not listed:\n{text}"));
        assert!(
            line.contains("yes") && line.contains("ready"),
            "{name} is ready and its agent answered: {line}\n{text}"
        );
    }
    assert!(
        text.contains("drift-sentinel/drift-sentinel-default-rule"),
        "{text}"
    );
    assert!(
        text.contains("service drift-sentinel/drift-sentinel:443/validate"),
        "{text}"
    );

    let ns = env.namespace("installed-explain", &[]);
    env.apply(&format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  replicas: 0\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n        - name: app\n          image: {}\n",
        drift_testkit::node::SANDBOX_IMAGE
    ));
    // No --agent-namespace: the plugin finds the agent where the webhook's Service is, and
    // reads the tiers from a pod's /status through port-forwarding.
    let output = env.shell(&format!("kubectl drift explain deploy/web -n {ns}"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("drift-sentinel/drift-sentinel-default-rule (cluster rule)"),
        "{}",
        stdout(&output)
    );
    assert!(
        !stderr(&output).contains("no agent pod"),
        "the tiers came from a pod: {}",
        stderr(&output)
    );
}

/// `scripts/krew-release.sh`'s archive for linux/amd64 (the programs of the release and the
/// LICENSE), the manifest it fills, `kubectl krew install --manifest --archive` with krew built
/// from the Go module proxy, then `kubectl drift` through kubectl's plugin discovery alone.
fn krew_installs_the_release_archive() {
    let env = installed();
    let dir = tempfile::tempdir().expect("dir");
    let dist = dir.path().join("dist");
    let stage = dir.path().join("stage");
    std::fs::create_dir_all(&dist).expect("dist");
    std::fs::create_dir_all(&stage).expect("stage");
    let binaries = crate::env::binaries();
    for program in ["kubectl-drift", "kubectl_complete-drift"] {
        std::fs::copy(binaries.join(program), stage.join(program)).expect("copy the program");
    }
    let license = crate::env::workspace().join("LICENSE");
    if license.is_file() {
        std::fs::copy(&license, stage.join("LICENSE")).expect("copy LICENSE");
    }
    let archive = dist.join("kubectl-drift-linux-amd64.tar.gz");
    let output = Command::new("tar")
        .arg("-czf")
        .arg(&archive)
        .arg("-C")
        .arg(&stage)
        .arg(".")
        .output()
        .expect("tar");
    assert!(output.status.success(), "{}", stderr(&output));
    // The script fills all four platforms; only linux/amd64 is installed here, the others
    // stand in so that it can.
    for other in ["linux-arm64", "darwin-amd64", "darwin-arm64"] {
        std::fs::write(dist.join(format!("kubectl-drift-{other}.tar.gz")), other).expect("write");
    }
    let output = Command::new("bash")
        .arg(crate::env::workspace().join("scripts/krew-release.sh"))
        .args(["v0.1.0", dist.to_str().expect("path")])
        .output()
        .expect("krew-release.sh");
    assert!(output.status.success(), "{}", stderr(&output));
    let manifest = dir.path().join("drift.yaml");
    std::fs::write(&manifest, &output.stdout).expect("write the manifest");

    let krew_root = dir.path().join("krew");
    let output = env.shell(&format!(
        "KREW_ROOT={} kubectl krew install --manifest={} --archive={}",
        krew_root.display(),
        manifest.display(),
        archive.display()
    ));
    assert!(
        output.status.success(),
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
    assert!(
        krew_root.join("bin/kubectl-drift").exists(),
        "krew linked the plugin"
    );

    // kubectl finds the plugin on a PATH with krew's bin directory and nothing of the build.
    let kubectl_dir = drift_testkit::cluster::bin_dir();
    let path = std::env::join_paths([
        krew_root.join("bin"),
        kubectl_dir,
        "/usr/bin".into(),
        "/bin".into(),
    ])
    .expect("PATH");
    let plugin = |args: &[&str]| {
        Command::new(drift_testkit::cluster::kubectl_path())
            .args(args)
            .env("PATH", &path)
            .env("KUBECONFIG", env.cluster.admin_kubeconfig())
            .env("NO_COLOR", "1")
            .output()
            .expect("kubectl")
    };
    let output = plugin(&["plugin", "list"]);
    assert!(
        stdout(&output).contains(&krew_root.join("bin/kubectl-drift").display().to_string()),
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
    let output = plugin(&["drift", "status", "--agent-namespace", NAMESPACE]);
    let text = format!("{}{}", stdout(&output), stderr(&output));
    assert!(matches!(output.status.code(), Some(0) | Some(1)), "{text}");
    assert!(
        text.contains("Agent pods (namespace drift-sentinel"),
        "{text}"
    );
}

/// Runs `kubectl drift tail --no-tui ARGS` until it has printed `want` records or `limit`
/// passes; returns the records.
fn tail(env: &Installed, args: &str, want: usize, limit: Duration) -> Vec<Value> {
    let mut child = env
        .shell_command(&format!("exec kubectl drift tail --no-tui {args}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl drift tail");
    let stdout = child.stdout.take().expect("stdout");
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + limit;
    let mut records = Vec::new();
    while records.len() < want {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            break;
        };
        match received.recv_timeout(left) {
            Ok(line) => records.extend(serde_json::from_str::<Value>(&line).ok()),
            Err(_) => break,
        }
    }
    let _ = child.kill();
    let output = child.wait_with_output().expect("tail's output");
    assert!(
        records.len() >= want,
        "tail {args}: {} of {want} records in {limit:?}; stderr:\n{}",
        records.len(),
        stderr(&output)
    );
    records
}

fn ids(records: &[Value]) -> Vec<String> {
    let mut ids: Vec<String> = records
        .iter()
        .filter_map(|r| r["id"].as_str().map(str::to_owned))
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// Export on for the webhook and the audit, the OpenReports CRDs, a short audit interval.
fn export_on(env: &Installed) {
    let values = env.values();
    if values["enableViolationExport"] != true || values["audit"]["interval"] != "10s" {
        env.upgrade(&[
            "enableAdmissionViolationExport=true",
            "enableViolationExport=true",
            "openreports.installCRDs=true",
            "audit.interval=10s",
        ]);
    }
}

fn audit_report_export_and_connection() {
    let env = installed();
    // Drift the webhook cannot see: a namespace it does not intercept.
    let ns = env.namespace(
        "installed-audit",
        &[("drift-sentinel.k8s.io/enabled", "false")],
    );
    let manifest = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  replicas: 0\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n        - name: app\n          image: {}\n",
        drift_testkit::node::SANDBOX_IMAGE
    );
    let output = env.kubectl_stdin(&["apply", "-f", "-"], &manifest);
    assert!(output.status.success(), "{}", stderr(&output));
    let output = env.kubectl(&["-n", &ns, "scale", "deployment/web", "--replicas=2"]);
    assert!(output.status.success(), "{}", stderr(&output));
    export_on(&env);

    wait_for(
        "the audit's Report to name the drifted Deployment",
        Duration::from_secs(90),
        || {
            env.get(&["reports.openreports.io", "-n", &ns])
                .is_some_and(|list| list.to_string().contains("spec.replicas"))
        },
    );
    let audit_selector = "app.kubernetes.io/name=drift-sentinel,app.kubernetes.io/component=audit";
    let records = tail(
        &env,
        &format!("--source audit -n {ns} -l {audit_selector}"),
        1,
        Duration::from_secs(60),
    );
    assert_eq!(
        records[0]["eventType"], "violation_audited",
        "{:#}",
        records[0]
    );
    assert_eq!(records[0]["resourceName"], "web", "{:#}", records[0]);

    // The Connection: one entry for each pod that exports.
    let mut pods: Vec<String> = env.pods(WEBHOOK_PODS).iter().map(pod_name).collect();
    pods.extend(env.pods(audit_selector).iter().map(pod_name));
    wait_for(
        "the Connection to show every pod",
        Duration::from_secs(60),
        || {
            let connection = env
                .get(&["connection", "audit-connection", "-n", NAMESPACE])
                .unwrap_or(Value::Null);
            let text = connection["status"]["byPod"].to_string();
            pods.iter().all(|pod| text.contains(pod.as_str()))
        },
    );
}

/// Records exported before a webhook container is killed (SIGKILL, as the OOM killer does)
/// are on its emptyDir spool: after the kubelet restarts the container, `tail` still shows
/// every one of them.
fn spool_records_survive_a_killed_container() {
    let env = installed();
    export_on(&env);
    let ns = env.namespace("installed-spool", &[]);
    env.apply(&format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  replicas: 0\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n        - name: app\n          image: {}\n",
        drift_testkit::node::SANDBOX_IMAGE
    ));
    const EDITS: usize = 9;
    for n in 1..=EDITS {
        let patch = format!(r#"{{"spec":{{"replicas":{n}}}}}"#);
        let output = env.kubectl(&["-n", &ns, "patch", "deployment", "web", "-p", &patch]);
        assert!(!output.status.success(), "replicas {n} allowed");
    }
    let before = ids(&tail(
        &env,
        &format!("-n {ns}"),
        EDITS,
        Duration::from_secs(60),
    ));
    assert_eq!(before.len(), EDITS, "{before:?}");

    let pods = env.ready_webhook_pods();
    for pod in &pods {
        let (id, _) = container(pod, "drift-sentinel");
        env.with_node(|node| node.signal_container(&id, rustix::process::Signal::KILL));
    }
    let killed: Vec<(String, u64)> = pods
        .iter()
        .map(|p| (pod_name(p), container(p, "drift-sentinel").1))
        .collect();
    wait_for(
        "the killed containers to be restarted and ready",
        Duration::from_secs(90),
        || {
            killed.iter().all(|(name, restarts)| {
                env.get(&["pod", name, "-n", NAMESPACE]).is_some_and(|pod| {
                    container(&pod, "drift-sentinel").1 > *restarts && pod_ready(&pod)
                })
            })
        },
    );
    let after = ids(&tail(
        &env,
        &format!("-n {ns}"),
        EDITS,
        Duration::from_secs(60),
    ));
    assert_eq!(after, before, "the records after the restarts");
}
