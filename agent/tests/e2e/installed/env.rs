//! The installed environment: a control plane ready for a node, a real node
//! (`drift_testkit::node`) with the agent image of `.ci/build-image` imported, and the chart
//! installed with the command of docs/install.md and no value at all (the image is the chart's
//! default name, `ghcr.io/drift-sentinel/drift-sentinel:<appVersion>`, present on the node).
//! Started by the first installed test, shared by all of them (they run one at a time: one node
//! per machine, and the disruption tests measure), stopped by [`teardown`].

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use drift_testkit::cluster::{Cluster, ClusterOptions};
use drift_testkit::node::{Node, NodeOptions, image_archive};
use serde_json::Value;

use crate::env::{helm_path, stderr, stdout, wait_for, workspace};

/// The release and its namespace, as docs/install.md names them.
pub const NAMESPACE: &str = "drift-sentinel";
pub const RELEASE: &str = "drift-sentinel";
/// The chart's selector of the webhook pods (as its NOTES give it to `kubectl drift status`).
pub const WEBHOOK_PODS: &str = "app.kubernetes.io/name=drift-sentinel,app.kubernetes.io/instance=drift-sentinel,app.kubernetes.io/component=webhook";

pub struct Installed {
    pub cluster: Cluster,
    /// Taken by [`teardown`] even while a failed test's thread still holds the environment.
    node: Mutex<Option<Node>>,
    /// What `helm install` printed.
    pub install_output: String,
}

static SHARED: Mutex<Option<Arc<Installed>>> = Mutex::new(None);

/// The installed environment, started on first use.
pub fn installed() -> Arc<Installed> {
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(env) = shared.as_ref() {
        return env.clone();
    }
    let env = Arc::new(Installed::start());
    *shared = Some(env.clone());
    env
}

/// Stops the node and the control plane; returns what the node left changed on the host
/// (nothing when its teardown is complete). Nothing when no installed test ran.
pub fn teardown() -> Vec<String> {
    let Some(env) = SHARED.lock().unwrap_or_else(|e| e.into_inner()).take() else {
        return Vec::new();
    };
    let node = env.node.lock().unwrap_or_else(|e| e.into_inner()).take();
    node.map(Node::stop).unwrap_or_default()
}

/// Panics when the agent image is older than a source file of the binary in it: the suite
/// would test another agent than the workspace's (`.ci/e2e` rebuilds it first; `cargo test`
/// alone does not).
fn assert_image_is_current() {
    let image = image_archive("drift-sentinel");
    let built = std::fs::metadata(&image)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| panic!("{} is missing: run `bash .ci/build-image`", image.display()));
    let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
    let mut visit = |path: &std::path::Path| {
        if let Ok(modified) = std::fs::metadata(path).and_then(|m| m.modified())
            && newest.as_ref().is_none_or(|(t, _)| modified > *t)
        {
            newest = Some((modified, path.to_owned()));
        }
    };
    visit(&workspace().join("Cargo.lock"));
    for dir in [
        "agent/src",
        "api/src",
        "engine/src",
        "load/src",
        "charts/drift-sentinel/files",
    ] {
        walk(&workspace().join(dir), &mut visit);
    }
    if let Some((modified, path)) = newest {
        assert!(
            modified <= built,
            "{} is older than {}: rebuild the image with `bash .ci/build-image` (.ci/e2e does)",
            image.display(),
            path.display()
        );
    }
}

fn walk(dir: &std::path::Path, visit: &mut dyn FnMut(&std::path::Path)) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, visit);
        } else {
            visit(&path);
        }
    }
}

impl Installed {
    fn start() -> Self {
        assert_image_is_current();
        let started = Instant::now();
        let cluster = Cluster::start(ClusterOptions {
            node: true,
            ..ClusterOptions::default()
        });
        let node = Node::start(
            &cluster,
            NodeOptions {
                images: vec![image_archive("drift-sentinel")],
            },
        );
        let mut env = Self {
            cluster,
            node: Mutex::new(Some(node)),
            install_output: String::new(),
        };
        // docs/install.md, "Install", with no value: the image is the chart's default.
        let output = env.shell(
            "helm install drift-sentinel charts/drift-sentinel --namespace drift-sentinel --create-namespace",
        );
        assert!(
            output.status.success(),
            "helm install: {}{}",
            stdout(&output),
            stderr(&output)
        );
        env.install_output = stdout(&output);
        env.wait_for_rollouts();
        eprintln!("installed on a node in {:?}", started.elapsed());
        env
    }

