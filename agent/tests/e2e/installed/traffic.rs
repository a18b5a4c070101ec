//! The traffic driver beside each disruption: UPDATEs of one Deployment through the API server,
//! at a fixed rate from a few threads, alternately allowed (the last-applied-configuration
//! annotation, which the default rule allows: what `kubectl apply` rewrites) and denied (a
//! replica count, which it does not). Every answer is classified: allowed, denied by the webhook
//! (its own 403), or failed — anything else, above all "failed calling webhook" — with the time
//! it was sent and what the API server said.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use drift_testkit::cluster::Cluster;
use serde_json::json;

/// How the webhook's own denial reads in the API server's answer.
pub const DENIED: &str = "admission webhook \"validate.drift-sentinel.k8s.io\" denied the request";

/// One UPDATE and its outcome.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// When it was sent, from the start of the traffic.
    pub sent: Duration,
    pub latency: Duration,
    pub verdict: Verdict,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    Denied,
    /// Anything else: the status and message (or the client's error), and which edit it was.
    Failed(String),
}

/// Traffic running in the background until [`Traffic::stop`].
pub struct Traffic {
    started: Instant,
    stop: Arc<AtomicBool>,
    in_flight: Arc<AtomicUsize>,
    outcomes: Arc<Mutex<Vec<Outcome>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// What a run of traffic saw.
pub struct Report {
    pub duration: Duration,
    pub outcomes: Vec<Outcome>,
}

/// Senders: each waits for its answer, so a slow one delays only its own next UPDATE.
const THREADS: u32 = 16;

impl Traffic {
    /// Starts `rate` UPDATEs a second of `namespace/deployment` (which must exist, in a namespace
    /// the webhook intercepts, with 0 replicas so that no edit starts a pod).
    pub fn start(cluster: &Cluster, namespace: &str, deployment: &str, rate: u32) -> Self {
        let identity = cluster.ca().client("traffic-driver", &["system:masters"]);
        let pem = format!("{}{}", identity.cert_pem, identity.key_pem);
        let client = reqwest::blocking::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(
                reqwest::Certificate::from_pem(cluster.ca().cert_pem().as_bytes()).expect("CA"),
            )
            .identity(reqwest::Identity::from_pem(pem.as_bytes()).expect("identity"))
            // Longer than the webhook's timeout (10 s): a slow webhook shows as the API
            // server's own answer, not as the driver giving up.
            .timeout(Duration::from_secs(30))
            .build()
            .expect("HTTPS client");
        let url = format!(
            "{}/apis/apps/v1/namespaces/{namespace}/deployments/{deployment}",
            cluster.server()
        );
        let started = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let outcomes = Arc::new(Mutex::new(Vec::new()));
        let interval = Duration::from_secs(1) * THREADS / rate;
        let threads = (0..THREADS)
            .map(|thread| {
                let sender = Sender {
                    client: client.clone(),
                    url: url.clone(),
                    started,
                    stop: stop.clone(),
                    in_flight: in_flight.clone(),
                    outcomes: outcomes.clone(),
                };
                let offset = interval * thread / THREADS;
                std::thread::spawn(move || sender.run(thread, offset, interval))
            })
            .collect();
        Self {
            started,
            stop,
            in_flight,
            outcomes,
            threads,
        }
    }

    /// UPDATEs sent and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Time since the traffic started (the clock of [`Outcome::sent`]).
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// When the traffic started.
    pub fn started(&self) -> Instant {
        self.started
    }

    pub fn stop(mut self) -> Report {
        self.stop.store(true, Ordering::SeqCst);
        for thread in std::mem::take(&mut self.threads) {
            thread.join().expect("a traffic thread");
        }
        let mut outcomes = std::mem::take(&mut *self.outcomes.lock().expect("outcomes"));
        outcomes.sort_by_key(|o| o.sent);
        Report {
            duration: self.started.elapsed(),
            outcomes,
        }
    }
}

/// A test that fails with traffic running stops it too.
impl Drop for Traffic {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

struct Sender {
    client: reqwest::blocking::Client,
    url: String,
    started: Instant,
    stop: Arc<AtomicBool>,
    in_flight: Arc<AtomicUsize>,
    outcomes: Arc<Mutex<Vec<Outcome>>>,
}

impl Sender {
    /// Sends one UPDATE every `interval` (from `offset`), alternately allowed and denied; a slow
    /// answer delays this thread's next one only.
    fn run(self, thread: u32, offset: Duration, interval: Duration) {
        let mut next = self.started + offset;
        let mut sequence: u64 = 0;
        while !self.stop.load(Ordering::SeqCst) {
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            next += interval;
            sequence += 1;
            let deny = sequence.is_multiple_of(2);
            let outcome = self.send(thread, sequence, deny);
            self.outcomes.lock().expect("outcomes").push(outcome);
        }
    }

