//! The Helm chart against a real API server: everything it renders is accepted as valid
//! (CRD, Connection, Secret, webhook configuration, RBAC, Deployment, PDB …), `helm upgrade`
//! keeps the TLS Secret (its `lookup` reads the live one), `helm uninstall` removes the webhook
//! configuration.

use libtest_mimic::Trial;
use serde_json::Value;

use crate::env::{helm, stderr, stdout, workspace};
use crate::trial;
use drift_testkit::cluster::{Cluster, ClusterOptions};

pub fn tests() -> Vec<Trial> {
    vec![trial!(install_upgrade_and_uninstall)]
}

const NAMESPACE: &str = "drift-chart";

fn install_upgrade_and_uninstall() {
    let cluster = Cluster::start(ClusterOptions::default());
    let chart = workspace().join("charts/drift-sentinel");
    let chart = chart.to_str().unwrap();
    let values = workspace().join("tests/chart/values-all.yaml");
    // The values file sets every value of the chart (a rule ConfigMap goes to `shop`).
    cluster.apply("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n");
    let run = |verb: &str, extra: &[&str]| {
        let mut args = vec![verb, "drift", "-n", NAMESPACE];
        if verb != "uninstall" {
            args.push(chart);
        }
        args.extend_from_slice(extra);
        let output = helm(&cluster, &args);
        assert!(
            output.status.success(),
            "helm {verb}: {}{}",
            stdout(&output),
            stderr(&output)
        );
    };
    run(
        "install",
        &["--create-namespace", "-f", values.to_str().unwrap()],
    );

    let get = |args: &[&str]| cluster.get(args).unwrap_or(Value::Null);
    // fullnameOverride: drift-guard.
    let webhook_name = "drift-guard";
    let webhook = get(&["validatingwebhookconfiguration", webhook_name]);
    assert_eq!(
        webhook["webhooks"][0]["name"], "validate.drift-sentinel.k8s.io",
        "{webhook:#}"
    );
    let secret = get(&["secret", "drift-guard-cert", "-n", NAMESPACE]);
    let certificate = secret["data"]["tls.crt"]
        .as_str()
        .expect("tls.crt")
        .to_owned();
    assert_eq!(
        webhook["webhooks"][0]["clientConfig"]["caBundle"], secret["data"]["ca.crt"],
        "the caBundle is the CA of the serving certificate"
    );
    assert!(
        get(&["crd", "connections.connection.drift-sentinel.io"])["spec"]["versions"][0]["name"]
            == "v1alpha1"
    );
    for (kind, name) in [
        ("deployment", "drift-guard"),
        ("service", "drift-guard"),
        ("serviceaccount", "drift-guard-agent"),
        ("configmap", "drift-guard-default-rule"),
        ("connection", "violations"),
        ("poddisruptionbudget", "drift-guard"),
    ] {
        assert!(
            cluster.get(&[kind, name, "-n", NAMESPACE]).is_some(),
            "{kind}/{name} was not created"
        );
    }
    let rules = get(&[
        "configmaps",
        "-n",
        NAMESPACE,
        "-l",
        "app.kubernetes.io/component=rule",
    ]);
    assert!(
        rules["items"]
            .as_array()
            .is_some_and(|items| !items.is_empty()),
        "rule ConfigMaps: {rules:#}"
    );

    // Upgrade: the Secret (and with it the caBundle) is reused, not generated again.
    run(
        "upgrade",
        &["-f", values.to_str().unwrap(), "--set", "logLevel=DEBUG"],
    );
    let secret = get(&["secret", "drift-guard-cert", "-n", NAMESPACE]);
    assert_eq!(
        secret["data"]["tls.crt"].as_str(),
        Some(certificate.as_str())
    );

    let webhook = get(&["validatingwebhookconfiguration", webhook_name]);
    assert_eq!(
        webhook["webhooks"][0]["clientConfig"]["caBundle"], secret["data"]["ca.crt"],
        "the caBundle still is the CA of the (reused) serving certificate"
    );

    // Uninstall: the webhook configuration is gone, so nothing is intercepted any more.
    run("uninstall", &[]);
    assert!(
        cluster
            .get(&["validatingwebhookconfiguration", webhook_name])
            .is_none(),
        "the webhook configuration survived helm uninstall"
    );
}
