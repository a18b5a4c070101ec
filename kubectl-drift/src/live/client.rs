//! The kube client of the cluster commands, chosen like kubectl chooses: `--kubeconfig`, else
//! `KUBECONFIG` or `~/.kube/config` (else the in-cluster service account), the `--context`
//! given or the current one; and the raw JSON reads the commands need (objects keep the API
//! server's key order, which the diff relies on).

use anyhow::anyhow;
use kube::core::params::{GetParams, ListParams, PostParams};
use kube::core::request::Request;
use serde_json::Value;

use crate::cli::Common;

pub use crate::cluster::Cluster;

/// The cluster of `--kubeconfig`/`--context` (see [`crate::cluster::connect`]).
pub async fn connect(common: &Common) -> anyhow::Result<Cluster> {
    crate::cluster::connect(
        common.kubeconfig.as_deref(),
        common.context.as_deref(),
        ", or work offline with --rules PATH",
    )
    .await
}

/// Why a request failed, in one line: the API server's Status, or the transport's error.
pub fn describe(error: kube::Error) -> anyhow::Error {
    match error {
        kube::Error::Api(status) => {
            let reason = if status.reason.is_empty() {
                String::new()
            } else {
                format!(" {}", status.reason)
            };
            anyhow!("{} ({}{reason})", status.message, status.code)
        }
        other => {
            // The transport's error chain in one line, without the repeats hyper's layers add.
            let mut parts: Vec<String> = vec![other.to_string()];
            let mut source = std::error::Error::source(&other);
            while let Some(error) = source {
                let text = error.to_string();
                if !parts.last().is_some_and(|last| last.ends_with(&text)) {
                    parts.push(text);
                }
                source = error.source();
            }
            anyhow!("{}", parts.join(": "))
        }
    }
}

/// The URL path of a collection: `/api/v1[/namespaces/NS]/PLURAL` or
/// `/apis/GROUP/VERSION[/namespaces/NS]/PLURAL`.
pub fn collection_path(
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
    /// An object as the API server returns it; `None` when it does not exist.
    pub async fn get(&self, collection: &str, name: &str) -> Result<Option<Value>, kube::Error> {
        let request = Request::new(collection)
            .get(name, &GetParams::default())
            .map_err(kube::Error::BuildRequest)?;
        match self.client.request_text(request).await {
            Ok(text) => Ok(Some(
                serde_json::from_str(&text).map_err(kube::Error::SerdeError)?,
            )),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every item of a collection, page by page. With `metadata_only`, the items are
    /// `PartialObjectMetadata` (no data is transferred).
    pub async fn list(
        &self,
        collection: &str,
        metadata_only: bool,
    ) -> Result<Vec<Value>, kube::Error> {
        let mut items = Vec::new();
        let mut continue_token: Option<String> = None;
        loop {
            let mut params = ListParams::default().limit(500);
            if let Some(token) = &continue_token {
                params = params.continue_token(token);
            }
            let request = Request::new(collection);
            let request = if metadata_only {
                request.list_metadata(&params)
            } else {
                request.list(&params)
            }
            .map_err(kube::Error::BuildRequest)?;
            let text = self.client.request_text(request).await?;
            let mut page: Value = serde_json::from_str(&text).map_err(kube::Error::SerdeError)?;
            if let Some(Value::Array(page_items)) = page.get_mut("items").map(Value::take) {
                items.extend(page_items);
            }
            continue_token = page
                .pointer("/metadata/continue")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
                .map(str::to_owned);
            if continue_token.is_none() {
                return Ok(items);
            }
        }
    }

    /// The user the client authenticates as (`kubectl auth whoami`); `None` when the API server
    /// does not tell (no SelfSubjectReview API, or not allowed).
    pub async fn whoami(&self) -> Option<String> {
        let body = serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "SelfSubjectReview",
        });
        let request = Request::new("/apis/authentication.k8s.io/v1/selfsubjectreviews")
            .create(&PostParams::default(), serde_json::to_vec(&body).ok()?)
            .ok()?;
        let text = self.client.request_text(request).await.ok()?;
        let review: Value = serde_json::from_str(&text).ok()?;
        review
            .pointer("/status/userInfo/username")
            .and_then(Value::as_str)
            .filter(|u| !u.is_empty())
            .map(str::to_owned)
    }
}
