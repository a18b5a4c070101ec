//! The chart as installed by docs/install.md, on the node: its pods run the image and become
//! Ready, the API server calls both webhooks through their Service, and edits are denied and
//! allowed through it — `kubectl patch`, `set image` (and the rollout the controller then makes),
//! `apply --dry-run=server`, `kubectl scale` once `webhook.interceptScale` is set — a rule with a
//! typo is refused when it is applied, and client authentication works with
//! `webhook.clientAuth` and the API server's AdmissionConfiguration.

use std::time::Duration;

use libtest_mimic::Trial;
use serde_json::Value;

use super::env::{Installed, NAMESPACE, WEBHOOK_PODS, container, installed, pod_ready};
use crate::env::{stderr, stdout, wait_for};
use crate::trial;

pub fn tests() -> Vec<Trial> {
    vec![
        trial!(installed_as_documented_runs_the_image_on_the_node),
        trial!(edits_are_judged_through_the_service),
        trial!(a_rule_with_a_typo_is_refused_at_apply),
        trial!(client_authentication_through_the_service),
    ]
}

/// The image's one program, its user and its filesystem, as the node runs them.
fn installed_as_documented_runs_the_image_on_the_node() {
    let env = installed();
    assert!(
        env.install_output.contains("NOTES:"),
        "{}",
        env.install_output
    );
    let pods = env.pods(WEBHOOK_PODS);
    assert_eq!(pods.len(), 3, "3 webhook replicas with failurePolicy Fail");
    for pod in &pods {
        assert!(pod_ready(pod), "{pod:#}");
        assert_eq!(
            pod["spec"]["containers"][0]["image"], "ghcr.io/drift-sentinel/drift-sentinel:0.1.0",
            "the chart's default image"
        );
    }
    let audit = env.pods("app.kubernetes.io/component=audit");
    assert_eq!(audit.len(), 1);
    assert!(pod_ready(&audit[0]), "{:#}", audit[0]);

    // Both webhooks are called through the Service (no URL).
    let configuration = env
        .get(&["validatingwebhookconfiguration", "drift-sentinel"])
        .expect("the webhook configuration");
    for webhook in configuration["webhooks"].as_array().expect("webhooks") {
        let client = &webhook["clientConfig"];
        assert!(client["url"].is_null(), "{webhook:#}");
        assert_eq!(client["service"]["name"], "drift-sentinel");
        assert_eq!(client["service"]["namespace"], NAMESPACE);
        assert_eq!(client["service"]["port"], 443);
    }

    // The container's process on the host: user 65532, a read-only root filesystem, and no
    // shell to exec into.
    let (id, _) = container(&pods[0], "drift-sentinel");
    let pid = env
        .with_node(|node| node.container_pid(&id))
        .expect("the agent's process");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its status");
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .expect("Uid line");
    assert!(
        uid.split_whitespace().all(|u| u == "65532"),
        "the agent runs as 65532: {uid}"
    );
    let mounts =
        std::fs::read_to_string(format!("/proc/{pid}/mounts")).expect("the container's mounts");
    let root = mounts
        .lines()
        .find(|l| l.split(' ').nth(1) == Some("/"))
        .expect("the root mount");
    assert!(
        root.split(' ')
            .nth(3)
            .is_some_and(|o| o.split(',').any(|o| o == "ro")),
        "a read-only root filesystem: {root}"
    );
    let pod = pods[0]["metadata"]["name"].as_str().expect("name");
    for shell in ["sh", "/bin/sh"] {
        let output = env.kubectl(&["exec", "-n", NAMESPACE, pod, "--", shell, "-c", "true"]);
        assert!(!output.status.success(), "{shell} ran in the image");
        assert!(
            stderr(&output).contains("no such file or directory")
                || stderr(&output).contains("executable file not found"),
            "{}",
            stderr(&output)
        );
    }
}

const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: installed-web
spec:
  replicas: REPLICAS
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: app
          image: IMAGE
          command: [/pause]
";

fn web(replicas: u32, image: &str) -> String {
    DEPLOYMENT
        .replace("REPLICAS", &replicas.to_string())
        .replace("IMAGE", image)
}

const PAUSE: &str = drift_testkit::node::SANDBOX_IMAGE;
const PAUSE_NEXT: &str = "localhost/drift-sentinel/pause:next";

/// The webhook's answer to a denied edit, as kubectl prints it.
const DENIED: &str = "admission webhook \"validate.drift-sentinel.k8s.io\" denied the request";

