use std::time::Duration;

use drift_api::events::EditRecord;
use drift_engine::attribution::{Coverage, Evidence, fingerprint};
use drift_engine::manifests::{Namespaces, parse_documents, rule_sources};
use drift_engine::webhook_scope::Interception;
use drift_engine::{DEFAULT_DRIFT_MANAGERS, RuleSet};
use drift_testkit::records::EditRecordBuilder;
use serde_json::{Value, json};

use super::*;

const EDITED: &str = "2026-12-06T11:05:00Z";

fn rules(namespace: &str) -> RuleSet {
    let text = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: web, namespace: ops, annotations: {{drift-sentinel.k8s.io/rule: \"true\"}}}}\ndata:\n  spec: |\n    mode: warn\n    namespaces: [{namespace}]\n    selectors: [{{apiGroup: apps, kind: Deployment}}]\n"
    );
    RuleSet::build(rule_sources(
        &parse_documents(&text, "rule.yaml").unwrap(),
        "rule.yaml",
    ))
}

fn managers() -> Vec<String> {
    DEFAULT_DRIFT_MANAGERS
        .iter()
        .map(|m| m.to_string())
        .collect()
}

/// A managedFields entry.
fn entry(manager: &str, operation: &str, time: &str, fields: Value) -> Value {
    json!({"manager": manager, "operation": operation, "time": time,
           "fieldsType": "FieldsV1", "fieldsV1": fields})
}

fn replicas_set() -> Value {
    json!({"f:spec": {"f:replicas": {}}})
}

fn template_set(with_replicas: bool) -> Value {
    let mut spec = json!({"f:template": {"f:spec": {"f:containers": {
        "k:{\"name\":\"app\"}": {".": {}, "f:name": {}, "f:image": {}}}}}});
    if with_replicas {
        spec["f:replicas"] = json!({});
    }
    json!({"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": spec})
}

/// A Deployment with `replicas` live, applied as `applied` says, then edited by kubectl edit.
fn deployment(replicas: i64, last_applied: Option<&str>, managed: Vec<Value>) -> Value {
    let mut object = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "uid": "u-1", "labels": {"app": "web"},
                     "managedFields": managed},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [
            {"name": "app", "image": "nginx:1", "terminationMessagePath": "/dev/termination-log"}]}}},
        "status": {"replicas": replicas}
    });
    if let Some(text) = last_applied {
        object["metadata"]["annotations"] =
            json!({"kubectl.kubernetes.io/last-applied-configuration": text});
    }
    object
}

fn client_side(replicas: i64) -> Value {
    deployment(
        replicas,
        Some(
            r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"shop","labels":{"app":"web"}},"spec":{"replicas":2,"template":{"spec":{"containers":[{"name":"app","image":"nginx:1"}]}}}}"#,
        ),
        vec![
            entry(
                "kubectl-client-side-apply",
                "Update",
                "2026-12-06T11:00:00Z",
                template_set(false),
            ),
            entry("kubectl-edit", "Update", EDITED, replicas_set()),
        ],
    )
}

fn server_side(replicas: i64) -> Value {
    deployment(
        replicas,
        None,
        vec![
            entry(
                "kustomize-controller",
                "Apply",
                "2026-12-06T11:00:00Z",
                template_set(false),
            ),
            entry("kubectl-edit", "Update", EDITED, replicas_set()),
        ],
    )
}

/// The webhook's record of alice's warned edit setting `spec.replicas` to `to`.
fn record(to: i64) -> EditRecord {
    EditRecordBuilder::alice()
        .warn()
        .rule("ops/web")
        .seen("2026-12-06T11:05:00.100000Z")
        .time(EDITED)
        .field("spec.replicas", fingerprint(Some(&json!(to))))
        .build()
}

fn blamed(object: &Value, namespace: &str, records: &[EditRecord]) -> Blame {
    let rules = rules(namespace);
    let managers = managers();
    let namespaces = Namespaces::default();
    let now = humantime::parse_rfc3339("2026-12-06T11:30:00Z").unwrap();
    let audit = drift_engine::audit::audit_object(&rules, &namespaces, object, &managers, now);
    let interception = Interception::Intercepted;
    let evidence = Evidence {
        records,
        unverified: drift_engine::attribution::Unverified::default(),
        remembered: &[],
        interception: &interception,
        coverage: Ok(Coverage {
            since: now - Duration::from_secs(3600),
            read_at: now,
        }),
    };
    blame(object, audit.as_ref(), Some(&evidence), Vec::new())
}

