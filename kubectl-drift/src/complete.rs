//! Shell completion, both ways a shell gets it:
//!
//! - `kubectl drift completion bash|zsh|fish` prints clap_complete's script for the binary run
//!   as `kubectl-drift` (commands, flags, their values);
//! - `kubectl_complete-drift ARGS… PARTIAL`, the program kubectl ≥ 1.26 runs (from PATH) to
//!   complete `kubectl drift ARGS… PARTIAL<TAB>` — cobra's `__complete` protocol: one candidate
//!   a line (`value<TAB>description`), then `:DIRECTIVE`. Besides commands, flags and their
//!   values it completes from the cluster (the kubeconfig, `--context`, `-n` of the words
//!   typed): kinds from discovery, `KIND/NAME` from the objects of that kind, namespaces and
//!   contexts. A cluster that does not answer quickly completes nothing.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Command;
use clap_complete::Shell as Generator;

use crate::cli::{self, Shell};
use crate::cluster::{self, Cluster, collection_path};
use crate::plan::Kube;

/// The binary's own name.
const BIN: &str = "kubectl-drift";

/// How long the cluster may take to answer a completion.
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(5);

/// cobra's `ShellCompDirective`s.
const DEFAULT: u32 = 0;
const NO_SPACE: u32 = 2;
const NO_FILE_COMP: u32 = 4;

/// `kubectl drift completion SHELL`.
pub(crate) fn script(shell: Shell, out: &mut impl Write) -> anyhow::Result<()> {
    let generator = match shell {
        Shell::Bash => Generator::Bash,
        Shell::Zsh => Generator::Zsh,
        Shell::Fish => Generator::Fish,
    };
    writeln!(
        out,
        "# kubectl-drift completion for {shell:?}. For `kubectl drift <TAB>` (kubectl 1.26 or later),\n\
         # put kubectl_complete-drift on PATH next to kubectl-drift and load kubectl's completion."
    )?;
    let mut command = cli::command().display_name(BIN);
    if shell != Shell::Bash {
        clap_complete::generate(generator, &mut command, BIN, out);
        return Ok(());
    }
    // clap_complete's bash script names the functions of subcommands inconsistently when the
    // binary's name has a `-`: generated for `kubectl_drift`, registered for kubectl-drift.
    let mut script = Vec::new();
    clap_complete::generate(generator, &mut command, "kubectl_drift", &mut script);
    for line in String::from_utf8_lossy(&script).lines() {
        match line.trim_start().starts_with("complete -F") {
            true => writeln!(
                out,
                "{}",
                line.replace(" kubectl_drift", &format!(" {BIN}"))
            )?,
            false => writeln!(out, "{line}")?,
        }
    }
    Ok(())
}

/// The `kubectl_complete-drift` program: completes `args` (the last one the word being typed)
/// and prints the candidates and the directive.
pub async fn kubectl_complete(args: Vec<String>, out: &mut impl Write) -> std::io::Result<()> {
    let (candidates, directive) = complete(&args).await;
    for candidate in candidates {
        writeln!(out, "{candidate}")?;
    }
    writeln!(out, ":{directive}")
}

/// What the words before the one being typed say.
#[derive(Debug, Default, PartialEq, Eq)]
struct Words {
    /// The subcommand, once typed.
    command: Option<String>,
    /// The flag whose value is being typed (its long name).
    pending: Option<String>,
    /// Positional arguments typed after the subcommand.
    positionals: usize,
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
    namespace: Option<String>,
}

/// The arguments of `command` (its subcommand's, once chosen).
fn args_of<'c>(root: &'c Command, command: Option<&str>) -> Vec<&'c clap::Arg> {
    let cmd = command
        .and_then(|name| root.find_subcommand(name))
        .unwrap_or(root);
    cmd.get_arguments().collect()
}

/// The flag `word` names (`--long` or `-s`), if it is one of `args`.
fn flag<'a>(args: &[&'a clap::Arg], word: &str) -> Option<&'a clap::Arg> {
    if let Some(long) = word.strip_prefix("--") {
        return args.iter().find(|a| a.get_long() == Some(long)).copied();
    }
    let mut chars = word.strip_prefix('-')?.chars();
    let short = chars.next()?;
    args.iter()
        .find(|a| a.get_short() == Some(short))
        .copied()
        .filter(|_| chars.next().is_none())
}

fn takes_value(arg: &clap::Arg) -> bool {
    arg.get_action().takes_values()
}

fn read_words(root: &Command, typed: &[String]) -> Words {
    let mut words = Words::default();
    let mut typed = typed.iter();
    while let Some(word) = typed.next() {
        let args = args_of(root, words.command.as_deref());
        if let Some((name, value)) = word.strip_prefix("--").and_then(|w| w.split_once('=')) {
            remember(&mut words, name, value);
            continue;
        }
        if word.starts_with('-') && word.len() > 1 {
            let Some(arg) = flag(&args, word).filter(|a| takes_value(a)) else {
                continue;
            };
            let name = arg.get_long().unwrap_or_default().to_owned();
            match typed.next() {
                Some(value) => remember(&mut words, &name, value),
                None => words.pending = Some(name),
            }
            continue;
        }
        if words.command.is_none() {
            words.command = Some(word.clone());
        } else {
            words.positionals += 1;
        }
    }
    words
}

