//! Pod port-forwarding on the API server double, driven by kube-rs's own client
//! (`Api<Pod>::portforward`, WebSocket `v4.channel.k8s.io`): bytes carried to the TCP target
//! the test names, both ways, for an HTTP request and an echo; several ports on one forward;
//! an unknown pod (404 before the upgrade); a port without a target (the error channel); the
//! forward ending with the pod's deletion and with the target closing.

use std::net::SocketAddr;
use std::time::Duration;

use drift_testkit::ApiServer;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const NAMESPACE: &str = "drift-sentinel";
const LIMIT: Duration = Duration::from_secs(10);

fn client(server: &ApiServer) -> kube::Client {
    let config = kube::Config::new(server.url().parse().unwrap());
    kube::Client::try_from(config).unwrap()
}

fn pod(name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE,
            "labels": {"app.kubernetes.io/name": "drift-sentinel"}},
        "spec": {"containers": [{"name": "drift-sentinel", "image": "drift-sentinel:test"}]},
        "status": {"phase": "Running"}
    })
}

/// A one-request-per-connection HTTP server: answers `200 OK` with a body naming the request
/// line, then closes.
async fn http_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&request);
                let line = text.lines().next().unwrap_or_default().to_owned();
                let body = format!("{{\"request\":\"{line}\"}}\n");
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    address
}

/// Echoes every byte back until the client closes.
async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let (mut read, mut write) = stream.into_split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
            });
        }
    });
    address
}

async fn read_to_end(stream: &mut (impl AsyncReadExt + Unpin)) -> String {
    let mut out = Vec::new();
    tokio::time::timeout(LIMIT, stream.read_to_end(&mut out))
        .await
        .expect("the forwarded stream ends")
        .unwrap();
    String::from_utf8(out).unwrap()
}

/// Reads until the text read ends with `end`.
async fn read_until(stream: &mut (impl AsyncReadExt + Unpin), end: &str) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while !out.ends_with(end.as_bytes()) {
        let n = tokio::time::timeout(LIMIT, stream.read(&mut buf))
            .await
            .expect("the answer arrives")
            .unwrap();
        assert!(n > 0, "ended early: {}", String::from_utf8_lossy(&out));
        out.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(out).unwrap()
}