fn row<'b>(blame: &'b Blame, path: &str) -> &'b BlamedField {
    blame
        .fields
        .iter()
        .find(|f| f.path == path)
        .unwrap_or_else(|| panic!("no {path}: {blame:#?}"))
}

#[test]
fn each_field_has_its_owner_and_the_drift_its_who_and_why() {
    struct Case {
        name: &'static str,
        object: Value,
        records: Vec<EditRecord>,
        declared: Option<&'static str>,
        declared_unknown: bool,
        template_owner: (&'static str, &'static str),
        who: Option<&'static str>,
    }
    for case in [
        Case {
            name: "client-side apply, edit recorded",
            object: client_side(5),
            records: vec![record(5)],
            declared: Some("2"),
            declared_unknown: false,
            template_owner: ("kubectl-client-side-apply", "Update"),
            who: Some("user alice, warn mode"),
        },
        Case {
            name: "server-side apply, edit recorded",
            object: server_side(5),
            records: vec![record(5)],
            declared: None,
            declared_unknown: true,
            template_owner: ("kustomize-controller", "Apply"),
            who: Some("user alice, warn mode"),
        },
        Case {
            name: "client-side apply, a later edit the webhook has no record of",
            object: client_side(7),
            records: vec![record(5)],
            declared: Some("2"),
            declared_unknown: false,
            template_owner: ("kubectl-client-side-apply", "Update"),
            who: Some("user unknown: the webhook did not see this edit"),
        },
        Case {
            name: "server-side apply, no record at all",
            object: server_side(5),
            records: vec![],
            declared: None,
            declared_unknown: true,
            template_owner: ("kustomize-controller", "Apply"),
            who: Some("user unknown: the webhook did not see this edit"),
        },
    ] {
        let blame = blamed(&case.object, "shop", &case.records);
        let name = case.name;
        assert_eq!(blame.result, "drifted", "{name}");
        assert_eq!(blame.last_applied, case.declared.is_some(), "{name}");
        let replicas = row(&blame, "spec.replicas");
        assert!(replicas.drifted, "{name}");
        let owner = replicas.owner.as_ref().expect("an owner");
        assert_eq!(
            (owner.manager.as_str(), owner.operation.as_str()),
            ("kubectl-edit", "Update"),
            "{name}"
        );
        let image = row(&blame, "spec.template.spec.containers[0].image");
        assert!(!image.drifted, "{name}");
        let owner = image.owner.as_ref().expect("an owner");
        assert_eq!(
            (owner.manager.as_str(), owner.operation.as_str()),
            case.template_owner,
            "{name}"
        );
        // Defaulted by the API server: nobody owns it.
        assert_eq!(
            row(
                &blame,
                "spec.template.spec.containers[0].terminationMessagePath"
            )
            .owner,
            None,
            "{name}"
        );
        assert!(
            blame.fields.iter().all(|f| !f.path.starts_with("status")
                && !f.path.starts_with("metadata.managedFields")
                && f.path != "metadata.name"),
            "{name}"
        );
        assert_eq!(blame.drift.len(), 1, "{name}: {:#?}", blame.drift);
        let drift = &blame.drift[0];
        assert_eq!(drift.path, "spec.replicas", "{name}");
        assert_eq!(drift.declared.as_deref(), case.declared, "{name}");
        assert_eq!(drift.declared_unknown, case.declared_unknown, "{name}");
        assert_eq!(
            drift.live.as_deref(),
            Some(case.object["spec"]["replicas"].to_string().as_str())
        );
        assert_eq!(
            drift.changed_by.as_ref().map(|c| c.manager.as_str()),
            Some("kubectl-edit"),
            "{name}"
        );
        assert_eq!(
            drift.who.as_ref().map(ToString::to_string).as_deref(),
            case.who,
            "{name}"
        );
    }
}

