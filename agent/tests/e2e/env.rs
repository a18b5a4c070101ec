//! The end-to-end environment: a real control plane (`drift_testkit::cluster`), the Helm chart
//! installed into it with its webhook pointed at an agent that runs beside the API server (the
//! chart's pods cannot run: there is no kubelet), and that agent in cluster mode with the
//! chart's own ServiceAccount and RBAC.
//!
//! One shared environment (with kube-controller-manager) serves most tests, each in namespaces
//! of its own; tests that break the control plane or install the chart again start their own.
//!
//! Client authentication is on (reference §6, "Who may call"): the API server presents the
//! client certificate its AdmissionConfiguration gives it (`drift_testkit::cluster`), the chart
//! is installed with `webhook.clientAuth` holding that CA, and the agent runs with the flags the
//! chart renders from it.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use drift_testkit::cluster::{Cluster, ClusterOptions};
use drift_testkit::pki::Ca;
use serde_json::Value;

use crate::support::Agent;

/// The namespace the chart is installed into and the agent runs "in".
pub const AGENT_NAMESPACE: &str = "drift-system";
/// The Helm release (and so the chart's full name).
pub const RELEASE: &str = "drift-sentinel";
/// The webhook's name, as the chart registers it.
pub const WEBHOOK_NAME: &str = "validate.drift-sentinel.k8s.io";

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_path_buf()
}

/// The real helm that `.ci/install-tools` puts into `.tools/bin`.
pub fn helm_path() -> PathBuf {
    std::env::var_os("HELM")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join(".tools/bin/helm"))
}

/// A control plane with the chart installed and an agent serving its webhook.
pub struct Env {
    pub cluster: Cluster,
    pub agent: Agent,
    /// The CA of the agent's serving certificate (the webhook's caBundle).
    pub agent_ca: Ca,
    /// Holds the agent's certificate files for as long as the environment lives.
    _agent_dir: tempfile::TempDir,
    /// The agent's command line, to start it again.
    agent_args: Vec<String>,
}

/// How to set up an environment.
#[derive(Default)]
pub struct EnvOptions {
    pub controller_manager: bool,
    /// Extra `--set` values of the chart.
    pub values: Vec<String>,
    /// Extra flags of the agent.
    pub agent_args: Vec<String>,
    /// Manifests applied after the chart is installed, before the agent starts.
    pub manifests: Vec<String>,
}

impl Env {
    pub fn start(options: EnvOptions) -> Self {
        let started = Instant::now();
        let cluster = Cluster::start(ClusterOptions {
            controller_manager: options.controller_manager,
            ..ClusterOptions::default()
        });
        let agent_ca = Ca::new("agent");
        let agent_dir = tempfile::tempdir().expect("agent directory");
        let (cert, key) = agent_ca.loopback_serving().write(agent_dir.path(), "tls");
        // The installation's record signing key (reference §8 "Trust"): a new one per
        // environment, as the chart makes one per install; the audits the tests run use it too.
        let record_key = agent_dir.path().join("record-signing-key");
        std::fs::write(&record_key, drift_testkit::random_seed()).expect("record signing key");
        let client_ca = agent_dir.path().join("client-ca.crt");
        std::fs::write(&client_ca, cluster.webhook_client_ca().cert_pem()).expect("client CA");
        let port = crate::support::free_port();
        let mut values = vec![
            format!("webhook.url=https://127.0.0.1:{port}/validate"),
            format!("webhook.caBundle={}", base64(&agent_ca.cert_pem())),
            "webhook.interceptScale=true".to_owned(),
            "replicaCount=1".to_owned(),
        ];
        values.extend(options.values);
        helm_install(&cluster, &values, &client_ca);
        for manifest in &options.manifests {
            cluster.apply(manifest);
        }
        let agent_kubeconfig = cluster.kubeconfig_for_service_account(AGENT_NAMESPACE, RELEASE);
        let mut args: Vec<String> = vec![
            "serve".into(),
            "--kubeconfig".into(),
            agent_kubeconfig.display().to_string(),
            "--tls-cert-file".into(),
            cert.display().to_string(),
            "--tls-key-file".into(),
            key.display().to_string(),
            "--pod-namespace".into(),
            AGENT_NAMESPACE.into(),
            "--pod-name".into(),
            "e2e-agent-0".into(),
            "--client-ca-file".into(),
            client_ca.display().to_string(),
            "--client-names".into(),
            drift_testkit::cluster::WEBHOOK_CLIENT_NAME.into(),
            "--record-signing-key".into(),
            record_key.display().to_string(),
            // The chart's per-release ConfigMap, which its Role lets the agent patch and its
            // webhook configuration names for kubectl drift (reference §8 "Trust").
            "--record-key-configmap".into(),
            format!("{RELEASE}-record-public-key"),
        ];
        args.extend(options.agent_args);
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let agent = Agent::start_on(port, &argv, true);
        let env = Self {
            cluster,
            agent,
            agent_ca,
            _agent_dir: agent_dir,
            agent_args: args,
        };
        env.wait_until_agent_ready();
        eprintln!("e2e environment ready in {:?}", started.elapsed());
        env
    }

