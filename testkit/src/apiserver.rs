//! The API server double. One in-memory store with a global resourceVersion counter, an event
//! history for watch replay, and a broadcast channel for live watch streams. Server-side apply
//! (with field managers, list-map keys and conflicts) lives in the [`ssa`] module below.

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
#[path = "portforward.rs"]
mod portforward;

// Discovery documents (`/api`, `/apis`, `/api/v1`, `/apis/GROUP/VERSION`) of the kinds served.
#[path = "discovery.rs"]
mod discovery;

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
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(pair), String::new()),
        })
        .collect()
}

/// Decodes a form-encoded query component (`%XX` escapes, `+` for space).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A `fieldSelector`: terms `path=value`, `path==value` or `path!=value`, all of which must hold.
/// Any dotted path of the object can be named (`metadata.name`, `metadata.namespace`,
/// `spec.nodeName`, …); a missing field compares as the empty string. The request's
/// `labelSelector` rides along (see [`LabelSelector`]): both must hold.
#[derive(Debug, Clone, Default)]
struct FieldSelector(Vec<(Vec<String>, bool, String)>, LabelSelector);

impl FieldSelector {
    fn parse(text: &str) -> Result<Self, String> {
        let mut terms = Vec::new();
        for term in text.split(',').filter(|t| !t.is_empty()) {
            let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, true, v)
            } else {
                return Err(format!(
                    "invalid selector: '{text}'; can't understand '{term}'"
                ));
            };
            let field = field.trim();
            if field.is_empty() {
                return Err(format!(
                    "invalid selector: '{text}'; empty field in '{term}'"
                ));
            }
            terms.push((
                field.split('.').map(str::to_owned).collect(),
                equal,
                value.trim().to_owned(),
            ));
        }
        Ok(Self(terms, LabelSelector::default()))
    }

    /// Adds the request's `labelSelector`.
    fn with_labels(mut self, text: Option<&String>) -> Result<Self, String> {
        self.1 = LabelSelector::parse(text.map_or("", String::as_str))?;
        Ok(self)
    }

    fn matches(&self, object: &Value) -> bool {
        if !self.1.matches(object) {
            return false;
        }
        self.0.iter().all(|(path, equal, value)| {
            let actual = path
                .iter()
                .try_fold(object, |v, segment| v.get(segment.as_str()));
            let actual = match actual {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (actual == *value) == *equal
        })
    }
}

/// A `labelSelector`, as the API server reads it: requirements separated by commas, all of
/// which must hold — `key`, `!key`, `key=value`, `key==value`, `key!=value` (true when the
/// label is absent), `key in (a,b)`, `key notin (a,b)` (true when absent).
#[derive(Debug, Clone, Default)]
struct LabelSelector(Vec<(String, LabelOp)>);

#[derive(Debug, Clone)]
enum LabelOp {
    Exists,
    NotExists,
    In(Vec<String>),
    NotIn(Vec<String>),
}

