//! Port-forwarding to an agent pod's admin port through the API server, as `kubectl
//! port-forward` does (`pods/NAME/portforward`, the WebSocket protocol `v4.channel.k8s.io`
//! that kube-rs speaks), and the admin API's HTTP over the forwarded stream
//! ([`crate::http`]).

use std::fmt;
use std::pin::Pin;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::Portforwarder;
use tokio::io::DuplexStream;

use super::Cluster;

/// The most `status` reads of an admin answer.
const MAX_ADMIN_BODY: usize = 4 * 1024 * 1024;

/// A forward that could not be made or that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ForwardError {
    /// The API server refused the forward (the pod does not exist: 404, …) or could not be
    /// reached.
    Api(String),
    /// The forward was made but the port could not be reached (the error channel's message).
    Port(String),
    /// The admin API answered something that is not HTTP, or not in time.
    Http(String),
}

impl fmt::Display for ForwardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ForwardError::Api(text) | ForwardError::Port(text) | ForwardError::Http(text) => {
                f.write_str(text)
            }
        }
    }
}

/// Ends the forward when dropped.
pub(crate) struct ForwardGuard(Portforwarder);

impl Drop for ForwardGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What the error channel of the forwarded port says when the port fails; `None` when it
/// closes without a message. Safe to poll again once resolved (it then never resolves again).
pub(crate) type PortFailure = Pin<Box<dyn Future<Output = Option<String>> + Send>>;

/// A forward of one port of one pod.
pub(crate) struct Forward {
    /// The bytes to and from the pod's port.
    pub stream: DuplexStream,
    pub failed: PortFailure,
    pub guard: ForwardGuard,
}

/// Opens a forward to `port` of pod `namespace/pod`.
pub(crate) async fn open(
    cluster: &Cluster,
    namespace: &str,
    pod: &str,
    port: u16,
) -> Result<Forward, ForwardError> {
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), namespace);
    let mut forwarder = cluster
        .timed(pods.portforward(pod, &[port]))
        .await
        .map_err(|e| ForwardError::Api(e.to_string()))?;
    let (Some(stream), Some(failed)) = (forwarder.take_stream(port), forwarder.take_error(port))
    else {
        forwarder.abort();
        return Err(ForwardError::Api("the forward has no stream".to_owned()));
    };
    Ok(Forward {
        stream,
        // Fused: it is asked again after it resolved (a select that went on, a second look).
        failed: Box::pin(futures::FutureExt::fuse(failed)),
        guard: ForwardGuard(forwarder),
    })
}

/// `GET path` of the admin API on `port` of pod `namespace/pod`, through a forward of its own,
/// within the request timeout. Returns the HTTP status and the body.
pub(crate) async fn admin_get(
    cluster: &Cluster,
    namespace: &str,
    pod: &str,
    port: u16,
    path: &str,
) -> Result<(u16, Vec<u8>), ForwardError> {
    let Forward {
        stream,
        mut failed,
        guard,
    } = open(cluster, namespace, pod, port).await?;
    if let Some(message) = unreachable_port(&mut failed).await {
        return Err(ForwardError::Port(message));
    }
    let authority = format!("localhost:{port}");
    let exchange = async {
        let response = crate::http::get(stream, &authority, path).await?;
        let status = response.status;
        Ok::<_, crate::http::HttpError>((status, response.bytes(MAX_ADMIN_BODY).await?))
    };
    let answer = tokio::select! {
        answer = cluster.timed(async { Ok::<_, kube::Error>(exchange.await) }) => answer,
        Some(message) = &mut failed => return Err(ForwardError::Port(message)),
    };
    let result = match answer {
        Ok(Ok(answer)) => Ok(answer),
        // A port that cannot be reached closes the stream before its error message arrives:
        // that message is the one worth showing.
        Ok(Err(e)) => Err(match port_message(&mut failed).await {
            Some(message) => ForwardError::Port(message),
            None => ForwardError::Http(format!("the admin API's answer: {e}")),
        }),
        Err(timeout) => Err(ForwardError::Http(format!("the admin API: {timeout}"))),
    };
    drop(guard);
    result
}

/// How long a new forward is given to say that its port cannot be reached before a request is
/// sent: the kubelet says so at once, then closes; a request racing that close loses the
/// message (kube's forwarder drops the error channel when it cannot send the request).
const SETTLE: std::time::Duration = std::time::Duration::from_millis(100);

/// The error message of a new forward whose port cannot be reached, if it comes at once.
pub(crate) async fn unreachable_port(failed: &mut PortFailure) -> Option<String> {
    tokio::time::timeout(SETTLE, failed).await.ok().flatten()
}

/// The error message of a forwarded port that just failed, if it comes within a moment.
pub(crate) async fn port_message(failed: &mut PortFailure) -> Option<String> {
    tokio::time::timeout(std::time::Duration::from_millis(500), failed)
        .await
        .ok()
        .flatten()
}
