//! `kubectl drift blame` against the real API server, through the real kubectl (issue 43 item
//! 3, reference §9): a Deployment applied client-side (`kubectl apply`, its last-applied
//! baseline) and one applied server-side by an `Apply` manager (`kubectl apply --server-side
//! --field-manager kustomize-controller`, as Flux writes), each then drifted by a real
//! `kubectl edit` as alice under a warn-mode rule: blame marks the edited field with declared vs
//! live, the manager and operation owning it, and alice and "warn mode" from the webhook's
//! record of the edit; `-o json` is the documented document. And the errors a user meets.

use std::time::Duration;

use libtest_mimic::Trial;
use serde_json::Value;

use crate::env::{
    Env, deployment, edit_replicas_as, shared, stderr, stdout, wait_for, wait_for_dry_run,
    warn_rule,
};
use crate::plugin::kubectl_drift;
use crate::trial;

pub fn tests() -> Vec<Trial> {
    vec![
        trial!(blame_marks_a_kubectl_edit_of_a_client_side_applied_deployment),
        trial!(blame_marks_a_kubectl_edit_of_a_server_side_applied_deployment),
    ]
}

const CSA_NS: &str = "e2e-blame-csa";
const SSA_NS: &str = "e2e-blame-ssa";

/// Applies a warn-mode rule for `ns` and waits until the agent judges with it (a dry-run
/// update of a `probe` Deployment is warned).
fn warned(env: &Env, ns: &str) {
    env.apply(&deployment(ns, "probe", 1, "nginx:1.0"));
    env.rule(ns, &warn_rule(ns));
    wait_for_dry_run(
        env,
        ns,
        &deployment(ns, "probe", 9, "nginx:1.0"),
        |ok, err| ok && err.contains(&format!("rule drift-system/{ns}")),
    );
}

/// Waits until the webhook's record of alice's warned edit of `name` is an Event.
fn wait_for_alice_record(env: &Env, ns: &str, name: &str) {
    wait_for("alice's DriftWarned Event", Duration::from_secs(30), || {
        env.get(&["events.events.k8s.io", "-n", ns])
            .and_then(|list| list["items"].as_array().cloned())
            .is_some_and(|items| {
                items.iter().any(|e| {
                    e["reason"] == "DriftWarned"
                        && e["regarding"]["name"] == name
                        && e["note"].as_str().is_some_and(|n| n.contains("alice"))
                })
            })
    });
}

/// `kubectl drift blame deploy/NAME -n NS -o json`, parsed.
fn blame_json(env: &Env, ns: &str, name: &str) -> Value {
    let object = format!("deploy/{name}");
    let output = kubectl_drift(env, &["blame", &object, "-n", ns, "-o", "json"]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
    serde_json::from_slice(&output.stdout).expect("blame -o json is JSON")
}

/// The row of `path` in a blame document.
fn row<'d>(document: &'d Value, path: &str) -> &'d Value {
    document["fields"]
        .as_array()
        .expect("fields")
        .iter()
        .find(|f| f["path"] == path)
        .unwrap_or_else(|| panic!("no field {path}: {document:#}"))
}

