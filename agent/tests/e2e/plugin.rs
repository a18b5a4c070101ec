//! `kubectl drift` as a kubectl plugin against the real API server, through the real kubectl:
//! `explain`, `preview -f`, and `preview --server-dry-run`, where the real webhook answers.

use std::path::PathBuf;
use std::process::{Command, Output};

use libtest_mimic::Trial;
use serde_json::Value;

use crate::env::{Env, deployment, shared, stderr, stdout};
use crate::trial;

pub fn tests() -> Vec<Trial> {
    vec![
        trial!(explain_names_the_winning_rule),
        trial!(preview_and_server_dry_run_agree_with_the_webhook),
    ]
}

/// The directory of the workspace's binaries (`target/<profile>`), where `kubectl-drift` is
/// built (`.ci/e2e` builds every binary first).
fn binaries() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>")
        .to_path_buf();
    assert!(
        dir.join("kubectl-drift").is_file(),
        "{} is missing: build it first (`cargo build -p kubectl-drift`; `bash .ci/e2e` does)",
        dir.join("kubectl-drift").display()
    );
    dir
}

/// `kubectl drift ARGS` with the plugin on PATH and the admin kubeconfig in KUBECONFIG, as a
/// user runs it.
fn kubectl_drift(env: &Env, args: &[&str]) -> Output {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![binaries()];
    dirs.extend(std::env::split_paths(&path));
    Command::new(drift_testkit::cluster::kubectl_path())
        .arg("drift")
        .args(args)
        .env("PATH", std::env::join_paths(dirs).expect("PATH"))
        .env("KUBECONFIG", env.cluster.admin_kubeconfig())
        .env("NO_COLOR", "1")
        .output()
        .expect("run kubectl drift")
}

fn explain_names_the_winning_rule() {
    let env = shared();
    let ns = env.namespace("e2e-explain", &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    let output = kubectl_drift(&env, &["explain", "deploy/web", "-n", &ns, "-o", "json"]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
    let document: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let text = document.to_string();
    assert!(
        text.contains("drift-system/drift-sentinel-default-rule"),
        "{document:#}"
    );
    let output = kubectl_drift(&env, &["explain", "deploy/web", "-n", &ns]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("drift-sentinel-default-rule"),
        "{}",
        stdout(&output)
    );

    let output = kubectl_drift(&env, &["explain", "nosuchkind/web", "-n", &ns]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("the server doesn't have a resource type \"nosuchkind\""),
        "{}",
        stderr(&output)
    );
}

fn preview_and_server_dry_run_agree_with_the_webhook() {
    let env = shared();
    let ns = env.namespace("e2e-preview", &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    let dir = tempfile::tempdir().expect("dir");
    let scaled = dir.path().join("scaled.yaml");
    std::fs::write(&scaled, deployment(&ns, "web", 5, "nginx:1.0")).expect("write");
    let image = dir.path().join("image.yaml");
    std::fs::write(&image, deployment(&ns, "web", 2, "nginx:1.1")).expect("write");
    let (scaled, image) = (scaled.to_str().unwrap(), image.to_str().unwrap());

    let output = kubectl_drift(&env, &["preview", "-f", scaled]);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
    assert!(
        stdout(&output).contains("spec.replicas"),
        "{}",
        stdout(&output)
    );

    let output = kubectl_drift(&env, &["preview", "-f", scaled, "--server-dry-run"]);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
    let screen = stdout(&output);
    assert!(screen.contains("They agree."), "{screen}");
    assert!(
        screen.contains(
            "Drift Sentinel: immutable fields changed: spec.replicas; spec.replicas: 2 → 5"
        ),
        "the real webhook's answer is shown: {screen}"
    );
    let output = kubectl_drift(&env, &["preview", "-f", image, "--server-dry-run"]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
    assert!(
        stdout(&output).contains("They agree."),
        "{}",
        stdout(&output)
    );

    // Nothing was stored by the dry runs.
    let live = env.get(&["deployment", "web", "-n", &ns]).expect("web");
    assert_eq!(live["spec"]["replicas"], 2);
}