fn remember(words: &mut Words, name: &str, value: &str) {
    let value = value.to_owned();
    match name {
        "kubeconfig" => words.kubeconfig = Some(PathBuf::from(value)),
        "context" => words.context = Some(value),
        "namespace" => words.namespace = Some(value),
        _ => {}
    }
}

fn described(name: &str, about: Option<&clap::builder::StyledStr>) -> String {
    match about.map(|a| a.to_string()) {
        Some(about) if !about.is_empty() => {
            let first = about.lines().next().unwrap_or_default();
            format!("{name}\t{}", first.trim_end_matches('.'))
        }
        _ => name.to_owned(),
    }
}

/// The candidates for the last of `args`, and the directive.
async fn complete(args: &[String]) -> (Vec<String>, u32) {
    let root = cli::command();
    let (partial, typed) = match args.split_last() {
        Some((partial, typed)) => (partial.as_str(), typed),
        None => ("", &[][..]),
    };
    let words = read_words(&root, typed);
    if let Some(name) = &words.pending {
        return values(&root, &words, name, partial, "").await;
    }
    if let Some((name, value)) = partial.strip_prefix("--").and_then(|p| p.split_once('=')) {
        let prefix = format!("--{name}=");
        return values(&root, &words, name, value, &prefix).await;
    }
    if partial.starts_with('-') {
        return (flags(&root, &words, partial), NO_FILE_COMP);
    }
    let Some(command) = words.command.as_deref() else {
        let commands = root
            .get_subcommands()
            .filter(|c| c.get_name().starts_with(partial) && c.get_name() != "help")
            .map(|c| described(c.get_name(), c.get_about()))
            .collect();
        return (commands, NO_FILE_COMP);
    };
    match command {
        "explain" | "preview" | "blame" | "bypass" if words.positionals == 0 => {
            target(&words, partial).await
        }
        "completion" if words.positionals == 0 => {
            let shells = ["bash", "zsh", "fish"]
                .into_iter()
                .filter(|s| s.starts_with(partial))
                .map(str::to_owned)
                .collect();
            (shells, NO_FILE_COMP)
        }
        _ => (Vec::new(), NO_FILE_COMP),
    }
}

/// The flags of the command being typed that start with `partial`.
fn flags(root: &Command, words: &Words, partial: &str) -> Vec<String> {
    let args = args_of(root, words.command.as_deref());
    let mut names = Vec::new();
    for arg in args
        .iter()
        .filter(|a| !a.is_positional() && !a.is_hide_set())
    {
        let help = arg.get_help();
        if let Some(long) = arg.get_long() {
            names.push(described(&format!("--{long}"), help));
        }
        if let Some(short) = arg.get_short().filter(|_| !partial.starts_with("--")) {
            names.push(described(&format!("-{short}"), help));
        }
    }
    names.retain(|n| n.starts_with(partial));
    names
}

/// The values of flag `--name` that start with `partial`, each after `prefix`.
async fn values(
    root: &Command,
    words: &Words,
    name: &str,
    partial: &str,
    prefix: &str,
) -> (Vec<String>, u32) {
    let args = args_of(root, words.command.as_deref());
    let Some(arg) = args.iter().find(|a| a.get_long() == Some(name)) else {
        return (Vec::new(), NO_FILE_COMP);
    };
    let known: Vec<String> = arg
        .get_possible_values()
        .iter()
        .map(|v| v.get_name().to_owned())
        .collect();
    let found = if !known.is_empty() {
        known
    } else {
        match name {
            // Files: the shell completes them.
            "kubeconfig" | "filename" | "rules" | "namespace-file" | "old" | "new" => {
                return (Vec::new(), DEFAULT);
            }
            "context" => contexts(words),
            "namespace" | "agent-namespace" => namespaces(words).await,
            _ => Vec::new(),
        }
    };
    let candidates = found
        .into_iter()
        .filter(|v| v.starts_with(partial))
        .map(|v| format!("{prefix}{v}"))
        .collect();
    (candidates, NO_FILE_COMP)
}

