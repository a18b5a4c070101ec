//! The agent's cluster audit when the webhook's records are more than it reads (reference §8
//! "Who and why": more than 50,000 records in one read is not read at all, with the reason): the
//! API server double (testkit) serves the drifted Deployments of the real-server dump
//! (`tests/fixtures/audit/deployments.yaml`) and 50,001 Events labelled as records — a count a
//! real API server keeps only after minutes of writes, which the double holds at once. The audit
//! then names no user: each drifted field's user is unknown because the records could not be
//! read, and its log says why (too many). A reader that kept what it read up to the bound gives
//! another sentence ("no record of this edit …": checked by disabling the bound once). One
//! `--audit-once` run cannot call an edit unseen in any case (it reads the records once); that
//! it does not is asserted, but pinned by the reader's unit tests (`drift_api::events`).

use std::process::Command;

use drift_api::events::{MAX_RECORDS, RECORD_LABEL, RECORD_VERSION};
use drift_testkit::double::Double;
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
            line.contains("user unknown: the webhook's records of edits could not be read"),
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
