//! What a node changes on the host, and putting it back.
//!
//! The kubelet, kube-proxy, the CNI bridge plugin and runc change state that belongs to the
//! host, not to the node's directory: kernel settings (the kubelet sets `vm.overcommit_memory`
//! and `kernel.panic*`, the bridge plugin `net.ipv4.ip_forward`), iptables chains (`KUBE-*`,
//! `CNI-*`), the `cni0` bridge, cgroups (`kubepods`), mounts and a few well-known directories.
//! So one node runs on a machine at a time ([`Lease`], an exclusive lock on a file of the
//! temporary directory, held as long as the node lives), and before it starts a record of what
//! it may change is written next to that lock: teardown puts the host back from the record, and
//! the next node does so first when a test process was killed before its teardown ran.
//! [`Snapshot`] is what tests compare to prove it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The kernel settings a node changes, restored on teardown (under `/proc/sys`).
const SYSCTLS: &[&str] = &[
    // The CNI bridge plugin (isGateway, ipMasq).
    "net/ipv4/ip_forward",
    "net/ipv6/conf/all/forwarding",
    // The kubelet (protectKernelDefaults: false).
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    // kube-proxy, should it change them despite its configuration.
    "net/ipv4/conf/all/route_localnet",
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
    "net/netfilter/nf_conntrack_max",
    "net/netfilter/nf_conntrack_tcp_timeout_established",
    "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
];

/// Directories a node's components create outside its own directory (hard-coded in them):
/// removed on teardown when they did not exist before.
const CREATED_PATHS: &[&str] = &[
    // The kubelet's links to container logs.
    "/var/log/containers",
    // libcni's result cache (containerd does not move it).
    "/var/lib/cni",
    // containerd's shims put their sockets in /run/containerd/s.
    "/run/containerd",
];

/// The iptables chains a node creates: kube-proxy's and the kubelet's, and the CNI plugins'.
const CHAIN_PREFIXES: &[&str] = &["KUBE-", "CNI-"];

/// The bridge of the pod network.
pub(super) const BRIDGE: &str = "cni0";

/// The file whose lock makes the node one per machine, and the record next to it.
fn lock_path() -> PathBuf {
    std::env::temp_dir().join("drift-sentinel-node.lock")
}

fn record_path() -> PathBuf {
    std::env::temp_dir().join("drift-sentinel-node.json")
}

/// The host's address on its default route: what the API server advertises and the kubelet
/// registers, reachable from pods through the bridge's gateway. Sends nothing (a UDP socket only
/// picks its source address when connected).
pub fn host_address() -> IpAddr {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").expect("a UDP socket");
    // TEST-NET-3: never routed anywhere, only the route to it is looked up.
    socket
        .connect("203.0.113.1:9")
        .expect("a default route (the node needs a host address pods can reach)");
    socket.local_addr().expect("the socket's address").ip()
}

/// The machine's one node: an exclusive lock, and the record of what to put back.
pub(super) struct Lease {
    _lock: File,
    record: Record,
    before: Snapshot,
}

impl Lease {
    /// Waits for the machine's node lock, puts back what a killed predecessor left, then
    /// records the host as it is (for a node in `dir`).
    pub(super) fn acquire(dir: &Path) -> Self {
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(lock_path())
            .expect("the node lock file");
        if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            eprintln!(
                "another test node runs on this machine (lock {}): waiting for it to stop",
                lock_path().display()
            );
            rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
                .expect("the node lock");
        }
        if let Some(stale) = Record::read() {
            eprintln!(
                "a test node in {} was not torn down (its process was killed): putting the host back",
                stale.dir.display()
            );
            stale.restore();
        }
        let record = Record::take(dir);
        record.write();
        Self {
            _lock: lock,
            record,
            before: Snapshot::take(),
        }
    }

    /// Puts the host back (processes, mounts, network, cgroups, kernel settings, directories),
    /// then lists what still differs from the host as it was found.
    pub(super) fn restore(&self) -> Vec<String> {
        self.record.restore();
        let after = Snapshot::take();
        let differences = self.before.differences(&after);
        if differences.is_empty() {
            let _ = std::fs::remove_file(record_path());
        }
        differences
    }
}

/// What teardown needs to put the host back, also from another process.
struct Record {
    dir: PathBuf,
    sysctls: Vec<(String, String)>,
    absent: Vec<PathBuf>,
    mounts: BTreeSet<String>,
}

