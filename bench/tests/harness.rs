//! Keeps the load benchmark honest without running load, through the binaries the script runs:
//! the fixtures `drift-bench-fixtures` writes are the reviews they claim to be (sizes, the one
//! change each, every big list item changed) and it lists them with their true sizes, the 20
//! rule files load through the agent's own file source with the matching rule last, the agent
//! decides the two load reviews as stated (image allowed, replicas denied) over the fixtures'
//! TLS, and both references (`drift-reference`, which parses, and `drift-floor`, which only
//! searches the bytes) answer `allowed` with the uid behind the agent's own body checks.

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use drift_bench::fixtures::{self, ARGS_ITEMS, LIST_ITEMS, MAX_BODY_BYTES, NAMESPACE, RULE_COUNT};
use serde_json::{Value, json};

/// The fixtures as `drift-bench-fixtures DIR` writes them, once for every test of this file,
/// and what it printed: each review's path and size. DIR is one fixed directory under Cargo's
/// target temporary directory, emptied first: a static is never dropped, so a temporary
/// directory would leave ~10 MB behind on every run.
struct Written {
    dir: PathBuf,
    listed: Vec<(PathBuf, u64)>,
}

fn written() -> &'static Written {
    static WRITTEN: OnceLock<Written> = OnceLock::new();
    WRITTEN.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("drift-bench-fixtures");
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                panic!("cannot empty {}: {e}", dir.display())
            }
            _ => {}
        }
        let output = Command::new(env!("CARGO_BIN_EXE_drift-bench-fixtures"))
            .arg(&dir)
            .output()
            .expect("drift-bench-fixtures runs");
        assert!(
            output.status.success(),
            "drift-bench-fixtures failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let listed = String::from_utf8(output.stdout)
            .expect("UTF-8 output")
            .lines()
            .map(|line| {
                let (path, size) = line.rsplit_once(' ').expect("PATH SIZE");
                (PathBuf::from(path), size.parse().expect("a size in bytes"))
            })
            .collect();
        Written { dir, listed }
    })
}

fn fixture_dir() -> &'static Path {
    &written().dir
}

fn read_review(name: &str) -> (usize, Value) {
    let bytes = std::fs::read(fixture_dir().join(name)).expect("review file");
    let review: Value = serde_json::from_slice(&bytes).expect("review is JSON");
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1", "{name}");
    assert_eq!(review["kind"], "AdmissionReview", "{name}");
    let request = &review["request"];
    assert_eq!(request["operation"], "UPDATE", "{name}");
    assert_eq!(request["namespace"], NAMESPACE, "{name}");
    assert_eq!(
        request["kind"],
        json!({"group": "apps", "version": "v1", "kind": "Deployment"})
    );
    assert!(
        request["uid"].as_str().is_some_and(|u| !u.is_empty()),
        "{name}"
    );
    assert!(
        request["object"].is_object() && request["oldObject"].is_object(),
        "{name}"
    );
    (bytes.len(), review)
}

/// `new` with `edit` applied to a copy of `old` is `new`: `edit` is the whole change.
fn only_change(review: &Value, edit: impl FnOnce(&mut Value)) {
    let mut old = review["request"]["oldObject"].clone();
    assert_ne!(
        old, review["request"]["object"],
        "the review changes something"
    );
    edit(&mut old);
    assert_eq!(old, review["request"]["object"]);
}

#[test]
fn the_fixtures_binary_lists_each_review_with_its_size_and_refuses_a_wrong_command_line() {
    let Written { dir, listed } = written();
    let names: Vec<_> = listed
        .iter()
        .map(|(path, _)| path.strip_prefix(dir).expect("in DIR").to_owned())
        .collect();
    assert_eq!(names, fixtures::REVIEWS.map(PathBuf::from));
    for (path, size) in listed {
        assert_eq!(
            std::fs::metadata(path).unwrap().len(),
            *size,
            "{}",
            path.display()
        );
    }
    for file in ["ca.crt", "tls.crt", "tls.key"] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        assert!(text.starts_with("-----BEGIN "), "{file} is not PEM");
    }
    for args in [&[][..], &["a", "b"][..]] {
        let output = Command::new(env!("CARGO_BIN_EXE_drift-bench-fixtures"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&output.stderr).contains("usage: drift-bench-fixtures DIR")
        );
    }
}

