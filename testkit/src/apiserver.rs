//! The API server double. One in-memory store with a global resourceVersion counter, an event
//! history for watch replay, and a broadcast channel for live watch streams.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

/// A resource the double serves.
#[derive(Debug, Clone, Copy)]
struct Kind {
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
}

const KINDS: &[Kind] = &[
    Kind {
        group: "",
        version: "v1",
        plural: "configmaps",
        kind: "ConfigMap",
        namespaced: true,
    },
    Kind {
        group: "",
        version: "v1",
        plural: "namespaces",
        kind: "Namespace",
        namespaced: false,
    },
    Kind {
        group: "",
        version: "v1",
        plural: "pods",
        kind: "Pod",
        namespaced: true,
    },
    Kind {
        group: "",
        version: "v1",
        plural: "events",
        kind: "Event",
        namespaced: true,
    },
    Kind {
        group: "events.k8s.io",
        version: "v1",
        plural: "events",
        kind: "Event",
        namespaced: true,
    },
    Kind {
        group: "apps",
        version: "v1",
        plural: "deployments",
        kind: "Deployment",
        namespaced: true,
    },
    Kind {
        group: "apps",
        version: "v1",
        plural: "statefulsets",
        kind: "StatefulSet",
        namespaced: true,
    },
    Kind {
        group: "apps",
        version: "v1",
        plural: "daemonsets",
        kind: "DaemonSet",
        namespaced: true,
    },
    Kind {
        group: "argoproj.io",
        version: "v1alpha1",
        plural: "rollouts",
        kind: "Rollout",
        namespaced: true,
    },
    Kind {
        group: "connection.drift-sentinel.io",
        version: "v1alpha1",
        plural: "connections",
        kind: "Connection",
        namespaced: true,
    },
];

impl Kind {
    fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    fn find(group: &str, plural: &str) -> Option<Kind> {
        KINDS
            .iter()
            .copied()
            .find(|k| k.group == group && k.plural == plural)
    }

    fn by_api_version(api_version: &str, kind: &str) -> Option<Kind> {
        KINDS
            .iter()
            .copied()
            .find(|k| k.api_version() == api_version && k.kind == kind)
    }
}

/// A fault to inject into the next matching requests.
#[derive(Debug, Clone)]
pub enum Fault {
    /// The next `count` requests (of any kind) answer with this HTTP status.
    Fail { count: usize, status: u16 },
    /// The next watch request answers with a `410 Gone` ERROR event (expired resourceVersion).
    GoneOnNextWatch,
    /// Every request waits this long first.
    Latency(Duration),
    /// Requests whose path contains this text answer with this HTTP status, until healed.
    FailPath { contains: String, status: u16 },
}

#[derive(Debug, Clone)]
struct WatchEvent {
    resource_version: u64,
    kind: &'static str,
    group: &'static str,
    namespace: String,
    event_type: &'static str,
    object: Value,
}

#[derive(Default)]
struct Store {
    /// (group, plural, namespace, name) → object.
    objects: BTreeMap<(String, String, String, String), Value>,
    history: Vec<WatchEvent>,
    resource_version: u64,
    /// Watches from a resourceVersion below this get 410 Gone.
    oldest_watchable: u64,
    fail: Option<(usize, u16)>,
    gone_on_next_watch: bool,
    latency: Option<Duration>,
    fail_paths: Vec<(String, u16)>,
    requests: Vec<String>,
    uid_counter: u64,
}

struct Inner {
    store: Mutex<Store>,
    events: broadcast::Sender<WatchEvent>,
    /// Bumped to end every open watch stream.
    closer: tokio::sync::watch::Sender<u64>,
}

