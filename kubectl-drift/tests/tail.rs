//! `kubectl drift tail` for real: the plugin binary against a real `drift-sentinel` agent
//! (offline, rules from files, admission export to a temporary directory), fed with violating
//! reviews. `--no-tui` is read from a pipe; the terminal UI is run inside tmux and read with
//! `capture-pane`. In cluster mode, `tail` follows the agent pods of the API server double
//! through port-forwarding.
//!
//! Needs the agent binary next to the plugin's (`cargo build -p drift-sentinel`; `cargo test
//! --workspace` builds it) and `tmux` on PATH.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use drift_testkit::{client, free_port, wait_for};
use serde_json::Value;
use support::agents::{Cluster, NAMESPACE, strict_agent};
use support::{NoTui, plugin_bin};

const IMAGE_PATH: &str = "spec.template.spec.containers[0].image";

fn records(lines: &[String]) -> Vec<Value> {
    lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn ids(lines: &[String]) -> Vec<String> {
    records(lines)
        .iter()
        .map(|r| r["id"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn no_tui_prints_each_record_once_as_ndjson_filters_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let agent = strict_agent(dir.path()).start();
    let admin = agent.admin_url();
    let mut all = NoTui::start(dir.path(), &["--url", &admin]);
    let mut other = NoTui::start(dir.path(), &["--url", &admin, "--namespace", "other"]);
    let mut matching = NoTui::start(
        dir.path(),
        &[
            "--url",
            &admin,
            "-n",
            "prod-*",
            "--rule",
            "drift-sentinel/drift-sentinel-strict",
            "--source",
            "webhook",
        ],
    );
    let mut audit_only = NoTui::start(dir.path(), &["--url", &admin, "--source", "audit"]);

    agent.violate("tail-1");
    agent.violate("tail-2");

    let lines = all.wait_lines(2, Duration::from_secs(10)).to_vec();
    assert_eq!(
        ids(&lines),
        ["tail-1", "tail-2"],
        "stderr: {}\nagent: {}",
        all.stderr(),
        agent.logs()
    );
    for record in records(&lines) {
        assert_eq!(record["eventType"], "violation_admission");
        assert_eq!(record["resourceKind"], "Deployment");
        assert_eq!(record["resourceNamespace"], "prod-eu");
        assert_eq!(record["resourceName"], "checkout");
        assert_eq!(record["enforcementAction"], "deny");
        let denied = record["details"]["deniedPaths"].as_array().unwrap();
        assert!(denied.iter().any(|p| p == IMAGE_PATH), "{record}");
    }
    // As received: the very lines of the admin API.
    let direct = client()
        .get(format!("{admin}/violations"))
        .send()
        .and_then(|r| r.text())
        .unwrap();
    assert_eq!(direct.lines().collect::<Vec<_>>(), lines);

    let matched = matching.wait_lines(2, Duration::from_secs(10)).to_vec();
    assert_eq!(ids(&matched), ["tail-1", "tail-2"], "{}", matching.stderr());
    // The filtered ones had every chance to receive the records by now.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        other.wait_lines(1, Duration::ZERO).is_empty(),
        "--namespace other printed records"
    );
    assert!(
        audit_only.wait_lines(1, Duration::ZERO).is_empty(),
        "--source audit printed webhook records"
    );

    // The agent restarts (same ports, same export directory): the stream reconnects, resumes,
    // and prints only what is new.
    let (port, admin_port) = (agent.port(), agent.admin_port());
    assert!(agent.spool().is_dir());
    agent.stop();
    let reconnecting = wait_for(Duration::from_secs(10), || {
        all.stderr().contains("reconnecting").then_some(())
    });
    assert!(reconnecting.is_some(), "stderr: {}", all.stderr());
    let agent = strict_agent(dir.path()).ports(port, admin_port).start();
    agent.violate("tail-3");
    let lines = all.wait_lines(3, Duration::from_secs(15)).to_vec();
    assert_eq!(
        ids(&lines)[..],
        ["tail-1", "tail-2", "tail-3"],
        "{}",
        all.stderr()
    );
    std::thread::sleep(Duration::from_millis(700));
    let lines = all.wait_lines(4, Duration::ZERO).to_vec();
    assert_eq!(
        ids(&lines),
        ["tail-1", "tail-2", "tail-3"],
        "records repeated after the reconnection; stderr: {}",
        all.stderr()
    );
    assert!(all.stderr().contains("connected again"), "{}", all.stderr());
}

#[test]
fn without_url_or_cluster_it_says_to_use_url_and_exits_2() {
    // No cluster: a kubeconfig that does not exist, no in-cluster environment.
    let missing = std::env::temp_dir().join("kubectl-drift-no-such-kubeconfig");
    let output = Command::new(plugin_bin())
        .args(["tail", "--no-tui"])
        .env("KUBECONFIG", &missing)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--url"), "{stderr}");

    for (args, expected) in [
        (
            &["tail", "--url", "localhost:9090", "--no-tui"][..],
            "is not an http:// URL",
        ),
        (
            &[
                "tail",
                "--url",
                "http://127.0.0.1:9",
                "--since",
                "yesterday",
            ][..],
            "--since \"yesterday\" is neither a duration",
        ),
        // Not a terminal: the UI refuses and points at --no-tui.
        (&["tail", "--url", "http://127.0.0.1:9"][..], "--no-tui"),
    ] {
        let output = Command::new(plugin_bin())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

/// A tmux server of its own (`-L`), killed when dropped.
struct Tmux {
    socket: String,
}

static SOCKETS: AtomicUsize = AtomicUsize::new(0);

impl Tmux {
    fn new(width: u16, height: u16, command: &str) -> Tmux {
        let socket = format!(
            "kubectl-drift-tail-{}-{}",
            std::process::id(),
            SOCKETS.fetch_add(1, Ordering::SeqCst)
        );
        let tmux = Tmux { socket };
        let status = tmux
            .command()
            .args(["new-session", "-d", "-s", "tail", "-x"])
            .arg(width.to_string())
            .arg("-y")
            .arg(height.to_string())
            .arg(command)
            .status()
            .expect("tmux is needed for this test (apt-get install tmux)");
        assert!(status.success(), "tmux new-session failed");
        tmux
    }

    fn command(&self) -> Command {
        let mut command = Command::new("tmux");
        command.arg("-L").arg(&self.socket).env_remove("TMUX");
        command
    }

    fn screen(&self) -> String {
        let output = self
            .command()
            .args(["capture-pane", "-p", "-t", "tail"])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        let status = self
            .command()
            .args(["send-keys", "-t", "tail"])
            .args(keys)
            .status()
            .expect("tmux send-keys");
        assert!(status.success());
    }

    /// The screen once `check` holds on it (within 10 s), or a panic showing the last one.
    fn wait_screen(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        let found = wait_for(Duration::from_secs(10), || {
            last = self.screen();
            check(&last).then(|| last.clone())
        });
        found.unwrap_or_else(|| panic!("timed out waiting for {what}; screen:\n{last}"))
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self
            .command()
            .arg("kill-server")
            .stderr(Stdio::null())
            .status();
    }
}

/// Runs the plugin's UI in the pane; after it exits, prints its exit code and the terminal's
/// mode (`icanon` and `echo` without a `-`: raw mode was left); then the pane stays a while to
/// be read.
fn ui_in_tmux(dir: &Path, url: &str, width: u16, height: u16) -> Tmux {
    ui_in_tmux_with(dir, url, width, height, "")
}

/// [`ui_in_tmux`] with `env` (`env NAME=VALUE`) before the command.
fn ui_in_tmux_with(dir: &Path, url: &str, width: u16, height: u16, env: &str) -> Tmux {
    let script = dir.join("run.sh");
    std::fs::write(
        &script,
        "\"$1\" tail --url \"$2\"\necho \"EXITED $?\"\nstty -a | tr ' ;' '\\n\\n' | grep -x -e '-\\?icanon' -e '-\\?echo'\nsleep 30\n",
    )
    .unwrap();
    Tmux::new(
        width,
        height,
        &format!(
            "{env} bash {} {} {url}",
            script.display(),
            plugin_bin().display()
        ),
    )
}

/// The plugin exited with 0 and the terminal is back in cooked mode.
fn assert_exited_and_restored(tmux: &Tmux) -> String {
    assert_exited_with_and_restored(tmux, 0)
}

fn assert_exited_with_and_restored(tmux: &Tmux, code: i32) -> String {
    let screen = tmux.wait_screen("the plugin's exit and the terminal's mode", |s| {
        s.contains("EXITED")
            && s.contains("icanon")
            && s.lines()
                .any(|l| l.trim().trim_start_matches('-') == "echo")
    });
    let lines: Vec<&str> = screen.lines().map(str::trim).collect();
    let exited = format!("EXITED {code}");
    assert!(lines.contains(&exited.as_str()), "{screen}");
    assert!(
        lines.contains(&"icanon") && lines.contains(&"echo"),
        "terminal left in raw mode:\n{screen}"
    );
    // Back on the normal screen, which the UI did not draw on.
    assert!(!screen.contains("Drift Sentinel violations"), "{screen}");
    let alternate = tmux
        .command()
        .args(["display-message", "-p", "-t", "tail", "#{alternate_on}"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&alternate.stdout).trim(), "0");
    screen
}

#[test]
fn the_terminal_ui_under_tmux_shows_filters_pauses_and_restores_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let agent = strict_agent(dir.path()).start();
    let tmux = ui_in_tmux(dir.path(), &agent.admin_url(), 200, 50);
    tmux.wait_screen("the header, connected", |s| {
        s.contains(&format!("{} connected", agent.admin_url()))
    });

    agent.violate("tui-1");
    let screen = tmux.wait_screen("the violation", |s| {
        s.contains("prod-eu/checkout") && s.contains(IMAGE_PATH)
    });
    for expected in [
        "1 shown of 1 kept · following",
        "Deployment prod-eu/checkout",
        "drift-sentinel/drift-sentinel-strict",
        "enforce → deny",
        "spec.replicas: 3 → 5",
        "kubernetes-admin",
    ] {
        assert!(screen.contains(expected), "missing {expected:?}:\n{screen}");
    }
    println!("{screen}");

    // A text filter that matches nothing hides it; Esc clears the filter.
    tmux.keys(&["/", "nomatch", "Enter"]);
    tmux.wait_screen("the record hidden by the filter", |s| {
        !s.contains("checkout")
            && !s.contains(IMAGE_PATH)
            && s.contains("filters: text=\"nomatch\"")
    });
    tmux.keys(&["Escape"]);
    tmux.wait_screen("the record back", |s| {
        s.contains("prod-eu/checkout") && !s.contains("nomatch")
    });

    // Paused: a new record waits, counted; resumed: it is shown.
    tmux.keys(&["p"]);
    tmux.wait_screen("paused", |s| s.contains("PAUSED (0 new)"));
    agent.violate("tui-2");
    tmux.wait_screen("the buffered record counted", |s| {
        s.contains("PAUSED (1 new)") && s.contains("1 shown of 1 kept")
    });
    tmux.keys(&["p"]);
    tmux.wait_screen("both records", |s| s.contains("2 shown of 2 kept"));

    // The source filter cycles: webhook shows them, audit hides them.
    tmux.keys(&["s"]);
    tmux.wait_screen("source webhook", |s| {
        s.contains("filters: source=webhook") && s.contains("2 shown")
    });
    tmux.keys(&["s"]);
    tmux.wait_screen("source audit", |s| {
        s.contains("filters: source=audit") && s.contains("0 shown")
    });
    tmux.keys(&["c"]);
    tmux.wait_screen("filters cleared", |s| s.contains("2 shown of 2 kept"));

    tmux.keys(&["q"]);
    assert_exited_and_restored(&tmux);
}

/// The pid of the process whose parent is `parent` (Linux `/proc`).
fn child_of(parent: u32) -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // `pid (comm) state ppid …`; comm may hold spaces, so read after the last ')'.
            let ppid: u32 = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            (ppid == parent).then_some(pid)
        })
}

