//! The traffic of a run: the Deployments as a user keeps them, the client-side `kubectl apply`
//! patches that change them, the client of the API server, the webhook's registration, and
//! the drivers at a fixed rate and closed-loop.
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use drift_testkit::cluster::Cluster;
use drift_testkit::objects::deployment_with;
use serde_json::{Value, json};

use crate::servers::WebhookServer;
use crate::support::Histogram;
use crate::{NAMESPACE, WEBHOOK};

/// The manifest of Deployment `i` as a user keeps it: the testkit's realistic Deployment
/// without what the server writes.
pub fn manifest(i: usize, image_tag: u64, replicas: i64) -> Value {
    let mut d = deployment_with(
        [
            &format!("registry.example.com/api:{image_tag}"),
            "registry.example.com/worker:2.0.1",
            "registry.example.com/proxy:1.25.3",
        ],
        replicas,
        24,
    );
    let metadata = &mut d["metadata"];
    metadata["name"] = json!(format!("api-{i:02}"));
    metadata["namespace"] = json!(NAMESPACE);
    if let Some(m) = metadata.as_object_mut() {
        for key in [
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "managedFields",
            "annotations",
        ] {
            m.remove(key);
        }
    }
    if let Some(m) = d.as_object_mut() {
        m.remove("status");
    }
    // An init container may not have probes (the API server refuses them).
    if let Some(init) = d["spec"]["template"]["spec"]["initContainers"][0].as_object_mut() {
        init.remove("livenessProbe");
        init.remove("readinessProbe");
    }
    d
}

/// A client-side `kubectl apply` of a changed manifest: the change and the new
/// last-applied-configuration, as a merge patch.
fn apply_patch(manifest: &Value, change: Value) -> Value {
    let mut patch = change;
    patch["metadata"] = json!({"annotations": {
        "kubectl.kubernetes.io/last-applied-configuration": manifest.to_string()
    }});
    patch
}

pub struct Api {
    client: reqwest::Client,
    server: String,
}

impl Api {
    pub fn new(cluster: &Cluster) -> anyhow::Result<Self> {
        let admin = cluster.ca().client("bench-admin", &["system:masters"]);
        let identity = format!("{}{}", admin.cert_pem, admin.key_pem);
        let client = reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(
                cluster.ca().cert_pem().as_bytes(),
            )?)
            .identity(reqwest::Identity::from_pem(identity.as_bytes())?)
            .http1_only()
            .pool_max_idle_per_host(64)
            .timeout(Duration::from_secs(30))
            .build()?;
        Ok(Self {
            client,
            server: cluster.server(),
        })
    }

    pub async fn patch(
        &self,
        name: &str,
        patch: &Value,
        dry_run: bool,
    ) -> anyhow::Result<(u16, String)> {
        let mut url = format!(
            "{}/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{name}",
            self.server
        );
        if dry_run {
            url.push_str("?dryRun=All");
        }
        let response = self
            .client
            .patch(url)
            .header("Content-Type", "application/merge-patch+json")
            .body(patch.to_string())
            .send()
            .await?;
        let status = response.status().as_u16();
        Ok((status, response.text().await.unwrap_or_default()))
    }

    /// The API server's histogram of the bench webhook's admission duration.
    pub async fn webhook_histogram(&self) -> anyhow::Result<Histogram> {
        let text = self
            .client
            .get(format!("{}/metrics", self.server))
            .send()
            .await?
            .text()
            .await?;
        Ok(Histogram::parse(
            &text,
            "apiserver_admission_webhook_admission_duration_seconds_bucket",
            &format!("name=\"{WEBHOOK}.drift-sentinel.k8s.io\""),
        ))
    }
}