/// A running API server double; stops when dropped.
pub struct ApiServer {
    address: SocketAddr,
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ApiServer {
    /// Serves on a free loopback port. Needs a tokio runtime.
    pub async fn start() -> std::io::Result<Self> {
        let (events, _) = broadcast::channel(16 * 1024);
        let (closer, _) = tokio::sync::watch::channel(0);
        let inner = Arc::new(Inner {
            store: Mutex::new(Store {
                resource_version: 1,
                ..Store::default()
            }),
            events,
            closer,
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let router = Router::new().fallback(handle).with_state(inner.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Self {
            address,
            inner,
            task,
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Writes a kubeconfig that points at this server and returns its path.
    pub fn write_kubeconfig(&self, dir: &Path) -> std::io::Result<PathBuf> {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: double\n  cluster:\n    server: {}\ncontexts:\n- name: double\n  context:\n    cluster: double\n    user: tester\n    namespace: default\ncurrent-context: double\nusers:\n- name: tester\n  user:\n    token: test-token\n",
            self.url()
        );
        std::fs::write(&path, text)?;
        Ok(path)
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        lock(&self.inner.store)
    }

    /// Creates or replaces an object (by apiVersion, kind, namespace, name) and notifies watches.
    pub fn apply(&self, object: Value) -> Value {
        let api_version = object["apiVersion"].as_str().unwrap_or_default().to_owned();
        let kind_name = object["kind"].as_str().unwrap_or_default().to_owned();
        let Some(kind) = Kind::by_api_version(&api_version, &kind_name) else {
            panic!("the API server double does not serve {api_version} {kind_name}");
        };
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        self.store().upsert(&self.inner, kind, &namespace, object)
    }

    /// Deletes an object; returns whether it existed.
    pub fn delete(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> bool {
        let Some(kind) = Kind::by_api_version(api_version, kind) else {
            return false;
        };
        self.store()
            .remove(&self.inner, kind, namespace, name)
            .is_some()
    }

    /// Every stored object of a kind.
    pub fn list(&self, api_version: &str, kind: &str) -> Vec<Value> {
        let Some(kind) = Kind::by_api_version(api_version, kind) else {
            return Vec::new();
        };
        self.store()
            .objects
            .iter()
            .filter(|((g, p, _, _), _)| g == kind.group && p == kind.plural)
            .map(|(_, v)| v.clone())
            .collect()
    }

    pub fn get(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let kind = Kind::by_api_version(api_version, kind)?;
        self.store()
            .objects
            .get(&key(kind, namespace, name))
            .cloned()
    }

    pub fn inject(&self, fault: Fault) {
        let mut store = self.store();
        match fault {
            Fault::Fail { count, status } => store.fail = Some((count, status)),
            Fault::GoneOnNextWatch => store.gone_on_next_watch = true,
            Fault::Latency(latency) => store.latency = Some(latency),
            Fault::FailPath { contains, status } => store.fail_paths.push((contains, status)),
        }
    }

    /// Clears injected faults.
    pub fn heal(&self) {
        let mut store = self.store();
        store.fail = None;
        store.gone_on_next_watch = false;
        store.latency = None;
        store.fail_paths.clear();
    }

    /// Ends every open watch stream, as a load balancer dropping connections would.
    pub fn close_watches(&self) {
        self.inner.closer.send_modify(|generation| *generation += 1);
    }

    /// Forgets the event history: watches from any earlier resourceVersion get 410 Gone.
    pub fn compact(&self) {
        let mut store = self.store();
        store.oldest_watchable = store.resource_version + 1;
        store.history.clear();
    }

    /// "METHOD path?query" of every request served so far.
    pub fn requests(&self) -> Vec<String> {
        self.store().requests.clone()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn key(kind: Kind, namespace: &str, name: &str) -> (String, String, String, String) {
    (
        kind.group.to_owned(),
        kind.plural.to_owned(),
        if kind.namespaced {
            namespace.to_owned()
        } else {
            String::new()
        },
        name.to_owned(),
    )
}

impl Store {
    fn next_rv(&mut self) -> u64 {
        self.resource_version += 1;
        self.resource_version
    }

    fn upsert(&mut self, inner: &Inner, kind: Kind, namespace: &str, mut object: Value) -> Value {
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let k = key(kind, namespace, &name);
        let existing = self.objects.get(&k).cloned();
        let rv = self.next_rv();
        let metadata = object["metadata"]
            .as_object_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        let mut metadata = metadata;
        metadata.insert("resourceVersion".into(), json!(rv.to_string()));
        match &existing {
            Some(old) => {
                metadata.insert("uid".into(), old["metadata"]["uid"].clone());
                metadata.insert(
                    "creationTimestamp".into(),
                    old["metadata"]["creationTimestamp"].clone(),
                );
            }
            None => {
                self.uid_counter += 1;
                metadata.entry("uid").or_insert_with(|| {
                    json!(format!("00000000-0000-4000-8000-{:012}", self.uid_counter))
                });
                metadata.entry("creationTimestamp").or_insert_with(|| {
                    json!(
                        humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
                    )
                });
            }
        }
        if kind.namespaced {
            metadata.insert("namespace".into(), json!(namespace));
        }
        object["metadata"] = Value::Object(metadata);
        object["apiVersion"] = json!(kind.api_version());
        object["kind"] = json!(kind.kind);
        self.objects.insert(k, object.clone());
        let event_type = if existing.is_some() {
            "MODIFIED"
        } else {
            "ADDED"
        };
        self.record(inner, kind, namespace, event_type, object.clone(), rv);
        object
    }

    fn remove(&mut self, inner: &Inner, kind: Kind, namespace: &str, name: &str) -> Option<Value> {
        let mut object = self.objects.remove(&key(kind, namespace, name))?;
        let rv = self.next_rv();
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.record(inner, kind, namespace, "DELETED", object.clone(), rv);
        Some(object)
    }

    fn record(
        &mut self,
        inner: &Inner,
        kind: Kind,
        namespace: &str,
        event_type: &'static str,
        object: Value,
        rv: u64,
    ) {
        let event = WatchEvent {
            resource_version: rv,
            kind: kind.plural,
            group: kind.group,
            namespace: if kind.namespaced {
                namespace.to_owned()
            } else {
                String::new()
            },
            event_type,
            object,
        };
        self.history.push(event.clone());
        let _ = inner.events.send(event);
    }
}

fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code
    });
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn json_response(code: StatusCode, value: &Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

/// The parts of a request path: `/api/v1[/namespaces/NS]/PLURAL[/NAME[/SUB]]` or the same under
/// `/apis/GROUP/VERSION`.
struct Target {
    kind: Kind,
    namespace: String,
    name: Option<String>,
    subresource: Option<String>,
}

fn parse_path(path: &str) -> Option<Target> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return None,
    };
    let target = |plural: &str, namespace: &str, rest: &[&str]| {
        Some(Target {
            kind: Kind::find(group, plural)?,
            namespace: namespace.to_owned(),
            name: rest.first().map(|s| (*s).to_owned()),
            subresource: rest.get(1).map(|s| (*s).to_owned()),
        })
    };
    match rest {
        // `/api/v1/namespaces/NAME[/status]` is a Namespace itself.
        ["namespaces", rest @ ..]
            if group.is_empty() && rest.len() <= 2 && rest.get(1) != Some(&"") =>
        {
            if rest.len() == 2 && Kind::find("", rest[1]).is_some() {
                return target(rest[1], rest[0], &[]);
            }
            target("namespaces", "", rest)
        }
        ["namespaces", namespace, plural, rest @ ..] => target(plural, namespace, rest),
        [plural, rest @ ..] => target(plural, "", rest),
        _ => None,
    }
}

fn query_map(query: Option<&str>) -> BTreeMap<String, String> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) => (k.to_owned(), v.replace("%3D", "=").replace("%2C", ",")),
            None => (pair.to_owned(), String::new()),
        })
        .collect()
}

fn wants_metadata(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("as=PartialObjectMetadata"))
}

