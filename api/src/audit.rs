//! The audit (SPEC §8) as both of its runners render it: `drift-sentinel audit` (the agent) and
//! `kubectl drift audit` (the plugin). The judgement itself is the engine's
//! ([`drift_engine::audit()`]); what lives here is everything around it that the two programs
//! must do identically, so that they name the same objects and paths:
//!
//! - which objects a run judges and with what context ([`judge`]): a rule must select the object,
//!   and its namespace's mode annotation applies;
//! - the objects of files, as `kubectl get -o yaml` writes them ([`object_files`],
//!   [`read_objects`]; the YAML itself is parsed by [`drift_engine::manifests`]);
//! - a drifted object as a `violation_audited` record ([`audit_record`]) and as text
//!   ([`drift_text`]), and the run's counts ([`AuditCounts::add`]).

use std::borrow::Cow;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use drift_engine::manifests::Namespaces;
use drift_engine::rule::Mode;
use drift_engine::{Audit, AuditContext, Detail, RuleSet};
use serde_json::{Map, Value};

use crate::status::AuditCounts;
use crate::violation::{
    AUDIT_EVENT, Details, MAX_DETAILED_CHANGES, ViolationRecord, format_rfc3339,
};

/// The resources a `*` selector audits when nothing else says: the webhook's, as the chart's
/// default `webhook.rules` lists them (`group/resource`; the core group is empty).
pub const DEFAULT_AUDIT_RESOURCES: &str =
    "apps/deployments,apps/statefulsets,apps/daemonsets,argoproj.io/rollouts";

/// `group/resource` pairs of a list such as [`DEFAULT_AUDIT_RESOURCES`] (`/pods` or `pods` is
/// the core group); empty entries are dropped.
pub fn parse_resources<S: AsRef<str>>(texts: &[S]) -> Vec<(String, String)> {
    texts
        .iter()
        .flat_map(|t| t.as_ref().split(','))
        .filter_map(|t| {
            let t = t.trim();
            let (group, resource) = t.rsplit_once('/').unwrap_or(("", t));
            (!resource.is_empty()).then(|| (group.to_owned(), resource.to_owned()))
        })
        .collect()
}

/// What `enforcementAction` a mode records: what the webhook does (or would do) in it.
pub fn enforcement_action(mode: Mode) -> Option<&'static str> {
    match mode {
        Mode::Enforce => Some("deny"),
        Mode::Warn => Some("warn"),
        Mode::DryRun => Some("dryrun"),
        Mode::Off => None,
    }
}

/// Judges one live object as a run does: `None` when no auditing rule selects it (it is not
/// part of the run, not even counted); otherwise the engine's audit under the rule that would
/// win at admission, with the object's namespace's mode annotation.
pub fn judge<'a>(
    rules: &'a RuleSet,
    namespaces: &'a Namespaces,
    object: &'a Value,
    drift_managers: &'a [String],
) -> Option<Audit<'a>> {
    if !drift_engine::audit::is_selected(rules, object) {
        return None;
    }
    let namespace = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let context = AuditContext {
        namespace_mode: namespaces
            .get(namespace)
            .and_then(|n| n.mode_annotation.as_deref()),
        drift_managers,
    };
    Some(drift_engine::audit(
        rules,
        object,
        &context,
        Detail::Verdict,
    ))
}

impl AuditCounts {
    /// Counts one judged object under its result.
    pub fn add(&mut self, audit: &Audit<'_>) {
        match audit.result_label() {
            "drifted" => self.drifted += 1,
            "clean" => self.clean += 1,
            "no_baseline" => self.no_baseline += 1,
            _ => self.skipped += 1,
        }
    }

    /// Every object judged.
    pub fn total(&self) -> u64 {
        self.drifted + self.clean + self.no_baseline + self.skipped
    }
}

static NO_LABELS: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);

/// The identity of an audited object, as the audit listed (or read) it.
#[derive(Debug, Clone, Copy)]
pub struct AuditedObject<'a> {
    /// The resource's plural name (`deployments`).
    pub resource: &'a str,
    pub api_version: &'a str,
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub labels: &'a Map<String, Value>,
}

impl<'a> AuditedObject<'a> {
    /// Reads the identity of `object` (its `apiVersion`, `kind` and metadata).
    pub fn of(object: &'a Value, resource: &'a str) -> Self {
        let text = |pointer: &str| {
            object
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or("")
        };
        Self {
            resource,
            api_version: text("/apiVersion"),
            kind: text("/kind"),
            namespace: text("/metadata/namespace"),
            name: text("/metadata/name"),
            labels: object
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .unwrap_or(&NO_LABELS),
        }
    }

