//! A real Kubernetes node beside a [`Cluster`]: containerd with runc and a CNI bridge (Debian's
//! packages, `.ci/install-tools`), the kubelet and kube-proxy (built with the control plane by
//! `.ci/build-cluster`), so that the chart's pods run as users run them: pulled from images
//! (imported: no registry is reachable), called through Services, probed, port-forwarded.
//!
//! One node per machine: the kubelet, kube-proxy and the CNI plugins change host state
//! (kernel settings, iptables chains, the `cni0` bridge, cgroups). [`Node::start`] takes a
//! machine-wide lock and records what it may change; dropping the node (also when a test
//! panics) or [`Node::stop`] stops every process and container and puts the host back as it
//! was found; a node whose test process was killed is cleaned up by the next one
//! ([`host`]). It needs root, and a [`Cluster`] started with [`ClusterOptions::node`].
//!
//! [`ClusterOptions::node`]: crate::cluster::ClusterOptions::node

mod config;
mod host;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub use host::{Snapshot, host_address};

use crate::cluster::{Cluster, bin_dir, log_tail, spawn_logged, stop};
use crate::free_port;

/// The node's name (the kubelet's `--hostname-override`, kube-proxy's `hostnameOverride`).
pub const NODE_NAME: &str = "drift-node";
/// The pods' addresses (the CNI bridge's range, kube-proxy's `clusterCIDR`).
pub const POD_SUBNET: &str = "10.88.0.0/16";
/// The pod sandbox image (`tools/cluster/pause`), containerd's `sandbox_image`.
pub const SANDBOX_IMAGE: &str = "localhost/drift-sentinel/pause:test";

/// What to start.
#[derive(Debug, Clone, Default)]
pub struct NodeOptions {
    /// OCI archives to import into the node's containerd before the kubelet starts, besides
    /// the sandbox image (which is always imported, from [`image_archive`]`("pause")`).
    pub images: Vec<PathBuf>,
}