fn edits_are_judged_through_the_service() {
    let env = installed();
    env.namespace("installed-web", &[]);
    // A second name for the pause image: an image change the node can run.
    let output = env.with_node(|node| node.ctr(&["images", "tag", "--force", PAUSE, PAUSE_NEXT]));
    assert!(output.status.success(), "{}", stderr(&output));
    env.apply(&web(1, PAUSE));
    rollout(&env);

    let output = env.kubectl(&[
        "-n",
        "installed-web",
        "patch",
        "deployment",
        "web",
        "-p",
        r#"{"spec":{"replicas":3}}"#,
    ]);
    assert!(!output.status.success(), "replicas patched");
    assert!(stderr(&output).contains(DENIED), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("spec.replicas: 1 → 3"),
        "{}",
        stderr(&output)
    );

    // An image: allowed, and the controller's own updates during the rollout are allowed too.
    let image = format!("app={PAUSE_NEXT}");
    let output = env.kubectl(&[
        "-n",
        "installed-web",
        "set",
        "image",
        "deployment/web",
        &image,
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    rollout(&env);

    let output = env.kubectl_stdin(
        &["apply", "--dry-run=server", "-f", "-"],
        &web(2, PAUSE_NEXT),
    );
    assert!(!output.status.success(), "a server dry run of 2 replicas");
    assert!(stderr(&output).contains(DENIED), "{}", stderr(&output));
    let output = env.kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], &web(1, PAUSE));
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("(server dry run)"),
        "{}",
        stdout(&output)
    );

    // /scale is judged once webhook.interceptScale is set (off by default: scaled here).
    let output = env.kubectl(&[
        "-n",
        "installed-web",
        "scale",
        "deployment/web",
        "--replicas=2",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    if env.values()["webhook"]["interceptScale"] != true {
        env.upgrade(&["webhook.interceptScale=true"]);
    }
    wait_for(
        "kubectl scale to be denied",
        Duration::from_secs(30),
        || {
            let output = env.kubectl(&[
                "-n",
                "installed-web",
                "scale",
                "deployment/web",
                "--replicas=3",
            ]);
            !output.status.success() && stderr(&output).contains(DENIED)
        },
    );
    let replicas = env
        .get(&["deployment", "web", "-n", "installed-web"])
        .map(|d| d["spec"]["replicas"].clone());
    assert_eq!(replicas, Some(Value::from(2)));
}

fn rollout(env: &Installed) {
    let output = env.kubectl(&[
        "-n",
        "installed-web",
        "rollout",
        "status",
        "deployment/web",
        "--timeout=60s",
    ]);
    assert!(
        output.status.success(),
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
}

/// reference §2 "A typo never opens a hole": the rule webhook, called through the Service.
fn a_rule_with_a_typo_is_refused_at_apply() {
    let env = installed();
    let rule = |spec: &str| crate::support::rule_config_map(NAMESPACE, "installed-typo", spec);
    let output = env.kubectl_stdin(
        &["apply", "-f", "-"],
        &rule("mode: enforce\nselectors:\n  - {apiGroup: apps, kind: Deployment}\nmutabel: [spec.replicas]\n"),
    );
    assert!(!output.status.success(), "a rule with a typo was applied");
    let text = stderr(&output);
    assert!(
        text.contains("admission webhook \"rules.drift-sentinel.k8s.io\" denied the request"),
        "{text}"
    );
    assert!(
        text.contains("mutabel"),
        "the message names the typo: {text}"
    );
    let output = env.kubectl_stdin(
        &["apply", "-f", "-"],
        &rule("mode: enforce\nnamespaces: [installed-typo]\nselectors:\n  - {apiGroup: apps, kind: Deployment}\nmutable: [spec.replicas]\n"),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let output = env.kubectl(&["-n", NAMESPACE, "delete", "configmap", "installed-typo"]);
    assert!(output.status.success(), "{}", stderr(&output));
}

/// `webhook.clientAuth` with the CA of the certificate the API server's AdmissionConfiguration
/// gives it: edits are still judged through the Service, and a caller without that certificate
/// (here the host, through the Service's ClusterIP) gets 401.
fn client_authentication_through_the_service() {
    let env = installed();
    let dir = tempfile::tempdir().expect("dir");
    let client_ca = dir.path().join("client-ca.crt");
    std::fs::write(&client_ca, env.cluster.webhook_client_ca().cert_pem()).expect("write CA");
    if env.values()["webhook"]["clientAuth"]["enabled"] != true {
        let bundle = format!("webhook.clientAuth.caBundle=@{}", client_ca.display());
        env.upgrade(&["webhook.clientAuth.enabled=true", &bundle]);
    }
    let ns = env.namespace("installed-auth", &[]);
    env.apply(&web(0, PAUSE).replace("installed-web", &ns));
    let output = env.kubectl(&[
        "-n",
        &ns,
        "patch",
        "deployment",
        "web",
        "-p",
        r#"{"spec":{"replicas":2}}"#,
    ]);
    assert!(stderr(&output).contains(DENIED), "{}", stderr(&output));

    let service = env
        .get(&["service", "drift-sentinel", "-n", NAMESPACE])
        .expect("the Service");
    let ip: std::net::IpAddr = service["spec"]["clusterIP"]
        .as_str()
        .and_then(|ip| ip.parse().ok())
        .expect("a ClusterIP");
    let secret = env
        .get(&["secret", "drift-sentinel-cert", "-n", NAMESPACE])
        .expect("the TLS Secret");
    let ca = crate::env::base64_decode(secret["data"]["ca.crt"].as_str().expect("ca.crt"));
    let host = "drift-sentinel.drift-sentinel.svc";
    let url = format!("https://{host}/validate");
    let review = crate::support::replicas_review(&ns).to_string();
    let call = |identity: Option<&drift_testkit::pki::Pair>| {
        let ca = reqwest::Certificate::from_pem(ca.as_bytes()).expect("the chart's CA");
        let mut builder = reqwest::blocking::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca)
            .resolve(host, std::net::SocketAddr::new(ip, 443))
            .timeout(Duration::from_secs(10));
        if let Some(pair) = identity {
            let pem = format!("{}{}", pair.cert_pem, pair.key_pem);
            builder = builder.identity(reqwest::Identity::from_pem(pem.as_bytes()).expect("id"));
        }
        let client = builder.build().expect("client");
        crate::support::post_text(&client, &url, review.clone())
    };
    let (status, body) = call(None);
    assert_eq!(status, 401, "{body}");
    let apiserver = env
        .cluster
        .webhook_client_ca()
        .client(drift_testkit::cluster::WEBHOOK_CLIENT_NAME, &[]);
    let (status, body) = call(Some(&apiserver));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"allowed\":false"), "{body}");
}
