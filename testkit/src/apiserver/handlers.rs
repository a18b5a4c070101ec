//! Request handling of the double: the path and query of a request (kind, namespace, name,
//! subresource; field and label selectors), and get, list (paged by `limit` and `continue`, as a
//! real server pages), watch, create, update, merge patch and
//! delete against the store; server-side apply goes to [`super::ssa`], port-forwarding to
//! [`super::portforward`].

use std::ops::Bound;

use super::*;

/// The parts of a request path: `/api/v1[/namespaces/NS]/PLURAL[/NAME[/SUB]]` or the same under
/// `/apis/GROUP/VERSION`.
pub(super) struct Target {
    pub(super) kind: Kind,
    pub(super) namespace: String,
    pub(super) name: Option<String>,
    pub(super) subresource: Option<String>,
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
pub(super) fn percent_decode(text: &str) -> String {
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

/// The faults injected for this request (recorded among the requests): its latency, a failure
/// to answer instead, and whether the next watch is answered `410 Gone`.
fn faults(
    inner: &Inner,
    method: &Method,
    uri: &axum::http::Uri,
) -> (Option<Duration>, Option<u16>, bool) {
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
}

/// Every request of the double: its faults, then port-forwarding, discovery, or the resource its
/// path names, by method.
pub(super) async fn handle(State(inner): State<Arc<Inner>>, request: Request) -> Response {
    let method = request.method().clone();
    let uri = request.uri().clone();
    let headers = request.headers().clone();
    let (latency, fail, gone) = faults(&inner, &method, &uri);
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
        (Method::GET, None) => match Page::of(&query) {
            Ok(page) => list(&inner, &target, &selector, metadata_only, &page),
            Err(message) => status(400, "BadRequest", &message),
        },
        (Method::GET, Some(name)) => get(&inner, &target, name, metadata_only),
        (Method::POST, None) => create(&inner, &target, &body),
        (Method::PUT, Some(name)) => update(&inner, &target, name, &body, dry_run),
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

/// `GET` of one object.
fn get(inner: &Inner, target: &Target, name: &str, metadata_only: bool) -> Response {
    let store = lock(&inner.store);
    match store
        .objects
        .get(&key(target.kind, &target.namespace, name))
    {
        Some(object) if metadata_only => json_response(StatusCode::OK, &as_metadata(object)),
        Some(object) => json_response(StatusCode::OK, object),
        None => status(
            404,
            "NotFound",
            &format!("{} \"{name}\" not found", target.kind.plural),
        ),
    }
}

/// `POST`: creates an object that does not exist yet.
fn create(inner: &Arc<Inner>, target: &Target, body: &[u8]) -> Response {
    let Ok(object) = serde_json::from_slice::<Value>(body) else {
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
    let stored = store.upsert(inner, target.kind, &target.namespace, object);
    json_response(StatusCode::CREATED, &stored)
}

/// `PUT`: replaces an object, refused on a stale `resourceVersion`; with `dryRun`, answers the
/// would-be object without storing it.
fn update(inner: &Arc<Inner>, target: &Target, name: &str, body: &[u8], dry_run: bool) -> Response {
    let Ok(object) = serde_json::from_slice::<Value>(body) else {
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
    let stored = store.upsert(inner, target.kind, &target.namespace, object);
    json_response(StatusCode::OK, &stored)
}

/// The page a list asks for, as a real API server reads it: at most `limit` items (all when
/// absent or 0), after the object its `continue` token names (the last of the page before, as
/// hex of `[namespace, name]`: objects stored meanwhile after it are listed, as a real server's
/// key order does).
struct Page {
    limit: Option<usize>,
    after: Option<(String, String)>,
}

impl Page {
    fn of(query: &BTreeMap<String, String>) -> Result<Self, String> {
        let limit = match query.get("limit").map(|l| l.parse::<usize>()) {
            None | Some(Ok(0)) => None,
            Some(Ok(limit)) => Some(limit),
            Some(Err(e)) => return Err(format!("invalid limit: {e}")),
        };
        let after = match query.get("continue").filter(|t| !t.is_empty()) {
            None => None,
            Some(token) => Some(
                hex_decode(token)
                    .and_then(|bytes| serde_json::from_slice(&bytes).ok())
                    .ok_or_else(|| format!("continue key is not valid: {token:?}"))?,
            ),
        };
        Ok(Self { limit, after })
    }

    fn token(namespace: &str, name: &str) -> String {
        json!([namespace, name])
            .to_string()
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

fn hex_decode(text: &str) -> Option<Vec<u8>> {
    text.len().is_multiple_of(2).then_some(())?;
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

fn list(
    inner: &Inner,
    target: &Target,
    selector: &FieldSelector,
    metadata_only: bool,
    page: &Page,
) -> Response {
    let store = lock(&inner.store);
    let group = target.kind.group.to_owned();
    let plural = target.kind.plural.to_owned();
    let start = match &page.after {
        Some((namespace, name)) => Bound::Excluded((
            group.clone(),
            plural.clone(),
            namespace.clone(),
            name.clone(),
        )),
        None => Bound::Included((group.clone(), plural.clone(), String::new(), String::new())),
    };
    let limit = page.limit.unwrap_or(usize::MAX);
    let mut matching = store
        .objects
        .range((start, Bound::Unbounded))
        .take_while(|((g, p, _, _), _)| *g == group && *p == plural)
        .filter(|((_, _, ns, _), object)| {
            (target.namespace.is_empty() || *ns == target.namespace) && selector.matches(object)
        });
    let mut items = Vec::new();
    let mut last = None;
    for ((_, _, namespace, name), object) in matching.by_ref().take(limit) {
        items.push(if metadata_only {
            as_metadata(object)
        } else {
            object.clone()
        });
        last = Some((namespace, name));
    }
    let more = matching.next().is_some();
    let mut list_metadata = json!({"resourceVersion": store.resource_version.to_string()});
    if let (true, Some((namespace, name))) = (more, last) {
        list_metadata["continue"] = json!(Page::token(namespace, name));
    }
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
            "metadata": list_metadata,
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
        return apply::apply(inner, target, name, query, body);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_is_read_from_limit_and_continue() {
        let query = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let token = Page::token("shop", "web.1f");
        let page = Page::of(&query(&[("limit", "500"), ("continue", &token)])).unwrap();
        assert_eq!(page.limit, Some(500));
        assert_eq!(page.after, Some(("shop".to_owned(), "web.1f".to_owned())));
        // No limit, or 0: everything; no token: from the start.
        for pairs in [&[][..], &[("limit", "0"), ("continue", "")][..]] {
            let page = Page::of(&query(pairs)).unwrap();
            assert_eq!((page.limit, page.after), (None, None));
        }
        for (pairs, want) in [
            (&[("limit", "x")][..], "invalid limit"),
            (&[("continue", "zz")][..], "continue key is not valid"),
            (&[("continue", "abc")][..], "continue key is not valid"),
        ] {
            let e = Page::of(&query(pairs)).err().unwrap();
            assert!(e.contains(want), "{e}");
        }
    }
}
