//! A real Kubernetes control plane for tests: etcd, kube-apiserver and (when asked)
//! kube-controller-manager and kube-scheduler, built by `.ci/build-cluster` into
//! `.tools/cluster/`, started on free loopback ports in a temporary directory. With
//! [`ClusterOptions::node`] it is ready for a real node ([`crate::node::Node`]): pods reach the
//! API server through the `kubernetes` Service.
//!
//! The API server serves a certificate of a test CA, authenticates client certificates of that
//! CA (a kubeconfig per user: [`Cluster::kubeconfig_for`]), authorizes with RBAC, signs
//! service-account tokens, and writes an audit log at level `Metadata`. Every process runs in
//! its own process group and is killed with it when the [`Cluster`] drops — also when a test
//! panics — and when the test process itself dies (parent-death signal), so no test leaves a
//! server behind. Faults on demand: [`Cluster::restart_apiserver`], [`Cluster::stop_etcd`],
//! [`Cluster::compact_etcd`].

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::free_port;
use crate::pki::{self, Ca};

/// What to start.
#[derive(Debug, Clone, Default)]
pub struct ClusterOptions {
    /// Also run kube-controller-manager (Deployments roll out, namespaces are finalized,
    /// service accounts get tokens).
    pub controller_manager: bool,
    /// Ready for a [`crate::node::Node`]: also run kube-scheduler, and let the API server listen
    /// on the host's address too, advertised as the endpoint of the `kubernetes` Service, so
    /// that pods reach it as `$KUBERNETES_SERVICE_HOST` through kube-proxy (there is no cluster
    /// DNS). Implies `controller_manager`.
    pub node: bool,
}

/// A running control plane. Dropping it stops every process and removes its directory.
pub struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    etcd_port: u16,
    etcd_peer_port: u16,
    apiserver_port: u16,
    etcd: Option<Child>,
    apiserver: Option<Child>,
    controller_manager: Option<Child>,
    scheduler: Option<Child>,
    /// With [`ClusterOptions::node`]: the host's address, which the API server advertises.
    host_address: Option<std::net::IpAddr>,
    ca: Ca,
    /// The CA of the client certificate the API server presents to admission webhooks.
    webhook_client_ca: Ca,
    admin_kubeconfig: PathBuf,
}

/// Where the control-plane binaries are: `DRIFT_CLUSTER_BIN`, else `<workspace>/.tools/cluster`.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("DRIFT_CLUSTER_BIN") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace directory")
        .join(".tools/cluster")
}

/// The `kubectl` built with the control plane (the machine's own may be another version).
pub fn kubectl_path() -> PathBuf {
    bin_dir().join("kubectl")
}

/// The Services' address range, and the address of the `kubernetes` Service in it.
pub const SERVICE_CIDR: &str = "10.0.0.0/24";
pub const KUBERNETES_SERVICE_IP: &str = "10.0.0.1";

const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n";

/// The name in the client certificate the API server presents to every admission webhook.
pub const WEBHOOK_CLIENT_NAME: &str = "kube-apiserver";

/// The AdmissionConfiguration that gives the API server a client certificate for webhooks
/// (`--admission-control-config-file`), as docs/install.md tells operators to write it.
fn admission_configuration(kubeconfig: &Path) -> String {
    format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: ValidatingAdmissionWebhook\n  configuration:\n    apiVersion: apiserver.config.k8s.io/v1\n    kind: WebhookAdmissionConfiguration\n    kubeConfigFile: {}\n",
        kubeconfig.display()
    )
}

/// The kubeconfig whose default user (`*`: every webhook host) holds that certificate.
fn webhook_kubeconfig(cert: &Path, key: &Path) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nusers:\n- name: '*'\n  user:\n    client-certificate: {}\n    client-key: {}\n",
        cert.display(),
        key.display()
    )
}