#[test]
fn ctrl_c_and_sigterm_restore_the_terminal_too() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens there: the UI is up, reconnecting.
    let url = format!("http://127.0.0.1:{}", free_port());

    let tmux = ui_in_tmux(dir.path(), &url, 150, 30);
    tmux.wait_screen("reconnecting", |s| s.contains("reconnecting in"));
    tmux.keys(&["C-c"]);
    assert_exited_and_restored(&tmux);
    drop(tmux);

    let tmux = ui_in_tmux(dir.path(), &url, 150, 30);
    tmux.wait_screen("reconnecting", |s| s.contains("reconnecting in"));
    let plugin = plugin_pid(&tmux);
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(plugin.to_string())
        .status()
        .unwrap();
    assert!(status.success());
    assert_exited_and_restored(&tmux);
}

#[test]
fn a_panic_restores_the_terminal_before_its_message() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{}", free_port());
    // Debug builds panic on `!` when this variable is set.
    let tmux = ui_in_tmux_with(
        dir.path(),
        &url,
        150,
        30,
        // The message, not a backtrace that scrolls it off the pane.
        "env -u RUST_BACKTRACE KUBECTL_DRIFT_TAIL_TEST_PANIC=1",
    );
    tmux.wait_screen("reconnecting", |s| s.contains("reconnecting in"));
    tmux.keys(&["!"]);
    let screen = assert_exited_with_and_restored(&tmux, 101);
    assert!(
        screen.contains("test panic requested with KUBECTL_DRIFT_TAIL_TEST_PANIC"),
        "{screen}"
    );
}

