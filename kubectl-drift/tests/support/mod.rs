//! Test support shared by the plugin's black-box tests: the binaries under test, free ports,
//! an HTTP client and polling.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn examples() -> PathBuf {
    repo().join("docs/examples")
}

pub fn plugin_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_kubectl-drift"))
}

/// `drift-sentinel` of the same build: next to the plugin's binary, or in `CARGO_TARGET_DIR`.
pub fn agent_bin() -> PathBuf {
    let mut candidates = vec![plugin_bin().with_file_name("drift-sentinel")];
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        candidates.push(PathBuf::from(dir).join("debug/drift-sentinel"));
    }
    candidates.push(repo().join("target/debug/drift-sentinel"));
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "the agent binary is needed: run `cargo build -p drift-sentinel` first (looked at {candidates:?})"
            )
        })
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

pub fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("HTTP client")
}

/// Polls `check` every 50 ms until it returns something, for at most `limit`.
pub fn wait_for<T>(limit: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