impl Cluster {
    /// Starts etcd and kube-apiserver (and the controller manager when asked) and waits until
    /// the API server is ready. Panics with the servers' logs when they do not start.
    pub fn start(options: ClusterOptions) -> Self {
        let bin = bin_dir();
        for name in [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kubectl",
        ] {
            assert!(
                bin.join(name).is_file(),
                "{} is missing: build the control plane with `bash .ci/build-cluster`",
                bin.join(name).display()
            );
        }
        let dir = tempfile::Builder::new()
            .prefix("drift-cluster-")
            .tempdir()
            .expect("cluster directory");
        let ca = Ca::new("kubernetes");
        let path = dir.path();
        let host_address = options.node.then(crate::node::host_address);
        std::fs::write(path.join("ca.crt"), ca.cert_pem()).expect("write CA");
        let host_name = host_address.map(|a| a.to_string());
        let mut names = vec![
            "127.0.0.1",
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            KUBERNETES_SERVICE_IP,
        ];
        names.extend(host_name.as_deref());
        ca.serving(&names).write(path, "apiserver");
        // The API server's client certificate towards kubelets (port-forwarding, logs, exec).
        ca.client("kube-apiserver-kubelet-client", &["system:masters"])
            .write(path, "kubelet-client");
        let (sa_key, sa_pub) = pki::key_pair_pem();
        std::fs::write(path.join("sa.key"), sa_key).expect("write sa key");
        std::fs::write(path.join("sa.pub"), sa_pub).expect("write sa public key");
        std::fs::write(path.join("audit-policy.yaml"), AUDIT_POLICY).expect("write policy");
        let webhook_client_ca = Ca::new("webhook-clients");
        let (client_cert, client_key) = webhook_client_ca
            .client(WEBHOOK_CLIENT_NAME, &[])
            .write(path, "webhook-client");
        let webhook_kubeconfig_path = path.join("webhook-kubeconfig.yaml");
        std::fs::write(
            &webhook_kubeconfig_path,
            webhook_kubeconfig(&client_cert, &client_key),
        )
        .expect("write webhook kubeconfig");
        std::fs::write(
            path.join("admission-config.yaml"),
            admission_configuration(&webhook_kubeconfig_path),
        )
        .expect("write admission configuration");
        let mut cluster = Self {
            admin_kubeconfig: path.join("admin.kubeconfig"),
            dir,
            bin,
            etcd_port: free_port(),
            etcd_peer_port: free_port(),
            apiserver_port: free_port(),
            etcd: None,
            apiserver: None,
            controller_manager: None,
            scheduler: None,
            host_address,
            ca,
            webhook_client_ca,
        };
        let admin = cluster.kubeconfig_for("kubernetes-admin", &["system:masters"]);
        std::fs::rename(admin, &cluster.admin_kubeconfig).expect("admin kubeconfig");
        cluster.start_etcd();
        cluster.start_apiserver();
        if options.controller_manager || options.node {
            cluster.start_controller_manager();
        }
        if options.node {
            cluster.start_scheduler();
        }
        cluster
    }

    /// The temporary directory of this cluster (certificates, logs, etcd data).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `https://127.0.0.1:PORT` of the API server.
    pub fn server(&self) -> String {
        format!("https://127.0.0.1:{}", self.apiserver_port)
    }

    /// With [`ClusterOptions::node`], the host's address that the API server advertises (the
    /// `kubernetes` Service's endpoint), which a node registers as its own.
    pub fn host_address(&self) -> Option<std::net::IpAddr> {
        self.host_address
    }

    /// The CA that signed the API server's certificate and its client certificates.
    pub fn ca(&self) -> &Ca {
        &self.ca
    }

    /// The CA of the client certificate (CN [`WEBHOOK_CLIENT_NAME`]) that the API server
    /// presents to every admission webhook: what an agent's `--client-ca-file` trusts.
    pub fn webhook_client_ca(&self) -> &Ca {
        &self.webhook_client_ca
    }

    pub fn admin_kubeconfig(&self) -> &Path {
        &self.admin_kubeconfig
    }

    /// A kubeconfig for `user` in `groups` (a client certificate of the cluster's CA).
    pub fn kubeconfig_for(&self, user: &str, groups: &[&str]) -> PathBuf {
        let stem = format!("user-{}", sanitize(user));
        let (cert, key) = self.ca.client(user, groups).write(self.dir(), &stem);
        let file = self.dir().join(format!("{stem}.kubeconfig"));
        let ca = self.dir().join("ca.crt");
        std::fs::write(
            &file,
            kubeconfig_yaml(
                &self.server(),
                &ca,
                &format!(
                    "    client-certificate: {}\n    client-key: {}\n",
                    cert.display(),
                    key.display()
                ),
            ),
        )
        .expect("write kubeconfig");
        file
    }

