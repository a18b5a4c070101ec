//! The agent (`drift-sentinel`) as a process for black-box tests: [`Agent::serve`] or
//! [`Agent::audit`] give an [`AgentBuilder`] (rules, objects, pod name, ports, flags, when it
//! counts as ready); [`AgentBuilder::start`] runs it on loopback with its violations exported to
//! a spool directory of its own (unless [`AgentBuilder::without_export`]) and waits until its
//! admin API answers. The process is killed
//! when the [`Agent`] is dropped, or stopped gracefully with [`Agent::stop`].
//!
//! ```no_run
//! # use drift_testkit::{agent::Agent, examples};
//! let dir = tempfile::tempdir().unwrap();
//! let agent = Agent::serve(dir.path())
//!     .rules(examples().join("rule-strict.yaml"))
//!     .pod_name("agent-a")
//!     .start();
//! agent.violate("request-1");
//! ```

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::{client, examples, free_port, wait_for, workspace};

/// The `drift-sentinel` binary of the build the tests run in: next to the test binary's
/// directory (`target/debug/deps/..`), in `CARGO_TARGET_DIR`, or in the workspace's `target`.
pub fn agent_bin() -> PathBuf {
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.to_owned()))
    {
        candidates.push(dir.join("drift-sentinel"));
    }
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        candidates.push(PathBuf::from(dir).join("debug/drift-sentinel"));
    }
    candidates.push(workspace().join("target/debug/drift-sentinel"));
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "the agent binary is needed: run `cargo build -p drift-sentinel` first (looked at {candidates:?})"
            )
        })
}

/// Which process of the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `drift-sentinel serve`: the webhook, exporting admission violations.
    Serve,
    /// `drift-sentinel audit`: the audit, exporting its runs' violations.
    Audit,
}

/// How an agent is started; made by [`Agent::serve`] or [`Agent::audit`].
#[must_use = "an agent runs once started"]
pub struct AgentBuilder {
    dir: PathBuf,
    mode: Mode,
    rules: Vec<PathBuf>,
    objects: Option<PathBuf>,
    pod_name: Option<String>,
    ports: Option<(u16, u16)>,
    args: Vec<OsString>,
    ready: Box<dyn Fn(&Value) -> bool>,
    ready_within: Duration,
    /// Violations exported to the spool (through its Connection); off as the chart's default.
    export: bool,
}

impl AgentBuilder {
    fn new(dir: &Path, mode: Mode) -> Self {
        AgentBuilder {
            dir: dir.to_owned(),
            mode,
            rules: Vec::new(),
            objects: None,
            pod_name: None,
            ports: None,
            args: Vec::new(),
            ready: Box::new(|_| true),
            ready_within: Duration::from_secs(20),
            export: true,
        }
    }

    /// No violation export (the chart's default): no Connection, nothing in the spool.
    pub fn without_export(mut self) -> Self {
        self.export = false;
        self
    }

    /// A `--rules` file or directory (in the order given).
    pub fn rules(mut self, path: impl Into<PathBuf>) -> Self {
        self.rules.push(path.into());
        self
    }

    /// The audit's `--objects` (a dump of objects instead of a cluster).
    pub fn objects(mut self, path: impl Into<PathBuf>) -> Self {
        self.objects = Some(path.into());
        self
    }

    /// `--pod-name`: the name the agent reports itself by.
    pub fn pod_name(mut self, name: &str) -> Self {
        self.pod_name = Some(name.to_owned());
        self
    }

    /// The webhook's and the admin API's ports (else free ones), to start again where an
    /// earlier agent listened.
    pub fn ports(mut self, port: u16, admin_port: u16) -> Self {
        self.ports = Some((port, admin_port));
        self
    }

    /// Further flags, as written on the command line.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Ready when the admin `/status` document satisfies `ready` (else as soon as `/status`
    /// answers), within `within`.
    pub fn ready_when(
        mut self,
        within: Duration,
        ready: impl Fn(&Value) -> bool + 'static,
    ) -> Self {
        self.ready = Box::new(ready);
        self.ready_within = within;
        self
    }

