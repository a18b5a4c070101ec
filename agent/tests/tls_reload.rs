//! The serving certificate re-read when its files change (reference §6): a new pair is served
//! to new connections while those opened under the old one go on; files that vanish keep the
//! last good pair, with a WARN each time.

mod support;

use drift_testkit::objects::review;
use drift_testkit::pki::Ca;
use support::{Agent, IMAGE_RULE, https_client, post, rule_config_map, small_deployment};

/// An agent serving HTTPS with the pair of `first` written into its directory as
/// `tls.crt`/`tls.key`, one rule file beside them.
fn tls_agent() -> (tempfile::TempDir, Ca, Agent) {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.yaml");
    std::fs::write(&rules, rule_config_map("ops", "r", IMAGE_RULE)).unwrap();
    let first = Ca::new("first");
    let agent = support::https_agent(dir.path(), &first, &["--rules", rules.to_str().unwrap()]);
    (dir, first, agent)
}

#[test]
fn tls_certificate_is_reloaded_without_dropping_connections() {
    let (dir, first, agent) = tls_agent();
    let url = format!("{}/validate", agent.base);
    let review = review(
        "x",
        &small_deployment("prod", 1),
        &small_deployment("prod", 1),
    );
    let old_client = https_client(&first.cert_pem(), None);
    assert_eq!(post(&old_client, &url, &review).0, 200);

    let second = Ca::new("second");
    second.loopback_serving().write(dir.path(), "tls");
    let new_client = https_client(&second.cert_pem(), None);
    agent.wait_until("the new certificate to be served", || {
        new_client
            .get(format!("{}/healthz", agent.base))
            .send()
            .is_ok()
    });
    assert_eq!(post(&new_client, &url, &review).0, 200);
    // The connection opened under the old certificate is still served.
    assert_eq!(post(&old_client, &url, &review).0, 200);
    // A fresh client that trusts only the old CA now fails the handshake.
    assert!(
        https_client(&first.cert_pem(), None)
            .get(format!("{}/healthz", agent.base))
            .send()
            .is_err()
    );
    assert!(
        agent
            .logs()
            .iter()
            .any(|l| l.contains("TLS certificate reloaded"))
    );
}

/// reference §6: TLS files that vanish keep the last good pair, with a WARN each time; when they
/// come back they are used.
#[test]
fn vanished_tls_files_keep_the_certificate_with_a_warning() {
    let (dir, first, agent) = tls_agent();
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let healthz = format!("{}/healthz", agent.base);
    let warned = |agent: &Agent| {
        agent
            .logs()
            .iter()
            .filter(|l| l.contains("TLS files cannot be read") && l.contains("WARN"))
            .count()
    };
    assert_eq!(warned(&agent), 0);
    std::fs::remove_file(&cert).unwrap();
    std::fs::remove_file(&key).unwrap();
    agent.wait_until("a WARN for vanished TLS files", || warned(&agent) > 0);
    // The last good pair is still served, to new connections too.
    assert!(
        https_client(&first.cert_pem(), None)
            .get(&healthz)
            .send()
            .is_ok()
    );
    // Back again (a new pair): used; gone again: warned again.
    let second = Ca::new("second");
    second.loopback_serving().write(dir.path(), "tls");
    agent.wait_until("the new certificate to be served", || {
        https_client(&second.cert_pem(), None)
            .get(&healthz)
            .send()
            .is_ok()
    });
    std::fs::remove_file(&cert).unwrap();
    agent.wait_until("a second WARN", || warned(&agent) >= 2);
    assert!(
        https_client(&second.cert_pem(), None)
            .get(&healthz)
            .send()
            .is_ok()
    );
}
