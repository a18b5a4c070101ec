//! Pod port-forwarding, as `kubectl port-forward` and kube-rs's `Api<Pod>::portforward` use it:
//! `GET /api/v1/namespaces/NS/pods/NAME/portforward?ports=N[,M…]` upgraded to a WebSocket with
//! the subprotocol `v4.channel.k8s.io`.
//!
//! The protocol, as the kubelet speaks it: port `i` of the request has the data channel `2i` and
//! the error channel `2i + 1`; every binary frame starts with its channel byte. The server first
//! writes the port number (2 bytes, little-endian) on both channels of each port, then dials the
//! port inside the pod and carries bytes both ways (data frames prefixed with the channel byte).
//! A port that cannot be reached gets one text message on its error channel, and the WebSocket
//! closes when every port is done: the target closed its connection, or its dial failed. A
//! WebSocket closed by the client ends the forward (the target's connection is closed).
//!
//! The double has no pods to dial into: [`ApiServer::set_pod_port_target`] says which TCP
//! address stands for a pod's port (a real agent's admin listener on loopback, in tests). An
//! unknown pod answers `404 NotFound` before the upgrade, as the API server does; a port without
//! a target, or whose target refuses the connection, answers on the error channel as the kubelet
//! does. Deleting the pod ends its forwards, as the container's end would. (The pod's phase is
//! not checked: any stored Pod can be forwarded to.)

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

use super::{ApiServer, Inner, Kind, key, lock, status};

/// The only subprotocol the double speaks (the binary channel protocol, version 4).
pub(super) const PROTOCOL: &str = "v4.channel.k8s.io";
/// How long dialing a target may take before the port fails.
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

impl ApiServer {
    /// Makes port `port` of pod `namespace/pod` reachable by port-forwarding: the bytes of a
    /// forward to it go to and from a new TCP connection to `target` (for tests, typically a
    /// real agent's admin listener on 127.0.0.1). Replaces an earlier target; forwards already
    /// open keep theirs.
    pub fn set_pod_port_target(&self, namespace: &str, pod: &str, port: u16, target: SocketAddr) {
        self.store()
            .port_targets
            .insert((namespace.to_owned(), pod.to_owned(), port), target);
    }

    /// Forgets the target of a pod's port: forwards to it from now on fail on the error channel
    /// as for a port nothing listens on. Returns whether there was one.
    pub fn clear_pod_port_target(&self, namespace: &str, pod: &str, port: u16) -> bool {
        self.store()
            .port_targets
            .remove(&(namespace.to_owned(), pod.to_owned(), port))
            .is_some()
    }

    /// How many port-forward WebSockets are open now.
    pub fn open_port_forwards(&self) -> usize {
        self.store()
            .forwards
            .iter()
            .filter(|task| !task.is_finished())
            .count()
    }
}

/// `(namespace, pod)` when `path` is a pod's `portforward` subresource.
pub(super) fn route(path: &str) -> Option<(String, String)> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match parts.as_slice() {
        [
            "api",
            "v1",
            "namespaces",
            namespace,
            "pods",
            pod,
            "portforward",
        ] if !namespace.is_empty() && !pod.is_empty() => {
            Some(((*namespace).to_owned(), (*pod).to_owned()))
        }
        _ => None,
    }
}

/// Ends every forward (the double is going away, and with it every connection through it).
pub(super) fn abort_all(inner: &Inner) {
    for task in lock(&inner.store).forwards.drain(..) {
        task.abort();
    }
}

fn pods() -> Kind {
    Kind::find("", "pods").expect("the double serves pods")
}

/// The ports of the query: `ports=N[,M…]`, possibly repeated (kube-rs sends one `ports`
/// parameter with a comma-separated list).
fn ports(query: Option<&str>) -> Result<Vec<u16>, String> {
    let mut ports = Vec::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if super::percent_decode(name) != "ports" {
            continue;
        }
        for text in super::percent_decode(value).split(',') {
            let text = text.trim();
            let port: u16 = text
                .parse()
                .map_err(|_| format!("unable to parse {text:?} as a port"))?;
            if port == 0 {
                return Err(format!("port {text:?} must be > 0"));
            }
            if ports.contains(&port) {
                return Err(format!("port {port} is requested more than once"));
            }
            ports.push(port);
        }
    }
    if ports.is_empty() {
        return Err("query parameter \"ports\" is required".to_owned());
    }
    Ok(ports)
}

