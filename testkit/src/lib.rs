//! Test support for Drift Sentinel.
//!
//! [`cluster::Cluster`] runs a real Kubernetes control plane (etcd, kube-apiserver and
//! optionally kube-controller-manager and kube-scheduler, built by `.ci/build-cluster`) on
//! loopback, and [`node::Node`] a real node beside it (containerd, the kubelet, kube-proxy) that
//! runs pods from the images `.ci/build-image` builds; [`pki`]
//! makes the certificates tests need; [`objects`] builds the realistic Deployment and its
//! AdmissionReview that tests and benchmarks share, [`records`] the webhook's records of edits
//! (`EditRecordBuilder`); [`agent`] runs the agent (`drift-sentinel`)
//! as a process for black-box tests, [`double::Double`] the [`ApiServer`] double on a runtime of
//! its own with a kubeconfig, for synchronous tests of processes.
//!
//! [`ApiServer`] is a Kubernetes API server double served over real HTTP on loopback. It speaks
//! enough of the protocol for the resources the agent uses — list, watch (with
//! `resourceVersion` semantics and replay), get, create, update, merge patch, delete, and
//! `PartialObjectMetadata` responses for metadata-only watches, `fieldSelector` on list and
//! watch — so that the real kube-rs client and runtime run against it unmodified. Faults can be
//! injected: a watch closed mid-stream, `410 Gone` on the next watch, failing and slow requests.
//!
//! Server-side apply (`PATCH` with `application/apply-patch+yaml`, on the object or its
//! `/status`) keeps each field manager's applied fields, merges list-maps on their keys (for
//! Connections `status.byPod` on `id` and `publishStatuses` on `source`; lists not declared
//! as list-maps are atomic), removes what a manager stops applying unless another manager owns
//! it, answers `409 Conflict` when a manager would change another's field without `force=true`,
//! and shows managers in `metadata.managedFields` (also readable with
//! [`ApiServer::managed_fields`]).
//!
//! Discovery (`/api`, `/apis`, `/api/v1`, `/apis/GROUP/VERSION`) lists the kinds served with
//! their short names (`deploy`, `sts`, `ds`, `ro`, …), scope, verbs and subresources, so that
//! clients resolve kinds as kubectl does. `dryRun=All` on PUT and merge-patch PATCH validates
//! and answers with the would-be object without storing it; the double runs no webhooks, but
//! [`ApiServer::deny_dry_runs`] makes dry runs answer the `403` an installed webhook would.
//!
//! Lists and watches also take a `labelSelector` (`k=v`, `k!=v`, `k`, `!k`, `k in (…)`,
//! `k notin (…)`). Pod port-forwarding (`pods/NAME/portforward` upgraded to a WebSocket with
//! `v4.channel.k8s.io`, as kube-rs's `Api<Pod>::portforward` speaks it) carries the bytes to a
//! TCP address given with [`ApiServer::set_pod_port_target`]; an unknown pod is a 404, a port
//! without a target fails on its error channel, and deleting the pod ends its forwards.

pub mod agent;
mod apiserver;
pub mod cluster;
pub mod double;
pub mod node;
pub mod objects;
pub mod pki;
pub mod records;

pub use apiserver::{ApiServer, Fault, ManagedFields};

/// The workspace's directory.
pub fn workspace() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace directory")
        .to_owned()
}

/// The workspace's example rules, Namespaces and objects (`docs/examples`).
pub fn examples() -> std::path::PathBuf {
    workspace().join("docs/examples")
}

/// A blocking HTTP client for loopback: no proxy, 10 s per request.
pub fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .expect("HTTP client")
}

/// A loopback port free at the moment of asking (the OS picks it), for a process under test
/// to listen on.
/// Sends a request head and body pieces on a raw TCP connection to `address` (ignoring a peer
/// that stops reading) and returns what the server answered until it closed the connection:
/// what an HTTP client library would not let a test send.
pub fn raw_exchange(address: impl std::net::ToSocketAddrs, head: &str, pieces: &[&[u8]]) -> String {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(address).expect("connect");
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("a read timeout");
    stream.write_all(head.as_bytes()).expect("send the head");
    for piece in pieces {
        if stream.write_all(piece).is_err() {
            break;
        }
    }
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

/// The names of the entries of a directory, sorted (what a test of files on disk compares).
pub fn file_names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| {
            let entry = e.unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
            entry.file_name().to_string_lossy().into_owned()
        })
        .collect();
    names.sort();
    names
}