/// Where `.ci/build-image` writes the image archive `name` (`drift-sentinel`, `pause`):
/// `DRIFT_IMAGES_DIR`, else `<workspace>/target/images`.
pub fn image_archive(name: &str) -> PathBuf {
    let dir = std::env::var_os("DRIFT_IMAGES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::workspace().join("target/images"));
    dir.join(format!("{name}.tar"))
}

/// A running node. Dropping it stops it and puts the host back.
pub struct Node {
    dir: PathBuf,
    address: IpAddr,
    containerd: Option<Child>,
    kubelet: Option<Child>,
    proxy: Option<Child>,
    /// `None` once stopped.
    lease: Option<host::Lease>,
}

impl Node {
    /// Starts containerd, imports the images, starts the kubelet and kube-proxy, and waits
    /// until the node is Ready. Panics (after putting the host back) with the components' logs
    /// when it does not become Ready.
    pub fn start(cluster: &Cluster, options: NodeOptions) -> Self {
        let address = cluster
            .host_address()
            .expect("a node needs a cluster started with ClusterOptions { node: true, .. }");
        assert!(
            rustix::process::geteuid().is_root(),
            "a test node needs root (the kubelet, containerd and the CNI plugins manage cgroups, mounts and the network)"
        );
        let pause = image_archive("pause");
        let mut images = vec![pause];
        images.extend(options.images);
        check_prerequisites(&images);
        let dir = tempfile::Builder::new()
            .prefix("drift-node-")
            .tempdir()
            .expect("node directory")
            .keep();
        let lease = host::Lease::acquire(&dir);
        let mut node = Self {
            dir,
            address,
            containerd: None,
            kubelet: None,
            proxy: None,
            lease: Some(lease),
        };
        let started = Instant::now();
        // A Node object left by an earlier node of this cluster would read Ready at once.
        let output = cluster.kubectl(&["delete", "node", NODE_NAME, "--ignore-not-found"]);
        assert!(
            output.status.success(),
            "kubectl delete node: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        node.start_containerd();
        for image in &images {
            node.import(image);
        }
        node.start_kubelet(cluster);
        node.start_proxy(cluster);
        node.wait_until_ready(cluster);
        eprintln!("node {NODE_NAME} Ready in {:?}", started.elapsed());
        node
    }

    /// The node's directory: configuration, logs (`<component>.log`), containerd's and the
    /// kubelet's state.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The address the node registered (its InternalIP).
    pub fn address(&self) -> IpAddr {
        self.address
    }

    /// The tail of a component's log (`containerd`, `kubelet`, `kube-proxy`).
    pub fn log_of(&self, component: &str) -> String {
        log_tail(&self.dir.join(format!("{component}.log")))
    }

    /// `ctr` against the node's containerd, in the CRI's namespace (`k8s.io`).
    pub fn ctr(&self, args: &[&str]) -> Output {
        Command::new("ctr")
            .arg("--address")
            .arg(self.socket())
            .args(["--namespace", "k8s.io"])
            .args(args)
            .output()
            .expect("run ctr")
    }

    /// The host PID of a container's main process, by the container ID of a pod's status
    /// (`containerd://ID` or `ID`); `None` when it is not running.
    pub fn container_pid(&self, container_id: &str) -> Option<i32> {
        let id = container_id
            .strip_prefix("containerd://")
            .unwrap_or(container_id);
        let output = self.ctr(&["tasks", "ls"]);
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| {
                let mut words = line.split_whitespace();
                Some((words.next()?, words.next()?, words.next()?))
            })
            .find(|(task, _, status)| *task == id && *status == "RUNNING")
            .and_then(|(_, pid, _)| pid.parse().ok())
    }

    /// Sends `signal` to a container's main process, as the kernel's OOM killer or a crash
    /// would end it (not through the kubelet).
    pub fn signal_container(&self, container_id: &str, signal: rustix::process::Signal) {
        let pid = self
            .container_pid(container_id)
            .unwrap_or_else(|| panic!("container {container_id} is not running on the node"));
        let pid = rustix::process::Pid::from_raw(pid).expect("a process ID");
        rustix::process::kill_process(pid, signal).expect("signal the container");
    }

    /// Stops the node and puts the host back; returns what still differs from the host as it
    /// was found (nothing, when teardown is complete).
    pub fn stop(mut self) -> Vec<String> {
        self.teardown()
    }

    fn teardown(&mut self) -> Vec<String> {
        stop(self.proxy.take());
        stop(self.kubelet.take());
        stop(self.containerd.take());
        let Some(lease) = self.lease.take() else {
            return Vec::new();
        };
        let logs = std::env::var_os("DRIFT_CLUSTER_KEEP").map(|_| self.keep_logs());
        let differences = lease.restore();
        if let Some(logs) = logs {
            eprintln!("node logs kept: {}", logs.display());
        }
        differences
    }

    /// Copies the components' logs out of the node's directory (which teardown removes).
    fn keep_logs(&self) -> PathBuf {
        let kept = tempfile::Builder::new()
            .prefix("drift-node-logs-")
            .tempdir()
            .expect("a directory for the node's logs")
            .keep();
        for component in ["containerd", "kubelet", "kube-proxy"] {
            let name = format!("{component}.log");
            let _ = std::fs::copy(self.dir.join(&name), kept.join(&name));
        }
        kept
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    fn spawn(&self, command: Command, name: &str) -> Child {
        spawn_logged(command, &self.dir.join(format!("{name}.log")))
    }

    fn start_containerd(&mut self) {
        let d = self.dir.clone();
        std::fs::create_dir_all(d.join("cni/net.d")).expect("CNI configuration directory");
        std::fs::write(
            d.join("cni/net.d/10-drift-node.conflist"),
            config::cni_network(&d),
        )
        .expect("write the CNI network");
        std::fs::write(d.join("containerd.toml"), config::containerd(&d))
            .expect("write containerd's configuration");
        let mut command = Command::new("containerd");
        command.arg("--config").arg(d.join("containerd.toml"));
        self.containerd = Some(self.spawn(command, "containerd"));
        self.wait_until("containerd", Duration::from_secs(30), |node| {
            node.ctr(&["version"]).status.success()
        });
    }

    /// Imports an OCI archive; its images keep the names in its index.
    fn import(&self, archive: &Path) {
        let output = self.ctr(&[
            "images",
            "import",
            "--no-unpack",
            archive.to_str().expect("a UTF-8 path"),
        ]);
        assert!(
            output.status.success(),
            "ctr images import {}: {}{}",
            archive.display(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn start_kubelet(&mut self, cluster: &Cluster) {
        let d = self.dir.clone();
        let kubeconfig =
            cluster.kubeconfig_for(&format!("system:node:{NODE_NAME}"), &["system:nodes"]);
        let address = self.address.to_string();
        let (cert, key) = cluster
            .ca()
            .serving(&[&address, NODE_NAME, "127.0.0.1"])
            .write(&d, "kubelet");
        std::fs::write(
            d.join("kubelet.yaml"),
            config::kubelet(&config::Kubelet {
                dir: &d,
                address: self.address,
                port: free_port(),
                healthz_port: free_port(),
                client_ca: &cluster.dir().join("ca.crt"),
                cert: &cert,
                key: &key,
            }),
        )
        .expect("write the kubelet's configuration");
        let mut command = Command::new(bin_dir().join("kubelet"));
        command
            .arg(format!("--config={}", d.join("kubelet.yaml").display()))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--root-dir={}", d.join("kubelet").display()))
            .arg(format!("--cert-dir={}", d.join("kubelet/pki").display()))
            .arg(format!("--hostname-override={NODE_NAME}"))
            .arg(format!("--node-ip={address}"))
            .arg("-v=1");
        self.kubelet = Some(self.spawn(command, "kubelet"));
    }

    fn start_proxy(&mut self, cluster: &Cluster) {
        let kubeconfig = cluster.kubeconfig_for("system:kube-proxy", &[]);
        let file = self.dir.join("kube-proxy.yaml");
        std::fs::write(
            &file,
            config::kube_proxy(&kubeconfig, free_port(), free_port()),
        )
        .expect("write kube-proxy's configuration");
        let mut command = Command::new(bin_dir().join("kube-proxy"));
        command
            .arg(format!("--config={}", file.display()))
            .arg("-v=1");
        self.proxy = Some(self.spawn(command, "kube-proxy"));
    }

    fn wait_until_ready(&mut self, cluster: &Cluster) {
        self.wait_until("kubelet", Duration::from_secs(90), |_| {
            cluster
                .get(&["node", NODE_NAME])
                .is_some_and(|node| node_ready(&node))
        });
    }

    /// Polls `ready`; when it does not hold within `limit`, or a component exits, tears the
    /// node down and panics with `what`'s log.
    fn wait_until(&mut self, what: &str, limit: Duration, ready: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if ready(self) {
                return;
            }
            let exited = [&mut self.containerd, &mut self.kubelet, &mut self.proxy]
                .into_iter()
                .flatten()
                .any(|child| matches!(child.try_wait(), Ok(Some(_))));
            if exited {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let log = self.log_of(what);
        let containerd = self.log_of("containerd");
        self.teardown();
        panic!("{what} did not become ready; its log:\n{log}\ncontainerd's log:\n{containerd}");
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let differences = self.teardown();
        if !differences.is_empty() {
            eprintln!(
                "the test node left the host changed:\n  {}",
                differences.join("\n  ")
            );
        }
    }
}

/// Whether a Node object's Ready condition is True.
pub fn node_ready(node: &serde_json::Value) -> bool {
    node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// Everything a node needs that is not built by the test itself, named with how to get it.
fn check_prerequisites(images: &[PathBuf]) {
    for name in ["kubelet", "kube-proxy"] {
        assert!(
            bin_dir().join(name).is_file(),
            "{} is missing: build the node with `bash .ci/build-cluster`",
            bin_dir().join(name).display()
        );
    }
    for program in [
        "containerd",
        "containerd-shim-runc-v2",
        "runc",
        "ctr",
        "iptables",
    ] {
        assert!(
            Command::new("sh")
                .args(["-c", &format!("command -v {program}")])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success()),
            "{program} is missing: install it with `bash .ci/install-tools` (Debian's containerd, runc, iptables)"
        );
    }
    for plugin in ["bridge", "host-local", "loopback"] {
        assert!(
            Path::new("/usr/lib/cni").join(plugin).is_file(),
            "the CNI plugin {plugin} is missing: install it with `bash .ci/install-tools` (Debian's containernetworking-plugins)"
        );
    }
    for image in images {
        assert!(
            image.is_file(),
            "{} is missing: build the images with `bash .ci/build-image`",
            image.display()
        );
    }
}

/// Runs `command` writing `stdin` to it.
fn run_with_stdin(mut command: Command, stdin: &str) -> std::io::Result<Output> {
    use std::io::Write as _;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut input) = child.stdin.take() {
        input.write_all(stdin.as_bytes())?;
    }
    child.wait_with_output()
}
