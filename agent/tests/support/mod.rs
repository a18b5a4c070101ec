//! Test support: runs the real `drift-sentinel` binary on loopback ports, talks to it over
//! HTTP(S), and writes rule and Connection files. Certificates come from `drift_testkit::pki`.
#![allow(dead_code)]

pub mod record;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

pub use drift_testkit::free_port;

/// An HTTPS client trusting only `ca_pem`, presenting `identity` (a client certificate and its
/// key) when given.
pub fn https_client(
    ca_pem: &str,
    identity: Option<&drift_testkit::pki::Pair>,
) -> reqwest::blocking::Client {
    let ca = reqwest::Certificate::from_pem(ca_pem.as_bytes()).expect("CA for the client");
    let mut builder = reqwest::blocking::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(ca)
        .timeout(Duration::from_secs(10));
    if let Some(pair) = identity {
        let pem = format!("{}{}", pair.cert_pem, pair.key_pem);
        builder = builder.identity(reqwest::Identity::from_pem(pem.as_bytes()).expect("identity"));
    }
    builder.build().expect("HTTPS client")
}

/// POSTs `body` as JSON text: the HTTP status and the answer's text.
pub fn post_text(client: &reqwest::blocking::Client, url: &str, body: String) -> (u16, String) {
    let response = client
        .post(url)
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .expect("POST");
    let status = response.status().as_u16();
    (status, response.text().unwrap_or_default())
}

pub fn plain_client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("HTTP client")
}

/// An agent serving HTTPS with a pair of `ca`'s written into `dir` as `tls.crt`/`tls.key`,
/// started with `args` before the TLS flags.
pub fn https_agent(dir: &Path, ca: &drift_testkit::pki::Ca, args: &[&str]) -> Agent {
    let (cert, key) = ca.loopback_serving().write(dir, "tls");
    let tls = [
        "--tls-cert-file",
        cert.to_str().unwrap(),
        "--tls-key-file",
        key.to_str().unwrap(),
    ];
    Agent::start(&[args, &tls].concat(), true)
}

/// A running agent.
pub struct Agent {
    child: Child,
    /// `http(s)://127.0.0.1:PORT` of the webhook listener.
    pub base: String,
    /// `http://127.0.0.1:PORT` of the admin listener.
    pub admin: String,
    pub port: u16,
    logs: Arc<Mutex<Vec<String>>>,
}

impl Agent {
    /// The agent's `/metrics` text (plain HTTP, as the tests' agents serve it).
    pub fn metrics(&self) -> String {
        plain_client()
            .get(format!("{}/metrics", self.base))
            .send()
            .and_then(|r| r.text())
            .expect("GET /metrics")
    }

    /// Starts the agent with `args` (plus the listener addresses) and waits until it is ready.
    pub fn start(args: &[&str], tls: bool) -> Self {
        Self::start_in(None, args, tls)
    }

    /// [`Agent::start`] with the process's working directory set to `cwd` (relative paths,
    /// such as a Connection's default path, resolve there).
    pub fn start_in(cwd: Option<&Path>, args: &[&str], tls: bool) -> Self {
        Self::start_with(cwd, free_port(), args, tls)
    }

    /// [`Agent::start`] with the webhook listener on `port` (known before the agent starts,
    /// e.g. to register it with an API server).
    pub fn start_on(port: u16, args: &[&str], tls: bool) -> Self {
        Self::start_with(None, port, args, tls)
    }

