//! The cluster commands through the real binary against the API server double over real HTTP:
//! `preview -f FILE`, preview through `$EDITOR`, `--server-dry-run` (the double answering a
//! dry-run update as an installed webhook would), exit codes, `-o json`, and one command through
//! the real kubectl.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use support::cluster::{AGENT_NAMESPACE, Cluster, assert_contains, edited, json_of, rule, screen};

const WEBHOOK: &str = "validate.drift-sentinel.k8s.io";
/// Replica-only for the payments team (docs/examples/rule-replica-only.yaml): scaling, and the
/// last-applied annotation that `kubectl apply` rewrites with it, are the only changes allowed.
const REPLICA_ONLY: &str = "mode: enforce\npriority: 200\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\nlabels: ['team=payments']\nmutable: ['spec.replicas', \"metadata.annotations['kubectl.kubernetes.io/last-applied-configuration']\"]\n";
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

#[test]
fn preview_of_a_file_against_the_live_object() {
    let cluster = Cluster::start("default");
    let before = cluster.live_web("prod");

    // Replicas are not mutable: denied, with the paths and the webhook's message.
    let scaled = cluster.file("scaled.yaml", &edited("Deployment", "prod", 5, "nginx:1"));
    let output = cluster.plugin(&["preview", "-f", &scaled]);
    assert_eq!(output.status.code(), Some(1), "{}", screen(&output));
    assert_contains(
        &output,
        &[
            "Object:  Deployment prod/web",
            "Rule:    ops/images (cluster rule, priority 10)",
            "Mode:    enforce (from the rule)",
            "spec.replicas",
            "2 → 5",
            "denied",
            "Verdict: DENIED",
            &format!(
                "admission webhook \"{WEBHOOK}\" denied the request: Drift Sentinel: immutable fields changed: spec.replicas; spec.replicas: 2 → 5"
            ),
            "rule ConfigMap ops/broken",
        ],
    );
    // The server's metadata and the status are not changes.
    for path in ["resourceVersion", "uid", "creationTimestamp", "status"] {
        assert!(
            !screen(&output).contains(path),
            "{path} reported:\n{}",
            screen(&output)
        );
    }

    // Only the image (mutable) and a label (excluded): allowed. A file without a namespace
    // takes -n's.
    let mut image = edited("Deployment", "prod", 2, "nginx:2");
    image["metadata"]["labels"]["team"] = json!("web");
    image["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("namespace");
    let image = cluster.file("image.yaml", &image);
    let output = cluster.plugin(&["preview", "-f", &image, "-n", "prod"]);
    assert_eq!(output.status.code(), Some(0), "{}", screen(&output));
    assert_contains(
        &output,
        &[
            "spec.template.spec.containers[0].image",
            "\"nginx:1\" → \"nginx:2\"",
            "mutable",
            "metadata.labels.team",
            "excluded",
            "Verdict: ALLOWED (only mutable fields changed)",
        ],
    );

    // In staging the namespace says warn: a violation allowed, exit 3.
    let staging = cluster.file(
        "staging.yaml",
        &edited("Deployment", "staging", 5, "nginx:1"),
    );
    let output = cluster.plugin(&["preview", "-f", &staging]);
    assert_eq!(output.status.code(), Some(3), "{}", screen(&output));
    assert_contains(
        &output,
        &[
            "Mode:    warn (from namespace annotation drift-sentinel.k8s.io/mode)",
            "Verdict: ALLOWED WITH A VIOLATION",
            "Warning: Drift Sentinel: immutable fields changed: spec.replicas",
        ],
    );

    // -o json: the same facts for scripts.
    let output = cluster.plugin(&["preview", "-f", &scaled, "-o", "json"]);
    assert_eq!(output.status.code(), Some(1), "{}", screen(&output));
    let document = json_of(&output);
    assert_eq!(
        document["object"],
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "prod", "name": "web"})
    );
    assert_eq!(document["rule"], "ops/images");
    assert_eq!(document["result"], "denied");
    assert_eq!(document["deniedPaths"], json!(["spec.replicas"]));
    assert_eq!(document["exitCode"], 1);
    assert!(document.get("serverDryRun").is_none());

    // Nothing was written.
    assert_eq!(cluster.live_web("prod"), before);
    assert!(
        !cluster.api().requests().iter().any(|r| r.starts_with("PUT")
            || r.starts_with("PATCH")
            || r.starts_with("POST /apis/apps")),
        "{:?}",
        cluster.api().requests()
    );
}