fn header_has(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers.get_all(name).iter().any(|value| {
        value.to_str().is_ok_and(|v| {
            v.split(',')
                .any(|part| part.trim().eq_ignore_ascii_case(token))
        })
    })
}

/// Serves a `portforward` request of pod `namespace/name`.
pub(super) async fn handle(
    inner: Arc<Inner>,
    mut request: Request,
    namespace: String,
    name: String,
) -> Response {
    if request.method() != Method::GET && request.method() != Method::POST {
        return status(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        );
    }
    let (pod_uid, targets) = {
        let store = lock(&inner.store);
        let Some(pod) = store.objects.get(&key(pods(), &namespace, &name)) else {
            return status(404, "NotFound", &format!("pods \"{name}\" not found"));
        };
        let uid = pod["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        (uid, store.port_targets.clone())
    };
    let ports = match ports(request.uri().query()) {
        Ok(ports) => ports,
        Err(message) => return status(400, "BadRequest", &message),
    };
    let headers = request.headers();
    let key_header = headers.get(header::SEC_WEBSOCKET_KEY).cloned();
    let (true, true, Some(key_header)) = (
        header_has(headers, header::CONNECTION, "upgrade"),
        header_has(headers, header::UPGRADE, "websocket"),
        key_header,
    ) else {
        // The double speaks WebSocket only, not SPDY.
        return status(400, "BadRequest", "Upgrade request required");
    };
    let offered: Vec<String> = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|p| p.trim().to_owned()))
        .filter(|p| !p.is_empty())
        .collect();
    if !offered.iter().any(|p| p == PROTOCOL) {
        return status(
            400,
            "BadRequest",
            &format!(
                "unable to upgrade connection: requested protocol(s) {offered:?} are not supported; supported: [\"{PROTOCOL}\"]"
            ),
        );
    }
    let Some(on_upgrade) = request
        .extensions_mut()
        .remove::<hyper::upgrade::OnUpgrade>()
    else {
        return status(
            500,
            "InternalError",
            "the connection cannot be upgraded (not HTTP/1.1?)",
        );
    };
    let ports: Vec<(u16, Option<SocketAddr>)> = ports
        .into_iter()
        .map(|port| {
            let target = targets
                .get(&(namespace.clone(), name.clone(), port))
                .copied();
            (port, target)
        })
        .collect();
    let pod = PodRef {
        namespace,
        name,
        uid: pod_uid,
    };
    // Subscribed before the upgrade, so that a deletion right after it is seen.
    let events = inner.events.subscribe();
    let task = tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        let socket = WebSocketStream::from_raw_socket(
            hyper_util::rt::TokioIo::new(upgraded),
            Role::Server,
            None,
        )
        .await;
        session(socket, &pod, ports, events).await;
    });
    {
        let mut store = lock(&inner.store);
        store.forwards.retain(|t| !t.is_finished());
        store.forwards.push(task.abort_handle());
    }
    let accept = derive_accept_key(key_header.as_bytes());
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(
        header::SEC_WEBSOCKET_PROTOCOL,
        HeaderValue::from_static(PROTOCOL),
    );
    match HeaderValue::from_str(&accept) {
        Ok(value) => {
            headers.insert(header::SEC_WEBSOCKET_ACCEPT, value);
            response.into_response()
        }
        Err(_) => status(400, "BadRequest", "invalid Sec-WebSocket-Key"),
    }
}

struct PodRef {
    namespace: String,
    name: String,
    uid: String,
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut bytes = Vec::with_capacity(data.len() + 1);
    bytes.push(channel);
    bytes.extend_from_slice(data);
    Message::binary(bytes)
}

/// Connects to a port's target; why not, in the words the kubelet uses (Go's).
async fn dial(target: Option<SocketAddr>) -> Result<TcpStream, String> {
    let Some(address) = target else {
        return Err("connect: connection refused".to_owned());
    };
    match tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(address)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Err("connect: connection refused".to_owned())
        }
        Ok(Err(e)) => Err(format!("connect: {e}")),
        Err(_) => Err("i/o timeout".to_owned()),
    }
}

/// Sends what the port's connection reads as frames of its data `channel`, until it ends; then
/// says port `index` is done.
async fn pump(
    mut read: OwnedReadHalf,
    channel: u8,
    out: mpsc::Sender<Message>,
    done: mpsc::UnboundedSender<usize>,
    index: usize,
) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match read.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if out.send(frame(channel, &buf[..n])).await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = done.send(index);
}

