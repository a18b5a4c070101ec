//! The examples of docs/examples mean what their names say, and the example review the README
//! posts with curl is the one `drift-sentinel review` builds from the example manifests.

mod support;

use std::path::PathBuf;

use serde_json::{Value, json};
use support::{Agent, plain_client, post};

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/examples")
}

fn example_review() -> Value {
    let text = std::fs::read_to_string(examples().join("review.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn the_example_review_is_what_the_review_command_builds() {
    let built = support::build_example_review(&[]);
    assert_eq!(
        built,
        example_review(),
        "docs/examples/review.json is stale: regenerate it with `drift-sentinel review`"
    );
}

/// The example review with the object moved to `namespace` and changed by `edit`.
fn variant(namespace: &str, edit: impl Fn(&mut Value)) -> Value {
    let mut review = example_review();
    for side in ["object", "oldObject"] {
        review["request"][side]["metadata"]["namespace"] = json!(namespace);
    }
    review["request"]["namespace"] = json!(namespace);
    let mut new = review["request"]["oldObject"].clone();
    edit(&mut new);
    review["request"]["object"] = new;
    review
}

#[test]
fn example_rules_mean_what_their_names_say() {
    let examples = examples();
    let agent = Agent::start(
        &[
            "--rules",
            examples.to_str().unwrap(),
            "--namespaces",
            examples.join("namespaces.yaml").to_str().unwrap(),
        ],
        false,
    );
    let status = agent.status();
    assert_eq!(status["rulesLoaded"], 3, "{status:#}");
    assert_eq!(status["rulesInvalid"], 0, "{status:#}");

    let client = plain_client();
    let url = format!("{}/validate", agent.base);
    let answer = |review: &Value| post(&client, &url, review).1["response"].clone();

    // Strict (prod-*): the example edit (image and replicas) is denied, both paths named.
    let response = answer(&example_review());
    assert_eq!(response["allowed"], false);
    assert_eq!(
        response["auditAnnotations"]["rule"],
        "drift-sentinel/drift-sentinel-strict"
    );
    assert_eq!(
        response["auditAnnotations"]["denied-paths"],
        "spec.replicas, spec.template.spec.containers[0].image"
    );
    // ... even an image-only release.
    let image = |o: &mut Value| {
        o["spec"]["template"]["spec"]["containers"][0]["image"] =
            json!("registry.example.com/checkout:2.4.0")
    };
    assert_eq!(answer(&variant("prod-eu", image))["allowed"], false);
    // ... but the Deployment controller's revision bump is fine.
    let revision = |o: &mut Value| {
        o["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = json!("5")
    };
    assert_eq!(answer(&variant("prod-eu", revision))["allowed"], true);
    // A namespace in dry-run: would deny, allowed.
    let response = answer(&variant("prod-sandbox", image));
    assert_eq!(response["allowed"], true);
    assert_eq!(response["auditAnnotations"]["result"], "would-deny");

    // Replica-only (team=payments outside prod-*): scaling passes, an image does not.
    let scale = |o: &mut Value| {
        o["spec"]["replicas"] = json!(7);
        o["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
            json!("{\"spec\":{\"replicas\":7}}");
    };
    let response = answer(&variant("payments", scale));
    assert_eq!(response["allowed"], true, "{response:#}");
    assert_eq!(
        response["auditAnnotations"]["rule"],
        "drift-sentinel/drift-sentinel-replica-only"
    );
    let response = answer(&variant("payments", image));
    assert_eq!(response["allowed"], false);
    assert_eq!(
        response["auditAnnotations"]["denied-paths"],
        "spec.template.spec.containers[0].image"
    );

    // Relaxed (staging-*; the labels of the example do not matter there): everyday changes
    // pass silently, anything else is allowed with a warning.
    let everyday = |o: &mut Value| {
        scale(o);
        image(o);
        o["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] =
            json!("500m");
        o["spec"]["template"]["metadata"]["annotations"] =
            json!({"kubectl.kubernetes.io/restartedAt": "2026-12-02T12:00:00Z"});
    };
    let mut staging = variant("staging-eu", everyday);
    for side in ["object", "oldObject"] {
        staging["request"][side]["metadata"]["labels"]["team"] = json!("search");
    }
    let response = answer(&staging);
    assert_eq!(response["allowed"], true);
    assert_eq!(
        response["auditAnnotations"]["result"], "allowed",
        "{response:#}"
    );
    let port = |o: &mut Value| {
        o["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = json!(9090)
    };
    let mut staging = variant("staging-eu", port);
    for side in ["object", "oldObject"] {
        staging["request"][side]["metadata"]["labels"]["team"] = json!("search");
    }
    let response = answer(&staging);
    assert_eq!(response["allowed"], true);
    assert_eq!(response["auditAnnotations"]["result"], "warned");
    assert!(
        response["warnings"][0]
            .as_str()
            .unwrap()
            .contains("spec.template.spec.containers[0].ports[0]")
    );
}