/// The `checkout` Deployment as a person keeps it in git: only what they chose to set.
fn checkout(replicas: u32, image: &str, env: &[(&str, &str)]) -> Value {
    let env = drift_testkit::objects::env_list(env);
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "checkout", "namespace": "prod",
            "labels": {"app": "checkout", "team": "payments"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "checkout"}},
            "template": {
                "metadata": {"labels": {"app": "checkout"}},
                "spec": {"containers": [{"name": "app", "image": image,
                    "ports": [{"containerPort": 8080}], "env": env}]}
            }
        }
    })
}

/// `manifest` as the API server keeps it after `kubectl apply -f`: with kubectl's last-applied
/// annotation, every field the server defaulted, the server's metadata and a status — and an
/// annotation someone added with `kubectl annotate`, which no manifest has.
fn applied(manifest: &Value) -> Value {
    let mut last_applied = manifest.clone();
    last_applied["metadata"]["annotations"] = json!({});
    let mut live = manifest.clone();
    live["metadata"]["annotations"] = json!({
        "deployment.kubernetes.io/revision": "1",
        "example.com/on-call": "payments-primary",
        LAST_APPLIED: format!("{}\n", serde_json::to_string(&last_applied).unwrap()),
    });
    live["metadata"]["uid"] = json!("6c0d3a4e-0000-4000-8000-000000000001");
    live["metadata"]["generation"] = json!(1);
    live["metadata"]["creationTimestamp"] = json!("2025-01-01T00:00:00Z");
    let spec = &mut live["spec"];
    spec["progressDeadlineSeconds"] = json!(600);
    spec["revisionHistoryLimit"] = json!(10);
    spec["strategy"] = json!({"type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}});
    spec["template"]["metadata"]["creationTimestamp"] = Value::Null;
    let pod = &mut spec["template"]["spec"];
    pod["dnsPolicy"] = json!("ClusterFirst");
    pod["restartPolicy"] = json!("Always");
    pod["schedulerName"] = json!("default-scheduler");
    pod["securityContext"] = json!({});
    pod["terminationGracePeriodSeconds"] = json!(30);
    let container = &mut pod["containers"][0];
    container["imagePullPolicy"] = json!("IfNotPresent");
    container["resources"] = json!({});
    container["terminationMessagePath"] = json!("/dev/termination-log");
    container["terminationMessagePolicy"] = json!("File");
    container["ports"][0]["protocol"] = json!("TCP");
    live["status"] = json!({"observedGeneration": 1, "replicas": 2, "readyReplicas": 2});
    live
}

fn paths(document: &Value) -> Vec<(String, String)> {
    document["changes"]
        .as_array()
        .unwrap_or_else(|| panic!("no changes in {document:#}"))
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_owned(),
                c["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Scaling `checkout` in a manifest that leaves out every defaulted field (`scaled`, `env` its
/// variables): allowed, only the replicas and the last-applied annotation (the file, as kubectl
/// writes it) change.
fn assert_scaling_is_allowed(cluster: &Cluster, scaled: &str, env: &[(&str, &str)]) {
    let output = cluster.plugin(&["preview", "-f", scaled]);
    assert_eq!(output.status.code(), Some(0), "{}", screen(&output));
    assert_contains(
        &output,
        &[
            "Object:  Deployment prod/checkout",
            "Rule:    ops/replica-only (cluster rule, priority 200)",
            "spec.replicas",
            "2 → 5",
            "Verdict: ALLOWED (only mutable fields changed)",
        ],
    );
    for untouched in [
        "imagePullPolicy",
        "terminationMessage",
        "revisionHistoryLimit",
        "strategy",
        "progressDeadlineSeconds",
        "dnsPolicy",
        "schedulerName",
        "protocol",
        "example.com/on-call",
        "deployment.kubernetes.io/revision",
        "<absent>",
    ] {
        assert!(
            !screen(&output).contains(untouched),
            "{untouched} reported:\n{}",
            screen(&output)
        );
    }
    let output = cluster.plugin(&["preview", "-f", scaled, "-o", "json"]);
    assert_eq!(output.status.code(), Some(0), "{}", screen(&output));
    let document = json_of(&output);
    let mut changed = paths(&document);
    changed.sort();
    assert_eq!(
        changed,
        [
            (
                format!("metadata.annotations['{LAST_APPLIED}']"),
                "mutable".to_owned()
            ),
            ("spec.replicas".to_owned(), "mutable".to_owned()),
        ],
        "{document:#}"
    );
    // The new last-applied configuration is the file, as kubectl writes it.
    let annotation = document["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"].as_str().unwrap().contains(LAST_APPLIED))
        .unwrap()["new"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(annotation.ends_with('\n'), "{annotation:?}");
    let mut expected = checkout(5, "shop:1.0", env);
    expected["metadata"]["annotations"] = json!({});
    assert_eq!(
        serde_json::from_str::<Value>(&annotation).unwrap(),
        expected
    );
}

/// `--replace`: the file as written replaces the object (kubectl replace), so what the server
/// defaulted and the annotations the file lacks are removed.
fn assert_replace_compares_the_file_as_written(cluster: &Cluster, scaled: &str) {
    let output = cluster.plugin(&["preview", "-f", scaled, "--replace", "-o", "json"]);
    assert_eq!(output.status.code(), Some(1), "{}", screen(&output));
    let document = json_of(&output);
    let denied: Vec<&str> = document["deniedPaths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    for path in [
        "metadata.annotations['example.com/on-call']",
        "spec.progressDeadlineSeconds",
        "spec.revisionHistoryLimit",
        "spec.strategy",
        "spec.template.spec.containers[0].imagePullPolicy",
        "spec.template.spec.containers[0].terminationMessagePath",
        "spec.template.spec.dnsPolicy",
    ] {
        assert!(denied.contains(&path), "{path} not denied: {denied:?}");
    }
    assert!(
        document["changes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["path"] == "spec.revisionHistoryLimit")
            .all(|c| c["old"] == 10 && c["new"].is_null()),
        "{document:#}"
    );
    let output = cluster.plugin(&["preview", "-f", scaled, "--replace"]);
    assert_eq!(output.status.code(), Some(1), "{}", screen(&output));
    assert_contains(&output, &["spec.revisionHistoryLimit", "10 → <absent>"]);
}

/// `preview -f` compares what `kubectl apply -f` would make of the live object, not the file as
/// written: what the server defaulted stays, what the last apply set and the file no longer has
/// is removed, the last-applied annotation becomes the file's. `--replace` compares the file as
/// written, as `kubectl replace` would send it.
#[test]
fn preview_of_a_hand_written_manifest_is_what_kubectl_apply_would_send() {
    let cluster = Cluster::start("prod");
    cluster
        .api()
        .apply(rule("ops", "replica-only", REPLICA_ONLY));
    let env = [("MODE", "live"), ("LOG", "info")];
    cluster.api().apply(applied(&checkout(2, "shop:1.0", &env)));
    let live = || {
        cluster
            .api()
            .get("apps/v1", "Deployment", "prod", "checkout")
            .unwrap()
    };
    let before = live();

    // Scaling in the manifest, which leaves out every defaulted field: allowed.
    let scaled = cluster.file("scaled.yaml", &checkout(5, "shop:1.0", &env));
    assert_scaling_is_allowed(&cluster, &scaled, &env);

    // A new image: denied, and only the image.
    let image = cluster.file("image.yaml", &checkout(2, "shop:2.0", &env));
    let output = cluster.plugin(&["preview", "-f", &image, "-o", "json"]);
    assert_eq!(output.status.code(), Some(1), "{}", screen(&output));
    let document = json_of(&output);
    assert_eq!(
        document["deniedPaths"],
        json!(["spec.template.spec.containers[0].image"]),
        "{document:#}"
    );

    // An env var the last apply set, no longer in the file: kubectl apply removes it.
    let dropped = cluster.file(
        "dropped.yaml",
        &checkout(2, "shop:1.0", &[("MODE", "live")]),
    );
    let output = cluster.plugin(&["preview", "-f", &dropped]);
    assert_eq!(output.status.code(), Some(1), "{}", screen(&output));
    assert_contains(
        &output,
        &[
            "spec.template.spec.containers[0].env[1]",
            "{\"name\":\"LOG\",\"value\":\"info\"} → <absent>",
            "Verdict: DENIED",
        ],
    );
    let document = json_of(&cluster.plugin(&["preview", "-f", &dropped, "-o", "json"]));
    assert_eq!(
        document["deniedPaths"],
        json!(["spec.template.spec.containers[0].env[1]"]),
        "{document:#}"
    );

    // The server-side dry run is sent the object kubectl apply would make: no webhook
    // installed, both allow.
    let output = cluster.plugin(&["preview", "-f", &scaled, "--server-dry-run"]);
    assert_eq!(output.status.code(), Some(0), "{}", screen(&output));
    assert_contains(&output, &["They agree."]);

    assert_replace_compares_the_file_as_written(&cluster, &scaled);

    // --replace is about a file.
    let output = cluster.plugin(&["preview", "deploy/checkout", "--replace"]);
    assert_eq!(output.status.code(), Some(2), "{}", screen(&output));

    assert_eq!(live(), before, "nothing is applied");
}

fn script(dir: &Path, name: &str, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn preview_through_the_editor_applies_nothing() {
    let cluster = Cluster::start("prod");
    let before = cluster.live_web("prod");

    // kubectl's way: the command split on spaces, the file's path appended.
    let output = cluster.run(
        &["preview", "deploy/web"],
        &[("EDITOR", "sed -i s/nginx:1/nginx:2/")],
    );
    assert_eq!(output.status.code(), Some(0), "{}", screen(&output));
    assert_contains(
        &output,
        &[
            "Object:  Deployment prod/web",
            "spec.template.spec.containers[0].image",
            "\"nginx:1\" → \"nginx:2\"",
            "mutable",
            "Verdict: ALLOWED (only mutable fields changed)",
        ],
    );

    // KUBE_EDITOR before EDITOR; the file opened is the live object without what the server
    // manages.
    let seen = cluster.path().join("seen.yaml");
    let editor = script(
        cluster.path(),
        "scale.sh",
        &format!(
            "cp \"$1\" '{}'\nsed -i 's/replicas: 2/replicas: 4/' \"$1\"",
            seen.display()
        ),
    );
    let output = cluster.run(
        &["preview", "deployment.apps/web"],
        &[("KUBE_EDITOR", &editor), ("EDITOR", "false")],
    );
    assert_eq!(output.status.code(), Some(1), "{}", screen(&output));
    assert_contains(&output, &["spec.replicas", "2 → 4", "Verdict: DENIED"]);
    let opened = std::fs::read_to_string(&seen).unwrap();
    assert!(
        opened.contains("image: nginx:1") && opened.contains("name: web"),
        "{opened}"
    );
    for hidden in [
        "resourceVersion",
        "uid:",
        "creationTimestamp",
        "managedFields",
        "status:",
        "readyReplicas",
    ] {
        assert!(!opened.contains(hidden), "{hidden} shown in\n{opened}");
    }
    assert!(
        opened.starts_with("# "),
        "the file explains itself:\n{opened}"
    );

    // An editor that changes nothing (or saves an empty file): cancelled, exit 0.
    let output = cluster.run(&["preview", "deploy/web"], &[("EDITOR", "true")]);
    assert_eq!(output.status.code(), Some(0), "{}", screen(&output));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "Edit cancelled, no changes made.\n"
    );
    let empty = script(cluster.path(), "empty.sh", ": > \"$1\"");
    let output = cluster.run(&["preview", "deploy/web"], &[("EDITOR", &empty)]);
    assert_eq!(output.status.code(), Some(0), "{}", screen(&output));
    assert_contains(&output, &["Edit cancelled, saved file was empty."]);

    // An editor that fails, or is not there: exit 2.
    let output = cluster.run(&["preview", "deploy/web"], &[("EDITOR", "false")]);
    assert_eq!(output.status.code(), Some(2), "{}", screen(&output));
    assert_contains(&output, &["the editor \"false\" failed"]);
    // Broken YAML: the edit is kept for the user.
    let broken = script(cluster.path(), "broken.sh", "echo 'spec: [' >> \"$1\"");
    let output = cluster.run(&["preview", "deploy/web"], &[("EDITOR", &broken)]);
    assert_eq!(output.status.code(), Some(2), "{}", screen(&output));
    assert_contains(&output, &["a copy of your changes has been stored to"]);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let kept = stderr.trim().rsplit(' ').next().unwrap();
    assert!(Path::new(kept).exists(), "{stderr}");
    std::fs::remove_file(kept).unwrap();

    assert_eq!(cluster.live_web("prod"), before, "nothing is applied");
}

#[test]
fn server_dry_run_agreeing_and_disagreeing() {
    let cluster = Cluster::start("prod");
    let before = cluster.live_web("prod");
    let scaled = cluster.file("scaled.yaml", &edited("Deployment", "prod", 5, "nginx:1"));
    let image = cluster.file("image.yaml", &edited("Deployment", "prod", 2, "nginx:2"));

    // The installed webhook denies as kubectl drift does: both shown, they agree, exit 1.
    let local = json_of(&cluster.plugin(&["preview", "-f", &scaled, "-o", "json"]));
    let message = local["apiServerMessage"].as_str().unwrap().to_owned();
    cluster.api().deny_dry_runs(message.clone());
    let output = cluster.plugin(&["preview", "-f", &scaled, "--server-dry-run"]);
    assert_eq!(output.status.code(), Some(1), "{}", screen(&output));
    assert_contains(
        &output,
        &[
            "Verdict: DENIED",
            "Server-side dry run",
            "kubectl drift:  DENIED",
            "API server:     DENIED (403 Forbidden)",
            &format!("Error from server (Forbidden): {message}"),
            "They agree.",
        ],
    );
    let dry_runs: Vec<String> = cluster
        .api()
        .requests()
        .into_iter()
        .filter(|r| r.contains("dryRun=All"))
        .collect();
    assert_eq!(dry_runs.len(), 1, "{dry_runs:?}");
    assert!(
        dry_runs[0].starts_with("PUT /apis/apps/v1/namespaces/prod/deployments/web?"),
        "{dry_runs:?}"
    );

    // The webhook denies what kubectl drift allows: exit 2, saying so.
    let output = cluster.plugin(&["preview", "-f", &image, "--server-dry-run"]);
    assert_eq!(output.status.code(), Some(2), "{}", screen(&output));
    assert_contains(
        &output,
        &[
            "Verdict: ALLOWED",
            "kubectl drift:  ALLOWED",
            "API server:     DENIED (403 Forbidden)",
            "They DISAGREE.",
        ],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    // One error line (besides the warning that no agent pod told the tiers: see AGENT_NAMESPACE).
    assert_eq!(
        stderr
            .lines()
            .filter(|l| !l.starts_with("warning: "))
            .count(),
        1,
        "{stderr}"
    );
    assert!(
        stderr.contains("the verdicts disagree: kubectl drift allows the update, the API server's dry run denies it; the installed webhook runs a different rule set"),
        "{stderr}"
    );

    // No webhook answers (not installed): the server allows what kubectl drift denies.
    cluster.api().heal();
    let output = cluster.plugin(&["preview", "-f", &scaled, "--server-dry-run", "-o", "json"]);
    assert_eq!(output.status.code(), Some(2), "{}", screen(&output));
    let document = json_of(&output);
    assert_eq!(document["exitCode"], 2);
    assert_eq!(document["allowed"], false);
    assert_eq!(document["serverDryRun"]["allowed"], true);
    assert_eq!(document["serverDryRun"]["agrees"], false);
    assert_contains(
        &output,
        &["kubectl drift denies the update, the API server's dry run allows it"],
    );

    // Both allow: exit 0, agreeing.
    let output = cluster.plugin(&["preview", "-f", &image, "--server-dry-run", "-o", "json"]);
    assert_eq!(output.status.code(), Some(0), "{}", screen(&output));
    let document = json_of(&output);
    assert_eq!(
        document["serverDryRun"],
        json!({"allowed": true, "code": 200, "reason": "", "message": null, "warnings": [],
            "agrees": true, "messagesDiffer": false})
    );

    // Both deny, but the webhook with another message: agreeing, the difference pointed out.
    cluster.api().deny_dry_runs(format!(
        "admission webhook \"{WEBHOOK}\" denied the request: Drift Sentinel: immutable fields changed: spec"
    ));
    let output = cluster.plugin(&["preview", "-f", &scaled, "--server-dry-run"]);
    assert_eq!(output.status.code(), Some(1), "{}", screen(&output));
    assert_contains(
        &output,
        &["They agree on the verdict, but not on the message"],
    );

    // Another webhook's denial is not Drift Sentinel's verdict.

    cluster
        .api()
        .deny_dry_runs("admission webhook \"policy.example.com\" denied the request: no");
    let output = cluster.plugin(&["preview", "-f", &image, "--server-dry-run"]);
    assert_eq!(output.status.code(), Some(2), "{}", screen(&output));
    assert_contains(
        &output,
        &["denied by another admission webhook, \"policy.example.com\""],
    );

    // Dry runs change nothing.
    assert_eq!(cluster.live_web("prod"), before);
}

/// `kubectl drift …` through the real kubectl, which finds the plugin on PATH; the kubeconfig
/// from KUBECONFIG, as kubectl passes the environment on.
#[test]
fn kubectl_runs_a_cluster_command() {
    let cluster = Cluster::start("prod");
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let kubectl = std::env::var_os("KUBECTL")
        .map(PathBuf::from)
        .or_else(|| Some(repo.join(".tools/bin/kubectl")).filter(|p| p.exists()))
        .expect("the real kubectl is needed: run `bash .ci/install-tools` (or set KUBECTL)");
    let plugin_dir = PathBuf::from(env!("CARGO_BIN_EXE_kubectl-drift"));
    let path = format!(
        "{}:{}",
        plugin_dir.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let scaled = cluster.file("scaled.yaml", &edited("Deployment", "prod", 5, "nginx:1"));
    let output = Command::new(kubectl)
        .args([
            "drift",
            "preview",
            "-f",
            &scaled,
            "--agent-namespace",
            AGENT_NAMESPACE,
        ])
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .env("KUBECONFIG", cluster.kubeconfig())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", screen(&output));
    assert_contains(
        &output,
        &["Object:  Deployment prod/web", "Verdict: DENIED"],
    );
}

/// The double's dry runs, which `--server-dry-run` relies on: validated, answered with the
/// would-be object, never stored; other writes with dryRun are refused rather than stored.
#[test]
fn the_double_answers_dry_runs_without_storing() {
    let cluster = Cluster::start("prod");
    let before = cluster.live_web("prod");
    let url = format!(
        "{}/apis/apps/v1/namespaces/prod/deployments/web?dryRun=All",
        cluster.api().url()
    );
    let client = reqwest::blocking::Client::new();
    let mut scaled = before.clone();
    scaled["spec"]["replicas"] = json!(7);
    let response = client.put(&url).json(&scaled).send().unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let answer: Value = response.json().unwrap();
    assert_eq!(answer["spec"]["replicas"], 7);
    assert_eq!(
        answer["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    let response = client
        .patch(&url)
        .header("content-type", "application/merge-patch+json")
        .body(r#"{"spec":{"replicas":9}}"#)
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.json::<Value>().unwrap()["spec"]["replicas"], 9);
    // A stale resourceVersion is still a conflict.
    scaled["metadata"]["resourceVersion"] = json!("1");
    let response = client.put(&url).json(&scaled).send().unwrap();
    assert_eq!(response.status().as_u16(), 409);
    let response = client.delete(&url).send().unwrap();
    assert_eq!(response.status().as_u16(), 400);
    cluster
        .api()
        .deny_dry_runs("admission webhook \"x\" denied the request: no");
    let mut fresh = before.clone();
    fresh["spec"]["replicas"] = json!(3);
    let response = client.put(&url).json(&fresh).send().unwrap();
    assert_eq!(response.status().as_u16(), 403);
    let status: Value = response.json().unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["message"],
        "admission webhook \"x\" denied the request: no"
    );
    assert_eq!(cluster.live_web("prod"), before);
}

/// A dry run that conflicts (`409`: the object changed since it was read, e.g. a controller
/// wrote its status) is tried again on the new version, and after five conflicts the preview
/// says what happened instead of showing a verdict it could not check.
#[test]
fn server_dry_run_conflicts_are_retried_on_the_new_version() {
    let cluster = Cluster::start("prod");
    let scaled = cluster.file("scaled.yaml", &edited("Deployment", "prod", 5, "nginx:1"));
    cluster.api().inject(drift_testkit::Fault::FailPath {
        contains: "dryRun=All".into(),
        status: 409,
    });
    let output = cluster.plugin(&["preview", "-f", &scaled, "--server-dry-run"]);
    assert_eq!(output.status.code(), Some(2), "{}", screen(&output));
    assert_contains(
        &output,
        &["the object changed while it was being previewed, run the preview again"],
    );
    let dry_runs = cluster
        .api()
        .requests()
        .into_iter()
        .filter(|r| r.contains("dryRun=All"))
        .count();
    assert_eq!(
        dry_runs, 5,
        "each attempt reads the live object again and retries"
    );
}