/// The process has ended (gone, or a zombie nobody reaped yet).
fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

/// The plugin running in the pane (the child of the pane's shell).
fn plugin_pid(tmux: &Tmux) -> u32 {
    let pane = tmux
        .command()
        .args(["display-message", "-p", "-t", "tail", "#{pane_pid}"])
        .output()
        .unwrap();
    let shell: u32 = String::from_utf8_lossy(&pane.stdout)
        .trim()
        .parse()
        .unwrap();
    child_of(shell).expect("the plugin process")
}

#[test]
fn the_ui_ends_when_its_terminal_goes_away() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{}", free_port());
    let tmux = ui_in_tmux(dir.path(), &url, 150, 30);
    tmux.wait_screen("reconnecting", |s| s.contains("reconnecting in"));
    let plugin = plugin_pid(&tmux);
    // The terminal hangs up under the UI (crossterm alone would spin on the dead tty).
    drop(tmux);
    let gone = wait_for(Duration::from_secs(5), || ended(plugin).then_some(()));
    if gone.is_none() {
        let _ = Command::new("kill")
            .arg("-KILL")
            .arg(plugin.to_string())
            .status();
        panic!("the plugin outlived its terminal");
    }
}

/// `-A` is accepted as kubectl users type it (every namespace, the default) and, as in kubectl,
/// cannot be combined with `-n`.
#[test]
fn all_namespaces_cannot_be_combined_with_a_namespace() {
    let output = Command::new(plugin_bin())
        .args([
            "tail",
            "-A",
            "-n",
            "prod",
            "--url",
            "http://127.0.0.1:9",
            "--no-tui",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("'--all-namespaces' cannot be used with '--namespace"),
        "{stderr}"
    );
}

/// The line of `screen` that starts with `first` (trimmed).
fn screen_line<'s>(screen: &'s str, first: &str) -> &'s str {
    screen
        .lines()
        .find(|l| l.trim_start().starts_with(first))
        .unwrap_or_else(|| panic!("no line starting with {first:?}:\n{screen}"))
}

