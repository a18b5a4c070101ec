//! The offline commands through the real binary: verdicts, exit codes, text and JSON output,
//! and discovery as a kubectl plugin.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/examples")
}

/// Runs the plugin with no cluster to reach: a command without `--rules` goes to the cluster,
/// and must fail here rather than talk to whatever the environment's kubeconfig points at.
/// `KUBECONFIG` names a file that does not exist (kubectl's choice, and the plugin's, before
/// `~/.kube/config`), `HOME` a directory that does not exist, and the in-cluster service
/// account's variables are removed.
fn plugin(args: &[&str]) -> Output {
    no_cluster(&mut Command::new(env!("CARGO_BIN_EXE_kubectl-drift")))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run kubectl-drift")
}

fn no_cluster(command: &mut Command) -> &mut Command {
    let nowhere = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kubectl-drift-offline-no-cluster");
    command
        .env("KUBECONFIG", nowhere.join("kubeconfig"))
        .env("HOME", nowhere.join("home"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

const DEPLOYMENT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: NAMESPACE\nspec:\n  replicas: REPLICAS\n  template:\n    spec:\n      containers:\n        - name: app\n          image: IMAGE\n";

fn deployment(namespace: &str, replicas: u32, image: &str) -> String {
    DEPLOYMENT
        .replace("NAMESPACE", namespace)
        .replace("REPLICAS", &replicas.to_string())
        .replace("IMAGE", image)
}

#[test]
fn preview_of_the_example_edit_is_denied_with_the_reason() {
    let examples = examples();
    let output = plugin(&[
        "preview",
        "--rules",
        examples.to_str().unwrap(),
        "--namespace-file",
        examples.join("namespaces.yaml").to_str().unwrap(),
        "--old",
        examples.join("deployment-before.yaml").to_str().unwrap(),
        "--new",
        examples.join("deployment-after.yaml").to_str().unwrap(),
    ]);
    let screen = text(&output);
    assert_eq!(output.status.code(), Some(1), "{screen}");
    for expected in [
        "Deployment prod-eu/checkout",
        "drift-sentinel/drift-sentinel-strict",
        "spec.replicas",
        "3 → 5",
        "spec.template.spec.containers[0].image",
        "denied",
        "Verdict: DENIED",
        "admission webhook \"validate.drift-sentinel.k8s.io\" denied the request: Drift Sentinel: immutable fields changed: spec.replicas, spec.template.spec.containers[0].image",
        "drift-sentinel.k8s.io/bypass",
    ] {
        assert!(
            screen.contains(expected),
            "missing {expected:?} in\n{screen}"
        );
    }
    assert!(
        screen.lines().count() < 30,
        "more than one screen:\n{screen}"
    );
}

fn rules_dir(dir: &Path) -> String {
    write(
        dir,
        "rules.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: images\n  namespace: ops\n  annotations:\n    drift-sentinel.k8s.io/rule: \"true\"\ndata:\n  spec: |\n    mode: enforce\n    namespaces: ['prod']\n    selectors: [{apiGroup: apps, kind: Deployment}]\n    exclude: ['metadata.labels']\n    mutable: ['spec.template.spec.containers[*].image']\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: staging\n  namespace: ops\n  annotations:\n    drift-sentinel.k8s.io/rule: \"true\"\ndata:\n  spec: |\n    mode: warn\n    namespaces: ['staging']\n    selectors: [{apiGroup: apps, kind: Deployment}]\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: broken\n  namespace: ops\n  annotations:\n    drift-sentinel.k8s.io/rule: \"true\"\ndata:\n  spec: |\n    mode: enforce\n    namespaces: ['*']\n    selectors: [{kind: Deployment}]\n    mutabel: [x]\n",
    )
}

#[test]
fn preview_exit_codes_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let rules = rules_dir(dir.path());
    let old = write(dir.path(), "old.yaml", &deployment("prod", 2, "nginx:1"));
    let image = write(dir.path(), "image.yaml", &deployment("prod", 2, "nginx:2"));
    let scaled = write(dir.path(), "scaled.yaml", &deployment("prod", 3, "nginx:1"));
    let staging_old = write(
        dir.path(),
        "s-old.yaml",
        &deployment("staging", 2, "nginx:1"),
    );
    let staging_new = write(
        dir.path(),
        "s-new.yaml",
        &deployment("staging", 3, "nginx:1"),
    );

    // A mutable-only change: exit 0, the change marked mutable.
    let output = plugin(&["preview", "--rules", &rules, "--old", &old, "--new", &image]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let screen = text(&output);
    assert!(
        screen.contains("mutable") && screen.contains("Verdict: ALLOWED"),
        "{screen}"
    );
    assert!(
        screen.contains("ops/broken"),
        "invalid rules are shown:\n{screen}"
    );

    // A denied change: exit 1; JSON carries the same verdict.
    let output = plugin(&[
        "preview", "--rules", &rules, "--old", &old, "--new", &scaled, "-o", "json",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let document: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(document["allowed"], false);
    assert_eq!(
        document["deniedPaths"],
        serde_json::json!(["spec.replicas"])
    );
    assert_eq!(document["rule"], "ops/images");
    assert_eq!(document["exitCode"], 1);
    assert!(
        document["apiServerMessage"]
            .as_str()
            .unwrap()
            .contains("Drift Sentinel: immutable fields changed: spec.replicas")
    );

    // A violation allowed by warn: exit 3.
    let output = plugin(&[
        "preview",
        "--rules",
        &rules,
        "--old",
        &staging_old,
        "--new",
        &staging_new,
    ]);
    assert_eq!(output.status.code(), Some(3), "{}", text(&output));
    assert!(
        text(&output).contains("Warning: Drift Sentinel: immutable fields changed: spec.replicas")
    );

    // Excluded changes are shown as such; YAML output parses.
    let labelled = write(
        dir.path(),
        "labelled.yaml",
        &deployment("prod", 2, "nginx:1").replace(
            "namespace: prod\n",
            "namespace: prod\n  labels:\n    tier: web\n",
        ),
    );
    let output = plugin(&[
        "preview", "--rules", &rules, "--old", &old, "--new", &labelled, "-o", "yaml",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let document: Value = serde_yaml::from_slice(&output.stdout).unwrap();
    let statuses: Vec<&str> = document["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["excluded"], "{document:#}");

    // A namespace file switches the mode: dry-run allows with exit 3.
    let namespaces = write(
        dir.path(),
        "ns.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: prod\n  annotations:\n    drift-sentinel.k8s.io/mode: dry-run\n",
    );
    let output = plugin(&[
        "preview",
        "--rules",
        &rules,
        "--namespace-file",
        &namespaces,
        "--old",
        &old,
        "--new",
        &scaled,
    ]);
    assert_eq!(output.status.code(), Some(3), "{}", text(&output));

    // The user's name is used: users-scoped rules see it.
    let output = plugin(&[
        "preview",
        "--rules",
        &rules,
        "--old",
        &old,
        "--new",
        &scaled,
        "--user",
        "system:serviceaccount:ci:deployer",
        "-o",
        "json",
    ]);
    let document: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(document["user"], "system:serviceaccount:ci:deployer");
}

#[test]
fn errors_exit_2_with_a_message_naming_what_was_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let rules = rules_dir(dir.path());
    let old = write(dir.path(), "old.yaml", &deployment("prod", 2, "nginx:1"));
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "preview".into(),
                "--rules".into(),
                rules.clone(),
                "--old".into(),
                old.clone(),
                "--new".into(),
                "/nope.yaml".into(),
            ],
            "/nope.yaml",
        ),
        (
            vec![
                "preview".into(),
                "--rules".into(),
                "/no/rules".into(),
                "--old".into(),
                old.clone(),
                "--new".into(),
                old.clone(),
            ],
            "/no/rules",
        ),
        (
            vec![
                "preview".into(),
                "--rules".into(),
                rules.clone(),
                "--old".into(),
                old.clone(),
            ],
            "--new",
        ),
        (vec!["preview".into(), "-f".into(), old.clone()], "--rules"),
        (vec!["explain".into(), "deploy/web".into()], "--rules"),
        (
            vec![
                "preview".into(),
                "--rules".into(),
                old.clone(),
                "--old".into(),
                old.clone(),
                "--new".into(),
                old.clone(),
            ],
            "no rule ConfigMaps",
        ),
        (
            vec![
                "preview".into(),
                "--rules".into(),
                rules.clone(),
                "--old".into(),
                old.clone(),
                "--new".into(),
                rules.clone(),
            ],
            "objects",
        ),
        (vec!["preview".into(), "--bogus".into()], "--bogus"),
    ];
    for (args, fragment) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = plugin(&args);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {}", text(&output));
        assert!(
            text(&output).contains(fragment),
            "{args:?}: missing {fragment:?} in {}",
            text(&output)
        );
    }
}

#[test]
fn explain_lists_every_rule_with_why() {
    let dir = tempfile::tempdir().unwrap();
    let rules = rules_dir(dir.path());
    let object = write(dir.path(), "web.yaml", &deployment("prod", 2, "nginx:1"));
    let output = plugin(&["explain", "--rules", &rules, "-f", &object]);
    let screen = text(&output);
    // The broken rule makes it exit 2, after the whole explanation, naming the rule.
    assert_eq!(output.status.code(), Some(2), "{screen}");
    assert!(
        String::from_utf8_lossy(&output.stderr).starts_with(
            "error: 1 invalid rule (the /validate-rule webhook refuses it): rule ConfigMap ops/broken"
        ),
        "{screen}"
    );
    for expected in [
        "WINS",
        "ops/images   cluster rule",
        "namespace \"prod\" matches none of staging",
        "Mutable: spec.template.spec.containers[*].image",
        "Exclude: metadata.labels",
        "Bypass:  annotation drift-sentinel.k8s.io/bypass not set",
        "Invalid rules",
        "mutabel",
    ] {
        assert!(
            screen.contains(expected),
            "missing {expected:?} in\n{screen}"
        );
    }
    let output = plugin(&["explain", "--rules", &rules, "-f", &object, "-o", "json"]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    let document: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(document["winner"], "ops/images");
    assert_eq!(document["mode"], "enforce");
    assert_eq!(document["rules"].as_array().unwrap().len(), 2);
}

/// `kubectl drift …` through the real kubectl, which finds the plugin on PATH.
#[test]
fn kubectl_discovers_the_plugin() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let kubectl = std::env::var_os("KUBECTL")
        .map(PathBuf::from)
        .or_else(|| Some(repo.join(".tools/bin/kubectl")).filter(|p| p.exists()))
        .expect("the real kubectl is needed: run `bash .ci/install-tools` (or set KUBECTL)");
    let plugin_dir = PathBuf::from(env!("CARGO_BIN_EXE_kubectl-drift"));
    let plugin_dir = plugin_dir.parent().unwrap();
    let path = format!(
        "{}:{}",
        plugin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let dir = tempfile::tempdir().unwrap();
    let rules = rules_dir(dir.path());
    let old = write(dir.path(), "old.yaml", &deployment("prod", 2, "nginx:1"));
    let new = write(dir.path(), "new.yaml", &deployment("prod", 5, "nginx:1"));
    let output = no_cluster(&mut Command::new(kubectl))
        .args([
            "drift", "preview", "--rules", &rules, "--old", &old, "--new", &new,
        ])
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    assert!(
        text(&output).contains("Verdict: DENIED"),
        "{}",
        text(&output)
    );
}

/// Issue 16: `preview` denies a scalar that an `exclude` pattern only reaches below.
#[test]
fn preview_denies_a_scalar_that_an_exclude_only_reaches_below() {
    let dir = tempfile::tempdir().unwrap();
    let rules = write(
        dir.path(),
        "rules.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: r\n  namespace: ops\n  annotations:\n    drift-sentinel.k8s.io/rule: \"true\"\ndata:\n  spec: |\n    mode: enforce\n    namespaces: ['*']\n    selectors: [{apiGroup: apps, kind: Deployment}]\n    exclude: ['spec.*.metadata.annotations']\n",
    );
    let old = write(dir.path(), "old.yaml", &deployment("prod", 2, "nginx"));
    let new = write(dir.path(), "new.yaml", &deployment("prod", 5, "nginx"));
    let output = plugin(&[
        "preview", "--rules", &rules, "--old", &old, "--new", &new, "-o", "json",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let document: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(
        document["deniedPaths"],
        serde_json::json!(["spec.replicas"]),
        "{document:#}"
    );
    assert_eq!(document["allowed"], false, "{document:#}");
}

/// `--color`: `always` colours even on a pipe and with NO_COLOR, `never` never; `auto` colours a
/// terminal (here `script`'s pseudo-terminal) unless NO_COLOR is set.
#[test]
fn colour_follows_color_and_no_color() {
    let examples = examples();
    let args = |colour: &str| {
        vec![
            "preview".to_owned(),
            "--rules".to_owned(),
            examples.to_str().unwrap().to_owned(),
            "--old".to_owned(),
            examples
                .join("deployment-before.yaml")
                .display()
                .to_string(),
            "--new".to_owned(),
            examples.join("deployment-after.yaml").display().to_string(),
            "--color".to_owned(),
            colour.to_owned(),
        ]
    };
    let red_denied = "\x1b[1;31mDENIED\x1b[0m";
    let run = |colour: &str| {
        let args = args(colour);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        text(&plugin(&args))
    };
    // plugin() sets NO_COLOR and reads through a pipe.
    assert!(run("always").contains(red_denied));
    assert!(!run("never").contains('\x1b'));
    assert!(!run("auto").contains('\x1b'));

    let on_a_terminal = |no_color: bool| {
        let command = std::iter::once(env!("CARGO_BIN_EXE_kubectl-drift").to_owned())
            .chain(args("auto"))
            .map(|a| format!("'{a}'"))
            .collect::<Vec<_>>()
            .join(" ");
        let mut script = Command::new("script");
        script.args(["-qec", &command, "/dev/null"]);
        if no_color {
            script.env("NO_COLOR", "1");
        } else {
            script.env_remove("NO_COLOR");
        }
        let output = no_cluster(&mut script)
            .output()
            .expect("script (util-linux) runs the plugin on a pseudo-terminal");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    assert!(on_a_terminal(false).contains(red_denied));
    let plain = on_a_terminal(true);
    assert!(
        plain.contains("Verdict: DENIED") && !plain.contains('\x1b'),
        "{plain}"
    );
}

/// A rule ConfigMap in `namespace` holding `spec`.
fn rule(namespace: &str, name: &str, spec: &str) -> String {
    let spec: String = spec.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\n  annotations:\n    drift-sentinel.k8s.io/rule: \"true\"\ndata:\n  spec: |\n{spec}"
    )
}

/// The platform's rule (images only, in prod-*) and a tenant's switch-off rule in team-a.
fn platform_and_tenant(dir: &Path) -> String {
    write(
        dir,
        "rules.yaml",
        &format!(
            "{}---\n{}",
            rule(
                "drift-system",
                "platform",
                "mode: enforce\nnamespaces: ['prod-*']\nselectors: [{apiGroup: apps, kind: Deployment}]\nmutable: ['spec.template.spec.containers[*].image']"
            ),
            rule(
                "team-a",
                "switch-off",
                "mode: 'off'\npriority: 100000\nnamespaces: ['*']\nselectors: [{apiGroup: '*', kind: '*'}]"
            )
        ),
    )
}

/// SPEC §2: offline files are cluster rules unless `--cluster-rule-namespaces` is given; with
/// it, a ConfigMap outside those namespaces is a namespace rule, as the agent loads it.
#[test]
fn cluster_rule_namespaces_offline() {
    let dir = tempfile::tempdir().unwrap();
    let rules = platform_and_tenant(dir.path());
    let old = write(
        dir.path(),
        "old.yaml",
        &deployment("prod-shop", 2, "nginx:1"),
    );
    let new = write(
        dir.path(),
        "new.yaml",
        &deployment("prod-shop", 5, "nginx:1"),
    );

    // Without the flag, as before: the tenant's rule is a cluster rule and switches it off.
    let output = plugin(&["preview", "--rules", &rules, "--old", &old, "--new", &new]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    assert!(
        text(&output).contains("Rule:    team-a/switch-off (cluster rule"),
        "{}",
        text(&output)
    );
    let output = plugin(&["explain", "--rules", &rules, "-f", &old]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    assert!(
        text(&output).contains("Winner:  team-a/switch-off (cluster rule)"),
        "{}",
        text(&output)
    );

    // With it, the platform's rule wins and denies; the tenant's is a namespace rule.
    for flag in ["drift-system", "drift-*,other"] {
        let output = plugin(&[
            "preview",
            "--rules",
            &rules,
            "--old",
            &old,
            "--new",
            &new,
            "--cluster-rule-namespaces",
            flag,
        ]);
        assert_eq!(output.status.code(), Some(1), "{flag}: {}", text(&output));
        assert!(
            text(&output).contains("Rule:    drift-system/platform (cluster rule"),
            "{}",
            text(&output)
        );
    }
    let output = plugin(&[
        "explain",
        "--rules",
        &rules,
        "-f",
        &old,
        "--cluster-rule-namespaces",
        "drift-system",
        "-o",
        "json",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let document: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(document["winner"], "drift-system/platform");
    let tenant = document["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"] == "team-a/switch-off")
        .unwrap();
    assert_eq!(tenant["tier"], "namespace");
    assert_eq!(
        tenant["reason"],
        "a namespace rule, and a cluster rule matches"
    );
    // In its own namespace, where no cluster rule matches, the tenant's rule acts.
    let own = write(dir.path(), "own.yaml", &deployment("team-a", 2, "nginx:1"));
    let output = plugin(&[
        "explain",
        "--rules",
        &rules,
        "-f",
        &own,
        "--cluster-rule-namespaces",
        "drift-system",
    ]);
    assert!(
        text(&output).contains("Winner:  team-a/switch-off (namespace rule)"),
        "{}",
        text(&output)
    );
    // `*`: every rule a cluster rule again; a bad glob is a usage error.
    let output = plugin(&[
        "preview",
        "--rules",
        &rules,
        "--old",
        &old,
        "--new",
        &new,
        "--cluster-rule-namespaces",
        "*",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let output = plugin(&[
        "explain",
        "--rules",
        &rules,
        "-f",
        &old,
        "--cluster-rule-namespaces",
        "[",
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(
        text(&output).contains("--cluster-rule-namespaces: invalid glob"),
        "{}",
        text(&output)
    );
}

/// Issue 17 item 2: `explain --rules` shows the linter's errors and warnings offline, worded as
/// the `/validate-rule` webhook words them, so a pipeline catches a typo; an invalid rule exits
/// 2 (after the explanation), warnings alone exit 0.
#[test]
fn explain_lints_the_rule_files() {
    let dir = tempfile::tempdir().unwrap();
    let object = write(dir.path(), "web.yaml", &deployment("prod", 2, "nginx:1"));
    let typo = write(
        dir.path(),
        "typo.yaml",
        &rule(
            "ops",
            "typo",
            "mode: enforce\nnamespaces: [prod]\nselectors: [{apiGroup: apps, kind: Deployment}]\nexclude: ['metadata.annotations']\nmutable: ['spec.template.spec.containerz[*].image', \"metadata.annotations['a']\"]\n",
        ),
    );
    let output = plugin(&["explain", "--rules", &typo, "-f", &object]);
    let screen = text(&output);
    assert_eq!(output.status.code(), Some(0), "warnings alone: {screen}");
    for expected in [
        "Rule warnings (the /validate-rule webhook admits these rules with them):",
        &format!(
            "{typo}: Warning: Drift Sentinel: rule ops/typo: mutable pattern spec.template.spec.containerz[*].image names a path that none of the selected kinds (apps/Deployment) has: check its spelling"
        ),
        &format!(
            "{typo}: Warning: Drift Sentinel: rule ops/typo: mutable pattern metadata.annotations.a lies inside the excluded subtree metadata.annotations: it is never compared"
        ),
    ] {
        assert!(
            screen.contains(expected),
            "missing {expected:?} in\n{screen}"
        );
    }
    let output = plugin(&["explain", "--rules", &typo, "-f", &object, "-o", "json"]);
    let document: Value = serde_json::from_slice(&output.stdout).unwrap();
    let warnings = document["ruleWarnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 2, "{document:#}");
    assert_eq!(warnings[0]["rule"], "ops/typo");
    assert_eq!(warnings[0]["origin"], typo.as_str());

    // A namespace rule reaching beyond its namespace is warned about with the flag.
    let rules = platform_and_tenant(dir.path());
    let output = plugin(&[
        "explain",
        "--rules",
        &rules,
        "-f",
        &object,
        "--cluster-rule-namespaces",
        "drift-system",
    ]);
    assert!(
        text(&output)
            .contains("Warning: Drift Sentinel: rule team-a/switch-off: this is a namespace rule"),
        "{}",
        text(&output)
    );

    // A misspelt key and `bypass: ""`: the line and column, and exit 2.
    let broken = write(
        dir.path(),
        "broken.yaml",
        &format!(
            "{}---\n{}",
            rule(
                "ops",
                "misspelt",
                "mode: enforce\nselectors: [{apiGroup: apps, kind: Deployment}]\nmutabel: [x]"
            ),
            rule(
                "ops",
                "empty-bypass",
                "mode: enforce\nselectors: [{apiGroup: apps, kind: Deployment}]\nbypass: \"\""
            )
        ),
    );
    let output = plugin(&["explain", "--rules", &broken, "-f", &object]);
    let screen = text(&output);
    assert_eq!(output.status.code(), Some(2), "{screen}");
    assert!(
        screen.contains(&format!(
            "rule ConfigMap ops/misspelt (from {broken}): data.spec line 3 column 1: field mutabel: unknown field `mutabel`"
        )),
        "{screen}"
    );
    assert!(
        screen.contains("rule ConfigMap ops/empty-bypass"),
        "{screen}"
    );
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .starts_with("error: 2 invalid rules (the /validate-rule webhook refuses them): "),
        "{screen}"
    );

    // `data.spec` written as a number (YAML reads `spec: 5` so): named as what it is, not as
    // a missing spec.
    let numeric = write(
        dir.path(),
        "numeric.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: numeric\n  namespace: ops\n  annotations:\n    drift-sentinel.k8s.io/rule: \"true\"\ndata:\n  spec: 5\n",
    );
    let output = plugin(&["explain", "--rules", &numeric, "-f", &object]);
    let screen = text(&output);
    assert_eq!(output.status.code(), Some(2), "{screen}");
    assert!(
        screen.contains(&format!(
            "rule ConfigMap ops/numeric (from {numeric}): field data.spec: expected the rule YAML as a string, found a number; write it as a block string (spec: |)"
        )),
        "{screen}"
    );
    assert!(!screen.contains("has no data.spec"), "{screen}");
}
