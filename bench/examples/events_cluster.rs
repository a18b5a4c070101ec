//! The real control plane of `scripts/events-bench.sh` (Events on vs off under load): starts
//! kube-apiserver and etcd (`.ci/build-cluster`), applies the load benchmark's 20 rule ConfigMaps
//! (the matching one in mode `warn`, so that every `replicas.json` review is a warned edit: an
//! Event finding on every request, the most work Events add to a decision) and the namespace of
//! the reviewed Deployment, prints the admin kubeconfig's path, and keeps the cluster until its
//! standard input closes.

use std::io::Read as _;

use drift_testkit::cluster::{Cluster, ClusterOptions};

fn main() {
    let cluster = Cluster::start(ClusterOptions {
        controller_manager: false,
        ..ClusterOptions::default()
    });
    for namespace in ["teams", "drift-sentinel", drift_testkit::objects::NAMESPACE] {
        cluster.apply(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {namespace}\n"
        ));
    }
    for (_, manifest) in drift_bench::fixtures::warn_rule_files() {
        cluster.apply(&manifest);
    }
    println!("{}", cluster.admin_kubeconfig().display());
    let mut held = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut held);
}
