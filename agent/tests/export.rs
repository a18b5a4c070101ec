//! Black-box tests of admission violation export (reference §7, the disk driver of the Gatekeeper
//! seed): the real binary over real HTTP, each test with its own directories and ports.
//!
//! Two hidden flags make time and disk space controllable: `--export-clock-file` (the export's
//! clock reads an RFC 3339 time from a file) and `--export-free-space-file` (free bytes read
//! from a file, measured once per batch). When the free-space file is a FIFO, the publisher blocks on
//! its first append until the test lets it go: that holds the queue full deterministically,
//! without touching the agent.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use support::record::{ADMISSION_RECORD_FIELDS, keys};
use support::{Agent, plain_client, post, rule_config_map};

const MIB: u64 = 1024 * 1024;
/// The free-space reserve of the disk driver.
const RESERVE: u64 = 16 * MIB;
/// Free space that never limits anything.
const PLENTY: u64 = 1 << 40;
/// Largest encoded record.
const RECORD_LIMIT: usize = 64 * 1024;
const SEGMENT_BYTES: u64 = MIB;
const SEGMENT_RECORDS: usize = 1000;
const RETAINED_SEGMENTS: usize = 20;
const RETAINED_BYTES: u64 = 20 * MIB;
const QUEUE_MESSAGES: usize = 1024;
const QUEUE_BYTES: u64 = 16 * MIB;
const REASONS: [&str; 7] = [
    "message_too_large",
    "queue_full",
    "encode_error",
    "disk_full",
    "shutdown",
    "publish_error",
    "no_connection",
];
/// The time the clock file starts at.
const T0: &str = "2030-01-01T00:00:00Z";
const IMAGE_PATH: &str = "spec.template.spec.containers[0].image";

// ---------------------------------------------------------------------------------------------
// Fixture: rules, Connection, agents.

