//! Server-side apply on the API server double, over real HTTP: field managers per pod and per
//! pod and source on the Connection's list-map status, conflicts and force, the status/main
//! split, and `fieldSelector` on list and watch.
//!
//! These tests speak HTTP/1.1 over a TCP stream themselves ([`support`]).

mod support;

use std::time::Duration;

use drift_testkit::ApiServer;
use serde_json::{Value, json};
use support::{Watch, encode, request};

const API_VERSION: &str = "connection.drift-sentinel.io/v1alpha1";
const NAMESPACE: &str = "drift-sentinel";
const NAME: &str = "audit-connection";
const APPLY: &str = "application/apply-patch+yaml";

fn collection() -> String {
    format!("/apis/{API_VERSION}/namespaces/{NAMESPACE}/connections")
}

fn object_path(name: &str) -> String {
    format!("{}/{name}", collection())
}

fn status_path(name: &str) -> String {
    format!("{}/{name}/status", collection())
}

/// A server-side apply: `PATCH path?fieldManager=…[&force=true]`.
async fn apply(
    server: &ApiServer,
    path: &str,
    manager: Option<&str>,
    force: bool,
    body: &Value,
) -> (u16, Value) {
    let mut query = Vec::new();
    if force {
        query.push("force=true".to_owned());
    }
    if let Some(manager) = manager {
        query.push(format!("fieldManager={}", encode(manager)));
    }
    let url = if query.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", query.join("&"))
    };
    request(server, "PATCH", &url, Some(APPLY), &body.to_string()).await
}

/// Applies through `/status` and insists on success.
async fn apply_status(server: &ApiServer, manager: &str, status: Value) -> Value {
    let body = json!({
        "apiVersion": API_VERSION, "kind": "Connection",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "status": status,
    });
    let (code, object) = apply(server, &status_path(NAME), Some(manager), false, &body).await;
    assert_eq!(code, 200, "apply by {manager} failed: {object}");
    object
}

fn connection(name: &str) -> Value {
    json!({
        "apiVersion": API_VERSION, "kind": "Connection",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"driver": "disk", "config": {"path": "tmp/violations/topics", "maxAuditResults": 3}},
    })
}

async fn start_with_connection() -> ApiServer {
    let server = ApiServer::start().await.unwrap();
    server.apply(connection(NAME));
    server
}

fn live(server: &ApiServer) -> Value {
    server
        .get(API_VERSION, "Connection", NAMESPACE, NAME)
        .expect("the Connection exists")
}

fn by_pod<'a>(object: &'a Value, pod: &str) -> Option<&'a Value> {
    object["status"]["byPod"]
        .as_array()?
        .iter()
        .find(|entry| entry["id"] == pod)
}

fn publish_status<'a>(object: &'a Value, pod: &str, source: &str) -> Option<&'a Value> {
    by_pod(object, pod)?["publishStatuses"]
        .as_array()?
        .iter()
        .find(|entry| entry["source"] == source)
}

/// The status a pod's own manager (`drift-sentinel/<pod>`) applies.
fn pod_entry(pod: &str, uid: &str, errors: &[&str]) -> Value {
    let errors: Vec<Value> = errors
        .iter()
        .map(|e| json!({"type": "connection", "message": e}))
        .collect();
    json!({"byPod": [{"id": pod, "connectionUID": uid, "connectionErrors": errors}]})
}

/// The status a pod's source manager (`drift-sentinel/<pod>/<source>`) applies.
fn source_entry(pod: &str, source: &str, active: bool) -> Value {
    json!({"byPod": [{"id": pod, "publishStatuses": [{
        "source": source, "active": active,
        "lastAttemptTime": "2025-01-01T00:00:00Z", "errors": [],
    }]}]})
}