    fn start_with(cwd: Option<&Path>, port: u16, args: &[&str], tls: bool) -> Self {
        let admin_port = free_port();
        let mut command = Command::new(env!("CARGO_BIN_EXE_drift-sentinel"));
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .args(args)
            .arg("--address")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--admin-address")
            .arg(format!("127.0.0.1:{admin_port}"))
            .arg("--reload-interval")
            .arg("200ms")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(cwd) = cwd {
            command.current_dir(cwd);
        }
        let mut child = command.spawn().expect("start drift-sentinel");
        let logs = Arc::new(Mutex::new(Vec::new()));
        for stream in outputs(&mut child) {
            let logs = logs.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if let Ok(mut logs) = logs.lock() {
                        logs.push(line);
                    }
                }
            });
        }
        let scheme = if tls { "https" } else { "http" };
        let agent = Self {
            child,
            base: format!("{scheme}://127.0.0.1:{port}"),
            admin: format!("http://127.0.0.1:{admin_port}"),
            port,
            logs,
        };
        agent.wait_until_ready();
        agent
    }

    fn wait_until_ready(&self) {
        let client = plain_client();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(response) = client.get(format!("{}/status", self.admin)).send()
                && response.status().is_success()
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "agent did not become ready; logs:\n{}",
            self.logs().join("\n")
        );
    }

    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().map(|l| l.clone()).unwrap_or_default()
    }

    pub fn status(&self) -> Value {
        plain_client()
            .get(format!("{}/status", self.admin))
            .send()
            .and_then(|r| r.json())
            .expect("admin /status")
    }

    /// Waits until `check` holds, 20 s at the most (the logs are shown if it never does).
    pub fn wait_until(&self, what: &str, mut check: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !check() {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}\nlogs:\n{}",
                self.logs().join("\n")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until `check` holds on `/status`.
    pub fn wait_for_status(&self, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let status = self.status();
            if check(&status) {
                return status;
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out waiting for {what}; last status: {status:#}\nlogs:\n{}",
                    self.logs().join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success());
    }

    /// Waits for the process to exit, at most `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Connection document (`audit-connection`, the disk driver) whose `spec.config` is
/// `config` (YAML flow text, e.g. `{path: "/tmp/x"}`).
pub fn connection_yaml(config: &str) -> String {
    format!(
        "apiVersion: connection.drift-sentinel.io/v1alpha1\nkind: Connection\nmetadata: {{name: audit-connection}}\nspec: {{driver: disk, config: {config}}}\n"
    )
}

/// A Connection file in `dir` whose export goes to `dir/topics` (`extra`: more `spec.config`
/// fields, e.g. `, maxAuditResults: 2`): the file and the topics directory.
pub fn connection_file(dir: &Path, extra: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let topics = dir.join("topics");
    let connection = dir.join("connection.yaml");
    let config = format!("{{path: {}{extra}}}", topics.display());
    std::fs::write(&connection, connection_yaml(&config)).expect("write the Connection file");
    (connection, topics)
}

/// The records of the completed audit run in `channel` (its `.log`): the lines with an
/// `eventType`, control records left out.
pub fn completed_run_records(channel: &Path) -> Vec<Value> {
    let run = std::fs::read_dir(channel)
        .expect("the audit channel")
        .map(|e| e.expect("an entry").path())
        .find(|p| p.extension().is_some_and(|e| e == "log"))
        .expect("the run's file");
    std::fs::read_to_string(run)
        .expect("the run's records")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON record"))
        .filter(|r| r.get("eventType").is_some())
        .collect()
}

/// A rule's spec: every Deployment in every namespace, enforce, only its images mutable.
pub const IMAGE_RULE: &str = "mode: enforce\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\nmutable: ['spec.template.spec.containers[*].image']\n";

/// A rule ConfigMap document.
pub fn rule_config_map(namespace: &str, name: &str, spec: &str) -> String {
    let indented: String = spec
        .trim_start_matches('\n')
        .lines()
        .map(|l| format!("    {l}\n"))
        .collect();
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\n  annotations:\n    drift-sentinel.k8s.io/rule: \"true\"\ndata:\n  spec: |\n{indented}"
    )
}

/// POSTs a review and returns (HTTP status, body as JSON or text).
pub fn post(client: &reqwest::blocking::Client, url: &str, body: &Value) -> (u16, Value) {
    let response = client
        .post(url)
        .header("Content-Type", "application/json")
        .body(body.to_string())
        .send()
        .expect("POST review");
    let status = response.status().as_u16();
    let text = response.text().unwrap_or_default();
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, value)
}

/// Deployment `namespace/web` with `replicas` replicas of one container, `app` (nginx).
pub fn small_deployment(namespace: &str, replicas: i64) -> Value {
    serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "app", "image": "nginx"}]}}}})
}

/// A child's stdout and stderr (those it was started with piped), to read on their own threads.
fn outputs(child: &mut Child) -> Vec<Box<dyn std::io::Read + Send>> {
    let stdout = child
        .stdout
        .take()
        .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>);
    let stderr = child
        .stderr
        .take()
        .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>);
    stdout.into_iter().chain(stderr).collect()
}