/// The header's sparklines count the violations of the last hour per minute and source, and
/// `t` ranks the rules, users, namespaces and denied fields of the shown records — with the
/// numbers of a running agent.
#[test]
fn the_terminal_ui_shows_violations_per_minute_and_the_top_view() {
    let dir = tempfile::tempdir().unwrap();
    let agent = strict_agent(dir.path()).start();
    let tmux = ui_in_tmux(dir.path(), &agent.admin_url(), 200, 50);
    let screen = tmux.wait_screen("the sparklines, empty", |s| {
        s.contains(&format!("{} connected", agent.admin_url()))
    });
    for source in ["webhook", "audit"] {
        let line = screen_line(&screen, source);
        // A dot a minute, none with a violation.
        assert!(line.contains(&"·".repeat(60)), "{line}");
        assert!(line.contains("none in the last hour"), "{line}");
    }

    agent.violate("pic-1");
    agent.violate("pic-2");
    agent.violate("pic-3");
    let screen = tmux.wait_screen("three violations in the sparkline", |s| {
        s.contains("3 shown of 3 kept")
    });
    println!("{screen}");
    let webhook = screen_line(&screen, "webhook");
    // Three this minute, at the right end of the hour (the minute may just have turned).
    assert!(
        webhook.contains("3 in the last hour · max 3/min · 3 now")
            || webhook.contains("3 in the last hour · max 2/min"),
        "{webhook}"
    );
    assert!(webhook.contains('█'), "{webhook}");
    assert!(
        screen_line(&screen, "audit").contains("none in the last hour"),
        "{screen}"
    );

    tmux.keys(&["t"]);
    let screen = tmux.wait_screen("the top view", |s| s.contains("Top of the 3 shown records"));
    println!("{screen}");
    for (name, expected) in [
        ("RULE", "drift-sentinel/drift-sentinel-strict"),
        ("USER", "kubernetes-admin"),
        ("NAMESPACE", "prod-eu"),
        ("DENIED FIELD", "spec.replicas"),
        ("DENIED FIELD", "spec.template.spec.containers[*].image"),
    ] {
        let line = screen
            .lines()
            .find(|l| l.contains(expected) && !l.contains("Drift Sentinel violations"))
            .unwrap_or_else(|| panic!("{name}: no {expected:?} in\n{screen}"));
        let row = line
            .split(expected)
            .next()
            .unwrap()
            .rsplit('│')
            .next()
            .unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert!(
            cells.ends_with(&["3", "100%"]),
            "{name} {expected}: {line:?}\n{screen}"
        );
    }
    // Filters apply to the top view too.
    tmux.keys(&["s"]);
    tmux.keys(&["s"]);
    tmux.wait_screen("the top view of no record", |s| {
        s.contains("Top of the 0 shown records") && s.contains("No record shown")
    });
    tmux.keys(&["c", "t"]);
    tmux.wait_screen("the list again", |s| {
        s.contains("Violations (newest at the bottom)") && s.contains("3 shown of 3 kept")
    });
    tmux.keys(&["q"]);
    assert_exited_and_restored(&tmux);
}