#[test]
fn the_load_reviews_are_realistic_29_kb_deployments_with_one_change() {
    let (size, image) = read_review("image.json");
    assert!(
        (27_000..=31_000).contains(&size),
        "image.json is {size} bytes"
    );
    let object = serde_json::to_string(&image["request"]["object"])
        .unwrap()
        .len();
    assert!(
        (13_000..=15_000).contains(&object),
        "one object is {object} bytes"
    );
    only_change(&image, |old| {
        old["spec"]["template"]["spec"]["containers"][0]["image"] = json!(fixtures::NEW_IMAGES[0]);
    });

    let (size, replicas) = read_review("replicas.json");
    assert!(
        (27_000..=31_000).contains(&size),
        "replicas.json is {size} bytes"
    );
    only_change(&replicas, |old| {
        old["spec"]["replicas"] = json!(5);
        // `kubectl apply` changes the last-applied annotation with the field; the status
        // mirrors it.
        let annotation = "kubectl.kubernetes.io/last-applied-configuration";
        let applied = old["metadata"]["annotations"][annotation].as_str().unwrap();
        old["metadata"]["annotations"][annotation] =
            json!(applied.replace("\"replicas\":3", "\"replicas\":5"));
        for field in [
            "replicas",
            "updatedReplicas",
            "readyReplicas",
            "availableReplicas",
        ] {
            old["status"][field] = json!(5);
        }
    });
    assert_eq!(replicas["request"]["oldObject"]["spec"]["replicas"], 3);
    assert_eq!(replicas["request"]["object"]["spec"]["replicas"], 5);

    // The image edit as a client-side apply sends it: the annotation holds the manifest.
    let (size, apply) = read_review("apply.json");
    assert!(
        (52_000..=62_000).contains(&size),
        "apply.json is {size} bytes"
    );
    let annotation = "kubectl.kubernetes.io/last-applied-configuration";
    let applied = |object: &str| -> Value {
        let text = apply["request"][object]["metadata"]["annotations"][annotation]
            .as_str()
            .unwrap();
        serde_json::from_str(text).unwrap()
    };
    assert_eq!(
        applied("object")["spec"],
        apply["request"]["object"]["spec"]
    );
    only_change(&apply, |old| {
        old["spec"]["template"]["spec"]["containers"][0]["image"] = json!(fixtures::NEW_IMAGES[0]);
        let manifest = old["metadata"]["annotations"][annotation]
            .as_str()
            .unwrap()
            .replace(fixtures::IMAGES[0], fixtures::NEW_IMAGES[0]);
        old["metadata"]["annotations"][annotation] = json!(manifest);
    });
}

/// Takes the main container's `args` out of both objects and checks them: `count` items each,
/// every one changed, and nothing else in the objects differs. Takes the review by value so
/// that the 2,000,000-item lists are moved, never cloned.
fn take_big_lists(mut review: Value, count: usize) -> (Vec<Value>, Vec<Value>) {
    let mut take =
        |object: &str| match review["request"][object]["spec"]["template"]["spec"]["containers"][0]
            ["args"]
            .take()
        {
            Value::Array(items) => items,
            other => panic!("{object}'s args are not a list: {other}"),
        };
    let (old, new) = (take("oldObject"), take("object"));
    assert_eq!(old.len(), count);
    assert_eq!(new.len(), count);
    let unchanged = old.iter().zip(&new).filter(|(a, b)| a == b).count();
    assert_eq!(unchanged, 0, "every item changes");
    assert_eq!(
        review["request"]["oldObject"], review["request"]["object"],
        "only the args change"
    );
    (old, new)
}

#[test]
fn the_worst_cases_are_200k_changed_args_and_2m_changed_items_within_8_mib() {
    let (size, args) = read_review("args-200k.json");
    // 200,000 one-character strings ("a",) are 800 KB per object; the review holds two.
    assert!(
        (1_600_000..=1_700_000).contains(&size),
        "args-200k.json is {size} bytes"
    );
    let (old, new) = take_big_lists(args, ARGS_ITEMS);
    for item in old.iter().chain(&new) {
        assert!(item.as_str().is_some_and(|s| s.len() == 1), "{item}");
    }

    let (size, items) = read_review("items-2m.json");
    assert!(
        size <= MAX_BODY_BYTES,
        "items-2m.json is {size} bytes, over 8 MiB"
    );
    assert!(size >= 8_000_000, "items-2m.json is {size} bytes");
    let (old, new) = take_big_lists(items, LIST_ITEMS);
    for item in old.iter().chain(&new) {
        assert!(item.as_u64().is_some_and(|n| n < 10), "{item}");
    }
}