/// A temporary directory whose `rules/` holds one valid rule, `drift-sentinel/fine`
/// ([`IMAGE_RULE`]): what must still be served beside the files a test makes refused. The
/// directory (removed when dropped) and `rules/`.
pub fn rules_dir_with_a_fine_rule() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    std::fs::write(
        rules.join("fine.yaml"),
        rule_config_map("drift-sentinel", "fine", IMAGE_RULE),
    )
    .unwrap();
    (dir, rules)
}

/// An UPDATE review (uid `after`) that changes one image of a three-container Deployment:
/// allowed by the default rule.
pub fn image_review() -> Value {
    use drift_testkit::objects::{deployment_with, review};
    let old = deployment_with(["api:1", "worker:1", "proxy:1"], 3, 4);
    let new = deployment_with(["api:2", "worker:1", "proxy:1"], 3, 4);
    review("after", &old, &new)
}

/// POSTs `body` to `url` over plain HTTP, timed: the status, the answer and how long it took.
pub fn post_timed(url: &str, body: String) -> (u16, String, Duration) {
    let started = Instant::now();
    let (status, text) = post_text(&plain_client(), url, body);
    (status, text, started.elapsed())
}

/// Nothing the agent was sent took it down: it answers its probes and judges `review` on
/// `/validate` as before (`allowed` or denied).
pub fn assert_still_judging(agent: &Agent, review: &Value, allowed: bool) {
    let (status, body, _) = post_timed(&format!("{}/validate", agent.base), review.to_string());
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).expect("a review");
    assert_eq!(answer["response"]["uid"], review["request"]["uid"]);
    assert_eq!(answer["response"]["allowed"], allowed, "{answer}");
    let health = plain_client()
        .get(format!("{}/healthz", agent.base))
        .send()
        .expect("healthz");
    assert!(health.status().is_success());
}

/// An UPDATE review of Deployment `namespace/web` ([`small_deployment`]) scaled 1 → 2 by
/// `alice`.
pub fn replicas_review(namespace: &str) -> Value {
    let deployment = |replicas: i64| small_deployment(namespace, replicas);
    serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "namespace": namespace, "name": "web", "operation": "UPDATE", "userInfo": {"username": "alice"},
        "object": deployment(2), "oldObject": deployment(1)}})
}

/// The docs' example review (`docs/examples`), as `drift-sentinel review` builds it from the
/// before/after Deployments (`extra`: more arguments, e.g. `--uid`).
pub fn build_example_review(extra: &[&str]) -> Value {
    let examples = drift_testkit::examples();
    let output = Command::new(env!("CARGO_BIN_EXE_drift-sentinel"))
        .arg("review")
        .args(extra)
        .arg("--old")
        .arg(examples.join("deployment-before.yaml"))
        .arg("--new")
        .arg(examples.join("deployment-after.yaml"))
        .output()
        .expect("run drift-sentinel review");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("the review is JSON")
}

/// Runs `command` to its end: its exit code, what it printed (stdout, then stderr) and its
/// peak resident memory in bytes, read from /proc while it runs (every 2 ms: a lower bound,
/// close for a process whose memory grows over more than a moment). The kernel's own count
/// (`wait4`'s `ru_maxrss`) is no use here: it includes the test process's memory, which the
/// child shared until it ran the binary.
pub fn run_measured(command: &mut Command) -> (Option<i32>, String, u64) {
    use std::io::Read as _;
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the command");
    let mut readers = Vec::new();
    for mut stream in outputs(&mut child) {
        readers.push(std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stream.read_to_string(&mut text);
            text
        }));
    }
    let mut peak = 0;
    let status = loop {
        if let Some(hwm) = std::fs::read_to_string(format!("/proc/{}/status", child.id()))
            .ok()
            .and_then(|status| {
                status
                    .lines()
                    .find_map(|line| line.strip_prefix("VmHWM:"))
                    .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
        {
            peak = peak.max(hwm * 1024);
        }
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let printed = readers
        .into_iter()
        .map(|r| r.join().unwrap_or_default())
        .collect::<String>();
    (status.code(), printed, peak)
}
