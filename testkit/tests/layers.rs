//! The workspace's layers, checked on every `cargo test --workspace` (issue 44): the engine is
//! pure (no I/O crate among its dependencies, no file, network, process or environment access
//! in its sources), the API types do not depend on the engine, and the agent's command line is
//! a leaf that imports nothing of the agent (so no module's defaults make a circle with it).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Crates that do I/O (sockets, files, processes, HTTP, TLS, the kube client).
const IO_CRATES: &[&str] = &[
    "tokio",
    "mio",
    "socket2",
    "hyper",
    "hyper-util",
    "h2",
    "reqwest",
    "axum",
    "tower",
    "kube",
    "kube-client",
    "kube-runtime",
    "rustls",
    "tokio-rustls",
    "tokio-tungstenite",
    "notify",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The names of every crate `package` depends on, directly or not, for a normal build of it
/// alone (`cargo tree`: the features of that build, not the workspace's union).
fn dependencies(package: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .current_dir(workspace())
        .args([
            "tree",
            "--locked",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["--format", "{p}", "-p", package])
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("UTF-8")
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != package)
        .map(str::to_owned)
        .collect()
}

/// Every `.rs` file below `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            found.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    found
}

#[test]
fn the_engine_depends_on_no_io_crate() {
    let dependencies = dependencies("drift-engine");
    assert!(dependencies.contains("serde_json"), "{dependencies:?}");
    let io: Vec<_> = IO_CRATES
        .iter()
        .filter(|name| dependencies.contains(**name))
        .collect();
    assert!(io.is_empty(), "drift-engine depends on {io:?}");
}

#[test]
fn the_engine_reads_no_file_network_process_or_environment() {
    let forbidden = ["std::fs", "std::net", "std::process", "std::env"];
    for path in sources(&workspace().join("engine/src")) {
        let text = std::fs::read_to_string(&path).unwrap();
        for name in forbidden {
            assert!(!text.contains(name), "{} uses {name}", path.display());
        }
    }
}

#[test]
fn the_api_types_do_not_depend_on_the_engine() {
    let dependencies = dependencies("drift-api");
    assert!(dependencies.contains("serde"), "{dependencies:?}");
    assert!(
        !dependencies.contains("drift-engine"),
        "drift-api depends on drift-engine"
    );
}

/// The `crate::`, `super::` and `self::` paths a file names outside comments.
fn crate_paths(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .filter(|code| {
            ["crate::", "super::", "self::"]
                .iter()
                .any(|p| code.contains(p))
        })
        .map(|code| code.trim().to_owned())
        .collect()
}

#[test]
fn the_agent_command_line_imports_nothing_of_the_agent() {
    let cli = workspace().join("agent/src/cli.rs");
    let text = std::fs::read_to_string(&cli).unwrap();
    // Its tests may use it (`use super::*`); what is built into the program may not.
    let built = text.split("#[cfg(test)]").next().unwrap();
    let named: Vec<_> = built
        .lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .filter(|code| code.contains("crate::") || code.contains("super::"))
        .collect();
    assert!(named.is_empty(), "agent/src/cli.rs imports {named:?}");
}

#[test]
fn no_lower_module_of_the_agent_reads_the_command_line() {
    // The export's modules (the demonstration reader among them) take what they need as
    // values: an arrow from them to `cli` would point back up.
    for path in sources(&workspace().join("agent/src/export")) {
        let named: Vec<_> = crate_paths(&path)
            .into_iter()
            .filter(|code| code.contains("crate::cli"))
            .collect();
        assert!(
            named.is_empty(),
            "{} reads the command line: {named:?}",
            path.display()
        );
    }
}
