//! What controllers do through the webhook, with kube-controller-manager running: the
//! Deployment controller's own updates of a rolled-out Deployment, and finalizer removal from an
//! object being deleted, are never denied.

use std::time::Duration;

use libtest_mimic::Trial;

use crate::env::{deployment, shared, stderr, wait_for};
use crate::trial;

pub fn tests() -> Vec<Trial> {
    vec![
        trial!(a_rollout_under_the_default_rule_is_never_denied),
        trial!(finalizer_removal_while_deleting_is_never_denied),
    ]
}

fn a_rollout_under_the_default_rule_is_never_denied() {
    let env = shared();
    let ns = env.namespace("e2e-rollout", &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    let revision = |env: &crate::env::Env| {
        env.get(&["deployment", "web", "-n", &ns]).and_then(|d| {
            d["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
                .as_str()
                .map(str::to_owned)
        })
    };
    wait_for(
        "revision 1 from the controller",
        Duration::from_secs(60),
        || revision(&env).as_deref() == Some("1"),
    );

    // A release: the controller creates a new ReplicaSet and bumps the revision annotation on
    // the Deployment, an UPDATE that goes through the webhook.
    let output = env.kubectl(&["set", "image", "deployment/web", "app=nginx:1.1", "-n", &ns]);
    assert!(output.status.success(), "{}", stderr(&output));
    wait_for(
        "revision 2 from the controller",
        Duration::from_secs(60),
        || revision(&env).as_deref() == Some("2"),
    );
    let replica_sets = env.get(&["replicasets", "-n", &ns]).expect("replicasets");
    assert_eq!(replica_sets["items"].as_array().map(Vec::len), Some(2));

    // Nothing the controllers sent for this namespace was denied.
    let denied: Vec<String> = env
        .cluster
        .audit_events()
        .into_iter()
        .filter(|e| {
            e["objectRef"]["namespace"] == ns.as_str()
                && e["stage"] == "ResponseComplete"
                && e["responseStatus"]["code"] == 403
        })
        .map(|e| {
            format!(
                "{} {} by {}",
                e["verb"], e["objectRef"]["resource"], e["user"]["username"]
            )
        })
        .collect();
    assert!(denied.is_empty(), "denied: {denied:?}");
    // The controller did write the Deployment (in 1.37 the revision annotation and the status
    // both go through the status subresource), and was never denied (above).
    let controller_updates = env
        .cluster
        .audit_events()
        .into_iter()
        .filter(|e| {
            e["objectRef"]["namespace"] == ns.as_str()
                && e["objectRef"]["resource"] == "deployments"
                && e["verb"] == "update"
                && e["user"]["username"]
                    == "system:serviceaccount:kube-system:deployment-controller"
                && e["responseStatus"]["code"] == 200
        })
        .count();
    assert!(
        controller_updates >= 2,
        "the controller's updates: {controller_updates}"
    );
}

fn finalizer_removal_while_deleting_is_never_denied() {
    let env = shared();
    let ns = env.namespace("e2e-finalizer", &[]);
    // A rule that allows nothing in this namespace.
    env.rule(
        "e2e-finalizer-frozen",
        &format!(
            "mode: enforce\npriority: 10\nnamespaces: [{ns}]\nselectors: [{{apiGroup: apps, kind: Deployment}}]\n"
        ),
    );
    let manifest = deployment(&ns, "web", 1, "nginx:1.0").replace(
        "  labels:\n    app: web\n",
        "  labels:\n    app: web\n  finalizers:\n    - example.com/hold\n",
    );
    env.apply(&manifest);
    crate::env::wait_for_dry_run(
        &env,
        "the frozen rule",
        &deployment(&ns, "web", 1, "nginx:9"),
        |ok, err| !ok && err.contains("e2e-finalizer-frozen"),
    );

    let output = env.kubectl(&["delete", "deployment", "web", "-n", &ns, "--wait=false"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let output = env.kubectl(&[
        "patch",
        "deployment",
        "web",
        "-n",
        &ns,
        "--type=json",
        "-p",
        r#"[{"op": "remove", "path": "/metadata/finalizers"}]"#,
    ]);
    assert!(
        output.status.success(),
        "finalizer removal denied: {}",
        stderr(&output)
    );
    wait_for("the Deployment to be gone", Duration::from_secs(30), || {
        env.get(&["deployment", "web", "-n", &ns]).is_none()
    });
}