/// `--no-tui -o yaml` prints each record as a YAML document, `-o text` as one line of the
/// list's columns; `--color always` colours the action even on a pipe.
#[test]
fn no_tui_prints_yaml_documents_or_text_lines() {
    let dir = tempfile::tempdir().unwrap();
    let agent = strict_agent(dir.path()).start();
    let admin = agent.admin_url();
    let mut yaml = NoTui::start(dir.path(), &["--url", &admin, "-o", "yaml"]);
    let mut text = NoTui::start(dir.path(), &["--url", &admin, "-o", "text"]);
    let mut coloured = NoTui::start(
        dir.path(),
        &["--url", &admin, "-o", "text", "--color", "always"],
    );
    agent.violate("yaml-1");
    let expected = [
        "eventType: violation_admission",
        "id: yaml-1",
        "resourceNamespace: prod-eu",
        "enforcementAction: deny",
    ];
    let lines = yaml
        .wait_until(Duration::from_secs(10), |lines| {
            expected.iter().all(|e| lines.iter().any(|l| l == e))
        })
        .to_vec();
    assert_eq!(
        lines.first().map(String::as_str),
        Some("---"),
        "{lines:?}\n{}",
        yaml.stderr()
    );
    for expected in expected {
        assert!(lines.iter().any(|l| l == expected), "{expected}: {lines:?}");
    }
    let line = text.wait_lines(1, Duration::from_secs(10))[0].clone();
    let expected = "  webhook  prod-eu/checkout  Deployment  drift-sentinel/drift-sentinel-strict  deny  spec.replicas (+1)";
    assert!(line.ends_with(expected), "{line:?}");
    assert!(!line.contains('\x1b'), "{line:?}");
    let line = coloured.wait_lines(1, Duration::from_secs(10))[0].clone();
    assert!(line.contains("\x1b[1;31mdeny\x1b[0m"), "{line:?}");
}

/// The ids of the first `count` records `tail` prints (waiting up to 20 s for them).
fn printed_ids(tail: &mut NoTui, count: usize) -> Vec<String> {
    tail.wait_lines(count, Duration::from_secs(20))
        .iter()
        .map(|l| {
            let record: Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
            record["id"].as_str().unwrap_or_default().to_owned()
        })
        .collect()
}

