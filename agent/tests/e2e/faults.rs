//! The control plane failing under a running agent, each in an environment of its own: the API
//! server restarted, etcd compacted (a resumed watch gets `410 Gone`), etcd stopped. The rules
//! stay intact, and changes made after the fault are picked up; after an outage of the API
//! server, within 10 s of its return (reference §6: capped backoff, failures logged and counted).

use std::time::{Duration, Instant};

use libtest_mimic::Trial;

use crate::env::{Env, EnvOptions, deployment, stderr, wait_for};
use crate::trial;

pub fn tests() -> Vec<Trial> {
    vec![
        trial!(api_server_restart_and_etcd_compaction),
        trial!(etcd_stopped_and_started),
        trial!(api_server_down_for_15_seconds),
    ]
}

/// Mutable fields under which scaling `web` is denied.
const IMAGE_ONLY: &str = "'spec.template.spec.containers[*].image'";
/// Mutable fields under which scaling `web` is allowed.
const REPLICAS: &str = "'spec.replicas', 'metadata.annotations'";

/// One fault's environment: namespace `name` holding Deployment `web` (2 replicas), and the
/// rule `drift-system/<name>` over it. Whether scaling `web` to 3 is denied tells which
/// version of the rule the agent enforces.
struct Scene {
    env: Env,
    ns: String,
    name: &'static str,
    scaled: String,
}

impl Scene {
    /// The environment started, with the rule making `mutable` mutable applied.
    fn start(name: &'static str, mutable: &str) -> Self {
        let env = Env::start(EnvOptions::default());
        let ns = env.namespace(name, &[]);
        env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
        let scaled = deployment(&ns, "web", 3, "nginx:1.0");
        let scene = Self {
            env,
            ns,
            name,
            scaled,
        };
        scene.set_rule(mutable);
        scene
    }

    fn set_rule(&self, mutable: &str) {
        let ns = &self.ns;
        self.env.rule(
            self.name,
            &format!(
                "mode: enforce\npriority: 10\nnamespaces: [{ns}]\nselectors: [{{apiGroup: apps, kind: Deployment}}]\nmutable: [{mutable}]\n"
            ),
        );
    }

    /// Waits until a dry run of the scaling is denied by the rule.
    fn wait_denied(&self, what: &str, limit: Duration) {
        let needle = format!("rule drift-system/{}", self.name);
        self.wait_verdict(what, false, &needle, limit);
    }

    /// Waits until a dry run of the scaling is allowed.
    fn wait_allowed(&self, what: &str, limit: Duration) {
        self.wait_verdict(what, true, "", limit);
    }

    fn wait_verdict(&self, what: &str, allowed: bool, needle: &str, limit: Duration) {
        wait_for(what, limit, || {
            let output = self
                .env
                .kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], &self.scaled);
            output.status.success() == allowed && stderr(&output).contains(needle)
        });
    }
}

fn api_server_restart_and_etcd_compaction() {
    let mut scene = Scene::start("e2e-fault", IMAGE_ONLY);
    scene.wait_denied("the rule", Duration::from_secs(30));

    // Restarted: the rule is intact, and a change made afterwards takes effect.
    scene.env.cluster.restart_apiserver();
    scene.wait_denied("the rule after the restart", Duration::from_secs(30));
    scene.set_rule(REPLICAS);
    scene.wait_allowed("a change after the restart", Duration::from_secs(60));

    // Compacted, then restarted (an empty watch cache): the agent's watches resume from a
    // resourceVersion that is gone, get 410 and relist.
    for i in 0..20 {
        scene.env.apply(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: churn-{i}\n  namespace: {}\n",
            scene.ns
        ));
    }
    scene.env.cluster.compact_etcd();
    scene.env.cluster.restart_apiserver();
    scene.wait_allowed("the rule after the compaction", Duration::from_secs(30));
    scene.set_rule(IMAGE_ONLY);
    scene.wait_denied("a change after the compaction", Duration::from_secs(60));
    let logs = scene.env.agent.logs().join("\n");
    assert!(
        logs.contains("WARN") || logs.contains("\"level\":\"WARN\""),
        "the watch failures were not logged:\n{logs}"
    );
}

fn etcd_stopped_and_started() {
    let mut scene = Scene::start("e2e-etcd", IMAGE_ONLY);
    scene.wait_denied("the rule", Duration::from_secs(30));

    scene.env.cluster.stop_etcd();
    std::thread::sleep(Duration::from_secs(5));
    scene.env.cluster.start_etcd();
    scene.wait_denied("the rule after etcd is back", Duration::from_secs(60));
    scene.set_rule(REPLICAS);
    scene.wait_allowed("a change after etcd is back", Duration::from_secs(60));
}

/// The API server killed for 15 s: each watch failure is logged (a WARN within 10 s of the
/// stop) and counted, and a rule change made once the server is back is enforced within 10 s.
fn api_server_down_for_15_seconds() {
    let mut scene = Scene::start("e2e-outage", REPLICAS);
    scene.wait_allowed("the rule allowing replicas", Duration::from_secs(30));
    let failures_before = scene.env.metric_sum("drift_sentinel_watch_failures_total");
    let logged_before = scene.env.agent.logs().len();

    let stopped = Instant::now();
    scene.env.cluster.stop_apiserver();
    wait_for("a WARN about the watches", Duration::from_secs(10), || {
        scene.env.agent.logs()[logged_before..]
            .iter()
            .any(|l| l.contains("\"level\":\"WARN\"") && l.contains("watch failed"))
    });
    let warned = stopped.elapsed();
    // The outage itself: nothing to poll while the server is down.
    std::thread::sleep(Duration::from_secs(15).saturating_sub(stopped.elapsed()));
    scene.env.cluster.start_apiserver();
    let back = Instant::now();
    let failures = scene.env.metric_sum("drift_sentinel_watch_failures_total");
    assert!(
        failures > failures_before,
        "watch failures not counted: {failures_before} before, {failures} after"
    );
    let warn_lines = scene.env.agent.logs()[logged_before..]
        .iter()
        .filter(|l| l.contains("watch failed"))
        .count();

    scene.set_rule(IMAGE_ONLY);
    let applied = back.elapsed();
    scene.wait_denied(
        "the rule change after the outage",
        Duration::from_secs(10).saturating_sub(applied),
    );
    eprintln!(
        "outage of {:?}: first WARN after {warned:?}; {warn_lines} WARN lines for {} failures; \
         rule change applied {applied:?} after the server was back, enforced after {:?}",
        back - stopped,
        failures - failures_before,
        back.elapsed()
    );
}
