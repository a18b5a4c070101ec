//! The cluster `status` and `tail` are tested on: the API server double with the chart's agent
//! pods (their admin ports leading to real agents, [`Cluster::agent`]), webhook configuration
//! and Connection as a test puts them; and the plugin run against it.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime};

use drift_testkit::agent::{Agent, AgentBuilder};
use drift_testkit::double::Double;
use drift_testkit::{ApiServer, examples, wait_for};
use serde_json::{Value, json};

use super::plugin_bin;

/// The agents' namespace.
pub const NAMESPACE: &str = "drift-sentinel";
/// The agents' admin port.
pub const ADMIN_PORT: u16 = 9090;

/// The time `seconds` ago, as RFC 3339.
pub fn rfc3339_ago(seconds: u64) -> String {
    humantime::format_rfc3339_seconds(SystemTime::now() - Duration::from_secs(seconds)).to_string()
}

/// An agent in `dir` serving the strict example rule (`docs/examples/rule-strict.yaml`).
pub fn strict_agent(dir: &Path) -> AgentBuilder {
    Agent::serve(dir).rules(examples().join("rule-strict.yaml"))
}

/// The API server double, with the chart's agent pods, webhook configuration and Connection as
/// a test puts them.
pub struct Cluster {
    double: Double,
}

impl Cluster {
    /// The double on two worker threads, empty.
    pub fn start() -> Cluster {
        Cluster {
            double: Double::builder().workers(2).start(),
        }
    }

    /// The double's server.
    pub fn api(&self) -> &ApiServer {
        self.double.api()
    }

    /// A temporary directory for the test's files and agents.
    pub fn dir(&self) -> &Path {
        self.double.dir()
    }

    /// The kubeconfig pointing at the double.
    pub fn kubeconfig(&self) -> &str {
        self.double.kubeconfig().to_str().unwrap()
    }

    /// A real agent for pod `name` (reporting itself so), in its own directory, serving the
    /// strict example rule.
    pub fn agent(&self, name: &str) -> AgentBuilder {
        strict_agent(&self.dir().join(name)).pod_name(name)
    }

    /// An agent pod as the chart's Deployment makes it, its admin port leading to `admin`.
    pub fn agent_pod(&self, name: &str, ready: bool, admin: Option<SocketAddr>) {
        self.api().apply(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE,
                "creationTimestamp": rfc3339_ago(600),
                "labels": {"app.kubernetes.io/name": "drift-sentinel",
                    "app.kubernetes.io/instance": "drift-sentinel",
                    "app.kubernetes.io/component": "webhook"}},
            "spec": {"nodeName": "node-1",
                "containers": [{"name": "drift-sentinel", "image": "drift-sentinel:test"}]},
            "status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
                "containerStatuses": [{"name": "drift-sentinel", "image": "drift-sentinel:test",
                    "imageID": "", "ready": ready, "restartCount": 1}]}
        }));
        if let Some(admin) = admin {
            self.api()
                .set_pod_port_target(NAMESPACE, name, ADMIN_PORT, admin);
        }
    }

    /// The chart's ValidatingWebhookConfiguration.
    pub fn webhook(&self, ca_bundle: bool) {
        let mut client_config = json!({
            "service": {"name": "drift-sentinel", "namespace": NAMESPACE, "path": "/validate", "port": 443}
        });
        if ca_bundle {
            client_config["caBundle"] = json!("LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==");
        }
        self.api().apply(json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "drift-sentinel",
                "labels": {"app.kubernetes.io/name": "drift-sentinel",
                    "app.kubernetes.io/component": "webhook"}},
            "webhooks": [{
                "name": "validate.drift-sentinel.k8s.io",
                "admissionReviewVersions": ["v1"], "sideEffects": "None",
                "failurePolicy": "Fail", "matchPolicy": "Equivalent", "timeoutSeconds": 5,
                "clientConfig": client_config,
                "namespaceSelector": {"matchExpressions": [
                    {"key": "drift-sentinel.k8s.io/enabled", "operator": "NotIn", "values": ["false"]},
                    {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                     "values": [NAMESPACE, "kube-system"]}]},
                "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["UPDATE"],
                    "resources": ["deployments"], "scope": "Namespaced"}]
            }]
        }));
    }

    /// The Connection, with `entries` as its `status.byPod`.
    pub fn connection(&self, entries: Vec<Value>) {
        self.api().apply(json!({
            "apiVersion": "connection.drift-sentinel.io/v1alpha1", "kind": "Connection",
            "metadata": {"name": "audit-connection", "namespace": NAMESPACE},
            "spec": {"driver": "disk", "config": {"path": "tmp/violations/topics"}},
            "status": {"byPod": entries}
        }));
    }

    /// `kubectl-drift ARGS --kubeconfig K`, with a time limit.
    pub fn plugin(&self, args: &[&str]) -> Output {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--kubeconfig", self.kubeconfig()]);
        run_plugin(&all)
    }
}

/// Runs the plugin (without `KUBECONFIG`), for at most 60 s.
pub fn run_plugin(args: &[&str]) -> Output {
    let mut child = Command::new(plugin_bin())
        .args(args)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kubectl-drift");
    let done = wait_for(Duration::from_secs(60), || child.try_wait().ok().flatten());
    if done.is_none() {
        let _ = child.kill();
        panic!("kubectl-drift {args:?} did not finish within 60 s");
    }
    child.wait_with_output().unwrap()
}