    /// Starts the agent and waits until it is ready; its log is in the test's failure message
    /// when it is not.
    pub fn start(self) -> Agent {
        std::fs::create_dir_all(&self.dir).expect("the agent's directory");
        let (port, admin_port) = self.ports.unwrap_or_else(|| (free_port(), free_port()));
        let spool = self.dir.join("violations");
        let connection = self.dir.join("connection.yaml");
        std::fs::write(
            &connection,
            format!(
                "apiVersion: connection.drift-sentinel.io/v1alpha1\nkind: Connection\nmetadata: {{name: audit-connection}}\nspec: {{driver: disk, config: {{path: {}}}}}\n",
                spool.display()
            ),
        )
        .expect("the agent's Connection");
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let logs = self.dir.join(format!("agent-{admin_port}-{nanos}.log"));
        let log = std::fs::File::create(&logs).expect("the agent's log");
        let mut command = Command::new(agent_bin());
        command.arg(match self.mode {
            Mode::Serve => "serve",
            Mode::Audit => "audit",
        });
        for rules in &self.rules {
            command.arg("--rules").arg(rules);
        }
        if let Some(objects) = &self.objects {
            command.arg("--objects").arg(objects);
        }
        if let Some(name) = &self.pod_name {
            command.arg("--pod-name").arg(name);
        }
        if self.export {
            command
                .arg(match self.mode {
                    Mode::Serve => "--enable-admission-violation-export",
                    Mode::Audit => "--enable-violation-export",
                })
                .arg("--connection")
                .arg(&connection);
        }
        let child = command
            .arg("--address")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--admin-address")
            .arg(format!("127.0.0.1:{admin_port}"))
            .args(&self.args)
            .stdout(Stdio::from(log.try_clone().expect("the agent's log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start drift-sentinel");
        let agent = Agent {
            child,
            port,
            admin_port,
            spool,
            logs,
        };
        let ready = wait_for(self.ready_within, || {
            client()
                .get(agent.url("/status"))
                .send()
                .ok()
                .filter(|r| r.status().is_success())
                .and_then(|r| r.json::<Value>().ok())
                .filter(|status| (self.ready)(status))
        });
        assert!(ready.is_some(), "agent not ready:\n{}", agent.logs());
        agent
    }
}

/// A running `drift-sentinel`; killed when dropped.
pub struct Agent {
    child: Child,
    port: u16,
    admin_port: u16,
    spool: PathBuf,
    logs: PathBuf,
}

impl Agent {
    /// `drift-sentinel serve` in `dir` (its Connection, spool and log), exporting admission
    /// violations.
    pub fn serve(dir: &Path) -> AgentBuilder {
        AgentBuilder::new(dir, Mode::Serve)
    }

    /// `drift-sentinel audit` in `dir`, exporting its runs' violations.
    pub fn audit(dir: &Path) -> AgentBuilder {
        AgentBuilder::new(dir, Mode::Audit)
    }

    /// The webhook's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The admin API's port.
    pub fn admin_port(&self) -> u16 {
        self.admin_port
    }

    /// The admin API's address.
    pub fn admin_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.admin_port))
    }

    /// The admin API's base URL, `http://127.0.0.1:PORT`.
    pub fn admin_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.admin_port)
    }

    /// The URL of `path` on the admin API.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.admin_url())
    }

    /// The directory the violations are exported to.
    pub fn spool(&self) -> &Path {
        &self.spool
    }

    /// What the agent wrote to stdout and stderr so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.logs).unwrap_or_default()
    }

    /// Sends the example edit (`docs/examples/deployment-before.yaml` into `-after.yaml`: replicas
    /// and image changed) to the webhook as request `uid`, and checks that it is denied.
    pub fn violate(&self, uid: &str) {
        let examples = examples();
        let review = Command::new(agent_bin())
            .arg("review")
            .arg("--uid")
            .arg(uid)
            .arg("--old")
            .arg(examples.join("deployment-before.yaml"))
            .arg("--new")
            .arg(examples.join("deployment-after.yaml"))
            .output()
            .expect("drift-sentinel review");
        assert!(review.status.success(), "{review:?}");
        let response: Value = client()
            .post(format!("http://127.0.0.1:{}/validate", self.port))
            .header("Content-Type", "application/json")
            .body(review.stdout)
            .send()
            .and_then(|r| r.json())
            .expect("POST /validate");
        assert_eq!(
            response["response"]["allowed"], false,
            "not denied: {response}"
        );
    }

    /// SIGTERM, and waits for the graceful exit.
    pub fn stop(mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let stopped = wait_for(Duration::from_secs(15), || {
            self.child.try_wait().ok().flatten()
        });
        assert!(stopped.is_some(), "agent did not stop:\n{}", self.logs());
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