/// One forward: the channels' port frames, a dial per port, then bytes both ways until every
/// port is done, the client closes, or the pod is deleted.
async fn session<S>(
    socket: WebSocketStream<S>,
    pod: &PodRef,
    ports: Vec<(u16, Option<SocketAddr>)>,
    mut events: tokio::sync::broadcast::Receiver<super::WatchEvent>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sink, mut incoming) = socket.split();
    // Everything sent goes through one queue, in order, to the writer task.
    let (out, mut queue) = mpsc::channel::<Message>(64);
    let writer = tokio::spawn(async move {
        while let Some(message) = queue.recv().await {
            let close = matches!(message, Message::Close(_));
            if sink.send(message).await.is_err() || close {
                break;
            }
        }
        let _ = sink.close().await;
    });
    for (index, (port, _)) in ports.iter().enumerate() {
        let channel = (2 * index) as u8;
        let bytes = port.to_le_bytes();
        let _ = out.send(frame(channel, &bytes)).await;
        let _ = out.send(frame(channel + 1, &bytes)).await;
    }
    // Dial every port; a port that cannot be reached says so on its error channel.
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<usize>();
    let mut writers: Vec<Option<OwnedWriteHalf>> = Vec::new();
    let mut readers = Vec::new();
    for (index, (port, target)) in ports.iter().enumerate() {
        let channel = (2 * index) as u8;
        match dial(*target).await {
            Ok(stream) => {
                let (read, write) = stream.into_split();
                writers.push(Some(write));
                readers.push(tokio::spawn(pump(
                    read,
                    channel,
                    out.clone(),
                    done_tx.clone(),
                    index,
                )));
            }
            Err(reason) => {
                writers.push(None);
                // The kubelet's message.
                let message = format!(
                    "error forwarding port {port} to pod {}/{}, uid {}: failed to connect to localhost:{port} inside namespace: dial tcp4 127.0.0.1:{port}: {reason}",
                    pod.namespace, pod.name, pod.uid
                );
                let _ = out.send(frame(channel + 1, message.as_bytes())).await;
            }
        }
    }
    drop(done_tx);
    let mut active = readers.len();
    while active > 0 {
        tokio::select! {
            message = incoming.next() => match message {
                Some(Ok(Message::Binary(data))) if !data.is_empty() => {
                    let channel = usize::from(data[0]);
                    // Data for a port's data channel; anything sent on an error channel, or on
                    // a channel of no port, is ignored.
                    if channel % 2 == 0
                        && let Some(Some(writer)) = writers.get_mut(channel / 2)
                        && writer.write_all(&data[1..]).await.is_err()
                    {
                        writers[channel / 2] = None;
                    }
                }
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                Some(Ok(_)) => {}
            },
            done = done_rx.recv() => match done {
                Some(index) => {
                    active -= 1;
                    if let Some(slot) = writers.get_mut(index) {
                        *slot = None;
                    }
                }
                None => break,
            },
            event = events.recv() => match event {
                Ok(event)
                    if event.event_type == "DELETED"
                        && event.group.is_empty()
                        && event.kind == "pods"
                        && event.namespace == pod.namespace
                        && event.object["metadata"]["name"].as_str() == Some(pod.name.as_str()) =>
                {
                    break;
                }
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            },
        }
    }
    for writer in writers.iter_mut().filter_map(Option::take) {
        let mut writer = writer;
        let _ = writer.shutdown().await;
    }
    for reader in &readers {
        reader.abort();
    }
    let _ = out.send(Message::Close(None)).await;
    drop(out);
    let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_only_the_portforward_subresource() {
        assert_eq!(
            route("/api/v1/namespaces/ns/pods/p/portforward"),
            Some(("ns".to_owned(), "p".to_owned()))
        );
        assert_eq!(route("/api/v1/namespaces/ns/pods/p"), None);
        assert_eq!(route("/api/v1/namespaces/ns/pods/p/exec"), None);
        assert_eq!(route("/api/v1/namespaces//pods/p/portforward"), None);
    }

    #[test]
    fn ports_of_the_query() {
        assert_eq!(ports(Some("&ports=80%2C1234")).unwrap(), [80, 1234]);
        assert_eq!(ports(Some("ports=80&ports=81")).unwrap(), [80, 81]);
        assert!(ports(Some("ports=0")).unwrap_err().contains("must be > 0"));
        assert!(ports(Some("ports=x")).unwrap_err().contains("\"x\""));
        assert!(ports(Some("ports=80,80")).is_err());
        assert!(ports(None).unwrap_err().contains("\"ports\" is required"));
    }
}