    /// A kubeconfig that authenticates with a bearer token (e.g. of a ServiceAccount).
    pub fn kubeconfig_with_token(&self, name: &str, token: &str) -> PathBuf {
        let file = self
            .dir()
            .join(format!("token-{}.kubeconfig", sanitize(name)));
        let ca = self.dir().join("ca.crt");
        std::fs::write(
            &file,
            kubeconfig_yaml(&self.server(), &ca, &format!("    token: {token}\n")),
        )
        .expect("write kubeconfig");
        file
    }

    /// A kubeconfig for a ServiceAccount, with a token from the TokenRequest API.
    pub fn kubeconfig_for_service_account(&self, namespace: &str, name: &str) -> PathBuf {
        let output = self.kubectl(&["create", "token", name, "-n", namespace, "--duration=2h"]);
        assert!(
            output.status.success(),
            "kubectl create token {namespace}/{name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let token = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        self.kubeconfig_with_token(&format!("sa-{namespace}-{name}"), &token)
    }

    /// A `kubectl` command with the admin kubeconfig (never the user's own).
    pub fn kubectl_command(&self) -> Command {
        let mut command = Command::new(kubectl_path());
        command
            .env("KUBECONFIG", &self.admin_kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .arg("--kubeconfig")
            .arg(&self.admin_kubeconfig);
        command
    }

    /// Runs the admin `kubectl` with `args` and returns its output.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_command()
            .args(args)
            .output()
            .expect("run kubectl")
    }

    /// Runs the admin `kubectl` with `stdin` as input.
    pub fn kubectl_stdin(&self, args: &[&str], stdin: &str) -> Output {
        kubectl_with_stdin(self.kubectl_command(), args, stdin)
    }

    /// `kubectl apply -f -` of `manifest`; panics with kubectl's stderr when it fails.
    pub fn apply(&self, manifest: &str) {
        let output = self.kubectl_stdin(&["apply", "-f", "-"], manifest);
        assert!(
            output.status.success(),
            "kubectl apply failed: {}\n{manifest}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// `kubectl get -o json` of one object, `None` when it does not exist.
    pub fn get(&self, args: &[&str]) -> Option<Value> {
        let mut all = vec!["get", "-o", "json"];
        all.extend_from_slice(args);
        let output = self.kubectl(&all);
        if !output.status.success() {
            return None;
        }
        serde_json::from_slice(&output.stdout).ok()
    }

    /// The API server's audit log, one event per element.
    pub fn audit_events(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir().join("audit.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Stops the API server and starts it again on the same port (its watch cache starts
    /// empty: watches resumed from an older resourceVersion than etcd keeps get `410 Gone`).
    pub fn restart_apiserver(&mut self) {
        self.stop_apiserver();
        self.start_apiserver();
    }

    /// Stops the API server (clients see connection refused until [`Cluster::start_apiserver`]).
    pub fn stop_apiserver(&mut self) {
        stop(self.apiserver.take());
    }

    /// Stops etcd: the API server stays up but cannot read or write.
    pub fn stop_etcd(&mut self) {
        stop(self.etcd.take());
    }

    /// Compacts etcd's history up to its current revision, so that a watch resumed from an
    /// earlier resourceVersion cannot be served (`410 Gone` once the API server's watch cache
    /// no longer holds it, e.g. after [`Cluster::restart_apiserver`]).
    pub fn compact_etcd(&self) -> u64 {
        let client = reqwest::blocking::Client::new();
        let base = format!("http://127.0.0.1:{}/v3/kv", self.etcd_port);
        // `/` as the key asks for nothing in particular; the header carries the revision.
        let range: Value = client
            .post(format!("{base}/range"))
            .json(&json!({"key": "Lw==", "count_only": true}))
            .send()
            .and_then(|r| r.json())
            .expect("etcd range");
        let revision: u64 = range["header"]["revision"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .expect("etcd revision");
        let response = client
            .post(format!("{base}/compaction"))
            .json(&json!({"revision": revision.to_string(), "physical": true}))
            .send()
            .expect("etcd compaction");
        assert!(response.status().is_success(), "etcd compaction failed");
        revision
    }

    pub fn start_etcd(&mut self) {
        assert!(self.etcd.is_none(), "etcd is running");
        let peer = format!("http://127.0.0.1:{}", self.etcd_peer_port);
        let client = format!("http://127.0.0.1:{}", self.etcd_port);
        let mut command = Command::new(self.bin.join("etcd"));
        command
            .arg("--name=e2e")
            .arg(format!("--data-dir={}", self.dir().join("etcd").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=e2e={peer}"))
            .arg("--log-level=warn")
            // Tests need no durability; fsync dominates etcd's latency on a small machine.
            .arg("--unsafe-no-fsync");
        self.etcd = Some(self.spawn(command, "etcd"));
        self.wait_until("etcd", Duration::from_secs(30), |c| {
            reqwest::blocking::get(format!("http://127.0.0.1:{}/health", c.etcd_port))
                .is_ok_and(|r| r.status().is_success())
        });
    }

    pub fn start_apiserver(&mut self) {
        assert!(self.apiserver.is_none(), "the API server is running");
        let d = self.dir().to_path_buf();
        let mut command = Command::new(self.bin.join("kube-apiserver"));
        match self.host_address {
            // Pods reach the API server at the `kubernetes` Service, whose endpoint the API
            // server keeps (the lease reconciler) at its advertised address.
            Some(host) => command
                .arg("--bind-address=0.0.0.0")
                .arg(format!("--advertise-address={host}")),
            None => command
                .arg("--bind-address=127.0.0.1")
                .arg("--advertise-address=127.0.0.1")
                .arg("--endpoint-reconciler-type=none"),
        };
        command
            .arg(format!(
                "--etcd-servers=http://127.0.0.1:{}",
                self.etcd_port
            ))
            .arg(format!("--secure-port={}", self.apiserver_port))
            .arg(format!("--cert-dir={}", d.join("certs").display()))
            .arg(format!(
                "--tls-cert-file={}",
                d.join("apiserver.crt").display()
            ))
            .arg(format!(
                "--tls-private-key-file={}",
                d.join("apiserver.key").display()
            ))
            .arg(format!("--client-ca-file={}", d.join("ca.crt").display()))
            .arg(format!(
                "--kubelet-client-certificate={}",
                d.join("kubelet-client.crt").display()
            ))
            .arg(format!(
                "--kubelet-client-key={}",
                d.join("kubelet-client.key").display()
            ))
            .arg("--kubelet-preferred-address-types=InternalIP")
            // Node: kubelets (user system:node:NAME) read what their pods need.
            .arg("--authorization-mode=Node,RBAC")
            .arg("--anonymous-auth=false")
            .arg("--service-account-issuer=https://kubernetes.default.svc")
            .arg(format!(
                "--service-account-key-file={}",
                d.join("sa.pub").display()
            ))
            .arg(format!(
                "--service-account-signing-key-file={}",
                d.join("sa.key").display()
            ))
            .arg(format!("--service-cluster-ip-range={SERVICE_CIDR}"))
            .arg(format!(
                "--audit-policy-file={}",
                d.join("audit-policy.yaml").display()
            ))
            .arg(format!(
                "--audit-log-path={}",
                d.join("audit.log").display()
            ))
            .arg("--audit-log-mode=blocking")
            .arg(format!(
                "--admission-control-config-file={}",
                d.join("admission-config.yaml").display()
            ))
            .arg("--allow-privileged=true")
            .arg("--profiling=false")
            .arg("-v=1");
        self.apiserver = Some(self.spawn(command, "kube-apiserver"));
        self.wait_until("kube-apiserver", Duration::from_secs(90), |c| {
            c.kubectl(&["get", "--raw", "/readyz"]).status.success()
        });
    }

    pub fn start_controller_manager(&mut self) {
        assert!(
            self.controller_manager.is_none(),
            "the controller manager is running"
        );
        let kubeconfig = self.kubeconfig_for("system:kube-controller-manager", &[]);
        let d = self.dir().to_path_buf();
        let mut command = Command::new(self.bin.join("kube-controller-manager"));
        command
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!(
                "--authentication-kubeconfig={}",
                kubeconfig.display()
            ))
            .arg(format!(
                "--authorization-kubeconfig={}",
                kubeconfig.display()
            ))
            .arg(format!(
                "--service-account-private-key-file={}",
                d.join("sa.key").display()
            ))
            .arg(format!("--root-ca-file={}", d.join("ca.crt").display()))
            .arg("--use-service-account-credentials=true")
            .arg("--leader-elect=false")
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={}", free_port()))
            .arg(format!("--cert-dir={}", d.join("cm-certs").display()))
            .arg("-v=1");
        self.controller_manager = Some(self.spawn(command, "kube-controller-manager"));
    }

    /// Starts kube-scheduler (pods are bound to a [`crate::node::Node`]).
    pub fn start_scheduler(&mut self) {
        assert!(self.scheduler.is_none(), "the scheduler is running");
        let kubeconfig = self.kubeconfig_for("system:kube-scheduler", &[]);
        let mut command = Command::new(self.bin.join("kube-scheduler"));
        command
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!(
                "--authentication-kubeconfig={}",
                kubeconfig.display()
            ))
            .arg(format!(
                "--authorization-kubeconfig={}",
                kubeconfig.display()
            ))
            .arg("--leader-elect=false")
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={}", free_port()))
            .arg("-v=1");
        self.scheduler = Some(self.spawn(command, "kube-scheduler"));
    }

    /// Log file of one component, for failure messages.
    pub fn log_of(&self, component: &str) -> String {
        log_tail(&self.dir().join(format!("{component}.log")))
    }

    fn spawn(&self, command: Command, name: &str) -> Child {
        spawn_logged(command, &self.dir().join(format!("{name}.log")))
    }

    fn wait_until(&mut self, what: &str, limit: Duration, ready: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if ready(self) {
                return;
            }
            let exited = [&mut self.etcd, &mut self.apiserver]
                .into_iter()
                .flatten()
                .any(|child| matches!(child.try_wait(), Ok(Some(_))));
            if exited {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!(
            "{what} did not become ready; its log:\n{}",
            self.log_of(what)
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        stop(self.scheduler.take());
        stop(self.controller_manager.take());
        stop(self.apiserver.take());
        stop(self.etcd.take());
        // DRIFT_CLUSTER_KEEP=1 keeps the directory (logs, audit log, certificates) to look at.
        if std::env::var_os("DRIFT_CLUSTER_KEEP").is_some() {
            let dir = std::mem::replace(&mut self.dir, tempfile::TempDir::new().expect("dir"));
            eprintln!("cluster directory kept: {}", dir.keep().display());
        }
    }
}

fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

fn kubeconfig_yaml(server: &str, ca: &Path, user: &str) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: {server}\n    certificate-authority: {}\nusers:\n- name: e2e\n  user:\n{user}contexts:\n- name: e2e\n  context:\n    cluster: e2e\n    user: e2e\n    namespace: default\ncurrent-context: e2e\n",
        ca.display()
    );
    out
}

/// Runs `command` with `args`, writing `stdin` to it.
pub fn kubectl_with_stdin(mut command: Command, args: &[&str], stdin: &str) -> Output {
    use std::io::Write as _;
    let mut child = command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kubectl");
    if let Some(mut input) = child.stdin.take() {
        let _ = input.write_all(stdin.as_bytes());
    }
    child.wait_with_output().expect("kubectl output")
}

/// The last 8,000 bytes of a component's log (what explains a failure), without the lines
/// that list its flags.
pub(crate) fn log_tail(path: &Path) -> String {
    let text: String = std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.contains("flags.go"))
        .map(|l| format!("{l}\n"))
        .collect();
    let start = text.len().saturating_sub(8_000);
    let start = (start..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    text[start..].to_owned()
}

/// Spawns `command` in its own process group (see [`spawn_in_own_group`]), its output appended
/// to `log`.
pub(crate) fn spawn_logged(mut command: Command, log: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("component log");
    command
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log);
    spawn_in_own_group(command)
}

/// Kills a process group and reaps its leader.
pub(crate) fn stop(child: Option<Child>) {
    let Some(mut child) = child else { return };
    let pid = child.id() as i32;
    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Spawns `command` in its own process group, from one long-lived thread of the test process,
/// with a parent-death signal: the kernel kills the child when the thread that spawned it ends,
/// so spawning from a thread that lives as long as the process kills the servers exactly when
/// the test process dies, whatever killed it.
fn spawn_in_own_group(command: Command) -> Child {
    type Request = (Command, mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    let sender = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("cluster-spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    let _ = reply.send(spawn_with_death_signal(&mut command));
                }
            })
            .expect("spawner thread");
        Mutex::new(tx)
    });
    let (reply, answer) = mpsc::channel();
    sender
        .lock()
        .expect("spawner")
        .send((command, reply))
        .expect("spawner alive");
    answer
        .recv()
        .expect("spawner answer")
        .expect("start a control-plane process")
}

fn spawn_with_death_signal(command: &mut Command) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt as _;
    command.process_group(0);
    // SAFETY: between fork and exec only async-signal-safe calls are allowed; prctl is one.
    unsafe {
        command.pre_exec(|| {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(std::io::Error::from)
        });
    }
    command.spawn()
}
