//! The real node of `testkit::node` beside the real control plane: it becomes Ready, runs a pod
//! from an imported image (the sandbox image's program as the container), restarts a container
//! killed with SIGKILL, programs the `kubernetes` Service for the host, and leaves the host as it
//! found it — when stopped, and when the test using it panics. Needs root, `.ci/build-cluster`,
//! `.ci/install-tools` and `.ci/build-image`.

use std::time::{Duration, Instant};

use drift_testkit::cluster::{Cluster, ClusterOptions, KUBERNETES_SERVICE_IP};
use drift_testkit::node::{NODE_NAME, Node, NodeOptions, SANDBOX_IMAGE, Snapshot};
use serde_json::Value;

const POD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: sleeper
  namespace: default
spec:
  containers:
    - name: pause
      image: IMAGE
      command: [/pause]
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        readOnlyRootFilesystem: true
        allowPrivilegeEscalation: false
        capabilities: {drop: [ALL]}
";

fn wait_for(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("timed out after {limit:?} waiting for {what}");
}

fn container_status(cluster: &Cluster) -> Value {
    cluster
        .get(&["pod", "sleeper", "-n", "default"])
        .map(|pod| pod["status"]["containerStatuses"][0].clone())
        .unwrap_or(Value::Null)
}

#[test]
fn a_node_runs_pods_and_leaves_the_host_as_it_found_it() {
    let cluster = Cluster::start(ClusterOptions {
        node: true,
        ..ClusterOptions::default()
    });
    let node = Node::start(&cluster, NodeOptions::default());
    let described = cluster.get(&["node", NODE_NAME]).expect("the Node object");
    assert_eq!(
        described["status"]["addresses"][0]["address"],
        node.address().to_string(),
        "{described:#}"
    );

    // The controller manager creates the namespace's ServiceAccount a pod needs.
    wait_for(
        "the default ServiceAccount",
        Duration::from_secs(30),
        || {
            cluster
                .get(&["serviceaccount", "default", "-n", "default"])
                .is_some()
        },
    );
    cluster.apply(&POD.replace("IMAGE", SANDBOX_IMAGE));
    wait_for("the pod to run", Duration::from_secs(60), || {
        container_status(&cluster)["ready"] == true
    });
    let pod = cluster
        .get(&["pod", "sleeper", "-n", "default"])
        .expect("pod");
    assert_eq!(pod["spec"]["nodeName"], NODE_NAME, "scheduled on the node");
    assert!(
        pod["status"]["podIP"]
            .as_str()
            .is_some_and(|ip| ip.starts_with("10.88.")),
        "an address of the pod network: {pod:#}"
    );

    // SIGKILL of the container's process (not through the kubelet): the kubelet restarts it.
    let id = container_status(&cluster)["containerID"]
        .as_str()
        .expect("a container ID")
        .to_owned();
    node.signal_container(&id, rustix::process::Signal::KILL);
    wait_for(
        "the killed container to be restarted",
        Duration::from_secs(60),
        || {
            let status = container_status(&cluster);
            status["restartCount"] == 1 && status["ready"] == true
        },
    );

    // kube-proxy serves the `kubernetes` Service on this host too: its ClusterIP reaches the
    // API server (what pods reach as $KUBERNETES_SERVICE_HOST).
    let address: std::net::SocketAddr = format!("{KUBERNETES_SERVICE_IP}:443")
        .parse()
        .expect("address");
    wait_for(
        "kube-proxy to program the kubernetes Service",
        Duration::from_secs(30),
        || std::net::TcpStream::connect_timeout(&address, Duration::from_secs(1)).is_ok(),
    );

    let left = node.stop();
    assert!(
        left.is_empty(),
        "the host was left changed:\n{}",
        left.join("\n")
    );

    // A test that panics while its node runs: the node is torn down on unwinding.
    let clean = Snapshot::take();
    let output = cluster.kubectl(&[
        "delete",
        "pod",
        "sleeper",
        "-n",
        "default",
        "--force",
        "--grace-period=0",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _node = Node::start(&cluster, NodeOptions::default());
        cluster.apply(&POD.replace("IMAGE", SANDBOX_IMAGE));
        wait_for("the pod to run again", Duration::from_secs(60), || {
            container_status(&cluster)["ready"] == true
        });
        panic!("a test fails while its node runs");
    }));
    assert!(unwound.is_err());
    let left = clean.differences(&Snapshot::take());
    assert!(
        left.is_empty(),
        "the host was left changed:\n{}",
        left.join("\n")
    );
}
