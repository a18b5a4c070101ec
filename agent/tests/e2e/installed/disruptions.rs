//! No failed admission through what operators do every week: each disruption of the webhook's
//! pods runs beside the traffic driver (40 UPDATEs/s through the API server, half allowed, half
//! denied), which counts every answer that is not the webhook's own: a rolling `helm upgrade`,
//! `kubectl delete pod` of each replica, a drain of the node's webhook pods through the eviction
//! API (the PodDisruptionBudget keeps one serving), and SIGKILL of one agent container (failures
//! bounded by the requests in flight on it: readiness and endpoint removal stop new ones).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use libtest_mimic::Trial;

use super::env::{Installed, NAMESPACE, WEBHOOK_PODS, container, installed, pod_name, pod_ready};
use super::traffic::{DENIED, Report, Traffic};
use crate::env::{stderr, stdout, wait_for};
use crate::trial;

pub fn tests() -> Vec<Trial> {
    vec![
        trial!(rolling_helm_upgrade_fails_no_admission),
        trial!(deleting_each_pod_fails_no_admission),
        trial!(draining_the_node_fails_no_admission_and_the_budget_holds),
        trial!(a_killed_container_fails_at_most_what_it_had_in_flight),
    ]
}

/// UPDATEs a second: the issue's 30, with room for a slow machine to still send 30.
const RATE: u32 = 40;
const TRAFFIC_NAMESPACE: &str = "installed-traffic";

/// Runs `action` with the traffic driver going (from 3 s before to 3 s after it); prints and
/// returns what the driver saw.
fn under_traffic(
    env: &Arc<Installed>,
    scenario: &str,
    action: impl FnOnce(&Traffic),
) -> (Report, Watched) {
    env.namespace(TRAFFIC_NAMESPACE, &[]);
    // Created by the first scenario (a CREATE, which the webhook does not judge); every later
    // UPDATE of it goes through the webhook, and a replica count is never allowed to change.
    let created = env.kubectl_stdin(&["create", "-f", "-"], &format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: target\n  namespace: {TRAFFIC_NAMESPACE}\nspec:\n  replicas: 0\n  selector:\n    matchLabels: {{app: target}}\n  template:\n    metadata:\n      labels: {{app: target}}\n    spec:\n      containers:\n        - name: app\n          image: {}\n",
        drift_testkit::node::SANDBOX_IMAGE
    ));
    assert!(
        created.status.success() || stderr(&created).contains("AlreadyExists"),
        "the traffic's target: {}",
        stderr(&created)
    );
    let replicas = env
        .get(&["deployment", "target", "-n", TRAFFIC_NAMESPACE])
        .map(|d| d["spec"]["replicas"].clone());
    assert_eq!(replicas, Some(0.into()), "the target's replicas changed");
    // Measured from a webhook that answers through its Service: right after the install,
    // kube-proxy may not route the new ClusterIP yet ("connection refused"), which is no
    // disruption's doing.
    wait_for(
        "the webhook to answer through its Service",
        Duration::from_secs(30),
        || {
            let edit = env.kubectl(&[
                "patch",
                "deployment",
                "target",
                "-n",
                TRAFFIC_NAMESPACE,
                "--dry-run=server",
                "-p",
                r#"{"spec":{"replicas":1}}"#,
            ]);
            stderr(&edit).contains(DENIED)
        },
    );
    let traffic = Traffic::start(&env.cluster, TRAFFIC_NAMESPACE, "target", RATE);
    let watch = EndpointWatch::start(env, traffic.started());
    std::thread::sleep(Duration::from_secs(3));
    action(&traffic);
    std::thread::sleep(Duration::from_secs(3));
    let report = traffic.stop();
    let watched = watch.stop();
    eprintln!("{}", report.summary(scenario));
    if !report.failed().is_empty() {
        eprintln!("the Service's endpoints meanwhile:{}", watched.timeline());
    }
    assert!(
        report.rate() >= 30.0,
        "the driver sent fewer than 30 UPDATEs/s: {}",
        report.summary(scenario)
    );
    (report, watched)
}

