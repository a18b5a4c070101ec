//! The Helm chart against a real API server: everything it renders is accepted as valid
//! (CRD, Connection, Secret, webhook configuration with matchConditions, RBAC, Deployment with a
//! PriorityClass and topology spread, PDB, NetworkPolicy, the Grafana dashboard ConfigMap …),
//! `helm upgrade` keeps the TLS Secret (its `lookup` reads the live one), `helm uninstall`
//! removes the webhook configuration; and `helm install` with the defaults prints NOTES whose
//! commands work against the real server and the real webhook.
//!
//! Kinds whose CRDs a bare API server lacks — the Prometheus Operator's ServiceMonitor and
//! PrometheusRule, cert-manager's Issuer and Certificate (`metrics.serviceMonitor.enabled`,
//! `metrics.prometheusRule.enabled`, `certManager.enabled`) — are not installed here: the chart
//! tests validate them against those CRDs' schemas (tests/chart/operator_kinds.py, with
//! tests/chart/values-all-crds.yaml).

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use libtest_mimic::Trial;
use serde_json::Value;

use crate::env::{base64, helm, stderr, stdout, wait_for, workspace};
use crate::support::Agent;
use crate::trial;
use drift_testkit::cluster::{Cluster, ClusterOptions};
use drift_testkit::pki::Ca;

pub fn tests() -> Vec<Trial> {
    vec![
        trial!(install_upgrade_and_uninstall),
        trial!(install_with_defaults_shows_notes_that_work),
    ]
}

const NAMESPACE: &str = "drift-chart";

