//! The offline commands through the real binary: verdicts, exit codes, text and JSON output,
//! and discovery as a kubectl plugin.
//!
//! Each case runs the plugin ([`run`], or [`preview`] and [`explain`] with their files) and
//! checks the [`Ran`]: its exit code, what it printed, its JSON or YAML document.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use drift_testkit::examples;
use serde_json::{Value, json};

/// Makes sure a command cannot reach a cluster: a command without `--rules` goes to the
/// cluster, and must fail here rather than talk to whatever the environment's kubeconfig points
/// at. `KUBECONFIG` names a file that does not exist (kubectl's choice, and the plugin's, before
/// `~/.kube/config`), `HOME` a directory that does not exist, and the in-cluster service
/// account's variables are removed.
fn no_cluster(command: &mut Command) -> &mut Command {
    let nowhere = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kubectl-drift-offline-no-cluster");
    command
        .env("KUBECONFIG", nowhere.join("kubeconfig"))
        .env("HOME", nowhere.join("home"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
}

/// A run of the plugin (or of kubectl running it): what it printed and how it exited.
struct Ran {
    args: Vec<String>,
    output: Output,
    /// stdout, then stderr.
    text: String,
}

impl Ran {
    fn of(args: &[&str], output: Output) -> Ran {
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Ran {
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            output,
            text,
        }
    }

    /// Asserts the exit code.
    fn exits(&self, code: i32) -> &Self {
        assert_eq!(
            self.output.status.code(),
            Some(code),
            "{:?}: {}",
            self.args,
            self.text
        );
        self
    }

    /// Asserts that stdout and stderr together hold each of `expected`.
    fn shows(&self, expected: &[&str]) -> &Self {
        for expected in expected {
            assert!(
                self.text.contains(expected),
                "{:?}: missing {expected:?} in\n{}",
                self.args,
                self.text
            );
        }
        self
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    /// stdout as a JSON document.
    fn json(&self) -> Value {
        serde_json::from_slice(&self.output.stdout)
            .unwrap_or_else(|e| panic!("{:?}: not JSON ({e}): {}", self.args, self.text))
    }

    /// stdout as a YAML document.
    fn yaml(&self) -> Value {
        serde_yaml::from_slice(&self.output.stdout)
            .unwrap_or_else(|e| panic!("{:?}: not YAML ({e}): {}", self.args, self.text))
    }
}

/// Runs the plugin with no cluster to reach ([`no_cluster`]) and without colours.
fn run(args: &[&str]) -> Ran {
    let output = no_cluster(&mut Command::new(env!("CARGO_BIN_EXE_kubectl-drift")))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run kubectl-drift");
    Ran::of(args, output)
}

/// `preview --rules RULES --old OLD --new NEW`, then `more`.
fn preview(rules: &str, old: &str, new: &str, more: &[&str]) -> Ran {
    let mut args = vec!["preview", "--rules", rules, "--old", old, "--new", new];
    args.extend(more);
    run(&args)
}

/// `explain --rules RULES -f OBJECT`, then `more`.
fn explain(rules: &str, object: &str, more: &[&str]) -> Ran {
    let mut args = vec!["explain", "--rules", rules, "-f", object];
    args.extend(more);
    run(&args)
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// An example file's path.
fn example(name: &str) -> String {
    examples().join(name).display().to_string()
}

const DEPLOYMENT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: NAMESPACE\nspec:\n  replicas: REPLICAS\n  template:\n    spec:\n      containers:\n        - name: app\n          image: IMAGE\n";

fn deployment(namespace: &str, replicas: u32, image: &str) -> String {
    DEPLOYMENT
        .replace("NAMESPACE", namespace)
        .replace("REPLICAS", &replicas.to_string())
        .replace("IMAGE", image)
}

/// A rule ConfigMap in `namespace` holding `spec`.
fn rule(namespace: &str, name: &str, spec: &str) -> String {
    let spec: String = spec.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\n  annotations:\n    drift-sentinel.k8s.io/rule: \"true\"\ndata:\n  spec: |\n{spec}"
    )
}

/// Three rules in ops: images (enforce in prod, images mutable, labels excluded), staging (warn
/// in staging) and broken (a misspelt key).
fn rules_dir(dir: &Path) -> String {
    write(
        dir,
        "rules.yaml",
        &[
            rule(
                "ops",
                "images",
                "mode: enforce\nnamespaces: ['prod']\nselectors: [{apiGroup: apps, kind: Deployment}]\nexclude: ['metadata.labels']\nmutable: ['spec.template.spec.containers[*].image']",
            ),
            rule(
                "ops",
                "staging",
                "mode: warn\nnamespaces: ['staging']\nselectors: [{apiGroup: apps, kind: Deployment}]",
            ),
            rule(
                "ops",
                "broken",
                "mode: enforce\nnamespaces: ['*']\nselectors: [{kind: Deployment}]\nmutabel: [x]",
            ),
        ]
        .join("---\n"),
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

#[test]
fn preview_of_the_example_edit_is_denied_with_the_reason() {
    let ran = preview(
        &examples().display().to_string(),
        &example("deployment-before.yaml"),
        &example("deployment-after.yaml"),
        &["--namespace-file", &example("namespaces.yaml")],
    );
    ran.exits(1).shows(&[
        "Deployment prod-eu/checkout",
        "drift-sentinel/drift-sentinel-strict",
        "spec.replicas",
        "3 → 5",
        "spec.template.spec.containers[0].image",
        "denied",
        "Verdict: DENIED",
        "admission webhook \"validate.drift-sentinel.k8s.io\" denied the request: Drift Sentinel: immutable fields changed: spec.replicas, spec.template.spec.containers[0].image",
        "drift-sentinel.k8s.io/bypass",
    ]);
    assert!(
        ran.text.lines().count() < 30,
        "more than one screen:\n{}",
        ran.text
    );
}

#[test]
fn preview_exit_codes_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, namespace: &str, replicas: u32, image: &str| {
        write(dir.path(), name, &deployment(namespace, replicas, image))
    };
    let rules = rules_dir(dir.path());
    let old = file("old.yaml", "prod", 2, "nginx:1");
    let image = file("image.yaml", "prod", 2, "nginx:2");
    let scaled = file("scaled.yaml", "prod", 3, "nginx:1");
    let staging_old = file("s-old.yaml", "staging", 2, "nginx:1");
    let staging_new = file("s-new.yaml", "staging", 3, "nginx:1");

    // A mutable-only change: exit 0, the change marked mutable; invalid rules are shown.
    preview(&rules, &old, &image, &[]).exits(0).shows(&[
        "mutable",
        "Verdict: ALLOWED",
        "ops/broken",
    ]);

    // A denied change: exit 1; JSON carries the same verdict.
    let document = preview(&rules, &old, &scaled, &["-o", "json"])
        .exits(1)
        .json();
    assert_eq!(document["allowed"], false);
    assert_eq!(document["deniedPaths"], json!(["spec.replicas"]));
    assert_eq!(document["rule"], "ops/images");
    assert_eq!(document["exitCode"], 1);
    assert!(
        document["apiServerMessage"]
            .as_str()
            .unwrap()
            .contains("Drift Sentinel: immutable fields changed: spec.replicas")
    );

    // A violation allowed by warn: exit 3.
    preview(&rules, &staging_old, &staging_new, &[])
        .exits(3)
        .shows(&["Warning: Drift Sentinel: immutable fields changed: spec.replicas"]);

    // Excluded changes are shown as such; YAML output parses.
    let labelled = write(
        dir.path(),
        "labelled.yaml",
        &deployment("prod", 2, "nginx:1").replace(
            "namespace: prod\n",
            "namespace: prod\n  labels:\n    tier: web\n",
        ),
    );
    let document = preview(&rules, &old, &labelled, &["-o", "yaml"])
        .exits(0)
        .yaml();
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
    preview(&rules, &old, &scaled, &["--namespace-file", &namespaces]).exits(3);

    // The user's name is used: users-scoped rules see it.
    let document = preview(
        &rules,
        &old,
        &scaled,
        &["--user", "system:serviceaccount:ci:deployer", "-o", "json"],
    )
    .json();
    assert_eq!(document["user"], "system:serviceaccount:ci:deployer");
}

#[test]
fn errors_exit_2_with_a_message_naming_what_was_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let rules = rules_dir(dir.path());
    let old = write(dir.path(), "old.yaml", &deployment("prod", 2, "nginx:1"));
    let (rules, old) = (rules.as_str(), old.as_str());
    for (args, fragment) in [
        (
            vec![
                "preview",
                "--rules",
                rules,
                "--old",
                old,
                "--new",
                "/nope.yaml",
            ],
            "/nope.yaml",
        ),
        (
            vec![
                "preview",
                "--rules",
                "/no/rules",
                "--old",
                old,
                "--new",
                old,
            ],
            "/no/rules",
        ),
        (vec!["preview", "--rules", rules, "--old", old], "--new"),
        (vec!["preview", "-f", old], "--rules"),
        (vec!["explain", "deploy/web"], "--rules"),
        (
            vec!["preview", "--rules", old, "--old", old, "--new", old],
            "no rule ConfigMaps",
        ),
        (
            vec!["preview", "--rules", rules, "--old", old, "--new", rules],
            "objects",
        ),
        (vec!["preview", "--bogus"], "--bogus"),
    ] {
        run(&args).exits(2).shows(&[fragment]);
    }
}

#[test]
fn explain_lists_every_rule_with_why() {
    let dir = tempfile::tempdir().unwrap();
    let rules = rules_dir(dir.path());
    let object = write(dir.path(), "web.yaml", &deployment("prod", 2, "nginx:1"));
    // The broken rule makes it exit 2, after the whole explanation, naming the rule.
    let ran = explain(&rules, &object, &[]);
    ran.exits(2).shows(&[
        "WINS",
        "ops/images   cluster rule",
        "namespace \"prod\" matches none of staging",
        "Mutable: spec.template.spec.containers[*].image",
        "Exclude: metadata.labels",
        "Bypass:  annotation drift-sentinel.k8s.io/bypass not set",
        "Invalid rules",
        "mutabel",
    ]);
    assert!(
        ran.stderr().starts_with(
            "error: 1 invalid rule (the /validate-rule webhook refuses it): rule ConfigMap ops/broken"
        ),
        "{}",
        ran.text
    );
    let document = explain(&rules, &object, &["-o", "json"]).exits(2).json();
    assert_eq!(document["winner"], "ops/images");
    assert_eq!(document["mode"], "enforce");
    assert_eq!(document["rules"].as_array().unwrap().len(), 2);
}

/// `kubectl drift …` through the real kubectl, which finds the plugin on PATH.
#[test]
fn kubectl_discovers_the_plugin() {
    let kubectl = std::env::var_os("KUBECTL")
        .map(PathBuf::from)
        .or_else(|| {
            Some(drift_testkit::workspace().join(".tools/bin/kubectl")).filter(|p| p.exists())
        })
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
    let args = [
        "drift", "preview", "--rules", &rules, "--old", &old, "--new", &new,
    ];
    let output = no_cluster(&mut Command::new(kubectl))
        .args(args)
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    Ran::of(&args, output).exits(1).shows(&["Verdict: DENIED"]);
}

/// Issue 16: `preview` denies a scalar that an `exclude` pattern only reaches below.
#[test]
fn preview_denies_a_scalar_that_an_exclude_only_reaches_below() {
    let dir = tempfile::tempdir().unwrap();
    let rules = write(
        dir.path(),
        "rules.yaml",
        &rule(
            "ops",
            "r",
            "mode: enforce\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\nexclude: ['spec.*.metadata.annotations']",
        ),
    );
    let old = write(dir.path(), "old.yaml", &deployment("prod", 2, "nginx"));
    let new = write(dir.path(), "new.yaml", &deployment("prod", 5, "nginx"));
    let document = preview(&rules, &old, &new, &["-o", "json"]).exits(1).json();
    assert_eq!(
        document["deniedPaths"],
        json!(["spec.replicas"]),
        "{document:#}"
    );
    assert_eq!(document["allowed"], false, "{document:#}");
}

/// `--color`: `always` colours even on a pipe and with NO_COLOR, `never` never; `auto` colours a
/// terminal (here `script`'s pseudo-terminal) unless NO_COLOR is set.
#[test]
fn colour_follows_color_and_no_color() {
    let (rules, old, new) = (
        examples().display().to_string(),
        example("deployment-before.yaml"),
        example("deployment-after.yaml"),
    );
    let red_denied = "\x1b[1;31mDENIED\x1b[0m";
    let coloured = |colour: &str| preview(&rules, &old, &new, &["--color", colour]).text;
    // run() sets NO_COLOR and reads through a pipe.
    assert!(coloured("always").contains(red_denied));
    assert!(!coloured("never").contains('\x1b'));
    assert!(!coloured("auto").contains('\x1b'));

    let on_a_terminal = |no_color: bool| {
        let command = [
            env!("CARGO_BIN_EXE_kubectl-drift"),
            "preview",
            "--rules",
            &rules,
            "--old",
            &old,
            "--new",
            &new,
            "--color",
            "auto",
        ]
        .map(|a| format!("'{a}'"))
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

/// reference §2: offline files are cluster rules unless `--cluster-rule-namespaces` is given; with
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
    let flag = "--cluster-rule-namespaces";

    // Without the flag, as before: the tenant's rule is a cluster rule and switches it off.
    preview(&rules, &old, &new, &[])
        .exits(0)
        .shows(&["Rule:    team-a/switch-off (cluster rule"]);
    explain(&rules, &old, &[])
        .exits(0)
        .shows(&["Winner:  team-a/switch-off (cluster rule)"]);

    // With it, the platform's rule wins and denies; the tenant's is a namespace rule.
    for namespaces in ["drift-system", "drift-*,other"] {
        preview(&rules, &old, &new, &[flag, namespaces])
            .exits(1)
            .shows(&["Rule:    drift-system/platform (cluster rule"]);
    }
    let document = explain(&rules, &old, &[flag, "drift-system", "-o", "json"])
        .exits(0)
        .json();
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
    explain(&rules, &own, &[flag, "drift-system"])
        .shows(&["Winner:  team-a/switch-off (namespace rule)"]);
    // `*`: every rule a cluster rule again; a bad glob is a usage error.
    preview(&rules, &old, &new, &[flag, "*"]).exits(0);
    explain(&rules, &old, &[flag, "["])
        .exits(2)
        .shows(&["--cluster-rule-namespaces: invalid glob"]);
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
    // Warnings alone.
    explain(&typo, &object, &[]).exits(0).shows(&[
        "Rule warnings (the /validate-rule webhook admits these rules with them):",
        &format!(
            "{typo}: Warning: Drift Sentinel: rule ops/typo: mutable pattern spec.template.spec.containerz[*].image names a path that none of the selected kinds (apps/Deployment) has: check its spelling"
        ),
        &format!(
            "{typo}: Warning: Drift Sentinel: rule ops/typo: mutable pattern metadata.annotations.a lies inside the excluded subtree metadata.annotations: it is never compared"
        ),
    ]);
    let document = explain(&typo, &object, &["-o", "json"]).json();
    let warnings = document["ruleWarnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 2, "{document:#}");
    assert_eq!(warnings[0]["rule"], "ops/typo");
    assert_eq!(warnings[0]["origin"], typo.as_str());

    // A namespace rule reaching beyond its namespace is warned about with the flag.
    let rules = platform_and_tenant(dir.path());
    explain(
        &rules,
        &object,
        &["--cluster-rule-namespaces", "drift-system"],
    )
    .shows(&["Warning: Drift Sentinel: rule team-a/switch-off: this is a namespace rule"]);

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
    let ran = explain(&broken, &object, &[]);
    ran.exits(2).shows(&[
        &format!(
            "rule ConfigMap ops/misspelt (from {broken}): data.spec line 3 column 1: field mutabel: unknown field `mutabel`"
        ),
        "rule ConfigMap ops/empty-bypass",
    ]);
    assert!(
        ran.stderr()
            .starts_with("error: 2 invalid rules (the /validate-rule webhook refuses them): "),
        "{}",
        ran.text
    );

    // `data.spec` written as a number (YAML reads `spec: 5` so): named as what it is, not as
    // a missing spec.
    let numeric = write(
        dir.path(),
        "numeric.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: numeric\n  namespace: ops\n  annotations:\n    drift-sentinel.k8s.io/rule: \"true\"\ndata:\n  spec: 5\n",
    );
    let ran = explain(&numeric, &object, &[]);
    ran.exits(2).shows(&[&format!(
        "rule ConfigMap ops/numeric (from {numeric}): field data.spec: expected the rule YAML as a string, found a number; write it as a block string (spec: |)"
    )]);
    assert!(!ran.text.contains("has no data.spec"), "{}", ran.text);
}
