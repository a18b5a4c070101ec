//! The configuration files of the test node's components: containerd (with its CRI plugin),
//! the CNI network, the kubelet and kube-proxy. Every path they write to is inside the node's
//! own directory, and every setting this host needs is here with its reason.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::Path;

use super::{NODE_NAME, POD_SUBNET, SANDBOX_IMAGE};

/// containerd 1.6 (Debian's package): its root, state, sockets, runc's state, network
/// namespaces and the `opt` plugin's directory in `dir`, never the host's defaults, so that a
/// containerd the host itself runs is not touched and nothing stays behind.
pub(super) fn containerd(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"
# Plugins this node never uses (and that would only log their absence).
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{d}/containerd.sock"

[ttrpc]
  address = "{d}/containerd.sock.ttrpc"

[debug]
  level = "warn"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  # No registry is reachable: the sandbox image is ours, imported before the kubelet starts.
  sandbox_image = "{SANDBOX_IMAGE}"
  # Root here lacks CAP_SYS_RESOURCE: without this every sandbox fails with "can't get final
  # child's PID from pipe" (runc cannot lower the OOM score adjustment below its own).
  restrict_oom_score_adj = true
  # Network namespaces under the state directory, not /var/run/netns.
  netns_mounts_under_state_dir = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "runc"
        Root = "{d}/runc"
        # The kubelet's cgroupDriver is cgroupfs (no systemd here).
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d}/cni/net.d"
    max_conf_num = 1
"#
    )
}

/// The pod network: one bridge (`cni0`), addresses from [`POD_SUBNET`] kept in `dir` (not
/// /var/lib/cni), masqueraded when they leave the node. `hairpinMode` lets a pod reach a
/// Service whose endpoint is itself.
pub(super) fn cni_network(dir: &Path) -> String {
    format!(
        r#"{{
  "cniVersion": "1.0.0",
  "name": "drift-node",
  "plugins": [
    {{
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {{
        "type": "host-local",
        "ranges": [[{{"subnet": "{POD_SUBNET}"}}]],
        "routes": [{{"dst": "0.0.0.0/0"}}],
        "dataDir": "{}/cni/networks"
      }}
    }}
  ]
}}
"#,
        dir.display()
    )
}

/// Where the kubelet listens and what it trusts.
pub(super) struct Kubelet<'a> {
    pub dir: &'a Path,
    pub address: IpAddr,
    pub port: u16,
    pub healthz_port: u16,
    pub client_ca: &'a Path,
    pub cert: &'a Path,
    pub key: &'a Path,
}

/// The kubelet's configuration file.
pub(super) fn kubelet(k: &Kubelet<'_>) -> String {
    let d = k.dir.display();
    let mut out = String::new();
    let _ = write!(
        out,
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This host is on cgroup v1, which kubelet 1.35+ refuses unless told otherwise; no systemd.
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://{d}/containerd.sock
address: {address}
port: {port}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {healthz}
# The API server presents a client certificate of the cluster's CA (port-forwarding, logs).
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: {ca}
authorization:
  mode: AlwaysAllow
tlsCertFile: {cert}
tlsPrivateKeyFile: {key}
podLogsDir: {d}/pod-logs
# There is no cluster DNS: pods reach the API server by $KUBERNETES_SERVICE_HOST.
resolvConf: ""
# The imported images can never be pulled again: never collect them, never evict for disk.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
failSwapOn: false
serializeImagePulls: false
"#,
        address = k.address,
        port = k.port,
        healthz = k.healthz_port,
        ca = k.client_ca.display(),
        cert = k.cert.display(),
        key = k.key.display(),
    );
    out
}

/// kube-proxy in iptables mode. It changes no kernel setting: conntrack limits and timeouts
/// stay as the host has them (0 = leave), and NodePorts are not served on localhost (which
/// would set `route_localnet`).
pub(super) fn kube_proxy(kubeconfig: &Path, healthz_port: u16, metrics_port: u16) -> String {
    format!(
        r#"apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: {kubeconfig}
hostnameOverride: {NODE_NAME}
mode: iptables
clusterCIDR: {POD_SUBNET}
healthzBindAddress: 127.0.0.1:{healthz_port}
metricsBindAddress: 127.0.0.1:{metrics_port}
iptables:
  localhostNodePorts: false
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
"#,
        kubeconfig = kubeconfig.display()
    )
}