    /// Runs `f` with the node (which runs until [`teardown`]).
    pub fn with_node<T>(&self, f: impl FnOnce(&Node) -> T) -> T {
        let node = self.node.lock().unwrap_or_else(|e| e.into_inner());
        f(node.as_ref().expect("the node runs until teardown"))
    }

    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.cluster.kubectl(args)
    }

    pub fn kubectl_stdin(&self, args: &[&str], stdin: &str) -> Output {
        self.cluster.kubectl_stdin(args, stdin)
    }

    pub fn apply(&self, manifest: &str) {
        self.cluster.apply(manifest)
    }

    pub fn get(&self, args: &[&str]) -> Option<Value> {
        self.cluster.get(args)
    }

    /// A directory on PATH first for [`Installed::shell`]: `kubectl` and `helm` as a user has
    /// them (the kubectl built with the control plane), the plugin `kubectl-drift`.
    fn path(&self) -> std::ffi::OsString {
        let kubectl_dir = drift_testkit::cluster::bin_dir();
        let helm_dir = helm_path()
            .parent()
            .expect("helm's directory")
            .to_path_buf();
        let mut dirs: Vec<PathBuf> = vec![kubectl_dir, helm_dir, crate::env::binaries()];
        dirs.extend(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ));
        std::env::join_paths(dirs).expect("PATH")
    }

    /// Runs a command line as a user types it, in the workspace, with the admin kubeconfig
    /// in KUBECONFIG and helm's own directories in the cluster's.
    pub fn shell(&self, command: &str) -> Output {
        self.shell_command(command).output().expect("run sh")
    }

    pub fn shell_command(&self, command: &str) -> Command {
        let dir = self.cluster.dir();
        let mut sh = Command::new("sh");
        sh.arg("-c")
            .arg(command)
            .current_dir(workspace())
            .env("PATH", self.path())
            .env("KUBECONFIG", self.cluster.admin_kubeconfig())
            .env("HELM_CACHE_HOME", dir.join("helm/cache"))
            .env("HELM_CONFIG_HOME", dir.join("helm/config"))
            .env("HELM_DATA_HOME", dir.join("helm/data"))
            .env("NO_COLOR", "1");
        sh
    }

    /// `helm upgrade --reuse-values` with `sets` (`--set` values; a value starting with `@`
    /// names a file for `--set-file`), then waits for the rollouts. What docs/install.md's
    /// "Upgrading" does.
    pub fn upgrade(&self, sets: &[&str]) -> Output {
        let mut command = Command::new(helm_path());
        command
            .args(["upgrade", RELEASE, "charts/drift-sentinel", "-n", NAMESPACE])
            .arg("--reuse-values")
            .current_dir(workspace())
            .env("KUBECONFIG", self.cluster.admin_kubeconfig())
            .env("HELM_CACHE_HOME", self.cluster.dir().join("helm/cache"))
            .env("HELM_CONFIG_HOME", self.cluster.dir().join("helm/config"))
            .env("HELM_DATA_HOME", self.cluster.dir().join("helm/data"));
        for set in sets {
            match set.split_once("=@") {
                Some((key, file)) => command.arg("--set-file").arg(format!("{key}={file}")),
                None => command.arg("--set").arg(set),
            };
        }
        let output = command.output().expect("run helm");
        assert!(
            output.status.success(),
            "helm upgrade {sets:?}: {}{}",
            stdout(&output),
            stderr(&output)
        );
        self.wait_for_rollouts();
        output
    }

    /// The user-supplied values of the release (`helm get values`).
    pub fn values(&self) -> Value {
        let output = self.shell("helm get values drift-sentinel -n drift-sentinel -o json");
        assert!(output.status.success(), "{}", stderr(&output));
        serde_json::from_slice(&output.stdout).unwrap_or(Value::Null)
    }

    /// Waits until both Deployments have rolled out (`kubectl rollout status`, as
    /// docs/install.md's "Verify" does) and no old webhook pod is left terminating.
    pub fn wait_for_rollouts(&self) {
        for deployment in [
            "deployment/drift-sentinel",
            "deployment/drift-sentinel-audit",
        ] {
            let output = self.kubectl(&[
                "-n",
                NAMESPACE,
                "rollout",
                "status",
                deployment,
                "--timeout=180s",
            ]);
            if !output.status.success() {
                // What the containers said before they last ended, then the kubelet.
                let logs = self.kubectl(&[
                    "-n",
                    NAMESPACE,
                    "logs",
                    deployment,
                    "--all-containers",
                    "--previous",
                    "--tail=20",
                ]);
                panic!(
                    "{deployment} did not roll out: {}{}\nits containers' last words: {}{}\nkubelet: {}",
                    stdout(&output),
                    stderr(&output),
                    stdout(&logs),
                    stderr(&logs),
                    self.with_node(|node| node.log_of("kubelet"))
                );
            }
        }
        wait_for(
            "the old webhook pods to be gone",
            Duration::from_secs(60),
            || self.pods(WEBHOOK_PODS).len() == self.webhook_replicas(),
        );
    }

    fn webhook_replicas(&self) -> usize {
        self.get(&["deployment", "drift-sentinel", "-n", NAMESPACE])
            .and_then(|d| d["spec"]["replicas"].as_u64())
            .unwrap_or(0) as usize
    }

    /// The pods of `selector` in the release namespace, terminating ones included.
    pub fn pods(&self, selector: &str) -> Vec<Value> {
        self.get(&["pods", "-n", NAMESPACE, "-l", selector])
            .and_then(|list| list["items"].as_array().cloned())
            .unwrap_or_default()
    }

    /// The webhook pods that are Ready and not terminating.
    pub fn ready_webhook_pods(&self) -> Vec<Value> {
        self.pods(WEBHOOK_PODS)
            .into_iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null() && pod_ready(p))
            .collect()
    }

    /// The Service's endpoints that are ready (EndpointSlices), by pod name.
    pub fn ready_endpoints(&self) -> Vec<String> {
        self.endpoints()
            .into_iter()
            .filter(|(_, ready, _)| *ready)
            .map(|(name, _, _)| name)
            .collect()
    }

    /// The Service's endpoints (EndpointSlices): pod name, ready, terminating.
    pub fn endpoints(&self) -> Vec<(String, bool, bool)> {
        let slices = self
            .get(&[
                "endpointslices",
                "-n",
                NAMESPACE,
                "-l",
                "kubernetes.io/service-name=drift-sentinel",
            ])
            .unwrap_or(Value::Null);
        let mut endpoints: Vec<(String, bool, bool)> = slices["items"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|slice| slice["endpoints"].as_array().cloned().unwrap_or_default())
            .filter_map(|e| {
                let name = e["targetRef"]["name"].as_str()?.to_owned();
                let conditions = &e["conditions"];
                Some((
                    name,
                    conditions["ready"] == true,
                    conditions["terminating"] == true,
                ))
            })
            .collect();
        endpoints.sort();
        endpoints
    }

    /// Creates namespace `name` (intercepted by the webhook unless `labels` opt it out).
    pub fn namespace(&self, name: &str, labels: &[(&str, &str)]) -> String {
        let mut manifest = format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n");
        if !labels.is_empty() {
            manifest.push_str("  labels:\n");
            for (k, v) in labels {
                manifest.push_str(&format!("    {k}: {v:?}\n"));
            }
        }
        self.apply(&manifest);
        name.to_owned()
    }
}

/// Whether a pod's Ready condition is True.
pub fn pod_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// The ID of a pod's container `name` (`containerd://…`), with its restart count.
pub fn container(pod: &Value, name: &str) -> (String, u64) {
    let status = pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no container {name} in {pod:#}"));
    (
        status["containerID"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        status["restartCount"].as_u64().unwrap_or(0),
    )
}

pub fn pod_name(pod: &Value) -> String {
    pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}