impl Record {
    fn take(dir: &Path) -> Self {
        Self {
            dir: dir.to_owned(),
            sysctls: SYSCTLS
                .iter()
                .filter_map(|key| Some(((*key).to_owned(), read_sysctl(key)?)))
                .collect(),
            absent: CREATED_PATHS
                .iter()
                .map(PathBuf::from)
                .filter(|p| !p.exists())
                .collect(),
            mounts: mount_points(),
        }
    }

    fn write(&self) {
        let record = json!({
            "dir": self.dir,
            "sysctls": self.sysctls.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
            "absent": self.absent,
            "mounts": self.mounts,
        });
        std::fs::write(record_path(), record.to_string()).expect("write the node's host record");
    }

    fn read() -> Option<Self> {
        let text = std::fs::read_to_string(record_path()).ok()?;
        let record: Value = serde_json::from_str(&text).ok()?;
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        };
        Some(Self {
            dir: PathBuf::from(record["dir"].as_str()?),
            sysctls: record["sysctls"]
                .as_array()?
                .iter()
                .filter_map(|pair| Some((pair[0].as_str()?.into(), pair[1].as_str()?.into())))
                .collect(),
            absent: strings(&record["absent"])
                .into_iter()
                .map(PathBuf::from)
                .collect(),
            mounts: strings(&record["mounts"]).into_iter().collect(),
        })
    }

    /// Every step runs whatever the previous ones did: a node half started or half stopped
    /// leaves any subset of this behind.
    fn restore(&self) {
        kill_node_processes(&self.dir);
        unmount_new(&self.mounts, &self.dir);
        delete_link(BRIDGE);
        remove_chains();
        remove_pod_cgroups();
        for (key, value) in &self.sysctls {
            if read_sysctl(key).as_deref() != Some(value) {
                let _ = std::fs::write(Path::new("/proc/sys").join(key), value);
            }
        }
        for path in &self.absent {
            let _ = std::fs::remove_dir_all(path);
        }
        if std::path::Path::new("/var/log/containers").exists() {
            remove_links_into(Path::new("/var/log/containers"), &self.dir);
        }
        // The directory last, and only once nothing is mounted inside it any more: removing
        // files through a mount would reach outside it.
        if !mount_points()
            .iter()
            .any(|m| Path::new(m).starts_with(&self.dir))
        {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn read_sysctl(key: &str) -> Option<String> {
    std::fs::read_to_string(Path::new("/proc/sys").join(key))
        .ok()
        .map(|v| v.trim().to_owned())
}

/// Every process of the node: the containers (in the pod cgroups), the shims and the
/// components (whose command lines name the node's directory). Repeated until none is left,
/// for a few seconds: a dying shim may still start nothing new, but a container's process may
/// still be forking.
fn kill_node_processes(dir: &Path) {
    let dir = dir.to_string_lossy().into_owned();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut pids: BTreeSet<i32> = pod_cgroup_processes();
        pids.extend(processes_naming(&dir));
        pids.remove(&(std::process::id() as i32));
        if pids.is_empty() || Instant::now() > deadline {
            return;
        }
        for pid in pids {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Processes whose command line contains `needle`.
fn processes_naming(needle: &str) -> BTreeSet<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return BTreeSet::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
        .collect()
}

/// The cgroup hierarchies' roots (each controller's on cgroup v1, the one on v2).
fn cgroup_roots() -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    if root.join("cgroup.controllers").exists() {
        return vec![root.to_owned()];
    }
    std::fs::read_dir(root)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir() && !p.is_symlink())
                .collect()
        })
        .unwrap_or_default()
}

/// The kubelet's pod cgroups (`kubepods`, cgroupfs driver) in every hierarchy.
fn pod_cgroups() -> Vec<PathBuf> {
    cgroup_roots()
        .into_iter()
        .filter_map(|root| {
            let dir = root.join("kubepods");
            dir.is_dir().then_some(dir)
        })
        .collect()
}

