//! Independent, black-box conformance cases for reference §2 (Rules), §3 (Decision), §4 (Paths and
//! diff) and §5 (Admission protocol). Every test starts the real `drift-sentinel` binary offline
//! (`--rules DIR --namespaces FILE`), posts AdmissionReviews to `/validate` over HTTP and checks
//! only what the specification requires of the response.
//!
//! The cases are table-driven: each table row is one request and its expected outcome; a test
//! runs all its rows and reports every row that does not conform.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use support::{Agent, plain_client, post, rule_config_map};

const PREFIX: &str = "Drift Sentinel: immutable fields changed: ";
/// The pod spec of a workload.
const T: &str = "spec.template.spec";
const DEPLOY: &str = "selectors: [{apiGroup: apps, kind: Deployment}]";

// ---------------------------------------------------------------------------------------------
// The agent under test
// ---------------------------------------------------------------------------------------------

struct Env {
    _dir: tempfile::TempDir,
    agent: Agent,
    client: reqwest::blocking::Client,
    url: String,
}

/// `(file name, content)` of rule files.
type Files = Vec<(String, String)>;

fn rule_files(rules: &[(&str, &str, String)]) -> Files {
    rules
        .iter()
        .enumerate()
        .map(|(i, (ns, name, spec))| {
            (
                format!("{i:03}-{ns}-{name}.yaml"),
                rule_config_map(ns, name, spec),
            )
        })
        .collect()
}

fn namespace_doc(name: &str, mode: Option<&str>) -> String {
    match mode {
        Some(mode) => format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  annotations:\n    drift-sentinel.k8s.io/mode: \"{mode}\"\n"
        ),
        None => format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n"),
    }
}

impl Env {
    fn start(files: Files, namespaces: &[(&str, Option<&str>)]) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let rules = dir.path().join("rules");
        std::fs::create_dir(&rules).unwrap();
        for (name, content) in files {
            std::fs::write(rules.join(name), content).unwrap();
        }
        let mut docs: Vec<String> = namespaces
            .iter()
            .map(|(name, mode)| namespace_doc(name, *mode))
            .collect();
        if docs.is_empty() {
            docs.push(namespace_doc("default", None));
        }
        let ns_file = dir.path().join("namespaces.yaml");
        std::fs::write(&ns_file, docs.join("---\n")).unwrap();
        let agent = Agent::start(
            &[
                "serve",
                "--rules",
                rules.to_str().unwrap(),
                "--namespaces",
                ns_file.to_str().unwrap(),
            ],
            false,
        );
        let url = format!("{}/validate", agent.base);
        Env {
            _dir: dir,
            agent,
            client: plain_client(),
            url,
        }
    }

    fn rules(rules: &[(&str, &str, String)], namespaces: &[(&str, Option<&str>)]) -> Env {
        Env::start(rule_files(rules), namespaces)
    }

    fn send(&self, review: &Value) -> (u16, Value) {
        post(&self.client, &self.url, review)
    }

    fn run(&self, cases: Vec<Case>) {
        let total = cases.len();
        let mut failures = Vec::new();
        for case in &cases {
            let (code, got) = self.send(&case.review);
            let errors = verify(case, code, &got);
            if !errors.is_empty() {
                failures.push(format!(
                    "[{}]\n    {}\n    response: {}",
                    case.name,
                    errors.join("\n    "),
                    got.get("response").unwrap_or(&got)
                ));
            }
        }
        assert!(
            failures.is_empty(),
            "{} of {total} cases do not conform:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------

static UID: AtomicUsize = AtomicUsize::new(0);

fn next_uid() -> String {
    format!("spec-case-{}", UID.fetch_add(1, Ordering::SeqCst))
}

/// An `admission.k8s.io/v1` UPDATE review of `old` → `new`, kind and namespace taken from `new`.
fn update(old: &Value, new: &Value) -> Value {
    let api_version = new["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = new["kind"].as_str().unwrap();
    let resource = format!("{}s", kind.to_lowercase());
    let gvk = json!({"group": group, "version": version, "kind": kind});
    let gvr = json!({"group": group, "version": version, "resource": resource});
    let mut request = json!({
        "uid": next_uid(),
        "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": new["metadata"]["name"],
        "operation": "UPDATE",
        "userInfo": {"username": "alice", "uid": "u-alice", "groups": ["system:authenticated"]},
        "object": new,
        "oldObject": old,
        "dryRun": false,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"}
    });
    if let Some(ns) = new["metadata"]["namespace"].as_str() {
        request["namespace"] = json!(ns);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

fn as_user(mut review: Value, user: &str) -> Value {
    review["request"]["userInfo"]["username"] = json!(user);
    review
}

/// A `<resource>/scale` UPDATE of the parent `group`/`resource`.
fn scale_review(
    ns: &str,
    group: &str,
    version: &str,
    resource: &str,
    old: i64,
    new: i64,
    new_labels: Value,
) -> Value {
    let scale = |replicas: i64, labels: Value| {
        json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
               "metadata": {"name": "web", "namespace": ns, "resourceVersion": "7", "uid": "0b1c", "labels": labels},
               "spec": {"replicas": replicas},
               "status": {"replicas": old, "selector": "app=web"}})
    };
    let gvk = json!({"group": "autoscaling", "version": "v1", "kind": "Scale"});
    let gvr = json!({"group": group, "version": version, "resource": resource});
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": next_uid(),
        "kind": gvk, "resource": gvr, "subResource": "scale",
        "requestKind": gvk, "requestResource": gvr, "requestSubResource": "scale",
        "name": "web", "namespace": ns, "operation": "UPDATE",
        "userInfo": {"username": "alice", "uid": "u-alice", "groups": ["system:authenticated"]},
        "object": scale(new, new_labels),
        "oldObject": scale(old, json!({"app": "web"})),
        "dryRun": false
    }})
}

// ---------------------------------------------------------------------------------------------
// Objects
// ---------------------------------------------------------------------------------------------

fn deployment(ns: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns, "labels": {"app": "web"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "nginx:1",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}]}
            }
        }
    })
}

fn object(api_version: &str, kind: &str, ns: Option<&str>, body: Value) -> Value {
    let mut o = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "obj"}});
    if let Some(ns) = ns {
        o["metadata"]["namespace"] = json!(ns);
    }
    for (k, v) in body.as_object().unwrap() {
        o[k] = v.clone();
    }
    o
}

fn edit(v: &Value, f: impl FnOnce(&mut Value)) -> Value {
    let mut c = v.clone();
    f(&mut c);
    c
}

fn replicas(v: &Value, n: i64) -> Value {
    edit(v, |o| o["spec"]["replicas"] = json!(n))
}

fn pod(v: &Value, field: &str, value: Value) -> Value {
    edit(v, |o| o["spec"]["template"]["spec"][field] = value)
}

fn ctrs(v: &Value, list: Value) -> Value {
    pod(v, "containers", list)
}

fn c(name: &str, image: &str) -> Value {
    json!({"name": name, "image": image})
}

fn with_annotations(v: &Value, annotations: Value) -> Value {
    edit(v, |o| o["metadata"]["annotations"] = annotations)
}

fn with_labels(v: &Value, labels: Value) -> Value {
    edit(v, |o| o["metadata"]["labels"] = labels)
}

/// `spec.template.spec` + suffix.
fn t(suffix: &str) -> String {
    format!("{T}{suffix}")
}

// ---------------------------------------------------------------------------------------------
// Expected outcomes
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Outcome {
    /// Allowed, no `auditAnnotations`.
    NoRule,
    /// Allowed with the rule named, the effective mode, `result: allowed`, no `denied-paths`.
    Allowed(String),
    /// `allowed: false`, 403, the reason listing exactly these paths.
    Denied(String),
    /// Allowed with the reason as one warning.
    Warned(String),
    /// Allowed, no warning, `result: would-deny`.
    WouldDeny(String),
}

#[derive(Clone, Debug)]
struct Expect {
    rule: String,
    outcome: Outcome,
    /// The invalid namespace mode annotation value that one warning must name.
    ns_warning: Option<String>,
}

impl Expect {
    fn ns_warning(mut self, value: &str) -> Self {
        self.ns_warning = Some(value.to_owned());
        self
    }
}

fn expect(rule: &str, outcome: Outcome) -> Expect {
    Expect {
        rule: rule.to_owned(),
        outcome,
        ns_warning: None,
    }
}
fn no_rule() -> Expect {
    expect("", Outcome::NoRule)
}
fn allow(rule: &str, mode: &str) -> Expect {
    expect(rule, Outcome::Allowed(mode.to_owned()))
}
fn deny(rule: &str, paths: impl Into<String>) -> Expect {
    expect(rule, Outcome::Denied(paths.into()))
}
fn warned(rule: &str, paths: impl Into<String>) -> Expect {
    expect(rule, Outcome::Warned(paths.into()))
}
fn would_deny(rule: &str, paths: impl Into<String>) -> Expect {
    expect(rule, Outcome::WouldDeny(paths.into()))
}

struct Case {
    name: String,
    review: Value,
    want: Expect,
}

fn case(name: impl Into<String>, review: Value, want: Expect) -> Case {
    Case {
        name: name.into(),
        review,
        want,
    }
}

/// `text` is the fixed prefix followed by exactly `paths` (not by a further path or a longer one).
fn lists_exactly(text: &str, paths: &str) -> bool {
    let Some(rest) = text
        .strip_prefix(PREFIX)
        .and_then(|t| t.strip_prefix(paths))
    else {
        return false;
    };
    let mut chars = rest.chars();
    match chars.next() {
        None => true,
        Some(',') => !rest.starts_with(", "),
        Some('.') => !chars
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_'),
        Some(c) => !(c.is_ascii_alphanumeric() || "_-[]'\"<".contains(c)),
    }
}

fn check_eq(errors: &mut Vec<String>, what: &str, actual: &Value, want: Value) {
    if *actual != want {
        errors.push(format!("{what} = {actual}, want {want}"));
    }
}