/// A loopback port nothing listens on, for a process a test starts and tells where to listen.
///
/// Ports come from outside the kernel's ephemeral range, one after another from a per-process
/// starting point: a port the kernel handed to an outgoing connection or to a `bind(:0)`
/// elsewhere in the run can never be given out here, which is the race that made an agent fail
/// with "Address already in use" between the check and its own bind (CI, stop 32).
pub fn free_port() -> u16 {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU32, Ordering};
    static RANGE: OnceLock<(u32, u32)> = OnceLock::new();
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let &(first, count) = RANGE.get_or_init(|| {
        // Two test binaries running at once start far apart.
        let (first, count) = unassigned_ports(ephemeral_ports());
        NEXT.store(
            std::process::id().wrapping_mul(7_919) % count,
            Ordering::Relaxed,
        );
        (first, count)
    });
    for _ in 0..count {
        let port = (first + NEXT.fetch_add(1, Ordering::Relaxed) % count) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {first}..{}", first + count)
}

/// The kernel's ephemeral ports (`net.ipv4.ip_local_port_range`), Linux's default where it
/// cannot be read.
fn ephemeral_ports() -> (u32, u32) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut bounds = text.split_whitespace().map(str::parse::<u32>);
            Some((bounds.next()?.ok()?, bounds.next()?.ok()?))
        })
        .unwrap_or((32_768, 60_999))
}

/// Up to 12,000 ports (first, count) just below the ephemeral range `(low, high)`, else just
/// above it: where no port the kernel assigns by itself lies. A range that leaves no port
/// unprivileged outside it leaves only the check that a port is free when given out.
fn unassigned_ports((low, high): (u32, u32)) -> (u32, u32) {
    const WANTED: u32 = 12_000;
    const LOWEST: u32 = 1_024;
    let below = low.saturating_sub(LOWEST);
    let above = 65_535u32.saturating_sub(high);
    if below == 0 && above == 0 {
        (LOWEST, WANTED)
    } else if below >= above {
        let count = below.min(WANTED);
        (low - count, count)
    } else {
        (high + 1, above.min(WANTED))
    }
}

/// The peak resident memory (`VmHWM`) of process `pid` so far, in bytes: what a memory bound of
/// reference §5 is measured against.
pub fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("cannot read /proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .unwrap_or_else(|| panic!("no VmHWM in /proc/{pid}/status"))
}

/// Polls `check` every 50 ms until it returns something, for at most `limit`.
pub fn wait_for<T>(limit: std::time::Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if std::time::Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A new record signing key seed (`--record-signing-key`, 32 bytes), as the chart makes one per
/// install (Sprig's `randBytes 32`): from the kernel's random source.
pub fn random_seed() -> [u8; 32] {
    use std::io::Read as _;
    let mut seed = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut seed))
        .expect("read /dev/urandom");
    seed
}

#[cfg(test)]
mod tests {
    use super::{ephemeral_ports, free_port, unassigned_ports};

    #[test]
    fn free_ports_are_distinct_bindable_and_outside_the_ephemeral_range() {
        let (low, high) = ephemeral_ports();
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        for port in ports {
            assert!(
                !(low..=high).contains(&u32::from(port)),
                "{port} in {low}-{high}"
            );
            std::net::TcpListener::bind(("127.0.0.1", port)).expect("the port is free");
        }
    }

    #[test]
    fn the_ports_lie_beside_any_ephemeral_range() {
        let cases = [
            ((32_768, 60_999), (20_768, 12_000)),
            ((1_024, 65_535), (1_024, 12_000)),
            ((1_024, 49_999), (50_000, 12_000)),
            ((5_000, 65_000), (1_024, 3_976)),
        ];
        for (ephemeral, want) in cases {
            assert_eq!(unassigned_ports(ephemeral), want, "{ephemeral:?}");
        }
    }

    #[test]
    fn a_port_in_use_is_skipped() {
        let first = free_port();
        let _held = std::net::TcpListener::bind(("127.0.0.1", first + 1));
        let second = free_port();
        assert_ne!(second, first + 1, "a held port was given out");
    }
}
