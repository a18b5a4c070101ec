//! The environment of every export test: an agent with its own directories, Connection
//! and clock files, reviews to send, and the readers of metrics, segments and spool.

pub(crate) use std::collections::{BTreeMap, BTreeSet};
pub(crate) use std::fs;
pub(crate) use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
pub(crate) use std::path::{Path, PathBuf};
pub(crate) use std::sync::Mutex;
pub(crate) use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
pub(crate) use std::time::{Duration, Instant, SystemTime};

pub(crate) use crate::support::record::{ADMISSION_RECORD_FIELDS, keys};
pub(crate) use crate::support::{Agent, plain_client, post, rule_config_map};
pub(crate) use serde_json::{Value, json};

pub(crate) const MIB: u64 = 1024 * 1024;
/// The free-space reserve of the disk driver.
pub(crate) const RESERVE: u64 = 16 * MIB;
/// Free space that never limits anything.
pub(crate) const PLENTY: u64 = 1 << 40;
/// Largest encoded record.
pub(crate) const RECORD_LIMIT: usize = 64 * 1024;
pub(crate) const SEGMENT_BYTES: u64 = MIB;
pub(crate) const SEGMENT_RECORDS: usize = 1000;
pub(crate) const RETAINED_SEGMENTS: usize = 20;
pub(crate) const RETAINED_BYTES: u64 = 20 * MIB;
pub(crate) const QUEUE_MESSAGES: usize = 1024;
pub(crate) const QUEUE_BYTES: u64 = 16 * MIB;
pub(crate) const REASONS: [&str; 7] = [
    "message_too_large",
    "queue_full",
    "encode_error",
    "disk_full",
    "shutdown",
    "publish_error",
    "no_connection",
];
/// The time the clock file starts at.
pub(crate) const T0: &str = "2030-01-01T00:00:00Z";
pub(crate) const IMAGE_PATH: &str = "spec.template.spec.containers[0].image";

// ---------------------------------------------------------------------------------------------
// Fixture: rules, Connection, agents.

/// Rules of every mode, one namespace each; `other` matches no rule.
pub(crate) fn rules_yaml() -> String {
    let rule = |name: &str, mode: &str, namespace: &str| {
        rule_config_map(
            "ops",
            name,
            &format!(
                "mode: {mode}\nnamespaces: ['{namespace}']\nselectors: [{{apiGroup: apps, kind: Deployment}}]\nmutable: ['spec.template.spec.containers[*].image']\n"
            ),
        )
    };
    [
        rule("strict", "enforce", "prod"),
        rule("lenient", "warn", "staging"),
        rule("trial", "dry-run", "dev"),
        rule("disabled", "off", "sandbox"),
    ]
    .join("---\n")
}

pub(crate) fn connection_yaml(driver: &str, path: &Path) -> String {
    let path = serde_json::to_string(&path.display().to_string()).unwrap();
    format!(
        "apiVersion: connection.drift-sentinel.io/v1alpha1\nkind: Connection\nmetadata: {{name: audit-connection}}\nspec: {{driver: {driver}, config: {{path: {path}}}}}\n"
    )
}

/// One test's directories: rules, Connection file, spool, clock and free-space files.
pub(crate) struct Env {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) rules: PathBuf,
    pub(crate) connection: PathBuf,
    /// `spec.config.path` of the Connection.
    pub(crate) topics: PathBuf,
    /// `<topics>/audit-channel`.
    pub(crate) channel: PathBuf,
    pub(crate) clock: PathBuf,
    pub(crate) free: PathBuf,
}