    /// The installation's record signing key file (`--record-signing-key`), for the audits a
    /// test runs: the webhook signs its records with it.
    pub fn record_key(&self) -> PathBuf {
        self._agent_dir.path().join("record-signing-key")
    }

    /// Stops the agent (SIGTERM) and starts it again with the same command line and port,
    /// as a restarted pod would be; returns once it is ready.
    /// Restarts the agent with `extra` flags added to its command line.
    pub fn restart_agent_with(&mut self, extra: &[&str]) {
        self.agent_args
            .extend(extra.iter().map(|a| (*a).to_owned()));
        self.restart_agent();
    }

    pub fn restart_agent(&mut self) {
        self.agent.signal("TERM");
        let exit = self.agent.wait_exit(Duration::from_secs(15));
        assert!(exit.is_some(), "the agent did not stop after SIGTERM");
        let argv: Vec<&str> = self.agent_args.iter().map(String::as_str).collect();
        self.agent = Agent::start_on(self.agent.port, &argv, true);
        self.wait_until_agent_ready();
    }

    /// `/readyz` of the agent says ready (its first sync is done).
    pub fn wait_until_agent_ready(&self) {
        let client = self.agent_client();
        wait_for("the agent's /readyz", Duration::from_secs(30), || {
            client
                .get(format!("{}/readyz", self.agent.base))
                .send()
                .is_ok_and(|r| r.status().is_success())
        });
    }

    /// An HTTPS client that trusts the agent's certificate (and presents none: enough for the
    /// probes and `/metrics`).
    pub fn agent_client(&self) -> reqwest::blocking::Client {
        self.agent_client_as(None)
    }

    /// [`Env::agent_client`] presenting `identity` (a certificate and its key).
    pub fn agent_client_as(
        &self,
        identity: Option<&drift_testkit::pki::Pair>,
    ) -> reqwest::blocking::Client {
        crate::support::https_client(&self.agent_ca.cert_pem(), identity)
    }

    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.cluster.kubectl(args)
    }

    pub fn kubectl_stdin(&self, args: &[&str], stdin: &str) -> Output {
        self.cluster.kubectl_stdin(args, stdin)
    }

    /// `kubectl apply -f -`; panics with kubectl's output when it fails.
    pub fn apply(&self, manifest: &str) {
        self.cluster.apply(manifest)
    }

    /// Creates a namespace (with optional annotations) and returns its name.
    pub fn namespace(&self, name: &str, annotations: &[(&str, &str)]) -> String {
        let mut manifest = format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n");
        if !annotations.is_empty() {
            manifest.push_str("  annotations:\n");
            for (k, v) in annotations {
                manifest.push_str(&format!("    {k}: {v:?}\n"));
            }
        }
        self.apply(&manifest);
        name.to_owned()
    }

    /// Applies a rule ConfigMap in the agent's namespace.
    pub fn rule(&self, name: &str, spec: &str) {
        self.apply(&crate::support::rule_config_map(
            AGENT_NAMESPACE,
            name,
            spec,
        ));
    }

    /// The sum of the samples on the agent's `/metrics` whose line starts with `prefix` (a
    /// metric's name, or its name and the start of its labels); open without a certificate.
    pub fn metric_sum(&self, prefix: &str) -> f64 {
        let text = self
            .agent_client()
            .get(format!("{}/metrics", self.agent.base))
            .send()
            .and_then(|r| r.text())
            .expect("the agent's /metrics");
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// `kubectl get -o json`.
    pub fn get(&self, args: &[&str]) -> Option<Value> {
        self.cluster.get(args)
    }
}

/// A Deployment manifest as a user would write it.
pub fn deployment(namespace: &str, name: &str, replicas: u32, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: {namespace}\n  labels:\n    app: {name}\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels:\n      app: {name}\n  template:\n    metadata:\n      labels:\n        app: {name}\n    spec:\n      containers:\n        - name: app\n          image: {image}\n"
    )
}

/// Asserts a command's exit code, showing what it printed when it differs.
pub fn assert_exit(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "{}{}",
        stdout(output),
        stderr(output)
    );
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Polls `check` until it holds; panics naming `what` after `limit`.
pub fn wait_for(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("timed out after {limit:?} waiting for {what}");
}

