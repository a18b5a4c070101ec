//! What every case needs: the agent under test (offline, its rule files and namespaces),
//! requests and objects to build reviews from, and the expected outcomes with their check.

pub(crate) use std::sync::atomic::{AtomicUsize, Ordering};

pub(crate) use crate::support::{Agent, plain_client, post, rule_config_map};
pub(crate) use serde_json::{Value, json};

pub(crate) const PREFIX: &str = "Drift Sentinel: immutable fields changed: ";
/// The pod spec of a workload.
pub(crate) const T: &str = "spec.template.spec";
pub(crate) const DEPLOY: &str = "selectors: [{apiGroup: apps, kind: Deployment}]";

// ---------------------------------------------------------------------------------------------
// The agent under test
// ---------------------------------------------------------------------------------------------

pub(crate) struct Env {
    pub(crate) _dir: tempfile::TempDir,
    pub(crate) agent: Agent,
    pub(crate) client: reqwest::blocking::Client,
    pub(crate) url: String,
}

/// `(file name, content)` of rule files.
pub(crate) type Files = Vec<(String, String)>;

pub(crate) fn rule_files(rules: &[(&str, &str, String)]) -> Files {
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

pub(crate) fn namespace_doc(name: &str, mode: Option<&str>) -> String {
    match mode {
        Some(mode) => format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  annotations:\n    drift-sentinel.k8s.io/mode: \"{mode}\"\n"
        ),
        None => format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n"),
    }
}

impl Env {
    pub(crate) fn start(files: Files, namespaces: &[(&str, Option<&str>)]) -> Env {
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

    pub(crate) fn rules(
        rules: &[(&str, &str, String)],
        namespaces: &[(&str, Option<&str>)],
    ) -> Env {
        Env::start(rule_files(rules), namespaces)
    }

    pub(crate) fn send(&self, review: &Value) -> (u16, Value) {
        post(&self.client, &self.url, review)
    }

    pub(crate) fn run(&self, cases: Vec<Case>) {
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

pub(crate) static UID: AtomicUsize = AtomicUsize::new(0);

pub(crate) fn next_uid() -> String {
    format!("spec-case-{}", UID.fetch_add(1, Ordering::SeqCst))
}

/// An `admission.k8s.io/v1` UPDATE review of `old` → `new`, kind and namespace taken from `new`.
pub(crate) fn update(old: &Value, new: &Value) -> Value {
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

pub(crate) fn as_user(mut review: Value, user: &str) -> Value {
    review["request"]["userInfo"]["username"] = json!(user);
    review
}

/// A `<resource>/scale` UPDATE of the parent `group`/`resource`.
pub(crate) fn scale_review(
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

pub(crate) fn deployment(ns: &str) -> Value {
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

pub(crate) fn object(api_version: &str, kind: &str, ns: Option<&str>, body: Value) -> Value {
    let mut o = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "obj"}});
    if let Some(ns) = ns {
        o["metadata"]["namespace"] = json!(ns);
    }
    for (k, v) in body.as_object().unwrap() {
        o[k] = v.clone();
    }
    o
}

pub(crate) fn edit(v: &Value, f: impl FnOnce(&mut Value)) -> Value {
    let mut c = v.clone();
    f(&mut c);
    c
}

pub(crate) fn replicas(v: &Value, n: i64) -> Value {
    edit(v, |o| o["spec"]["replicas"] = json!(n))
}

pub(crate) fn pod(v: &Value, field: &str, value: Value) -> Value {
    edit(v, |o| o["spec"]["template"]["spec"][field] = value)
}

pub(crate) fn ctrs(v: &Value, list: Value) -> Value {
    pod(v, "containers", list)
}

pub(crate) fn c(name: &str, image: &str) -> Value {
    json!({"name": name, "image": image})
}

pub(crate) fn with_annotations(v: &Value, annotations: Value) -> Value {
    edit(v, |o| o["metadata"]["annotations"] = annotations)
}

pub(crate) fn with_labels(v: &Value, labels: Value) -> Value {
    edit(v, |o| o["metadata"]["labels"] = labels)
}

/// `spec.template.spec` + suffix.
pub(crate) fn t(suffix: &str) -> String {
    format!("{T}{suffix}")
}

// ---------------------------------------------------------------------------------------------
// Expected outcomes
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub(crate) enum Outcome {
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
pub(crate) struct Expect {
    pub(crate) rule: String,
    pub(crate) outcome: Outcome,
    /// The invalid namespace mode annotation value that one warning must name.
    pub(crate) ns_warning: Option<String>,
}

impl Expect {
    pub(crate) fn ns_warning(mut self, value: &str) -> Self {
        self.ns_warning = Some(value.to_owned());
        self
    }
}

pub(crate) fn expect(rule: &str, outcome: Outcome) -> Expect {
    Expect {
        rule: rule.to_owned(),
        outcome,
        ns_warning: None,
    }
}
pub(crate) fn no_rule() -> Expect {
    expect("", Outcome::NoRule)
}
pub(crate) fn allow(rule: &str, mode: &str) -> Expect {
    expect(rule, Outcome::Allowed(mode.to_owned()))
}
pub(crate) fn deny(rule: &str, paths: impl Into<String>) -> Expect {
    expect(rule, Outcome::Denied(paths.into()))
}
pub(crate) fn warned(rule: &str, paths: impl Into<String>) -> Expect {
    expect(rule, Outcome::Warned(paths.into()))
}
pub(crate) fn would_deny(rule: &str, paths: impl Into<String>) -> Expect {
    expect(rule, Outcome::WouldDeny(paths.into()))
}

pub(crate) struct Case {
    pub(crate) name: String,
    pub(crate) review: Value,
    pub(crate) want: Expect,
}

pub(crate) fn case(name: impl Into<String>, review: Value, want: Expect) -> Case {
    Case {
        name: name.into(),
        review,
        want,
    }
}

/// `text` is the fixed prefix followed by exactly `paths` (not by a further path or a longer one).
pub(crate) fn lists_exactly(text: &str, paths: &str) -> bool {
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

pub(crate) fn check_eq(errors: &mut Vec<String>, what: &str, actual: &Value, want: Value) {
    if *actual != want {
        errors.push(format!("{what} = {actual}, want {want}"));
    }
}

pub(crate) fn verify(case: &Case, code: u16, got: &Value) -> Vec<String> {
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

pub(crate) fn annotations_none(ann: &Value) -> Vec<String> {
    if ann.is_null() || ann.as_object().is_some_and(|m| m.is_empty()) {
        Vec::new()
    } else {
        vec![format!("auditAnnotations = {ann}, want none")]
    }
}

pub(crate) fn response_of(review: &Value) -> &Value {
    &review["response"]
}