fn install_upgrade_and_uninstall() {
    // The controller manager creates the Deployment's pods, so that the PriorityClass is
    // resolved by the API server's Priority admission (no kubelet runs them).
    let cluster = Cluster::start(ClusterOptions {
        controller_manager: true,
        ..ClusterOptions::default()
    });
    let chart = workspace().join("charts/drift-sentinel");
    let chart = chart.to_str().unwrap();
    let values = workspace().join("tests/chart/values-all.yaml");
    let all: Value = serde_json::to_value(
        serde_yaml::from_str::<serde_yaml::Value>(&std::fs::read_to_string(&values).unwrap())
            .unwrap(),
    )
    .unwrap();
    // The values file sets every value of the chart (a rule ConfigMap goes to `shop`, the
    // Grafana dashboard to `monitoring`).
    cluster.apply("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n");
    cluster.apply("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: monitoring\n");
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
    // The CEL matchConditions were compiled and stored by the server as given.
    assert_eq!(
        webhook["webhooks"][0]["matchConditions"], all["webhook"]["matchConditions"],
        "{webhook:#}"
    );
    // The namespace expression of the original chart's form, then the chart's exclusions.
    let selector = &webhook["webhooks"][0]["namespaceSelector"]["matchExpressions"];
    assert_eq!(selector[0]["key"], "environment", "{selector:#}");
    assert_eq!(
        selector[1]["values"],
        serde_json::json!([NAMESPACE, "kube-system", "monitoring", "cert-manager"])
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
    for (kind, name, namespace) in [
        ("deployment", "drift-guard", NAMESPACE),
        ("service", "drift-guard", NAMESPACE),
        ("serviceaccount", "drift-guard-agent", NAMESPACE),
        ("configmap", "drift-guard-default-rule", NAMESPACE),
        ("connection", "violations", NAMESPACE),
        ("poddisruptionbudget", "drift-guard", NAMESPACE),
        ("networkpolicy", "drift-guard", NAMESPACE),
        ("configmap", "drift-guard-dashboard", "monitoring"),
    ] {
        assert!(
            cluster.get(&[kind, name, "-n", namespace]).is_some(),
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

    // The NetworkPolicy admits the webhook port (service.targetPort) only.
    let policy = get(&["networkpolicy", "drift-guard", "-n", NAMESPACE]);
    assert_eq!(
        policy["spec"]["ingress"][0]["ports"],
        serde_json::json!([{"port": all["service"]["targetPort"], "protocol": "TCP"}]),
        "{policy:#}"
    );
    let deployment = get(&["deployment", "drift-guard", "-n", NAMESPACE]);
    let pod_spec = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod_spec["priorityClassName"], all["priorityClassName"]);
    assert_eq!(
        pod_spec["containers"][0]["ports"][0]["containerPort"],
        all["service"]["targetPort"]
    );
    assert_eq!(
        pod_spec["topologySpreadConstraints"]
            .as_array()
            .map(Vec::len),
        Some(2),
        "{pod_spec:#}"
    );
    // The ReplicaSet controller creates the pods: the API server resolved their PriorityClass
    // (an unknown or forbidden one would be refused) and kept the spread constraints. The
    // webhook's pods only: the audit's (the same instance label) have no PriorityClass.
    const WEBHOOK_PODS: &str =
        "app.kubernetes.io/instance=drift,app.kubernetes.io/component=webhook";
    wait_for(
        "the agent pods to be created",
        Duration::from_secs(60),
        || {
            get(&["pods", "-n", NAMESPACE, "-l", WEBHOOK_PODS])["items"]
                .as_array()
                .is_some_and(|pods| !pods.is_empty())
        },
    );
    let pods = get(&["pods", "-n", NAMESPACE, "-l", WEBHOOK_PODS]);
    let pod = &pods["items"][0];
    let class = get(&["priorityclass", all["priorityClassName"].as_str().unwrap()]);
    assert_eq!(pod["spec"]["priority"], class["value"], "{pod:#}");
    assert!(
        pod["spec"]["topologySpreadConstraints"][0]["labelSelector"]["matchLabels"]["app.kubernetes.io/instance"]
            == "drift",
        "{pod:#}"
    );

    // Upgrade: the Secret (and with it the caBundle) is reused, not generated again.
    run(
        "upgrade",
        &["-f", values.to_str().unwrap(), "--set", "logLevel=WARN"],
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

/// One command line of the NOTES, run by a shell as an installer would paste it: the real
/// kubectl (and the plugin) first on PATH, the given kubeconfig.
fn shell(command: &str, kubeconfig: &Path) -> Output {
    let kubectl_dir = drift_testkit::cluster::kubectl_path()
        .parent()
        .expect("kubectl's directory")
        .to_path_buf();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![kubectl_dir, crate::env::binaries()];
    dirs.extend(std::env::split_paths(&path));
    Command::new("sh")
        .arg("-c")
        .arg(command)
        .env("PATH", std::env::join_paths(dirs).expect("PATH"))
        .env("KUBECONFIG", kubeconfig)
        .env("NO_COLOR", "1")
        .output()
        .expect("run sh")
}

fn install_with_defaults_shows_notes_that_work() {
    const RELEASE: &str = "drift-sentinel";
    const NS: &str = "drift-sentinel";
    let cluster = Cluster::start(ClusterOptions {
        controller_manager: true,
        ..ClusterOptions::default()
    });
    let chart = workspace().join("charts/drift-sentinel");
    // The chart's pods cannot run (no kubelet): the agent runs beside the API server, and the
    // only values given point the webhook at it.
    let ca = Ca::new("chart-notes");
    let dir = tempfile::tempdir().expect("agent directory");
    let (cert, key) = ca.loopback_serving().write(dir.path(), "tls");
    let port = crate::support::free_port();
    let url = format!("webhook.url=https://127.0.0.1:{port}/validate");
    let bundle = format!("webhook.caBundle={}", base64(&ca.cert_pem()));
    let output = helm(
        &cluster,
        &[
            "install",
            RELEASE,
            chart.to_str().unwrap(),
            "-n",
            NS,
            "--create-namespace",
            "--set",
            &url,
            "--set",
            &bundle,
        ],
    );
    assert!(output.status.success(), "helm install: {}", stderr(&output));
    let printed = stdout(&output);
    let notes = printed
        .split_once("NOTES:")
        .map(|(_, notes)| notes.to_owned())
        .unwrap_or_else(|| panic!("helm install printed no NOTES: {printed}"));

    let kubeconfig = cluster.kubeconfig_for_service_account(NS, RELEASE);
    let args = [
        "serve",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--tls-cert-file",
        cert.to_str().unwrap(),
        "--tls-key-file",
        key.to_str().unwrap(),
        "--pod-namespace",
        NS,
        "--pod-name",
        "notes-agent-0",
    ];
    let agent = Agent::start_on(port, &args, true);

    // The commands of the NOTES (lines `  kubectl …`), each with the `# expected:` line after it.
    let lines: Vec<&str> = notes.lines().collect();
    let mut commands: Vec<(String, Option<String>)> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if let Some(command) = line.strip_prefix("  kubectl ") {
            let expected = lines
                .get(i + 1)
                .and_then(|next| next.trim_start().strip_prefix("# expected: "))
                .map(str::to_owned);
            commands.push((format!("kubectl {command}"), expected));
        }
    }
    let names: Vec<&str> = commands.iter().map(|(c, _)| c.as_str()).collect();
    let delete_webhook = format!("kubectl delete validatingwebhookconfiguration {RELEASE}");
    for wanted in [
        "kubectl drift status --agent-namespace drift-sentinel",
        "kubectl apply --dry-run=server -f -",
        delete_webhook.as_str(),
    ] {
        assert!(
            names.iter().any(|c| c.contains(wanted)),
            "the NOTES lack `{wanted}`:\n{notes}"
        );
    }
    let admin = cluster.admin_kubeconfig().to_path_buf();
    let mut denied = None;
    for (command, expected) in &commands {
        // `rollout status` waits for pods that cannot run here (no kubelet); the namespace is
        // deleted, and the webhook removed, at the end (below).
        if command.contains("rollout status") || command.starts_with("kubectl delete") {
            continue;
        }
        let output = shell(command, &admin);
        let text = format!("{}{}", stdout(&output), stderr(&output));
        if command.starts_with("kubectl drift status") {
            // The plugin ran with the NOTES' flags (exit 2 would be a usage or cluster error);
            // it reports the webhook configuration and, here, no agent pods (no kubelet).
            assert!(
                matches!(output.status.code(), Some(0) | Some(1)),
                "{command}: {text}"
            );
            assert!(text.contains(RELEASE), "{command}: {text}");
            // Issue 42: a default install has no export, hence no Connection, and the rule
            // webhook (`Ignore`) must see the rule ConfigMaps of the agent's namespace: neither
            // is worth a warning. (The pods cannot run here: those findings are real.)
            let json = shell(&format!("{command} -o json"), &admin);
            let document: Value = serde_json::from_slice(&json.stdout)
                .unwrap_or_else(|e| panic!("{command} -o json: {e}: {}", stdout(&json)));
            for finding in document["warnings"]
                .as_array()
                .into_iter()
                .chain(document["problems"].as_array())
                .flatten()
            {
                let finding = finding.as_str().unwrap_or_default();
                assert!(
                    !finding.contains("Connection") && !finding.contains("own namespace"),
                    "{command}: {finding}"
                );
            }
            assert!(
                !command.contains("--connection"),
                "the NOTES name a Connection with export off: {command}"
            );
            continue;
        }
        match expected {
            Some(expected) if expected.contains("denied the request") => {
                assert!(!output.status.success(), "{command}: {text}");
                let wanted = expected
                    .split_once("...: ")
                    .map_or(expected.as_str(), |(_, rest)| rest)
                    .trim_end_matches(" ...");
                assert!(text.contains(wanted), "{command}: {text}\nwanted: {wanted}");
                denied = Some(command.clone());
            }
            Some(expected) => {
                assert!(output.status.success(), "{command}: {text}");
                let wanted = expected.split(':').next().unwrap_or_default();
                assert!(text.contains(wanted), "{command}: {text}\nwanted: {wanted}");
            }
            None => assert!(output.status.success(), "{command}: {text}"),
        }
    }
    let denied = denied.unwrap_or_else(|| panic!("no command of the NOTES was denied:\n{notes}"));
    assert!(
        agent.logs().iter().any(|l| l.contains("\"denied\"")),
        "the agent did not decide the denied edit"
    );

    // The way out in an emergency, as the NOTES name it: the same edit then goes through.
    let output = shell(&delete_webhook, &admin);
    assert!(output.status.success(), "{}", stderr(&output));
    let output = shell(&denied, &admin);
    assert!(
        output.status.success(),
        "after deleting the webhook configuration: {}",
        stderr(&output)
    );
    let output = shell("kubectl delete namespace drift-sentinel-check", &admin);
    assert!(output.status.success(), "{}", stderr(&output));
    drop(agent);
}