fn verify(case: &Case, code: u16, got: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    let sent = &case.review;
    if code != 200 {
        errors.push(format!("HTTP {code}, want 200"));
        return errors;
    }
    check_eq(
        &mut errors,
        "apiVersion",
        &got["apiVersion"],
        sent["apiVersion"].clone(),
    );
    check_eq(&mut errors, "kind", &got["kind"], json!("AdmissionReview"));
    let r = &got["response"];
    check_eq(
        &mut errors,
        "uid",
        &r["uid"],
        sent["request"]["uid"].clone(),
    );
    let ann = &r["auditAnnotations"];
    if let Some(keys) = ann.as_object() {
        for key in keys.keys().filter(|k| k.contains('/')) {
            errors.push(format!("auditAnnotations key {key:?} has a prefix"));
        }
    }
    let warnings: Vec<&str> = r["warnings"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let reasons: Vec<&str> = warnings
        .iter()
        .copied()
        .filter(|w| w.starts_with(PREFIX))
        .collect();
    let others: Vec<&str> = warnings
        .iter()
        .copied()
        .filter(|w| !w.starts_with(PREFIX))
        .collect();
    let want = &case.want;
    let ns_warnings = usize::from(want.ns_warning.is_some());
    if let Some(value) = &want.ns_warning {
        let naming = others.iter().filter(|w| w.contains(value.as_str())).count();
        if naming != 1 {
            errors.push(format!(
                "want one warning naming the invalid namespace mode {value:?}, got {warnings:?}"
            ));
        }
    }
    let annotations = |errors: &mut Vec<String>, mode: &str, result: &str, paths: Option<&str>| {
        check_eq(
            errors,
            "auditAnnotations.rule",
            &ann["rule"],
            json!(want.rule),
        );
        check_eq(errors, "auditAnnotations.mode", &ann["mode"], json!(mode));
        check_eq(
            errors,
            "auditAnnotations.result",
            &ann["result"],
            json!(result),
        );
        match paths {
            Some(paths) => check_eq(
                errors,
                "auditAnnotations.denied-paths",
                &ann["denied-paths"],
                json!(paths),
            ),
            None => {
                if ann.get("denied-paths").is_some() {
                    errors.push(format!(
                        "auditAnnotations.denied-paths = {}, want none",
                        ann["denied-paths"]
                    ));
                }
            }
        }
    };
    match &want.outcome {
        Outcome::NoRule => {
            errors.extend(annotations_none(ann));
            check_eq(&mut errors, "allowed", &r["allowed"], json!(true));
            errors
        }
        Outcome::Allowed(mode) => {
            annotations(&mut errors, mode, "allowed", None);
            check_eq(&mut errors, "allowed", &r["allowed"], json!(true));
            if !reasons.is_empty() {
                errors.push(format!("no violation warning expected, got {reasons:?}"));
            }
            errors
        }
        Outcome::Denied(paths) => {
            annotations(&mut errors, "enforce", "denied", Some(paths));
            check_eq(&mut errors, "allowed", &r["allowed"], json!(false));
            check_eq(&mut errors, "status.code", &r["status"]["code"], json!(403));
            let message = r["status"]["message"].as_str().unwrap_or_default();
            if !lists_exactly(message, paths) {
                errors.push(format!(
                    "status.message does not begin with {:?}",
                    format!("{PREFIX}{paths}")
                ));
            }
            // "then, for each (up to 10), `old → new` values …; then the rule (`namespace/name`)".
            let changes = paths.split(", ").count().min(10);
            if message.matches('→').count() != changes {
                errors.push(format!(
                    "status.message should show {changes} `old → new` values"
                ));
            }
            if !message.contains(&want.rule) {
                errors.push(format!(
                    "status.message does not name the rule {}",
                    want.rule
                ));
            }
            errors
        }
        Outcome::Warned(paths) => {
            annotations(&mut errors, "warn", "warned", Some(paths));
            check_eq(&mut errors, "allowed", &r["allowed"], json!(true));
            if reasons.len() != 1 {
                errors.push(format!(
                    "want exactly one violation warning, got {warnings:?}"
                ));
            } else {
                let w = reasons[0];
                if w.len() > 512 {
                    errors.push(format!("warning of {} bytes (> 512)", w.len()));
                }
                let full = format!("{PREFIX}{paths}");
                let ok = match w.strip_suffix('…') {
                    Some(body) => full.starts_with(body) || lists_exactly(w, paths),
                    None => lists_exactly(w, paths),
                };
                if !ok {
                    errors.push(format!("warning does not begin with {full:?}"));
                }
            }
            if others.len() != ns_warnings {
                errors.push(format!("unexpected warnings {others:?}"));
            }
            errors
        }
        Outcome::WouldDeny(paths) => {
            annotations(&mut errors, "dry-run", "would-deny", Some(paths));
            check_eq(&mut errors, "allowed", &r["allowed"], json!(true));
            if !reasons.is_empty() || others.len() != ns_warnings {
                errors.push(format!("dry-run gives no warning, got {warnings:?}"));
            }
            errors
        }
    }
}

fn annotations_none(ann: &Value) -> Vec<String> {
    if ann.is_null() || ann.as_object().is_some_and(|m| m.is_empty()) {
        Vec::new()
    } else {
        vec![format!("auditAnnotations = {ann}, want none")]
    }
}

fn response_of(review: &Value) -> &Value {
    &review["response"]
}

// ---------------------------------------------------------------------------------------------
// §2, §3 step 1: which rule matches
// ---------------------------------------------------------------------------------------------

#[test]
fn rule_matching_priority_ties_globs_selectors_labels() {
    let r = |mode: &str, priority: i64, namespaces: &str, rest: &str| {
        format!("mode: {mode}\npriority: {priority}\nnamespaces: {namespaces}\n{rest}\n")
    };
    let mut files = rule_files(&[
        (
            "ops",
            "glob-range",
            r("enforce", 0, "['rng-[0-9]']", DEPLOY),
        ),
        (
            "ops",
            "by-request-kind",
            r("enforce", 0, "[reqkind]", DEPLOY),
        ),
        (
            "ops",
            "core-any",
            r("enforce", 0, "[core-any]", "selectors: [{kind: '*'}]"),
        ),
        ("ops", "prio-low", r("enforce", 0, "[prio]", DEPLOY)),
        ("ops", "prio-high", r("warn", 10, "[prio]", DEPLOY)),
        ("ops", "prio-neg", r("enforce", -5, "[prio-neg]", DEPLOY)),
        (
            "ops",
            "prio-default",
            format!("mode: dry-run\nnamespaces: [prio-neg]\n{DEPLOY}\n"),
        ),
        // Ties: (namespace, name) as byte strings, ascending. "a" < "a-b" < "b" although
        // the joined "a-b/a" sorts before "a/z".
        ("b", "a", r("dry-run", 3, "[tie-ns]", DEPLOY)),
        ("a-b", "a", r("enforce", 3, "[tie-ns]", DEPLOY)),
        ("a", "z", r("warn", 3, "[tie-ns]", DEPLOY)),
        ("same", "rule-b", r("enforce", 1, "[tie-name]", DEPLOY)),
        ("same", "rule-a-x", r("dry-run", 1, "[tie-name]", DEPLOY)),
        ("same", "rule-a", r("warn", 1, "[tie-name]", DEPLOY)),
        ("ops", "glob-q", r("enforce", 0, "['team-?']", DEPLOY)),
        ("ops", "glob-set", r("enforce", 0, "['shop-[ab]']", DEPLOY)),
        (
            "ops",
            "cluster",
            r(
                "enforce",
                0,
                "['*']",
                "selectors: [{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole}]",
            ),
        ),
        (
            "ops",
            "kube-only",
            r(
                "enforce",
                0,
                "['kube-*']",
                "selectors: [{apiGroup: rbac.authorization.k8s.io, kind: ClusterRoleBinding}]",
            ),
        ),
        (
            "ops",
            "core",
            r("enforce", 0, "[sel]", "selectors: [{kind: ConfigMap}]"),
        ),
        (
            "ops",
            "core-empty",
            r(
                "enforce",
                0,
                "[sel]",
                "selectors: [{apiGroup: '', kind: Service}]",
            ),
        ),
        (
            "ops",
            "any-group",
            r(
                "enforce",
                0,
                "[sel]",
                "selectors: [{apiGroup: '*', kind: Widget}]",
            ),
        ),
        (
            "ops",
            "any-kind",
            r(
                "enforce",
                0,
                "[sel]",
                "selectors: [{apiGroup: batch, kind: '*'}]",
            ),
        ),
        (
            "ops",
            "labels",
            r(
                "enforce",
                0,
                "[lbl]",
                &format!("{DEPLOY}\nlabels: [tier=frontend, managed]"),
            ),
        ),
        (
            "ops",
            "multi",
            r(
                "enforce",
                0,
                "[multi, 'other-*']",
                "selectors: [{apiGroup: apps, kind: StatefulSet}, {apiGroup: apps, kind: Deployment}]",
            ),
        ),
    ]);
    // The rule annotation is compared case-insensitively after trimming.
    files.push((
        "annot-trim.yaml".into(),
        rule_config_map("ops", "annot-trim", &r("enforce", 0, "[annot]", DEPLOY)).replace(
            "drift-sentinel.k8s.io/rule: \"true\"",
            "drift-sentinel.k8s.io/rule: \" True \"",
        ),
    ));
    files.push((
        "annot-false.yaml".into(),
        rule_config_map(
            "ops",
            "annot-false",
            &r("enforce", 0, "[annot-false]", DEPLOY),
        )
        .replace(
            "drift-sentinel.k8s.io/rule: \"true\"",
            "drift-sentinel.k8s.io/rule: \"false\"",
        ),
    ));
    let env = Env::start(files, &[]);

    let scale_up = |ns: &str| {
        let d = deployment(ns);
        update(&d, &replicas(&d, 3))
    };
    let kind_change = |api: &str, kind: &str, ns: &str| {
        let old = object(api, kind, Some(ns), json!({"spec": {"size": 1}}));
        update(&old, &edit(&old, |o| o["spec"]["size"] = json!(2)))
    };
    let role = object(
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
        None,
        json!({"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
    );
    let role_new = edit(&role, |o| o["rules"][0]["verbs"] = json!(["get", "list"]));
    let binding = object(
        "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding",
        None,
        json!({"subjects": [{"kind": "User", "name": "a"}]}),
    );
    let binding_new = edit(&binding, |o| o["subjects"][0]["name"] = json!("b"));
    let cm = object(
        "v1",
        "ConfigMap",
        Some("sel"),
        json!({"data": {"key": "a"}}),
    );
    let cm_new = edit(&cm, |o| o["data"]["key"] = json!("b"));
    let foreign_cm = object(
        "example.com/v1",
        "ConfigMap",
        Some("sel"),
        json!({"data": {"key": "a"}}),
    );
    let foreign_cm_new = edit(&foreign_cm, |o| o["data"]["key"] = json!("b"));
    let svc = object(
        "v1",
        "Service",
        Some("sel"),
        json!({"spec": {"type": "ClusterIP"}}),
    );
    let svc_new = edit(&svc, |o| o["spec"]["type"] = json!("NodePort"));
    let lbl = deployment("lbl");
    let front = with_labels(
        &lbl,
        json!({"app": "web", "tier": "frontend", "managed": ""}),
    );
    let sts = edit(&deployment("multi"), |o| o["kind"] = json!("StatefulSet"));

    env.run(vec![
        case(
            "* matches an explicitly empty namespace",
            {
                let mut review = update(&role, &role_new);
                review["request"]["namespace"] = json!("");
                review
            },
            deny("ops/cluster", "rules[0].verbs[1]"),
        ),
        case(
            "glob [0-9] matches a digit",
            scale_up("rng-7"),
            deny("ops/glob-range", "spec.replicas"),
        ),
        case(
            "glob [0-9] does not match a letter",
            scale_up("rng-x"),
            no_rule(),
        ),
        case(
            "selector matches the request kind",
            {
                let d = deployment("reqkind");
                let mut review = update(&d, &replicas(&d, 3));
                for side in ["object", "oldObject"] {
                    review["request"][side]["apiVersion"] = json!("example.com/v1");
                    review["request"][side]["kind"] = json!("Other");
                }
                review
            },
            deny("ops/by-request-kind", "spec.replicas"),
        ),
        case(
            "{kind: '*'} is any core kind",
            update(
                &object(
                    "v1",
                    "ConfigMap",
                    Some("core-any"),
                    json!({"data": {"k": "a"}}),
                ),
                &object(
                    "v1",
                    "ConfigMap",
                    Some("core-any"),
                    json!({"data": {"k": "b"}}),
                ),
            ),
            deny("ops/core-any", "data.k"),
        ),
        case(
            "{kind: '*'} is only the core group",
            scale_up("core-any"),
            no_rule(),
        ),
        case(
            "higher priority wins",
            scale_up("prio"),
            warned("ops/prio-high", "spec.replicas"),
        ),
        case(
            "default priority 0 beats -5",
            scale_up("prio-neg"),
            would_deny("ops/prio-default", "spec.replicas"),
        ),
        case(
            "tie: namespace byte order first",
            scale_up("tie-ns"),
            warned("a/z", "spec.replicas"),
        ),
        case(
            "tie: then name byte order",
            scale_up("tie-name"),
            warned("same/rule-a", "spec.replicas"),
        ),
        case(
            "glob ? matches one character",
            scale_up("team-1"),
            deny("ops/glob-q", "spec.replicas"),
        ),
        case("glob ? does not match two", scale_up("team-10"), no_rule()),
        case(
            "glob [ab] matches a",
            scale_up("shop-a"),
            deny("ops/glob-set", "spec.replicas"),
        ),
        case(
            "glob [ab] matches b",
            scale_up("shop-b"),
            deny("ops/glob-set", "spec.replicas"),
        ),
        case("glob [ab] does not match c", scale_up("shop-c"), no_rule()),
        case(
            "* matches cluster-scoped",
            update(&role, &role_new),
            deny("ops/cluster", "rules[0].verbs[1]"),
        ),
        case(
            "kube-* does not match cluster-scoped",
            update(&binding, &binding_new),
            no_rule(),
        ),
        case(
            "apiGroup absent is the core group",
            update(&cm, &cm_new),
            deny("ops/core", "data.key"),
        ),
        case(
            "core selector does not match another group",
            update(&foreign_cm, &foreign_cm_new),
            no_rule(),
        ),
        case(
            "apiGroup '' is the core group",
            update(&svc, &svc_new),
            deny("ops/core-empty", "spec.type"),
        ),
        case(
            "apiGroup * matches a named group",
            kind_change("a.example.com/v1", "Widget", "sel"),
            deny("ops/any-group", "spec.size"),
        ),
        case(
            "apiGroup * matches the core group",
            kind_change("v1", "Widget", "sel"),
            deny("ops/any-group", "spec.size"),
        ),
        case(
            "kind * matches Job",
            kind_change("batch/v1", "Job", "sel"),
            deny("ops/any-kind", "spec.size"),
        ),
        case(
            "kind * matches CronJob",
            kind_change("batch/v1", "CronJob", "sel"),
            deny("ops/any-kind", "spec.size"),
        ),
        case("selector kind mismatch", scale_up("sel"), no_rule()),
        case(
            "second selector matches",
            update(&sts, &replicas(&sts, 3)),
            deny("ops/multi", "spec.replicas"),
        ),
        case(
            "second namespace glob matches",
            scale_up("other-x"),
            deny("ops/multi", "spec.replicas"),
        ),
        case(
            "labels key=value and key hold",
            update(&front, &replicas(&front, 3)),
            deny("ops/labels", "spec.replicas"),
        ),
        case(
            "label key missing",
            update(
                &lbl,
                &replicas(&with_labels(&lbl, json!({"tier": "frontend"})), 3),
            ),
            no_rule(),
        ),
        case(
            "label value differs",
            update(
                &lbl,
                &replicas(
                    &with_labels(&lbl, json!({"tier": "backend", "managed": "x"})),
                    3,
                ),
            ),
            no_rule(),
        ),
        case(
            "labels are read from the new object (removed)",
            update(&front, &lbl),
            no_rule(),
        ),
        case(
            "no labels at all",
            update(
                &lbl,
                &edit(&lbl, |o| {
                    o["metadata"].as_object_mut().unwrap().remove("labels");
                }),
            ),
            no_rule(),
        ),
        case(
            "labels are read from the new object (added)",
            update(
                &lbl,
                &with_labels(
                    &lbl,
                    json!({"app": "web", "tier": "frontend", "managed": "true"}),
                ),
            ),
            deny(
                "ops/labels",
                "metadata.labels.managed, metadata.labels.tier",
            ),
        ),
        case(
            "rule annotation trimmed, case-insensitive",
            scale_up("annot"),
            deny("ops/annot-trim", "spec.replicas"),
        ),
        case(
            "rule annotation false is not a rule",
            scale_up("annot-false"),
            no_rule(),
        ),
    ]);
}

// ---------------------------------------------------------------------------------------------
// §3 steps 2–4: users, exemptUsers, deletion, bypass
// ---------------------------------------------------------------------------------------------

#[test]
fn users_exemptions_deletion_and_bypass() {
    let env = Env::rules(
        &[
            (
                "ops",
                "scoped",
                format!(
                    "mode: enforce\npriority: 10\nnamespaces: [users, users-warn]\n{DEPLOY}\nusers: [alice, carol]\n"
                ),
            ),
            (
                "ops",
                "fallback",
                format!("mode: enforce\nnamespaces: [users, users-warn]\n{DEPLOY}\n"),
            ),
            (
                "ops",
                "exempt",
                format!(
                    "mode: enforce\nnamespaces: [exempt, exempt-dry]\n{DEPLOY}\nexemptUsers: ['system:serviceaccount:*:argocd-*', flux]\n"
                ),
            ),
            (
                "ops",
                "both",
                format!(
                    "mode: enforce\nnamespaces: [both]\n{DEPLOY}\nusers: [alice]\nexemptUsers: [alice]\n"
                ),
            ),
            (
                "ops",
                "empty-users",
                format!("mode: enforce\nnamespaces: [empty-users]\n{DEPLOY}\nusers: []\n"),
            ),
            (
                "ops",
                "strict",
                format!("mode: enforce\nnamespaces: [strict, strict-warn]\n{DEPLOY}\n"),
            ),
            (
                "ops",
                "exact-users",
                format!("mode: enforce\nnamespaces: [exact-users]\n{DEPLOY}\nusers: ['ali*']\n"),
            ),
            (
                "ops",
                "custom",
                format!(
                    "mode: enforce\nnamespaces: [custom]\n{DEPLOY}\nbypass: example.com/skip\n"
                ),
            ),
        ],
        &[
            ("users-warn", Some("warn")),
            ("exempt-dry", Some("dry-run")),
            ("strict-warn", Some("warn")),
        ],
    );
    let up = |ns: &str| {
        let d = deployment(ns);
        update(&d, &replicas(&d, 3))
    };
    let deleting = |ns: &str| {
        edit(&deployment(ns), |o| {
            o["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            o["metadata"]["finalizers"] = json!(["example.com/cleanup"]);
        })
    };
    let strict = deployment("strict");
    let bypass = |d: &Value, value: &str| {
        with_annotations(
            d,
            json!({"note": "x", "drift-sentinel.k8s.io/bypass": value}),
        )
    };
    let noted = with_annotations(&strict, json!({"note": "x"}));
    let custom = with_annotations(&deployment("custom"), json!({"note": "x"}));
    let strict_warn = deployment("strict-warn");

    env.run(vec![
        case(
            "bypass true -> false is no violation",
            update(&bypass(&strict, "true"), &bypass(&strict, "false")),
            allow("ops/strict", "enforce"),
        ),
        case(
            "deletionTimestamp only on the new object does not count",
            update(&strict, &replicas(&deleting("strict"), 3)),
            deny(
                "ops/strict",
                "metadata.deletionTimestamp, metadata.finalizers, spec.replicas",
            ),
        ),
        case(
            "deletionTimestamp null is absent",
            update(
                &edit(&strict, |o| {
                    o["metadata"]["deletionTimestamp"] = Value::Null
                }),
                &replicas(&strict, 3),
            ),
            deny("ops/strict", "spec.replicas"),
        ),
        case(
            "listed user is judged",
            up("users"),
            deny("ops/scoped", "spec.replicas"),
        ),
        case(
            "second listed user is judged",
            as_user(up("users"), "carol"),
            deny("ops/scoped", "spec.replicas"),
        ),
        case(
            "unlisted user allowed, no fall-through to a lower rule",
            as_user(up("users"), "bob"),
            allow("ops/scoped", "enforce"),
        ),
        case(
            "unlisted user: effective mode reported",
            as_user(up("users-warn"), "bob"),
            allow("ops/scoped", "warn"),
        ),
        case(
            "listed user in warn namespace",
            up("users-warn"),
            warned("ops/scoped", "spec.replicas"),
        ),
        case(
            "exempt user glob",
            as_user(
                up("exempt"),
                "system:serviceaccount:argocd:argocd-application-controller",
            ),
            allow("ops/exempt", "enforce"),
        ),
        case(
            "exempt exact name",
            as_user(up("exempt"), "flux"),
            allow("ops/exempt", "enforce"),
        ),
        case(
            "exempt glob is anchored",
            as_user(up("exempt"), "flux2"),
            deny("ops/exempt", "spec.replicas"),
        ),
        case(
            "exempt glob not matching",
            as_user(up("exempt"), "system:serviceaccount:argocd:repo-server"),
            deny("ops/exempt", "spec.replicas"),
        ),
        case(
            "non-exempt user",
            up("exempt"),
            deny("ops/exempt", "spec.replicas"),
        ),
        case(
            "exempt: effective mode reported",
            as_user(up("exempt-dry"), "flux"),
            allow("ops/exempt", "dry-run"),
        ),
        case(
            "non-exempt in dry-run namespace",
            up("exempt-dry"),
            would_deny("ops/exempt", "spec.replicas"),
        ),
        case(
            "listed and exempt",
            up("both"),
            allow("ops/both", "enforce"),
        ),
        case(
            "users: [] is not set",
            up("empty-users"),
            deny("ops/empty-users", "spec.replicas"),
        ),
        case(
            "users are exact names, not globs",
            up("exact-users"),
            allow("ops/exact-users", "enforce"),
        ),
        case(
            "being deleted: finalizer removal",
            update(
                &deleting("strict"),
                &edit(&deleting("strict"), |o| {
                    o["metadata"]["finalizers"] = json!([])
                }),
            ),
            allow("ops/strict", "enforce"),
        ),
        case(
            "being deleted: any change",
            update(&deleting("strict"), &replicas(&deleting("strict"), 9)),
            allow("ops/strict", "enforce"),
        ),
        case(
            "being deleted: effective mode reported",
            update(
                &deleting("strict-warn"),
                &replicas(&deleting("strict-warn"), 9),
            ),
            allow("ops/strict", "warn"),
        ),
        case(
            "not being deleted: finalizer removal is a change",
            update(
                &edit(&strict, |o| {
                    o["metadata"]["finalizers"] = json!(["example.com/cleanup"])
                }),
                &strict,
            ),
            deny("ops/strict", "metadata.finalizers"),
        ),
        case(
            "bypass true",
            update(&noted, &replicas(&bypass(&strict, "true"), 3)),
            allow("ops/strict", "enforce"),
        ),
        case(
            "bypass TRUE",
            update(&noted, &replicas(&bypass(&strict, "TRUE"), 3)),
            allow("ops/strict", "enforce"),
        ),
        case(
            "bypass True",
            update(&noted, &replicas(&bypass(&strict, "True"), 3)),
            allow("ops/strict", "enforce"),
        ),
        case(
            "bypass yes is not a bypass; the annotation is not a violation",
            update(&noted, &replicas(&bypass(&strict, "yes"), 3)),
            deny("ops/strict", "spec.replicas"),
        ),
        case(
            "bypass false kept",
            update(
                &bypass(&strict, "false"),
                &replicas(&bypass(&strict, "false"), 3),
            ),
            deny("ops/strict", "spec.replicas"),
        ),
        case(
            "bypass annotation added with a non-true value is no violation",
            update(&noted, &bypass(&strict, "no")),
            allow("ops/strict", "enforce"),
        ),
        case(
            "bypass removed",
            update(&bypass(&strict, "true"), &noted),
            allow("ops/strict", "enforce"),
        ),
        case(
            "bypass removed, last annotation",
            update(
                &with_annotations(&strict, json!({"drift-sentinel.k8s.io/bypass": "true"})),
                &strict,
            ),
            allow("ops/strict", "enforce"),
        ),
        case(
            "bypass removed with a change",
            update(&bypass(&strict, "true"), &replicas(&noted, 3)),
            deny("ops/strict", "spec.replicas"),
        ),
        case(
            "bypass: effective mode reported",
            update(&strict_warn, &replicas(&bypass(&strict_warn, "true"), 3)),
            allow("ops/strict", "warn"),
        ),
        case(
            "custom bypass key",
            update(
                &custom,
                &replicas(
                    &with_annotations(&custom, json!({"note": "x", "example.com/skip": "True"})),
                    3,
                ),
            ),
            allow("ops/custom", "enforce"),
        ),
        case(
            "custom bypass: default key is no bypass",
            update(
                &with_annotations(
                    &custom,
                    json!({"note": "x", "drift-sentinel.k8s.io/bypass": "true"}),
                ),
                &replicas(
                    &with_annotations(
                        &custom,
                        json!({"note": "x", "drift-sentinel.k8s.io/bypass": "true"}),
                    ),
                    3,
                ),
            ),
            deny("ops/custom", "spec.replicas"),
        ),
        case(
            "custom bypass: default key is an ordinary annotation",
            update(
                &custom,
                &with_annotations(
                    &custom,
                    json!({"note": "x", "drift-sentinel.k8s.io/bypass": "true"}),
                ),
            ),
            deny(
                "ops/custom",
                "metadata.annotations['drift-sentinel.k8s.io/bypass']",
            ),
        ),
        case(
            "custom bypass removed",
            update(
                &with_annotations(&custom, json!({"note": "x", "example.com/skip": "true"})),
                &custom,
            ),
            allow("ops/custom", "enforce"),
        ),
    ]);
}

// ---------------------------------------------------------------------------------------------
// §3 steps 5 and 9: effective mode, namespace annotation, responses by mode
// ---------------------------------------------------------------------------------------------

#[test]
fn effective_mode_namespace_annotation_and_responses() {
    let env = Env::rules(
        &[
            (
                "ops",
                "enforce",
                format!("mode: enforce\nnamespaces: ['m-*']\n{DEPLOY}\nexemptUsers: [robot]\n"),
            ),
            (
                "ops",
                "warn",
                format!("mode: warn\nnamespaces: ['w-*']\n{DEPLOY}\n"),
            ),
            (
                "ops",
                "dry",
                format!("mode: dry-run\nnamespaces: ['d-*']\n{DEPLOY}\n"),
            ),
            (
                "ops",
                "off",
                format!("mode: off\nnamespaces: ['o-*']\n{DEPLOY}\n"),
            ),
        ],
        &[
            ("m-plain", None),
            ("m-warn", Some("warn")),
            ("m-dry", Some("dry-run")),
            ("m-off", Some("off")),
            ("m-enforce", Some("enforce")),
            ("m-typo", Some("Warn")),
            ("m-bad", Some("block")),
            ("w-plain", None),
            ("w-enforce", Some("enforce")),
            ("w-audit", Some("audit")),
            ("d-plain", None),
            ("d-warn", Some("warn")),
            ("d-typo", Some("Dry-Run")),
            ("m-space", Some("warn ")),
            ("o-plain", None),
            ("o-enforce", Some("enforce")),
            ("o-dry", Some("dry-run")),
            ("o-warn", Some("warn")),
            ("o-typo", Some("Off")),
        ],
    );
    let up = |ns: &str| {
        let d = deployment(ns);
        update(&d, &replicas(&d, 3))
    };
    let same = |ns: &str| {
        let d = deployment(ns);
        update(&d, &d)
    };
    let bypassed = |ns: &str| {
        let d = deployment(ns);
        update(
            &d,
            &replicas(
                &with_annotations(&d, json!({"drift-sentinel.k8s.io/bypass": "true"})),
                3,
            ),
        )
    };
    let deleting = |ns: &str| {
        let d = edit(&deployment(ns), |o| {
            o["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z")
        });
        update(&d, &replicas(&d, 3))
    };
    let r = "spec.replicas";
    env.run(vec![
        case(
            "off rule, invalid namespace mode",
            up("o-typo"),
            allow("ops/off", "off").ns_warning("Off"),
        ),
        case(
            "deletion, invalid namespace mode",
            deleting("m-typo"),
            allow("ops/enforce", "enforce").ns_warning("Warn"),
        ),
        case(
            "bypass, invalid namespace mode",
            bypassed("m-typo"),
            allow("ops/enforce", "enforce").ns_warning("Warn"),
        ),
        case("enforce rule", up("m-plain"), deny("ops/enforce", r)),
        case(
            "namespace warn over enforce",
            up("m-warn"),
            warned("ops/enforce", r),
        ),
        case(
            "namespace dry-run over enforce",
            up("m-dry"),
            would_deny("ops/enforce", r),
        ),
        case(
            "namespace off over enforce",
            up("m-off"),
            allow("ops/enforce", "off"),
        ),
        case("namespace enforce", up("m-enforce"), deny("ops/enforce", r)),
        case(
            "invalid namespace mode Warn",
            up("m-typo"),
            deny("ops/enforce", r).ns_warning("Warn"),
        ),
        case(
            "invalid namespace mode, no change",
            same("m-typo"),
            allow("ops/enforce", "enforce").ns_warning("Warn"),
        ),
        case(
            "invalid namespace mode, exempt user",
            as_user(up("m-typo"), "robot"),
            allow("ops/enforce", "enforce").ns_warning("Warn"),
        ),
        case(
            "invalid namespace mode block",
            up("m-bad"),
            deny("ops/enforce", r).ns_warning("block"),
        ),
        case(
            "exempt user in dry-run namespace",
            as_user(up("m-dry"), "robot"),
            allow("ops/enforce", "dry-run"),
        ),
        case(
            "bypass in warn namespace",
            bypassed("m-warn"),
            allow("ops/enforce", "warn"),
        ),
        case(
            "deletion in off namespace",
            deleting("m-off"),
            allow("ops/enforce", "off"),
        ),
        case("warn rule", up("w-plain"), warned("ops/warn", r)),
        case(
            "namespace enforce over warn",
            up("w-enforce"),
            deny("ops/warn", r),
        ),
        case(
            "warn rule, invalid namespace mode: two warnings",
            up("w-audit"),
            warned("ops/warn", r).ns_warning("audit"),
        ),
        case("dry-run rule", up("d-plain"), would_deny("ops/dry", r)),
        case(
            "namespace warn over dry-run",
            up("d-warn"),
            warned("ops/dry", r),
        ),
        case(
            "dry-run rule, invalid namespace mode",
            up("d-typo"),
            would_deny("ops/dry", r).ns_warning("Dry-Run"),
        ),
        case(
            "namespace mode must match exactly",
            up("m-space"),
            deny("ops/enforce", r).ns_warning("warn "),
        ),
        case("off rule", up("o-plain"), allow("ops/off", "off")),
        case(
            "namespace enforce over off",
            up("o-enforce"),
            deny("ops/off", r),
        ),
        case(
            "namespace dry-run over off",
            up("o-dry"),
            would_deny("ops/off", r),
        ),
        case(
            "namespace warn over off",
            up("o-warn"),
            warned("ops/off", r),
        ),
    ]);

    // Warn: the reason as ONE warning of at most 512 bytes including the `…` it is cut with.
    let d = deployment("w-plain");
    let many: serde_json::Map<String, Value> = (0..40)
        .map(|i| {
            (
                format!("example.com/a-rather-long-label-key-number-{i:02}"),
                json!("v"),
            )
        })
        .collect();
    let review = update(&d, &with_labels(&d, Value::Object(many.clone())));
    let mut paths: Vec<String> = many
        .keys()
        .map(|k| format!("metadata.labels['{k}']"))
        .chain(["metadata.labels.app".to_owned()])
        .collect();
    paths.sort();
    let (_, got) = env.send(&review);
    let response = response_of(&got);
    assert_eq!(response["allowed"], true, "{response}");
    assert_eq!(response["auditAnnotations"]["result"], "warned");
    // reference §5: `denied-paths` holds at most 20 paths, then `, … (N more)`.
    assert_eq!(
        response["auditAnnotations"]["denied-paths"],
        json!(format!("{}, … (21 more)", paths[..20].join(", ")))
    );
    let warnings = response["warnings"].as_array().expect("warnings");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let warning = warnings[0].as_str().unwrap();
    assert!(warning.len() <= 512, "{} bytes: {warning}", warning.len());
    assert!(warning.ends_with('…'), "{warning}");
    assert!(warning.starts_with(PREFIX), "{warning}");
    assert!(
        format!("{PREFIX}{}", paths.join(", ")).starts_with(warning.trim_end_matches('…')),
        "{warning}"
    );

    // The 512-byte limit counts bytes, with multi-byte characters wherever the cut falls.
    // The warning is the reason (the same rule and change in enforce mode gives it as the
    // message), cut to at most 512 bytes with `…` only when longer.
    let mut seen_short = false;
    let mut seen_long = false;
    for n in 1..=12 {
        for pad in 0..3 {
            let labels: serde_json::Map<String, Value> = (0..n)
                .map(|i| {
                    (
                        format!("example.com/{}k{i:02}", "é".repeat(pad)),
                        json!("ü".repeat(5 * pad)),
                    )
                })
                .collect();
            let change = |ns: &str| {
                let d = deployment(ns);
                update(&d, &with_labels(&d, Value::Object(labels.clone())))
            };
            let (_, enforced) = env.send(&change("m-plain"));
            let (_, warned) = env.send(&change("m-warn"));
            let reason = response_of(&enforced)["status"]["message"]
                .as_str()
                .unwrap()
                .to_owned();
            let warnings = response_of(&warned)["warnings"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            assert_eq!(warnings.len(), 1, "{warned}");
            let warning = warnings[0].as_str().unwrap();
            if reason.len() <= 512 {
                seen_short = true;
                assert_eq!(
                    warning,
                    reason,
                    "a reason of {} bytes is not cut",
                    reason.len()
                );
            } else {
                seen_long = true;
                assert!(warning.len() <= 512, "{} bytes: {warning}", warning.len());
                let body = warning
                    .strip_suffix('…')
                    .unwrap_or_else(|| panic!("cut without …: {warning}"));
                assert!(
                    reason.starts_with(body),
                    "{warning:?} is not a prefix of {reason:?}"
                );
            }
        }
    }
    assert!(seen_short && seen_long);

    for shift in 0..8 {
        let labels: serde_json::Map<String, Value> = (0..3)
            .map(|i| {
                (
                    format!("k{i}"),
                    json!(format!("{}{}", "x".repeat(shift), "é日本語".repeat(20))),
                )
            })
            .collect();
        let review = update(&d, &with_annotations(&d, Value::Object(labels)));
        let (_, got) = env.send(&review);
        let warnings = response_of(&got)["warnings"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(warnings.len(), 1, "{got}");
        let warning = warnings[0].as_str().unwrap();
        assert!(warning.len() <= 512, "{} bytes: {warning}", warning.len());
        assert!(
            warning.starts_with(&format!("{PREFIX}metadata.annotations")),
            "{warning}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// §3 step 6, §4: system fields, include/exclude, normalisation, numbers, types
// ---------------------------------------------------------------------------------------------

#[test]
fn system_fields_scoping_and_normalisation() {
    let env = Env::rules(
        &[
            (
                "ops",
                "exc-q",
                format!(
                    "mode: enforce\nnamespaces: [exc-q]\n{DEPLOY}\nexclude: [\"metadata.annotations['example.com/skip-me']\"]\n"
                ),
            ),
            (
                "ops",
                "inc-ann",
                format!(
                    "mode: enforce\nnamespaces: [inc-ann]\n{DEPLOY}\ninclude: [spec.template.metadata.annotations]\n"
                ),
            ),
            (
                "ops",
                "plain",
                format!("mode: enforce\nnamespaces: [plain]\n{DEPLOY}\n"),
            ),
            (
                "ops",
                "inc",
                format!("mode: enforce\nnamespaces: [inc]\n{DEPLOY}\ninclude: [spec]\n"),
            ),
            (
                "ops",
                "exc",
                format!(
                    "mode: enforce\nnamespaces: [exc]\n{DEPLOY}\nexclude: [spec.replicas, metadata.annotations]\n"
                ),
            ),
            (
                "ops",
                "incexc",
                format!(
                    "mode: enforce\nnamespaces: [incexc]\n{DEPLOY}\ninclude: [spec.template]\nexclude: [spec.template.metadata]\n"
                ),
            ),
            (
                "ops",
                "inc-img",
                format!(
                    "mode: enforce\nnamespaces: [inc-img]\n{DEPLOY}\ninclude: ['spec.template.spec.containers[*].image']\n"
                ),
            ),
            (
                "ops",
                "exc-name",
                format!(
                    "mode: enforce\nnamespaces: [exc-name]\n{DEPLOY}\nexclude: ['spec.template.spec.containers[*].name']\nmutable: ['spec.template.spec.containers[*].image']\n"
                ),
            ),
            (
                "ops",
                "exc-env",
                format!(
                    "mode: enforce\nnamespaces: [exc-env]\n{DEPLOY}\nexclude: ['spec.template.spec.containers[*].env']\n"
                ),
            ),
        ],
        &[],
    );
    let d = deployment("plain");
    let sys_old = edit(&d, |o| {
        let m = &mut o["metadata"];
        m["resourceVersion"] = json!("10");
        m["generation"] = json!(3);
        m["uid"] = json!("6f1c-aaaa");
        m["creationTimestamp"] = json!("2024-01-01T00:00:00Z");
        m["selfLink"] = json!("/apis/apps/v1/namespaces/plain/deployments/web");
        m["managedFields"] =
            json!([{"manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1"}]);
        o["status"] = json!({"replicas": 2, "readyReplicas": 2});
    });
    let sys_new = edit(&d, |o| {
        let m = &mut o["metadata"];
        m["resourceVersion"] = json!("11");
        m["generation"] = json!(4);
        m["uid"] = json!("6f1c-bbbb");
        m["creationTimestamp"] = json!("2025-01-01T00:00:00Z");
        m["selfLink"] = json!("/apis/apps/v1/namespaces/plain/deployments/web2");
        m["managedFields"] =
            json!([{"manager": "helm", "operation": "Update", "apiVersion": "apps/v1"}]);
        o["status"] = json!({"replicas": 3, "conditions": [{"type": "Available"}]});
    });
    let node_selector = |v: Value| pod(&d, "nodeSelector", v);
    let img = |d: &Value, image: &str| {
        edit(d, |o| {
            o["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image)
        })
    };
    let add_template_annotation = |d: &Value| {
        edit(d, |o| {
            o["spec"]["template"]["metadata"]["annotations"] = json!({"a": "1"})
        })
    };
    let inc = deployment("inc");
    let exc = deployment("exc");
    let incexc = deployment("incexc");
    let inc_img = deployment("inc-img");
    let exc_name = ctrs(&deployment("exc-name"), json!([c("a", "1"), c("b", "2")]));
    let exc_env = deployment("exc-env");
    let env_changed = |d: &Value| {
        edit(
            d,
            |o| {
                o["spec"]["template"]["spec"]["containers"][0]["env"] =
                    json!([{"name": "B", "value": "2"}, {"name": "A", "value": "9"}])
            },
        )
    };
    let tolerations = json!([{"key": "a", "operator": "Exists"}]);
    let exc_q = with_annotations(&deployment("exc-q"), json!({"example.com/skip-me": "1"}));
    let inc_ann = deployment("inc-ann");

    env.run(vec![
        case(
            "empties inside a list element",
            update(&ctrs(&d, json!([{"name": "a", "image": "1", "env": [], "resources": {}, "args": null}])), &ctrs(&d, json!([c("a", "1")]))),
            allow("ops/plain", "enforce"),
        ),
        case("exclude with a quoted key",
            update(&exc_q, &with_annotations(&exc_q, json!({"example.com/skip-me": "2"}))), allow("ops/exc-q", "enforce")),
        case("exclude with a quoted key: other key",
            update(&exc_q, &with_annotations(&exc_q, json!({"example.com/skip-me": "1", "example.com/other": "2"}))),
            deny("ops/exc-q", "metadata.annotations['example.com/other']")),
        case("include: everything else ignored",
            update(&inc_ann, &replicas(&with_labels(&inc_ann, json!({"x": "y"})), 9)), allow("ops/inc-ann", "enforce")),
        case("include: inside compared",
            update(&edit(&inc_ann, |o| o["spec"]["template"]["metadata"]["annotations"] = json!({"a": "1"})),
                   &edit(&inc_ann, |o| o["spec"]["template"]["metadata"]["annotations"] = json!({"a": "2"}))),
            deny("ops/inc-ann", "spec.template.metadata.annotations.a")),
        case("system fields changed", update(&sys_old, &sys_new), allow("ops/plain", "enforce")),
        case("system fields removed", update(&sys_old, &d), allow("ops/plain", "enforce")),
        case("system fields and replicas", update(&sys_old, &replicas(&sys_new, 3)), deny("ops/plain", "spec.replicas")),
        case("[] == absent", update(&pod(&d, "volumes", json!([])), &d), allow("ops/plain", "enforce")),
        case("{} == null", update(&node_selector(json!({})), &node_selector(Value::Null)), allow("ops/plain", "enforce")),
        case("absent == null", update(&d, &pod(&d, "tolerations", Value::Null)), allow("ops/plain", "enforce")),
        case(
            "emptiness cascades",
            update(&edit(&d, |o| o["spec"]["strategy"] = json!({"rollingUpdate": {"maxSurge": null}, "type": null})), &d),
            allow("ops/plain", "enforce"),
        ),
        case(
            "null map value == absent",
            update(&with_labels(&d, json!({"app": "web", "gone": null})), &d),
            allow("ops/plain", "enforce"),
        ),
        case(
            "{} -> {x} reported at the map",
            update(&node_selector(json!({})), &node_selector(json!({"disktype": "ssd"}))),
            deny("ops/plain", t(".nodeSelector")),
        ),
        case(
            "absent -> map reported at the key",
            update(&d, &with_annotations(&d, json!({"a": "1", "b": "2"}))),
            deny("ops/plain", "metadata.annotations"),
        ),
        case("[] -> [x]", update(&pod(&d, "tolerations", json!([])), &pod(&d, "tolerations", tolerations.clone())), deny("ops/plain", t(".tolerations"))),
        case("[x] -> []", update(&pod(&d, "tolerations", tolerations.clone()), &pod(&d, "tolerations", json!([]))), deny("ops/plain", t(".tolerations"))),
        case("1 == 1.0", update(&d, &edit(&d, |o| o["spec"]["replicas"] = json!(2.0))), allow("ops/plain", "enforce")),
        case("20 == 2e1", update(&replicas(&d, 20), &edit(&d, |o| o["spec"]["replicas"] = serde_json::from_str("2e1").unwrap())), allow("ops/plain", "enforce")),
        case("1.0 == 1 inside a list element", update(&ctrs(&d, json!([{"name": "a", "ports": [{"containerPort": 80.0}]}])), &ctrs(&d, json!([{"name": "a", "ports": [{"containerPort": 80}]}]))), allow("ops/plain", "enforce")),
        case(
            "other metadata is not a system field",
            update(&d, &edit(&d, |o| o["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "1"}]))),
            deny("ops/plain", "metadata.ownerReferences"),
        ),
        case(
            "only the top-level status is a system field",
            update(&edit(&d, |o| o["spec"]["status"] = json!("a")), &edit(&d, |o| o["spec"]["status"] = json!("b"))),
            deny("ops/plain", "spec.status"),
        ),
        case("2 -> 2.5", update(&d, &edit(&d, |o| o["spec"]["replicas"] = json!(2.5))), deny("ops/plain", "spec.replicas")),
        case("number -> string", update(&d, &edit(&d, |o| o["spec"]["replicas"] = json!("2"))), deny("ops/plain", "spec.replicas")),
        case("map -> string", update(&node_selector(json!({"a": "1"})), &node_selector(json!("a=1"))), deny("ops/plain", t(".nodeSelector"))),
        case("include: outside ignored", update(&inc, &with_labels(&inc, json!({"app": "x"}))), allow("ops/inc", "enforce")),
        case("include: inside compared", update(&inc, &replicas(&with_labels(&inc, json!({"app": "x"})), 3)), deny("ops/inc", "spec.replicas")),
        case("exclude: subtree removed", update(&exc, &replicas(&exc, 3)), allow("ops/exc", "enforce")),
        case(
            "exclude: added map excluded, rest compared",
            update(&exc, &img(&with_annotations(&exc, json!({"a": "1"})), "nginx:2")),
            deny("ops/exc", t(".containers[0].image")),
        ),
        case(
            "exclude is by segment, not by prefix",
            update(&edit(&exc, |o| o["spec"]["replicasMax"] = json!(3)), &edit(&exc, |o| o["spec"]["replicasMax"] = json!(4))),
            deny("ops/exc", "spec.replicasMax"),
        ),
        case("include+exclude: excluded part of include", update(&incexc, &add_template_annotation(&incexc)), allow("ops/incexc", "enforce")),
        case("include+exclude: outside include", update(&incexc, &replicas(&incexc, 3)), allow("ops/incexc", "enforce")),
        case("include+exclude: inside", update(&incexc, &img(&incexc, "nginx:2")), deny("ops/incexc", t(".containers[0].image"))),
        case("include [*]: other field", update(&inc_img, &env_changed(&inc_img)), allow("ops/inc-img", "enforce")),
        case("include [*]: included field", update(&inc_img, &img(&inc_img, "nginx:2")), deny("ops/inc-img", t(".containers[0].image"))),
        case(
            "alignment is decided before exclude",
            update(&exc_name, &ctrs(&exc_name, json!([c("b", "2"), c("a", "1")]))),
            deny("ops/exc-name", t(".containers")),
        ),
        case(
            "exclude + mutable",
            update(&exc_name, &ctrs(&exc_name, json!([c("a", "3"), c("b", "2")]))),
            allow("ops/exc-name", "enforce"),
        ),
        case("exclude: changes and order inside excluded list", update(&exc_env, &env_changed(&exc_env)), allow("ops/exc-env", "enforce")),
    ]);
}

// ---------------------------------------------------------------------------------------------
// §4: list alignment by merge key
// ---------------------------------------------------------------------------------------------

#[test]
fn merge_key_alignment() {
    let env = Env::rules(
        &[
            (
                "ops",
                "align-any",
                "mode: enforce\nnamespaces: [align]\nselectors: [{apiGroup: example.com, kind: Widget}]\n".to_owned(),
            ),
            (
                "ops",
                "align",
                "mode: enforce\nnamespaces: [align]\nselectors: [{apiGroup: apps, kind: Deployment}, {kind: Service}]\n".to_owned(),
            ),
            (
                "ops",
                "align-img",
                format!("mode: enforce\nnamespaces: [align-img]\n{DEPLOY}\nmutable: ['spec.template.spec.containers[*].image']\n"),
            ),
        ],
        &[],
    );
    let d = deployment("align");
    let ab = ctrs(&d, json!([c("a", "1"), c("b", "2")]));
    let abc = ctrs(&d, json!([c("a", "1"), c("b", "2"), c("c", "3")]));
    let field =
        |name: &str, list: Value| ctrs(&d, json!([{"name": "app", "image": "x", name: list}]));
    let env_of = |list: Value| field("env", list);
    let e = |name: &str, value: &str| json!({"name": name, "value": value});
    let mounts = |list: Value| field("volumeMounts", list);
    let devices = |list: Value| field("volumeDevices", list);
    let ports = |list: Value| field("ports", list);
    let args = |list: Value| field("args", list);
    let svc = |ports: Value| {
        object(
            "v1",
            "Service",
            Some("align"),
            json!({"spec": {"ports": ports}}),
        )
    };
    let host = |ip: &str, names: Value| json!({"ip": ip, "hostnames": names});
    let di = deployment("align-img");
    let ab_i = ctrs(&di, json!([c("a", "1"), c("b", "2")]));

    env.run(vec![
        case(
            "the field name decides: ports without a port are aligned by index, not name",
            update(
                &ports(json!([{"name": "a", "x": 1}, {"name": "b", "x": 2}])),
                &ports(json!([{"name": "b", "x": 2}, {"name": "a", "x": 1}])),
            ),
            deny("ops/align", ["[0].name", "[0].x", "[1].name", "[1].x"].map(|s| t(&format!(".containers[0].ports{s}"))).join(", ")),
        ),
        case(
            "the field name decides: volumeMounts without mountPath are aligned by index",
            update(
                &mounts(json!([{"name": "a", "x": 1}, {"name": "b", "x": 2}])),
                &mounts(json!([{"name": "b", "x": 2}, {"name": "a", "x": 1}])),
            ),
            deny("ops/align", ["[0].name", "[0].x", "[1].name", "[1].x"].map(|s| t(&format!(".containers[0].volumeMounts{s}"))).join(", ")),
        ),
        case(
            "merge keys compare numerically",
            update(
                &ports(json!([{"containerPort": 80, "name": "a"}, {"containerPort": 443, "name": "b"}])),
                &ports(json!([{"containerPort": 443.0, "name": "b"}, {"containerPort": 80.0, "name": "a"}])),
            ),
            deny("ops/align", t(".containers[0].ports")),
        ),
        case(
            "service port: missing protocol is TCP",
            update(&svc(json!([{"name": "http", "port": 80}])), &svc(json!([{"name": "http", "port": 80, "protocol": "TCP"}]))),
            deny("ops/align", "spec.ports[0].protocol"),
        ),
        case(
            "scalars removed at the end",
            update(&args(json!(["a", "b", "c"])), &args(json!(["a"]))),
            deny("ops/align", format!("{}, {}", t(".containers[0].args[1]"), t(".containers[0].args[2]"))),
        ),
        case(
            "removed between kept elements: no order change",
            update(&abc, &ctrs(&d, json!([c("a", "1"), c("c", "3")]))),
            deny("ops/align", t(".containers[1]")),
        ),
        case(
            "removed and kept elements swapped",
            update(&abc, &ctrs(&d, json!([c("c", "3"), c("a", "1")]))),
            deny("ops/align", format!("{}, {}", t(".containers"), t(".containers[1]"))),
        ),
        case(
            "scalars reordered: by index, not the list path",
            update(&args(json!(["a", "b"])), &args(json!(["b", "a"]))),
            deny("ops/align", format!("{}, {}", t(".containers[0].args[0]"), t(".containers[0].args[1]"))),
        ),
        case(
            "any list of named objects is keyed by name",
            update(
                &object("example.com/v1", "Widget", Some("align"), json!({"spec": {"items": [{"name": "a", "v": 1}, {"name": "b", "v": 2}]}})),
                &object("example.com/v1", "Widget", Some("align"), json!({"spec": {"items": [{"name": "z", "v": 0}, {"name": "a", "v": 1}, {"name": "b", "v": 2}]}})),
            ),
            deny("ops/align-any", "spec.items[0]"),
        ),
        case("containers reordered", update(&ab, &ctrs(&d, json!([c("b", "2"), c("a", "1")]))), deny("ops/align", t(".containers"))),
        case(
            "reordered and changed: new index",
            update(&ab, &ctrs(&d, json!([c("b", "3"), c("a", "1")]))),
            deny("ops/align", format!("{}, {}", t(".containers"), t(".containers[0].image"))),
        ),
        case("sidecar at index 0", update(&ab, &ctrs(&d, json!([c("s", "9"), c("a", "1"), c("b", "2")]))), deny("ops/align", t(".containers[0]"))),
        case(
            "sidecar at 0 and change in a kept element at its new index",
            update(&ab, &ctrs(&d, json!([c("s", "9"), c("a", "1"), c("b", "3")]))),
            deny("ops/align", format!("{}, {}", t(".containers[0]"), t(".containers[2].image"))),
        ),
        case(
            "reordered and inserted",
            update(&ab, &ctrs(&d, json!([c("b", "2"), c("s", "9"), c("a", "1")]))),
            deny("ops/align", format!("{}, {}", t(".containers"), t(".containers[1]"))),
        ),
        case(
            "non-string name: by index",
            update(&env_of(json!([{"name": 1, "value": "a"}, {"name": 2, "value": "b"}])), &env_of(json!([{"name": 2, "value": "b"}, {"name": 1, "value": "a"}]))),
            deny(
                "ops/align",
                ["[0].name", "[0].value", "[1].name", "[1].value"]
                    .map(|s| t(&format!(".containers[0].env{s}")))
                    .join(", "),
            ),
        ),
        case("sidecar appended", update(&ab, &ctrs(&d, json!([c("a", "1"), c("b", "2"), c("s", "9")]))), deny("ops/align", t(".containers[2]"))),
        case("removed at old index", update(&abc, &ctrs(&d, json!([c("a", "1"), c("c", "3")]))), deny("ops/align", t(".containers[1]"))),
        case(
            "removed and kept element changed",
            update(&ab, &ctrs(&d, json!([c("b", "3")]))),
            deny("ops/align", format!("{}, {}", t(".containers[0]"), t(".containers[0].image"))),
        ),
        case(
            "env by name: inserted and changed",
            update(&env_of(json!([e("A", "1"), e("B", "2")])), &env_of(json!([e("X", "0"), e("A", "1"), e("B", "3")]))),
            deny("ops/align", format!("{}, {}", t(".containers[0].env[0]"), t(".containers[0].env[2].value"))),
        ),
        case(
            "env reordered",
            update(&env_of(json!([e("A", "1"), e("B", "2")])), &env_of(json!([e("B", "2"), e("A", "1")]))),
            deny("ops/align", t(".containers[0].env")),
        ),
        case(
            "env duplicate names: by index",
            update(&env_of(json!([e("A", "1"), e("A", "2")])), &env_of(json!([e("A", "2"), e("A", "1")]))),
            deny("ops/align", format!("{}, {}", t(".containers[0].env[0].value"), t(".containers[0].env[1].value"))),
        ),
        case(
            "env missing name: by index",
            update(&env_of(json!([e("A", "1"), {"value": "x"}])), &env_of(json!([{"value": "x"}, e("A", "1")]))),
            deny(
                "ops/align",
                ["[0].name", "[0].value", "[1].name", "[1].value"]
                    .map(|s| t(&format!(".containers[0].env{s}")))
                    .join(", "),
            ),
        ),
        case(
            "volumeMounts by mountPath",
            update(
                &mounts(json!([{"name": "x", "mountPath": "/a"}, {"name": "y", "mountPath": "/b"}])),
                &mounts(json!([{"name": "y", "mountPath": "/a"}, {"name": "x", "mountPath": "/b"}])),
            ),
            deny("ops/align", format!("{}, {}", t(".containers[0].volumeMounts[0].name"), t(".containers[0].volumeMounts[1].name"))),
        ),
        case(
            "volumeMounts inserted at 0",
            update(
                &mounts(json!([{"name": "d", "mountPath": "/data"}])),
                &mounts(json!([{"name": "c", "mountPath": "/cache"}, {"name": "d", "mountPath": "/data"}])),
            ),
            deny("ops/align", t(".containers[0].volumeMounts[0]")),
        ),
        case(
            "volumeDevices by devicePath",
            update(
                &devices(json!([{"name": "x", "devicePath": "/dev/a"}, {"name": "y", "devicePath": "/dev/b"}])),
                &devices(json!([{"name": "y", "devicePath": "/dev/a"}, {"name": "x", "devicePath": "/dev/b"}])),
            ),
            deny("ops/align", format!("{}, {}", t(".containers[0].volumeDevices[0].name"), t(".containers[0].volumeDevices[1].name"))),
        ),
        case(
            "ports: missing protocol is TCP",
            update(
                &ports(json!([{"containerPort": 80, "name": "http"}])),
                &ports(json!([{"containerPort": 8080, "protocol": "TCP", "name": "alt"}, {"containerPort": 80, "protocol": "TCP", "name": "http"}])),
            ),
            deny("ops/align", format!("{}, {}", t(".containers[0].ports[0]"), t(".containers[0].ports[1].protocol"))),
        ),
        case(
            "ports by containerPort, not name",
            update(
                &ports(json!([{"containerPort": 80, "name": "a"}, {"containerPort": 443, "name": "b"}])),
                &ports(json!([{"containerPort": 80, "name": "b"}, {"containerPort": 443, "name": "a"}])),
            ),
            deny("ops/align", format!("{}, {}", t(".containers[0].ports[0].name"), t(".containers[0].ports[1].name"))),
        ),
        case(
            "ports keyed by (containerPort, protocol)",
            update(
                &ports(json!([{"containerPort": 53, "protocol": "UDP", "name": "dns-udp"}, {"containerPort": 53, "protocol": "TCP", "name": "dns-tcp"}])),
                &ports(json!([{"containerPort": 53, "protocol": "TCP", "name": "dns-tcp"}, {"containerPort": 53, "protocol": "UDP", "name": "dns-udp"}])),
            ),
            deny("ops/align", t(".containers[0].ports")),
        ),
        case(
            "volumes by name",
            update(&pod(&d, "volumes", json!([{"name": "data", "emptyDir": {"medium": "Memory"}}])),
                   &pod(&d, "volumes", json!([{"name": "cache", "emptyDir": {"medium": "Memory"}}, {"name": "data", "emptyDir": {"medium": "Memory"}}]))),
            deny("ops/align", t(".volumes[0]")),
        ),
        case(
            "initContainers by name",
            update(&pod(&d, "initContainers", json!([c("migrate", "1")])), &pod(&d, "initContainers", json!([c("wait", "1"), c("migrate", "1")]))),
            deny("ops/align", t(".initContainers[0]")),
        ),
        case(
            "imagePullSecrets by name",
            update(&pod(&d, "imagePullSecrets", json!([{"name": "r1"}])), &pod(&d, "imagePullSecrets", json!([{"name": "r0"}, {"name": "r1"}]))),
            deny("ops/align", t(".imagePullSecrets[0]")),
        ),
        case(
            "hostAliases by ip",
            update(&pod(&d, "hostAliases", json!([host("10.0.0.1", json!(["a"]))])),
                   &pod(&d, "hostAliases", json!([host("10.0.0.2", json!(["b"])), host("10.0.0.1", json!(["a"]))]))),
            deny("ops/align", t(".hostAliases[0]")),
        ),
        case(
            "hostAliases moved and changed",
            update(&pod(&d, "hostAliases", json!([host("10.0.0.1", json!(["a"])), host("10.0.0.2", json!(["b"]))])),
                   &pod(&d, "hostAliases", json!([host("10.0.0.2", json!(["b", "c"])), host("10.0.0.1", json!(["a"]))]))),
            deny("ops/align", format!("{}, {}", t(".hostAliases"), t(".hostAliases[0].hostnames[1]"))),
        ),
        case(
            "scalars by index",
            update(&args(json!(["a", "b"])), &args(json!(["x", "a", "b"]))),
            deny("ops/align", ["[0]", "[1]", "[2]"].map(|s| t(&format!(".containers[0].args{s}"))).join(", ")),
        ),
        case(
            "objects without name: by index",
            update(&pod(&d, "tolerations", json!([{"key": "a", "operator": "Exists"}])),
                   &pod(&d, "tolerations", json!([{"key": "b", "operator": "Exists"}, {"key": "a", "operator": "Exists"}]))),
            deny("ops/align", format!("{}, {}", t(".tolerations[0].key"), t(".tolerations[1]"))),
        ),
        case(
            "service ports by port",
            update(&svc(json!([{"name": "a", "port": 80}, {"name": "b", "port": 443}])),
                   &svc(json!([{"name": "b", "port": 80}, {"name": "a", "port": 443}]))),
            deny("ops/align", "spec.ports[0].name, spec.ports[1].name"),
        ),
        case(
            "service port inserted at 0",
            update(&svc(json!([{"name": "http", "port": 80}])), &svc(json!([{"name": "metrics", "port": 9090}, {"name": "http", "port": 80}]))),
            deny("ops/align", "spec.ports[0]"),
        ),
        case(
            "service ports keyed by (port, protocol), TCP default",
            update(&svc(json!([{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53}])),
                   &svc(json!([{"name": "dns-tcp", "port": 53}, {"name": "dns", "port": 53, "protocol": "UDP"}]))),
            deny("ops/align", "spec.ports"),
        ),
        case(
            "image mutable: sidecar is not covered",
            update(&ab_i, &ctrs(&di, json!([c("s", "9"), c("a", "1"), c("b", "2")]))),
            deny("ops/align-img", t(".containers[0]")),
        ),
        case(
            "image mutable: sidecar and image change",
            update(&ab_i, &ctrs(&di, json!([c("s", "9"), c("a", "1"), c("b", "3")]))),
            deny("ops/align-img", t(".containers[0]")),
        ),
        case(
            "image mutable: reorder is not covered",
            update(&ab_i, &ctrs(&di, json!([c("b", "3"), c("a", "1")]))),
            deny("ops/align-img", t(".containers")),
        ),
        case(
            "image mutable: removal is not covered",
            update(&ab_i, &ctrs(&di, json!([c("a", "1")]))),
            deny("ops/align-img", t(".containers[1]")),
        ),
        case("image mutable: images", update(&ab_i, &ctrs(&di, json!([c("a", "5"), c("b", "6")]))), allow("ops/align-img", "enforce")),
    ]);
}

// ---------------------------------------------------------------------------------------------
// §4 coverage: ancestors, descent into added maps, no descent into list elements
// ---------------------------------------------------------------------------------------------

#[test]
fn coverage_and_descent() {
    let rule = |ns: &str, mutable: &str| {
        format!("mode: enforce\nnamespaces: [{ns}]\n{DEPLOY}\nmutable: {mutable}\n")
    };
    let env = Env::rules(
        &[
            (
                "ops",
                "cov-podspec",
                rule("cov-podspec", "['spec.template.spec.*']"),
            ),
            ("ops", "cov-all", rule("cov-all", "['*']")),
            (
                "ops",
                "cov-env",
                rule("cov-env", "['spec.template.spec.containers[*].env']"),
            ),
            ("ops", "cov-meta", rule("cov-meta", "['metadata.*']")),
            (
                "ops",
                "cov-ctr",
                rule("cov-ctr", "['spec.template.spec.containers[*]']"),
            ),
            (
                "ops",
                "cov-list",
                rule("cov-list", "['spec.template.spec.containers']"),
            ),
            (
                "ops",
                "cov-idx",
                rule("cov-idx", "['spec.template.spec.containers[0].image']"),
            ),
            (
                "ops",
                "cov-q",
                rule(
                    "cov-q",
                    r#"["metadata.annotations['example.com/note']", 'metadata.annotations["example.com/other"]']"#,
                ),
            ),
            (
                "ops",
                "cov-restart",
                rule(
                    "cov-restart",
                    r#"["spec.template.metadata.annotations['kubectl.kubernetes.io/restartedAt']"]"#,
                ),
            ),
            (
                "ops",
                "cov-none",
                format!("mode: enforce\nnamespaces: [cov-none]\n{DEPLOY}\n"),
            ),
            (
                "ops",
                "cov-star",
                rule("cov-star", "['spec.template.metadata.annotations.*']"),
            ),
            (
                "ops",
                "cov-kinds",
                rule(
                    "cov-kinds",
                    "['spec.template.spec.containers.*.image', 'metadata.labels[*]']",
                ),
            ),
            ("ops", "cov-spec", rule("cov-spec", "[spec]")),
            (
                "ops",
                "cov-envval",
                rule(
                    "cov-envval",
                    "['spec.template.spec.containers[*].env[*].value']",
                ),
            ),
            (
                "ops",
                "cov-deep",
                rule(
                    "cov-deep",
                    "['spec.template.spec.containers[*].resources.limits.cpu']",
                ),
            ),
        ],
        &[],
    );
    let img = |d: &Value, i: usize, image: &str| {
        edit(d, |o| {
            o["spec"]["template"]["spec"]["containers"][i]["image"] = json!(image)
        })
    };
    let env_list = |d: &Value, list: Value| {
        edit(d, |o| {
            o["spec"]["template"]["spec"]["containers"][0]["env"] = list
        })
    };
    let e = |name: &str, value: &str| json!({"name": name, "value": value});
    let tmpl_ann = |d: &Value, ann: Value| {
        edit(d, |o| {
            o["spec"]["template"]["metadata"]["annotations"] = ann
        })
    };
    let no_tmpl_meta = |d: &Value| {
        edit(d, |o| {
            o["spec"]["template"]
                .as_object_mut()
                .unwrap()
                .remove("metadata");
        })
    };
    let restarted = "kubectl.kubernetes.io/restartedAt";

    let env_d = deployment("cov-env");
    let meta = deployment("cov-meta");
    let two = |ns: &str| ctrs(&deployment(ns), json!([c("a", "1"), c("b", "2")]));
    let sidecar = |ns: &str| {
        ctrs(
            &deployment(ns),
            json!([c("s", "9"), c("a", "1"), c("b", "2")]),
        )
    };
    let swapped = |ns: &str| ctrs(&deployment(ns), json!([c("b", "2"), c("a", "1")]));
    let q = with_annotations(&deployment("cov-q"), json!({"example.com/note": "a"}));
    let rs = deployment("cov-restart");
    let none = deployment("cov-none");
    let star = deployment("cov-star");
    let kinds = deployment("cov-kinds");
    let spec = deployment("cov-spec");
    let deep = deployment("cov-deep");
    let envval = deployment("cov-envval");
    let no_template = |d: &Value| {
        edit(d, |o| {
            o["spec"].as_object_mut().unwrap().remove("template");
        })
    };
    let resources = |d: &Value, res: Value| {
        edit(d, |o| {
            o["spec"]["template"]["spec"]["containers"][0]["resources"] = res
        })
    };

    env.run(vec![
        case("spec.template.spec.* covers the list order",
            update(&two("cov-podspec"), &swapped("cov-podspec")), allow("ops/cov-podspec", "enforce")),
        case("containers[*] covers changes inside elements",
            update(&two("cov-ctr"), &img(&two("cov-ctr"), 1, "9")), allow("ops/cov-ctr", "enforce")),
        case("* at the root covers everything",
            update(&deployment("cov-all"), &replicas(&with_labels(&deployment("cov-all"), json!({"x": "y"})), 9)), allow("ops/cov-all", "enforce")),
        case("ancestor covers a value inside a list element",
            update(&env_d, &env_list(&env_d, json!([e("A", "1"), e("B", "3")]))), allow("ops/cov-env", "enforce")),
        case("ancestor covers an added element",
            update(&env_d, &env_list(&env_d, json!([e("A", "1"), e("B", "2"), e("C", "3")]))), allow("ops/cov-env", "enforce")),
        case("pattern covers the list order",
            update(&env_d, &env_list(&env_d, json!([e("B", "2"), e("A", "1")]))), allow("ops/cov-env", "enforce")),
        case("outside the pattern", update(&env_d, &img(&env_d, 0, "nginx:2")), deny("ops/cov-env", t(".containers[0].image"))),
        case("metadata.* covers a label", update(&meta, &with_labels(&meta, json!({"app": "web", "x": "1"}))), allow("ops/cov-meta", "enforce")),
        case("metadata.* covers an added map", update(&meta, &with_annotations(&meta, json!({"a": "1"}))), allow("ops/cov-meta", "enforce")),
        case("metadata.* does not cover spec", update(&meta, &replicas(&meta, 3)), deny("ops/cov-meta", "spec.replicas")),
        case("containers[*] covers a sidecar", update(&two("cov-ctr"), &sidecar("cov-ctr")), allow("ops/cov-ctr", "enforce")),
        case("containers[*] covers a removal", update(&sidecar("cov-ctr"), &two("cov-ctr")), allow("ops/cov-ctr", "enforce")),
        case("containers[*] does not cover the order", update(&two("cov-ctr"), &swapped("cov-ctr")), deny("ops/cov-ctr", t(".containers"))),
        case("containers covers the order", update(&two("cov-list"), &swapped("cov-list")), allow("ops/cov-list", "enforce")),
        case("containers covers a sidecar", update(&two("cov-list"), &sidecar("cov-list")), allow("ops/cov-list", "enforce")),
        case("containers[0] covers index 0", update(&two("cov-idx"), &img(&two("cov-idx"), 0, "7")), allow("ops/cov-idx", "enforce")),
        case("containers[0] does not cover index 1", update(&two("cov-idx"), &img(&two("cov-idx"), 1, "7")), deny("ops/cov-idx", t(".containers[1].image"))),
        case("quoted key ['…']", update(&q, &with_annotations(&q, json!({"example.com/note": "b"}))), allow("ops/cov-q", "enforce")),
        case("quoted key [\"…\"]", update(&q, &with_annotations(&q, json!({"example.com/note": "a", "example.com/other": "c"}))), allow("ops/cov-q", "enforce")),
        case("quoted key: another key", update(&q, &with_annotations(&q, json!({"example.com/note": "a", "example.com/x": "c"}))),
            deny("ops/cov-q", "metadata.annotations['example.com/x']")),
        case("descent: added annotations with restartedAt", update(&rs, &tmpl_ann(&rs, json!({restarted: "2026-01-01T00:00:00Z"}))), allow("ops/cov-restart", "enforce")),
        case("descent: only the uncovered key is reported",
            update(&rs, &tmpl_ann(&rs, json!({restarted: "2026-01-01T00:00:00Z", "foo": "bar"}))),
            deny("ops/cov-restart", "spec.template.metadata.annotations.foo")),
        case("descent: added template metadata",
            update(&no_tmpl_meta(&rs), &tmpl_ann(&no_tmpl_meta(&rs), json!({restarted: "2026-01-01T00:00:00Z"}))),
            allow("ops/cov-restart", "enforce")),
        case("descent: added template metadata with labels",
            update(&no_tmpl_meta(&rs), &tmpl_ann(&rs, json!({restarted: "2026-01-01T00:00:00Z"}))),
            deny("ops/cov-restart", "spec.template.metadata.labels")),
        case("descent: removed annotations",
            update(&tmpl_ann(&rs, json!({restarted: "2026-01-01T00:00:00Z"})), &rs), allow("ops/cov-restart", "enforce")),
        case("restartedAt changed",
            update(&tmpl_ann(&rs, json!({restarted: "1"})), &tmpl_ann(&rs, json!({restarted: "2"}))), allow("ops/cov-restart", "enforce")),
        case("descent: type change",
            update(&tmpl_ann(&rs, json!("oops")), &tmpl_ann(&rs, json!({restarted: "2"}))), allow("ops/cov-restart", "enforce")),
        case("descent stops where no pattern reaches below",
            update(&no_template(&rs), &tmpl_ann(&rs, json!({restarted: "1"}))),
            deny("ops/cov-restart", "spec.template.metadata.labels, spec.template.spec")),
        case("two wildcards cover a value",
            update(&envval, &env_list(&envval, json!([e("A", "7"), e("B", "8")]))), allow("ops/cov-envval", "enforce")),
        case("two wildcards do not cover an added element",
            update(&envval, &env_list(&envval, json!([e("Z", "0"), e("A", "1"), e("B", "2")]))),
            deny("ops/cov-envval", t(".containers[0].env[0]"))),
        case("no deeper pattern: added map reported whole",
            update(&none, &tmpl_ann(&none, json!({"a": "1", "b": "2"}))), deny("ops/cov-none", "spec.template.metadata.annotations")),
        case("no deeper pattern: added parent reported whole",
            update(&no_tmpl_meta(&none), &none), deny("ops/cov-none", "spec.template.metadata")),
        case("* covers every key of an added map",
            update(&star, &tmpl_ann(&star, json!({"a": "1", "x/y": "2"}))), allow("ops/cov-star", "enforce")),
        case("annotations.* does not cover labels",
            update(&star, &edit(&star, |o| o["spec"]["template"]["metadata"]["labels"]["app"] = json!("x"))),
            deny("ops/cov-star", "spec.template.metadata.labels.app")),
        case("* is a map key, not a list index",
            update(&kinds, &img(&kinds, 0, "nginx:2")), deny("ops/cov-kinds", t(".containers[0].image"))),
        case("[*] is a list index, not a map key",
            update(&kinds, &with_labels(&kinds, json!({"app": "x"}))), deny("ops/cov-kinds", "metadata.labels.app")),
        case("spec covers its whole subtree",
            update(&spec, &replicas(&ctrs(&spec, json!([c("s", "1"), c("app", "2")])), 7)), allow("ops/cov-spec", "enforce")),
        case("spec does not cover metadata",
            update(&spec, &with_labels(&spec, json!({"app": "x"}))), deny("ops/cov-spec", "metadata.labels.app")),
        case("descent below a kept list element",
            update(&deep, &resources(&deep, json!({"limits": {"cpu": "1", "memory": "1Gi"}}))),
            deny("ops/cov-deep", t(".containers[0].resources.limits.memory"))),
        case("descent: covered part only",
            update(&deep, &resources(&deep, json!({"limits": {"cpu": "1"}}))), allow("ops/cov-deep", "enforce")),
        case("no descent into an added element",
            update(&deep, &ctrs(&deep, json!([{"name": "s", "resources": {"limits": {"cpu": "1"}}}, deep["spec"]["template"]["spec"]["containers"][0].clone()]))),
            deny("ops/cov-deep", t(".containers[0]"))),
    ]);
}

// ---------------------------------------------------------------------------------------------
// §4 rendering and order of paths
// ---------------------------------------------------------------------------------------------

#[test]
fn path_rendering_and_byte_order() {
    let env = Env::rules(
        &[
            (
                "ops",
                "render",
                format!("mode: enforce\nnamespaces: [render]\n{DEPLOY}\n"),
            ),
            (
                "ops",
                "explain",
                format!(
                    "mode: enforce\nnamespaces: [explain]\n{DEPLOY}\nmutable: ['spec.template.spec.containers[*].image', \"metadata.annotations['example.com/x']\"]\nbypass: example.com/let-me-through\n"
                ),
            ),
        ],
        &[],
    );
    let d = with_annotations(&deployment("render"), json!({"keep": "x"}));
    let labels = |extra: Value| {
        let mut l = json!({"app": "web"});
        for (k, v) in extra.as_object().unwrap() {
            l[k] = v.clone();
        }
        with_labels(&d, l)
    };
    let eleven: Vec<Value> = (0..11).map(|i| c(&format!("c{i}"), "1")).collect();
    let eleven_d = ctrs(&d, Value::Array(eleven.clone()));
    let mut changed = eleven.clone();
    changed[2]["image"] = json!("2");
    changed[10]["image"] = json!("2");
    let twelve: serde_json::Map<String, Value> =
        (0..12).map(|i| (format!("k{i:02}"), json!("v"))).collect();
    let twelve_paths: Vec<String> = (0..12)
        .map(|i| format!("metadata.labels.k{i:02}"))
        .collect();

    env.run(vec![
        case("byte order, not segment order",
            update(&d, &edit(&d, |o| {
                o["spec"]["a"] = json!({"c": 1});
                o["spec"]["a-b"] = json!(1);
                o["spec"]["x"] = json!([1]);
                o["spec"]["x-y"] = json!(1);
            })),
            deny("ops/render", "spec.a, spec.a-b, spec.x, spec.x-y")),
        case("byte order of nested paths, not segment order",
            update(&edit(&d, |o| {
                o["spec"]["a"] = json!({"c": 1});
                o["spec"]["a-b"] = json!(1);
                o["spec"]["x"] = json!([1]);
                o["spec"]["x-y"] = json!(1);
            }), &edit(&d, |o| {
                o["spec"]["a"] = json!({"c": 2});
                o["spec"]["a-b"] = json!(2);
                o["spec"]["x"] = json!([2]);
                o["spec"]["x-y"] = json!(2);
            })),
            deny("ops/render", "spec.a-b, spec.a.c, spec.x-y, spec.x[0]")),
        case("key with . and /", update(&d, &labels(json!({"app.kubernetes.io/name": "x"}))),
            deny("ops/render", "metadata.labels['app.kubernetes.io/name']")),
        case("letters digits _ - joined with .", update(&d, &labels(json!({"a_b-C9": "x"}))),
            deny("ops/render", "metadata.labels.a_b-C9")),
        case("digits only", update(&d, &labels(json!({"123": "x"}))), deny("ops/render", "metadata.labels.123")),
        case("key with a space", update(&d, &with_annotations(&d, json!({"keep": "x", "a b": "1"}))),
            deny("ops/render", "metadata.annotations['a b']")),
        case("byte order of rendered paths",
            update(&d, &replicas(&labels(json!({"a": "1", "B": "1", "a.b": "1", "a-b": "1"})), 3)),
            deny("ops/render", "metadata.labels.B, metadata.labels.a, metadata.labels.a-b, metadata.labels['a.b'], spec.replicas")),
        case("indices in byte order", update(&eleven_d, &ctrs(&d, Value::Array(changed))),
            deny("ops/render", format!("{}, {}", t(".containers[10].image"), t(".containers[2].image")))),
        case("more than 10 paths are all listed", update(&d, &labels(Value::Object(twelve))),
            deny("ops/render", twelve_paths.join(", "))),
    ]);

    // The reason names the rule, its mutable patterns and how to bypass (the rule's key);
    // values are truncated to 64 characters.
    let e = deployment("explain");
    let long = "v".repeat(200);
    let (_, got) = env.send(&update(
        &e,
        &replicas(&with_labels(&e, json!({"app": long})), 3),
    ));
    let r = response_of(&got);
    assert_eq!(r["allowed"], false, "{got}");
    let message = r["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("{PREFIX}metadata.labels.app, spec.replicas")),
        "{message}"
    );
    for needle in [
        "ops/explain",
        "spec.template.spec.containers[*].image",
        "metadata.annotations['example.com/x']",
        "example.com/let-me-through",
    ] {
        assert!(
            message.contains(needle),
            "{needle:?} missing from {message}"
        );
    }
    assert!(
        !message.contains(&"v".repeat(65)),
        "value not truncated to 64 characters: {message}"
    );
}

// ---------------------------------------------------------------------------------------------
// §3 scale subresource
// ---------------------------------------------------------------------------------------------

#[test]
fn scale_subresource() {
    let workloads = "selectors: [{apiGroup: apps, kind: Deployment}, {apiGroup: apps, kind: StatefulSet}, {apiGroup: apps, kind: ReplicaSet}, {apiGroup: argoproj.io, kind: Rollout}]";
    let env = Env::rules(
        &[
            (
                "ops",
                "scale-nolabels",
                format!("mode: dry-run\npriority: 5\nnamespaces: [scale-nolabels]\n{DEPLOY}\nlabels: []\n"),
            ),
            ("ops", "scale-strict", format!("mode: enforce\nnamespaces: [scale]\n{workloads}\n")),
            (
                "ops",
                "scale-labels",
                format!("mode: off\npriority: 10\nnamespaces: [scale]\n{DEPLOY}\nlabels: [app=web]\n"),
            ),
            (
                "ops",
                "scale-hpa",
                format!("mode: enforce\nnamespaces: [scale-hpa]\n{DEPLOY}\nmutable: [spec.replicas]\n"),
            ),
            (
                "ops",
                "scale-kind",
                "mode: enforce\nnamespaces: [scale-kind]\nselectors: [{apiGroup: autoscaling, kind: Scale}]\n".to_owned(),
            ),
            (
                "ops",
                "scale-scoped",
                format!("mode: enforce\nnamespaces: [scale-inc]\n{DEPLOY}\ninclude: [spec.template]\n"),
            ),
            (
                "ops",
                "scale-excluded",
                format!("mode: enforce\nnamespaces: [scale-exc, scale-warn]\n{DEPLOY}\nexclude: [metadata]\n"),
            ),
            (
                "ops",
                "scale-sts",
                "mode: enforce\nnamespaces: [scale-sts]\nselectors: [{apiGroup: apps, kind: StatefulSet}]\n".to_owned(),
            ),
        ],
        &[("scale-warn", Some("warn"))],
    );
    let labels = json!({"app": "web"});
    let s = |ns: &str, group: &str, version: &str, resource: &str, old: i64, new: i64| {
        scale_review(ns, group, version, resource, old, new, labels.clone())
    };
    env.run(vec![
        case(
            "scale to 0 as sent by the API server (replicas omitted)",
            {
                let mut review = s("scale", "apps", "v1", "deployments", 2, 0);
                review["request"]["object"]["spec"] = json!({});
                review
            },
            deny("ops/scale-strict", "spec.replicas"),
        ),
        case(
            "scale from 0 as sent by the API server (replicas omitted)",
            {
                let mut review = s("scale", "apps", "v1", "deployments", 0, 2);
                review["request"]["oldObject"]["spec"] = json!({});
                review
            },
            deny("ops/scale-strict", "spec.replicas"),
        ),
        case(
            "scale to 0",
            s("scale", "apps", "v1", "deployments", 2, 0),
            deny("ops/scale-strict", "spec.replicas"),
        ),
        case(
            "scale from 0",
            s("scale", "apps", "v1", "deployments", 0, 2),
            deny("ops/scale-strict", "spec.replicas"),
        ),
        case(
            "labels: [] is no label selector",
            s("scale-nolabels", "apps", "v1", "deployments", 2, 5),
            would_deny("ops/scale-nolabels", "spec.replicas"),
        ),
        case(
            "deployments/scale, labels rule skipped offline",
            s("scale", "apps", "v1", "deployments", 2, 5),
            deny("ops/scale-strict", "spec.replicas"),
        ),
        case(
            "statefulsets/scale",
            s("scale", "apps", "v1", "statefulsets", 2, 5),
            deny("ops/scale-strict", "spec.replicas"),
        ),
        case(
            "replicasets/scale",
            s("scale", "apps", "v1", "replicasets", 2, 5),
            deny("ops/scale-strict", "spec.replicas"),
        ),
        case(
            "rollouts.argoproj.io/scale",
            s("scale", "argoproj.io", "v1alpha1", "rollouts", 2, 5),
            deny("ops/scale-strict", "spec.replicas"),
        ),
        case(
            "only spec.replicas can change",
            scale_review(
                "scale",
                "apps",
                "v1",
                "deployments",
                2,
                2,
                json!({"app": "web", "other": "x"}),
            ),
            allow("ops/scale-strict", "enforce"),
        ),
        case(
            "spec.replicas mutable",
            s("scale-hpa", "apps", "v1", "deployments", 2, 5),
            allow("ops/scale-hpa", "enforce"),
        ),
        case(
            "matched by the parent kind, not Scale",
            s("scale-kind", "apps", "v1", "deployments", 2, 5),
            no_rule(),
        ),
        case(
            "parent kind Deployment does not match a StatefulSet rule",
            s("scale-sts", "apps", "v1", "deployments", 2, 5),
            no_rule(),
        ),
        case(
            "include applies to the replicas change",
            s("scale-inc", "apps", "v1", "deployments", 2, 5),
            allow("ops/scale-scoped", "enforce"),
        ),
        case(
            "exclude of another subtree",
            s("scale-exc", "apps", "v1", "deployments", 2, 5),
            deny("ops/scale-excluded", "spec.replicas"),
        ),
        case(
            "namespace mode applies",
            s("scale-warn", "apps", "v1", "deployments", 2, 5),
            warned("ops/scale-excluded", "spec.replicas"),
        ),
        case(
            "parent kind StatefulSet",
            s("scale-sts", "apps", "v1", "statefulsets", 2, 5),
            deny("ops/scale-sts", "spec.replicas"),
        ),
    ]);
}

// ---------------------------------------------------------------------------------------------
// §2 validation: invalid rules are reported and never applied; the others keep working
// ---------------------------------------------------------------------------------------------

#[test]
fn invalid_rules_are_reported_and_isolated() {
    let base = |mode: &str| format!("mode: {mode}\npriority: 100\nnamespaces: ['*']\n{DEPLOY}\n");
    let off = base("off");
    // (name, spec, text the reason must contain)
    let bad: Vec<(&str, String, Option<&str>)> = vec![
        (
            "wrong-type-string-priority",
            format!("mode: off\npriority: \"5\"\nnamespaces: ['*']\n{DEPLOY}\n"),
            Some("priority"),
        ),
        (
            "wrong-type-namespaces",
            format!("mode: off\npriority: 100\nnamespaces: '*'\n{DEPLOY}\n"),
            Some("namespaces"),
        ),
        (
            "bad-user-glob",
            format!("{off}exemptUsers: ['robot-[']\n"),
            None,
        ),
        (
            "negative-index",
            format!("{off}include: ['spec.template.spec.containers[-1]']\n"),
            Some("containers[-1]"),
        ),
        (
            "trailing-dot",
            format!("{off}mutable: ['spec.']\n"),
            Some("spec."),
        ),
        (
            "leading-dot",
            format!("{off}mutable: ['.spec']\n"),
            Some(".spec"),
        ),
        (
            "unknown-key",
            format!("{off}mutabel: [spec.replicas]\n"),
            Some("mutabel"),
        ),
        ("bad-mode", base("block"), Some("block")),
        (
            "missing-mode",
            format!("priority: 100\nnamespaces: ['*']\n{DEPLOY}\n"),
            None,
        ),
        (
            "empty-namespaces",
            format!("mode: off\npriority: 100\nnamespaces: []\n{DEPLOY}\n"),
            None,
        ),
        (
            "missing-namespaces",
            format!("mode: off\npriority: 100\n{DEPLOY}\n"),
            None,
        ),
        (
            "empty-selectors",
            "mode: off\npriority: 100\nnamespaces: ['*']\nselectors: []\n".to_owned(),
            None,
        ),
        (
            "selector-without-kind",
            "mode: off\npriority: 100\nnamespaces: ['*']\nselectors: [{apiGroup: apps}]\n"
                .to_owned(),
            None,
        ),
        (
            "bad-glob",
            format!("mode: off\npriority: 100\nnamespaces: ['prod-[abc']\n{DEPLOY}\n"),
            None,
        ),
        (
            "unterminated-bracket",
            format!("{off}mutable: ['spec.template.spec.containers[0']\n"),
            Some("spec.template.spec.containers[0"),
        ),
        (
            "empty-segment",
            format!("{off}mutable: ['spec..replicas']\n"),
            Some("spec..replicas"),
        ),
        (
            "bad-index",
            format!("{off}include: ['spec.template.spec.containers[x].image']\n"),
            Some("containers[x]"),
        ),
        (
            "unterminated-quote",
            format!("{off}exclude: [\"metadata.annotations['a/b\"]\n"),
            Some("metadata.annotations['a/b"),
        ),
        (
            "wrong-type-priority",
            format!("mode: off\npriority: high\nnamespaces: ['*']\n{DEPLOY}\n"),
            Some("priority"),
        ),
        (
            "wrong-type-list",
            format!("{off}mutable: spec.replicas\n"),
            Some("mutable"),
        ),
        (
            "wrong-type-float",
            format!("mode: off\npriority: 1.5\nnamespaces: ['*']\n{DEPLOY}\n"),
            Some("priority"),
        ),
        ("mode-case", base("Enforce"), Some("Enforce")),
        (
            "selector-unknown-key",
            off.replace(
                DEPLOY,
                "selectors: [{apiGroup: apps, kind: Deployment, version: v1}]",
            ),
            Some("version"),
        ),
        ("spec-not-a-map", "- mode: off\n".to_owned(), None),
    ];
    let mut files: Files = vec![(
        "good.yaml".into(),
        rule_config_map(
            "ops",
            "good",
            &format!("mode: enforce\nnamespaces: ['*']\n{DEPLOY}\n"),
        ),
    )];
    files.push((
        "bad.yaml".into(),
        bad.iter()
            .map(|(name, spec, _)| rule_config_map("bad", name, spec))
            .collect::<Vec<_>>()
            .join("---\n"),
    ));
    files.push((
        "extra.yml".into(),
        rule_config_map(
            "ops",
            "full",
            &format!(
                "mode: enforce\npriority: 200\nnamespaces: [full-ns]\n{DEPLOY}\nlabels: [app=web]\nusers: [alice, bob]\nexemptUsers: ['robot-*']\ninclude: [spec, metadata.labels]\nexclude: [spec.template.metadata]\nmutable: ['spec.template.spec.containers[*].image']\nbypass: example.com/bypass\n"
            ),
        ),
    ));
    // A rule ConfigMap without `data.spec`: no mode, so invalid.
    files.push((
        "no-spec.yaml".into(),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: no-spec\n  namespace: bad\n  annotations:\n    drift-sentinel.k8s.io/rule: \"true\"\ndata:\n  other: x\n".into(),
    ));
    // Only `*.yaml`/`*.yml` files are read.
    files.push((
        "ignored.txt".into(),
        rule_config_map(
            "ops",
            "txt",
            &format!("mode: off\npriority: 1000\nnamespaces: ['*']\n{DEPLOY}\n"),
        ),
    ));
    // A ConfigMap without the rule annotation is not a rule (neither valid nor invalid).
    files.push((
        "plain-configmap.yaml".into(),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: ops\ndata:\n  spec: |\n    mode: nonsense\n".into(),
    ));
    let env = Env::start(files, &[]);
    let status = env
        .agent
        .wait_for_status("invalid rules to be reported", |s| {
            s["invalidRules"]
                .as_array()
                .is_some_and(|a| a.len() > bad.len())
        });
    let invalid = status["invalidRules"].as_array().unwrap();
    let mut problems = Vec::new();
    if invalid.len() != bad.len() + 1 {
        problems.push(format!(
            "{} invalid rules reported, want {}",
            invalid.len(),
            bad.len() + 1
        ));
    }
    for (name, _, text) in bad.iter().chain([&("no-spec", String::new(), None)]) {
        let id = format!("bad/{name}");
        let entry = invalid.iter().find(|e| {
            e.as_object().is_some_and(|m| {
                m.values()
                    .any(|v| v.as_str().is_some_and(|s| s == id || s.contains(&id)))
            })
        });
        let Some(entry) = entry else {
            problems.push(format!("{id} is not reported as invalid"));
            continue;
        };
        let strings: Vec<&str> = entry
            .as_object()
            .unwrap()
            .values()
            .filter_map(Value::as_str)
            .collect();
        if strings.iter().any(|s| s.contains('\n')) {
            problems.push(format!("{id}: reason is not one line: {entry}"));
        }
        if let Some(text) = text
            && !strings.iter().any(|s| s.contains(text))
        {
            problems.push(format!("{id}: reason does not name {text:?}: {entry}"));
        }
    }
    if invalid.iter().any(|e| {
        e.to_string().contains("ops/settings")
            || e.to_string().contains("ops/full")
            || e.to_string().contains("ops/good")
    }) {
        problems.push(format!(
            "a valid rule or non-rule ConfigMap reported invalid: {invalid:?}"
        ));
    }
    assert!(
        problems.is_empty(),
        "{}\nstatus: {status:#}",
        problems.join("\n")
    );

    let any = deployment("anywhere");
    let full = deployment("full-ns");
    env.run(vec![
        case(
            "invalid rules are never applied",
            update(&any, &replicas(&any, 3)),
            deny("ops/good", "spec.replicas"),
        ),
        case(
            "a rule using every field loads",
            update(&full, &replicas(&full, 3)),
            deny("ops/full", "spec.replicas"),
        ),
        case(
            "every field applies",
            update(
                &full,
                &edit(&full, |o| {
                    o["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2")
                }),
            ),
            allow("ops/full", "enforce"),
        ),
        case(
            "exemptUsers applies",
            as_user(update(&full, &replicas(&full, 3)), "robot-1"),
            allow("ops/full", "enforce"),
        ),
        case(
            "users applies",
            as_user(update(&full, &replicas(&full, 3)), "carol"),
            allow("ops/full", "enforce"),
        ),
    ]);
}

// ---------------------------------------------------------------------------------------------
// §5 admission protocol
// ---------------------------------------------------------------------------------------------

/// [`drift_testkit::raw_exchange`] to the agent's loopback `port`.
fn raw_exchange(port: u16, head: &str, pieces: &[&[u8]]) -> String {
    drift_testkit::raw_exchange(("127.0.0.1", port), head, pieces)
}

#[test]
fn admission_protocol() {
    let env = Env::rules(
        &[(
            "ops",
            "r",
            format!("mode: enforce\nnamespaces: ['*']\n{DEPLOY}\n"),
        )],
        &[],
    );
    let d = deployment("prod");
    let denied_review = update(&d, &replicas(&d, 3));
    let send = |content_type: &str, body: Vec<u8>| {
        let response = env
            .client
            .post(&env.url)
            .header("Content-Type", content_type)
            .body(body)
            .send()
            .unwrap();
        (response.status().as_u16(), response.text().unwrap())
    };
    let mut problems: Vec<String> = Vec::new();
    fn expect_code(problems: &mut Vec<String>, what: &str, got: u16, want: u16, body: &str) {
        if got != want {
            problems.push(format!("{what}: HTTP {got}, want {want}: {body}"));
        }
    }

    // Content types.
    let body = denied_review.to_string().into_bytes();
    for ct in [
        "text/plain",
        "application/yaml",
        "application/x-www-form-urlencoded",
    ] {
        let (code, text) = send(ct, body.clone());
        expect_code(
            &mut problems,
            &format!("content type {ct}"),
            code,
            415,
            &text,
        );
    }
    let (code, text) = send("application/json; charset=utf-8", body.clone());
    expect_code(
        &mut problems,
        "application/json; charset=utf-8",
        code,
        200,
        &text,
    );
    let (code, text) = send("Application/JSON", body.clone());
    expect_code(
        &mut problems,
        "media types are case-insensitive",
        code,
        200,
        &text,
    );

    // Not an AdmissionReview: 400.
    for (what, bad) in [
        ("not JSON", b"{not json".to_vec()),
        ("a Pod", br#"{"apiVersion":"v1","kind":"Pod"}"#.to_vec()),
        ("a JSON array", b"[]".to_vec()),
        (
            "another kind with a request",
            json!({"apiVersion": "v1", "kind": "Pod", "request": denied_review["request"].clone()})
                .to_string()
                .into_bytes(),
        ),
    ] {
        let response = env
            .client
            .post(&env.url)
            .header("Content-Type", "application/json")
            .body(bad)
            .send()
            .unwrap();
        let plain = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/plain"));
        let (code, text) = (response.status().as_u16(), response.text().unwrap());
        if !plain {
            problems.push(format!("{what}: the 400 is not a plain-text message"));
        }
        expect_code(&mut problems, what, code, 400, &text);
        if text.trim().is_empty() {
            problems.push(format!("{what}: 400 without a message"));
        }
    }

    // 413 beyond 8 MiB; exactly 8 MiB is read.
    let over = raw_exchange(
        env.agent.port,
        &format!(
            "POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            8 * 1024 * 1024 + 1
        ),
        &[&vec![b' '; 8 * 1024 * 1024 + 1]],
    );
    if !over.starts_with("HTTP/1.1 413") {
        problems.push(format!(
            "8 MiB + 1: {}",
            over.lines().next().unwrap_or_default()
        ));
    }
    let chunk = format!("{:x}\r\n{}\r\n", 1024 * 1024, " ".repeat(1024 * 1024));
    let chunks: Vec<&[u8]> = (0..9).map(|_| chunk.as_bytes()).collect();
    let streamed = raw_exchange(
        env.agent.port,
        "POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        &chunks,
    );
    if !streamed.starts_with("HTTP/1.1 413") {
        problems.push(format!(
            "9 MiB chunked: {}",
            streamed.lines().next().unwrap_or_default()
        ));
    }
    let mut exact = denied_review.to_string().into_bytes();
    exact.resize(8 * 1024 * 1024, b' ');
    let (code, text) = send("application/json", exact);
    expect_code(
        &mut problems,
        "exactly 8 MiB",
        code,
        200,
        &text[..text.len().min(300)],
    );
    if code == 200 {
        let v: Value = serde_json::from_str(&text).unwrap_or_default();
        if v["response"]["uid"] != denied_review["request"]["uid"]
            || v["response"]["allowed"] != false
        {
            problems.push(format!("exactly 8 MiB: {v}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    // AdmissionReview-shaped errors and the decisions around them.
    let check_400 = |what: &str, review: &Value| {
        let (code, got) = env.send(review);
        assert_eq!(code, 200, "{what}: {got}");
        assert_eq!(got["kind"], "AdmissionReview", "{what}: {got}");
        let r = response_of(&got);
        assert_eq!(r["allowed"], false, "{what}: {got}");
        assert_eq!(r["status"]["code"], 400, "{what}: {got}");
        assert!(
            r["status"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{what}: a reason: {got}"
        );
        if let Some(uid) = review["request"]["uid"].as_str() {
            assert_eq!(r["uid"], uid, "{what}");
        }
    };
    check_400(
        "no request",
        &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
    );
    check_400(
        "request null",
        &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": null}),
    );
    let mut beta_bad = update(&d, &replicas(&d, 3));
    beta_bad["apiVersion"] = json!("admission.k8s.io/v1beta1");
    beta_bad["request"]["object"] = json!([]);
    let (_, got) = env.send(&beta_bad);
    assert_eq!(got["apiVersion"], "admission.k8s.io/v1beta1", "{got}");
    assert_eq!(response_of(&got)["status"]["code"], 400, "{got}");
    assert_eq!(
        response_of(&got)["uid"],
        beta_bad["request"]["uid"],
        "{got}"
    );
    let (_, got) =
        env.send(&json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}));
    assert_eq!(got["apiVersion"], "admission.k8s.io/v1beta1", "{got}");
    assert_eq!(response_of(&got)["status"]["code"], 400, "{got}");
    for (what, field, value) in [
        ("object null", "object", Value::Null),
        ("object an array", "object", json!([1])),
        ("object a string", "object", json!("x")),
        ("oldObject null", "oldObject", Value::Null),
        ("oldObject a number", "oldObject", json!(3)),
    ] {
        let mut review = update(&d, &replicas(&d, 3));
        review["request"][field] = value;
        check_400(what, &review);
    }
    let mut missing_old = update(&d, &replicas(&d, 3));
    missing_old["request"]
        .as_object_mut()
        .unwrap()
        .remove("oldObject");
    check_400("oldObject missing", &missing_old);

    let op = |operation: &str, object: Value, old: Value| {
        let mut review = update(&d, &replicas(&d, 3));
        review["request"]["operation"] = json!(operation);
        review["request"]["object"] = object;
        review["request"]["oldObject"] = old;
        review
    };
    let beta = |mut review: Value| {
        review["apiVersion"] = json!("admission.k8s.io/v1beta1");
        review
    };
    let dry = |mut review: Value| {
        review["request"]["dryRun"] = json!(true);
        review
    };
    env.run(vec![
        case(
            "UPDATE denied, uid echoed",
            denied_review.clone(),
            deny("ops/r", "spec.replicas"),
        ),
        case(
            "v1beta1 answered as v1beta1 (denied)",
            beta(update(&d, &replicas(&d, 3))),
            deny("ops/r", "spec.replicas"),
        ),
        case(
            "v1beta1 answered as v1beta1 (allowed)",
            beta(update(&d, &d)),
            allow("ops/r", "enforce"),
        ),
        case(
            "dryRun decided like any other",
            dry(update(&d, &replicas(&d, 3))),
            deny("ops/r", "spec.replicas"),
        ),
        case(
            "CREATE of a matching object",
            op("CREATE", replicas(&d, 3), Value::Null),
            no_rule(),
        ),
        case(
            "CREATE whatever its object",
            op("CREATE", json!("x"), json!([1])),
            no_rule(),
        ),
        case(
            "DELETE without object",
            op("DELETE", Value::Null, d.clone()),
            no_rule(),
        ),
        case(
            "DELETE whatever its objects",
            op("DELETE", Value::Null, Value::Null),
            no_rule(),
        ),
        case(
            "CONNECT",
            op("CONNECT", json!({"kind": "PodExecOptions"}), Value::Null),
            no_rule(),
        ),
        case(
            "v1beta1 CREATE",
            beta(op("CREATE", replicas(&d, 3), Value::Null)),
            no_rule(),
        ),
    ]);
}

// ---------------------------------------------------------------------------------------------
// §4 coverage: descent into an added / removed / type-changed map key whose value is a list
// ---------------------------------------------------------------------------------------------

/// reference §4: "When a changed path names a **map key** that was added, removed or whose value
/// changed type, and a deeper `mutable` pattern reaches below it […], the diff descends into it
/// (missing side = absent) so that only the uncovered parts are reported. There is no descent
/// into an added or removed **list element** […]: those are reported at the element path
/// (`…containers[0]`)". A map key whose value is a list is still a map key: descending into it
/// against an absent side reports its elements at their element paths, which `…[*]` covers.
#[test]
fn descent_into_a_list_valued_map_key() {
    let rule = |ns: &str, mutable: &str| {
        format!(
            "mode: enforce\nnamespaces: [{ns}]\nselectors: [{{apiGroup: apps, kind: Deployment}}, {{apiGroup: example.com, kind: Widget}}]\nmutable: {mutable}\n"
        )
    };
    let env = Env::rules(
        &[
            (
                "ops",
                "tolerations",
                rule("tol", "['spec.template.spec.tolerations[*]']"),
            ),
            ("ops", "items", rule("items", "['spec.extra.items[*]']")),
            (
                "ops",
                "images",
                rule("img", "['spec.template.spec.containers[*].image']"),
            ),
        ],
        &[],
    );
    let tol = deployment("tol");
    let with_tol = |v: Value| pod(&tol, "tolerations", v);
    let one = json!([{"key": "a", "operator": "Exists"}]);
    let two = json!([{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}]);
    let widget = |spec: Value| {
        object(
            "example.com/v1",
            "Widget",
            Some("items"),
            json!({"spec": spec}),
        )
    };
    let img = deployment("img");
    let no_template = edit(&img, |o| {
        o["spec"].as_object_mut().unwrap().remove("template");
    });

    // Sanity: with the list present on both sides, an added element is covered.
    env.run(vec![case(
        "element added to an existing list",
        update(&with_tol(one.clone()), &with_tol(two.clone())),
        allow("ops/tolerations", "enforce"),
    )]);
    // A list-valued map key that appears, disappears or changes type is descended into when a
    // deeper mutable pattern reaches below it: its elements are reported whole at their index.
    env.run(vec![
        case(
            "list added where the key was absent",
            update(&tol, &with_tol(one.clone())),
            allow("ops/tolerations", "enforce"),
        ),
        case(
            "list removed",
            update(&with_tol(two.clone()), &tol),
            allow("ops/tolerations", "enforce"),
        ),
        case(
            "scalar replaced by a list",
            update(&with_tol(json!("none")), &with_tol(one.clone())),
            allow("ops/tolerations", "enforce"),
        ),
        case(
            "added map holding a list",
            update(
                &widget(json!({"size": 1})),
                &widget(json!({"size": 1, "extra": {"items": [{"name": "a"}]}})),
            ),
            allow("ops/items", "enforce"),
        ),
        case(
            "added template: containers reported at the element path",
            update(&no_template, &img),
            deny(
                "ops/images",
                format!("spec.template.metadata, {}", t(".containers[0]")),
            ),
        ),
    ]);
}