    fn send(&self, thread: u32, sequence: u64, deny: bool) -> Outcome {
        let patch = if deny {
            // Never the current count (0): always a change, always denied.
            json!({"spec": {"replicas": 1 + sequence % 5}})
        } else {
            json!({"metadata": {"annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": format!("{{\"traffic\":\"{thread}-{sequence}\"}}")
            }}})
        };
        let sent = self.started.elapsed();
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let started = Instant::now();
        let answer = self
            .client
            .patch(&self.url)
            .header("Content-Type", "application/merge-patch+json")
            .body(patch.to_string())
            .send()
            .and_then(|r| {
                let status = r.status().as_u16();
                r.text().map(|text| (status, text))
            });
        let latency = started.elapsed();
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        let edit = if deny { "replicas" } else { "annotation" };
        let verdict = match answer {
            Ok((200, _)) if !deny => Verdict::Allowed,
            Ok((status, text)) => {
                // A Status object's message; an object (a 200) as its text.
                let message = serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| v["message"].as_str().map(str::to_owned))
                    .unwrap_or(text);
                if deny && status == 403 && message.contains(DENIED) {
                    Verdict::Denied
                } else {
                    Verdict::Failed(format!("{edit}: HTTP {status}: {message}"))
                }
            }
            Err(error) => Verdict::Failed(format!("{edit}: {error}")),
        };
        Outcome {
            sent,
            latency,
            verdict,
        }
    }
}

impl Report {
    pub fn failed(&self) -> Vec<&Outcome> {
        self.outcomes
            .iter()
            .filter(|o| matches!(o.verdict, Verdict::Failed(_)))
            .collect()
    }

    pub fn count(&self, verdict: &Verdict) -> usize {
        self.outcomes
            .iter()
            .filter(|o| o.verdict == *verdict)
            .count()
    }

    /// UPDATEs answered per second over the run.
    pub fn rate(&self) -> f64 {
        self.outcomes.len() as f64 / self.duration.as_secs_f64()
    }

    /// UPDATEs sent within `from..to` (the traffic's clock).
    pub fn sent_between(&self, from: Duration, to: Duration) -> usize {
        self.outcomes
            .iter()
            .filter(|o| o.sent >= from && o.sent < to)
            .count()
    }

    /// One line for the log of the run, then one per failure.
    pub fn summary(&self, scenario: &str) -> String {
        let mut latencies: Vec<Duration> = self.outcomes.iter().map(|o| o.latency).collect();
        latencies.sort();
        let percentile = |p: f64| {
            latencies
                .get(((latencies.len() as f64 - 1.0) * p).round() as usize)
                .copied()
                .unwrap_or_default()
        };
        let mut text = format!(
            "{scenario}: {} UPDATEs in {:.1} s ({:.1}/s): {} allowed, {} denied, {} failed; latency p50 {:?}, p99 {:?}, max {:?}",
            self.outcomes.len(),
            self.duration.as_secs_f64(),
            self.rate(),
            self.count(&Verdict::Allowed),
            self.count(&Verdict::Denied),
            self.failed().len(),
            percentile(0.5),
            percentile(0.99),
            latencies.last().copied().unwrap_or_default(),
        );
        for failure in self.failed() {
            if let Verdict::Failed(message) = &failure.verdict {
                text.push_str(&format!(
                    "\n  at {:.3} s (answered after {:?}): {message}",
                    failure.sent.as_secs_f64(),
                    failure.latency
                ));
            }
        }
        text
    }
}