fn resource_version(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn two_pods_keep_their_own_entries() {
    let server = start_with_connection().await;
    apply_status(
        &server,
        "drift-sentinel/pod-a",
        pod_entry("pod-a", "uid-1", &[]),
    )
    .await;
    apply_status(
        &server,
        "drift-sentinel/pod-b",
        pod_entry("pod-b", "uid-1", &["boom"]),
    )
    .await;
    // Each pod applies again, changing its own entry only.
    apply_status(
        &server,
        "drift-sentinel/pod-a",
        pod_entry("pod-a", "uid-1", &["disk full"]),
    )
    .await;
    let object = apply_status(
        &server,
        "drift-sentinel/pod-b",
        pod_entry("pod-b", "uid-1", &[]),
    )
    .await;

    assert_eq!(object, live(&server), "the response is the stored object");
    let entries = object["status"]["byPod"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{object}");
    assert_eq!(
        by_pod(&object, "pod-a").unwrap()["connectionErrors"],
        json!([{"type": "connection", "message": "disk full"}])
    );
    assert_eq!(
        by_pod(&object, "pod-b").unwrap()["connectionErrors"],
        json!([])
    );
    assert_eq!(object["spec"], connection(NAME)["spec"]);

    // metadata.managedFields names both managers, through the status subresource.
    let managed = object["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!(managed.len(), 2, "{managed:?}");
    for (entry, pod) in managed.iter().zip(["pod-a", "pod-b"]) {
        assert_eq!(entry["manager"], format!("drift-sentinel/{pod}"));
        assert_eq!(entry["operation"], "Apply");
        assert_eq!(entry["apiVersion"], API_VERSION);
        assert_eq!(entry["subresource"], "status");
        let item = format!("k:{{\"id\":\"{pod}\"}}");
        assert!(
            entry["fieldsV1"]["f:status"]["f:byPod"][&item]["f:connectionUID"].is_object(),
            "{entry}"
        );
    }
    let managers = server.managed_fields(API_VERSION, "Connection", NAMESPACE, NAME);
    assert_eq!(managers[0].manager, "drift-sentinel/pod-a");
    assert_eq!(managers[0].subresource.as_deref(), Some("status"));
    assert!(managers[0].owns(r#".status.byPod[id="pod-a"].connectionErrors"#));
    assert!(!managers[0].owns(r#".status.byPod[id="pod-b"].connectionErrors"#));
    assert!(managers[1].owns(r#".status.byPod[id="pod-b"]"#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_pods_never_clobber_each_other() {
    let server = std::sync::Arc::new(start_with_connection().await);
    // Two "pods", each with its pod manager and its webhook manager, applying at once.
    let tasks: Vec<_> = ["pod-a", "pod-b"]
        .into_iter()
        .flat_map(|pod| {
            let own = server.clone();
            let webhook = server.clone();
            [
                tokio::spawn(async move {
                    for round in 0..25 {
                        let errors: &[&str] = if round % 2 == 0 { &["x"] } else { &[] };
                        let status = pod_entry(pod, "u", errors);
                        apply_status(&own, &format!("drift-sentinel/{pod}"), status).await;
                    }
                }),
                tokio::spawn(async move {
                    for round in 0..25 {
                        let status = source_entry(pod, "webhook", round % 3 == 0);
                        apply_status(&webhook, &format!("drift-sentinel/{pod}/webhook"), status)
                            .await;
                    }
                }),
            ]
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let object = live(&server);
    for pod in ["pod-a", "pod-b"] {
        let entry = by_pod(&object, pod).unwrap();
        assert_eq!(entry["connectionUID"], "u", "{object}");
        // Each manager's last apply (round 24) is what stays.
        assert_eq!(
            entry["connectionErrors"],
            json!([{"type": "connection", "message": "x"}]),
            "{object}"
        );
        let webhook = publish_status(&object, pod, "webhook").unwrap();
        assert_eq!(webhook["active"], true, "{object}");
    }
    assert_eq!(
        server
            .managed_fields(API_VERSION, "Connection", NAMESPACE, NAME)
            .len(),
        4
    );
}

#[tokio::test]
async fn a_manager_dropping_its_publish_status_removes_only_its_own() {
    let server = start_with_connection().await;
    apply_status(
        &server,
        "drift-sentinel/pod-a/webhook",
        source_entry("pod-a", "webhook", true),
    )
    .await;
    apply_status(
        &server,
        "drift-sentinel/pod-a/audit",
        source_entry("pod-a", "audit", true),
    )
    .await;
    let object = live(&server);
    assert!(publish_status(&object, "pod-a", "webhook").is_some());
    assert!(publish_status(&object, "pod-a", "audit").is_some());

    // The webhook manager applies without its entry: it goes, the audit entry stays.
    apply_status(
        &server,
        "drift-sentinel/pod-a/webhook",
        json!({"byPod": [{"id": "pod-a"}]}),
    )
    .await;
    let object = live(&server);
    assert!(
        publish_status(&object, "pod-a", "webhook").is_none(),
        "{object}"
    );
    assert_eq!(
        publish_status(&object, "pod-a", "audit").unwrap()["active"],
        true,
        "{object}"
    );

    // One manager applying two entries, then one of them: the other one goes.
    let both = json!({"byPod": [{"id": "pod-b", "publishStatuses": [
        {"source": "audit", "active": true}, {"source": "webhook", "active": true}]}]});
    apply_status(&server, "drift-sentinel/pod-b", both).await;
    apply_status(
        &server,
        "drift-sentinel/pod-b",
        json!({"byPod": [{"id": "pod-b", "publishStatuses": [{"source": "audit", "active": false}]}]}),
    )
    .await;
    let object = live(&server);
    assert!(
        publish_status(&object, "pod-b", "webhook").is_none(),
        "{object}"
    );
    assert_eq!(
        publish_status(&object, "pod-b", "audit").unwrap()["active"],
        false
    );
    assert!(
        publish_status(&object, "pod-a", "audit").is_some(),
        "{object}"
    );
}

#[tokio::test]
async fn a_source_entry_survives_the_pod_managers_reapply() {
    let server = start_with_connection().await;
    apply_status(
        &server,
        "drift-sentinel/pod-a",
        pod_entry("pod-a", "uid-1", &[]),
    )
    .await;
    apply_status(
        &server,
        "drift-sentinel/pod-a/webhook",
        source_entry("pod-a", "webhook", true),
    )
    .await;
    // The pod manager's configuration never mentions publishStatuses.
    apply_status(
        &server,
        "drift-sentinel/pod-a",
        pod_entry("pod-a", "uid-2", &["e"]),
    )
    .await;
    let object = live(&server);
    let entry = by_pod(&object, "pod-a").unwrap();
    assert_eq!(entry["connectionUID"], "uid-2");
    assert_eq!(
        publish_status(&object, "pod-a", "webhook").unwrap()["active"],
        true,
        "{object}"
    );

    // Even when the pod manager drops its entry altogether, the entry stays for the webhook
    // manager, without the fields only the pod manager owned.
    apply_status(&server, "drift-sentinel/pod-a", json!({"byPod": []})).await;
    let object = live(&server);
    let entry = by_pod(&object, "pod-a").expect("the webhook manager still owns the entry");
    assert!(entry.get("connectionUID").is_none(), "{object}");
    assert!(entry.get("connectionErrors").is_none(), "{object}");
    assert!(publish_status(&object, "pod-a", "webhook").is_some());

    // And once the webhook manager drops it too, the entry is gone.
    apply_status(&server, "drift-sentinel/pod-a/webhook", json!({})).await;
    let object = live(&server);
    assert!(by_pod(&object, "pod-a").is_none(), "{object}");
    let managers = server.managed_fields(API_VERSION, "Connection", NAMESPACE, NAME);
    let webhook = managers
        .iter()
        .find(|m| m.manager == "drift-sentinel/pod-a/webhook")
        .unwrap();
    assert!(webhook.fields.is_empty(), "{webhook:?}");
}

#[tokio::test]
async fn changing_another_managers_field_conflicts_unless_forced() {
    let server = start_with_connection().await;
    apply_status(
        &server,
        "drift-sentinel/pod-a",
        pod_entry("pod-a", "uid-1", &[]),
    )
    .await;
    let before = live(&server);

    let intruder = json!({
        "apiVersion": API_VERSION, "kind": "Connection", "metadata": {"name": NAME},
        "status": {"byPod": [{"id": "pod-a", "connectionUID": "uid-2"}]},
    });
    let (code, body) = apply(
        &server,
        &status_path(NAME),
        Some("intruder"),
        false,
        &intruder,
    )
    .await;
    assert_eq!(code, 409, "{body}");
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["reason"], "Conflict");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains(r#".status.byPod[id="pod-a"].connectionUID"#)
            && message.contains("drift-sentinel/pod-a"),
        "{message}"
    );
    assert_eq!(
        body["details"]["causes"][0]["field"],
        r#".status.byPod[id="pod-a"].connectionUID"#
    );
    assert_eq!(live(&server), before, "a conflict writes nothing");

    // The same value is no conflict: both managers share the field.
    let mut agreeing = intruder.clone();
    agreeing["status"]["byPod"][0]["connectionUID"] = json!("uid-1");
    let (code, body) = apply(
        &server,
        &status_path(NAME),
        Some("intruder"),
        false,
        &agreeing,
    )
    .await;
    assert_eq!(code, 200, "{body}");

    // Forced, the field changes hands.
    let (code, body) = apply(
        &server,
        &status_path(NAME),
        Some("intruder"),
        true,
        &intruder,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(by_pod(&body, "pod-a").unwrap()["connectionUID"], "uid-2");
    let managers = server.managed_fields(API_VERSION, "Connection", NAMESPACE, NAME);
    let owner = |name: &str| managers.iter().find(|m| m.manager == name).unwrap();
    let field = r#".status.byPod[id="pod-a"].connectionUID"#;
    assert!(owner("intruder").owns(field));
    assert!(!owner("drift-sentinel/pod-a").owns(field));
    assert!(owner("drift-sentinel/pod-a").owns(r#".status.byPod[id="pod-a"].connectionErrors"#));

    // Now the pod conflicts with the intruder when it re-applies its own value.
    let (code, body) = apply(
        &server,
        &status_path(NAME),
        Some("drift-sentinel/pod-a"),
        false,
        &json!({"apiVersion": API_VERSION, "kind": "Connection", "metadata": {"name": NAME},
            "status": pod_entry("pod-a", "uid-1", &[])}),
    )
    .await;
    assert_eq!(code, 409, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("\"intruder\""),
        "{body}"
    );
}

#[tokio::test]
async fn apply_needs_a_field_manager_and_a_well_formed_body() {
    let server = start_with_connection().await;
    let body = json!({"apiVersion": API_VERSION, "kind": "Connection", "metadata": {"name": NAME},
        "status": pod_entry("pod-a", "u", &[])});
    let (code, status) = apply(&server, &status_path(NAME), None, false, &body).await;
    // The real API server answers 422 Invalid here (PatchOptions validation), not 400.
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["reason"], "Invalid");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("fieldManager: Required value: is required for apply patch"),
        "{status}"
    );

    let (code, status) = apply(&server, &status_path(NAME), Some(""), false, &body).await;
    assert_eq!(code, 422, "{status}");

    // force belongs to apply only.
    let (code, status) = request(
        &server,
        "PATCH",
        &format!("{}?force=true", status_path(NAME)),
        Some("application/merge-patch+json"),
        r#"{"status": {}}"#,
    )
    .await;
    assert_eq!(code, 422, "{status}");

    let mut wrong_kind = body.clone();
    wrong_kind["kind"] = json!("ConfigMap");
    let (code, status) = apply(&server, &status_path(NAME), Some("m"), false, &wrong_kind).await;
    assert_eq!(code, 400, "{status}");

    let mut wrong_name = body.clone();
    wrong_name["metadata"]["name"] = json!("other");
    let (code, status) = apply(&server, &status_path(NAME), Some("m"), false, &wrong_name).await;
    assert_eq!(code, 400, "{status}");

    let missing_key = json!({"apiVersion": API_VERSION, "kind": "Connection",
        "status": {"byPod": [{"connectionUID": "u"}]}});
    let (code, status) = apply(&server, &status_path(NAME), Some("m"), false, &missing_key).await;
    assert_eq!(code, 422, "{status}");
    assert!(
        status["message"].as_str().unwrap().contains("\"id\""),
        "{status}"
    );

    let duplicate = json!({"apiVersion": API_VERSION, "kind": "Connection",
        "status": {"byPod": [{"id": "a"}, {"id": "a"}]}});
    let (code, status) = apply(&server, &status_path(NAME), Some("m"), false, &duplicate).await;
    assert_eq!(code, 422, "{status}");

    let (code, status) = request(
        &server,
        "PATCH",
        &format!("{}?fieldManager=m", status_path(NAME)),
        Some(APPLY),
        "not: [json",
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert!(live(&server).get("status").is_none(), "nothing was written");
}

#[tokio::test]
async fn status_apply_leaves_spec_alone_and_main_apply_leaves_status_alone() {
    let server = start_with_connection().await;
    let body = json!({
        "apiVersion": API_VERSION, "kind": "Connection", "metadata": {"name": NAME},
        "spec": {"driver": "kafka"},
        "status": pod_entry("pod-a", "u", &[]),
    });
    let (code, object) = apply(
        &server,
        &status_path(NAME),
        Some("drift-sentinel/pod-a"),
        false,
        &body,
    )
    .await;
    assert_eq!(code, 200, "{object}");
    assert_eq!(object["spec"], connection(NAME)["spec"]);
    assert_eq!(by_pod(&object, "pod-a").unwrap()["connectionUID"], "u");

    let body = json!({
        "apiVersion": API_VERSION, "kind": "Connection",
        "metadata": {"name": NAME, "labels": {"team": "platform"}},
        "spec": {"driver": "disk", "config": {"maxAuditResults": 5}},
        "status": {"byPod": []},
    });
    let (code, object) = apply(&server, &object_path(NAME), Some("helm"), false, &body).await;
    assert_eq!(code, 200, "{object}");
    assert_eq!(object["spec"]["config"]["maxAuditResults"], 5);
    assert_eq!(
        object["spec"]["config"]["path"], "tmp/violations/topics",
        "merged, not replaced"
    );
    assert_eq!(object["metadata"]["labels"]["team"], "platform");
    assert_eq!(
        by_pod(&object, "pod-a").unwrap()["connectionUID"],
        "u",
        "{object}"
    );

    let managers = server.managed_fields(API_VERSION, "Connection", NAMESPACE, NAME);
    let helm = managers.iter().find(|m| m.manager == "helm").unwrap();
    assert_eq!(helm.subresource, None);
    assert!(helm.owns(".spec.config.maxAuditResults"));
    assert!(helm.owns(".metadata.labels.team"));
    assert!(
        !helm.fields.iter().any(|f| f.starts_with(".status")),
        "{helm:?}"
    );
    let entry = object["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["manager"] == "helm")
        .unwrap();
    assert!(entry.get("subresource").is_none(), "{entry}");

    // Dropping the label in the next apply removes it (helm alone owned it).
    let mut body = body;
    body["metadata"] = json!({"name": NAME});
    let (code, object) = apply(&server, &object_path(NAME), Some("helm"), false, &body).await;
    assert_eq!(code, 200, "{object}");
    assert!(object["metadata"].get("labels").is_none(), "{object}");
}

#[tokio::test]
async fn apply_creates_the_main_resource_but_not_through_status() {
    let server = ApiServer::start().await.unwrap();
    let mut body = connection("fresh");
    let (code, object) = apply(&server, &status_path("fresh"), Some("m"), false, &body).await;
    assert_eq!(code, 404, "{object}");
    assert_eq!(object["reason"], "NotFound");

    body["status"] = pod_entry("pod-a", "u", &[]);
    let (code, object) = apply(
        &server,
        &object_path("fresh"),
        Some("kubectl"),
        false,
        &body,
    )
    .await;
    assert_eq!(code, 201, "{object}");
    assert_eq!(object["metadata"]["namespace"], NAMESPACE);
    assert!(object["metadata"]["uid"].is_string());
    assert!(
        object.get("status").is_none(),
        "a main-resource apply sets no status: {object}"
    );
    assert_eq!(object["spec"]["driver"], "disk");
    assert!(
        server
            .get(API_VERSION, "Connection", NAMESPACE, "fresh")
            .is_some()
    );

    // Deleting the object forgets its managers.
    let (code, _) = request(&server, "DELETE", &object_path("fresh"), None, "").await;
    assert_eq!(code, 200);
    assert!(
        server
            .managed_fields(API_VERSION, "Connection", NAMESPACE, "fresh")
            .is_empty()
    );
}

#[tokio::test]
async fn applies_bump_the_resource_version_and_reach_watches_but_no_ops_do_not() {
    let server = start_with_connection().await;
    let start = resource_version(&live(&server));
    let mut watch = Watch::open(
        &server,
        &format!("{}?watch=true&resourceVersion={start}", collection()),
    )
    .await;

    let first = apply_status(
        &server,
        "drift-sentinel/pod-a",
        pod_entry("pod-a", "u", &[]),
    )
    .await;
    assert!(resource_version(&first) > start);
    let event = watch.next(Duration::from_secs(5)).await.expect("an event");
    assert_eq!(event["type"], "MODIFIED");
    assert_eq!(event["object"], first);

    // The same apply again changes nothing: same resourceVersion, no event.
    let again = apply_status(
        &server,
        "drift-sentinel/pod-a",
        pod_entry("pod-a", "u", &[]),
    )
    .await;
    assert_eq!(again, first);

    let second = apply_status(
        &server,
        "drift-sentinel/pod-a",
        pod_entry("pod-a", "u", &["x"]),
    )
    .await;
    assert!(resource_version(&second) > resource_version(&first));
    let event = watch.next(Duration::from_secs(5)).await.expect("an event");
    assert_eq!(event["type"], "MODIFIED");
    assert_eq!(event["object"], second, "the no-op apply sent no event");
}

#[tokio::test]
async fn list_and_watch_honour_a_name_field_selector() {
    let server = ApiServer::start().await.unwrap();
    server.apply(connection("one"));
    server.apply(connection("two"));
    let selector = encode("metadata.name=one");

    let (code, list) = request(
        &server,
        "GET",
        &format!("{}?fieldSelector={selector}", collection()),
        None,
        "",
    )
    .await;
    assert_eq!(code, 200, "{list}");
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["one"]);

    let (_, list) = request(
        &server,
        "GET",
        &format!(
            "{}?fieldSelector={}",
            collection(),
            encode("metadata.name!=one")
        ),
        None,
        "",
    )
    .await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    assert_eq!(list["items"][0]["metadata"]["name"], "two");

    // A watch from 0 replays only the selected object, then follows only it.
    let mut watch = Watch::open(
        &server,
        &format!(
            "{}?watch=true&resourceVersion=0&fieldSelector={selector}",
            collection()
        ),
    )
    .await;
    let event = watch
        .next(Duration::from_secs(5))
        .await
        .expect("replayed ADDED");
    assert_eq!(event["type"], "ADDED");
    assert_eq!(event["object"]["metadata"]["name"], "one");
    for name in ["two", "one"] {
        let body = json!({"apiVersion": API_VERSION, "kind": "Connection",
            "status": pod_entry("pod-a", name, &[])});
        let (code, object) = apply(&server, &status_path(name), Some("m"), false, &body).await;
        assert_eq!(code, 200, "{object}");
    }
    let event = watch.next(Duration::from_secs(5)).await.expect("MODIFIED");
    assert_eq!(event["type"], "MODIFIED");
    assert_eq!(event["object"]["metadata"]["name"], "one");
    assert_eq!(
        by_pod(&event["object"], "pod-a").unwrap()["connectionUID"],
        "one"
    );
    assert!(watch.next(Duration::from_millis(300)).await.is_none());

    let (code, status) = request(
        &server,
        "GET",
        &format!("{}?fieldSelector=nonsense", collection()),
        None,
        "",
    )
    .await;
    assert_eq!(code, 400, "{status}");
}