impl LabelSelector {
    fn parse(text: &str) -> Result<Self, String> {
        // Commas inside `( … )` belong to a set, not between requirements.
        let mut terms = Vec::new();
        let (mut depth, mut start) = (0usize, 0usize);
        for (i, c) in text.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                ',' if depth == 0 => {
                    terms.push(&text[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        terms.push(&text[start..]);
        let invalid = |term: &str| format!("unable to parse requirement: '{term}' in '{text}'");
        let mut requirements = Vec::new();
        for term in terms.into_iter().map(str::trim).filter(|t| !t.is_empty()) {
            let set = |values: &str| -> Result<Vec<String>, String> {
                let values = values.trim();
                let inner = values
                    .strip_prefix('(')
                    .and_then(|v| v.strip_suffix(')'))
                    .ok_or_else(|| invalid(term))?;
                Ok(inner.split(',').map(|v| v.trim().to_owned()).collect())
            };
            let requirement = if let Some(key) = term.strip_prefix('!') {
                (key.trim().to_owned(), LabelOp::NotExists)
            } else if let Some((key, value)) = term.split_once("!=") {
                (
                    key.trim().to_owned(),
                    LabelOp::NotIn(vec![value.trim().to_owned()]),
                )
            } else if let Some((key, value)) =
                term.split_once("==").or_else(|| term.split_once('='))
            {
                (
                    key.trim().to_owned(),
                    LabelOp::In(vec![value.trim().to_owned()]),
                )
            } else if let Some((key, values)) = term.split_once(" notin ") {
                (key.trim().to_owned(), LabelOp::NotIn(set(values)?))
            } else if let Some((key, values)) = term.split_once(" in ") {
                (key.trim().to_owned(), LabelOp::In(set(values)?))
            } else if term.contains([' ', '(', ')']) {
                return Err(invalid(term));
            } else {
                (term.to_owned(), LabelOp::Exists)
            };
            if requirement.0.is_empty() {
                return Err(invalid(term));
            }
            requirements.push(requirement);
        }
        Ok(Self(requirements))
    }

    fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        self.0.iter().all(|(key, op)| {
            let value = labels.get(key).and_then(Value::as_str);
            match op {
                LabelOp::Exists => value.is_some(),
                LabelOp::NotExists => value.is_none(),
                LabelOp::In(values) => value.is_some_and(|v| values.iter().any(|x| x == v)),
                LabelOp::NotIn(values) => !value.is_some_and(|v| values.iter().any(|x| x == v)),
            }
        })
    }
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
            .find(|(contains, _)| {
                uri.path().contains(contains.as_str())
                    || uri.query().is_some_and(|q| q.contains(contains.as_str()))
            })
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
        let slow = store
            .slow_paths
            .iter()
            .find(|(contains, _)| uri.path().contains(contains.as_str()))
            .map(|(_, delay)| *delay);
        let latency = match (store.latency, slow) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        (latency, fail, store.gone_on_next_watch)
    };
    if let Some(latency) = latency {
        tokio::time::sleep(latency).await;
    }
    if let Some(code) = fail {
        return status(code, "InternalError", "injected failure");
    }
    if let Some((namespace, pod)) = portforward::route(uri.path()) {
        return portforward::handle(inner, request, namespace, pod).await;
    }
    if let Some(response) = discovery::serve(&method, uri.path()) {
        return response;
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
    let selector = match FieldSelector::parse(query.get("fieldSelector").map_or("", String::as_str))
        .and_then(|s| s.with_labels(query.get("labelSelector")))
    {
        Ok(selector) => selector,
        Err(message) => return status(400, "BadRequest", &message),
    };
    let dry_run = query.contains_key("dryRun");
    if dry_run && !matches!(method, Method::GET | Method::PUT | Method::PATCH) {
        return status(
            400,
            "BadRequest",
            "the API server double supports dryRun on PUT and PATCH only",
        );
    }
    match (method, &target.name) {
        (Method::GET, None) if query.get("watch").is_some_and(|w| w == "true" || w == "1") => {
            if gone {
                lock(&inner.store).gone_on_next_watch = false;
            }
            watch(inner, target, &query, selector, metadata_only, gone)
        }
        (Method::GET, None) => list(&inner, &target, &selector, metadata_only),
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
            if dry_run {
                let existing = existing.clone();
                return dry_run_answer(&store, target.kind, &target.namespace, &existing, object);
            }
            let stored = store.upsert(&inner, target.kind, &target.namespace, object);
            json_response(StatusCode::OK, &stored)
        }
        (Method::PATCH, Some(name)) => patch(&inner, &target, name, &headers, &query, &body),
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

fn list(inner: &Inner, target: &Target, selector: &FieldSelector, metadata_only: bool) -> Response {
    let store = lock(&inner.store);
    let items: Vec<Value> = store
        .objects
        .iter()
        .filter(|((g, p, ns, _), object)| {
            g == target.kind.group
                && p == target.kind.plural
                && (target.namespace.is_empty() || *ns == target.namespace)
                && selector.matches(object)
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
    selector: FieldSelector,
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
                && selector.matches(&e.object)
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
            let selector = selector.clone();
            async move {
                loop {
                    tokio::select! {
                        received = live.recv() => match received {
                            Ok(event) => {
                                let wanted = event.group == group && event.kind == plural
                                    && (namespace.is_empty() || event.namespace == namespace)
                                    && event.resource_version > last_replayed
                                    && selector.matches(&event.object);
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

fn patch(
    inner: &Inner,
    target: &Target,
    name: &str,
    headers: &HeaderMap,
    query: &BTreeMap<String, String>,
    body: &[u8],
) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if content_type.contains("apply-patch+yaml") {
        if query.contains_key("dryRun") {
            return status(
                400,
                "BadRequest",
                "the API server double does not support dryRun with server-side apply",
            );
        }
        return ssa::apply(inner, target, name, query, body);
    }
    if query.contains_key("force") {
        return status(
            422,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch",
        );
    }
    let patch: Value = if content_type.contains("merge-patch+json")
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
    let Some(mut object) = store.objects.get(&k).cloned() else {
        return status(
            404,
            "NotFound",
            &format!("{} \"{name}\" not found", target.kind.plural),
        );
    };
    let existing = object.clone();
    merge_patch(&mut object, &patch);
    if query.contains_key("dryRun") {
        return dry_run_answer(&store, target.kind, &target.namespace, &existing, object);
    }
    let stored = store.upsert(inner, target.kind, &target.namespace, object);
    json_response(StatusCode::OK, &stored)
}

/// The answer to a `dryRun` write that passed validation: the 403 of
/// [`ApiServer::deny_dry_runs`], or the object as the write would store it (server-owned
/// metadata from `existing`, resourceVersion unchanged), neither stored nor announced.
fn dry_run_answer(
    store: &Store,
    kind: Kind,
    namespace: &str,
    existing: &Value,
    mut object: Value,
) -> Response {
    if let Some(message) = &store.deny_dry_runs {
        return status(403, "Forbidden", message);
    }
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    for field in ["resourceVersion", "uid", "creationTimestamp"] {
        object["metadata"][field] = existing["metadata"][field].clone();
    }
    if kind.namespaced {
        object["metadata"]["namespace"] = json!(namespace);
    }
    object["apiVersion"] = json!(kind.api_version());
    object["kind"] = json!(kind.kind);
    json_response(StatusCode::OK, &object)
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

/// Server-side apply: every field manager's last applied configuration, kept per object as the set
/// of fields it owns, list-map items told apart by their keys.
///
/// An apply by manager M (for the main resource or for `/status`, each a separate manager entry)
/// checks that no other manager owns a field M sets to a different value (409 Conflict, unless
/// `force=true`, which transfers the fields to M), removes from the live object what M owned
/// before and no longer applies unless another manager owns it too, and merges M's configuration
/// in: maps field by field, list-maps item by item on their keys, anything else (scalars,
/// atomic lists) replaced whole.
///
/// Not modelled: ownership by non-apply writers (`operation: Update`); a PUT or merge patch
/// changes the object but nobody's ownership.
mod ssa {
    use std::collections::{BTreeMap, BTreeSet};

    use axum::http::StatusCode;
    use axum::response::{IntoResponse, Response};
    use serde_json::{Map, Value, json};

    use super::{Inner, Kind, Target, header, json_response, key, lock, status};

    /// One step of a field path.
    #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
    pub(super) enum Seg {
        Field(String),
        /// An item of a list-map: its key fields as (name, value as JSON), sorted by name.
        Key(Vec<(String, String)>),
    }

    pub(super) type FieldPath = Vec<Seg>;

    /// What a manager owns at a path. Sets hold every ancestor of what they hold.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(super) enum Entry {
        /// A scalar or an atomic list, owned whole.
        Leaf,
        Map,
        List,
        /// A list-map item.
        Item,
    }

    pub(super) type FieldSet = BTreeMap<FieldPath, Entry>;

    /// A field manager's entry for one object.
    #[derive(Debug, Clone)]
    pub(super) struct Manager {
        pub(super) name: String,
        pub(super) subresource: Option<String>,
        pub(super) api_version: String,
        pub(super) time: String,
        pub(super) fields: FieldSet,
    }

    /// The keys of the list-maps of a kind (`x-kubernetes-list-type: map`), by path from the
    /// object's root with list items left out. Lists not named here are atomic.
    fn list_map_keys(kind: Kind, path: &[String]) -> Option<&'static [&'static str]> {
        const NAME: &[&str] = &["name"];
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        let pod_spec = |rest: &[&str]| match rest {
            ["containers" | "initContainers" | "ephemeralContainers" | "volumes"]
            | [
                "containers" | "initContainers" | "ephemeralContainers",
                "env",
            ] => Some(NAME),
            _ => None,
        };
        match (kind.group, kind.plural, path.as_slice()) {
            ("connection.drift-sentinel.io", "connections", ["status", "byPod"]) => Some(&["id"]),
            (
                "connection.drift-sentinel.io",
                "connections",
                ["status", "byPod", "publishStatuses"],
            ) => Some(&["source"]),
            (_, _, ["metadata", "ownerReferences"]) => Some(&["uid"]),
            (_, _, ["status", "conditions"]) => Some(&["type"]),
            ("", "pods", ["spec", rest @ ..]) => pod_spec(rest),
            ("apps" | "argoproj.io", _, ["spec", "template", "spec", rest @ ..]) => pod_spec(rest),
            _ => None,
        }
    }

    /// Metadata fields an apply can set on the main resource; the rest of `metadata` is the
    /// server's.
    const APPLIED_METADATA: &[&str] = &["labels", "annotations", "finalizers", "ownerReferences"];

    fn item_key(item: &Value, keys: &[&str]) -> Option<Vec<(String, String)>> {
        let object = item.as_object()?;
        let mut key = keys
            .iter()
            .map(|k| {
                object
                    .get(*k)
                    .filter(|v| !v.is_null())
                    .map(|v| ((*k).to_owned(), v.to_string()))
            })
            .collect::<Option<Vec<_>>>()?;
        key.sort();
        Some(key)
    }

    fn matches_key(item: &Value, key: &[(String, String)]) -> bool {
        key.iter().all(|(name, value)| {
            item.get(name)
                .is_some_and(|v| serde_json::to_string(v).is_ok_and(|text| text == *value))
        })
    }

    /// A path as the API server writes it in conflict messages: `.status.byPod[id="a"].connectionUID`.
    pub(super) fn render_path(path: &[Seg]) -> String {
        let mut text = String::new();
        for seg in path {
            match seg {
                Seg::Field(name) => {
                    text.push('.');
                    text.push_str(name);
                }
                Seg::Key(key) => {
                    let fields: Vec<String> = key.iter().map(|(n, v)| format!("{n}={v}")).collect();
                    text.push('[');
                    text.push_str(&fields.join(","));
                    text.push(']');
                }
            }
        }
        text
    }

    /// The fields an applied configuration sets.
    fn field_set(kind: Kind, config: &Map<String, Value>) -> Result<FieldSet, String> {
        let mut out = FieldSet::new();
        collect_fields(kind, config, &mut Vec::new(), &mut Vec::new(), &mut out)?;
        Ok(out)
    }

    fn collect_fields(
        kind: Kind,
        map: &Map<String, Value>,
        schema: &mut Vec<String>,
        path: &mut FieldPath,
        out: &mut FieldSet,
    ) -> Result<(), String> {
        for (name, value) in map {
            schema.push(name.clone());
            path.push(Seg::Field(name.clone()));
            let result = collect_value(kind, value, schema, path, out);
            schema.pop();
            path.pop();
            result?;
        }
        Ok(())
    }

    fn collect_value(
        kind: Kind,
        value: &Value,
        schema: &mut Vec<String>,
        path: &mut FieldPath,
        out: &mut FieldSet,
    ) -> Result<(), String> {
        match (value, list_map_keys(kind, schema)) {
            (Value::Object(map), _) => {
                out.insert(path.clone(), Entry::Map);
                collect_fields(kind, map, schema, path, out)
            }
            (Value::Array(items), Some(keys)) => {
                out.insert(path.clone(), Entry::List);
                for (index, item) in items.iter().enumerate() {
                    let (Some(key), Some(fields)) = (item_key(item, keys), item.as_object()) else {
                        return Err(format!(
                            "{}: element {index}: associative list with keys has an element that omits key field {} (and doesn't have default value)",
                            render_path(path),
                            keys.iter()
                                .map(|k| format!("{k:?}"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ));
                    };
                    path.push(Seg::Key(key));
                    if out.insert(path.clone(), Entry::Item).is_some() {
                        let message = match path.split_last() {
                            Some((last, parent)) => format!(
                                "{}: duplicate entries for key {}",
                                render_path(parent),
                                render_path(std::slice::from_ref(last))
                            ),
                            None => "duplicate entries".to_owned(),
                        };
                        path.pop();
                        return Err(message);
                    }
                    let result = collect_fields(kind, fields, schema, path, out);
                    path.pop();
                    result?;
                }
                Ok(())
            }
            _ => {
                out.insert(path.clone(), Entry::Leaf);
                Ok(())
            }
        }
    }

    fn get_at<'v>(value: &'v Value, path: &[Seg]) -> Option<&'v Value> {
        path.iter().try_fold(value, |current, seg| match seg {
            Seg::Field(name) => current.as_object()?.get(name),
            Seg::Key(key) => current.as_array()?.iter().find(|i| matches_key(i, key)),
        })
    }

    fn get_at_mut<'v>(value: &'v mut Value, path: &[Seg]) -> Option<&'v mut Value> {
        path.iter().try_fold(value, |current, seg| match seg {
            Seg::Field(name) => current.as_object_mut()?.get_mut(name),
            Seg::Key(key) => current
                .as_array_mut()?
                .iter_mut()
                .find(|i| matches_key(i, key)),
        })
    }

    fn remove_at(value: &mut Value, path: &[Seg]) {
        let Some((last, parent)) = path.split_last() else {
            return;
        };
        match (get_at_mut(value, parent), last) {
            (Some(Value::Object(map)), Seg::Field(name)) => {
                map.remove(name);
            }
            (Some(Value::Array(items)), Seg::Key(key)) => items.retain(|i| !matches_key(i, key)),
            _ => {}
        }
    }

    /// Merges an applied configuration into the live object: maps by field, list-maps by item
    /// key, everything else replaced.
    fn merge(kind: Kind, live: &mut Value, config: &Value, schema: &mut Vec<String>) {
        match (config, list_map_keys(kind, schema)) {
            (Value::Object(fields), _) => {
                if !live.is_object() {
                    *live = Value::Object(Map::new());
                }
                if let Value::Object(live_fields) = live {
                    for (name, value) in fields {
                        schema.push(name.clone());
                        let slot = live_fields.entry(name.clone()).or_insert(Value::Null);
                        merge(kind, slot, value, schema);
                        schema.pop();
                    }
                }
            }
            (Value::Array(items), Some(keys)) => {
                if !live.is_array() {
                    *live = Value::Array(Vec::new());
                }
                if let Value::Array(live_items) = live {
                    for item in items {
                        let existing = item_key(item, keys)
                            .and_then(|key| live_items.iter_mut().find(|l| matches_key(l, &key)));
                        match existing {
                            Some(slot) => merge(kind, slot, item, schema),
                            None => live_items.push(item.clone()),
                        }
                    }
                }
            }
            _ => *live = config.clone(),
        }
    }

    /// Fields of `applied` (with its configuration `config`) that another manager owns and
    /// `applied` would change: (path, index of the other manager).
    fn conflicts(
        applied: &FieldSet,
        config: &Value,
        live: &Value,
        managers: &[Manager],
        me: Option<usize>,
    ) -> Vec<(FieldPath, usize)> {
        let mut found = Vec::new();
        for (index, other) in managers.iter().enumerate() {
            if Some(index) == me {
                continue;
            }
            for (path, entry) in applied {
                let conflict = match (entry, other.fields.get(path)) {
                    // Both set the value: a conflict only if this apply changes it.
                    (Entry::Leaf, Some(Entry::Leaf)) => {
                        get_at(live, path).is_some_and(|v| Some(v) != get_at(config, path))
                    }
                    // One sets a value where the other has structure (or the reverse).
                    (Entry::Leaf, Some(_)) | (_, Some(Entry::Leaf)) => true,
                    _ => false,
                };
                if conflict {
                    found.push((path.clone(), index));
                }
            }
        }
        found
    }

    /// Takes `path` (and what lies under it) away from a manager, and the maps and lists above
    /// it that held nothing else.
    fn disown(fields: &mut FieldSet, path: &[Seg]) {
        let under: Vec<FieldPath> = fields
            .range(path.to_vec()..)
            .take_while(|(p, _)| p.starts_with(path))
            .map(|(p, _)| p.clone())
            .collect();
        for p in under {
            fields.remove(&p);
        }
        let mut ancestor = path.to_vec();
        while ancestor.pop().is_some() && !ancestor.is_empty() {
            let empty = fields
                .range(ancestor.clone()..)
                .nth(1)
                .is_none_or(|(p, _)| !p.starts_with(&ancestor));
            match fields.get(&ancestor) {
                Some(Entry::Map | Entry::List) if empty => {
                    fields.remove(&ancestor);
                }
                _ => break,
            }
        }
    }

    fn conflict_response(
        conflicts: &[(FieldPath, usize)],
        managers: &[Manager],
        object: &str,
    ) -> Response {
        let describe = |m: &Manager, plural: bool| {
            let mut text = format!(
                "conflict{} with {:?}",
                if plural { "s" } else { "" },
                m.name
            );
            if let Some(sub) = &m.subresource {
                text.push_str(&format!(" with subresource {sub:?}"));
            }
            text.push_str(&format!(" using {}", m.api_version));
            text
        };
        let mut by_manager: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for (path, index) in conflicts {
            by_manager
                .entry(*index)
                .or_default()
                .push(render_path(path));
        }
        let mut parts = Vec::new();
        let mut causes = Vec::new();
        for (index, paths) in &by_manager {
            let Some(manager) = managers.get(*index) else {
                continue;
            };
            for path in paths {
                causes.push(json!({
                    "reason": "FieldManagerConflict",
                    "message": describe(manager, false),
                    "field": path,
                }));
            }
            parts.push(match paths.as_slice() {
                [one] => format!("{}: {one}", describe(manager, false)),
                many => format!(
                    "{}:\n{}",
                    describe(manager, true),
                    many.iter()
                        .map(|p| format!("- {p}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                ),
            });
        }
        let count = conflicts.len();
        let message = format!(
            "Apply failed with {count} conflict{}: {}",
            if count == 1 { "" } else { "s" },
            parts.join("\n")
        );
        let body = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": "Conflict", "code": 409,
            "details": {"name": object, "causes": causes},
        });
        (
            StatusCode::CONFLICT,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response()
    }

    /// `fieldsV1` as the API server writes it: `f:<field>`, `k:<key JSON>` for list-map items
    /// (with `.` for the item itself).
    fn fields_v1(fields: &FieldSet) -> Value {
        let mut root = Map::new();
        'paths: for (path, entry) in fields {
            let mut node = &mut root;
            for seg in path {
                let name = match seg {
                    Seg::Field(name) => format!("f:{name}"),
                    Seg::Key(key) => {
                        let parts: Vec<String> = key
                            .iter()
                            .map(|(n, v)| format!("{}:{v}", Value::String(n.clone())))
                            .collect();
                        format!("k:{{{}}}", parts.join(","))
                    }
                };
                let child = node
                    .entry(name)
                    .or_insert_with(|| Value::Object(Map::new()));
                let Value::Object(child) = child else {
                    continue 'paths;
                };
                node = child;
            }
            if *entry == Entry::Item {
                node.insert(".".to_owned(), json!({}));
            }
        }
        Value::Object(root)
    }

    pub(super) fn render_managed_fields(managers: &[Manager]) -> Value {
        Value::Array(
            managers
                .iter()
                .map(|m| {
                    let mut entry = json!({
                        "manager": m.name,
                        "operation": "Apply",
                        "apiVersion": m.api_version,
                        "time": m.time,
                        "fieldsType": "FieldsV1",
                        "fieldsV1": fields_v1(&m.fields),
                    });
                    if let Some(sub) = &m.subresource {
                        entry["subresource"] = json!(sub);
                    }
                    entry
                })
                .collect(),
        )
    }

    /// The fields a manager owns for [`crate::ManagedFields`]: values and list-map items.
    pub(super) fn owned_paths(manager: &Manager) -> Vec<String> {
        manager
            .fields
            .iter()
            .filter(|(_, e)| matches!(e, Entry::Leaf | Entry::Item))
            .map(|(p, _)| render_path(p))
            .collect()
    }

    fn same_ownership(a: &[Manager], b: &[Manager]) -> bool {
        a.len() == b.len()
            && a.iter().zip(b).all(|(x, y)| {
                x.name == y.name
                    && x.subresource == y.subresource
                    && x.api_version == y.api_version
                    && x.fields == y.fields
            })
    }

    fn parse_bool(text: &str) -> Option<bool> {
        match text {
            "" | "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
            "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
            _ => None,
        }
    }

    fn without_managed_fields(object: &Value) -> Value {
        let mut object = object.clone();
        if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.remove("managedFields");
        }
        object
    }

    /// `PATCH` with `application/apply-patch+yaml`.
    pub(super) fn apply(
        inner: &Inner,
        target: &Target,
        name: &str,
        query: &BTreeMap<String, String>,
        body: &[u8],
    ) -> Response {
        let kind = target.kind;
        let manager = query.get("fieldManager").map_or("", String::as_str);
        if manager.is_empty() {
            return status(
                422,
                "Invalid",
                "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
            );
        }
        if manager.len() > 128 {
            return status(
                422,
                "Invalid",
                "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Too long: may not be more than 128 bytes",
            );
        }
        let Some(force) = parse_bool(query.get("force").map_or("", String::as_str)) else {
            return status(
                400,
                "BadRequest",
                "invalid value for force: expected true or false",
            );
        };
        let dry_run = query.get("dryRun").is_some_and(|d| d == "All");
        let subresource = match target.subresource.as_deref() {
            None => None,
            Some("status") => Some("status"),
            Some(other) => {
                return status(
                    404,
                    "NotFound",
                    &format!("the server could not find the requested resource ({other})"),
                );
            }
        };
        let body: Value = match serde_json::from_slice(body) {
            Ok(body) => body,
            Err(e) => {
                return status(
                    400,
                    "BadRequest",
                    &format!(
                        "the API server double reads apply bodies as JSON only (as kube-rs sends them): {e}"
                    ),
                );
            }
        };
        let Some(fields) = body.as_object() else {
            return status(400, "BadRequest", "the apply body is not an object");
        };
        let expected_api_version = kind.api_version();
        let api_version = match fields.get("apiVersion").and_then(Value::as_str) {
            None | Some("") => {
                return status(
                    400,
                    "BadRequest",
                    "Object 'apiVersion' is missing in the apply body",
                );
            }
            Some(v) if v != expected_api_version => {
                return status(
                    400,
                    "BadRequest",
                    &format!(
                        "the API version in the data ({v}) does not match the expected API version ({expected_api_version})"
                    ),
                );
            }
            Some(v) => v.to_owned(),
        };
        match fields.get("kind").and_then(Value::as_str) {
            None | Some("") => {
                return status(
                    400,
                    "BadRequest",
                    "Object 'Kind' is missing in the apply body",
                );
            }
            Some(k) if k != kind.kind => {
                return status(
                    400,
                    "BadRequest",
                    &format!(
                        "the kind in the data ({k}) does not match the expected kind ({})",
                        kind.kind
                    ),
                );
            }
            Some(_) => {}
        }
        let metadata = fields
            .get("metadata")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        if let Some(body_name) = metadata.get("name").and_then(Value::as_str)
            && body_name != name
        {
            return status(
                400,
                "BadRequest",
                &format!(
                    "the name of the object ({body_name}) does not match the name on the URL ({name})"
                ),
            );
        }
        if let Some(namespace) = metadata.get("namespace").and_then(Value::as_str)
            && kind.namespaced
            && !namespace.is_empty()
            && namespace != target.namespace
        {
            return status(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the request",
            );
        }
        if metadata.get("managedFields").is_some_and(|m| !m.is_null()) {
            return status(400, "BadRequest", "metadata.managedFields must be nil");
        }
        let sent_rv = metadata
            .get("resourceVersion")
            .and_then(Value::as_str)
            .filter(|rv| !rv.is_empty());

        // What this apply manages: `status` through /status, everything else (and a few
        // metadata fields) through the main resource.
        let mut config = Map::new();
        match subresource {
            Some(_) => {
                if let Some(status) = fields.get("status").filter(|s| !s.is_null()) {
                    config.insert("status".to_owned(), status.clone());
                }
            }
            None => {
                for (field, value) in fields {
                    match field.as_str() {
                        "apiVersion" | "kind" | "status" => {}
                        "metadata" => {
                            let applied: Map<String, Value> = metadata
                                .iter()
                                .filter(|(k, v)| {
                                    APPLIED_METADATA.contains(&k.as_str()) && !v.is_null()
                                })
                                .map(|(k, v)| (k.clone(), v.clone()))
                                .collect();
                            if !applied.is_empty() {
                                config.insert(field.clone(), Value::Object(applied));
                            }
                        }
                        _ => {
                            config.insert(field.clone(), value.clone());
                        }
                    }
                }
            }
        }
        let applied = match field_set(kind, &config) {
            Ok(applied) => applied,
            Err(e) => {
                return status(
                    422,
                    "Invalid",
                    &format!(
                        "failed to create typed patch object ({}/{name}; {expected_api_version}, Kind={}): {e}",
                        target.namespace, kind.kind
                    ),
                );
            }
        };
        let config = Value::Object(config);

        let mut store = lock(&inner.store);
        let k = key(kind, &target.namespace, name);
        let existing = store.objects.get(&k).cloned();
        let object_name = format!("{}.{}", kind.plural, kind.group);
        let object_name = object_name.trim_end_matches('.');
        if let (Some(existing), Some(sent_rv)) = (&existing, sent_rv)
            && existing["metadata"]["resourceVersion"].as_str() != Some(sent_rv)
        {
            return status(
                409,
                "Conflict",
                &format!(
                    "Operation cannot be fulfilled on {object_name} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
                ),
            );
        }
        let mut live = match &existing {
            Some(object) => without_managed_fields(object),
            None if subresource.is_some() => {
                return status(
                    404,
                    "NotFound",
                    &format!("{object_name} \"{name}\" not found"),
                );
            }
            None => json!({
                "apiVersion": expected_api_version,
                "kind": kind.kind,
                "metadata": {"name": name},
            }),
        };
        let before = store.managers.get(&k).cloned().unwrap_or_default();
        let mut managers = before.clone();
        let me = managers
            .iter()
            .position(|m| m.name == manager && m.subresource.as_deref() == subresource);

        let found = conflicts(&applied, &config, &live, &managers, me);
        if !found.is_empty() {
            if !force {
                return conflict_response(&found, &managers, name);
            }
            for (path, index) in &found {
                if let Some(other) = managers.get_mut(*index) {
                    disown(&mut other.fields, path);
                }
            }
        }

        // Remove what this manager owned before, no longer applies, and nobody else owns.
        let previous = me
            .and_then(|i| managers.get(i))
            .map(|m| m.fields.clone())
            .unwrap_or_default();
        let others: BTreeSet<&FieldPath> = managers
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != me)
            .flat_map(|(_, m)| m.fields.keys())
            .collect();
        for (path, entry) in previous.iter().rev() {
            if applied.contains_key(path) || others.contains(path) {
                continue;
            }
            let remove = match entry {
                Entry::Leaf | Entry::Item => true,
                // A map or list goes only once nothing is left in it.
                Entry::Map | Entry::List => get_at(&live, path).is_some_and(|v| match v {
                    Value::Object(m) => m.is_empty(),
                    Value::Array(a) => a.is_empty(),
                    _ => true,
                }),
            };
            if remove {
                remove_at(&mut live, path);
            }
        }
        merge(kind, &mut live, &config, &mut Vec::new());

        let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        let record = Manager {
            name: manager.to_owned(),
            subresource: subresource.map(str::to_owned),
            api_version,
            time: now.clone(),
            fields: applied,
        };
        match (me, record.fields.is_empty()) {
            (Some(i), true) => {
                managers.remove(i);
            }
            (Some(i), false) => {
                if let Some(slot) = managers.get_mut(i) {
                    *slot = record;
                }
            }
            (None, true) => {}
            (None, false) => managers.push(record),
        }
        managers.retain(|m| !m.fields.is_empty());

        let unchanged = existing
            .as_ref()
            .is_some_and(|old| without_managed_fields(old) == live)
            && same_ownership(&before, &managers);
        if unchanged && let Some(existing) = existing {
            // A no-op apply writes nothing: no new resourceVersion, no watch event.
            return json_response(StatusCode::OK, &existing);
        }
        // Other managers keep their times; this one was just written. (A manager that the
        // changed fields were forced away from keeps its time, as a simplification.)
        let code = if existing.is_some() {
            StatusCode::OK
        } else {
            StatusCode::CREATED
        };
        if dry_run {
            if !managers.is_empty() {
                live["metadata"]["managedFields"] = render_managed_fields(&managers);
            }
            return json_response(code, &live);
        }
        if managers.is_empty() {
            store.managers.remove(&k);
        } else {
            store.managers.insert(k, managers);
        }
        let stored = store.upsert(inner, kind, &target.namespace, live);
        json_response(code, &stored)
    }
}
