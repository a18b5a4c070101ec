//! reference §7 "Where files go", through the real binary: Connection paths resolve under
//! `--export-root` (relative and absolute alike), `..` is refused, a channel directory that is a
//! symbolic link is refused without touching its target, and an existing directory keeps its
//! mode.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use support::{Agent, plain_client, post, rule_config_map};

const RULE: &str =
    "mode: enforce\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\n";

/// An agent whose export root is `<dir>/root`; `path` is relative to that root.
fn start(dir: &Path, path: &str) -> Agent {
    let path = dir.join("root").join(path.trim_start_matches('/'));
    start_raw(dir, path.to_str().unwrap())
}

fn connection_errors(agent: &Agent) -> Vec<String> {
    agent.status()["export"]["byPod"]["connectionErrors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["message"].as_str().map(str::to_owned))
        .collect()
}

fn violate(agent: &Agent) {
    let deployment = |replicas: i64| {
        serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "prod"}, "spec": {"replicas": replicas}})
    };
    let review =
        drift_engine::review::update_review(deployment(1), deployment(2), "alice", "u-1").unwrap();
    let (code, body): (u16, Value) = post(
        &plain_client(),
        &format!("{}/validate", agent.base),
        &review,
    );
    assert_eq!(code, 200);
    assert_eq!(body["response"]["allowed"], false);
}

fn files_under(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() && !path.is_symlink() {
            found.extend(files_under(&path));
        } else {
            found.push(path.display().to_string());
        }
    }
    found
}

/// An agent with `path` as written (read from `/`), its export root `<dir>/root`.
fn start_raw(dir: &Path, path: &str) -> Agent {
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    let rules = dir.join("rules.yaml");
    std::fs::write(&rules, rule_config_map("ops", "strict", RULE)).unwrap();
    let connection = dir.join("connection.yaml");
    std::fs::write(
        &connection,
        format!(
            "apiVersion: connection.drift-sentinel.io/v1alpha1\nkind: Connection\nmetadata: {{name: audit-connection}}\nspec: {{driver: disk, config: {{path: {path:?}}}}}\n"
        ),
    )
    .unwrap();
    Agent::start(
        &[
            "--rules",
            rules.to_str().unwrap(),
            "--enable-admission-violation-export",
            "--connection",
            connection.to_str().unwrap(),
            "--export-root",
            root.to_str().unwrap(),
        ],
        false,
    )
}

#[test]
fn a_path_outside_the_export_root_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside");
    let agent = start_raw(dir.path(), outside.to_str().unwrap());
    let errors = connection_errors(&agent);
    assert!(
        errors.iter().any(|e| e.contains("outside the export root")),
        "{errors:?}"
    );
    violate(&agent);
    std::thread::sleep(Duration::from_millis(500));
    assert!(!outside.exists());
}

#[test]
fn relative_and_absolute_paths_name_the_same_place() {
    for relative in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let absolute = dir.path().join("root/tmp/violations/topics");
        let path = match relative {
            true => absolute
                .to_str()
                .unwrap()
                .trim_start_matches('/')
                .to_owned(),
            false => absolute.to_str().unwrap().to_owned(),
        };
        let agent = start_raw(dir.path(), &path);
        assert!(
            connection_errors(&agent).is_empty(),
            "{:?}",
            connection_errors(&agent)
        );
        violate(&agent);
        let channel = absolute.join("audit-channel");
        agent.wait_for_status("the record", |_| !files_under(&channel).is_empty());
        let mode = std::fs::metadata(&channel).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{path}");
    }
}

#[test]
fn a_parent_segment_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_raw(dir.path(), "topics/../../escape");
    let errors = connection_errors(&agent);
    assert!(
        errors.iter().any(|e| e.contains("\"..\" segment")),
        "{errors:?}"
    );
    violate(&agent);
    std::thread::sleep(Duration::from_millis(500));
    assert!(!dir.path().join("escape").exists());
    assert!(files_under(&dir.path().join("root")).is_empty());
}

#[test]
fn a_symbolic_link_is_refused_and_its_target_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("elsewhere");
    std::fs::create_dir(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(target.join("admission-1-x.deleting"), b"keep me").unwrap();
    let topics = dir.path().join("root/topics");
    std::fs::create_dir_all(&topics).unwrap();
    std::os::unix::fs::symlink(&target, topics.join("audit-channel")).unwrap();

    let agent = start(dir.path(), "topics");
    // The status carries the error's class; the log says why.
    let errors = connection_errors(&agent);
    assert!(
        errors.iter().any(|e| e.contains("is not writable")),
        "{errors:?}"
    );
    assert!(
        agent.logs().iter().any(|l| l.contains("symbolic link")),
        "{:#?}",
        agent.logs()
    );
    violate(&agent);
    std::thread::sleep(Duration::from_millis(500));
    let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o755, "the link's target keeps its mode");
    assert!(
        target.join("admission-1-x.deleting").exists(),
        "nothing deleted through the link"
    );
    assert_eq!(
        std::fs::read_dir(&target).unwrap().count(),
        1,
        "nothing written through the link"
    );
}

#[test]
fn an_existing_channel_directory_keeps_its_mode() {
    let dir = tempfile::tempdir().unwrap();
    let channel = dir.path().join("root/topics/audit-channel");
    std::fs::create_dir_all(&channel).unwrap();
    std::fs::set_permissions(&channel, std::fs::Permissions::from_mode(0o750)).unwrap();
    let agent = start(dir.path(), "topics");
    assert!(
        connection_errors(&agent).is_empty(),
        "{:?}",
        connection_errors(&agent)
    );
    violate(&agent);
    agent.wait_for_status("the record", |_| !files_under(&channel).is_empty());
    let mode = std::fs::metadata(&channel).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o750);
}