fn blame_marks_a_kubectl_edit_of_a_client_side_applied_deployment() {
    let env = shared();
    let ns = env.namespace(CSA_NS, &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    warned(&env, &ns);
    edit_replicas_as(&env, &ns, "web", "alice", 2, 5);
    wait_for_alice_record(&env, &ns, "web");

    let document = blame_json(&env, &ns, "web");
    assert_eq!(document["result"], "drifted", "{document:#}");
    assert_eq!(document["lastApplied"], true);
    assert_eq!(document["rule"], format!("drift-system/{ns}"));
    assert_eq!(document["mode"], "warn");
    let replicas = row(&document, "spec.replicas");
    assert_eq!(replicas["drifted"], true, "{replicas:#}");
    assert_eq!(replicas["value"], "5");
    assert_eq!(replicas["owner"]["manager"], "kubectl-edit");
    assert_eq!(replicas["owner"]["operation"], "Update");
    // What kubectl apply declared is owned by client-side apply's manager.
    let image = row(&document, "spec.template.spec.containers[0].image");
    assert_eq!(image["owner"]["manager"], "kubectl-client-side-apply");
    assert!(image.get("drifted").is_none(), "{image:#}");
    let drift = document["drift"].as_array().expect("drift");
    assert_eq!(drift.len(), 1, "{document:#}");
    assert_eq!(drift[0]["path"], "spec.replicas");
    assert_eq!(drift[0]["declared"], "2");
    assert_eq!(drift[0]["live"], "5");
    assert_eq!(drift[0]["changedBy"]["manager"], "kubectl-edit");
    assert_eq!(drift[0]["who"]["user"], "alice", "{document:#}");
    assert_eq!(drift[0]["who"]["why"]["kind"], "warn-mode");
    // The last-applied annotation, long JSON, is cut.
    let annotation = row(
        &document,
        "metadata.annotations['kubectl.kubernetes.io/last-applied-configuration']",
    );
    assert!(
        annotation["value"]
            .as_str()
            .is_some_and(|v| v.ends_with('…')),
        "{annotation:#}"
    );

    let output = kubectl_drift(&env, &["blame", "deploy/web", "-n", &ns]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}{}", stderr(&output));
    assert!(
        text.lines().any(|l| l.starts_with("! kubectl-edit")
            && l.contains("Update")
            && l.contains("spec.replicas")),
        "{text}"
    );
    assert!(
        text.contains("! spec.replicas: declared 2, live 5")
            && text.contains("who: user alice, warn mode"),
        "{text}"
    );

    // The errors a user meets name the object and the fix.
    let missing = kubectl_drift(&env, &["blame", "deploy/nope", "-n", &ns]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        stderr(&missing).contains(&format!(
            "deployments.apps \"nope\" in namespace \"{ns}\" not found: check the name and the namespace"
        )),
        "{}",
        stderr(&missing)
    );
    let kind = kubectl_drift(&env, &["blame", "gizmo/web", "-n", &ns]);
    assert_eq!(kind.status.code(), Some(2));
    assert!(
        stderr(&kind).contains("the server doesn't have a resource type \"gizmo\"")
            && stderr(&kind).contains("kubectl api-resources"),
        "{}",
        stderr(&kind)
    );
}

fn blame_marks_a_kubectl_edit_of_a_server_side_applied_deployment() {
    let env = shared();
    let ns = env.namespace(SSA_NS, &[]);
    let applied = env.kubectl_stdin(
        &[
            "apply",
            "--server-side",
            "--field-manager",
            "kustomize-controller",
            "-f",
            "-",
        ],
        &deployment(&ns, "web", 2, "nginx:1.0"),
    );
    assert!(applied.status.success(), "{}", stderr(&applied));
    warned(&env, &ns);
    edit_replicas_as(&env, &ns, "web", "alice", 2, 5);
    wait_for_alice_record(&env, &ns, "web");

    let document = blame_json(&env, &ns, "web");
    assert_eq!(document["result"], "drifted", "{document:#}");
    assert_eq!(document["lastApplied"], false);
    let replicas = row(&document, "spec.replicas");
    assert_eq!(replicas["drifted"], true, "{replicas:#}");
    assert_eq!(replicas["owner"]["manager"], "kubectl-edit");
    assert_eq!(replicas["owner"]["operation"], "Update");
    // The rest stays the Apply manager's.
    let image = row(&document, "spec.template.spec.containers[0].image");
    assert_eq!(image["owner"]["manager"], "kustomize-controller");
    assert_eq!(image["owner"]["operation"], "Apply");
    let drift = document["drift"].as_array().expect("drift");
    assert_eq!(drift.len(), 1, "{document:#}");
    assert_eq!(drift[0]["path"], "spec.replicas");
    // Server-side apply keeps no copy of what was applied.
    assert_eq!(drift[0]["declaredUnknown"], true);
    assert!(drift[0].get("declared").is_none());
    assert_eq!(drift[0]["live"], "5");
    assert_eq!(drift[0]["who"]["user"], "alice", "{document:#}");
    assert_eq!(drift[0]["who"]["why"]["kind"], "warn-mode");

    let output = kubectl_drift(&env, &["blame", "deploy/web", "-n", &ns]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}{}", stderr(&output));
    assert!(
        text.lines().any(|l| l.starts_with("  kustomize-controller")
            && l.contains("Apply")
            && l.contains("spec.template.spec.containers[0].image")),
        "{text}"
    );
    assert!(
        text.contains("! spec.replicas: declared <unknown>, live 5")
            && text.contains("who: user alice, warn mode"),
        "{text}"
    );
}
