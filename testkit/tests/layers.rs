//! The workspace's layers, checked on every `cargo test --workspace` (issue 44): the engine is
//! pure (no I/O crate among its dependencies, no file, network, process or environment access
//! in its sources), the API types do not depend on the engine, and the agent's command line is
//! a leaf that imports nothing of the agent (so no module's defaults make a circle with it),
//! and no two files of the agent or the plugin import each other, directly or round a circle.

use std::collections::{BTreeMap, BTreeSet};
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

/// A crate's modules, each with the file it is written in (an inline module is its file's),
/// found from the crate root by its `mod` declarations (`#[path]` honoured).
#[derive(Default)]
struct Modules {
    files: BTreeMap<Vec<String>, PathBuf>,
    /// The children of each module, by name.
    children: BTreeMap<Vec<String>, BTreeSet<String>>,
}

impl Modules {
    fn of(root: &Path) -> Self {
        let mut modules = Self::default();
        modules.read(root, Vec::new(), root.parent().unwrap().to_owned());
        modules
    }

    /// Reads `file`, the module `path`, whose children without `#[path]` are in `dir`.
    fn read(&mut self, file: &Path, path: Vec<String>, dir: PathBuf) {
        let text = std::fs::read_to_string(file).unwrap();
        let parsed = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("{} does not parse: {e}", file.display()));
        self.items(file, &parsed.items, path, &dir);
    }

    fn items(&mut self, file: &Path, items: &[syn::Item], path: Vec<String>, dir: &Path) {
        self.files.insert(path.clone(), file.to_owned());
        for item in items {
            let syn::Item::Mod(module) = item else {
                continue;
            };
            let name = module.ident.to_string();
            self.children
                .entry(path.clone())
                .or_default()
                .insert(name.clone());
            let mut child = path.clone();
            child.push(name.clone());
            let declared = module.attrs.iter().find_map(|attr| match &attr.meta {
                syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
                    syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(s),
                        ..
                    }) => Some(s.value()),
                    _ => None,
                },
                _ => None,
            });
            match (&module.content, declared) {
                (Some((_, inner)), _) => self.items(file, inner, child, &dir.join(&name)),
                (None, Some(relative)) => {
                    let found = file.parent().unwrap().join(relative);
                    self.read(&found, child, dir.join(&name));
                }
                (None, None) => {
                    let flat = dir.join(format!("{name}.rs"));
                    let found = if flat.exists() {
                        flat
                    } else {
                        dir.join(&name).join("mod.rs")
                    };
                    self.read(&found, child, dir.join(&name));
                }
            }
        }
    }

    /// The file that `segments`, named in module `from`, leads to: its longest prefix that is
    /// a module. None for what is outside the crate (another crate, `std`, a local name).
    fn resolve(&self, from: &[String], segments: &[String]) -> Option<&PathBuf> {
        let mut at: Vec<String> = Vec::new();
        let mut rest = segments;
        match segments.first().map(String::as_str) {
            Some("crate") => rest = &segments[1..],
            Some("self") | Some("super") => {
                at = from.to_vec();
                while let Some(first) = rest.first() {
                    match first.as_str() {
                        "self" => {}
                        "super" => {
                            at.pop();
                        }
                        _ => break,
                    }
                    rest = &rest[1..];
                }
            }
            // A child of the module it is named in (`series::Store` in `events`; a lone name is
            // a local one).
            Some(first)
                if segments.len() > 1
                    && self
                        .children
                        .get(from)
                        .is_some_and(|names| names.contains(first)) =>
            {
                at = from.to_vec();
            }
            _ => return None,
        }
        let mut best = self.files.get(&at);
        for segment in rest {
            at.push(segment.clone());
            match self.files.get(&at) {
                Some(file) => best = Some(file),
                None => break,
            }
        }
        best
    }
}

/// The paths a file names (in `use` trees, expressions, types, patterns and macro bodies), each
/// with the module it is named in.
struct Named<'m> {
    module: Vec<String>,
    found: Vec<(Vec<String>, Vec<String>)>,
    modules: &'m Modules,
}

impl Named<'_> {
    fn record(&mut self, segments: Vec<String>) {
        if !segments.is_empty() {
            self.found.push((self.module.clone(), segments));
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut path = prefix.clone();
                path.push(n.ident.to_string());
                self.record(path);
            }
            syn::UseTree::Rename(r) => {
                let mut path = prefix.clone();
                path.push(r.ident.to_string());
                self.record(path);
            }
            syn::UseTree::Glob(_) => self.record(prefix.clone()),
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(prefix, tree);
                }
            }
        }
    }
}

