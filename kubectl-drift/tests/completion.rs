//! Shell completion for real: `kubectl __complete drift …` through the real kubectl (1.37, from
//! the control plane's build), which runs `kubectl_complete-drift` from PATH; the same in a real
//! `bash` with kubectl's completion loaded; and `kubectl drift completion bash` sourced in bash.
//! The cluster is the API server double (kinds from its discovery, objects from its store).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use drift_testkit::double::Double;
use serde_json::json;

fn deployment(namespace: &str, name: &str) -> serde_json::Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "nginx:1"}]}}}})
}

/// The double with Deployments `web` and `worker` in `prod`, `api` in `default` (the context's
/// namespace).
fn double() -> Double {
    let double = Double::builder().start();
    for namespace in ["prod", "default"] {
        double.api().apply(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
        );
    }
    double.api().apply(deployment("prod", "web"));
    double.api().apply(deployment("prod", "worker"));
    double.api().apply(deployment("default", "api"));
    double
}

/// The real kubectl: the control plane's (1.37), else the tools' one.
fn kubectl() -> PathBuf {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    [
        drift_testkit::cluster::kubectl_path(),
        repo.join(".tools/bin/kubectl"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .expect("a real kubectl is needed: run `bash .ci/build-cluster` or `bash .ci/install-tools`")
}

/// PATH with the plugin's binaries (kubectl-drift, kubectl_complete-drift) first.
fn path() -> String {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_kubectl-drift"));
    format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn run(mut command: Command, double: &Double) -> Output {
    command
        .env("PATH", path())
        .env("KUBECONFIG", double.kubeconfig())
        .env("HOME", double.dir())
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("run")
}

/// `kubectl __complete drift WORDS…`: the candidates (without descriptions) and the directive.
fn complete(double: &Double, words: &[&str]) -> (Vec<String>, String) {
    let mut command = Command::new(kubectl());
    command.arg("__complete").arg("drift").args(words);
    let output = run(command, double);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{words:?}: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut lines: Vec<&str> = stdout.lines().collect();
    let directive = lines.pop().unwrap_or_default().to_owned();
    let candidates = lines
        .iter()
        .map(|l| l.split('\t').next().unwrap_or_default().to_owned())
        .collect();
    (candidates, directive)
}

#[test]
fn kubectl_completes_commands_flags_kinds_and_names_through_kubectl_complete_drift() {
    let double = double();
    let (found, directive) = complete(&double, &[""]);
    assert_eq!(
        found,
        [
            "preview",
            "explain",
            "tail",
            "status",
            "audit",
            "blame",
            "bypass",
            "completion"
        ]
    );
    assert_eq!(directive, ":4");
    let (found, _) = complete(&double, &["ex"]);
    assert_eq!(found, ["explain"]);
    let (found, _) = complete(&double, &["status", "--agent-n"]);
    assert_eq!(found, ["--agent-namespace"]);
    let (found, _) = complete(&double, &["explain", "--color", ""]);
    assert_eq!(found, ["auto", "always", "never"]);

    // Kinds from discovery, with the `/` to go on (no space after it).
    let (found, directive) = complete(&double, &["explain", "deploy"]);
    assert_eq!(found, ["deployments/"], "{directive}");
    assert_eq!(directive, ":6");
    // Names of the objects of that kind, in -n's namespace, else the context's.
    let (found, _) = complete(&double, &["explain", "-n", "prod", "deploy/"]);
    assert_eq!(found, ["deploy/web", "deploy/worker"]);
    let (found, _) = complete(&double, &["preview", "-n", "prod", "deployments/wo"]);
    assert_eq!(found, ["deployments/worker"]);
    let (found, _) = complete(&double, &["blame", "-n", "prod", "deploy/w"]);
    assert_eq!(found, ["deploy/web", "deploy/worker"]);
    let (found, _) = complete(&double, &["explain", "deployment.apps/"]);
    assert_eq!(found, ["deployment.apps/api"]);
    // Namespaces and contexts.
    let (found, _) = complete(&double, &["explain", "-n", "pr"]);
    assert_eq!(found, ["prod"]);
    let (found, _) = complete(&double, &["tail", "--context", ""]);
    assert_eq!(found, ["double"]);
    // Files are the shell's.
    let (found, directive) = complete(&double, &["preview", "-f", ""]);
    assert!(found.is_empty(), "{found:?}");
    assert_eq!(directive, ":0");
}

#[test]
fn a_cluster_that_cannot_be_reached_completes_nothing_quickly() {
    let double = double();
    let gone = double.dir().join("gone");
    std::fs::write(
        &gone,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:9'}\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\nusers:\n- name: u\n  user: {token: t}\n",
    )
    .unwrap();
    let started = std::time::Instant::now();
    let gone = gone.to_str().unwrap();
    let (found, directive) = complete(&double, &["explain", "--kubeconfig", gone, "deploy/"]);
    assert!(found.is_empty(), "{found:?}");
    assert_eq!(directive, ":4");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

/// bash-completion, which kubectl's bash completion needs (`.ci/install-tools` installs it).
const BASH_COMPLETION: &str = "/usr/share/bash-completion/bash_completion";

/// The words a real bash completes for `LINE` (ending where the cursor is), with
/// bash-completion and `setup` sourced first, by the function `complete -p` names for the
/// line's command; `COMPREPLY` one per line.
fn bash_completes(double: &Double, setup: &str, line: &str) -> Vec<String> {
    assert!(
        Path::new(BASH_COMPLETION).is_file(),
        "bash-completion is needed: run `bash .ci/install-tools`"
    );
    let script = format!(
        "source {BASH_COMPLETION}\n{setup}\nCOMP_LINE={line:?}\nCOMP_POINT=${{#COMP_LINE}}\n\
         read -r -a COMP_WORDS <<< \"$COMP_LINE\"\n\
         [[ $COMP_LINE == *' ' ]] && COMP_WORDS+=('')\nCOMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))\n\
         function=$(complete -p \"${{COMP_WORDS[0]}}\" | sed 's/.*-F \\([^ ]*\\).*/\\1/')\n\
         \"$function\" \"${{COMP_WORDS[0]}}\" \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"\n"
    );
    let mut command = Command::new("bash");
    command.arg("--norc").arg("-c").arg(script);
    let output = run(command, double);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| l.trim_end().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn bash_with_kubectl_s_completion_completes_kubectl_drift() {
    let double = double();
    let kubectl = kubectl();
    let bin = kubectl.parent().unwrap().display().to_string();
    // kubectl's own script, as `source <(kubectl completion bash)` loads it.
    let setup = format!("export PATH={bin}:$PATH\nsource <(kubectl completion bash)");
    let found = bash_completes(&double, &setup, "kubectl drift ex");
    assert_eq!(found, ["explain"]);
    let found = bash_completes(&double, &setup, "kubectl drift explain -n prod deploy/w");
    assert_eq!(found, ["deploy/web", "deploy/worker"]);
}

#[test]
fn the_bash_script_of_kubectl_drift_completion_completes_kubectl_drift() {
    let double = double();
    let mut command = Command::new(env!("CARGO_BIN_EXE_kubectl-drift"));
    command.args(["completion", "bash"]);
    let output = run(command, &double);
    assert!(output.status.success());
    let script = double.dir().join("kubectl-drift.bash");
    std::fs::write(&script, &output.stdout).unwrap();
    let setup = format!("source {}", script.display());
    let found = bash_completes(&double, &setup, "kubectl-drift st");
    assert_eq!(found, ["status"]);
    let found = bash_completes(&double, &setup, "kubectl-drift tail --source ");
    assert_eq!(found, ["webhook", "audit"]);
}
