//! Where audited objects come from in a cluster (offline, files are read by
//! [`drift_load::files`], as `kubectl drift audit` reads them): the resources the
//! auditing rules select, resolved through discovery, listed page by page
//! (`--audit-chunk-size`) so that memory does not grow with the number of objects: each page is
//! judged and dropped before the next is fetched.

use anyhow::Context as _;
use drift_api::paging::Pages;
use drift_engine::RuleSet;
use kube::discovery::{ApiResource, Discovery, verbs};
use serde::Deserialize;
use serde_json::Value;

/// A resource to list.
#[derive(Debug, Clone)]
pub struct Listed {
    pub resource: ApiResource,
}

/// The resources the auditing rules select, resolved through discovery (the preferred version
/// of each group), that can be listed.
pub async fn resolve(
    client: &kube::Client,
    rules: &RuleSet,
    webhook_resources: &[(String, String)],
) -> anyhow::Result<Vec<Listed>> {
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .context("API discovery failed")?;
    let mut found = Vec::new();
    for group in discovery.groups() {
        for (resource, capabilities) in group.recommended_resources() {
            if !capabilities.supports_operation(verbs::LIST) {
                continue;
            }
            let webhook = webhook_resources
                .iter()
                .any(|(g, r)| *g == resource.group && *r == resource.plural);
            if drift_engine::audit::selects_kind(rules, &resource.group, &resource.kind, webhook) {
                found.push(Listed { resource });
            }
        }
    }
    Ok(found)
}

#[derive(Deserialize, Default)]
struct PageMeta {
    #[serde(rename = "continue", default)]
    continue_token: Option<String>,
}

/// Reads a list response item by item: each item is handed to `each` as soon as it is parsed and
/// dropped after, so a page never exists as a whole in parsed form (only its text does). Yields
/// the continue token.
struct PageVisitor<'f, F> {
    each: &'f mut F,
}

impl<'de, F: FnMut(Value)> serde::de::Visitor<'de> for PageVisitor<'_, F> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a Kubernetes list")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut token = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "metadata" => token = map.next_value::<PageMeta>()?.continue_token,
                "items" => map.next_value_seed(ItemsSeed {
                    each: &mut *self.each,
                })?,
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(token)
    }
}

struct ItemsSeed<'f, F> {
    each: &'f mut F,
}

impl<'de, F: FnMut(Value)> serde::de::DeserializeSeed<'de> for ItemsSeed<'_, F> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, F: FnMut(Value)> serde::de::Visitor<'de> for ItemsSeed<'_, F> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of objects")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        Ok(()) // `items: null`
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(item) = seq.next_element::<Value>()? {
            (self.each)(item);
        }
        Ok(())
    }
}

/// Body chunks in flight between the response and the parser, at most.
const CHUNKS_IN_FLIGHT: usize = 4;
/// Parsed objects waiting to be judged, at most.
const ITEMS_IN_FLIGHT: usize = 16;

/// A `Read` over the body chunks a task receives from the response: the parser (on a blocking
/// thread) reads the page as it arrives, so a page is never held whole — memory stays at a few
/// chunks and objects whatever `--audit-chunk-size` and the objects' size.
struct ChunkReader {
    chunks: tokio::sync::mpsc::Receiver<Result<bytes::Bytes, String>>,
    current: bytes::Bytes,
}

impl std::io::Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.chunks.blocking_recv() {
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(e)) => return Err(std::io::Error::other(e)),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        bytes::Buf::advance(&mut self.current, n);
        Ok(n)
    }
}