/// Rules of every mode, one namespace each; `other` matches no rule.
fn rules_yaml() -> String {
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

fn connection_yaml(driver: &str, path: &Path) -> String {
    let path = serde_json::to_string(&path.display().to_string()).unwrap();
    format!(
        "apiVersion: connection.drift-sentinel.io/v1alpha1\nkind: Connection\nmetadata: {{name: audit-connection}}\nspec: {{driver: {driver}, config: {{path: {path}}}}}\n"
    )
}

/// One test's directories: rules, Connection file, spool, clock and free-space files.
struct Env {
    dir: tempfile::TempDir,
    rules: PathBuf,
    connection: PathBuf,
    /// `spec.config.path` of the Connection.
    topics: PathBuf,
    /// `<topics>/audit-channel`.
    channel: PathBuf,
    clock: PathBuf,
    free: PathBuf,
}

impl Env {
    fn new() -> Self {
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

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn export_args(&self, extra: &[&str]) -> Vec<String> {
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
    fn start(&self, extra: &[&str]) -> Agent {
        let args = self.export_args(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Agent::start(&args, false)
    }

    /// An agent with the clock file (set to [`T0`]).
    fn start_with_clock(&self, extra: &[&str]) -> Agent {
        self.set_clock(0);
        let mut args = vec!["--export-clock-file", self.clock.to_str().unwrap()];
        args.extend_from_slice(extra);
        self.start(&args)
    }

    /// An agent with the free-space file (set to `free` bytes).
    fn start_with_free_space(&self, free: u64) -> Agent {
        self.set_free(free);
        self.start(&["--export-free-space-file", self.free.to_str().unwrap()])
    }

    /// The same rules, export off: what every response must equal.
    fn reference(&self) -> Agent {
        Agent::start(&["--rules", self.rules.to_str().unwrap()], false)
    }

    /// Moves the export's clock to [`T0`] + `seconds`.
    fn set_clock(&self, seconds: u64) {
        let t0 = humantime::parse_rfc3339(T0).unwrap();
        let at = humantime::format_rfc3339_seconds(t0 + Duration::from_secs(seconds));
        write_atomically(&self.clock, &at.to_string());
    }

    fn set_free(&self, bytes: u64) {
        write_atomically(&self.free, &bytes.to_string());
    }
}

/// Replaces a file's content in one step, so that the agent never reads half of it.
fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("writing");
    fs::write(&tmp, text).unwrap();
    fs::rename(&tmp, path).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Requests.

fn labels() -> Value {
    json!({"app": "web", "team": "payments"})
}

fn deployment(namespace: &str, replicas: i64, image: &str, labels: &Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace, "labels": labels, "resourceVersion": "7"},
        "spec": {"replicas": replicas,
                 "template": {"spec": {"containers": [{"name": "app", "image": image}]}}}
    })
}

fn review(uid: &str, old: &Value, new: &Value) -> Value {
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
fn violation(uid: &str, namespace: &str) -> Value {
    review(
        uid,
        &deployment(namespace, 1, "shop:1", &labels()),
        &deployment(namespace, 2, "shop:2", &labels()),
    )
}

/// A violation in `prod` whose object carries a label of `blob` characters: its record is
/// about `blob` bytes larger than a small one.
fn big_violation(uid: &str, blob: usize) -> Value {
    let labels = json!({"app": "web", "blob": "x".repeat(blob)});
    review(
        uid,
        &deployment("prod", 1, "shop:1", &labels),
        &deployment("prod", 2, "shop:1", &labels),
    )
}

fn scale_review(uid: &str, old: i64, new: i64) -> Value {
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

fn validate_url(agent: &Agent) -> String {
    format!("{}/validate", agent.base)
}

/// Posts a review; the HTTP status must be 200. Returns the AdmissionReview answered.
fn send(client: &reqwest::blocking::Client, agent: &Agent, body: &Value) -> Value {
    let (code, review) = post(client, &validate_url(agent), body);
    assert_eq!(code, 200, "{review}");
    review
}

/// Posts a violation of the `prod` (enforce) rule and checks the denial.
fn send_denied(client: &reqwest::blocking::Client, agent: &Agent, body: &Value) -> Value {
    let review = send(client, agent, body);
    assert_denied(&review, body);
    review
}

fn assert_denied(review: &Value, request: &Value) {
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
fn send_both(
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

fn metrics_text(agent: &Agent) -> String {
    agent.metrics()
}

/// Sum of the samples of `name` whose labels include `labels`; the metric must exist.
fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
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
struct Counts {
    published: u64,
    dropped: BTreeMap<&'static str, u64>,
    queue_messages: u64,
    queue_bytes: u64,
    spool_segments: u64,
    spool_bytes: u64,
}

impl Counts {
    fn dropped(&self, reason: &str) -> u64 {
        self.dropped[reason]
    }

    fn dropped_total(&self) -> u64 {
        self.dropped.values().sum()
    }
}

fn counts(agent: &Agent) -> Counts {
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
fn wait_counts(agent: &Agent, what: &str, check: impl Fn(&Counts) -> bool) -> Counts {
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
fn wait_published(agent: &Agent, n: u64) -> Counts {
    wait_counts(agent, &format!("{n} records published"), |c| {
        c.published >= n && c.queue_messages == 0
    })
}

/// This pod's `publishStatuses[source=webhook]` in `/status`.
fn webhook_publish_status(status: &Value) -> Value {
    status["export"]["byPod"]["publishStatuses"]
        .as_array()
        .and_then(|list| list.iter().find(|s| s["source"] == "webhook"))
        .cloned()
        .unwrap_or(Value::Null)
}

fn stop(agent: &mut Agent) {
    agent.signal("TERM");
    let status = agent
        .wait_exit(Duration::from_secs(15))
        .expect("the agent exits after SIGTERM");
    assert!(status.success(), "exit status {status:?}");
}

fn wait_until(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

// ---------------------------------------------------------------------------------------------
// The spool on disk.

/// Admission files of `dir` ending in `suffix`, in name (= creation) order.
fn files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
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
fn entries(dir: &Path) -> Vec<String> {
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
fn segment_records(path: &Path) -> Vec<Value> {
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
fn all_records(dir: &Path) -> Vec<Value> {
    files(dir, ".log")
        .iter()
        .flat_map(|p| segment_records(p))
        .collect()
}

fn ids(records: &[Value]) -> Vec<String> {
    records
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Total bytes of the admission files of `dir`.
fn spool_bytes(dir: &Path) -> u64 {
    files(dir, "")
        .iter()
        .map(|p| fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum()
}

fn line_count(path: &Path) -> usize {
    fs::read(path)
        .unwrap()
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
}

/// A FIFO as the free-space file: the publisher blocks reading it on its first append, so
/// nothing leaves the queue until [`Gate::open`].
struct Gate {
    path: PathBuf,
    /// A second name of the FIFO, to wake a reader after `path` was replaced.
    hold: PathBuf,
}

impl Gate {
    fn new(path: &Path) -> Self {
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
    fn open(&self, mut done: impl FnMut() -> bool) {
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
fn thread_wchan(pid: u32, name: &str) -> Option<String> {
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
fn wait_publisher_blocked(agent: &Agent) {
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

// ---------------------------------------------------------------------------------------------
// 1. Records.

/// The record of `request` must carry every field of reference §7, matching the request and the
/// response the webhook gave.
fn check_record(
    record: &Value,
    request: &Value,
    response: &Value,
    window: (SystemTime, SystemTime),
) {
    let uid = request["request"]["uid"].as_str().unwrap();
    let fields: BTreeSet<&str> = keys(record).into_iter().collect();
    let want: BTreeSet<&str> = ADMISSION_RECORD_FIELDS.into_iter().collect();
    assert_eq!(fields, want, "fields of {uid}");
    let req = &request["request"];
    let annotations = &response["response"]["auditAnnotations"];
    assert_eq!(record["eventType"], "violation_admission", "{uid}");
    assert_eq!(record["id"], uid);
    let timestamp = record["timestamp"].as_str().unwrap();
    assert!(timestamp.ends_with('Z'), "{uid}: {timestamp} is not UTC");
    let at = humantime::parse_rfc3339(timestamp).unwrap();
    assert!(
        at + Duration::from_secs(1) >= window.0 && at <= window.1 + Duration::from_secs(1),
        "{uid}: timestamp {timestamp} outside the test"
    );
    assert_eq!(record["operation"], req["operation"], "{uid}");
    assert_eq!(
        record["dryRun"],
        req["dryRun"].as_bool().unwrap_or(false),
        "{uid}"
    );
    let user = &req["userInfo"];
    assert_eq!(record["userName"], user["username"], "{uid}");
    assert_eq!(
        record["userUID"],
        user["uid"].as_str().unwrap_or(""),
        "{uid}"
    );
    let groups = user.get("groups").cloned().unwrap_or_else(|| json!([]));
    assert_eq!(record["userGroups"], groups, "{uid}");
    assert_eq!(record["resource"], req["resource"]["resource"], "{uid}");
    assert_eq!(
        record["subResource"],
        req["subResource"].as_str().unwrap_or(""),
        "{uid}"
    );
    let kind = &req["kind"];
    let api_version = format!(
        "{}/{}",
        kind["group"].as_str().unwrap(),
        kind["version"].as_str().unwrap()
    );
    assert_eq!(record["resourceAPIVersion"], api_version, "{uid}");
    assert_eq!(record["resourceKind"], kind["kind"], "{uid}");
    assert_eq!(record["resourceNamespace"], req["namespace"], "{uid}");
    assert_eq!(record["resourceName"], req["name"], "{uid}");
    let labels = req["object"]["metadata"]
        .get("labels")
        .cloned()
        .unwrap_or_else(|| json!({}));
    assert_eq!(record["resourceLabels"], labels, "{uid}");
    let rule = annotations["rule"].as_str().unwrap();
    let (rule_namespace, rule_name) = rule.split_once('/').unwrap();
    assert_eq!(record["ruleNamespace"], rule_namespace, "{uid}");
    assert_eq!(record["ruleName"], rule_name, "{uid}");
    let mode = annotations["mode"].as_str().unwrap();
    assert_eq!(record["mode"], mode, "{uid}");
    let message = record["message"].as_str().unwrap();
    let response = &response["response"];
    match mode {
        "enforce" => {
            assert_eq!(record["enforcementAction"], "deny", "{uid}");
            assert_eq!(message, response["status"]["message"], "{uid}");
        }
        "warn" => {
            assert_eq!(record["enforcementAction"], "warn", "{uid}");
            assert_eq!(message, response["warnings"][0], "{uid}");
        }
        "dry-run" => {
            assert_eq!(record["enforcementAction"], "dryrun", "{uid}");
            assert!(
                message.starts_with("would deny: Drift Sentinel: immutable fields changed: "),
                "{uid}: {message}"
            );
            assert!(response.get("warnings").is_none_or(Value::is_null), "{uid}");
        }
        other => panic!("{uid}: unexpected mode {other}"),
    }
    let denied: Vec<&str> = annotations["denied-paths"]
        .as_str()
        .unwrap()
        .split(", ")
        .collect();
    assert_eq!(record["details"]["deniedPaths"], json!(denied), "{uid}");
    for path in &denied {
        assert!(message.contains(path), "{uid}: {message} names {path}");
    }
    let changes = record["details"]["changes"].as_array().unwrap();
    assert_eq!(changes.len(), denied.len(), "{uid}");
    for (change, path) in changes.iter().zip(&denied) {
        assert_eq!(change["path"], *path, "{uid}");
        let fields: BTreeSet<&str> = keys(change).into_iter().collect();
        assert_eq!(fields, BTreeSet::from(["path", "old", "new"]), "{uid}");
    }
}

#[test]
fn violations_become_complete_records_and_responses_do_not_change() {
    let env = Env::new();
    let strict = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/rule-strict.yaml");
    let mut agent = env.start(&["--rules", strict.to_str().unwrap()]);
    let reference = Agent::start(
        &[
            "--rules",
            env.rules.to_str().unwrap(),
            "--rules",
            strict.to_str().unwrap(),
        ],
        false,
    );
    let client = plain_client();
    let window_start = SystemTime::now();

    // The example of the docs, built by `drift-sentinel review`.
    let example = support::build_example_review(&["--uid", "example-1"]);

    let mut violating: Vec<Value> = Vec::new();
    for i in 0..10 {
        violating.push(violation(&format!("enforce-{i}"), "prod"));
    }
    for i in 0..3 {
        violating.push(violation(&format!("warn-{i}"), "staging"));
        violating.push(violation(&format!("dry-{i}"), "dev"));
    }
    let mut dry_run = violation("dryrun-request", "prod");
    dry_run["request"]["dryRun"] = json!(true);
    violating.push(dry_run);
    let mut unlabelled = violation("no-labels", "prod");
    for side in ["object", "oldObject"] {
        unlabelled["request"][side]["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("labels");
    }
    violating.push(unlabelled);
    violating.push(scale_review("scale-1", 2, 5));
    violating.push(example);

    let same = |ns: &str| deployment(ns, 1, "shop:1", &labels());
    let mut allowed: Vec<Value> = vec![
        review(
            "allowed-image",
            &same("prod"),
            &deployment("prod", 1, "shop:2", &labels()),
        ),
        review("allowed-nochange", &same("prod"), &same("prod")),
        review(
            "allowed-norule",
            &same("other"),
            &deployment("other", 2, "shop:1", &labels()),
        ),
        review(
            "allowed-off",
            &same("sandbox"),
            &deployment("sandbox", 2, "shop:1", &labels()),
        ),
    ];
    let mut create = violation("allowed-create", "prod");
    create["request"]["operation"] = json!("CREATE");
    allowed.push(create);
    let mut bypass = violation("allowed-bypass", "prod");
    bypass["request"]["object"]["metadata"]["annotations"] =
        json!({"drift-sentinel.k8s.io/bypass": "true"});
    allowed.push(bypass);

    // Interleaved, so that allowed requests fall between exported ones.
    let mut responses: BTreeMap<String, Value> = BTreeMap::new();
    let mut all: Vec<&Value> = violating.iter().collect();
    for (i, a) in allowed.iter().enumerate() {
        all.insert((i * 4).min(all.len()), a);
    }
    for request in &all {
        let response = send_both(&client, &agent, &reference, request);
        responses.insert(
            request["request"]["uid"].as_str().unwrap().to_owned(),
            response,
        );
    }
    for a in &allowed {
        let uid = a["request"]["uid"].as_str().unwrap();
        assert_eq!(responses[uid]["response"]["allowed"], true, "{uid}");
    }
    for v in &violating {
        let uid = v["request"]["uid"].as_str().unwrap();
        assert!(
            responses[uid]["response"]["auditAnnotations"]
                .get("denied-paths")
                .is_some(),
            "{uid} should be a violation: {}",
            responses[uid]
        );
    }

    // Every violation, and the edit a bypass allowed (its trail, enforcementAction bypass).
    let n = violating.len() as u64 + 1;
    let published = wait_published(&agent, n);
    assert_eq!(published.published, n, "{published:?}");
    assert_eq!(published.dropped_total(), 0, "{published:?}");
    let status = agent.status();
    assert_eq!(status["export"]["enabled"], true);
    assert_eq!(
        status["export"]["channelDirectory"],
        env.channel.display().to_string()
    );
    assert_eq!(status["export"]["byPod"]["connectionErrors"], json!([]));
    stop(&mut agent);
    let window_end = SystemTime::now();

    assert_eq!(
        files(&env.channel, ".open"),
        Vec::<PathBuf>::new(),
        "no .open after SIGTERM"
    );
    let logs = files(&env.channel, ".log");
    assert!(!logs.is_empty());
    for log in &logs {
        let name = log.file_name().unwrap().to_str().unwrap();
        let rest = name
            .strip_prefix("admission-")
            .unwrap()
            .strip_suffix(".log")
            .unwrap();
        let (stamp, random) = rest.rsplit_once('-').unwrap();
        assert!(stamp.ends_with('Z') && stamp.contains('T'), "{name}");
        assert!(
            random.len() == 16 && random.chars().all(|c| c.is_ascii_hexdigit()),
            "{name}"
        );
        let mode = fs::metadata(log).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{name} mode {mode:o}");
    }
    let mode = fs::metadata(&env.channel).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "channel directory mode {mode:o}");

    let records = all_records(&env.channel);
    assert_eq!(
        records.len(),
        violating.len() + 1,
        "one record per violation, and the bypassed edit's: {:?}",
        ids(&records)
    );
    let by_id: BTreeMap<String, &Value> = records
        .iter()
        .map(|r| (r["id"].as_str().unwrap().to_owned(), r))
        .collect();
    assert_eq!(
        by_id.len(),
        records.len(),
        "ids repeat: {:?}",
        ids(&records)
    );
    for request in &violating {
        let uid = request["request"]["uid"].as_str().unwrap();
        let record = by_id
            .get(uid)
            .unwrap_or_else(|| panic!("no record of {uid}"));
        check_record(record, request, &responses[uid], (window_start, window_end));
    }
    // The exported order is the order of the requests (one client, one after the other).
    let sent: Vec<String> = all
        .iter()
        .map(|v| v["request"]["uid"].as_str().unwrap().to_owned())
        .filter(|uid| uid == "allowed-bypass" || !uid.starts_with("allowed-"))
        .collect();
    assert_eq!(ids(&records), sent);

    // Specific values: numbers stay numbers (reference §7), with the totals.
    let deployment_details = json!({
        "deniedPaths": ["spec.replicas"],
        "changedPaths": ["spec.replicas", IMAGE_PATH],
        "changes": [{"path": "spec.replicas", "old": 1, "new": 2}],
        "deniedCount": 1,
        "changedCount": 2
    });
    for uid in ["enforce-0", "warn-1", "dry-2", "dryrun-request"] {
        assert_eq!(by_id[uid]["details"], deployment_details, "{uid}");
        assert_eq!(by_id[uid]["resourceLabels"], labels(), "{uid}");
        assert_eq!(
            by_id[uid]["userGroups"],
            json!(["developers", "system:authenticated"])
        );
    }
    assert_eq!(by_id["enforce-0"]["dryRun"], false);
    assert_eq!(by_id["dryrun-request"]["dryRun"], true);
    assert_eq!(by_id["dryrun-request"]["enforcementAction"], "deny");
    assert_eq!(by_id["warn-1"]["enforcementAction"], "warn");
    assert_eq!(by_id["warn-1"]["mode"], "warn");
    assert_eq!(by_id["dry-2"]["enforcementAction"], "dryrun");
    assert_eq!(by_id["dry-2"]["mode"], "dry-run");
    assert_eq!(by_id["no-labels"]["resourceLabels"], json!({}));
    let scale = by_id["scale-1"];
    assert_eq!(scale["subResource"], "scale");
    assert_eq!(scale["resource"], "deployments");
    assert_eq!(scale["resourceKind"], "Scale");
    assert_eq!(scale["resourceAPIVersion"], "autoscaling/v1");
    assert_eq!(
        scale["details"],
        json!({"deniedPaths": ["spec.replicas"], "changedPaths": ["spec.replicas"],
               "changes": [{"path": "spec.replicas", "old": 2, "new": 5}],
               "deniedCount": 1, "changedCount": 1})
    );
    let example = by_id["example-1"];
    assert_eq!(example["ruleNamespace"], "drift-sentinel");
    assert_eq!(example["ruleName"], "drift-sentinel-strict");
    assert_eq!(example["resourceNamespace"], "prod-eu");
    assert_eq!(example["resourceName"], "checkout");
    assert_eq!(
        example["resourceLabels"],
        json!({"app": "checkout", "team": "payments"})
    );
    assert_eq!(
        example["details"]["deniedPaths"],
        json!(["spec.replicas", IMAGE_PATH])
    );
    assert_eq!(
        example["details"]["changes"],
        json!([{"path": "spec.replicas", "old": 3, "new": 5},
               {"path": IMAGE_PATH, "old": "registry.example.com/checkout:2.3.0",
                "new": "registry.example.com/checkout:2.4.0"}])
    );
    for uid in [
        "allowed-image",
        "allowed-nochange",
        "allowed-norule",
        "allowed-off",
        "allowed-create",
    ] {
        assert!(!by_id.contains_key(uid), "{uid} was exported");
    }
    let bypassed = by_id
        .get("allowed-bypass")
        .expect("the bypassed edit's record");
    assert_eq!(bypassed["enforcementAction"], "bypass");
    assert_eq!(bypassed["bypass"]["endState"], "none");
    assert_eq!(bypassed["details"]["deniedPaths"], json!([]));
}

// ---------------------------------------------------------------------------------------------
// 2. Rotation.

#[test]
fn a_segment_is_completed_at_1000_records() {
    let env = Env::new();
    let mut agent = env.start(&[]);
    let client = plain_client();
    let uids: Vec<String> = (0..=SEGMENT_RECORDS).map(|i| format!("r-{i:05}")).collect();
    for uid in &uids {
        send_denied(&client, &agent, &violation(uid, "prod"));
    }
    wait_published(&agent, uids.len() as u64);
    let logs = files(&env.channel, ".log");
    let open = files(&env.channel, ".open");
    assert_eq!(logs.len(), 1, "{:?}", entries(&env.channel));
    assert_eq!(open.len(), 1, "{:?}", entries(&env.channel));
    assert_eq!(line_count(&logs[0]), SEGMENT_RECORDS);
    assert_eq!(line_count(&open[0]), 1);
    stop(&mut agent);

    let logs = files(&env.channel, ".log");
    assert_eq!(logs.len(), 2, "{:?}", entries(&env.channel));
    let first = segment_records(&logs[0]);
    assert_eq!(ids(&first), uids[..SEGMENT_RECORDS].to_vec());
    assert_eq!(
        ids(&segment_records(&logs[1])),
        vec![uids[SEGMENT_RECORDS].clone()]
    );
    assert!(files(&env.channel, ".open").is_empty());
}

#[test]
fn a_segment_is_completed_before_it_would_pass_1_mib() {
    let env = Env::new();
    let mut agent = env.start(&[]);
    let client = plain_client();
    // 70 records of 30–50 KiB, of varying sizes: about 2.7 MiB.
    let uids: Vec<String> = (0..70).map(|i| format!("big-{i:03}")).collect();
    for (i, uid) in uids.iter().enumerate() {
        send_denied(
            &client,
            &agent,
            &big_violation(uid, 30_000 + (i * 7919) % 20_000),
        );
    }
    wait_published(&agent, uids.len() as u64);
    stop(&mut agent);

    let logs = files(&env.channel, ".log");
    assert!(logs.len() >= 3, "{:?}", entries(&env.channel));
    let mut records = Vec::new();
    for (i, log) in logs.iter().enumerate() {
        let size = fs::metadata(log).unwrap().len();
        assert!(size <= SEGMENT_BYTES, "{} is {size} bytes", log.display());
        assert!(line_count(log) < SEGMENT_RECORDS);
        if let Some(next) = logs.get(i + 1) {
            // Completed for size: the next record (with its newline) would not have fit.
            let text = fs::read_to_string(next).unwrap();
            let next_line = text.lines().next().unwrap().len() as u64 + 1;
            assert!(
                size + next_line > SEGMENT_BYTES,
                "{} completed at {size} bytes although the next record of {next_line} bytes fit",
                log.display()
            );
        }
        records.extend(segment_records(log));
    }
    assert_eq!(ids(&records), uids);
}

#[test]
fn an_open_segment_is_completed_after_a_minute_without_new_records() {
    let env = Env::new();
    let mut agent = env.start_with_clock(&[]);
    let client = plain_client();
    for i in 0..3 {
        send_denied(&client, &agent, &violation(&format!("m-{i}"), "prod"));
    }
    wait_published(&agent, 3);
    let open = files(&env.channel, ".open");
    assert_eq!(open.len(), 1, "{:?}", entries(&env.channel));
    let name = open[0].file_name().unwrap().to_str().unwrap().to_owned();
    assert!(
        name.starts_with("admission-20300101T000000.000000Z-"),
        "the name carries the export clock's time: {name}"
    );
    assert!(files(&env.channel, ".log").is_empty());

    // 59 s: not yet (the janitor ticks every second).
    env.set_clock(59);
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        files(&env.channel, ".open"),
        open,
        "completed before a minute"
    );
    assert!(files(&env.channel, ".log").is_empty());

    // 61 s: completed by the janitor, with no new record.
    env.set_clock(61);
    wait_until(
        "the open segment to be completed",
        Duration::from_secs(5),
        || files(&env.channel, ".open").is_empty(),
    );
    let logs = files(&env.channel, ".log");
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0], open[0].with_extension("log"));
    let records = segment_records(&logs[0]);
    assert_eq!(ids(&records), ["m-0", "m-1", "m-2"]);
    for record in &records {
        assert_eq!(record["timestamp"], "2030-01-01T00:00:00.000000Z");
    }

    // The next record opens a new segment, named by the clock's time.
    send_denied(&client, &agent, &violation("m-3", "prod"));
    wait_published(&agent, 4);
    let open = files(&env.channel, ".open");
    assert_eq!(open.len(), 1);
    assert!(
        open[0]
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("admission-20300101T000101.000000Z-"),
        "{open:?}"
    );
    stop(&mut agent);
    assert_eq!(
        ids(&all_records(&env.channel)),
        ["m-0", "m-1", "m-2", "m-3"]
    );
}

// ---------------------------------------------------------------------------------------------
// 3. Retention.

#[test]
fn retention_keeps_the_newest_20_completed_segments() {
    let env = Env::new();
    let agent = env.start_with_clock(&[]);
    let client = plain_client();
    // Each record after the clock moved a minute completes the open segment (the publisher
    // checks the age after each batch), so segments hold one or two records: 52 records make
    // at least 26 segments.
    let n = 52u64;
    let uids: Vec<String> = (0..n).map(|i| format!("k-{i:03}")).collect();
    for (i, uid) in uids.iter().enumerate() {
        env.set_clock(i as u64 * 61);
        send_denied(&client, &agent, &violation(uid, "prod"));
        wait_published(&agent, i as u64 + 1);
    }
    // The last record's segment too.
    env.set_clock(n * 61 + 61);
    wait_until(
        "the last segment to be completed",
        Duration::from_secs(5),
        || files(&env.channel, ".open").is_empty(),
    );
    std::thread::sleep(Duration::from_millis(1200));
    let logs = files(&env.channel, ".log");
    assert_eq!(logs.len(), RETAINED_SEGMENTS, "{:?}", entries(&env.channel));
    assert!(files(&env.channel, ".deleting").is_empty());
    // The newest ones: the records kept are the last ones sent, without a gap.
    let kept = ids(&all_records(&env.channel));
    assert!(kept.len() >= RETAINED_SEGMENTS && kept.len() <= 2 * RETAINED_SEGMENTS);
    assert_eq!(kept, uids[uids.len() - kept.len()..].to_vec());
    let c = wait_counts(&agent, "the spool gauges", |c| {
        c.spool_segments == RETAINED_SEGMENTS as u64
    });
    assert_eq!(c.spool_bytes, spool_bytes(&env.channel), "{c:?}");
}

#[test]
fn retention_keeps_the_spool_within_20_mib() {
    let env = Env::new();
    let agent = env.start(&[]);
    // About 27 MiB of records of ~58 KiB.
    let n = 480usize;
    let uids: Vec<String> = (0..n).map(|i| format!("b-{i:04}")).collect();
    let sent = AtomicUsize::new(0);
    let max_seen = Mutex::new((0u64, 0usize));
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        // A watcher: at no moment do the files pass the limits.
        scope.spawn(|| {
            while !done.load(Ordering::Acquire) {
                let bytes = spool_bytes(&env.channel);
                let logs = files(&env.channel, ".log").len();
                let mut max = max_seen.lock().unwrap();
                *max = (max.0.max(bytes), max.1.max(logs));
                drop(max);
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        // Two senders, each in its own order; the ids say which came last.
        let chunks: Vec<&[String]> = uids.chunks(n / 2).collect();
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                let agent = &agent;
                let sent = &sent;
                scope.spawn(move || {
                    let client = plain_client();
                    for uid in chunk {
                        send_denied(&client, agent, &big_violation(uid, 58_000));
                        sent.fetch_add(1, Ordering::AcqRel);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        wait_published(&agent, n as u64);
        std::thread::sleep(Duration::from_millis(300));
        done.store(true, Ordering::Release);
    });
    let (max_bytes, max_logs) = *max_seen.lock().unwrap();
    assert!(
        max_bytes <= RETAINED_BYTES,
        "the spool reached {max_bytes} bytes"
    );
    assert!(
        max_logs <= RETAINED_SEGMENTS,
        "{max_logs} completed segments"
    );
    let total = spool_bytes(&env.channel);
    assert!(total <= RETAINED_BYTES, "{total}");
    // Only what had to go went: within a segment and a record of the limit.
    assert!(
        total > RETAINED_BYTES - SEGMENT_BYTES - RECORD_LIMIT as u64,
        "retention removed more than needed: {total} bytes left"
    );
    let c = counts(&agent);
    assert_eq!(c.published, n as u64);
    assert_eq!(c.spool_bytes, total, "{c:?}");
    assert_eq!(
        c.spool_segments,
        files(&env.channel, ".log").len() as u64,
        "{c:?}"
    );
    // The oldest went, the newest stayed: what is kept is a suffix of each sender's order.
    let mut kept: BTreeSet<String> = ids(&all_records(&env.channel)).into_iter().collect();
    for open in files(&env.channel, ".open") {
        kept.extend(ids(&segment_records(&open)));
    }
    assert!(kept.len() < n);
    for chunk in uids.chunks(n / 2) {
        let first_kept = chunk
            .iter()
            .position(|u| kept.contains(u))
            .expect("something kept");
        assert!(first_kept > 0, "the oldest record of a sender survived");
        let gaps: Vec<&String> = chunk[first_kept..]
            .iter()
            .filter(|u| !kept.contains(*u))
            .collect();
        assert!(
            gaps.is_empty(),
            "a gap in the kept records: {gaps:?} missing after {}; segments: {:#?}",
            chunk[first_kept],
            files(&env.channel, "")
                .iter()
                .map(|f| (
                    f.clone(),
                    ids(&segment_records(f)).first().cloned(),
                    line_count(f)
                ))
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn retention_removes_completed_segments_older_than_24_hours() {
    let env = Env::new();
    let agent = env.start_with_clock(&[]);
    let client = plain_client();
    let day = 24 * 3600;
    // Segment A made at T0, segment B at T0 + 1 h; each completed by the janitor.
    for (index, (uid, at)) in [("age-a", 0u64), ("age-b", 3600)].into_iter().enumerate() {
        env.set_clock(at);
        let before = files(&env.channel, ".log").len();
        send_denied(&client, &agent, &violation(uid, "prod"));
        wait_published(&agent, index as u64 + 1);
        env.set_clock(at + 61);
        wait_until("age rotation", Duration::from_secs(5), || {
            files(&env.channel, ".log").len() == before + 1
                && files(&env.channel, ".open").is_empty()
        });
    }
    let logs = files(&env.channel, ".log");
    assert_eq!(logs.len(), 2);
    let (a, b) = (logs[0].clone(), logs[1].clone());
    assert_eq!(ids(&segment_records(&a)), ["age-a"]);

    // 24 h and 1 min after A was made: A goes, B (23 h 1 min old) stays.
    env.set_clock(day + 60);
    wait_until("A to be removed", Duration::from_secs(5), || !a.exists());
    std::thread::sleep(Duration::from_millis(1500));
    assert!(b.exists(), "a segment younger than 24 h was removed");
    assert_eq!(files(&env.channel, ".log"), vec![b.clone()]);

    // A day after B: the spool is empty, without a new record.
    env.set_clock(3600 + day + 60);
    wait_until("B to be removed", Duration::from_secs(5), || !b.exists());
    assert!(
        files(&env.channel, "").is_empty(),
        "{:?}",
        entries(&env.channel)
    );
    let c = wait_counts(&agent, "empty spool gauges", |c| c.spool_segments == 0);
    assert_eq!(c.spool_bytes, 0);
    assert_eq!(c.published, 2);
}

// ---------------------------------------------------------------------------------------------
// 4. Oversized records.

#[test]
fn an_oversized_record_is_dropped_and_counted() {
    let env = Env::new();
    let mut agent = env.start(&[]);
    let reference = env.reference();
    let client = plain_client();
    // Calibration: the record of a 1,000-character label; every uid has the same length, so
    // the record of an n-character label is (n - 1000) bytes longer.
    send_both(&client, &agent, &reference, &big_violation("u-calib", 1000));
    wait_published(&agent, 1);
    let open = files(&env.channel, ".open");
    let calibrated = fs::read_to_string(&open[0]).unwrap().trim_end().len();
    let fitting = 1000 + RECORD_LIMIT - calibrated;

    // Exactly 64 KiB: written. One byte more: dropped. 70,000 characters: dropped.
    send_both(
        &client,
        &agent,
        &reference,
        &big_violation("u-fit00", fitting),
    );
    send_both(
        &client,
        &agent,
        &reference,
        &big_violation("u-over0", fitting + 1),
    );
    send_both(
        &client,
        &agent,
        &reference,
        &big_violation("u-huge0", 70_000),
    );
    let c = wait_counts(&agent, "two message_too_large drops", |c| {
        c.dropped("message_too_large") == 2 && c.published == 2 && c.queue_messages == 0
    });
    assert_eq!(c.dropped_total(), 2, "{c:?}");
    // Later records are written.
    send_both(&client, &agent, &reference, &violation("u-after", "prod"));
    let c = wait_published(&agent, 3);
    assert_eq!(c.dropped_total(), 2, "{c:?}");
    stop(&mut agent);

    let logs = files(&env.channel, ".log");
    let text: String = logs
        .iter()
        .map(|l| fs::read_to_string(l).unwrap())
        .collect();
    let lengths: Vec<usize> = text.lines().map(str::len).collect();
    assert_eq!(
        lengths[1], RECORD_LIMIT,
        "the record at the limit is written whole"
    );
    assert_eq!(
        ids(&all_records(&env.channel)),
        ["u-calib", "u-fit00", "u-after"]
    );
}

// ---------------------------------------------------------------------------------------------
// 5. Free-space reserve.

#[test]
fn the_free_space_reserve_refuses_records_and_the_status_says_so() {
    let env = Env::new();
    let mut agent = env.start_with_free_space(PLENTY);
    let reference = env.reference();
    let client = plain_client();
    send_both(&client, &agent, &reference, &violation("ok-01", "prod"));
    wait_published(&agent, 1);
    agent.wait_for_status("an active webhook publish status", |s| {
        let p = webhook_publish_status(s);
        p["active"] == true && p["errors"] == json!([])
    });
    let size = fs::read_to_string(&files(&env.channel, ".open")[0])
        .unwrap()
        .trim_end()
        .len() as u64;

    // Exactly the reserve plus the record: the newline does not fit. Then the bare reserve.
    env.set_free(RESERVE + size);
    send_both(&client, &agent, &reference, &violation("df-01", "prod"));
    wait_counts(&agent, "a disk_full drop", |c| c.dropped("disk_full") == 1);
    env.set_free(RESERVE);
    send_both(&client, &agent, &reference, &violation("df-02", "prod"));
    send_both(&client, &agent, &reference, &violation("df-03", "prod"));
    let c = wait_counts(&agent, "three disk_full drops", |c| {
        c.dropped("disk_full") == 3 && c.queue_messages == 0
    });
    assert_eq!((c.published, c.dropped_total()), (1, 3), "{c:?}");
    let status = agent.wait_for_status("the reserve error in the status", |s| {
        webhook_publish_status(s)["active"] == false
    });
    let publish = webhook_publish_status(&status);
    let errors = publish["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{publish:#}");
    assert_eq!(errors[0]["type"], "Publish");
    let message = errors[0]["message"].as_str().unwrap();
    assert_eq!(
        message,
        format!(
            "free space in {} is below the {RESERVE}-byte reserve",
            env.channel.display()
        )
    );
    assert!(publish["lastAttemptTime"].is_string());
    assert!(publish["lastSuccessTime"].is_string());
    assert_eq!(status["export"]["byPod"]["connectionErrors"], json!([]));

    // One byte more than the reserve, the record and its newline: written again.
    env.set_free(RESERVE + size + 1);
    send_both(&client, &agent, &reference, &violation("ok-02", "prod"));
    wait_published(&agent, 2);
    agent.wait_for_status("the status to recover", |s| {
        let p = webhook_publish_status(s);
        p["active"] == true && p["errors"] == json!([])
    });
    stop(&mut agent);
    assert_eq!(ids(&all_records(&env.channel)), ["ok-01", "ok-02"]);
}

// ---------------------------------------------------------------------------------------------
// 6. kill -9.

#[test]
fn a_segment_abandoned_by_kill_9_is_recovered_with_complete_records() {
    let env = Env::new();
    let mut agent = env.start(&[]);
    let stop_sending = AtomicBool::new(false);
    let answered = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for t in 0..4 {
            let agent = &agent;
            let stop_sending = &stop_sending;
            let answered = &answered;
            scope.spawn(move || {
                let client = plain_client();
                for i in 0..5000 {
                    if stop_sending.load(Ordering::Acquire) {
                        return;
                    }
                    // ~4 KiB records: segments complete every ~250 records.
                    let body = big_violation(&format!("kill-{t}-{i:05}"), 4000);
                    match client
                        .post(validate_url(agent))
                        .header("Content-Type", "application/json")
                        .body(body.to_string())
                        .send()
                    {
                        Ok(r) if r.status() == 200 => {
                            answered.fetch_add(1, Ordering::AcqRel);
                        }
                        _ => return,
                    }
                }
            });
        }
        wait_until("records to be written", Duration::from_secs(15), || {
            counts(&agent).published >= 600 && !files(&env.channel, ".open").is_empty()
        });
        agent.signal("KILL");
        stop_sending.store(true, Ordering::Release);
    });
    agent.wait_exit(Duration::from_secs(5)).expect("killed");

    // What the dead writer left: complete segments, and an open one whose complete lines
    // count (a torn last line does not).
    let mut before: Vec<String> = Vec::new();
    for log in files(&env.channel, ".log") {
        before.extend(ids(&segment_records(&log)));
    }
    let open = files(&env.channel, ".open");
    let abandoned = match open.as_slice() {
        [one] => one.clone(),
        // The kill fell between the completion of a segment and the start of the next (rare):
        // leave an abandoned segment as the dead writer would have.
        [] => {
            let path = env
                .channel
                .join("admission-20990101T000000.000000Z-00000000000000aa.open");
            let record = |id: &str| json!({"eventType": "violation_admission", "id": id});
            fs::write(
                &path,
                format!("{}\n{}\n", record("kill-x-1"), record("kill-x-2")),
            )
            .unwrap();
            path
        }
        many => panic!("one writer, one open segment: {many:?}"),
    };
    let content = fs::read(&abandoned).unwrap();
    let complete = content
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let complete_text = String::from_utf8(content[..complete].to_vec()).unwrap();
    for line in complete_text.lines() {
        let record: Value = serde_json::from_str(line).expect("a complete line is JSON");
        before.push(record["id"].as_str().unwrap().to_owned());
    }
    assert!(before.len() >= 600, "{}", before.len());
    // A write cut in the middle (the kill may not have hit one), an abandoned empty segment
    // and a remnant of retention.
    {
        use std::io::Write;
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(&abandoned)
            .unwrap();
        f.write_all(br#"{"eventType":"violation_admission","id":"torn-rec"#)
            .unwrap();
    }
    let empty = env
        .channel
        .join("admission-20200101T000000.000000Z-00000000000000ee.open");
    fs::write(&empty, b"{\"half").unwrap();
    let remnant = env
        .channel
        .join("admission-20200101T000000.000000Z-00000000000000dd.deleting");
    fs::write(&remnant, b"old\n").unwrap();

    // A new process on the same directory recovers it.
    let mut agent = env.start(&[]);
    wait_until("recovery", Duration::from_secs(10), || {
        files(&env.channel, ".open").is_empty() && !remnant.exists()
    });
    assert!(!empty.exists(), "an empty abandoned segment is removed");
    let recovered = abandoned.with_extension("log");
    assert_eq!(
        fs::read_to_string(&recovered).unwrap(),
        complete_text,
        "the recovered segment holds exactly the complete records"
    );
    let after = ids(&all_records(&env.channel));
    assert_eq!(after.len(), before.len(), "every complete record survives");
    assert_eq!(
        after.iter().collect::<BTreeSet<_>>(),
        before.iter().collect::<BTreeSet<_>>()
    );
    assert!(!after.iter().any(|id| id == "torn-rec"));
    // A record can be on disk before its response arrived: at most one per sender.
    assert!(
        before.len() <= answered.load(Ordering::Acquire) + 4 + 2,
        "more records than requests"
    );

    // And goes on exporting.
    send_denied(&plain_client(), &agent, &violation("after-restart", "prod"));
    wait_published(&agent, 1);
    stop(&mut agent);
    let last = ids(&all_records(&env.channel));
    assert_eq!(last.len(), before.len() + 1);
    assert_eq!(last.last().unwrap(), "after-restart");
    assert!(files(&env.channel, ".open").is_empty());
}

// ---------------------------------------------------------------------------------------------
// 7. Unwritable directories and unusable Connections.

/// Makes a directory unwritable for the agent until dropped: `chattr +i` (root on ext4 and
/// most file systems), else `chmod 0500` (not root), else the directory is replaced by a
/// regular file.
struct ReadOnly {
    dir: PathBuf,
    how: &'static str,
}

impl ReadOnly {
    fn new(dir: &Path) -> Self {
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

#[test]
fn an_unwritable_directory_drops_records_and_the_webhook_still_answers() {
    let env = Env::new();
    let mut agent = env.start_with_clock(&[]);
    let reference = env.reference();
    let client = plain_client();
    send_both(&client, &agent, &reference, &violation("ro-ok-1", "prod"));
    wait_published(&agent, 1);
    // Complete the open segment, so the next record needs a new file.
    env.set_clock(61);
    wait_until(
        "the segment to be completed",
        Duration::from_secs(5),
        || files(&env.channel, ".open").is_empty(),
    );
    agent.wait_for_status("an active publish status", |s| {
        webhook_publish_status(s)["active"] == true
    });

    {
        let guard = ReadOnly::new(&env.channel);
        for i in 0..3 {
            send_both(
                &client,
                &agent,
                &reference,
                &violation(&format!("ro-lost-{i}"), "prod"),
            );
        }
        let c = wait_counts(&agent, "publish_error drops", |c| {
            c.dropped("publish_error") == 3 && c.queue_messages == 0
        });
        assert_eq!(
            (c.published, c.dropped_total()),
            (1, 3),
            "{c:?} ({})",
            guard.how
        );
        let status = agent.wait_for_status("the publish error in the status", |s| {
            webhook_publish_status(s)["active"] == false
        });
        let publish = webhook_publish_status(&status);
        let errors = publish["errors"].as_array().unwrap();
        assert_eq!(errors.len(), 1, "{publish:#}");
        let message = errors[0]["message"].as_str().unwrap();
        assert_eq!(errors[0]["type"], "Publish");
        assert!(
            !message.contains(':'),
            "not coalesced to its class: {message}"
        );
        assert_eq!(
            message,
            format!(
                "cannot create a segment in spool directory {}",
                env.channel.display()
            ),
            "({})",
            guard.how
        );
    }

    // Writable again: exporting resumes without a restart and the status heals.
    send_both(&client, &agent, &reference, &violation("ro-ok-2", "prod"));
    wait_published(&agent, 2);
    agent.wait_for_status("the status to heal", |s| {
        let p = webhook_publish_status(s);
        p["active"] == true && p["errors"] == json!([])
    });
    stop(&mut agent);
    assert_eq!(ids(&all_records(&env.channel)), ["ro-ok-1", "ro-ok-2"]);
}

/// An agent whose Connection cannot be used exports nothing and counts `no_connection`.
fn assert_unusable_connection(env: &Env, want_error: &str, exact: bool) {
    let agent = env.start(&[]);
    let reference = env.reference();
    let status = agent.status();
    let errors = status["export"]["byPod"]["connectionErrors"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(errors.len(), 1, "{:#}", status["export"]);
    assert_eq!(errors[0]["type"], "UpsertConnection");
    let message = errors[0]["message"].as_str().unwrap();
    if exact {
        assert_eq!(message, want_error);
    } else {
        assert!(message.contains(want_error), "{message}");
    }
    assert!(
        !message.contains(':'),
        "not coalesced to its class: {message}"
    );
    assert_eq!(status["export"]["channelDirectory"], Value::Null);
    let client = plain_client();
    send_both(&client, &agent, &reference, &violation("nc-1", "prod"));
    send_both(&client, &agent, &reference, &violation("nc-2", "staging"));
    let c = wait_counts(&agent, "no_connection drops", |c| {
        c.dropped("no_connection") == 2
    });
    assert_eq!((c.published, c.dropped_total()), (0, 2), "{c:?}");
    assert!(
        agent
            .logs()
            .iter()
            .any(|l| l.contains("invalid Connection")),
        "the log says why"
    );
}

#[test]
fn a_connection_whose_path_cannot_be_written_exports_nothing() {
    let env = Env::new();
    let blocker = env.root().join("file");
    fs::write(&blocker, b"a regular file").unwrap();
    fs::write(
        &env.connection,
        connection_yaml("disk", &blocker.join("topics")),
    )
    .unwrap();
    assert_unusable_connection(&env, "is not writable", false);
    assert_eq!(fs::read(&blocker).unwrap(), b"a regular file");
    assert!(!env.topics.exists());
}

#[test]
fn a_connection_with_an_unknown_driver_exports_nothing() {
    let env = Env::new();
    fs::write(&env.connection, connection_yaml("kafka", &env.topics)).unwrap();
    assert_unusable_connection(&env, "unknown driver \"kafka\"", true);
    assert!(
        !env.topics.exists(),
        "nothing created for an unusable Connection"
    );
}

// ---------------------------------------------------------------------------------------------
// 8. The queue.

#[test]
fn a_full_queue_drops_records_by_message_count_and_never_delays_responses() {
    let env = Env::new();
    let gate = Gate::new(&env.free);
    let mut agent = env.start(&["--export-free-space-file", env.free.to_str().unwrap()]);
    let client = plain_client();
    let n = QUEUE_MESSAGES + 76;
    let uids: Vec<String> = (0..n).map(|i| format!("q-{i:05}")).collect();
    let mut slowest = Duration::ZERO;
    for uid in &uids {
        let started = Instant::now();
        send_denied(&client, &agent, &violation(uid, "prod"));
        slowest = slowest.max(started.elapsed());
    }
    // The publisher is stuck on the first record; nothing has left the queue.
    wait_publisher_blocked(&agent);
    assert!(
        slowest < Duration::from_secs(2),
        "a response took {slowest:?}"
    );
    let c = counts(&agent);
    assert_eq!(c.queue_messages, QUEUE_MESSAGES as u64, "{c:?}");
    assert_eq!(c.dropped("queue_full"), 76, "{c:?}");
    assert_eq!((c.published, c.dropped_total()), (0, 76), "{c:?}");
    let status = agent.status();
    assert_eq!(status["export"]["queue"]["messages"], QUEUE_MESSAGES);
    assert_eq!(status["export"]["queue"]["bytes"], c.queue_bytes);

    gate.open(|| counts(&agent).queue_messages == 0);
    let c = wait_published(&agent, QUEUE_MESSAGES as u64);
    assert_eq!(
        (c.published, c.dropped_total()),
        (QUEUE_MESSAGES as u64, 76)
    );
    assert_eq!(c.queue_bytes, 0);
    stop(&mut agent);
    // The first 1,024 were queued, the rest refused.
    assert_eq!(
        ids(&all_records(&env.channel)),
        uids[..QUEUE_MESSAGES].to_vec()
    );
}

#[test]
fn a_full_queue_drops_records_by_bytes() {
    let env = Env::new();
    let gate = Gate::new(&env.free);
    let mut agent = env.start(&["--export-free-space-file", env.free.to_str().unwrap()]);
    let client = plain_client();
    // ~60 KiB records, all of one size: 16 MiB holds 270-odd of them.
    let n = 320;
    let uids: Vec<String> = (0..n).map(|i| format!("qb-{i:04}")).collect();
    for uid in &uids {
        send_denied(&client, &agent, &big_violation(uid, 60_000));
    }
    wait_publisher_blocked(&agent);
    let c = counts(&agent);
    let queued = c.queue_messages;
    assert!(queued > 0 && queued < n as u64, "{c:?}");
    assert_eq!(c.queue_bytes % queued, 0, "records of one size: {c:?}");
    let size = c.queue_bytes / queued;
    assert!(size > 60_000 && size <= RECORD_LIMIT as u64, "{size}");
    assert_eq!(
        queued,
        QUEUE_BYTES / size,
        "as many as fit in 16 MiB: {c:?}"
    );
    assert_eq!(c.dropped("queue_full"), n as u64 - queued, "{c:?}");
    assert_eq!(c.dropped_total(), n as u64 - queued, "{c:?}");

    gate.open(|| counts(&agent).queue_messages == 0);
    let c = wait_published(&agent, queued);
    assert_eq!(c.published, queued);
    stop(&mut agent);
    assert_eq!(
        ids(&all_records(&env.channel)),
        uids[..queued as usize].to_vec()
    );
}

#[test]
fn a_burst_of_concurrent_clients_loses_nothing_silently() {
    let env = Env::new();
    let mut agent = env.start(&[]);
    let threads = 16;
    let per_thread = 100;
    let started = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..threads {
            let agent = &agent;
            scope.spawn(move || {
                let client = plain_client();
                for i in 0..per_thread {
                    // ~6 KiB records: ~10 MiB in all, within the spool's 20 MiB.
                    send_denied(
                        &client,
                        agent,
                        &big_violation(&format!("burst-{t:02}-{i:04}"), 6000),
                    );
                }
            });
        }
    });
    let elapsed = started.elapsed();
    let total = (threads * per_thread) as u64;
    let c = wait_counts(&agent, "every record accounted for", |c| {
        c.queue_messages == 0 && c.published + c.dropped_total() == total
    });
    eprintln!(
        "burst: {total} violations in {elapsed:?}; published {}, dropped {:?}",
        c.published, c.dropped
    );
    stop(&mut agent);
    let records = all_records(&env.channel);
    assert_eq!(records.len() as u64, c.published, "on disk = published");
    let unique: BTreeSet<String> = ids(&records).into_iter().collect();
    assert_eq!(unique.len(), records.len());
    assert!(unique.iter().all(|id| id.starts_with("burst-")));
}

// ---------------------------------------------------------------------------------------------
// 9. Graceful shutdown.

#[test]
fn sigterm_during_a_burst_writes_every_answered_violation() {
    let env = Env::new();
    let mut agent = env.start(&[]);
    let answered = Mutex::new(Vec::<String>::new());
    let attempted = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for t in 0..8 {
            let agent = &agent;
            let answered = &answered;
            let attempted = &attempted;
            scope.spawn(move || {
                let client = plain_client();
                for i in 0..100_000 {
                    let uid = format!("term-{t}-{i:06}");
                    attempted.fetch_add(1, Ordering::AcqRel);
                    let response = client
                        .post(validate_url(agent))
                        .header("Content-Type", "application/json")
                        .body(violation(&uid, "prod").to_string())
                        .send()
                        .and_then(|r| r.json::<Value>());
                    match response {
                        Ok(review) => {
                            assert_eq!(review["response"]["uid"], uid.as_str());
                            assert_eq!(review["response"]["allowed"], false);
                            answered.lock().unwrap().push(uid);
                        }
                        Err(_) => return,
                    }
                }
            });
        }
        wait_until("a burst", Duration::from_secs(15), || {
            answered.lock().unwrap().len() >= 300
        });
        agent.signal("TERM");
    });
    let status = agent
        .wait_exit(Duration::from_secs(15))
        .expect("exit after SIGTERM");
    assert!(status.success(), "{status:?}");
    let answered: BTreeSet<String> = answered.into_inner().unwrap().into_iter().collect();
    assert!(
        files(&env.channel, ".open").is_empty(),
        "{:?}",
        entries(&env.channel)
    );
    let on_disk = ids(&all_records(&env.channel));
    let unique: BTreeSet<String> = on_disk.iter().cloned().collect();
    assert_eq!(unique.len(), on_disk.len(), "a record written twice");
    let missing: Vec<&String> = answered.difference(&unique).collect();
    assert!(missing.is_empty(), "answered but not exported: {missing:?}");
    // A request the agent finished while the client lost the connection would be on disk
    // but not answered; there is none in practice.
    let extra: Vec<&String> = unique.difference(&answered).collect();
    assert!(extra.is_empty(), "exported but never answered: {extra:?}");
    eprintln!(
        "sigterm burst: {} attempted, {} answered and on disk",
        attempted.load(Ordering::Acquire),
        answered.len()
    );
}

#[test]
fn sigterm_drains_a_queue_held_by_a_slow_publisher() {
    let env = Env::new();
    let gate = Gate::new(&env.free);
    let mut agent = env.start(&["--export-free-space-file", env.free.to_str().unwrap()]);
    let client = plain_client();
    let uids: Vec<String> = (0..200).map(|i| format!("drain-{i:03}")).collect();
    for uid in &uids {
        send_denied(&client, &agent, &violation(uid, "prod"));
    }
    wait_publisher_blocked(&agent);
    assert_eq!(counts(&agent).queue_messages, 200);
    agent.signal("TERM");
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        agent.wait_exit(Duration::from_millis(50)).is_none(),
        "exited before draining"
    );
    // Released within the 5 s drain: everything is written.
    gate.open(|| files(&env.channel, ".log").len() == 1);
    let status = agent.wait_exit(Duration::from_secs(10)).expect("exit");
    assert!(status.success(), "{status:?}");
    assert!(files(&env.channel, ".open").is_empty());
    assert_eq!(ids(&all_records(&env.channel)), uids);
    assert!(
        !agent
            .logs()
            .iter()
            .any(|l| l.contains("export drain did not finish")),
        "{:#?}",
        agent.logs()
    );
}

#[test]
fn sigterm_drops_what_the_drain_cannot_write_in_5_seconds() {
    let env = Env::new();
    let _gate = Gate::new(&env.free);
    let mut agent = env.start(&["--export-free-space-file", env.free.to_str().unwrap()]);
    let client = plain_client();
    for i in 0..200 {
        send_denied(&client, &agent, &violation(&format!("late-{i:03}"), "prod"));
    }
    wait_publisher_blocked(&agent);
    assert_eq!(counts(&agent).queue_messages, 200);
    let signalled = Instant::now();
    agent.signal("TERM");
    // Never released: the drain gives up after 5 s and the agent exits 0 within the
    // shutdown timeout (10 s).
    let status = agent.wait_exit(Duration::from_secs(12)).expect("exit");
    let took = signalled.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(took >= Duration::from_secs(5), "gave up after {took:?}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    // Nothing reached the disk; the drop is reported with the number of records lost.
    assert!(
        files(&env.channel, "").is_empty(),
        "{:?}",
        entries(&env.channel)
    );
    let logs = agent.logs();
    let gave_up: Vec<Value> = logs
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.contains("export drain did not finish"))
        })
        .collect();
    assert_eq!(gave_up.len(), 1, "{logs:#?}");
    assert_eq!(gave_up[0]["queued"], 200, "{:#}", gave_up[0]);
    assert!(
        logs.iter()
            .any(|l| l.contains("\"class\":\"shutdown\"") && l.contains("record dropped")),
        "{logs:#?}"
    );
}

// ---------------------------------------------------------------------------------------------
// 10. Command line.

/// Runs the agent expecting it to exit on its own; returns (success, stderr).
fn run_to_exit(args: &[&str]) -> (bool, String) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_drift-sentinel"))
        .env_clear()
        .args(args)
        .args(["--address", "127.0.0.1:0", "--admin-address", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(_status) = child.try_wait().unwrap() {
            let output = child.wait_with_output().unwrap();
            return (
                output.status.success(),
                String::from_utf8_lossy(&output.stderr).into_owned(),
            );
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let output = child.wait_with_output().unwrap();
            panic!(
                "the agent did not exit: {args:?}\n{}",
                String::from_utf8_lossy(&output.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn offline_connection_errors_stop_the_agent_with_a_clear_message() {
    let env = Env::new();
    let rules = env.rules.to_str().unwrap();
    let export = "--enable-admission-violation-export";

    // Not a Connection.
    let not_connection = env.root().join("configmap.yaml");
    fs::write(
        &not_connection,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: audit-connection}\n",
    )
    .unwrap();
    let path = not_connection.to_str().unwrap();
    let (ok, stderr) = run_to_exit(&["--rules", rules, export, "--connection", path]);
    assert!(!ok);
    assert!(stderr.contains(path), "{stderr}");
    assert!(stderr.contains("Connection"), "{stderr}");

    // Not YAML, and missing.
    let garbage = env.root().join("garbage.yaml");
    fs::write(&garbage, "kind: [unclosed\n").unwrap();
    let (ok, stderr) = run_to_exit(&[
        "--rules",
        rules,
        export,
        "--connection",
        garbage.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(stderr.contains(garbage.to_str().unwrap()), "{stderr}");
    let missing = env.root().join("missing.yaml");
    let (ok, stderr) = run_to_exit(&[
        "--rules",
        rules,
        export,
        "--connection",
        missing.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(stderr.contains(missing.to_str().unwrap()), "{stderr}");

    // A Connection of another name than --audit-connection.
    let (ok, stderr) = run_to_exit(&[
        "--rules",
        rules,
        export,
        "--connection",
        env.connection.to_str().unwrap(),
        "--audit-connection",
        "other",
    ]);
    assert!(!ok);
    assert!(stderr.contains("--audit-connection"), "{stderr}");

    // Export without --connection and without a cluster, offline or with the built-in rule.
    for args in [vec!["--rules", rules, export], vec![export]] {
        let (ok, stderr) = run_to_exit(&args);
        assert!(!ok, "{args:?}");
        assert!(stderr.contains("--connection"), "{args:?}: {stderr}");
    }
    assert!(!env.topics.exists());
}

// ---------------------------------------------------------------------------------------------
// Completing segments when it first fails, and retention at shutdown (both were bugs).

/// A segment whose completion fails (the rename to `.log` is refused) is completed once the
/// directory is writable again — not left `.open` for the life of the process, where its
/// records, counted as published, would never reach a reader.
#[test]
fn a_segment_whose_rename_failed_is_completed_later() {
    let env = Env::new();
    let mut agent = env.start_with_clock(&[]);
    let client = plain_client();
    send_denied(&client, &agent, &violation("rn-1", "prod"));
    wait_published(&agent, 1);
    {
        let _guard = ReadOnly::new(&env.channel);
        env.set_clock(61);
        agent.wait_for_status("the failed completion in the status", |s| {
            webhook_publish_status(s)["active"] == false
        });
    }
    send_denied(&client, &agent, &violation("rn-2", "prod"));
    wait_published(&agent, 2);
    env.set_clock(200);
    let orphan = || {
        files(&env.channel, ".open")
            .into_iter()
            .filter(|p| p.to_string_lossy().contains("20300101T000000"))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while orphan() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop(&mut agent);
    assert!(
        files(&env.channel, ".open").is_empty(),
        "a live writer left an .open segment behind: {:?}",
        entries(&env.channel)
    );
    assert_eq!(ids(&all_records(&env.channel)), ["rn-1", "rn-2"]);
}

/// Shutdown completes the open segment and then enforces retention, so no 21st completed
/// segment stays on disk until the next start.
#[test]
fn graceful_shutdown_leaves_at_most_20_completed_segments() {
    let env = Env::new();
    let mut agent = env.start_with_clock(&[]);
    let client = plain_client();
    for i in 0..45u64 {
        env.set_clock(i * 61);
        send_denied(&client, &agent, &violation(&format!("sd-{i:03}"), "prod"));
        wait_published(&agent, i + 1);
    }
    // One more at the same time: whatever the grouping, a segment is open now.
    send_denied(&client, &agent, &violation("sd-last", "prod"));
    wait_published(&agent, 46);
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(files(&env.channel, ".log").len(), RETAINED_SEGMENTS);
    assert_eq!(files(&env.channel, ".open").len(), 1);
    stop(&mut agent);
    let logs = files(&env.channel, ".log").len();
    assert!(
        logs <= RETAINED_SEGMENTS,
        "{logs} completed segments after shutdown"
    );
}

/// `/violations?follow=true` streams records written after it began, also after the
/// connection sat without a byte from the client for longer than `--idle-timeout` (the admin
/// listener carries long-lived streams); `/violations` without follow lists what is on disk.
#[test]
fn the_violations_stream_follows_new_records_past_the_idle_timeout() {
    use std::io::{BufRead, BufReader};
    let env = Env::new();
    let agent = env.start(&["--idle-timeout", "1s"]);
    let client = plain_client();
    send_denied(&client, &agent, &violation("vs-1", "prod"));
    wait_published(&agent, 1);
    let listed = client
        .get(format!("{}/violations", agent.admin))
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert_eq!(
        ids(&listed
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect::<Vec<Value>>()),
        ["vs-1"]
    );
    let streaming = reqwest::blocking::Client::builder()
        .timeout(None)
        .build()
        .unwrap();
    let response = streaming
        .get(format!("{}/violations?follow=true", agent.admin))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(response).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let first: Value =
        serde_json::from_str(&rx.recv_timeout(Duration::from_secs(5)).unwrap()).unwrap();
    assert_eq!(first["id"], "vs-1");
    std::thread::sleep(Duration::from_millis(2500)); // well past the idle timeout
    send_denied(&client, &agent, &violation("vs-2", "prod"));
    let next = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the follow stream delivers a record written 2.5 s after it went quiet");
    let next: Value = serde_json::from_str(&next).unwrap();
    assert_eq!(next["id"], "vs-2");
}

/// The demonstration reader prints every record of the completed admission segments and
/// deletes them, never touching an audit run's file.
#[test]
fn the_demonstration_reader_prints_and_removes_completed_admission_segments() {
    let env = Env::new();
    let mut agent = env.start(&[]);
    let client = plain_client();
    for i in 0..3 {
        send_denied(&client, &agent, &violation(&format!("rd-{i}"), "prod"));
    }
    wait_published(&agent, 3);
    stop(&mut agent);
    let audit = env.channel.join("2026-12-02T10:00:00Z.log");
    fs::write(
        &audit,
        "{\"id\":\"2026-12-02T10:00:00Z\",\"message\":\"audit is started\"}\n",
    )
    .unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_drift-sentinel"))
        .args(["reader", "--once", "--path"])
        .arg(&env.channel)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter(|l| l.contains("violation_admission"))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(ids(&printed), ["rd-0", "rd-1", "rd-2"]);
    assert!(
        files(&env.channel, ".log").iter().all(|f| f == &audit),
        "only the audit file stays"
    );
    assert!(audit.exists());
}
