//! Bypasses in `drift-sentinel audit`, offline through the real binary (reference §8 step 1): the
//! `image` Deployment of the real-server dump (`tests/fixtures/audit/deployments.yaml`, its
//! image changed by `kubectl set image`) copied under four bypass annotations — `true`, an end
//! four hours ahead, one an hour past, and a value that is no time. The honoured ones are
//! skipped and listed; the expired and the invalid one no longer hide the drift made under
//! them; every one is a `bypass` record of the run's export, with who set it and since when.

#[path = "support/mod.rs"]
mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

use drift_engine::time::format_rfc3339_seconds;
use drift_testkit::objects::with_bypass as bypassed;
use serde_json::json;

fn fixtures() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/audit"))
}

#[test]
fn bypasses_are_listed_and_expired_ones_audited() {
    let dump = std::fs::read_to_string(fixtures().join("deployments.yaml")).unwrap();
    let documents = drift_engine::manifests::parse_documents(&dump, "deployments.yaml").unwrap();
    let image = documents
        .iter()
        .find(|d| d["metadata"]["name"] == "image")
        .expect("the dump's image Deployment");
    let now = SystemTime::now();
    let hour = Duration::from_secs(3600);
    let set_at = format_rfc3339_seconds(now - hour);
    let ahead = format_rfc3339_seconds(now + 4 * hour);
    let past = format_rfc3339_seconds(now - hour);
    let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
        bypassed(image, "forever", "true", &set_at),
        bypassed(image, "ahead", &ahead, &set_at),
        bypassed(image, "expired", &past, &set_at),
        bypassed(image, "garbled", "next tuesday", &set_at),
    ]});
    let dir = tempfile::tempdir().unwrap();
    let objects_file = dir.path().join("objects.json");
    std::fs::write(&objects_file, objects.to_string()).unwrap();
    let (connection, topics) = support::connection_file(dir.path(), "");
    let output = Command::new(env!("CARGO_BIN_EXE_drift-sentinel"))
        .args(["audit", "--once", "--rules"])
        .arg(fixtures().join("rules"))
        .arg("--objects")
        .arg(&objects_file)
        .args(["--enable-violation-export", "--connection"])
        .arg(&connection)
        .output()
        .expect("run drift-sentinel audit");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The expired and the garbled bypass hide nothing: their drift makes the run exit 1.
    assert_eq!(output.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stdout.contains(": 4 objects: 2 drifted, 0 clean, 0 no_baseline, 2 skipped; bypass annotations: 1 without an end, 1 active, 1 expired, 1 not honoured"),
        "{stdout}"
    );
    let rule = "(rule drift-system/workloads)";
    for line in [
        format!(
            "bypass apps/v1 Deployment shop/forever {rule}: bypass without an end (set by kubectl-annotate at {set_at})"
        ),
        format!(
            "bypass apps/v1 Deployment shop/ahead {rule}: bypass until {ahead} (set by kubectl-annotate at {set_at})"
        ),
        format!(
            "bypass apps/v1 Deployment shop/expired {rule}: no bypass: its end {past} has passed (set by kubectl-annotate at {set_at})"
        ),
        format!(
            "bypass apps/v1 Deployment shop/garbled {rule}: no bypass: \"next tuesday\" is neither"
        ),
        "drifted apps/v1 Deployment shop/expired (rule drift-system/workloads, enforce)".to_owned(),
        "drifted apps/v1 Deployment shop/garbled (rule drift-system/workloads, enforce)".to_owned(),
    ] {
        assert!(stdout.contains(&line), "{line}\nin\n{stdout}");
    }
    assert!(
        !stdout.contains("drifted apps/v1 Deployment shop/forever"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("drifted apps/v1 Deployment shop/ahead"),
        "{stdout}"
    );

    // The export: one bypass record per annotated object, and the two drifts.
    let records = support::completed_run_records(&topics.join("audit-channel"));
    let of = |event: &str, name: &str| {
        records
            .iter()
            .find(|r| r["eventType"] == event && r["resourceName"] == name)
            .unwrap_or_else(|| panic!("no {event} record of {name}: {records:?}"))
    };
    assert_eq!(records.len(), 6, "{records:?}");
    let ahead_record = of("bypass", "ahead");
    assert_eq!(ahead_record["bypass"]["endState"], "active");
    assert_eq!(ahead_record["bypass"]["end"], ahead.as_str());
    assert_eq!(ahead_record["bypass"]["setBy"], "kubectl-annotate");
    assert_eq!(ahead_record["bypass"]["since"], set_at.as_str());
    assert_eq!(ahead_record["enforcementAction"], "bypass");
    assert_eq!(of("bypass", "forever")["bypass"]["endState"], "none");
    assert!(of("bypass", "forever")["bypass"].get("end").is_none());
    assert_eq!(of("bypass", "expired")["bypass"]["endState"], "expired");
    assert_eq!(of("bypass", "expired")["enforcementAction"], "none");
    assert_eq!(
        of("bypass", "garbled")["bypass"]["endState"],
        "not-honoured"
    );
    assert_eq!(of("bypass", "garbled")["bypass"]["value"], "next tuesday");
    let drift = of("violation_audited", "expired");
    assert_eq!(
        drift["details"]["deniedPaths"],
        json!(["spec.template.spec.containers[0].image"])
    );
    assert!(
        drift["message"]
            .as_str()
            .unwrap()
            .contains("annotation drift-sentinel.k8s.io/bypass is no bypass: its end"),
        "{drift}"
    );
    of("violation_audited", "garbled");
}
