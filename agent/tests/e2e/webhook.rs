//! The webhook as the real API server calls it, through the real kubectl: what users type
//! (`apply`, `scale`, `rollout restart`, `set image`, `--dry-run=server`, `diff`), what kubectl
//! prints, and what the API server's audit log records.

use libtest_mimic::Trial;
use serde_json::Value;

use crate::env::{self, WEBHOOK_NAME, deployment, shared, stderr, wait_for};
use crate::trial;

pub fn tests() -> Vec<Trial> {
    vec![
        trial!(apply_of_an_image_change_is_allowed_and_of_replicas_denied),
        trial!(scale_is_judged_as_spec_replicas),
        trial!(rollout_restart_and_set_image_pass_the_default_rule),
        trial!(warn_mode_dry_run_and_diff),
        trial!(audit_annotations_reach_the_audit_log),
    ]
}

const DEFAULT_RULE: &str = "drift-system/drift-sentinel-default-rule";

/// The start of every denial kubectl prints for the default rule's replicas check.
fn replicas_denial(old: u32, new: u32) -> String {
    format!(
        "admission webhook \"{WEBHOOK_NAME}\" denied the request: Drift Sentinel: immutable fields changed: spec.replicas; spec.replicas: {old} → {new}; rule {DEFAULT_RULE} allows changes only to: spec.template.spec.containers[*].image, spec.template.spec.initContainers[*].image, "
    )
}

fn apply_of_an_image_change_is_allowed_and_of_replicas_denied() {
    let env = shared();
    let ns = env.namespace("e2e-apply", &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));

    let output = env.kubectl_stdin(
        &["apply", "-f", "-"],
        &deployment(&ns, "web", 2, "nginx:1.1"),
    );
    assert!(output.status.success(), "image change: {}", stderr(&output));

    let output = env.kubectl_stdin(
        &["apply", "-f", "-"],
        &deployment(&ns, "web", 5, "nginx:1.1"),
    );
    assert!(!output.status.success(), "replicas change was allowed");
    let printed = stderr(&output);
    assert!(printed.contains(&replicas_denial(2, 5)), "{printed}");
    assert!(
        printed.contains(
            "; to bypass, set annotation drift-sentinel.k8s.io/bypass to an RFC 3339 end (kubectl drift bypass KIND/NAME --for DURATION), or \"true\" for no end"
        ),
        "{printed}"
    );
    let live = env.get(&["deployment", "web", "-n", &ns]).expect("web");
    assert_eq!(live["spec"]["replicas"], 2);
    assert_eq!(
        live["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.1"
    );
}

fn scale_is_judged_as_spec_replicas() {
    let env = shared();
    let ns = env.namespace("e2e-scale", &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));

    let output = env.kubectl(&["scale", "deployment/web", "--replicas=4", "-n", &ns]);
    assert!(!output.status.success(), "scale was allowed");
    assert!(
        stderr(&output).contains(&replicas_denial(2, 4)),
        "{}",
        stderr(&output)
    );

    // A rule of this namespace that makes spec.replicas mutable lets the scale through.
    env.rule(
        "e2e-scale-replicas",
        &format!(
            "mode: enforce\npriority: 10\nnamespaces: [{ns}]\nselectors: [{{apiGroup: apps, kind: Deployment}}]\nmutable: ['spec.replicas']\n"
        ),
    );
    wait_for(
        "the scale to be allowed",
        std::time::Duration::from_secs(30),
        || {
            env.kubectl(&[
                "scale",
                "deployment/web",
                "--replicas=4",
                "-n",
                &ns,
                "--dry-run=server",
            ])
            .status
            .success()
        },
    );
    let output = env.kubectl(&["scale", "deployment/web", "--replicas=4", "-n", &ns]);
    assert!(output.status.success(), "{}", stderr(&output));
    let live = env.get(&["deployment", "web", "-n", &ns]).expect("web");
    assert_eq!(live["spec"]["replicas"], 4);
}

