//! Section 10: the command line (export flags, the reader, the violations stream).

use crate::env::*;

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