    /// `namespace/name`, or `name` for a cluster-scoped object.
    pub fn display_name(&self) -> String {
        if self.namespace.is_empty() {
            self.name.to_owned()
        } else {
            format!("{}/{}", self.namespace, self.name)
        }
    }
}

/// The `violation_audited` record of a drifted object (SPEC §8): `id` is the run's id, there is
/// no request, and each change carries `old` (declared), `new` (live) and, for imperative edits,
/// `manager` and `time`. `None` when the object did not drift (or its mode exports nothing).
pub fn audit_record<'a>(
    run_id: &'a str,
    object: &AuditedObject<'a>,
    audit: &'a Audit<'a>,
    at: SystemTime,
) -> Option<ViolationRecord<'a>> {
    let drift = audit.drift()?;
    let mode = audit.mode()?;
    let action = enforcement_action(mode)?;
    let rule = audit.rule()?;
    let changes = audit.changes();
    let details = Details::of(
        &drift.denied,
        changes,
        drift.denied_count,
        audit.comparison().map_or(0, |c| c.changed_count),
    );
    Some(ViolationRecord {
        event_type: Cow::Borrowed(AUDIT_EVENT),
        id: Cow::Borrowed(run_id),
        timestamp: Cow::Owned(format_rfc3339(at)),
        request: None,
        resource: Cow::Borrowed(object.resource),
        sub_resource: Cow::Borrowed(""),
        resource_api_version: Cow::Borrowed(object.api_version),
        resource_kind: Cow::Borrowed(object.kind),
        resource_namespace: Cow::Borrowed(object.namespace),
        resource_name: Cow::Borrowed(object.name),
        resource_labels: Cow::Borrowed(object.labels),
        rule_name: Cow::Borrowed(&rule.id.name),
        rule_namespace: Cow::Borrowed(&rule.id.namespace),
        mode: Cow::Borrowed(mode.as_str()),
        enforcement_action: Cow::Borrowed(action),
        message: Cow::Owned(audit.reason()),
        details,
    })
}

/// A drifted object as text: `drifted apps/v1 Deployment shop/web (rule ops/web, enforce)`,
/// then one indented line per drifted path — declared → live, and who changed it (the field
/// manager, and its time when managedFields has one). At most [`MAX_DETAILED_CHANGES`] paths,
/// then how many more; values are cut as the engine's messages cut them.
pub fn drift_text(identity: &AuditedObject<'_>, audit: &Audit<'_>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "drifted {} {} {} (rule {}, {})",
        identity.api_version,
        identity.kind,
        identity.display_name(),
        audit.rule().map(|r| r.id.to_string()).unwrap_or_default(),
        audit.mode().map_or("", |m| m.as_str()),
    );
    let drifted: Vec<_> = audit.changes().iter().filter(|c| !c.mutable).collect();
    for change in drifted.iter().take(MAX_DETAILED_CHANGES) {
        let _ = writeln!(out, "  {}", change.text());
    }
    if drifted.len() > MAX_DETAILED_CHANGES {
        let _ = writeln!(out, "  … and {} more", drifted.len() - MAX_DETAILED_CHANGES);
    }
    out
}

/// A file of objects that could not be found, listed or read.
#[derive(Debug, thiserror::Error)]
pub enum ObjectFileError {
    #[error("{0} does not exist")]
    Missing(PathBuf),
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Parse(#[from] drift_engine::manifests::ManifestError),
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> ObjectFileError + '_ {
    move |source| ObjectFileError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The files of objects named by `paths`: each file, or the `*.yaml`/`*.yml`/`*.json` files
/// of each directory (not hidden ones), in name order.
pub fn object_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ObjectFileError> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(io_error(path))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                    !name.starts_with('.')
                        && p.is_file()
                        && matches!(
                            p.extension().and_then(|e| e.to_str()),
                            Some("yaml" | "yml" | "json")
                        )
                })
                .collect();
            found.sort();
            files.extend(found);
        } else if path.exists() {
            files.push(path.clone());
        } else {
            return Err(ObjectFileError::Missing(path.clone()));
        }
    }
    Ok(files)
}