/// `KIND/NAME`: kinds (with the `/` to go on with the name), then the objects of that kind.
async fn target(words: &Words, partial: &str) -> (Vec<String>, u32) {
    let Some(cluster) = connect(words).await else {
        return (Vec::new(), NO_FILE_COMP);
    };
    match partial.split_once('/') {
        None => {
            let kinds = crate::live::kinds(&cluster).await.unwrap_or_default();
            let candidates = kinds
                .into_iter()
                .filter(|k| k.starts_with(partial))
                .map(|k| format!("{k}/"))
                .collect();
            (candidates, NO_SPACE | NO_FILE_COMP)
        }
        Some((kind, name)) => {
            let namespace = words
                .namespace
                .clone()
                .unwrap_or_else(|| cluster.default_namespace.clone());
            let names = crate::live::names(&cluster, kind, &namespace)
                .await
                .unwrap_or_default();
            let candidates = names
                .into_iter()
                .filter(|n| n.starts_with(name))
                .map(|n| format!("{kind}/{n}"))
                .collect();
            (candidates, NO_FILE_COMP)
        }
    }
}

/// The cluster of the words typed, within the completion's time; `None` when there is none.
async fn connect(words: &Words) -> Option<Cluster> {
    let kube = Kube {
        kubeconfig: words.kubeconfig.clone(),
        context: words.context.clone(),
        namespace: words.namespace.clone(),
        timeout: Some(CLUSTER_TIMEOUT),
    };
    cluster::connect(&kube, "").await.ok()
}

async fn namespaces(words: &Words) -> Vec<String> {
    let Some(cluster) = connect(words).await else {
        return Vec::new();
    };
    let listed = cluster
        .list(&collection_path("", "v1", None, "namespaces"), true)
        .await
        .unwrap_or_default();
    listed
        .iter()
        .filter_map(|n| n.pointer("/metadata/name").and_then(|v| v.as_str()))
        .map(str::to_owned)
        .collect()
}

/// The contexts of the kubeconfig (`--kubeconfig`, else `KUBECONFIG`, else ~/.kube/config).
fn contexts(words: &Words) -> Vec<String> {
    let config = match &words.kubeconfig {
        Some(path) => kube::config::Kubeconfig::read_from(path),
        None => kube::config::Kubeconfig::read(),
    };
    config
        .map(|c| c.contexts.into_iter().map(|c| c.name).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(typed: &[&str]) -> Words {
        let typed: Vec<String> = typed.iter().map(|w| (*w).to_owned()).collect();
        read_words(&cli::command(), &typed)
    }

    async fn candidates(args: &[&str]) -> (Vec<String>, u32) {
        let args: Vec<String> = args.iter().map(|w| (*w).to_owned()).collect();
        complete(&args).await
    }

    #[test]
    fn the_words_typed() {
        let w = words(&["explain", "-n", "prod", "--context=kind", "deploy/web"]);
        assert_eq!(w.command.as_deref(), Some("explain"));
        assert_eq!(w.namespace.as_deref(), Some("prod"));
        assert_eq!(w.context.as_deref(), Some("kind"));
        assert_eq!(w.positionals, 1);
        assert_eq!(w.pending, None);
        let w = words(&["status", "--agent-namespace"]);
        assert_eq!(w.pending.as_deref(), Some("agent-namespace"));
        // A flag without a value does not take the next word.
        let w = words(&["preview", "--server-dry-run", "deploy/web"]);
        assert_eq!(w.positionals, 1);
    }

    #[tokio::test]
    async fn commands_flags_and_their_values() {
        let (found, directive) = candidates(&["ex"]).await;
        assert_eq!(directive, NO_FILE_COMP);
        assert_eq!(found.len(), 1);
        assert!(found[0].starts_with("explain\t"), "{found:?}");
        let (found, _) = candidates(&[""]).await;
        let names: Vec<&str> = found
            .iter()
            .map(|c| c.split('\t').next().unwrap())
            .collect();
        // Every command, in the order `--help` lists them (the binary's test pins the names).
        let commands = crate::cli::command();
        let listed: Vec<&str> = commands
            .get_subcommands()
            .filter(|c| !c.is_hide_set())
            .map(|c| c.get_name())
            .collect();
        assert_eq!(names, listed);
        assert!(names.contains(&"bypass"), "{names:?}");
        let (found, _) = candidates(&["status", "--agent-n"]).await;
        assert_eq!(found.len(), 1);
        assert!(found[0].starts_with("--agent-namespace\t"), "{found:?}");
        let (found, _) = candidates(&["tail", "-o", ""]).await;
        assert_eq!(found, ["text", "json", "yaml"]);
        let (found, _) = candidates(&["tail", "--source="]).await;
        assert_eq!(found, ["--source=webhook", "--source=audit"]);
        let (found, _) = candidates(&["completion", "f"]).await;
        assert_eq!(found, ["fish"]);
        // Files are the shell's to complete.
        let (found, directive) = candidates(&["preview", "-f", ""]).await;
        assert!(found.is_empty());
        assert_eq!(directive, DEFAULT);
    }

    #[test]
    fn scripts_for_each_shell() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let mut out = Vec::new();
            script(shell, &mut out).unwrap();
            let text = String::from_utf8(out).unwrap();
            assert!(text.contains("kubectl-drift"), "{shell:?}");
            assert!(text.contains("explain"), "{shell:?}");
        }
    }
}