fn as_metadata(object: &Value) -> Value {
    json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": object["metadata"].clone(),
    })
}

async fn handle(State(inner): State<Arc<Inner>>, request: Request) -> Response {
    let method = request.method().clone();
    let uri = request.uri().clone();
    let headers = request.headers().clone();
    let (latency, fail, gone) = {
        let mut store = lock(&inner.store);
        store.requests.push(format!("{method} {uri}"));
        let path_fault = store
            .fail_paths
            .iter()
            .find(|(contains, _)| uri.path().contains(contains.as_str()))
            .map(|(_, code)| *code);
        let fail = match store.fail {
            Some((count, code)) if count > 0 => {
                store.fail = if count > 1 {
                    Some((count - 1, code))
                } else {
                    None
                };
                Some(code)
            }
            _ => path_fault,
        };
        (store.latency, fail, store.gone_on_next_watch)
    };
    if let Some(latency) = latency {
        tokio::time::sleep(latency).await;
    }
    if let Some(code) = fail {
        return status(code, "InternalError", "injected failure");
    }
    let Some(target) = parse_path(uri.path()) else {
        return status(
            404,
            "NotFound",
            &format!(
                "the server could not find the requested resource {}",
                uri.path()
            ),
        );
    };
    let query = query_map(uri.query());
    let body = match axum::body::to_bytes(request.into_body(), 64 * 1024 * 1024).await {
        Ok(body) => body,
        Err(e) => return status(400, "BadRequest", &e.to_string()),
    };
    let metadata_only = wants_metadata(&headers);
    match (method, &target.name) {
        (Method::GET, None) if query.get("watch").is_some_and(|w| w == "true" || w == "1") => {
            if gone {
                lock(&inner.store).gone_on_next_watch = false;
            }
            watch(inner, target, &query, metadata_only, gone)
        }
        (Method::GET, None) => list(&inner, &target, metadata_only),
        (Method::GET, Some(name)) => {
            let store = lock(&inner.store);
            match store
                .objects
                .get(&key(target.kind, &target.namespace, name))
            {
                Some(object) if metadata_only => {
                    json_response(StatusCode::OK, &as_metadata(object))
                }
                Some(object) => json_response(StatusCode::OK, object),
                None => status(
                    404,
                    "NotFound",
                    &format!("{} \"{name}\" not found", target.kind.plural),
                ),
            }
        }
        (Method::POST, None) => {
            let Ok(object) = serde_json::from_slice::<Value>(&body) else {
                return status(400, "BadRequest", "body is not JSON");
            };
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let mut store = lock(&inner.store);
            if name.is_empty() {
                return status(422, "Invalid", "metadata.name is required");
            }
            if store
                .objects
                .contains_key(&key(target.kind, &target.namespace, &name))
            {
                return status(
                    409,
                    "AlreadyExists",
                    &format!("{} \"{name}\" already exists", target.kind.plural),
                );
            }
            let stored = store.upsert(&inner, target.kind, &target.namespace, object);
            json_response(StatusCode::CREATED, &stored)
        }
        (Method::PUT, Some(name)) => {
            let Ok(object) = serde_json::from_slice::<Value>(&body) else {
                return status(400, "BadRequest", "body is not JSON");
            };
            let mut store = lock(&inner.store);
            let k = key(target.kind, &target.namespace, name);
            let Some(existing) = store.objects.get(&k) else {
                return status(
                    404,
                    "NotFound",
                    &format!("{} \"{name}\" not found", target.kind.plural),
                );
            };
            let sent_rv = object["metadata"]["resourceVersion"].as_str().unwrap_or("");
            if !sent_rv.is_empty()
                && sent_rv
                    != existing["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap_or("")
            {
                return status(
                    409,
                    "Conflict",
                    "the object has been modified; please apply your changes to the latest version and try again",
                );
            }
            let stored = store.upsert(&inner, target.kind, &target.namespace, object);
            json_response(StatusCode::OK, &stored)
        }
        (Method::PATCH, Some(name)) => patch(&inner, &target, name, &headers, &body),
        (Method::DELETE, Some(name)) => {
            let mut store = lock(&inner.store);
            match store.remove(&inner, target.kind, &target.namespace, name) {
                Some(object) => json_response(StatusCode::OK, &object),
                None => status(
                    404,
                    "NotFound",
                    &format!("{} \"{name}\" not found", target.kind.plural),
                ),
            }
        }
        _ => status(
            405,
            "MethodNotAllowed",
            "method not supported by the API server double",
        ),
    }
}

fn list(inner: &Inner, target: &Target, metadata_only: bool) -> Response {
    let store = lock(&inner.store);
    let items: Vec<Value> = store
        .objects
        .iter()
        .filter(|((g, p, ns, _), _)| {
            g == target.kind.group
                && p == target.kind.plural
                && (target.namespace.is_empty() || *ns == target.namespace)
        })
        .map(|(_, object)| {
            if metadata_only {
                as_metadata(object)
            } else {
                object.clone()
            }
        })
        .collect();
    let (api_version, kind) = if metadata_only {
        (
            "meta.k8s.io/v1".to_owned(),
            "PartialObjectMetadataList".to_owned(),
        )
    } else {
        (
            target.kind.api_version(),
            format!("{}List", target.kind.kind),
        )
    };
    json_response(
        StatusCode::OK,
        &json!({
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {"resourceVersion": store.resource_version.to_string()},
            "items": items,
        }),
    )
}

fn event_line(event_type: &str, object: Value) -> Bytes {
    let mut line = json!({"type": event_type, "object": object}).to_string();
    line.push('\n');
    Bytes::from(line)
}

fn watch(
    inner: Arc<Inner>,
    target: Target,
    query: &BTreeMap<String, String>,
    metadata_only: bool,
    gone: bool,
) -> Response {
    let from: u64 = query
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|v| v.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(300));
    let (replay, live, expired) = {
        let store = lock(&inner.store);
        let expired = gone || (from > 0 && from < store.oldest_watchable);
        let matches = |e: &WatchEvent| {
            e.group == target.kind.group
                && e.kind == target.kind.plural
                && (target.namespace.is_empty() || e.namespace == target.namespace)
        };
        let replay: Vec<WatchEvent> = store
            .history
            .iter()
            .filter(|e| e.resource_version > from && matches(e))
            .cloned()
            .collect();
        (replay, inner.events.subscribe(), expired)
    };
    let render = move |event: WatchEvent| {
        let object = if metadata_only {
            as_metadata(&event.object)
        } else {
            event.object
        };
        event_line(event.event_type, object)
    };
    if expired {
        let gone = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("too old resource version: {from}"), "reason": "Expired", "code": 410});
        let body = Body::from(event_line("ERROR", gone));
        return (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
    }
    let mut closer = inner.closer.subscribe();
    closer.mark_unchanged();
    let group = target.kind.group;
    let plural = target.kind.plural;
    let namespace = target.namespace.clone();
    let last_replayed = replay.last().map_or(from, |e| e.resource_version);
    let replay_stream = futures::stream::iter(replay.into_iter().map(render));
    let live_stream = futures::stream::unfold(
        (live, closer, tokio::time::Instant::now() + timeout),
        move |(mut live, mut closer, deadline)| {
            let namespace = namespace.clone();
            async move {
                loop {
                    tokio::select! {
                        received = live.recv() => match received {
                            Ok(event) => {
                                let wanted = event.group == group && event.kind == plural
                                    && (namespace.is_empty() || event.namespace == namespace)
                                    && event.resource_version > last_replayed;
                                if wanted {
                                    return Some((event, (live, closer, deadline)));
                                }
                            }
                            Err(broadcast::error::RecvError::Lagged(_)) => continue,
                            Err(broadcast::error::RecvError::Closed) => return None,
                        },
                        _ = closer.changed() => return None,
                        _ = tokio::time::sleep_until(deadline) => return None,
                    }
                }
            }
        },
    )
    .map(render);
    let stream = replay_stream
        .chain(live_stream)
        .map(Ok::<Bytes, Infallible>);
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(stream),
    )
        .into_response()
}

