//! reference §6 "Shutdown" through the real binary, over real keep-alive connections of
//! HTTP/1.1 (as kube-apiserver calls webhooks) and HTTP/2, plain and over TLS: after SIGTERM the
//! agent fails `/readyz` at once but keeps accepting and answering for `--shutdown-delay`, on
//! connections old and new, and moves every client off its connection without a failed request
//! (`Connection: close`, GOAWAY); then it stops accepting, finishes the requests in flight and
//! exits 0 within `--shutdown-timeout`.

mod support;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls_pki_types::pem::PemObject;
use serde_json::{Value, json};
use support::{Agent, IMAGE_RULE, rule_config_map};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

const DELAY: Duration = Duration::from_secs(5);
const TIMEOUT: Duration = Duration::from_secs(5);

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Where the agent listens, and how to reach it.
#[derive(Clone)]
struct Target {
    port: u16,
    /// Over TLS: the client configuration trusting the agent's CA (ALPN set per connection).
    tls: Option<rustls::ClientConfig>,
}

impl Target {
    /// A new connection, offering `alpn` over TLS (`http/1.1` or `h2`; plain HTTP/2 is
    /// prior knowledge).
    async fn connect(&self, alpn: &[u8]) -> std::io::Result<Box<dyn Io>> {
        let tcp = TcpStream::connect(("127.0.0.1", self.port)).await?;
        tcp.set_nodelay(true)?;
        let Some(config) = &self.tls else {
            return Ok(Box::new(tcp));
        };
        let mut config = config.clone();
        config.alpn_protocols = vec![alpn.to_vec()];
        let name = rustls_pki_types::ServerName::try_from("localhost").expect("a server name");
        let stream = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await?;
        assert_eq!(stream.get_ref().1.alpn_protocol(), Some(alpn));
        Ok(Box::new(stream))
    }
}

fn review(uid: &str) -> String {
    let deployment = |image: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "prod"},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "app", "image": image}]}}}})
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "namespace": "prod", "name": "web", "operation": "UPDATE", "userInfo": {"username": "alice"},
        "object": deployment("nginx:2"), "oldObject": deployment("nginx:1")}})
    .to_string()
}

/// An HTTP/1.1 response as read off the wire.
#[derive(Debug)]
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn closes(&self) -> bool {
        self.head
            .lines()
            .any(|l| l.eq_ignore_ascii_case("connection: close"))
    }

    /// The AdmissionReview answered for `uid`, allowed.
    fn allowed(&self, uid: &str) -> bool {
        let review: Value = serde_json::from_str(&self.body).unwrap_or_default();
        self.status == 200
            && review["response"]["uid"] == uid
            && review["response"]["allowed"] == true
    }
}

/// Writes an HTTP/1.1 request head for `path` (a POST of `body_length` JSON bytes, or a GET).
async fn send_head(stream: &mut Box<dyn Io>, path: &str, body_length: Option<usize>) {
    let head = match body_length {
        Some(length) => format!(
            "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
        ),
        None => format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n"),
    };
    stream
        .write_all(head.as_bytes())
        .await
        .expect("write a request head");
    stream.flush().await.expect("flush");
}