/// Polls a server-side dry run of `manifest` (`kubectl apply --dry-run=server`) until its
/// outcome satisfies `check` (stderr given): how a test waits for a rule change to reach the
/// agent, without sleeping.
pub fn wait_for_dry_run(env: &Env, what: &str, manifest: &str, check: impl Fn(bool, &str) -> bool) {
    wait_for(what, Duration::from_secs(30), || {
        let output = env.kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], manifest);
        check(output.status.success(), &stderr(&output))
    });
}

/// `helm install` of the chart with `values`, and client authentication on with `client_ca`.
fn helm_install(cluster: &Cluster, values: &[String], client_ca: &Path) {
    let mut command = std::process::Command::new(helm_path());
    command
        .arg("install")
        .arg(RELEASE)
        .arg(workspace().join("charts/drift-sentinel"))
        .args(["--namespace", AGENT_NAMESPACE, "--create-namespace"])
        .arg("--kubeconfig")
        .arg(cluster.admin_kubeconfig())
        .env("HELM_CACHE_HOME", cluster.dir().join("helm/cache"))
        .env("HELM_CONFIG_HOME", cluster.dir().join("helm/config"))
        .env("HELM_DATA_HOME", cluster.dir().join("helm/data"));
    for value in values {
        command.arg("--set").arg(value);
    }
    command
        .args(["--set", "webhook.clientAuth.enabled=true", "--set-file"])
        .arg(format!(
            "webhook.clientAuth.caBundle={}",
            client_ca.display()
        ));
    let output = command.output().expect("run helm");
    assert!(
        output.status.success(),
        "helm install failed: {}{}",
        stdout(&output),
        stderr(&output)
    );
}

/// Runs helm against `cluster` with its own caches.
pub fn helm(cluster: &Cluster, args: &[&str]) -> Output {
    std::process::Command::new(helm_path())
        .args(args)
        .arg("--kubeconfig")
        .arg(cluster.admin_kubeconfig())
        .env("HELM_CACHE_HOME", cluster.dir().join("helm/cache"))
        .env("HELM_CONFIG_HOME", cluster.dir().join("helm/config"))
        .env("HELM_DATA_HOME", cluster.dir().join("helm/data"))
        .output()
        .expect("run helm")
}

pub fn base64(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// The text of base64 `encoded` (a Secret's data); panics when it is not base64 of UTF-8.
pub fn base64_decode(encoded: &str) -> String {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .expect("base64");
    String::from_utf8(bytes).expect("UTF-8")
}

/// Held by a test of the shared environment whose audit writes Reports (`--audit-reports
/// openreports`, the audit's default), from its first such audit to its last look at a Report:
/// a run rewrites the Report of every namespace it finds drift in and deletes the others, not
/// only its own test's, so without it another test's run could rewrite a Report between a
/// test's audit and its check, or between its two audits.
static REPORT_WRITER: Mutex<()> = Mutex::new(());

/// [`REPORT_WRITER`], held until the guard is dropped.
pub fn writing_reports() -> MutexGuard<'static, ()> {
    REPORT_WRITER.lock().unwrap_or_else(|e| e.into_inner())
}

/// An audit of the shared environment writes its memory Events (`DriftDetected`, `Bypassed`:
/// reference §8 "Memory") in every namespace it audits, from what it read at its start. Each
/// audit run holds this for reading ([`auditing`]); a test that deletes that memory to show a
/// restarted audit forgets it holds it for writing while it deletes
/// ([`forgetting_audit_memory`]), so that no audit that read the memory before the deletion
/// writes it back after it.
static AUDIT_MEMORY: RwLock<()> = RwLock::new(());

/// [`AUDIT_MEMORY`] for an audit run, held until the guard is dropped.
pub fn auditing() -> RwLockReadGuard<'static, ()> {
    AUDIT_MEMORY.read().unwrap_or_else(|e| e.into_inner())
}

/// [`AUDIT_MEMORY`] for deleting the audit's memory, held until the guard is dropped.
pub fn forgetting_audit_memory() -> RwLockWriteGuard<'static, ()> {
    AUDIT_MEMORY.write().unwrap_or_else(|e| e.into_inner())
}

/// The shared environment, started by the first test that asks for it and stopped by
/// [`teardown`] when the run ends.
static SHARED: Mutex<Option<Arc<Env>>> = Mutex::new(None);

pub fn shared() -> Arc<Env> {
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(env) = shared.as_ref() {
        return env.clone();
    }
    let env = Arc::new(Env::start(EnvOptions {
        controller_manager: true,
        ..EnvOptions::default()
    }));
    *shared = Some(env.clone());
    env
}

/// Stops the shared environment (every process, every temporary directory).
pub fn teardown() {
    let env = SHARED.lock().unwrap_or_else(|e| e.into_inner()).take();
    drop(env);
}