fn pod_cgroup_processes() -> BTreeSet<i32> {
    let mut pids = BTreeSet::new();
    for dir in pod_cgroups() {
        walk_dirs(&dir, &mut |d| {
            if let Ok(procs) = std::fs::read_to_string(d.join("cgroup.procs")) {
                pids.extend(procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
            }
        });
    }
    pids
}

/// Removes the pod cgroups, the deepest first (a cgroup is removed with rmdir once empty).
fn remove_pod_cgroups() {
    for dir in pod_cgroups() {
        let mut dirs = Vec::new();
        walk_dirs(&dir, &mut |d| dirs.push(d.to_owned()));
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for d in dirs {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// Calls `f` on `dir` and every directory below it.
fn walk_dirs(dir: &Path, f: &mut dyn FnMut(&Path)) {
    f(dir);
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                walk_dirs(&path, f);
            }
        }
    }
}

/// The host's mount points (this process's mount namespace is the host's).
fn mount_points() -> BTreeSet<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(unescape_mount_point))
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape_mount_point(field: &str) -> String {
    field
        .replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// Unmounts (lazily, the deepest first) what was mounted since `before` inside the node's
/// directory or containerd's run directory: container root filesystems, network namespaces,
/// the kubelet's volumes.
fn unmount_new(before: &BTreeSet<String>, dir: &Path) {
    for _ in 0..5 {
        let mut new: Vec<String> = mount_points()
            .into_iter()
            .filter(|m| !before.contains(m))
            .filter(|m| {
                Path::new(m).starts_with(dir) || Path::new(m).starts_with("/run/containerd")
            })
            .collect();
        if new.is_empty() {
            return;
        }
        new.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for mount in new {
            let _ = rustix::mount::unmount(mount.as_str(), rustix::mount::UnmountFlags::DETACH);
        }
    }
}

fn delete_link(name: &str) {
    if Path::new("/sys/class/net").join(name).exists() {
        let _ = Command::new("ip").args(["link", "delete", name]).output();
    }
}

/// Removes every `KUBE-*` and `CNI-*` chain, and the rules that jump to them, from every table
/// of iptables and ip6tables: each table is written back without them (`iptables-restore`
/// replaces only the tables it is given).
fn remove_chains() {
    for (save, restore) in [
        ("iptables-save", "iptables-restore"),
        ("ip6tables-save", "ip6tables-restore"),
    ] {
        let Ok(saved) = Command::new(save).output() else {
            continue;
        };
        let saved = String::from_utf8_lossy(&saved.stdout).into_owned();
        let Some(cleaned) = without_node_chains(&saved) else {
            continue;
        };
        let _ = super::run_with_stdin(Command::new(restore), &cleaned);
    }
}

fn node_chain(name: &str) -> bool {
    CHAIN_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// `saved` (iptables-save output) without the node's chains and the rules that jump to them,
/// only the tables that had any; `None` when none had.
fn without_node_chains(saved: &str) -> Option<String> {
    let mut out = String::new();
    let mut table = String::new();
    let mut touched = false;
    let mut any = false;
    for line in saved.lines() {
        if line.starts_with('*') {
            table = format!("{line}\n");
            touched = false;
            continue;
        }
        if line == "COMMIT" {
            if touched {
                out.push_str(&table);
                out.push_str("COMMIT\n");
                any = true;
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let drop = if let Some(chain) = line.strip_prefix(':') {
            node_chain(chain.split(' ').next().unwrap_or(""))
        } else if let Some(rule) = line.strip_prefix("-A ") {
            let mut words = rule.split(' ');
            let chain = words.next().unwrap_or("");
            let mut target = false;
            let mut jumps = false;
            for word in words {
                if target {
                    jumps |= node_chain(word);
                }
                target = word == "-j" || word == "-g";
            }
            node_chain(chain) || jumps
        } else {
            false
        };
        touched |= drop;
        if !drop {
            table.push_str(line);
            table.push('\n');
        }
    }
    any.then_some(out)
}

/// Removes the links in `logs` that point into the node's directory (the kubelet's container
/// log links, when /var/log/containers was there before).
fn remove_links_into(logs: &Path, dir: &Path) {
    let Ok(entries) = std::fs::read_dir(logs) else {
        return;
    };
    for entry in entries.flatten() {
        if std::fs::read_link(entry.path()).is_ok_and(|target| target.starts_with(dir)) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The host state a node may change, to compare before and after: kernel settings, network
/// links, iptables rules, mounts, top-level cgroups, the well-known directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    values: BTreeMap<String, String>,
}

impl Snapshot {
    pub fn take() -> Self {
        let mut values = BTreeMap::new();
        for key in SYSCTLS {
            values.insert(
                format!("sysctl {key}"),
                read_sysctl(key).unwrap_or_default(),
            );
        }
        if let Ok(links) = std::fs::read_dir("/sys/class/net") {
            for link in links.flatten() {
                values.insert(
                    format!("link {}", link.file_name().to_string_lossy()),
                    "present".into(),
                );
            }
        }
        for (name, save) in [
            ("iptables", "iptables-save"),
            ("ip6tables", "ip6tables-save"),
        ] {
            if let Ok(out) = Command::new(save).output() {
                let saved = String::from_utf8_lossy(&out.stdout);
                for (table, rules) in iptables_tables(&saved) {
                    values.insert(format!("{name} table {table}"), rules);
                }
            }
        }
        for mount in mount_points() {
            values.insert(format!("mount {mount}"), "mounted".into());
        }
        for root in cgroup_roots() {
            if let Ok(entries) = std::fs::read_dir(&root) {
                for entry in entries.flatten().filter(|e| e.path().is_dir()) {
                    values.insert(
                        format!("cgroup {}", entry.path().display()),
                        "present".into(),
                    );
                }
            }
        }
        for path in CREATED_PATHS {
            values.insert(format!("path {path}"), Path::new(path).exists().to_string());
        }
        Self { values }
    }

    /// What differs between `self` (before) and `after`, one line each.
    pub fn differences(&self, after: &Snapshot) -> Vec<String> {
        let keys: BTreeSet<&String> = self.values.keys().chain(after.values.keys()).collect();
        keys.into_iter()
            .filter_map(|key| {
                let (was, is) = (self.values.get(key), after.values.get(key));
                (was != is).then(|| {
                    format!(
                        "{key}: {} -> {}",
                        was.map_or("(absent)", String::as_str),
                        is.map_or("(absent)", String::as_str)
                    )
                })
            })
            .collect()
    }
}

/// iptables-save output per table, without comments and counters; a table with only its
/// built-in chains, each accepting, and no rule is the same as no table (iptables-nft creates
/// tables when they are listed).
fn iptables_tables(saved: &str) -> BTreeMap<String, String> {
    let mut tables = BTreeMap::new();
    let mut name = String::new();
    let mut lines: Vec<String> = Vec::new();
    for line in saved.lines() {
        if let Some(table) = line.strip_prefix('*') {
            name = table.to_owned();
            lines.clear();
        } else if line == "COMMIT" {
            let empty = lines
                .iter()
                .all(|l| l.starts_with(':') && l.ends_with(" ACCEPT"));
            if !empty {
                tables.insert(name.clone(), lines.join("\n"));
            }
        } else if !line.starts_with('#') {
            // ":CHAIN POLICY [packets:bytes]" -> ":CHAIN POLICY"
            let line = match line.rfind(" [") {
                Some(i) if line.starts_with(':') => &line[..i],
                _ => line,
            };
            lines.push(line.to_owned());
        }
    }
    tables
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAVED: &str = "# Generated by iptables-nft-save v1.8.9\n*nat\n:PREROUTING ACCEPT [0:0]\n:POSTROUTING ACCEPT [3:180]\n:KUBE-SERVICES - [0:0]\n:CNI-abc - [0:0]\n-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n-A POSTROUTING -s 10.88.0.5/32 -j CNI-abc\n-A POSTROUTING -o eth0 -j MASQUERADE\n-A KUBE-SERVICES -j RETURN\n-A CNI-abc -j ACCEPT\nCOMMIT\n*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -i lo -j ACCEPT\nCOMMIT\n";

    #[test]
    fn node_chains_and_the_jumps_to_them_are_removed_only_from_their_tables() {
        let cleaned = without_node_chains(SAVED).expect("the nat table had node chains");
        assert_eq!(
            cleaned,
            "*nat\n:PREROUTING ACCEPT [0:0]\n:POSTROUTING ACCEPT [3:180]\n-A POSTROUTING -o eth0 -j MASQUERADE\nCOMMIT\n"
        );
        assert_eq!(
            without_node_chains("*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n"),
            None
        );
    }

    #[test]
    fn tables_compare_without_counters_and_empty_tables_are_absent() {
        let tables = iptables_tables(SAVED);
        assert_eq!(tables.len(), 2);
        assert!(tables["nat"].starts_with(":PREROUTING ACCEPT\n:POSTROUTING ACCEPT\n"));
        assert!(iptables_tables("*mangle\n:PREROUTING ACCEPT [1:2]\nCOMMIT\n").is_empty());
    }

    #[test]
    fn snapshots_name_what_changed() {
        let before = Snapshot {
            values: BTreeMap::from([("sysctl kernel/panic".into(), "1".into())]),
        };
        let after = Snapshot {
            values: BTreeMap::from([
                ("sysctl kernel/panic".into(), "10".into()),
                ("link cni0".into(), "present".into()),
            ]),
        };
        assert_eq!(
            before.differences(&after),
            [
                "link cni0: (absent) -> present",
                "sysctl kernel/panic: 1 -> 10"
            ]
        );
        assert!(before.differences(&before.clone()).is_empty());
    }
}