/// Registers the webhook at `server` (or none), and waits until a dry-run replicas change is
/// settled by it: denied naming its rule, or allowed with no webhook.
pub async fn register(
    cluster: &Cluster,
    api: &Api,
    server: Option<&WebhookServer>,
    ca: Option<&str>,
) -> anyhow::Result<()> {
    let _ = cluster.kubectl(&[
        "delete",
        "validatingwebhookconfiguration",
        WEBHOOK,
        "--ignore-not-found",
    ]);
    if let (Some(server), Some(ca)) = (server, ca) {
        use base64::Engine as _;
        let config = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": WEBHOOK},
            "webhooks": [{
                "name": format!("{WEBHOOK}.drift-sentinel.k8s.io"),
                "clientConfig": {"url": server.url, "caBundle": base64::engine::general_purpose::STANDARD.encode(ca)},
                "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["deployments"]}],
                "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 10
            }]
        });
        cluster.apply(&config.to_string());
    }
    let started = Instant::now();
    loop {
        let calls_before = api.webhook_histogram().await?.count();
        let (status, body) = api
            .patch("api-00", &json!({"spec": {"replicas": 99}}), true)
            .await?;
        let called = api.webhook_histogram().await?.count() > calls_before;
        let settled = match server.map(|s| s.rule.as_deref()) {
            Some(Some(rule)) => status == 403 && body.contains(rule),
            // The floor allows everything: settled once the edit reaches a webhook and passes.
            Some(None) => status == 200 && called,
            None => status == 200 && !called,
        };
        if settled {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!("the webhook change did not take effect in 60 s (last answer {status}: {body})");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Drives UPDATEs at `rate` per second for `seconds` from `clients` workers, each sending on
/// its own schedule (open loop: a late answer does not delay the next send; latency is counted
/// from the scheduled time, so that queueing shows).
pub async fn drive(
    api: &Arc<Api>,
    deployments: usize,
    rate: f64,
    seconds: f64,
    clients: usize,
    counter: &Arc<AtomicU64>,
) -> (Vec<f64>, BTreeMap<u16, usize>) {
    let start = Instant::now() + Duration::from_millis(50);
    let total = (rate * seconds) as usize;
    let mut tasks = Vec::new();
    for worker in 0..clients {
        let api = Arc::clone(api);
        let counter = Arc::clone(counter);
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut statuses = BTreeMap::new();
            let mut k = worker;
            while k < total {
                let due = start + Duration::from_secs_f64(k as f64 / rate);
                tokio::time::sleep_until(due.into()).await;
                let n = counter.fetch_add(1, Ordering::Relaxed);
                let i = k % deployments;
                // Half allowed (a new image), half denied (a new replica count). Both values
                // come from the request's own number, so that no UPDATE repeats the object's
                // current value (a replica count from a small cycle did, after a denial left
                // the count of an earlier phase in place: a no-op, allowed).
                let (manifest, change) = if k % 2 == 0 {
                    (manifest(i, 1000 + n, 2), json!({"spec": {"template": {"spec": {"containers": [
                        {"name": "api", "image": format!("registry.example.com/api:{}", 1000 + n)}]}}}}))
                } else {
                    (manifest(i, 1, 3 + n as i64), json!({"spec": {"replicas": 3 + n}}))
                };
                let status = match api.patch(&format!("api-{i:02}"), &apply_patch(&manifest, change), false).await {
                    Ok((status, _)) => status,
                    Err(_) => 0,
                };
                latencies.push(due.elapsed().as_secs_f64() * 1000.0);
                *statuses.entry(status).or_insert(0) += 1;
                k += clients;
            }
            (latencies, statuses)
        }));
    }
    let mut latencies = Vec::new();
    let mut statuses = BTreeMap::new();
    for task in tasks {
        if let Ok((l, s)) = task.await {
            latencies.extend(l);
            for (status, count) in s {
                *statuses.entry(status).or_insert(0) += count;
            }
        }
    }
    (latencies, statuses)
}

/// UPDATEs per second that `clients` closed-loop workers sustain for `seconds`.
pub async fn closed_loop(
    api: &Arc<Api>,
    deployments: usize,
    clients: usize,
    seconds: f64,
    counter: &Arc<AtomicU64>,
) -> f64 {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for worker in 0..clients {
        let api = Arc::clone(api);
        let counter = Arc::clone(counter);
        tasks.push(tokio::spawn(async move {
            let mut done = 0usize;
            while Instant::now() < deadline {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                let i = (worker + done * clients) % deployments;
                let manifest = manifest(i, 1000 + n, 2);
                let change = json!({"spec": {"template": {"spec": {"containers": [
                    {"name": "api", "image": format!("registry.example.com/api:{}", 1000 + n)}]}}}});
                let _ = api.patch(&format!("api-{i:02}"), &apply_patch(&manifest, change), false).await;
                done += 1;
            }
            done
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap_or(0);
    }
    total as f64 / seconds
}