/// The directory of the workspace's binaries (`target/<profile>`), where `kubectl-drift` is
/// built (`.ci/e2e` builds every binary first).
pub(crate) fn binaries() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>")
        .to_path_buf();
    assert!(
        dir.join("kubectl-drift").is_file(),
        "{} is missing: build it first (`cargo build -p kubectl-drift`; `bash .ci/e2e` does)",
        dir.join("kubectl-drift").display()
    );
    dir
}

// What the tests of Events and of the who and why share.

/// A warn-mode rule for the Deployments of `ns` (nothing mutable).
pub fn warn_rule(ns: &str) -> String {
    format!(
        "mode: warn\npriority: 10\nnamespaces: [{ns}]\nselectors: [{{apiGroup: apps, kind: Deployment}}]\nmutable: []\n"
    )
}

/// `kubectl patch` of `deploy/name`'s replicas as `user` (impersonated, with every right).
pub fn patch_as(env: &Env, ns: &str, name: &str, user: &str, patch: &str) -> std::process::Output {
    let object = format!("deploy/{name}");
    env.kubectl(&[
        "patch",
        &object,
        "-n",
        ns,
        "--as",
        user,
        "--as-group",
        "system:masters",
        "--type=merge",
        "-p",
        patch,
    ])
}

pub fn replicas(n: u32) -> String {
    format!(r#"{{"spec":{{"replicas":{n}}}}}"#)
}

/// The Events of `ns` with `reason` about `kind`/`name`.
pub fn events(env: &Env, ns: &str, kind: &str, name: &str, reason: &str) -> Vec<Value> {
    let list = env
        .get(&["events.events.k8s.io", "-n", ns])
        .expect("the Events");
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|e| {
            e["reason"] == reason
                && e["regarding"]["kind"] == kind
                && e["regarding"]["name"] == name
        })
        .cloned()
        .collect()
}

/// Applies the rule and waits until the agent applies it to `ns`.
pub fn ruled(env: &Env, name: &str, spec: &str, ns: &str, check: impl Fn(bool, &str) -> bool) {
    env.rule(name, spec);
    wait_for_dry_run(
        env,
        name,
        &deployment(ns, "probe", 9, "nginx:1.0"),
        |ok, err| check(ok, err),
    );
}

/// A real `kubectl edit` of `deploy/name` as `user`, the editor a script that sets
/// `spec.replicas` from `from` to `to` in the file kubectl hands it.
pub fn edit_replicas_as(env: &Env, ns: &str, name: &str, user: &str, from: u32, to: u32) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let editor: std::path::PathBuf = dir.path().join("editor.sh");
    std::fs::write(
        &editor,
        format!(
            "#!/bin/sh\nset -e\nsed -i -e '/^spec:/,/^status:/ s/^  replicas: {from}$/  replicas: {to}/' \"$1\"\n"
        ),
    )
    .expect("write the editor");
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&editor)
        .status()
        .expect("chmod");
    let object = format!("deploy/{name}");
    let output = std::process::Command::new(drift_testkit::cluster::kubectl_path())
        .args(["edit", &object, "-n", ns, "--as", user])
        .args(["--as-group", "system:masters"])
        .env("KUBECONFIG", env.cluster.admin_kubeconfig())
        .env("KUBE_EDITOR", &editor)
        .env_remove("EDITOR")
        .output()
        .expect("run kubectl edit");
    assert!(
        output.status.success(),
        "kubectl edit: {}{}",
        stdout(&output),
        stderr(&output)
    );
    let live = env
        .get(&["deploy", name, "-n", ns])
        .expect("the Deployment");
    assert_eq!(live["spec"]["replicas"], to, "the editor's change was sent");
}

/// A namespace `namespace` with the Deployments `web` (2 replicas) and `probe`, a warn rule
/// `drift-system/<namespace>` over it, and alice's `kubectl edit` of web's replicas 2 → 5, once
/// its DriftWarned Event (the webhook's record) is there: the warned edit the audit's "who and
/// why" tests start from. Returns the namespace.
pub fn warned_edit_by_alice(env: &Env, namespace: &str) -> String {
    let ns = env.namespace(namespace, &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    env.apply(&deployment(&ns, "probe", 1, "nginx:1.0"));
    ruled(env, namespace, &warn_rule(&ns), &ns, |ok, err| {
        ok && err.contains(&format!("rule drift-system/{namespace}"))
    });
    edit_replicas_as(env, &ns, "web", "alice", 2, 5);
    wait_for("alice's edit record", Duration::from_secs(30), || {
        !events(env, &ns, "Deployment", "web", "DriftWarned").is_empty()
    });
    ns
}