/// Reads one HTTP/1.1 response (with a Content-Length, as the agent's are).
async fn read_answer(stream: &mut Box<dyn Io>) -> Answer {
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 8192];
    let read = async {
        loop {
            if let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&bytes[..end]).into_owned();
                let length: usize = head
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse().ok())?
                    })
                    .unwrap_or_else(|| panic!("no Content-Length: {head}"));
                if bytes.len() >= end + 4 + length {
                    let status = head[9..12].parse().expect("a status code");
                    let body = String::from_utf8_lossy(&bytes[end + 4..end + 4 + length]);
                    return Answer {
                        status,
                        body: body.into_owned(),
                        head,
                    };
                }
            }
            let n = stream.read(&mut buffer).await.expect("read a response");
            assert!(
                n > 0,
                "connection closed before a whole response: {:?}",
                String::from_utf8_lossy(&bytes)
            );
            bytes.extend_from_slice(&buffer[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("a response within 10 s")
}

/// One HTTP/1.1 request on `stream` (a POST of `body`, or a GET) and its response.
async fn exchange(stream: &mut Box<dyn Io>, path: &str, body: Option<&str>) -> Answer {
    send_head(stream, path, body.map(str::len)).await;
    if let Some(body) = body {
        stream
            .write_all(body.as_bytes())
            .await
            .expect("write a body");
        stream.flush().await.expect("flush");
    }
    read_answer(stream).await
}

/// Whether the server closes `stream` within `limit` (EOF or a reset), having sent nothing.
async fn closed_within(stream: &mut Box<dyn Io>, limit: Duration) -> bool {
    let mut buffer = [0u8; 64];
    match tokio::time::timeout(limit, stream.read(&mut buffer)).await {
        Ok(Ok(0)) | Ok(Err(_)) => true,
        Ok(Ok(n)) => panic!("unexpected bytes: {:?}", &buffer[..n]),
        Err(_) => false,
    }
}

type H2Body = BoxBody<Bytes, Infallible>;

/// An HTTP/2 connection: its sender, and its driver, which ends when the connection closes.
async fn h2_connect(
    target: &Target,
) -> (
    hyper::client::conn::http2::SendRequest<H2Body>,
    tokio::task::JoinHandle<()>,
) {
    let io = target.connect(b"h2").await.expect("connect (HTTP/2)");
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
            .await
            .expect("HTTP/2 handshake");
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    (sender, driver)
}

fn h2_request(target: &Target, body: H2Body) -> hyper::Request<H2Body> {
    let scheme = if target.tls.is_some() {
        "https"
    } else {
        "http"
    };
    hyper::Request::post(format!("{scheme}://localhost:{}/validate", target.port))
        .header("content-type", "application/json")
        .body(body)
        .expect("a request")
}

/// Sends one HTTP/2 request; the answer's status and body.
async fn h2_send(
    sender: &mut hyper::client::conn::http2::SendRequest<H2Body>,
    request: hyper::Request<H2Body>,
) -> (u16, Value) {
    let send = async {
        sender.ready().await.expect("the connection takes requests");
        let response = sender.send_request(request).await.expect("HTTP/2 response");
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (status, serde_json::from_slice(&body).unwrap_or_default())
    };
    tokio::time::timeout(Duration::from_secs(10), send)
        .await
        .expect("an HTTP/2 response within 10 s")
}

fn full(text: String) -> H2Body {
    Full::new(Bytes::from(text)).boxed()
}

/// A body sent in pieces as the test pushes them into the returned sender.
fn streamed() -> (tokio::sync::mpsc::Sender<Bytes>, H2Body) {
    let (sender, receiver) = tokio::sync::mpsc::channel::<Bytes>(4);
    let frames = futures::stream::unfold(receiver, |mut receiver| async move {
        let piece = receiver.recv().await?;
        Some((Ok::<_, Infallible>(Frame::data(piece)), receiver))
    });
    (sender, StreamBody::new(frames).boxed())
}

/// The whole scenario on `agent` (started with the delay and timeout above).
async fn shutdown_scenario(mut agent: Agent, target: Target) {
    // Before SIGTERM: an HTTP/1.1 connection kept alive, one left idle, an HTTP/2 connection.
    let mut kept = target.connect(b"http/1.1").await.unwrap();
    let answer = exchange(&mut kept, "/validate", Some(&review("before"))).await;
    assert!(answer.allowed("before") && !answer.closes(), "{answer:?}");
    let mut idle = target.connect(b"http/1.1").await.unwrap();
    assert!(exchange(&mut idle, "/readyz", None).await.status == 200);
    let (mut h2, h2_driver) = h2_connect(&target).await;
    assert_eq!(
        h2_send(&mut h2, h2_request(&target, full(review("h2-before"))))
            .await
            .0,
        200
    );

    // Requests that will be in flight when the listener closes: half a body sent on each.
    let late = review("late");
    let (first_half, second_half) = late.split_at(late.len() / 2);
    let mut in_flight = target.connect(b"http/1.1").await.unwrap();
    send_head(&mut in_flight, "/validate", Some(late.len())).await;
    in_flight.write_all(first_half.as_bytes()).await.unwrap();
    in_flight.flush().await.unwrap();
    let h2_late = review("h2-late");
    let (h2_first, h2_second) = h2_late.split_at(h2_late.len() / 2);
    let (pieces, body) = streamed();
    pieces.send(Bytes::from(h2_first.to_owned())).await.unwrap();
    let h2_in_flight = {
        let mut sender = h2.clone();
        let request = h2_request(&target, body);
        tokio::spawn(async move { h2_send(&mut sender, request).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;

    agent.signal("TERM");
    let signalled = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // During the delay: not ready, but everything is answered, each HTTP/1.1 answer closing
    // its connection.
    let mut fresh = target
        .connect(b"http/1.1")
        .await
        .expect("accepting during the delay");
    let ready = exchange(&mut fresh, "/readyz", None).await;
    assert_eq!(ready.status, 503, "{ready:?}");
    assert!(ready.body.contains("shutting down"), "{ready:?}");
    assert!(ready.closes(), "{ready:?}");
    assert!(closed_within(&mut fresh, Duration::from_secs(2)).await);
    let answer = exchange(&mut kept, "/validate", Some(&review("kept"))).await;
    assert!(answer.allowed("kept") && answer.closes(), "{answer:?}");
    assert!(closed_within(&mut kept, Duration::from_secs(2)).await);
    let mut new = target
        .connect(b"http/1.1")
        .await
        .expect("accepting during the delay");
    let answer = exchange(&mut new, "/validate", Some(&review("new"))).await;
    assert!(answer.allowed("new") && answer.closes(), "{answer:?}");
    // HTTP/2: a new connection is answered, then told to go (GOAWAY: the connection ends);
    // the old one was told at once and stays only for its stream in flight.
    let (mut h2_new, h2_new_driver) = h2_connect(&target).await;
    let (status, answer) = h2_send(&mut h2_new, h2_request(&target, full(review("h2-new")))).await;
    assert_eq!(
        (status, &answer["response"]["uid"]),
        (200, &json!("h2-new"))
    );
    tokio::time::timeout(Duration::from_secs(2), h2_new_driver)
        .await
        .expect("GOAWAY ends an HTTP/2 connection after its first request during the delay")
        .unwrap();
    assert!(!h2_driver.is_finished(), "closed with a stream in flight");
    // The idle HTTP/1.1 connection is left open: closing it could cross a request.
    assert!(!closed_within(&mut idle, Duration::from_millis(200)).await);
    assert!(
        signalled.elapsed() < DELAY,
        "the checks of the delay took longer than the delay ({:?}): nothing was proven",
        signalled.elapsed()
    );

    // After the delay: no new connection; the idle one is closed; what was in flight finishes.
    tokio::time::sleep((DELAY + Duration::from_millis(500)).saturating_sub(signalled.elapsed()))
        .await;
    assert!(
        target.connect(b"http/1.1").await.is_err(),
        "still accepting after the delay"
    );
    assert!(
        closed_within(&mut idle, Duration::from_secs(2)).await,
        "idle connection kept"
    );
    in_flight.write_all(second_half.as_bytes()).await.unwrap();
    in_flight.flush().await.unwrap();
    let answer = read_answer(&mut in_flight).await;
    assert!(answer.allowed("late") && answer.closes(), "{answer:?}");
    pieces
        .send(Bytes::from(h2_second.to_owned()))
        .await
        .unwrap();
    drop(pieces);
    let (status, answer) = h2_in_flight.await.unwrap();
    assert_eq!(
        (status, &answer["response"]["uid"]),
        (200, &json!("h2-late")),
        "{answer}"
    );
    tokio::time::timeout(Duration::from_secs(2), h2_driver)
        .await
        .expect("the HTTP/2 connection ends once its stream is done")
        .unwrap();

    let status = tokio::task::spawn_blocking(move || {
        let status = agent.wait_exit(DELAY + TIMEOUT);
        (status, agent.logs())
    })
    .await
    .unwrap();
    let (status, logs) = status;
    let status = status.unwrap_or_else(|| {
        panic!(
            "no exit within the delay and the timeout:\n{}",
            logs.join("\n")
        )
    });
    assert!(status.success(), "{status:?}");
    assert!(
        signalled.elapsed() < DELAY + TIMEOUT,
        "exited {:?} after SIGTERM",
        signalled.elapsed()
    );
    for message in ["shutting down", "shutdown delay over", "stopped"] {
        assert!(
            logs.iter().any(|l| l.contains(message)),
            "no {message:?} in the logs:\n{}",
            logs.join("\n")
        );
    }
}

fn agent_args(dir: &std::path::Path) -> Vec<String> {
    let rules = dir.join("rules.yaml");
    std::fs::write(&rules, rule_config_map("ops", "images", IMAGE_RULE)).unwrap();
    let seconds = |d: Duration| format!("{}s", d.as_secs());
    vec![
        "--rules".into(),
        rules.display().to_string(),
        "--shutdown-delay".into(),
        seconds(DELAY),
        "--shutdown-timeout".into(),
        seconds(TIMEOUT),
    ]
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

#[test]
fn plain_http_keeps_answering_through_the_delay_and_loses_no_request() {
    let dir = tempfile::tempdir().unwrap();
    let args = agent_args(dir.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let agent = Agent::start(&args, false);
    let target = Target {
        port: agent.port,
        tls: None,
    };
    runtime().block_on(shutdown_scenario(agent, target));
}

#[test]
fn https_keeps_answering_through_the_delay_and_loses_no_request() {
    let dir = tempfile::tempdir().unwrap();
    let ca = drift_testkit::pki::Ca::new("shutdown-test-ca");
    let args = agent_args(dir.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let agent = support::https_agent(dir.path(), &ca, &args);
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(ca.cert_pem().as_bytes()) {
        roots.add(cert.expect("the CA")).expect("a root");
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let target = Target {
        port: agent.port,
        tls: Some(tls),
    };
    runtime().block_on(shutdown_scenario(agent, target));
}

/// SIGTERM is caught before the listener opens: a signal as soon as the port accepts (as when a
/// pod is deleted right after it starts) is a graceful stop, not the default action's kill.
#[test]
fn a_sigterm_as_soon_as_the_port_accepts_is_a_graceful_stop() {
    for _ in 0..5 {
        let port = support::free_port();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_drift-sentinel"))
            .env_clear()
            .args(["serve", "--address", &format!("127.0.0.1:{port}")])
            .args([
                "--admin-address",
                &format!("127.0.0.1:{}", support::free_port()),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start drift-sentinel");
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "never listened"
            );
            std::thread::yield_now();
        }
        let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("a pid");
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
        let status = child.wait().expect("the agent's exit");
        assert_eq!(status.code(), Some(0), "{status:?}");
    }
}