#[test]
fn the_rule_directory_loads_through_the_agent_with_the_matching_rule_last() {
    use drift_sentinel::rules_source::FileSource;
    let rules = fixture_dir().join("rules");
    let files = std::fs::read_dir(&rules).unwrap().count();
    assert_eq!(files, RULE_COUNT);
    let source = FileSource {
        rules: vec![rules],
        namespaces: Vec::new(),
        tier_policy: drift_engine::rule::TierPolicy::all_cluster(),
    };
    source.check().unwrap();
    let snapshot = source.build(&source.load(Duration::from_secs(2)));
    assert!(
        snapshot.source_errors.is_empty(),
        "{:?}",
        snapshot.source_errors
    );
    assert!(
        snapshot.rules.invalid().is_empty(),
        "{:?}",
        snapshot.rules.invalid()
    );
    let in_order = snapshot.rules.rules();
    assert_eq!(in_order.len(), RULE_COUNT);
    let (last, others) = in_order.split_last().unwrap();
    assert_eq!(last.id.to_string(), "drift-sentinel/production");
    assert!(last.matches_namespace(NAMESPACE) && last.matches_kind("apps", "Deployment"));
    for rule in others {
        assert!(rule.matches_kind("apps", "Deployment"), "{}", rule.id);
        assert!(
            !rule.matches_namespace(NAMESPACE),
            "{} would match first",
            rule.id
        );
    }
}

fn free_address() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], drift_testkit::free_port()))
}

fn client() -> reqwest::blocking::Client {
    let ca = std::fs::read(fixture_dir().join("ca.crt")).unwrap();
    reqwest::blocking::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

fn post(client: &reqwest::blocking::Client, url: &str, name: &str) -> Value {
    let body = std::fs::read(fixture_dir().join(name)).unwrap();
    let response = client
        .post(url)
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .unwrap_or_else(|e| panic!("POST {name} to {url}: {e}"));
    assert_eq!(response.status().as_u16(), 200, "{name} to {url}");
    response.json().expect("an AdmissionReview")
}

/// The reference binaries, and whether each reads the body as JSON (the floor does not).
const REFERENCES: [(&str, bool); 3] = [
    (env!("CARGO_BIN_EXE_drift-reference"), true),
    (env!("CARGO_BIN_EXE_drift-floor"), false),
    (env!("CARGO_BIN_EXE_drift-checked-floor"), true),
];

/// A running reference server, killed when dropped.
struct Reference {
    child: Child,
    address: SocketAddr,
}

impl Reference {
    /// Starts the binary `bin` and waits (at most 10 s) for its `listening on ADDRESS` line.
    fn start(bin: &str, args: &[String]) -> Self {
        let mut child = Command::new(bin)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("{bin} starts: {e}"));
        let stdout = child.stdout.take().unwrap();
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = sender.send(line);
        });
        let line = receiver.recv_timeout(Duration::from_secs(10));
        let mut reference = Self {
            child,
            address: "0.0.0.0:0".parse().unwrap(),
        };
        let line = line.unwrap_or_else(|_| panic!("{bin} printed nothing within 10 s"));
        reference.address = line
            .trim_end()
            .strip_prefix("listening on ")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("not `listening on ADDRESS`: {line:?}"));
        reference
    }
}