fn patch(inner: &Inner, target: &Target, name: &str, headers: &HeaderMap, body: &[u8]) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let patch: Value = if content_type.contains("apply-patch+yaml") {
        // Server-side apply bodies are JSON (a subset of YAML) from kube-rs.
        match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(_) => return status(400, "BadRequest", "apply body is not JSON"),
        }
    } else if content_type.contains("merge-patch+json")
        || content_type.contains("strategic-merge-patch+json")
    {
        match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(_) => return status(400, "BadRequest", "patch is not JSON"),
        }
    } else {
        return status(
            415,
            "UnsupportedMediaType",
            &format!("patch type {content_type} not supported"),
        );
    };
    // Through the status subresource only the status changes, as on a real API server.
    let patch = match target.subresource.as_deref() {
        Some("status") => json!({"status": patch.get("status").cloned().unwrap_or(Value::Null)}),
        _ => patch,
    };
    let mut store = lock(&inner.store);
    let k = key(target.kind, &target.namespace, name);
    let existing = store.objects.get(&k).cloned();
    let is_apply = content_type.contains("apply-patch");
    let mut object = match existing {
        Some(object) => object,
        None if is_apply => {
            json!({"apiVersion": target.kind.api_version(), "kind": target.kind.kind, "metadata": {"name": name}})
        }
        None => {
            return status(
                404,
                "NotFound",
                &format!("{} \"{name}\" not found", target.kind.plural),
            );
        }
    };
    merge_patch(&mut object, &patch);
    let stored = store.upsert(inner, target.kind, &target.namespace, object);
    json_response(StatusCode::OK, &stored)
}

/// RFC 7386 JSON merge patch.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(target) = target {
        for (key, value) in patch {
            if value.is_null() {
                target.remove(key);
            } else {
                merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}
