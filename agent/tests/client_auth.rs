//! Black-box tests of reference §6, "Who may call": with `--client-ca-file`, only a caller with
//! a certificate of that CA named in `--client-names` reaches `/validate` and `/validate-rule`;
//! anyone else gets 401 before its body is read, is counted and recorded nowhere else; the
//! probes and `/metrics` stay open; the CA file is re-read when it changes;
//! `--tls-min-version 1.3` refuses TLS 1.2.

mod support;

use std::path::Path;
use std::time::Duration;

use drift_testkit::objects::{deployment_with, review};
use drift_testkit::pki::{Ca, Pair};
use serde_json::Value;
use support::{Agent, IMAGE_RULE as RULE, plain_client, post_text as post, rule_config_map};

/// An HTTPS client trusting the agent's CA, presenting `identity` when given.
fn client(agent_ca: &Ca, identity: Option<&Pair>) -> reqwest::blocking::Client {
    support::https_client(&agent_ca.cert_pem(), identity)
}

/// A denied edit (replicas 3 → 4), so that an admitted call would leave an export record.
fn denied_review(uid: &str) -> String {
    let old = deployment_with(["api:1", "worker:1", "proxy:1"], 3, 4);
    let new = deployment_with(["api:1", "worker:1", "proxy:1"], 4, 4);
    review(uid, &old, &new).to_string()
}

fn metric(agent: &Agent, agent_ca: &Ca, line_start: &str) -> Option<f64> {
    let text = client(agent_ca, None)
        .get(format!("{}/metrics", agent.base))
        .send()
        .and_then(|r| r.text())
        .expect("metrics without a certificate");
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

struct Setup {
    _dir: tempfile::TempDir,
    /// The CA of the agent's serving certificate.
    agent_ca: Ca,
    clients_ca: Ca,
    ca_file: std::path::PathBuf,
    agent: Agent,
}

fn start(extra: &[&str]) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.yaml");
    std::fs::write(&rules, rule_config_map("ops", "strict", RULE)).unwrap();
    let agent_ca = Ca::new("agent");
    let (cert, key) = agent_ca.loopback_serving().write(dir.path(), "tls");
    let clients_ca = Ca::new("webhook-clients");
    let ca_file = dir.path().join("clients-ca.crt");
    std::fs::write(&ca_file, clients_ca.cert_pem()).unwrap();
    let topics = dir.path().join("topics");
    let connection = dir.path().join("connection.yaml");
    let config = format!("{{path: {:?}}}", topics.display().to_string());
    std::fs::write(&connection, support::connection_yaml(&config)).unwrap();
    let paths = [&rules, &cert, &key, &ca_file, &connection].map(|p| p.display().to_string());
    let mut args = vec![
        "--rules",
        &paths[0],
        "--tls-cert-file",
        &paths[1],
        "--tls-key-file",
        &paths[2],
        "--client-ca-file",
        &paths[3],
        "--enable-admission-violation-export",
        "--connection",
        &paths[4],
    ];
    args.extend_from_slice(extra);
    let agent = Agent::start(&args, true);
    Setup {
        _dir: dir,
        agent_ca,
        clients_ca,
        ca_file,
        agent,
    }
}