impl Env {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_owned();
        let rules = root.join("rules.yaml");
        fs::write(&rules, rules_yaml()).unwrap();
        let topics = root.join("topics");
        let connection = root.join("connection.yaml");
        fs::write(&connection, connection_yaml("disk", &topics)).unwrap();
        Self {
            rules,
            connection,
            channel: topics.join("audit-channel"),
            topics,
            clock: root.join("clock"),
            free: root.join("free-space"),
            dir,
        }
    }

    pub(crate) fn root(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn export_args(&self, extra: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = [
            "--rules",
            self.rules.to_str().unwrap(),
            "--enable-admission-violation-export",
            "--connection",
            self.connection.to_str().unwrap(),
            "--connection-status-interval",
            "1s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    /// An agent exporting through the Connection file.
    pub(crate) fn start(&self, extra: &[&str]) -> Agent {
        let args = self.export_args(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Agent::start(&args, false)
    }

    /// An agent with the clock file (set to [`T0`]).
    pub(crate) fn start_with_clock(&self, extra: &[&str]) -> Agent {
        self.set_clock(0);
        let mut args = vec!["--export-clock-file", self.clock.to_str().unwrap()];
        args.extend_from_slice(extra);
        self.start(&args)
    }

    /// An agent with the free-space file (set to `free` bytes).
    pub(crate) fn start_with_free_space(&self, free: u64) -> Agent {
        self.set_free(free);
        self.start(&["--export-free-space-file", self.free.to_str().unwrap()])
    }

    /// The same rules, export off: what every response must equal.
    pub(crate) fn reference(&self) -> Agent {
        Agent::start(&["--rules", self.rules.to_str().unwrap()], false)
    }

    /// Moves the export's clock to [`T0`] + `seconds`.
    pub(crate) fn set_clock(&self, seconds: u64) {
        let t0 = humantime::parse_rfc3339(T0).unwrap();
        let at = humantime::format_rfc3339_seconds(t0 + Duration::from_secs(seconds));
        write_atomically(&self.clock, &at.to_string());
    }

    pub(crate) fn set_free(&self, bytes: u64) {
        write_atomically(&self.free, &bytes.to_string());
    }
}

/// Replaces a file's content in one step, so that the agent never reads half of it.
pub(crate) fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("writing");
    fs::write(&tmp, text).unwrap();
    fs::rename(&tmp, path).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Requests.

pub(crate) fn labels() -> Value {
    json!({"app": "web", "team": "payments"})
}

pub(crate) fn deployment(namespace: &str, replicas: i64, image: &str, labels: &Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace, "labels": labels, "resourceVersion": "7"},
        "spec": {"replicas": replicas,
                 "template": {"spec": {"containers": [{"name": "app", "image": image}]}}}
    })
}

pub(crate) fn review(uid: &str, old: &Value, new: &Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "name": new["metadata"]["name"], "namespace": new["metadata"]["namespace"],
            "operation": "UPDATE",
            "userInfo": {"username": "alice@example.com", "uid": "u-alice",
                         "groups": ["developers", "system:authenticated"]},
            "object": new, "oldObject": old, "dryRun": false
        }
    })
}

/// A replicas change (denied path) with an image change (mutable) in `namespace`.
pub(crate) fn violation(uid: &str, namespace: &str) -> Value {
    review(
        uid,
        &deployment(namespace, 1, "shop:1", &labels()),
        &deployment(namespace, 2, "shop:2", &labels()),
    )
}

/// A violation in `prod` whose object carries a label of `blob` characters: its record is
/// about `blob` bytes larger than a small one.
pub(crate) fn big_violation(uid: &str, blob: usize) -> Value {
    let labels = json!({"app": "web", "blob": "x".repeat(blob)});
    review(
        uid,
        &deployment("prod", 1, "shop:1", &labels),
        &deployment("prod", 2, "shop:1", &labels),
    )
}

pub(crate) fn scale_review(uid: &str, old: i64, new: i64) -> Value {
    let scale = |replicas: i64| {
        json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
               "metadata": {"name": "web", "namespace": "prod"}, "spec": {"replicas": replicas}})
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "subResource": "scale", "namespace": "prod", "name": "web", "operation": "UPDATE",
        "userInfo": {"username": "bob", "uid": "u-bob", "groups": ["ops"]},
        "object": scale(new), "oldObject": scale(old)}})
}

pub(crate) fn validate_url(agent: &Agent) -> String {
    format!("{}/validate", agent.base)
}

/// Posts a review; the HTTP status must be 200. Returns the AdmissionReview answered.
pub(crate) fn send(client: &reqwest::blocking::Client, agent: &Agent, body: &Value) -> Value {
    let (code, review) = post(client, &validate_url(agent), body);
    assert_eq!(code, 200, "{review}");
    review
}

/// Posts a violation of the `prod` (enforce) rule and checks the denial.
pub(crate) fn send_denied(
    client: &reqwest::blocking::Client,
    agent: &Agent,
    body: &Value,
) -> Value {
    let review = send(client, agent, body);
    assert_denied(&review, body);
    review
}

pub(crate) fn assert_denied(review: &Value, request: &Value) {
    let response = &review["response"];
    assert_eq!(response["uid"], request["request"]["uid"], "{review}");
    assert_eq!(response["allowed"], false, "{review}");
    assert_eq!(response["status"]["code"], 403, "{review}");
    assert_eq!(
        response["auditAnnotations"]["denied-paths"], "spec.replicas",
        "{review}"
    );
}