impl<'ast> syn::visit::Visit<'ast> for Named<'_> {
    fn visit_item_mod(&mut self, module: &'ast syn::ItemMod) {
        // A `mod` declaration is not an import; an inline module's items are named in it.
        if let Some((_, items)) = &module.content {
            self.module.push(module.ident.to_string());
            if self.modules.files.contains_key(&self.module) {
                for item in items {
                    self.visit_item(item);
                }
            }
            self.module.pop();
        }
    }

    /// `pub(crate)`, `pub(super)`: who may see an item, not an import.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &item.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            self.record(path.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        syn::visit::visit_macro(self, mac);
        // Its body is tokens: the paths in it read as `a :: b :: c`.
        let text = mac.tokens.to_string();
        let words: Vec<&str> = text.split_whitespace().collect();
        let mut i = 0;
        while i < words.len() {
            let mut segments = vec![words[i].to_owned()];
            let mut j = i;
            while words.get(j + 1) == Some(&"::") && words.get(j + 2).is_some() {
                segments.push(words[j + 2].to_owned());
                j += 2;
            }
            if segments.len() > 1 {
                self.record(segments);
            }
            i = j + 1;
        }
    }
}

/// Which file imports which, in the crate whose root is `root` (self-imports left out).
fn imports(root: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let modules = Modules::of(root);
    let mut graph: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    // Each file once, from the module it is the file of (an inline one is visited within it).
    let mut roots: BTreeMap<&PathBuf, &Vec<String>> = BTreeMap::new();
    for (module, file) in &modules.files {
        roots.entry(file).or_insert(module);
    }
    for (file, module) in roots {
        let text = std::fs::read_to_string(file).unwrap();
        let parsed = syn::parse_file(&text).unwrap();
        let mut named = Named {
            module: module.clone(),
            found: Vec::new(),
            modules: &modules,
        };
        syn::visit::Visit::visit_file(&mut named, &parsed);
        let targets = graph.entry(file.clone()).or_default();
        for (from, segments) in &named.found {
            if let Some(target) = modules.resolve(from, segments)
                && target != file
            {
                targets.insert(target.clone());
            }
        }
    }
    graph
}

/// The strongly connected components of more than one file, each sorted, in file order.
fn circles(graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    let mut imports = petgraph::graphmap::DiGraphMap::<&PathBuf, ()>::new();
    for (from, targets) in graph {
        imports.add_node(from);
        for to in targets {
            imports.add_edge(from, to, ());
        }
    }
    let mut found: Vec<Vec<PathBuf>> = petgraph::algo::tarjan_scc(&imports)
        .into_iter()
        .filter(|component| component.len() > 1)
        .map(|component| {
            let mut files: Vec<PathBuf> = component.into_iter().cloned().collect();
            files.sort();
            files
        })
        .collect();
    found.sort();
    found
}

/// The circles of `crate_dir`'s library, each with the imports that close it, for a message.
fn circles_of(crate_dir: &str) -> Vec<String> {
    let src = workspace().join(crate_dir).join("src");
    let graph = imports(&src.join("lib.rs"));
    let name = |p: &PathBuf| p.strip_prefix(&src).unwrap_or(p).display().to_string();
    circles(&graph)
        .into_iter()
        .map(|component| {
            let members: BTreeSet<_> = component.iter().collect();
            let arrows: Vec<String> = component
                .iter()
                .flat_map(|from| {
                    graph[from]
                        .iter()
                        .filter(|to| members.contains(to))
                        .map(move |to| format!("{} → {}", name(from), name(to)))
                })
                .collect();
            arrows.join(", ")
        })
        .collect()
}

#[test]
fn the_files_of_the_agent_import_each_other_in_no_circle() {
    let circles = circles_of("agent");
    assert!(circles.is_empty(), "circles in agent/src: {circles:#?}");
}

#[test]
fn the_files_of_the_plugin_import_each_other_in_no_circle() {
    let circles = circles_of("kubectl-drift");
    assert!(
        circles.is_empty(),
        "circles in kubectl-drift/src: {circles:#?}"
    );
}

#[test]
fn a_circle_of_imports_is_found() {
    let graph: BTreeMap<PathBuf, BTreeSet<PathBuf>> = [
        ("a.rs", vec!["b.rs"]),
        ("b.rs", vec!["c.rs"]),
        ("c.rs", vec!["a.rs", "d.rs"]),
        ("d.rs", vec![]),
        ("e.rs", vec!["d.rs"]),
    ]
    .into_iter()
    .map(|(from, to)| (from.into(), to.into_iter().map(PathBuf::from).collect()))
    .collect();
    let found = circles(&graph);
    assert_eq!(
        found,
        vec![vec![PathBuf::from("a.rs"), "b.rs".into(), "c.rs".into()]]
    );
}
