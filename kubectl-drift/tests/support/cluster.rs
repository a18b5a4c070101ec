//! The cluster the cluster commands (`explain`, `preview`) are tested on: the API server double
//! ([`Double`]) with Namespaces `prod`, `staging` (mode warn) and `ops`, the rule ConfigMaps of
//! `ops` (one of them broken) and workloads in `prod` and `staging`; the plugin run against it;
//! and how its output is checked.

use std::path::Path;
use std::process::{Command, Output};

use drift_testkit::ApiServer;
use drift_testkit::double::Double;
use serde_json::{Value, json};

/// The agent's namespace in these tests: its rules (`ops/…`) are cluster rules. No agent pod
/// runs there unless a test adds one, so the plugin takes the agent's default (its own
/// namespace) and says so on stderr.
pub const AGENT_NAMESPACE: &str = "ops";

/// Deployments and StatefulSets in `prod` and `staging`; only images may change.
/// `kubectl apply` rewrites the last-applied annotation with every apply: mutable, as in the
/// chart's default rule.
pub const IMAGES: &str = "mode: enforce\npriority: 10\nnamespaces: [prod, staging]\nselectors: [{apiGroup: apps, kind: Deployment}, {apiGroup: apps, kind: StatefulSet}]\nexclude: ['metadata.labels']\nmutable: ['spec.template.spec.containers[*].image', \"metadata.annotations['kubectl.kubernetes.io/last-applied-configuration']\"]\n";
/// Lower priority, also matching: shown as shadowed.
pub const CATCH_ALL: &str =
    "mode: warn\nnamespaces: ['*']\nselectors: [{apiGroup: '*', kind: '*'}]\n";
/// Only for Rollouts.
pub const ROLLOUTS: &str = "mode: enforce\npriority: 5\nnamespaces: ['*']\nselectors: [{apiGroup: argoproj.io, kind: Rollout}]\n";
/// Invalid: a misspelt key.
pub const BROKEN: &str =
    "mode: enforce\nnamespaces: ['*']\nselectors: [{kind: Deployment}]\nmutabel: [x]\n";

/// The double, loaded.
pub struct Cluster {
    double: Double,
}

/// A rule ConfigMap `namespace/name` holding `spec`.
pub fn rule(namespace: &str, name: &str, spec: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace,
            "annotations": {"drift-sentinel.k8s.io/rule": "true"}},
        "data": {"spec": spec}
    })
}

/// A Deployment, StatefulSet or Rollout `name` (labelled `app: name`) with its status.
pub fn workload(kind: &str, namespace: &str, name: &str, replicas: u32, image: &str) -> Value {
    let api_version = if kind == "Rollout" {
        "argoproj.io/v1alpha1"
    } else {
        "apps/v1"
    };
    json!({
        "apiVersion": api_version, "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": image}]}
            }
        },
        "status": {"replicas": replicas, "readyReplicas": replicas}
    })
}

impl Cluster {
    /// The double with rules, namespaces (`staging` in warn mode) and workloads; a kubeconfig
    /// whose context's namespace is `namespace`.
    pub fn start(namespace: &str) -> Self {
        let double = Double::builder()
            .namespace(namespace)
            .context("other", "staging")
            .start();
        let server = double.api();
        server
            .apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}}));
        server.apply(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "staging", "annotations": {"drift-sentinel.k8s.io/mode": "warn"}}}));
        server.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ops"}}));
        server.apply(rule("ops", "images", IMAGES));
        server.apply(rule("ops", "catch-all", CATCH_ALL));
        server.apply(rule("ops", "rollouts", ROLLOUTS));
        server.apply(rule("ops", "broken", BROKEN));
        // Not a rule: no annotation.
        server.apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "plain", "namespace": "ops"}, "data": {"spec": "mode: enforce"}}));
        for namespace in ["prod", "staging"] {
            server.apply(workload("Deployment", namespace, "web", 2, "nginx:1"));
        }
        server.apply(workload("StatefulSet", "prod", "db", 1, "postgres:16"));
        server.apply(workload("Rollout", "prod", "canary", 3, "nginx:1"));
        Cluster { double }
    }

    /// The double's server: its store, faults and requests.
    pub fn api(&self) -> &ApiServer {
        self.double.api()
    }

    /// The kubeconfig pointing at the double.
    pub fn kubeconfig(&self) -> &Path {
        self.double.kubeconfig()
    }

    /// A temporary directory for the test's files.
    pub fn path(&self) -> &Path {
        self.double.dir()
    }

    /// Runs the plugin with `--kubeconfig`, `--agent-namespace ops` and `env`.
    pub fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_kubectl-drift"));
        command
            .args(args)
            .args(["--agent-namespace", AGENT_NAMESPACE])
            .arg("--kubeconfig")
            .arg(self.double.kubeconfig())
            .env("NO_COLOR", "1")
            .env_remove("KUBE_EDITOR")
            .env_remove("EDITOR")
            .env("KUBECONFIG", self.path().join("no-such-kubeconfig"));
        for (key, value) in env {
            command.env(key, value);
        }
        command.output().expect("run kubectl-drift")
    }

    /// Runs the plugin with `--kubeconfig` and `--agent-namespace ops`.
    pub fn plugin(&self, args: &[&str]) -> Output {
        self.run(args, &[])
    }

    /// A manifest file holding `object` as YAML.
    pub fn file(&self, name: &str, object: &Value) -> String {
        let path = self.path().join(name);
        std::fs::write(&path, serde_yaml::to_string(object).unwrap()).unwrap();
        path.to_str().unwrap().to_owned()
    }

    /// Deployment `web` of `namespace` as the double stores it.
    pub fn live_web(&self, namespace: &str) -> Value {
        self.api()
            .get("apps/v1", "Deployment", namespace, "web")
            .unwrap()
    }
}

/// What the plugin printed: stdout, then stderr.
pub fn screen(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// stdout as a JSON document.
pub fn json_of(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", screen(output)))
}

/// Asserts that the plugin printed each of `expected`.
pub fn assert_contains(output: &Output, expected: &[&str]) {
    let screen = screen(output);
    for text in expected {
        assert!(screen.contains(text), "missing {text:?} in\n{screen}");
    }
}

/// A manifest as a person would keep it: no status, no server metadata.
pub fn edited(kind: &str, namespace: &str, replicas: u32, image: &str) -> Value {
    let mut object = workload(kind, namespace, "web", replicas, image);
    object.as_object_mut().unwrap().remove("status");
    object
}