fn rollout_restart_and_set_image_pass_the_default_rule() {
    let env = shared();
    let ns = env.namespace("e2e-restart", &[]);
    env.apply(&deployment(&ns, "web", 1, "nginx:1.0"));

    let output = env.kubectl(&["rollout", "restart", "deployment/web", "-n", &ns]);
    assert!(
        output.status.success(),
        "rollout restart: {}",
        stderr(&output)
    );
    let output = env.kubectl(&["set", "image", "deployment/web", "app=nginx:2.0", "-n", &ns]);
    assert!(output.status.success(), "set image: {}", stderr(&output));
    let live = env.get(&["deployment", "web", "-n", &ns]).expect("web");
    assert_eq!(
        live["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:2.0"
    );
    assert!(
        live["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"]
            .is_string()
    );

    // What the default rule does not allow: an environment variable.
    let output = env.kubectl(&["set", "env", "deployment/web", "A=1", "-n", &ns]);
    assert!(!output.status.success(), "set env was allowed");
    assert!(
        stderr(&output).contains(
            "denied the request: Drift Sentinel: immutable fields changed: spec.template.spec.containers[0].env"
        ),
        "{}",
        stderr(&output)
    );
}

fn warn_mode_dry_run_and_diff() {
    let env = shared();
    // Enforce: a server-side dry run reaches the agent and is denied; nothing is stored.
    let ns = env.namespace("e2e-dryrun", &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    let output = env.kubectl_stdin(
        &["apply", "--dry-run=server", "-f", "-"],
        &deployment(&ns, "web", 3, "nginx:1.0"),
    );
    assert!(
        !output.status.success(),
        "dry run of a denied change succeeded"
    );
    assert!(
        stderr(&output).contains(&replicas_denial(2, 3)),
        "{}",
        stderr(&output)
    );

    // Warn: the change goes through and kubectl shows the reason as a warning.
    let ns = env.namespace("e2e-warn", &[("drift-sentinel.k8s.io/mode", "warn")]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    let output = env.kubectl_stdin(
        &["apply", "-f", "-"],
        &deployment(&ns, "web", 3, "nginx:1.0"),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stderr(&output).contains(
            "Warning: Drift Sentinel: immutable fields changed: spec.replicas; spec.replicas: 2 → 3; "
        ),
        "{}",
        stderr(&output)
    );

    // A server-side dry run warns the same and stores nothing.
    let output = env.kubectl_stdin(
        &["apply", "--dry-run=server", "-f", "-"],
        &deployment(&ns, "web", 7, "nginx:1.0"),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("spec.replicas: 3 → 7"),
        "{}",
        stderr(&output)
    );
    // `kubectl diff` asks the server for a dry run too: the warning, the diff, nothing stored.
    let output = env.kubectl_stdin(
        &["diff", "-f", "-"],
        &deployment(&ns, "web", 9, "nginx:1.0"),
    );
    assert_eq!(
        output.status.code(),
        Some(1),
        "kubectl diff: {}",
        stderr(&output)
    );
    assert!(
        env::stdout(&output).contains("+  replicas: 9"),
        "{}",
        env::stdout(&output)
    );
    assert!(
        stderr(&output).contains("spec.replicas: 3 → 9"),
        "{}",
        stderr(&output)
    );
    let live = env.get(&["deployment", "web", "-n", &ns]).expect("web");
    assert_eq!(live["spec"]["replicas"], 3);
}

fn audit_annotations_reach_the_audit_log() {
    let env = shared();
    let ns = env.namespace("e2e-audit", &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    let output = env.kubectl_stdin(
        &["apply", "-f", "-"],
        &deployment(&ns, "web", 6, "nginx:1.0"),
    );
    assert!(!output.status.success());

    let annotation = |event: &Value, key: &str| {
        event["annotations"][format!("{WEBHOOK_NAME}/{key}")]
            .as_str()
            .map(str::to_owned)
    };
    let mut found = None;
    wait_for(
        "the denial in the audit log",
        std::time::Duration::from_secs(15),
        || {
            found = env.cluster.audit_events().into_iter().find(|e| {
                e["stage"] == "ResponseComplete"
                    && e["objectRef"]["namespace"] == ns.as_str()
                    && e["verb"] == "patch"
                    && annotation(e, "result").as_deref() == Some("denied")
            });
            found.is_some()
        },
    );
    let event = found.expect("event");
    assert_eq!(annotation(&event, "rule").as_deref(), Some(DEFAULT_RULE));
    assert_eq!(annotation(&event, "mode").as_deref(), Some("enforce"));
    assert_eq!(
        annotation(&event, "denied-paths").as_deref(),
        Some("spec.replicas")
    );
    assert_eq!(event["responseStatus"]["code"], 403);

    // An allowed, matched UPDATE carries the annotations too.
    let output = env.kubectl_stdin(
        &["apply", "-f", "-"],
        &deployment(&ns, "web", 2, "nginx:1.1"),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    wait_for(
        "the allowed update in the audit log",
        std::time::Duration::from_secs(15),
        || {
            env.cluster.audit_events().iter().any(|e| {
                e["stage"] == "ResponseComplete"
                    && e["objectRef"]["namespace"] == ns.as_str()
                    && annotation(e, "result").as_deref() == Some("allowed")
                    && annotation(e, "rule").as_deref() == Some(DEFAULT_RULE)
            })
        },
    );
}