async fn read_exactly(stream: &mut (impl AsyncReadExt + Unpin), n: usize) -> String {
    let mut out = vec![0u8; n];
    tokio::time::timeout(LIMIT, stream.read_exact(&mut out))
        .await
        .expect("the echo arrives")
        .unwrap();
    String::from_utf8(out).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_request_is_carried_to_the_pods_port_and_back() {
    let server = ApiServer::start().await.unwrap();
    server.apply(pod("agent-a"));
    server.set_pod_port_target(NAMESPACE, "agent-a", 9090, http_server().await);
    let pods: Api<Pod> = Api::namespaced(client(&server), NAMESPACE);

    let mut forward = pods.portforward("agent-a", &[9090]).await.unwrap();
    let mut stream = forward.take_stream(9090).unwrap();
    let errors = forward.take_error(9090).unwrap();
    stream
        .write_all(b"GET /status HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    let answer = read_to_end(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(
        answer.ends_with("{\"request\":\"GET /status HTTP/1.1\"}\n"),
        "{answer}"
    );
    // The target closed its connection: the forward ends without an error.
    drop(stream);
    assert_eq!(tokio::time::timeout(LIMIT, errors).await.unwrap(), None);
    // (kube-rs's loop may end with "send after closing": it answers the server's close, then
    // tries to close again once its own streams are dropped.)
    let _ = tokio::time::timeout(LIMIT, forward.join())
        .await
        .expect("the forward's task ends");
    assert!(
        server.requests().iter().any(|r| r
            .starts_with("GET /api/v1/namespaces/drift-sentinel/pods/agent-a/portforward?")
            && r.contains("ports=9090")),
        "{:?}",
        server.requests()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_ports_on_one_forward_keep_their_channels() {
    let server = ApiServer::start().await.unwrap();
    server.apply(pod("agent-a"));
    server.set_pod_port_target(NAMESPACE, "agent-a", 7, echo_server().await);
    server.set_pod_port_target(NAMESPACE, "agent-a", 9090, http_server().await);
    let pods: Api<Pod> = Api::namespaced(client(&server), NAMESPACE);

    let mut forward = pods.portforward("agent-a", &[7, 9090]).await.unwrap();
    let mut echo = forward.take_stream(7).unwrap();
    let mut http = forward.take_stream(9090).unwrap();
    echo.write_all(b"ping 1").await.unwrap();
    assert_eq!(read_exactly(&mut echo, 6).await, "ping 1");
    http.write_all(b"GET /violations HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let big = "x".repeat(200_000);
    echo.write_all(big.as_bytes()).await.unwrap();
    assert_eq!(read_exactly(&mut echo, big.len()).await, big);
    // v4 has no end-of-stream for one port: the answer is complete when its body is.
    let answer = read_until(&mut http, "{\"request\":\"GET /violations HTTP/1.1\"}\n").await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    // The echo port is still open after the HTTP one ended.
    echo.write_all(b"ping 2").await.unwrap();
    assert_eq!(read_exactly(&mut echo, 6).await, "ping 2");
    assert_eq!(server.open_port_forwards(), 1);
    drop(echo);
    drop(http);
    tokio::time::timeout(LIMIT, forward.join())
        .await
        .unwrap()
        .unwrap();
    let closed = async {
        while server.open_port_forwards() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(LIMIT, closed)
        .await
        .expect("the double ends the forward when the client closes it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_pod_is_not_found() {
    let server = ApiServer::start().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&server), NAMESPACE);
    let error = match pods.portforward("nobody", &[9090]).await {
        Ok(_) => panic!("a forward to a pod that does not exist"),
        Err(error) => error,
    };
    match error {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 404, "{status:?}");
            assert_eq!(status.message, "pods \"nobody\" not found");
        }
        other => panic!("not an API error: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_without_a_listener_fails_on_the_error_channel() {
    let server = ApiServer::start().await.unwrap();
    server.apply(pod("agent-a"));
    // A target that refuses: a port that was free a moment ago.
    let refused = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    server.set_pod_port_target(NAMESPACE, "agent-a", 9091, refused);
    let pods: Api<Pod> = Api::namespaced(client(&server), NAMESPACE);
    for port in [9090, 9091] {
        let mut forward = pods.portforward("agent-a", &[port]).await.unwrap();
        let mut stream = forward.take_stream(port).unwrap();
        let error = tokio::time::timeout(LIMIT, forward.take_error(port).unwrap())
            .await
            .unwrap()
            .expect("an error message");
        assert!(
            error.starts_with(&format!(
                "error forwarding port {port} to pod drift-sentinel/agent-a, uid "
            )),
            "{error}"
        );
        assert!(error.contains("connection refused"), "{error}");
        assert_eq!(read_to_end(&mut stream).await, "");
    }
    // A target set later is used by the next forward.
    server.set_pod_port_target(NAMESPACE, "agent-a", 9091, echo_server().await);
    let mut forward = pods.portforward("agent-a", &[9091]).await.unwrap();
    let mut stream = forward.take_stream(9091).unwrap();
    stream.write_all(b"hello").await.unwrap();
    assert_eq!(read_exactly(&mut stream, 5).await, "hello");
    assert!(server.clear_pod_port_target(NAMESPACE, "agent-a", 9091));
    assert!(!server.clear_pod_port_target(NAMESPACE, "agent-a", 9091));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_pod_ends_its_forwards() {
    let server = ApiServer::start().await.unwrap();
    server.apply(pod("agent-a"));
    server.apply(pod("agent-b"));
    let echo = echo_server().await;
    server.set_pod_port_target(NAMESPACE, "agent-a", 7, echo);
    server.set_pod_port_target(NAMESPACE, "agent-b", 7, echo);
    let pods: Api<Pod> = Api::namespaced(client(&server), NAMESPACE);
    let mut a = pods.portforward("agent-a", &[7]).await.unwrap();
    let mut b = pods.portforward("agent-b", &[7]).await.unwrap();
    let mut stream_a = a.take_stream(7).unwrap();
    let mut stream_b = b.take_stream(7).unwrap();
    stream_a.write_all(b"one").await.unwrap();
    assert_eq!(read_exactly(&mut stream_a, 3).await, "one");

    assert!(server.delete("v1", "Pod", NAMESPACE, "agent-a"));
    assert_eq!(read_to_end(&mut stream_a).await, "");
    // The other pod's forward goes on.
    stream_b.write_all(b"two").await.unwrap();
    assert_eq!(read_exactly(&mut stream_b, 3).await, "two");
    // And the deleted pod is no longer found.
    assert!(matches!(
        pods.portforward("agent-a", &[7]).await,
        Err(kube::Error::Api(status)) if status.code == 404
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_selectors_filter_lists() {
    let server = ApiServer::start().await.unwrap();
    server.apply(pod("agent-a"));
    let mut other = pod("other");
    other["metadata"]["labels"] = json!({"app.kubernetes.io/name": "web", "tier": "front"});
    server.apply(other);
    let mut unlabelled = pod("bare");
    unlabelled["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("labels");
    server.apply(unlabelled);
    let pods: Api<Pod> = Api::namespaced(client(&server), NAMESPACE);
    let names = |selector: &'static str| {
        let pods = pods.clone();
        async move {
            let mut names: Vec<String> = pods
                .list(&ListParams::default().labels(selector))
                .await
                .unwrap()
                .items
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .collect();
            names.sort();
            names
        }
    };
    assert_eq!(
        names("app.kubernetes.io/name=drift-sentinel").await,
        ["agent-a"]
    );
    assert_eq!(names("app.kubernetes.io/name==web,tier").await, ["other"]);
    assert_eq!(
        names("app.kubernetes.io/name!=web").await,
        ["agent-a", "bare"]
    );
    assert_eq!(names("!tier").await, ["agent-a", "bare"]);
    assert_eq!(
        names("app.kubernetes.io/name in (web, drift-sentinel)").await,
        ["agent-a", "other"]
    );
    assert_eq!(
        names("app.kubernetes.io/name notin (web),tier notin (x)").await,
        ["agent-a", "bare"]
    );
    assert_eq!(names("").await, ["agent-a", "bare", "other"]);
    let error = pods
        .list(&ListParams::default().labels("a in b"))
        .await
        .unwrap_err();
    assert!(matches!(error, kube::Error::Api(s) if s.code == 400));
}
