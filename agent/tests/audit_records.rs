//! The agent's cluster audit when the webhook's records are more than it reads (reference §8
//! "Who and why": more than 50,000 records in one read is not read at all, with the reason): the
//! API server double (testkit) serves the drifted Deployments of the real-server dump
//! (`tests/fixtures/audit/deployments.yaml`) and 50,001 Events labelled as records — a count a
//! real API server keeps only after minutes of writes, which the double holds at once. The audit
//! then names no user: each drifted field's user is unknown because the records could not be
//! read, and the who line says why (too many). A reader that kept what it read up to the bound
//! gives another sentence ("no record of this edit …": checked by disabling the bound once).
//! One `--audit-once` run cannot call an edit unseen in any case (it reads the records once), so
//! the audit also runs continuously over an edit made after its first read: with 50,000
//! records (read in 100 pages, the double pages as a real server does) a run 30 s after the
//! edit calls it unseen; with 50,001 no run does, and each says why.

use std::ffi::OsString;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use drift_api::events::{MAX_RECORDS, RECORD_LABEL, RECORD_VERSION};
use drift_testkit::agent::Agent;
use drift_testkit::double::Double;
use drift_testkit::wait_for;
use serde_json::json;

#[test]
fn more_records_than_the_bound_are_not_read_and_no_edit_is_called_unseen() {
    let fixtures =
        std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/audit"));
    let double = Double::builder().start();
    let api = double.api();
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}));
    let dump = std::fs::read_to_string(fixtures.join("deployments.yaml")).unwrap();
    for document in drift_engine::manifests::parse_documents(&dump, "deployments.yaml").unwrap() {
        api.apply(document);
    }
    // One more than the bound: a read that stopped at the bound would leave a page unread.
    for n in 0..=MAX_RECORDS {
        api.apply(json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": format!("web.{n:x}"), "namespace": "shop",
                "labels": {RECORD_LABEL: format!("v{RECORD_VERSION}")}},
            "reportingController": drift_api::events::WEBHOOK_CONTROLLER,
            "regarding": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "shop",
                "name": "web", "uid": format!("u-{n}")},
        }));
    }

    let output = Command::new(env!("CARGO_BIN_EXE_drift-sentinel"))
        .args(["audit", "--once", "--audit-reports", "none"])
        .arg("--rules")
        .arg(fixtures.join("rules"))
        .arg("--kubeconfig")
        .arg(double.kubeconfig())
        .output()
        .expect("run drift-sentinel audit");
    let printed = String::from_utf8_lossy(&output.stdout);
    let log = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{printed}{log}");
    let who: Vec<&str> = printed
        .lines()
        .filter(|l| l.trim_start().starts_with("who: "))
        .collect();
    assert!(!who.is_empty(), "{printed}{log}");
    for line in &who {
        assert!(
            line.contains(&format!(
                "user unknown: the webhook's records of edits could not be read: more than {MAX_RECORDS} of the webhook's records"
            )),
            "{line}\nin\n{printed}"
        );
    }
    assert!(!printed.contains("did not see this edit"), "{printed}");
    assert!(
        log.contains(&format!(
            "more than {MAX_RECORDS} of the webhook's records of edits"
        )),
        "{log}"
    );
}

/// A Deployment of `shop` declared with 2 replicas (its `kubectl apply` baseline) and scaled to
/// 5 by `kubectl patch` at `time` (the managedFields entry that owns `spec.replicas`).
fn patched_deployment(time: &str) -> serde_json::Value {
    let declared = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"annotations":{},"name":"patched","namespace":"shop"},"spec":{"replicas":2,"selector":{"matchLabels":{"app":"patched"}},"template":{"metadata":{"labels":{"app":"patched"}},"spec":{"containers":[{"image":"registry.example/patched:1.0","name":"app"}]}}}}"#;
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "patched", "namespace": "shop",
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": declared},
            "managedFields": [
                {"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "apps/v1",
                 "time": "2026-12-01T00:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}},
                              "f:spec": {"f:selector": {}, "f:template": {}}}},
                {"manager": "kubectl-patch", "operation": "Update", "apiVersion": "apps/v1",
                 "time": time, "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}
            ]},
        "spec": {"replicas": 5, "selector": {"matchLabels": {"app": "patched"}},
            "template": {"metadata": {"labels": {"app": "patched"}},
                "spec": {"containers": [{"image": "registry.example/patched:1.0", "name": "app"}]}}}
    })
}