/// Sends one list request and streams its items to `each` as they are parsed; the continue
/// token. An error of `each` stops the page (what was parsed is dropped).
async fn stream_page<E>(
    client: &kube::Client,
    request: axum::http::Request<kube::client::Body>,
    mut each: impl FnMut(Value) -> Result<(), E>,
) -> anyhow::Result<Result<Option<String>, E>> {
    use http_body_util::BodyExt as _;
    let response = client.send(request).await?;
    let status = response.status();
    let mut body = response.into_body();
    if !status.is_success() {
        let body = body.collect().await?.to_bytes();
        let text = String::from_utf8_lossy(&body[..body.len().min(1024)]).into_owned();
        anyhow::bail!("{status}: {text}");
    }
    let (chunk_tx, chunks) = tokio::sync::mpsc::channel(CHUNKS_IN_FLIGHT);
    let (item_tx, mut items) = tokio::sync::mpsc::channel::<Value>(ITEMS_IN_FLIGHT);
    let pump = tokio::spawn(async move {
        while let Some(frame) = body.frame().await {
            let chunk = match frame {
                Ok(frame) => match frame.into_data() {
                    Ok(data) => Ok(data),
                    Err(_) => continue, // trailers
                },
                Err(e) => Err(e.to_string()),
            };
            let failed = chunk.is_err();
            if chunk_tx.send(chunk).await.is_err() || failed {
                return;
            }
        }
    });
    let parser = tokio::task::spawn_blocking(move || {
        use serde::Deserializer as _;
        let reader = std::io::BufReader::with_capacity(
            64 * 1024,
            ChunkReader {
                chunks,
                current: bytes::Bytes::new(),
            },
        );
        let mut deserializer = serde_json::Deserializer::from_reader(reader);
        let mut send = |item: Value| {
            // The receiver is gone only when the run stopped: the rest is skipped.
            let _ = item_tx.blocking_send(item);
        };
        let token = (&mut deserializer).deserialize_map(PageVisitor { each: &mut send })?;
        deserializer.end()?;
        Ok::<_, serde_json::Error>(token)
    });
    let mut failed = None;
    while let Some(item) = items.recv().await {
        if let Err(e) = each(item) {
            failed = Some(e);
            break;
        }
    }
    drop(items);
    if let Some(e) = failed {
        pump.abort();
        return Ok(Err(e));
    }
    let token = parser.await.context("the list parser stopped")??;
    let _ = pump.await;
    Ok(Ok(token))
}

/// Parses one page held whole, calling `each` per item; the continue token.
#[cfg(test)]
fn read_page(
    text: &[u8],
    each: &mut impl FnMut(Value),
) -> Result<Option<String>, serde_json::Error> {
    use serde::Deserializer as _;
    let mut deserializer = serde_json::Deserializer::from_slice(text);
    let token = (&mut deserializer).deserialize_map(PageVisitor { each })?;
    deserializer.end()?;
    Ok(token)
}

fn collection_path(resource: &ApiResource) -> String {
    if resource.group.is_empty() {
        format!("/api/{}/{}", resource.version, resource.plural)
    } else {
        format!(
            "/apis/{}/{}/{}",
            resource.group, resource.version, resource.plural
        )
    }
}

/// Lists every object of `listed` across namespaces, `chunk` at a time, calling `each` with
/// every object (its `apiVersion` and `kind` filled in: list items carry none). Stops at the
/// first error `each` returns.
pub async fn list<E>(
    client: &kube::Client,
    listed: &Listed,
    chunk: u32,
    mut each: impl FnMut(&Listed, Value) -> Result<(), E>,
) -> anyhow::Result<Result<(), E>> {
    let path = collection_path(&listed.resource);
    let mut pages = Pages::new(chunk);
    while let Some(params) = pages.next_params() {
        let request = kube::core::Request::new(&path)
            .list(&params)
            .context("cannot build a list request")?;
        let page = stream_page(client, request.map(kube::client::Body::from), |mut item| {
            if let Some(map) = item.as_object_mut() {
                map.insert(
                    "apiVersion".into(),
                    Value::String(listed.resource.api_version.clone()),
                );
                map.insert("kind".into(), Value::String(listed.resource.kind.clone()));
            }
            each(listed, item)
        })
        .await
        .with_context(|| format!("cannot list {}", listed.resource.plural))?;
        match page {
            Ok(next) => pages.answered(next.as_deref()),
            Err(e) => return Ok(Err(e)),
        }
    }
    Ok(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_read_item_by_item() {
        let text = r#"{"kind":"DeploymentList","apiVersion":"apps/v1","metadata":{"resourceVersion":"9","continue":"abc"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}"#;
        let mut names = Vec::new();
        let token = read_page(text.as_bytes(), &mut |item: Value| {
            names.push(item["metadata"]["name"].as_str().unwrap().to_owned())
        })
        .unwrap();
        assert_eq!(token.as_deref(), Some("abc"));
        assert_eq!(names, ["a", "b"]);
        let token = read_page(br#"{"items":null,"metadata":{}}"#, &mut |_| panic!()).unwrap();
        assert_eq!(token, None);
        assert!(read_page(br#"{"items":[{"a":1},"#, &mut |_| {}).is_err());
    }
}
