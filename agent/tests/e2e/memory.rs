//! Reference §5 "Memory" through the real API server: 3,000 edits that each add 100 annotations
//! of new names (300,000 series of `drift_sentinel_violations_total` before the bound) leave the
//! agent's metric series and memory bounded, and the next edit judged. Its own environment: the
//! edits fill the metrics' budgets, which other tests' series must not share.

use std::time::{Duration, Instant};

use libtest_mimic::Trial;

use crate::env::{Env, EnvOptions, deployment, stderr};
use crate::trial;

pub fn tests() -> Vec<Trial> {
    vec![trial!(
        edits_adding_new_annotation_names_leave_the_series_bounded
    )]
}

const EDITS: usize = 3_000;
const ANNOTATIONS: usize = 100;
const DRIVERS: usize = 4;

/// A client of the API server as a cluster admin (a client certificate of its CA).
fn admin_client(env: &Env) -> reqwest::blocking::Client {
    let pair = env.cluster.ca().client("e2e-driver", &["system:masters"]);
    crate::support::https_client(&env.cluster.ca().cert_pem(), Some(&pair))
}

/// The lines of `/metrics` of one family's series.
fn series(metrics: &str, family: &str) -> usize {
    let prefix = format!("{family}{{");
    metrics.lines().filter(|l| l.starts_with(&prefix)).count()
}

fn edits_adding_new_annotation_names_leave_the_series_bounded() {
    let env = Env::start(EnvOptions::default());
    let ns = env.namespace("e2e-series", &[]);
    env.apply(&deployment(&ns, "web", 2, "nginx:1.0"));
    let url = format!(
        "{}/apis/apps/v1/namespaces/{ns}/deployments/web?dryRun=All",
        env.cluster.server()
    );
    let before = drift_testkit::peak_rss(env.agent.pid());
    let started = Instant::now();
    // Server-side dry runs: each is judged by the webhook (the default rule denies a new
    // annotation) and nothing is stored, so every edit adds names the object never had.
    std::thread::scope(|scope| {
        for driver in 0..DRIVERS {
            let (client, url) = (admin_client(&env), &url);
            scope.spawn(move || {
                for edit in (driver..EDITS).step_by(DRIVERS) {
                    let annotations: serde_json::Map<String, serde_json::Value> = (0..ANNOTATIONS)
                        .map(|a| (format!("example.com/note-{edit}-{a}"), "x".into()))
                        .collect();
                    let patch = serde_json::json!({"metadata": {"annotations": annotations}});
                    let response = client
                        .patch(url)
                        .header("Content-Type", "application/merge-patch+json")
                        .body(patch.to_string())
                        .send()
                        .expect("PATCH");
                    let status = response.status().as_u16();
                    let text = response.text().unwrap_or_default();
                    assert_eq!(status, 403, "edit {edit}: {text}");
                    assert!(text.contains("denied the request"), "edit {edit}: {text}");
                }
            });
        }
    });
    let took = started.elapsed();
    let metrics = env
        .agent_client()
        .get(format!("{}/metrics", env.agent.base))
        .send()
        .and_then(|r| r.text())
        .expect("/metrics");
    let violations = series(&metrics, "drift_sentinel_violations_total");
    let rise = drift_testkit::peak_rss(env.agent.pid()).saturating_sub(before);
    eprintln!(
        "{EDITS} edits in {took:?}: {violations} violation series, /metrics {} bytes, peak memory +{} KiB",
        metrics.len(),
        rise / 1024
    );
    // 2,000 exact, 500 with the field `_other`, one per mode with every open label `_other`.
    assert!(violations <= 2_000 + 500 + 3, "{violations} series");
    assert!(
        metrics.contains(r#"drift_sentinel_violations_total{field="_other",mode="enforce",namespace="_other",resource="_other"}"#)
            || metrics.contains(&format!(
                r#"drift_sentinel_violations_total{{field="_other",mode="enforce",namespace="{ns}",resource="apps/v1/deployments"}}"#
            )),
        "the names past the budget are counted under _other"
    );
    assert!(
        metrics.len() < 1024 * 1024,
        "/metrics is {} bytes",
        metrics.len()
    );
    assert!(
        rise < 64 * 1024 * 1024,
        "peak memory rose {} MiB",
        rise >> 20
    );
    assert!(took < Duration::from_secs(300), "{took:?}");

    // The next edit is judged as ever.
    let output = env.kubectl_stdin(
        &["apply", "--dry-run=server", "-f", "-"],
        &deployment(&ns, "web", 5, "nginx:1.0"),
    );
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("immutable fields changed: spec.replicas"),
        "{}",
        stderr(&output)
    );
}