#[test]
fn tail_follows_the_agent_pods_through_port_forwarding_and_finds_a_replacement() {
    let cluster = Cluster::start();
    let first = cluster.agent("agent-1").start();
    let second = cluster.agent("agent-2").start();
    cluster.agent_pod("agent-1", true, Some(first.admin_addr()));
    cluster.agent_pod("agent-2", true, Some(second.admin_addr()));
    let kubeconfig = cluster.kubeconfig().to_owned();
    let mut tail = NoTui::start(
        cluster.dir(),
        &["--kubeconfig", &kubeconfig, "--agent-namespace", NAMESPACE],
    );
    first.violate("one-1");
    second.violate("two-1");
    let mut ids = printed_ids(&mut tail, 2);
    ids.sort();
    assert_eq!(ids, ["one-1", "two-1"], "stderr: {}", tail.stderr());
    let forwards = |pod: &str| {
        cluster
            .api()
            .requests()
            .iter()
            .filter(|r| r.contains(&format!("/pods/{pod}/portforward?")))
            .count()
    };
    assert!(forwards("agent-1") >= 1 && forwards("agent-2") >= 1);

    // agent-1's pod is replaced: its forward ends with it, and the stream finds agent-3.
    let third = cluster.agent("agent-3").start();
    cluster.agent_pod("agent-3", true, Some(third.admin_addr()));
    assert!(cluster.api().delete("v1", "Pod", NAMESPACE, "agent-1"));
    third.violate("three-1");
    second.violate("two-2");
    // A record of the gone agent is not followed any more.
    first.violate("one-2");
    let seen = printed_ids(&mut tail, 4);
    assert!(
        seen.contains(&"three-1".to_owned()),
        "{seen:?}\nstderr: {}",
        tail.stderr()
    );
    assert!(seen.contains(&"two-2".to_owned()), "{seen:?}");
    // Give the gone agent's record every chance to (wrongly) arrive.
    let seen = tail.wait_lines(5, Duration::from_millis(1500)).to_vec();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(!seen.iter().any(|l| l.contains("\"one-2\"")), "{seen:?}");
    let stderr = tail.stderr();
    assert!(
        stderr.contains("kubectl-drift: pod/agent-1: pods \"agent-1\" not found (404); following pod/agent-3 instead"),
        "{stderr}"
    );
    assert!(forwards("agent-3") >= 1);
}

/// Issue 42: agents without export (the chart's default) have nothing to tail: the plugin says
/// so, with how to turn it on, and exits 2 instead of asking again forever — as lines, in the
/// terminal UI, and through port-forwarding to every agent pod.
#[test]
fn tail_of_agents_without_export_says_so_and_exits_2() {
    const OFF: &str = "violation export is not enabled on this agent: start it with --enable-admission-violation-export (the chart's enableAdmissionViolationExport=true)";
    let dir = tempfile::tempdir().unwrap();
    let agent = strict_agent(dir.path()).without_export().start();
    let output = support::agents::run_plugin(&["tail", "--no-tui", "--url", &agent.admin_url()]);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "error: cannot follow {}: {OFF}",
            agent.admin_url()
        )),
        "{stderr}"
    );

    let tmux = ui_in_tmux(dir.path(), &agent.admin_url(), 140, 30);
    let screen = assert_exited_with_and_restored(&tmux, 2);
    assert!(
        screen.contains("violation export is not enabled on this agent"),
        "{screen}"
    );

    let cluster = Cluster::start();
    let first = cluster.agent("agent-1").without_export().start();
    let second = cluster.agent("agent-2").without_export().start();
    cluster.agent_pod("agent-1", true, Some(first.admin_addr()));
    cluster.agent_pod("agent-2", true, Some(second.admin_addr()));
    let output = cluster.plugin(&["tail", "--no-tui", "--agent-namespace", NAMESPACE]);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "error: cannot follow pod/agent-1, pod/agent-2: {OFF}"
        )),
        "{stderr}"
    );
}

#[test]
fn tail_without_agent_pods_exits_2() {
    let cluster = Cluster::start();
    let output = cluster.plugin(&["tail", "--no-tui", "--agent-namespace", "drift-sentinel"]);
    let text = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.contains("no running agent pods in namespace drift-sentinel match the selector"),
        "{text}"
    );
    assert!(text.contains("--url"), "{text}");
}
