//! The API server double. One in-memory store with a global resourceVersion counter, an event
//! history for watch replay, and a broadcast channel for live watch streams. Server-side apply
//! (with field managers, list-map keys and conflicts) lives in [`ssa`], request handling in [`handlers`].

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

// Pod port-forwarding (`pods/NAME/portforward` over WebSocket); a child module, so that it
// reaches the store.
mod portforward;

// Discovery documents (`/api`, `/apis`, `/api/v1`, `/apis/GROUP/VERSION`) of the kinds served.
mod discovery;

mod apply;
mod handlers;
mod ssa;

use handlers::{Target, handle, percent_decode};

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
    Kind {
        group: "admissionregistration.k8s.io",
        version: "v1",
        plural: "validatingwebhookconfigurations",
        kind: "ValidatingWebhookConfiguration",
        namespaced: false,
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
    /// Requests whose path or query contains this text (`/configmaps/rule`, `dryRun=All`)
    /// answer with this HTTP status, until healed.
    FailPath { contains: String, status: u16 },
    /// Requests whose path contains this text wait this long before they are answered (a hung
    /// GET), until healed; requests already waiting go on waiting.
    SlowPath { contains: String, delay: Duration },
}

/// One field manager's entry for an object, as server-side apply keeps it (and as
/// `metadata.managedFields` shows it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedFields {
    /// The `fieldManager` of the apply, e.g. `drift-sentinel/pod-a/webhook`.
    pub manager: String,
    /// Always `Apply`: the double tracks ownership for server-side apply only.
    pub operation: String,
    pub api_version: String,
    /// `Some("status")` for applies through the status subresource.
    pub subresource: Option<String>,
    /// RFC 3339 time of the manager's last apply that changed something.
    pub time: String,
    /// The values and list-map items the manager owns, as the API server writes paths in
    /// conflict messages, in order: `.status.byPod[id="pod-a"]`,
    /// `.status.byPod[id="pod-a"].connectionUID`,
    /// `.status.byPod[id="pod-a"].publishStatuses[source="webhook"].active`, …
    pub fields: Vec<String>,
}

impl ManagedFields {
    /// Whether the manager owns this path (written as in [`ManagedFields::fields`]).
    pub fn owns(&self, path: &str) -> bool {
        self.fields.iter().any(|f| f == path)
    }
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
    objects: BTreeMap<ObjectKey, Value>,
    history: Vec<WatchEvent>,
    resource_version: u64,
    /// Watches from a resourceVersion below this get 410 Gone.
    oldest_watchable: u64,
    fail: Option<(usize, u16)>,
    gone_on_next_watch: bool,
    latency: Option<Duration>,
    fail_paths: Vec<(String, u16)>,
    slow_paths: Vec<(String, Duration)>,
    requests: Vec<String>,
    uid_counter: u64,
    /// Server-side apply field managers of each object, by object key.
    managers: BTreeMap<ObjectKey, Vec<ssa::Manager>>,
    /// The message of the 403 that every `dryRun` write answers, standing in for a webhook.
    deny_dry_runs: Option<String>,
    /// Where port-forwards to (namespace, pod, port) go (see the portforward module).
    port_targets: BTreeMap<(String, String, u16), SocketAddr>,
    /// The port-forward sessions, ended when the double is dropped.
    forwards: Vec<tokio::task::AbortHandle>,
}

/// (group, plural, namespace, name) of a stored object.
type ObjectKey = (String, String, String, String);

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
        portforward::abort_all(&self.inner);
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
        self.write_kubeconfig_with(dir, &[("double", "default")])
    }

    /// Writes a kubeconfig that points at this server with `contexts` (name, namespace), the
    /// first one current, and returns its path.
    pub fn write_kubeconfig_with(
        &self,
        dir: &Path,
        contexts: &[(&str, &str)],
    ) -> std::io::Result<PathBuf> {
        let path = dir.join("kubeconfig");
        let listed: String = contexts
            .iter()
            .map(|(name, namespace)| {
                format!(
                    "- name: {name}\n  context:\n    cluster: double\n    user: tester\n    namespace: {namespace}\n"
                )
            })
            .collect();
        let current = contexts.first().map_or("double", |(name, _)| name);
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: double\n  cluster:\n    server: {}\ncontexts:\n{listed}current-context: {current}\nusers:\n- name: tester\n  user:\n    token: test-token\n",
            self.url()
        );
        std::fs::write(&path, text)?;
        Ok(path)
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        lock(&self.inner.store)
    }

    /// Creates or replaces an object (by apiVersion, kind, namespace, name) and notifies watches;
    /// an object given without `status` keeps the status it had.
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
        let mut object = object;
        let mut store = self.store();
        // Like `kubectl apply` of a manifest without status: the object's status (written
        // through the status subresource) stays.
        if object.get("status").is_none() {
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            if let Some(status) = store
                .objects
                .get(&key(kind, &namespace, name))
                .and_then(|existing| existing.get("status"))
            {
                object["status"] = status.clone();
            }
        }
        store.upsert(&self.inner, kind, &namespace, object)
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

    /// The server-side apply field managers of an object, in the order they first applied (the
    /// order of `metadata.managedFields`); empty for an unknown object or one never applied.
    pub fn managed_fields(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Vec<ManagedFields> {
        let Some(kind) = Kind::by_api_version(api_version, kind) else {
            return Vec::new();
        };
        self.store()
            .managers
            .get(&key(kind, namespace, name))
            .map(|managers| {
                managers
                    .iter()
                    .map(|m| ManagedFields {
                        manager: m.name.clone(),
                        operation: "Apply".to_owned(),
                        api_version: m.api_version.clone(),
                        subresource: m.subresource.clone(),
                        time: m.time.clone(),
                        fields: ssa::owned_paths(m),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn inject(&self, fault: Fault) {
        let mut store = self.store();
        match fault {
            Fault::Fail { count, status } => store.fail = Some((count, status)),
            Fault::GoneOnNextWatch => store.gone_on_next_watch = true,
            Fault::Latency(latency) => store.latency = Some(latency),
            Fault::FailPath { contains, status } => store.fail_paths.push((contains, status)),
            Fault::SlowPath { contains, delay } => store.slow_paths.push((contains, delay)),
        }
    }

    /// Makes every `dryRun=All` write (PUT, PATCH) answer `403 Forbidden` with a Status whose
    /// message is `message`, as an installed validating webhook denying it would (the double
    /// runs no webhooks; give the whole text, e.g. `admission webhook "…" denied the request:
    /// …`). Without this, a dry-run write is validated and answered with the would-be object,
    /// and nothing is stored. Undone by [`ApiServer::heal`].
    pub fn deny_dry_runs(&self, message: impl Into<String>) {
        self.store().deny_dry_runs = Some(message.into());
    }

    /// Clears injected faults (and [`ApiServer::deny_dry_runs`]).
    pub fn heal(&self) {
        let mut store = self.store();
        store.deny_dry_runs = None;
        store.fail = None;
        store.gone_on_next_watch = false;
        store.latency = None;
        store.fail_paths.clear();
        store.slow_paths.clear();
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

fn key(kind: Kind, namespace: &str, name: &str) -> ObjectKey {
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
        // Objects with server-side apply managers show them; others keep what they were given.
        if let Some(managers) = self.managers.get(&k).filter(|m| !m.is_empty()) {
            metadata.insert("managedFields".into(), ssa::render_managed_fields(managers));
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
        let k = key(kind, namespace, name);
        let mut object = self.objects.remove(&k)?;
        self.managers.remove(&k);
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