#[test]
fn an_object_no_rule_audits_is_shown_without_a_verdict() {
    let blame = blamed(&client_side(5), "elsewhere", &[]);
    assert_eq!(blame.result, "not-audited");
    assert!(blame.drift.is_empty() && blame.rule.is_none());
    assert!(blame.fields.iter().all(|f| !f.drifted));
    assert_eq!(
        row(&blame, "spec.replicas")
            .owner
            .as_ref()
            .map(|o| o.manager.as_str()),
        Some("kubectl-edit")
    );
    assert!(text(&blame, &Style::new(false)).contains("no rule in mode enforce, warn or dry-run"));
}

#[test]
fn a_removed_declared_field_is_a_row_of_its_own() {
    let mut object = client_side(2);
    let annotation = "/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration";
    let mut declared: Value =
        serde_json::from_str(object.pointer(annotation).unwrap().as_str().unwrap()).unwrap();
    declared["spec"]["paused"] = json!(true);
    *object.pointer_mut(annotation).unwrap() = Value::String(declared.to_string());
    let blame = blamed(&object, "shop", &[]);
    let paused = row(&blame, "spec.paused");
    assert!(paused.drifted && paused.value.is_none() && paused.owner.is_none());
    assert_eq!(blame.drift[0].declared.as_deref(), Some("true"));
    assert_eq!(blame.drift[0].live, None);
    let shown = text(&blame, &Style::new(false));
    assert!(
        shown.contains("! spec.paused: declared true, live <absent>"),
        "{shown}"
    );
}

#[test]
fn output_is_bounded_whatever_the_object() {
    let mut object = client_side(5);
    let labels: serde_json::Map<String, Value> = (0..MAX_BLAMED_FIELDS + 500)
        .map(|i| (format!("l{i:05}"), json!("x")))
        .collect();
    object["metadata"]["labels"] = Value::Object(labels);
    object["metadata"]["annotations"]["note"] = json!("y".repeat(100_000));
    let blame = blamed(&object, "shop", &[record(5)]);
    assert_eq!(blame.fields.len(), MAX_BLAMED_FIELDS);
    assert!(blame.fields_omitted >= 500, "{}", blame.fields_omitted);
    let document = serde_json::to_string(&blame).unwrap();
    assert!(document.len() < 200_000, "{} bytes", document.len());
    // Deep nesting (serde_json reads objects up to 128 levels) is cut at a depth, and shown as
    // one value there.
    let mut deep = json!("leaf");
    for _ in 0..120 {
        deep = json!({"a": deep});
    }
    let mut object = client_side(5);
    object["spec"]["deep"] = deep;
    let blame = blamed(&object, "shop", &[]);
    let deepest = blame
        .fields
        .iter()
        .find(|f| f.path.starts_with("spec.deep"))
        .expect("the deep field");
    assert_eq!(
        deepest.path.matches(".a").count(),
        MAX_DEPTH - 1,
        "{}",
        deepest.path
    );
    assert!(deepest.value.as_deref().is_some_and(|v| v.ends_with('…')));
}

#[test]
fn the_text_marks_drift_and_cuts_long_values() {
    let mut object = client_side(5);
    object["metadata"]["annotations"]["note"] = json!("z".repeat(500));
    let blame = blamed(&object, "shop", &[record(5)]);
    let shown = text(&blame, &Style::new(false));
    let lines: Vec<&str> = shown.lines().collect();
    assert!(
        lines[0].starts_with("Deployment shop/web: drifted (rule ops/web, mode warn)"),
        "{shown}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("! kubectl-edit")
            && l.contains("Update")
            && l.contains("spec.replicas")),
        "{shown}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("  kubectl-client-side-apply")
                && l.contains("spec.template.spec.containers[0].image")),
        "{shown}"
    );
    let note = lines
        .iter()
        .find(|l| l.contains("metadata.annotations.note"))
        .expect("the note");
    assert!(note.ends_with('…') && note.chars().count() < 250, "{note}");
    for expected in [
        "! spec.replicas: declared 2, live 5",
        "    changed by kubectl-edit at 2026-12-06T11:05:00Z",
        "    owned by kubectl-edit at 2026-12-06T11:05:00Z (Update)",
        "    who: user alice, warn mode",
    ] {
        assert!(shown.contains(expected), "{expected}: {shown}");
    }
}
