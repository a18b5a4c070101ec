//! The real control plane of `testkit::cluster`: it starts, answers kubectl as admin and as
//! other users under RBAC, records an audit log, survives an API server restart, and leaves
//! no process behind.

use std::time::Duration;

use drift_testkit::cluster::{Cluster, ClusterOptions};

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn starts_serves_kubectl_and_tears_down() {
    let started = std::time::Instant::now();
    let mut cluster = Cluster::start(ClusterOptions::default());
    eprintln!("control plane ready in {:?}", started.elapsed());
    let output = cluster.kubectl(&["get", "namespaces", "-o", "name"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout(&output).contains("namespace/default"),
        "{}",
        stdout(&output)
    );

    // RBAC: a user without bindings is forbidden; the audit log names the request.
    let nobody = cluster.kubeconfig_for("nobody", &[]);
    let output = std::process::Command::new(drift_testkit::cluster::kubectl_path())
        .args([
            "--kubeconfig",
            nobody.to_str().unwrap(),
            "get",
            "configmaps",
            "-A",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("forbidden"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let events = cluster.audit_events();
    assert!(
        events
            .iter()
            .any(|e| e["user"]["username"] == "nobody" && e["level"] == "Metadata"),
        "no audit event for the user"
    );

    // Restart keeps what etcd holds; compaction answers a revision.
    cluster
        .apply("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kept\n  namespace: default\n");
    let revision = cluster.compact_etcd();
    assert!(revision > 1);
    cluster.restart_apiserver();
    assert!(
        cluster
            .get(&["configmap", "kept", "-n", "default"])
            .is_some()
    );

    let apiserver_pid = cluster_pids(&cluster);
    drop(cluster);
    std::thread::sleep(Duration::from_millis(200));
    for pid in apiserver_pid {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.contains(") Z ")),
            "process {pid} survived the cluster"
        );
    }
}

/// The process ids of the cluster's servers, found through their temporary directory.
fn cluster_pids(cluster: &Cluster) -> Vec<u32> {
    let dir = cluster.dir().to_string_lossy().into_owned();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline"))
            && String::from_utf8_lossy(&cmdline).contains(&dir)
        {
            pids.push(pid);
        }
    }
    assert!(pids.len() >= 2, "etcd and the API server are running");
    pids
}