impl Drop for Reference {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_agent_decides_as_stated_and_the_references_answer_allowed_over_tls() {
    let dir = fixture_dir();
    let tls = |address: SocketAddr| {
        vec![
            "--address".to_owned(),
            address.to_string(),
            "--tls-cert-file".to_owned(),
            dir.join("tls.crt").display().to_string(),
            "--tls-key-file".to_owned(),
            dir.join("tls.key").display().to_string(),
        ]
    };
    let agent_address = free_address();
    let mut agent_args = tls(agent_address);
    agent_args.extend([
        "--rules".to_owned(),
        dir.join("rules").display().to_string(),
        "--admin-address".to_owned(),
        free_address().to_string(),
        "--log-level".to_owned(),
        "ERROR".to_owned(),
    ]);
    let agent_args = drift_bench::parse_serve_args(agent_args.into_iter().map(Into::into)).unwrap();
    // The agent as its binary runs it; the thread ends with the test process.
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(drift_sentinel::serve::run(agent_args))
    });

    let client = client();
    let agent = format!("https://{agent_address}");
    let started = Instant::now();
    while client
        .get(format!("{agent}/readyz"))
        .send()
        .map_or(true, |r| !r.status().is_success())
    {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the agent never became ready"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let image = post(&client, &format!("{agent}/validate"), "image.json");
    let response = &image["response"];
    assert_eq!(response["uid"], "bench-image");
    assert_eq!(response["allowed"], true, "{image:#}");
    assert_eq!(
        response["auditAnnotations"]["rule"],
        "drift-sentinel/production"
    );
    let apply = post(&client, &format!("{agent}/validate"), "apply.json");
    assert_eq!(apply["response"]["uid"], "bench-apply");
    assert_eq!(apply["response"]["allowed"], true, "{apply:#}");
    let replicas = post(&client, &format!("{agent}/validate"), "replicas.json");
    let response = &replicas["response"];
    assert_eq!(response["uid"], "bench-replicas");
    assert_eq!(response["allowed"], false, "{replicas:#}");
    assert_eq!(response["status"]["code"], 403);
    assert_eq!(
        response["auditAnnotations"]["denied-paths"],
        "spec.replicas"
    );

    for (bin, reads_json) in REFERENCES {
        references_answer_allowed_behind_the_agents_body_checks(&client, bin, reads_json, &tls);
    }
}

/// A reference as the script runs it (its binary, on a port of its own choosing) answers both
/// load reviews `allowed` with their uid, and refuses what the agent's body checks refuse: not
/// JSON is 415, over 8 MiB is 413 (declared by Content-Length and answered before the body is
/// sent, or streamed in chunks without a length). A body with a uid that is not JSON is 400 from
/// a reference that reads JSON (`reads_json`), as from the agent, and allowed by the floor. The
/// 413s over plain HTTP on raw sockets: a client still writing the body when the answer comes
/// would see a broken pipe instead of the status.
fn references_answer_allowed_behind_the_agents_body_checks(
    client: &reqwest::blocking::Client,
    bin: &str,
    reads_json: bool,
    tls: &dyn Fn(SocketAddr) -> Vec<String>,
) {
    let reference = Reference::start(bin, &tls("127.0.0.1:0".parse().unwrap()));
    let reference = format!("https://{}/validate", reference.address);
    for (name, uid) in [
        ("image.json", "bench-image"),
        ("replicas.json", "bench-replicas"),
    ] {
        let answer = post(client, &reference, name);
        assert_eq!(
            answer,
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                   "response": {"uid": uid, "allowed": true}}),
            "{bin}"
        );
    }
    let status = client.post(&reference).body("{}").send().unwrap().status();
    assert_eq!(status.as_u16(), 415, "{bin}");
    let truncated = client
        .post(&reference)
        .header("Content-Type", "application/json")
        .body(r#"{"request":{"uid":"cut-short","#)
        .send()
        .unwrap()
        .status();
    assert_eq!(
        truncated.as_u16(),
        if reads_json { 400 } else { 200 },
        "{bin}"
    );
    let plain = Reference::start(bin, &["--address".to_owned(), "127.0.0.1:0".to_owned()]);
    let declared = raw_exchange(
        plain.address,
        &format!(
            "POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            MAX_BODY_BYTES + 1
        ),
        &[],
    );
    assert!(declared.starts_with("HTTP/1.1 413"), "{bin}: {declared}");
    let chunk = format!("{:x}\r\n{}\r\n", 1024 * 1024, " ".repeat(1024 * 1024));
    let chunks = vec![chunk.as_bytes(); MAX_BODY_BYTES / (1024 * 1024) + 1];
    let streamed = raw_exchange(
        plain.address,
        "POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        &chunks,
    );
    assert!(streamed.starts_with("HTTP/1.1 413"), "{bin}: {streamed}");
}

/// Writes `head` then `pieces` (stopping at the first write the server refuses) and reads the
/// answer until the server closes the connection.
fn raw_exchange(address: SocketAddr, head: &str, pieces: &[&[u8]]) -> String {
    drift_testkit::raw_exchange(address, head, pieces)
}
