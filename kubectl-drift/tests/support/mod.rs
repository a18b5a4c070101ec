//! Test support shared by the plugin's black-box tests: the plugin's binary, `tail --no-tui`
//! read line by line, the cluster `explain` and `preview` are tested on ([`cluster`]) and the
//! one `status` and `tail` are tested on ([`agents`]); the agent, the API server double, free
//! ports, an HTTP client and polling come from `drift_testkit`.
#![allow(dead_code)]

pub mod agents;
pub mod cluster;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub fn plugin_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_kubectl-drift"))
}

pub fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// `kubectl-drift tail --no-tui …`, its stdout lines collected as they come.
pub struct NoTui {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
    stderr: PathBuf,
}

impl NoTui {
    pub fn start(dir: &Path, args: &[&str]) -> NoTui {
        let stderr = dir.join(format!("plugin-{}.err", now_nanos()));
        let mut child = Command::new(plugin_bin())
            .arg("tail")
            .arg("--no-tui")
            .args(args)
            // Cluster mode only through the --kubeconfig a test passes, never a real cluster.
            .env_remove("KUBECONFIG")
            .stdout(Stdio::piped())
            .stderr(Stdio::from(std::fs::File::create(&stderr).unwrap()))
            .spawn()
            .expect("start kubectl-drift");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        NoTui {
            child,
            lines,
            seen: Vec::new(),
            stderr,
        }
    }

    /// The lines so far, after waiting up to `limit` for there to be at least `count`.
    pub fn wait_lines(&mut self, count: usize, limit: Duration) -> &[String] {
        let deadline = Instant::now() + limit;
        while self.seen.len() < count {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => break,
            }
        }
        self.seen.extend(self.lines.try_iter());
        &self.seen
    }

    /// Reads lines until `done` holds of all seen so far (a record's lines arrive as the
    /// plugin writes them, not at once), for at most `limit`.
    pub fn wait_until(&mut self, limit: Duration, done: impl Fn(&[String]) -> bool) -> &[String] {
        let deadline = Instant::now() + limit;
        self.seen.extend(self.lines.try_iter());
        while !done(&self.seen) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => break,
            }
        }
        &self.seen
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for NoTui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP server on loopback that answers every connection with `answer` after reading the
/// request head (at most `connections` of them, then it closes).
pub fn serve_raw(
    answer: impl AsRef<[u8]> + Send + 'static,
    connections: usize,
) -> std::net::SocketAddr {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(connections) {
            let Ok(mut stream) = stream else { return };
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = stream.write_all(answer.as_ref());
        }
    });
    address
}
