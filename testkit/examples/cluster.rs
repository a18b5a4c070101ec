//! A real control plane (etcd, kube-apiserver, kube-controller-manager) on loopback for trying
//! things by hand and for measurements (`scripts/audit-scale`): prints the admin kubeconfig's
//! path and the kubectl to use, then runs until the file named by its first argument exists
//! (or it is killed; everything it started stops with it).
//!
//!     cargo run -p drift-testkit --example cluster -- /tmp/stop-cluster [--no-controller-manager]
//!
//! Without the controller manager, Deployments create no ReplicaSets or Pods: what a
//! measurement of 10,000 Deployments wants.

use std::path::PathBuf;
use std::time::Duration;

use drift_testkit::cluster::{Cluster, ClusterOptions, kubectl_path};

fn main() {
    let stop = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/drift-cluster-stop"));
    let controller_manager = !std::env::args().any(|a| a == "--no-controller-manager");
    let cluster = Cluster::start(ClusterOptions {
        controller_manager,
        ..ClusterOptions::default()
    });
    println!("KUBECONFIG={}", cluster.admin_kubeconfig().display());
    println!("KUBECTL={}", kubectl_path().display());
    println!("DIR={}", cluster.dir().display());
    while !stop.exists() {
        std::thread::sleep(Duration::from_millis(500));
    }
    drop(cluster);
}