fn exported_uids(agent: &Agent) -> Vec<String> {
    let text = plain_client()
        .get(format!("{}/violations", agent.admin))
        .send()
        .and_then(|r| r.text())
        .expect("violations");
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["id"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn only_the_named_callers_of_the_ca_reach_the_webhook() {
    let setup = start(&["--client-names", "kube-apiserver,apiserver.example"]);
    let (agent, agent_ca) = (&setup.agent, &setup.agent_ca);
    let validate = format!("{}/validate", agent.base);
    let other_ca = Ca::new("someone-else");
    let refused = [
        (
            "no certificate",
            None,
            "no_certificate",
            "client authentication is required",
        ),
        (
            "another CA",
            Some(other_ca.client("kube-apiserver", &[])),
            "untrusted_certificate",
            "not signed by the CA",
        ),
        (
            "another name",
            Some(setup.clients_ca.client("mallory", &["system:masters"])),
            "name_not_allowed",
            "names mallory",
        ),
    ];
    for (what, identity, reason, says) in &refused {
        let caller = client(agent_ca, identity.as_ref());
        let (status, body) = post(
            &caller,
            &validate,
            denied_review(&format!("refused-{reason}")),
        );
        assert_eq!(status, 401, "{what}: {body}");
        assert!(body.contains(says), "{what}: {body}");
        assert!(
            body.contains("kube-apiserver, apiserver.example"),
            "{what}: {body}"
        );
        let (status, _) = post(
            &caller,
            &format!("{}/validate-rule", agent.base),
            "{}".to_owned(),
        );
        assert_eq!(status, 401, "{what}: /validate-rule");
        // Open to anyone: the probes and the metrics.
        for path in ["/healthz", "/readyz", "/metrics"] {
            let response = caller.get(format!("{}{path}", agent.base)).send().unwrap();
            assert_eq!(response.status().as_u16(), 200, "{what}: {path}");
        }
        let counted = metric(
            agent,
            agent_ca,
            &format!("drift_sentinel_webhook_refused_total{{reason=\"{reason}\"}}"),
        );
        assert_eq!(counted, Some(2.0), "{what}");
    }

    // The API server's certificate: by CN, and by a DNS SAN.
    let by_cn = client(
        agent_ca,
        Some(&setup.clients_ca.client("kube-apiserver", &[])),
    );
    let (status, body) = post(&by_cn, &validate, denied_review("accepted-cn"));
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    let by_san = client(
        agent_ca,
        Some(&setup.clients_ca.serving(&["apiserver.example"])),
    );
    let (status, body) = post(&by_san, &validate, denied_review("accepted-san"));
    assert_eq!(status, 200, "{body}");

    // Only the admitted calls were decided and exported.
    let decided = metric(
        agent,
        agent_ca,
        "drift_sentinel_admission_requests_total{namespace=\"prod-eu\",resource=\"apps/v1/deployments\",result=\"denied\"}",
    );
    assert_eq!(decided, Some(2.0));
    let mut uids = Vec::new();
    for _ in 0..100 {
        uids = exported_uids(agent);
        if uids.len() >= 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    uids.sort();
    assert_eq!(uids, ["accepted-cn", "accepted-san"]);
    // Refusals are logged, at most once per period.
    let warned = agent
        .logs()
        .iter()
        .filter(|l| l.contains("webhook caller refused"))
        .count();
    assert_eq!(warned, 1, "{:?}", agent.logs());
}

#[test]
fn a_new_client_ca_is_taken_without_a_restart() {
    let setup = start(&[]);
    let (agent, agent_ca) = (&setup.agent, &setup.agent_ca);
    let validate = format!("{}/validate", agent.base);
    let old = client(
        agent_ca,
        Some(&setup.clients_ca.client("kube-apiserver", &[])),
    );
    assert_eq!(post(&old, &validate, denied_review("old-1")).0, 200);

    let rotated = Ca::new("webhook-clients-2");
    write_atomically(&setup.ca_file, &rotated.cert_pem());
    // New connections are judged by the new CA, and so is the old client (whether it reuses
    // its connection is up to its pool: that an open connection is judged again is pinned by
    // client_auth's unit test an_open_connection_is_judged_again_when_the_ca_changes).
    let new_identity = rotated.client("kube-apiserver", &[]);
    drift_testkit::wait_for(Duration::from_secs(10), || {
        (post(
            &client(agent_ca, Some(&new_identity)),
            &validate,
            denied_review("new-1"),
        )
        .0 == 200)
            .then_some(())
    })
    .expect("the new client CA is taken");
    assert_eq!(post(&old, &validate, denied_review("old-2")).0, 401);
    let stale = client(
        agent_ca,
        Some(&setup.clients_ca.client("kube-apiserver", &[])),
    );
    assert_eq!(post(&stale, &validate, denied_review("old-3")).0, 401);

    // A file that no longer parses keeps the current CA.
    write_atomically(&setup.ca_file, "garbage\n");
    std::thread::sleep(Duration::from_millis(600));
    let (status, body) = post(
        &client(agent_ca, Some(&new_identity)),
        &validate,
        denied_review("new-2"),
    );
    assert_eq!(status, 200, "{body}");
    assert!(
        agent
            .logs()
            .iter()
            .any(|l| l.contains("client CA file changed but cannot be used")),
        "{:?}",
        agent.logs()
    );
}

#[test]
fn tls_min_version_13_refuses_tls_12() {
    let setup = start(&["--tls-min-version", "1.3"]);
    let (agent, agent_ca) = (&setup.agent, &setup.agent_ca);
    let ca = reqwest::Certificate::from_pem(agent_ca.cert_pem().as_bytes()).expect("CA");
    let tls12 = reqwest::blocking::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(ca)
        .max_tls_version(reqwest::tls::Version::TLS_1_2)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    assert!(tls12.get(format!("{}/healthz", agent.base)).send().is_err());
    let tls13 = client(agent_ca, None);
    assert!(
        tls13
            .get(format!("{}/healthz", agent.base))
            .send()
            .unwrap()
            .status()
            .is_success()
    );
}

#[test]
fn client_authentication_needs_tls_and_a_usable_ca() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, "not PEM\n").unwrap();
    let run = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_drift-sentinel"))
            .args(args)
            .args(["--address", "127.0.0.1:0", "--admin-address", "127.0.0.1:0"])
            .output()
            .expect("run");
        assert!(!output.status.success(), "{args:?}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let without_tls = run(&["--client-ca-file", ca.to_str().unwrap()]);
    assert!(without_tls.contains("--tls-cert-file"), "{without_tls}");
    let agent_ca = Ca::new("agent");
    let (cert, key) = agent_ca.loopback_serving().write(dir.path(), "tls");
    let bad_ca = run(&[
        "--tls-cert-file",
        cert.to_str().unwrap(),
        "--tls-key-file",
        key.to_str().unwrap(),
        "--client-ca-file",
        ca.to_str().unwrap(),
    ]);
    assert!(
        bad_ca.contains("cannot load the client CA (--client-ca-file)")
            && bad_ca.contains("holds no PEM certificate"),
        "{bad_ca}"
    );
    let bad_name = run(&["--client-names", "kube apiserver"]);
    assert!(bad_name.contains("not a certificate name"), "{bad_name}");
}

fn write_atomically(path: &Path, text: &str) {
    let temporary = path.with_extension("tmp");
    std::fs::write(&temporary, text).unwrap();
    std::fs::rename(&temporary, path).unwrap();
}