/// What a continuous audit (`--audit-interval 2s`) said of the patched Deployment's
/// `spec.replicas` with `records` of the webhook's records served (none of them of that edit):
/// the notes of its `DriftDetected` Events once a run that read the records 30 s after the edit
/// has ended, the list requests of records that continued a page, the audit's log, its
/// `/status` and its metrics.
///
/// The edit is timed after the audit's first read of the records (its managedFields time is
/// taken from the test's clock once the double has served that read), so that a run 30 s later
/// may call it unseen: the one wait of the test is that grace (reference §8 "Who and why").
fn audit_continuously(records: usize) -> Continuous {
    let fixtures =
        std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/audit"));
    let double = Double::builder().start();
    let api = double.api();
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}));
    for n in 0..records {
        // The first few carry a record of an edit of another object, unsigned (forged): read,
        // never verified.
        let annotations = if n < FORGED {
            json!({drift_api::events::EDITS_ANNOTATION: json!({
                "v": RECORD_VERSION, "uid": format!("u-{n}"), "user": "mallory",
                "why": {"kind": "warn-mode"}, "rule": "drift-system/workloads", "edits": []
            }).to_string()})
        } else {
            json!({})
        };
        api.apply(json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": format!("other.{n:x}"), "namespace": "shop",
                "labels": {RECORD_LABEL: format!("v{RECORD_VERSION}")},
                "annotations": annotations},
            "reportingController": drift_api::events::WEBHOOK_CONTROLLER,
            "regarding": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "shop",
                "name": "other", "uid": format!("u-{n}")},
        }));
    }
    let key = double.dir().join("record-key");
    std::fs::write(&key, drift_testkit::random_seed()).unwrap();
    let agent = Agent::audit(&double.dir().join("audit"))
        .without_export()
        .rules(fixtures.join("rules"))
        .args(["--audit-interval", "2s", "--audit-reports", "none"])
        .args([
            OsString::from("--kubeconfig"),
            double.kubeconfig().into(),
            "--record-signing-key".into(),
            key.into(),
        ])
        .start();
    let record_reads = |continued: bool| {
        api.requests()
            .iter()
            .filter(|r| r.contains("edit-record") && r.contains("continue=") == continued)
            .count()
    };
    let first_read = wait_for(Duration::from_secs(60), || {
        (record_reads(false) > 0).then_some(())
    });
    assert!(
        first_read.is_some(),
        "no read of records:\n{}",
        agent.logs()
    );
    // After the first read (whole seconds, as managedFields times are written).
    let edited = UNIX_EPOCH
        + Duration::from_secs(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_secs()
                + 1,
        );
    let time = humantime::format_rfc3339_seconds(edited).to_string();
    api.apply(patched_deployment(&time));
    // A read that starts once the edit is more than 30 s old, and the run after it.
    let grace = edited + Duration::from_secs(31);
    while SystemTime::now() < grace {
        std::thread::sleep(Duration::from_millis(500));
    }
    let reads_before = record_reads(false);
    let later_run = wait_for(Duration::from_secs(90), || {
        (record_reads(false) >= reads_before + 2).then_some(())
    });
    assert!(later_run.is_some(), "no later runs:\n{}", agent.logs());
    // The Events of the runs are written in the background: until one was observed by a run
    // that read the records after the grace.
    let drift_detected = || -> Vec<serde_json::Value> {
        api.list("events.k8s.io/v1", "Event")
            .into_iter()
            .filter(|e| e["reason"] == "DriftDetected" && e["regarding"]["name"] == "patched")
            .collect()
    };
    let observed = |event: &serde_json::Value| {
        event
            .pointer("/series/lastObservedTime")
            .or(event.get("eventTime"))
            .and_then(serde_json::Value::as_str)
            .and_then(|t| humantime::parse_rfc3339(t).ok())
    };
    let mut seen = Vec::new();
    for _ in 0..60 {
        seen = drift_detected();
        if seen
            .iter()
            .any(|e| observed(e).is_some_and(|at| at > grace))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        seen.iter()
            .any(|e| observed(e).is_some_and(|at| at > grace)),
        "no DriftDetected Event of a run after the grace: {seen:#?}\n{}",
        agent.logs()
    );
    let seen = seen
        .iter()
        .filter_map(|e| e["note"].as_str().map(str::to_owned))
        .collect();
    let client = drift_testkit::client();
    Continuous {
        notes: seen,
        continued: record_reads(true),
        status: client
            .get(agent.url("/status"))
            .send()
            .and_then(|r| r.json())
            .unwrap_or_default(),
        metrics: client
            .get(format!("http://127.0.0.1:{}/metrics", agent.port()))
            .send()
            .and_then(|r| r.text())
            .unwrap_or_default(),
        log: agent.logs(),
    }
}

/// The served records that carry a record (unsigned) of an edit: the rest are Events labelled
/// as records that hold none.
const FORGED: usize = 3;

/// What [`audit_continuously`] saw.
struct Continuous {
    notes: Vec<String>,
    continued: usize,
    status: serde_json::Value,
    metrics: String,
    log: String,
}

#[test]
fn a_continuous_audit_pages_the_records_and_calls_an_unrecorded_edit_unseen() {
    let Continuous {
        notes,
        continued,
        status,
        metrics,
        log,
    } = audit_continuously(MAX_RECORDS);
    // 100 pages of 500 a read: 99 continued.
    assert!(continued >= 99, "{continued} continued reads\n{log}");
    // The forged records: read, none verified, and said where an operator looks.
    let records = &status["audit"]["evidence"]["records"];
    assert_eq!(records["read"], FORGED, "{status:#}");
    assert_eq!(records["unverified"], FORGED, "{status:#}");
    assert_eq!(status["recordSigning"]["signed"], true, "{status:#}");
    assert!(
        metrics.contains(&format!(
            "drift_sentinel_audit_unverified_records{{source=\"record\"}} {FORGED}"
        )),
        "{metrics}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.contains("spec.replicas") && n.contains("the webhook did not see this edit")),
        "{notes:#?}\n{log}"
    );
}

#[test]
fn a_continuous_audit_over_the_bound_never_calls_an_edit_unseen_and_says_why() {
    let Continuous {
        notes,
        continued,
        status,
        log,
        ..
    } = audit_continuously(MAX_RECORDS + 1);
    let records = &status["audit"]["evidence"]["records"];
    assert!(
        records["error"]
            .as_str()
            .is_some_and(|e| e.starts_with(&format!("more than {MAX_RECORDS}"))),
        "{status:#}"
    );
    // The reader stops at the bound with more to read: 99 continued requests a read, whatever
    // the page it stopped on.
    assert!(continued >= 99, "{continued} continued reads\n{log}");
    assert!(!notes.is_empty(), "no DriftDetected Event\n{log}");
    for note in &notes {
        assert!(!note.contains("did not see"), "{note}");
        assert!(
            note.contains(&format!(
                "the webhook's records of edits could not be read: more than {MAX_RECORDS} of the webhook's records"
            )),
            "{note}"
        );
    }
}
