//! The cluster as every command reaches it: the kube client chosen as kubectl chooses it
//! (`--kubeconfig`, else `KUBECONFIG` or `~/.kube/config`, else the in-cluster service
//! account; `--context` or the current one), every API request bounded by
//! `--request-timeout` ([`Cluster::timed`]), and the raw JSON reads the commands need (objects
//! keep the API server's key order, which the diff relies on). The agent pods and
//! port-forwarding to their admin API are in [`pods`] and [`forward`].

pub(crate) mod forward;
pub(crate) mod pods;

use std::fmt;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use drift_api::paging::Pages;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::params::{GetParams, PostParams};
use kube::core::request::Request;
use kube::{Client, Config};
use serde_json::Value;

use crate::plan::Kube;

/// The field manager of the plugin's writes (a bypass, the update of `--server-dry-run`): the
/// audit and `bypass --list` name it as who set a bypass.
pub(crate) const FIELD_MANAGER: &str = "kubectl-drift";

/// A connected cluster.
#[derive(Clone)]
pub(crate) struct Cluster {
    pub client: Client,
    /// The kubeconfig context's namespace, else `default` (in a pod: the pod's).
    pub default_namespace: String,
    /// The API server's URL, for messages.
    pub server: String,
    /// The limit of one request; `None` for none.
    pub timeout: Option<Duration>,
}

/// A request that failed: the API server's answer or the transport's error, or no answer in
/// time.
#[derive(Debug)]
pub(crate) enum RequestError {
    Kube(kube::Error),
    Timeout(Duration),
}

impl RequestError {
    /// The HTTP status of an API server's error answer.
    pub(crate) fn code(&self) -> Option<u16> {
        match self {
            RequestError::Kube(kube::Error::Api(status)) => Some(status.code),
            _ => None,
        }
    }
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::Kube(e) => f.write_str(&describe(e)),
            RequestError::Timeout(limit) => write!(
                f,
                "no answer within {} (see --request-timeout)",
                humantime::format_duration(*limit)
            ),
        }
    }
}

impl std::error::Error for RequestError {}

impl From<kube::Error> for RequestError {
    fn from(error: kube::Error) -> Self {
        RequestError::Kube(error)
    }
}

/// One line for a failed request: the API server's Status message, or the transport's
/// innermost error.
pub(crate) fn describe(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if !status.message.is_empty() => {
            format!("{} ({})", status.message, status.code)
        }
        other => crate::http::innermost(other),
    }
}

/// The cluster of `--kubeconfig` and `--context`, as kubectl would choose it. `offline_hint`
/// ends the message when no cluster is configured (what to do instead, e.g. ", or work offline
/// with --rules PATH").
pub(crate) async fn connect(kube: &Kube, offline_hint: &str) -> anyhow::Result<Cluster> {
    let context = kube.context.as_deref();
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..KubeConfigOptions::default()
    };
    let with_context = |what: String| match context {
        Some(context) => format!("{what} (context {context:?})"),
        None => what,
    };
    let mut config = match &kube.kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(file, &options)
                .await
                .with_context(|| with_context(format!("invalid kubeconfig {}", path.display())))?
        }
        None if context.is_some() => Config::from_kubeconfig(&options)
            .await
            .with_context(|| with_context("cannot load the kubeconfig".to_owned()))?,
        None => Config::infer().await.map_err(|e| {
            // The kubeconfig's failure is the one a person can act on.
            let kubeconfig = std::error::Error::source(&e)
                .map_or_else(|| e.to_string(), ToString::to_string);
            anyhow!(
                "no cluster configured: no usable kubeconfig ({kubeconfig}) and not in a pod; pass --kubeconfig or set KUBECONFIG{offline_hint}"
            )
        })?,
    };
    if kube.timeout.is_some() {
        config.connect_timeout = kube.timeout;
    }
    let server = config
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_owned();
    let default_namespace = config.default_namespace.clone();
    let client = Client::try_from(config).context("cannot build the Kubernetes client")?;
    Ok(Cluster {
        client,
        default_namespace,
        server,
        timeout: kube.timeout,
    })
}

/// The URL path of a collection: `/api/v1[/namespaces/NS]/PLURAL` or
/// `/apis/GROUP/VERSION[/namespaces/NS]/PLURAL`.
pub(crate) fn collection_path(
    group: &str,
    version: &str,
    namespace: Option<&str>,
    plural: &str,
) -> String {
    let base = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    match namespace {
        Some(namespace) => format!("{base}/namespaces/{namespace}/{plural}"),
        None => format!("{base}/{plural}"),
    }
}

impl Cluster {
    /// Runs one API request within `--request-timeout`.
    pub(crate) async fn timed<T, E: Into<RequestError>>(
        &self,
        request: impl Future<Output = Result<T, E>>,
    ) -> Result<T, RequestError> {
        match self.timeout {
            None => request.await.map_err(Into::into),
            Some(limit) => match tokio::time::timeout(limit, request).await {
                Ok(result) => result.map_err(Into::into),
                Err(_) => Err(RequestError::Timeout(limit)),
            },
        }
    }