/// Sends `body` to the exporting agent and to the reference; the answers must be equal.
pub(crate) fn send_both(
    client: &reqwest::blocking::Client,
    agent: &Agent,
    reference: &Agent,
    body: &Value,
) -> Value {
    let exported = send(client, agent, body);
    let plain = send(client, reference, body);
    assert_eq!(
        exported, plain,
        "the response changed with export on (uid {})",
        body["request"]["uid"]
    );
    exported
}

// ---------------------------------------------------------------------------------------------
// Metrics and status.

pub(crate) fn metrics_text(agent: &Agent) -> String {
    agent.metrics()
}

/// Sum of the samples of `name` whose labels include `labels`; the metric must exist.
pub(crate) fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut total = 0.0;
    let mut found = false;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (series_name, label_text) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        if series_name != name {
            continue;
        }
        let pairs: BTreeMap<&str, &str> = label_text
            .split(',')
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k, v.trim_matches('"')))
            .collect();
        if labels.iter().all(|(k, v)| pairs.get(k) == Some(v)) {
            total += value.parse::<f64>().unwrap();
            found = true;
        }
    }
    assert!(found, "no sample of {name} {labels:?} in\n{text}");
    total
}

/// The export metrics of the webhook source.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Counts {
    pub(crate) published: u64,
    pub(crate) dropped: BTreeMap<&'static str, u64>,
    pub(crate) queue_messages: u64,
    pub(crate) queue_bytes: u64,
    pub(crate) spool_segments: u64,
    pub(crate) spool_bytes: u64,
}

impl Counts {
    pub(crate) fn dropped(&self, reason: &str) -> u64 {
        self.dropped[reason]
    }

    pub(crate) fn dropped_total(&self) -> u64 {
        self.dropped.values().sum()
    }
}

pub(crate) fn counts(agent: &Agent) -> Counts {
    let text = metrics_text(agent);
    let value = |name: &str, labels: &[(&str, &str)]| metric(&text, name, labels) as u64;
    Counts {
        published: value(
            "drift_sentinel_export_records_published_total",
            &[("source", "webhook")],
        ),
        dropped: REASONS
            .iter()
            .map(|reason| {
                (
                    *reason,
                    value(
                        "drift_sentinel_export_records_dropped_total",
                        &[("source", "webhook"), ("reason", reason)],
                    ),
                )
            })
            .collect(),
        queue_messages: value("drift_sentinel_export_queue_messages", &[]),
        queue_bytes: value("drift_sentinel_export_queue_bytes", &[]),
        spool_segments: value("drift_sentinel_export_spool_segments", &[]),
        spool_bytes: value("drift_sentinel_export_spool_bytes", &[]),
    }
}