/// The objects of one file: YAML or JSON, several documents, `List`s (as `kubectl get -o yaml`
/// writes them) flattened into their items.
pub fn read_objects(file: &Path) -> Result<Vec<Value>, ObjectFileError> {
    let text = std::fs::read_to_string(file).map_err(io_error(file))?;
    Ok(drift_engine::manifests::parse_documents(
        &text,
        &file.display().to_string(),
    )?)
}

/// The plural resource name of a kind, for objects read from files (no API server is there to
/// say): `Deployment` → `deployments`, `Ingress` → `ingresses`, `NetworkPolicy` →
/// `networkpolicies`.
pub fn plural_of(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    if let Some(stem) = lower.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        return format!("{stem}ies");
    }
    if lower.ends_with('s') || lower.ends_with('x') || lower.ends_with("ch") {
        return format!("{lower}es");
    }
    format!("{lower}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n  namespace: ops\n  annotations: {drift-sentinel.k8s.io/rule: \"true\"}\ndata:\n  spec: |\n    mode: enforce\n    namespaces: [\"*\"]\n    selectors: [{apiGroup: apps, kind: Deployment}]\n";

    fn rules() -> RuleSet {
        let documents = drift_engine::manifests::parse_documents(RULE, "rule.yaml").unwrap();
        RuleSet::build(drift_engine::manifests::rule_sources(
            &documents,
            "rule.yaml",
        ))
    }

    fn deployment(namespace: &str, replicas: u32) -> Value {
        serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": namespace, "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{\"replicas\":2}}"}},
            "spec": {"replicas": replicas}
        })
    }

    #[test]
    fn a_drifted_object_as_record_text_and_count() {
        let rules = rules();
        let namespaces = Namespaces::new();
        let managers = vec!["kubectl".to_owned()];
        let object = deployment("shop", 5);
        let audit = judge(&rules, &namespaces, &object, &managers).unwrap();
        let mut counts = AuditCounts::default();
        counts.add(&audit);
        assert_eq!((counts.drifted, counts.total()), (1, 1));
        let identity = AuditedObject::of(&object, "deployments");
        assert_eq!(
            drift_text(&identity, &audit),
            "drifted apps/v1 Deployment shop/web (rule ops/web, enforce)\n  spec.replicas: 2 → 5\n"
        );
        let record = audit_record("run-1", &identity, &audit, SystemTime::UNIX_EPOCH).unwrap();
        assert_eq!(record.details.denied_paths, ["spec.replicas"]);
        assert_eq!(record.enforcement_action, "deny");
    }

    #[test]
    fn the_namespace_mode_applies_and_unselected_objects_are_not_judged() {
        let rules = rules();
        let documents = drift_engine::manifests::parse_documents(
            "kind: Namespace\nmetadata: {name: shop, annotations: {drift-sentinel.k8s.io/mode: 'off'}}\n",
            "ns.yaml",
        )
        .unwrap();
        let namespaces = drift_engine::manifests::namespaces(&documents);
        let managers = Vec::new();
        let object = deployment("shop", 5);
        let audit = judge(&rules, &namespaces, &object, &managers).unwrap();
        assert_eq!(audit.result_label(), "skipped");
        let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        assert!(judge(&rules, &namespaces, &pod, &managers).is_none());
    }

    #[test]
    fn plurals_and_resources() {
        assert_eq!(plural_of("Deployment"), "deployments");
        assert_eq!(plural_of("Ingress"), "ingresses");
        assert_eq!(plural_of("NetworkPolicy"), "networkpolicies");
        assert_eq!(plural_of("Gateway"), "gateways");
        assert_eq!(
            parse_resources(&["apps/deployments,/pods", "x/", "services"]),
            [
                ("apps".to_owned(), "deployments".to_owned()),
                (String::new(), "pods".to_owned()),
                (String::new(), "services".to_owned())
            ]
        );
    }

    #[test]
    fn object_files_of_directories_and_missing_paths() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["b.yaml", "a.json", ".hidden.yaml", "notes.txt"] {
            std::fs::write(dir.path().join(name), "kind: List\nitems: []\n").unwrap();
        }
        let files = object_files(&[dir.path().to_owned()]).unwrap();
        let names: Vec<_> = files
            .iter()
            .map(|f| f.file_name().unwrap().to_str().unwrap().to_owned())
            .collect();
        assert_eq!(names, ["a.json", "b.yaml"]);
        assert!(read_objects(&files[0]).unwrap().is_empty());
        let missing = object_files(&[dir.path().join("nope.yaml")]).unwrap_err();
        assert!(missing.to_string().ends_with("nope.yaml does not exist"));
    }
}