fn assert_none_failed((report, watched): &(Report, Watched), scenario: &str) {
    assert!(
        report.failed().is_empty(),
        "failed admissions: {}\nthe Service's endpoints meanwhile:{}",
        report.summary(scenario),
        watched.timeline()
    );
}

fn rolling_helm_upgrade_fails_no_admission() {
    let env = installed();
    let mut reports = Vec::new();
    for round in 1..=2 {
        let scenario = format!("rolling helm upgrade {round}");
        let old: Vec<String> = env.pods(WEBHOOK_PODS).iter().map(pod_name).collect();
        let report = under_traffic(&env, &scenario, |_| {
            // A change of the pod template: every replica is replaced, one at a time.
            let stamp = format!("podAnnotations.e2e-rollout=r{}", unique());
            env.upgrade(&[stamp.as_str()]);
        });
        let new: Vec<String> = env.pods(WEBHOOK_PODS).iter().map(pod_name).collect();
        assert!(
            new.iter().all(|pod| !old.contains(pod)),
            "every pod was replaced: {old:?} -> {new:?}"
        );
        reports.push((scenario, report));
    }
    for (scenario, report) in &reports {
        assert_none_failed(report, scenario);
    }
}

fn deleting_each_pod_fails_no_admission() {
    let env = installed();
    let pods: Vec<String> = env.ready_webhook_pods().iter().map(pod_name).collect();
    let report = under_traffic(&env, "kubectl delete pod, each replica", |_| {
        for pod in &pods {
            let output = env.kubectl(&["delete", "pod", "-n", NAMESPACE, pod]);
            assert!(output.status.success(), "{}", stderr(&output));
            wait_for("a replacement to be ready", Duration::from_secs(60), || {
                env.ready_webhook_pods().len() == pods.len()
            });
        }
    });
    assert_none_failed(&report, "kubectl delete pod");
}

/// Watches the Service's endpoints until stopped: the fewest ready seen, and each change
/// (on the traffic's clock) to tell a failure's moment in the rollout.
struct EndpointWatch {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Watched>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct Watched {
    fewest_ready: Option<usize>,
    changes: Vec<(Duration, String)>,
}

impl EndpointWatch {
    fn start(env: &Arc<Installed>, clock: Instant) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Watched::default()));
        let thread = {
            let (env, stop, seen) = (env.clone(), stop.clone(), seen.clone());
            std::thread::spawn(move || {
                let mut last = String::new();
                while !stop.load(Ordering::SeqCst) {
                    let endpoints = env.endpoints();
                    let ready = endpoints.iter().filter(|(_, r, _)| *r).count();
                    let shown: Vec<String> = endpoints
                        .iter()
                        .map(|(name, ready, terminating)| {
                            let state = match (ready, terminating) {
                                (true, _) => "ready",
                                (false, true) => "terminating",
                                (false, false) => "not ready",
                            };
                            format!("{name} {state}")
                        })
                        .collect();
                    let shown = shown.join(", ");
                    let mut seen = seen.lock().expect("watched");
                    seen.fewest_ready = Some(seen.fewest_ready.map_or(ready, |f| f.min(ready)));
                    if shown != last {
                        seen.changes.push((clock.elapsed(), shown.clone()));
                        last = shown;
                    }
                    drop(seen);
                    std::thread::sleep(Duration::from_millis(250));
                }
            })
        };
        Self {
            stop,
            seen,
            thread: Some(thread),
        }
    }

    fn stop(mut self) -> Watched {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the endpoint watch");
        }
        std::mem::take(&mut *self.seen.lock().expect("watched"))
    }
}

/// A test that fails while watching stops the watch too.
impl Drop for EndpointWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

impl Watched {
    fn timeline(&self) -> String {
        self.changes
            .iter()
            .map(|(at, endpoints)| format!("\n  {:.3} s: {endpoints}", at.as_secs_f64()))
            .collect()
    }
}

