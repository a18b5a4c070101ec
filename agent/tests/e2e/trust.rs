//! The trust boundary on the real control plane (reference §5 "No input stops the agent", §6
//! "Who may call"): the API server reaches the webhook with the client certificate its
//! AdmissionConfiguration gives it, anyone else calling the agent directly gets 401 and leaves
//! no trace but a count, a review nested past the limit is refused without stopping the agent,
//! and the chart installs client authentication.

use drift_testkit::cluster::WEBHOOK_CLIENT_NAME;
use drift_testkit::objects::{deep_review, deployment_with, review};
use drift_testkit::pki::Ca;
use libtest_mimic::Trial;

use crate::env::{AGENT_NAMESPACE, Env, RELEASE, deployment, shared, stderr};
use crate::trial;

pub fn tests() -> Vec<Trial> {
    vec![
        trial!(only_the_api_server_reaches_the_webhook),
        trial!(a_deep_review_is_refused_and_the_next_edit_is_judged),
        trial!(the_chart_installs_client_authentication),
    ]
}

fn post(client: &reqwest::blocking::Client, env: &Env, body: String) -> (u16, String) {
    let response = client
        .post(format!("{}/validate", env.agent.base))
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .expect("POST /validate");
    let status = response.status().as_u16();
    (status, response.text().unwrap_or_default())
}

/// `kubectl scale` to 4 is denied by the default rule: the API server's calls are judged.
fn assert_scale_denied(env: &Env, ns: &str) {
    let output = env.kubectl(&["scale", "deployment/web", "--replicas=4", "-n", ns]);
    assert!(!output.status.success(), "scale was allowed");
    let printed = stderr(&output);
    assert!(
        printed.contains(
            "denied the request: Drift Sentinel: immutable fields changed: spec.replicas"
        ),
        "{printed}"
    );
}

fn only_the_api_server_reaches_the_webhook() {
    let env = &*shared();
    let ns = env.namespace("e2e-trust", &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    assert_scale_denied(env, &ns);

    let refused_before = env.metric_sum("drift_sentinel_webhook_refused_total");
    let old = deployment_with(["api:1", "worker:1", "proxy:1"], 3, 4);
    let new = deployment_with(["api:1", "worker:1", "proxy:1"], 9, 4);
    let forged = review("forged", &old, &new).to_string();
    let outsider = Ca::new("outsider");
    let callers = [
        ("no certificate", None),
        (
            "another CA, the API server's name",
            Some(outsider.client(WEBHOOK_CLIENT_NAME, &[])),
        ),
        (
            "the API server's CA, another name",
            Some(env.cluster.webhook_client_ca().client("mallory", &[])),
        ),
    ];
    for (what, identity) in &callers {
        let (status, body) = post(&env.agent_client_as(identity.as_ref()), env, forged.clone());
        assert_eq!(status, 401, "{what}: {body}");
    }
    assert_eq!(
        env.metric_sum("drift_sentinel_webhook_refused_total") - refused_before,
        callers.len() as f64
    );
    // Nothing of them was decided: no admission count for their namespace.
    assert_eq!(
        env.metric_sum(&format!(
            "drift_sentinel_admission_requests_total{{namespace=\"{}\"",
            drift_testkit::objects::NAMESPACE
        )),
        0.0
    );
    // And the API server's own calls still are.
    assert_scale_denied(env, &ns);
}

fn a_deep_review_is_refused_and_the_next_edit_is_judged() {
    let env = &*shared();
    let ns = env.namespace("e2e-deep", &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    // Posted with the API server's own certificate: past client authentication.
    let identity = env
        .cluster
        .webhook_client_ca()
        .client(WEBHOOK_CLIENT_NAME, &[]);
    let client = env.agent_client_as(Some(&identity));
    for depth in [10_001, 1_000_000] {
        let (status, body) = post(&client, env, deep_review("deep", depth, false));
        assert_eq!(status, 400, "{depth}: {body}");
        assert!(body.contains("nested deeper than 10000 levels"), "{body}");
    }
    let (status, body) = post(&client, env, deep_review("at-limit", 10_000, true));
    assert_eq!(status, 200, "{}", &body[..body.len().min(400)]);
    // The agent kept running: the next edit through the API server is judged.
    assert_scale_denied(env, &ns);
    let output = env.kubectl(&["set", "image", "deployment/web", "app=nginx:1.1", "-n", &ns]);
    assert!(output.status.success(), "image change: {}", stderr(&output));
}

fn the_chart_installs_client_authentication() {
    let env = &*shared();
    let name = format!("{RELEASE}-client-ca");
    let config_map = env
        .get(&["configmap", &name, "-n", AGENT_NAMESPACE])
        .expect("the chart's client CA ConfigMap");
    assert_eq!(
        config_map["data"]["ca.crt"],
        env.cluster.webhook_client_ca().cert_pem()
    );
    let deployment = env
        .get(&["deployment", RELEASE, "-n", AGENT_NAMESPACE])
        .expect("the chart's Deployment");
    let args = &deployment["spec"]["template"]["spec"]["containers"][0]["args"];
    let args: Vec<&str> = args
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert!(
        args.contains(&"--client-ca-file=/client-ca/ca.crt"),
        "{args:?}"
    );
    assert!(
        args.contains(&format!("--client-names={WEBHOOK_CLIENT_NAME}").as_str()),
        "{args:?}"
    );
    // The agent beside the API server runs with those flags (env.rs): every webhook case of the
    // suite goes through client authentication.
}