/// Waits until the export metrics satisfy `check`; returns them.
pub(crate) fn wait_counts(agent: &Agent, what: &str, check: impl Fn(&Counts) -> bool) -> Counts {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let now = counts(agent);
        if check(&now) {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; metrics: {now:?}\nstatus: {:#}",
            agent.status()["export"]
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Waits until `n` records are published (and nothing is queued).
pub(crate) fn wait_published(agent: &Agent, n: u64) -> Counts {
    wait_counts(agent, &format!("{n} records published"), |c| {
        c.published >= n && c.queue_messages == 0
    })
}

/// This pod's `publishStatuses[source=webhook]` in `/status`.
pub(crate) fn webhook_publish_status(status: &Value) -> Value {
    status["export"]["byPod"]["publishStatuses"]
        .as_array()
        .and_then(|list| list.iter().find(|s| s["source"] == "webhook"))
        .cloned()
        .unwrap_or(Value::Null)
}

pub(crate) fn stop(agent: &mut Agent) {
    agent.signal("TERM");
    let status = agent
        .wait_exit(Duration::from_secs(15))
        .expect("the agent exits after SIGTERM");
    assert!(status.success(), "exit status {status:?}");
}

pub(crate) fn wait_until(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

// ---------------------------------------------------------------------------------------------
// The spool on disk.

/// Admission files of `dir` ending in `suffix`, in name (= creation) order.
pub(crate) fn files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("admission-") && name.ends_with(suffix)
        })
        .collect();
    found.sort();
    found
}

/// Every entry of a directory (names).
pub(crate) fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|e| {
            e.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The records of a completed segment: it ends with a newline and every line is a JSON object.
pub(crate) fn segment_records(path: &Path) -> Vec<Value> {
    let text = fs::read_to_string(path).unwrap();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "{} does not end with a complete line",
        path.display()
    );
    text.lines()
        .enumerate()
        .map(|(i, line)| {
            let value: Value = serde_json::from_str(line).unwrap_or_else(|e| {
                panic!(
                    "{} line {}: not JSON ({e}): {line:.200}",
                    path.display(),
                    i + 1
                )
            });
            assert!(value.is_object(), "{} line {}", path.display(), i + 1);
            value
        })
        .collect()
}

/// Every record of every completed segment, oldest first.
pub(crate) fn all_records(dir: &Path) -> Vec<Value> {
    files(dir, ".log")
        .iter()
        .flat_map(|p| segment_records(p))
        .collect()
}

pub(crate) fn ids(records: &[Value]) -> Vec<String> {
    records
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Total bytes of the admission files of `dir`.
pub(crate) fn spool_bytes(dir: &Path) -> u64 {
    files(dir, "")
        .iter()
        .map(|p| fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum()
}

pub(crate) fn line_count(path: &Path) -> usize {
    fs::read(path)
        .unwrap()
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
}

/// A FIFO as the free-space file: the publisher blocks reading it on its first append, so
/// nothing leaves the queue until [`Gate::open`].
pub(crate) struct Gate {
    pub(crate) path: PathBuf,
    /// A second name of the FIFO, to wake a reader after `path` was replaced.
    pub(crate) hold: PathBuf,
}

impl Gate {
    pub(crate) fn new(path: &Path) -> Self {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .expect("mkfifo");
        let hold = path.with_extension("hold");
        fs::hard_link(path, &hold).unwrap();
        Self {
            path: path.to_owned(),
            hold,
        }
    }

    /// Replaces the FIFO by a regular file with plenty of free space and wakes a reader
    /// blocked on it, until `done`.
    pub(crate) fn open(&self, mut done: impl FnMut() -> bool) {
        write_atomically(&self.path, &PLENTY.to_string());
        let deadline = Instant::now() + Duration::from_secs(15);
        while !done() {
            // A writer that opens and closes: the blocked reader reads nothing (the agent then
            // measures the real file system) and goes on. Non-blocking: no reader, no wait.
            let _ = fs::OpenOptions::new()
                .write(true)
                .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
                .open(&self.hold);
            assert!(Instant::now() < deadline, "the publisher did not resume");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The kernel function a thread of `pid` whose name starts with `name` sleeps in.
pub(crate) fn thread_wchan(pid: u32, name: &str) -> Option<String> {
    for task in fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let task = task.ok()?.path();
        let comm = fs::read_to_string(task.join("comm")).unwrap_or_default();
        if comm.trim().starts_with(name) {
            return fs::read_to_string(task.join("wchan")).ok();
        }
    }
    None
}

/// Waits until the publisher thread is blocked opening the FIFO (when the kernel tells).
pub(crate) fn wait_publisher_blocked(agent: &Agent) {
    let pid = agent.pid();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match thread_wchan(pid, "export-publish") {
            Some(w) if w.contains("wait_for_partner") || w.contains("fifo") => return,
            // The kernel hides wchan: nothing to wait for.
            Some(w) if w.trim() == "0" || w.trim().is_empty() => return,
            None => return,
            Some(_) => {}
        }
        assert!(
            Instant::now() < deadline,
            "the publisher never blocked on the FIFO"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Makes a directory unwritable for the agent until dropped: `chattr +i` (root on ext4 and
/// most file systems), else `chmod 0500` (not root), else the directory is replaced by a
/// regular file.
pub(crate) struct ReadOnly {
    dir: PathBuf,
    pub(crate) how: &'static str,
}

impl ReadOnly {
    pub(crate) fn new(dir: &Path) -> Self {
        let chattr = std::process::Command::new("chattr")
            .arg("+i")
            .arg(dir)
            .output()
            .is_ok_and(|o| o.status.success());
        if chattr {
            return Self {
                dir: dir.to_owned(),
                how: "chattr",
            };
        }
        let root = {
            use std::os::unix::fs::MetadataExt;
            fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
        };
        if !root {
            fs::set_permissions(dir, fs::Permissions::from_mode(0o500)).unwrap();
            return Self {
                dir: dir.to_owned(),
                how: "chmod",
            };
        }
        fs::rename(dir, dir.with_extension("moved")).unwrap();
        fs::write(dir, b"not a directory").unwrap();
        Self {
            dir: dir.to_owned(),
            how: "file",
        }
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        match self.how {
            "chattr" => {
                let _ = std::process::Command::new("chattr")
                    .arg("-i")
                    .arg(&self.dir)
                    .status();
            }
            "chmod" => {
                let _ = fs::set_permissions(&self.dir, fs::Permissions::from_mode(0o700));
            }
            _ => {
                let _ = fs::remove_file(&self.dir);
                let _ = fs::rename(self.dir.with_extension("moved"), &self.dir);
            }
        }
    }
}