/// `kubectl drain` of the node's webhook pods: it cordons the node and evicts them through the
/// eviction API. The budget (minAvailable 1) lets it evict two of the three; their replacements
/// cannot be scheduled on the cordoned node (the only one), so the last eviction is refused
/// until the drain gives up. Uncordoned, the replacements run.
fn draining_the_node_fails_no_admission_and_the_budget_holds() {
    let env = installed();
    let drained = Mutex::new(None);
    let report = under_traffic(&env, "kubectl drain (webhook pods)", |_| {
        let output = env.kubectl(&[
            "drain",
            drift_testkit::node::NODE_NAME,
            "--pod-selector",
            WEBHOOK_PODS,
            "--delete-emptydir-data",
            "--ignore-daemonsets",
            "--timeout=20s",
        ]);
        *drained.lock().expect("drain") = Some(output);
    });
    let fewest = report.1.fewest_ready.unwrap_or(0);
    let output = drained.into_inner().expect("drain").expect("the drain ran");
    let text = format!("{}{}", stdout(&output), stderr(&output));
    let uncordon = env.kubectl(&["uncordon", drift_testkit::node::NODE_NAME]);
    assert!(uncordon.status.success(), "{}", stderr(&uncordon));
    assert!(
        !output.status.success() && text.contains("disruption budget"),
        "the budget stopped the drain at the last pod: {text}"
    );
    assert!(
        fewest >= 1,
        "the Service had no ready endpoint during the drain"
    );
    wait_for(
        "the replacements to run on the uncordoned node",
        Duration::from_secs(90),
        || env.ready_webhook_pods().len() == 3,
    );
    assert_none_failed(&report, "kubectl drain");
}

/// SIGKILL of one agent container, straight to its process (as the OOM killer ends it): the
/// requests it was answering fail, and so may new connections routed to it until kube-proxy
/// learns that its endpoint is gone (the kubelet notices the death within its 1 s relist, the
/// EndpointSlice changes, kube-proxy syncs at most 1 s later). The bound: the driver's requests
/// in flight at the kill, plus those sent until a second after the endpoint's removal; none
/// sent later may fail.
fn a_killed_container_fails_at_most_what_it_had_in_flight() {
    let env = installed();
    let pod = env
        .ready_webhook_pods()
        .into_iter()
        .next()
        .expect("a ready pod");
    let name = pod_name(&pod);
    let (id, restarts) = container(&pod, "drift-sentinel");
    let kill = Mutex::new((Duration::ZERO, 0usize, Duration::ZERO));
    let report = under_traffic(&env, "SIGKILL of one container", |traffic| {
        let in_flight = traffic.in_flight();
        let at = traffic.elapsed();
        env.with_node(|node| node.signal_container(&id, rustix::process::Signal::KILL));
        wait_for(
            "the killed pod's endpoint to be removed",
            Duration::from_secs(30),
            || !env.ready_endpoints().contains(&name),
        );
        let removed = traffic.elapsed() - at;
        *kill.lock().expect("kill") = (at, in_flight, removed);
        wait_for(
            "the killed container to be restarted and ready",
            Duration::from_secs(60),
            || {
                env.get(&["pod", &name, "-n", NAMESPACE])
                    .is_some_and(|pod| {
                        container(&pod, "drift-sentinel").1 > restarts && pod_ready(&pod)
                    })
            },
        );
    });
    let (at, in_flight, removed) = *kill.lock().expect("kill");
    // kube-proxy's minimum sync period, after the EndpointSlice changed.
    let routed_until = at + removed + Duration::from_secs(1);
    let (report, watched) = report;
    let exposed = report.sent_between(at, routed_until);
    let failed = report.failed();
    eprintln!(
        "SIGKILL at {:.3} s: {in_flight} in flight, endpoint removed {removed:?} later, {exposed} sent until a second after that, {} failed",
        at.as_secs_f64(),
        failed.len()
    );
    assert!(
        failed.len() <= in_flight + exposed,
        "more failures than requests in flight at the kill and routed before the endpoint's removal: {}{}",
        report.summary("SIGKILL"),
        watched.timeline()
    );
    assert!(
        failed.iter().all(|f| f.sent < routed_until),
        "a request sent after the endpoint's removal reached kube-proxy failed: {}{}",
        report.summary("SIGKILL"),
        watched.timeline()
    );
    assert!(
        removed < Duration::from_secs(5),
        "the endpoint was removed {removed:?} after the kill"
    );
}

/// A value no earlier call returned (a pod annotation that forces a rollout).
fn unique() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}
