//! Section 1: every violation becomes one complete record; responses do not change.

use crate::env::*;

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
    let example = crate::support::build_example_review(&["--uid", "example-1"]);

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