    /// An object as the API server returns it; `None` when it does not exist.
    pub(crate) async fn get(
        &self,
        collection: &str,
        name: &str,
    ) -> Result<Option<Value>, RequestError> {
        let request = Request::new(collection)
            .get(name, &GetParams::default())
            .map_err(kube::Error::BuildRequest)?;
        match self.timed(self.client.request_text(request)).await {
            Ok(text) => Ok(Some(
                serde_json::from_str(&text).map_err(kube::Error::SerdeError)?,
            )),
            Err(e) if e.code() == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every item of a collection, page by page. With `metadata_only`, the items are
    /// `PartialObjectMetadata` (no data is transferred).
    pub(crate) async fn list(
        &self,
        collection: &str,
        metadata_only: bool,
    ) -> Result<Vec<Value>, RequestError> {
        let mut items = Vec::new();
        let mut pages = Pages::new(500);
        while let Some(params) = pages.next_params() {
            let request = Request::new(collection);
            let request = if metadata_only {
                request.list_metadata(&params)
            } else {
                request.list(&params)
            }
            .map_err(kube::Error::BuildRequest)?;
            let text = self.timed(self.client.request_text(request)).await?;
            let mut page: Value = serde_json::from_str(&text).map_err(kube::Error::SerdeError)?;
            if let Some(Value::Array(page_items)) = page.get_mut("items").map(Value::take) {
                items.extend(page_items);
            }
            pages.answered(page.pointer("/metadata/continue").and_then(Value::as_str));
        }
        Ok(items)
    }

    /// The user the client authenticates as (`kubectl auth whoami`); `None` when the API server
    /// does not tell (no SelfSubjectReview API, or not allowed).
    pub(crate) async fn whoami(&self) -> Option<String> {
        let body = serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "SelfSubjectReview",
        });
        let request = Request::new("/apis/authentication.k8s.io/v1/selfsubjectreviews")
            .create(&PostParams::default(), serde_json::to_vec(&body).ok()?)
            .ok()?;
        let text = self.timed(self.client.request_text(request)).await.ok()?;
        let review: Value = serde_json::from_str(&text).ok()?;
        review
            .pointer("/status/userInfo/username")
            .and_then(Value::as_str)
            .filter(|u| !u.is_empty())
            .map(str::to_owned)
    }
}

/// The texts of an answer's `Warning` headers (`299 - "text"` → `text`), as kubectl prints them.
pub(crate) fn warnings(headers: &hyper::http::HeaderMap) -> Vec<String> {
    headers
        .get_all(hyper::http::header::WARNING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(warning_text)
        .collect()
}

/// The text of a `Warning: 299 - "text"` header.
fn warning_text(header: &str) -> String {
    let text = header
        .trim()
        .strip_prefix("299")
        .map(str::trim_start)
        .and_then(|t| t.strip_prefix('-'))
        .map(str::trim)
        .unwrap_or(header.trim());
    match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        Some(quoted) => quoted.replace("\\\"", "\"").replace("\\\\", "\\"),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warning_headers_as_kubectl_prints_them() {
        let cases = [
            (
                r#"299 - "Drift Sentinel: immutable fields changed: \"x\"""#,
                r#"Drift Sentinel: immutable fields changed: "x""#,
            ),
            (
                "299 - \"Drift Sentinel: bypass until 2026-12-04T16:00:00Z, in 4h: rule a/b\"",
                "Drift Sentinel: bypass until 2026-12-04T16:00:00Z, in 4h: rule a/b",
            ),
            ("299 - \"say \\\"hi\\\"\"", "say \"hi\""),
            ("plain", "plain"),
        ];
        for (header, text) in cases {
            assert_eq!(warning_text(header), text, "{header}");
        }
        let mut headers = hyper::http::HeaderMap::new();
        headers.append("warning", "299 - \"one\"".parse().unwrap());
        headers.append("warning", "299 - \"two\"".parse().unwrap());
        assert_eq!(warnings(&headers), ["one", "two"]);
    }

    #[test]
    fn collection_paths() {
        assert_eq!(
            collection_path("", "v1", Some("a"), "pods"),
            "/api/v1/namespaces/a/pods"
        );
        assert_eq!(
            collection_path("apps", "v1", None, "deployments"),
            "/apis/apps/v1/deployments"
        );
    }

    #[tokio::test]
    async fn a_request_past_the_timeout_is_an_error_naming_the_flag() {
        let config = Config::new("http://127.0.0.1:9".parse().unwrap());
        let cluster = Cluster {
            client: Client::try_from(config).unwrap(),
            default_namespace: "default".into(),
            server: "http://127.0.0.1:9".into(),
            timeout: Some(Duration::from_millis(20)),
        };
        let never = std::future::pending::<Result<(), kube::Error>>();
        let error = cluster.timed(never).await.unwrap_err().to_string();
        assert_eq!(error, "no answer within 20ms (see --request-timeout)");
    }
}
