//! The plugin's one HTTP client, for the agents' admin APIs (`/status`, `/violations`): HTTP/1.1
//! by hyper's client connection over whatever byte stream leads to the agent — a TCP
//! connection for `tail --url`, or the stream of a pod port-forward (`status`, `tail` in
//! cluster mode). hyper reads the answer (content length, chunks, close-delimited) and refuses
//! a malformed one with an error.

use std::fmt;

use anyhow::bail;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Incoming;
use hyper::header::{ACCEPT, HOST, USER_AGENT};
use hyper::{Request, Uri};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

/// The admin API of one agent reached directly (`tail --url`): `http://host:port[/prefix]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AdminUrl {
    host: String,
    port: u16,
    /// The path before `/violations`, without a trailing `/` (usually empty).
    prefix: String,
}

impl AdminUrl {
    /// `--url`: `http://host[:port][/prefix]`; a trailing `/violations` and any query are
    /// taken off.
    pub(crate) fn parse(text: &str) -> anyhow::Result<Self> {
        let example = "like http://127.0.0.1:9090";
        let uri: Uri = match text.parse() {
            Ok(uri) => uri,
            Err(_) => bail!("--url {text:?} is not an http:// URL {example}"),
        };
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => bail!(
                "--url {text:?}: the admin API serves plain HTTP on the agent's loopback; reach it through kubectl port-forward and use http://"
            ),
            _ => bail!("--url {text:?} is not an http:// URL {example}"),
        }
        let Some(host) = uri.host().filter(|h| !h.is_empty()) else {
            bail!("--url {text:?} is not an http:// URL {example}");
        };
        let path = uri.path().trim_end_matches('/');
        let prefix = path.strip_suffix("/violations").unwrap_or(path).to_owned();
        Ok(AdminUrl {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port: uri.port_u16().unwrap_or(80),
            prefix,
        })
    }

    /// `host:port`, as the `Host` header names it.
    pub(crate) fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The request target of `path` (`/violations`) with `query`.
    pub(crate) fn target(&self, path: &str, query: &str) -> String {
        target(&self.prefix, path, query)
    }

    /// A connection to it.
    pub(crate) async fn connect(&self) -> std::io::Result<tokio::net::TcpStream> {
        let stream = tokio::net::TcpStream::connect((self.host.as_str(), self.port)).await?;
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }
}

impl fmt::Display for AdminUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}{}", self.authority(), self.prefix)
    }
}

/// `prefix` + `path` + `?query` (no `?` for an empty query).
pub(crate) fn target(prefix: &str, path: &str, query: &str) -> String {
    if query.is_empty() {
        format!("{prefix}{path}")
    } else {
        format!("{prefix}{path}?{query}")
    }
}

/// The innermost cause of an error, which is the one worth showing ("Connection refused (os
/// error 111)" rather than "error sending request").
pub(crate) fn innermost(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// A request that failed: the connection, or an answer that is not HTTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HttpError(pub String);

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HttpError {}

impl From<hyper::Error> for HttpError {
    fn from(error: hyper::Error) -> Self {
        // hyper's outer text says what it was doing, the inner one what went wrong.
        let inner = innermost(&error);
        let outer = error.to_string();
        HttpError(if inner == outer {
            outer
        } else {
            format!("{outer}: {inner}")
        })
    }
}

/// An answer whose body is still to be read.
pub(crate) struct Response {
    pub status: u16,
    body: Incoming,
}

impl Response {
    /// The whole body, refused past `limit` bytes.
    pub(crate) async fn bytes(self, limit: usize) -> Result<Vec<u8>, HttpError> {
        match Limited::new(self.body, limit).collect().await {
            Ok(collected) => Ok(collected.to_bytes().to_vec()),
            Err(e) => match e.downcast::<hyper::Error>() {
                Ok(e) => Err(HttpError::from(*e)),
                Err(e) => Err(HttpError(format!("the answer is too large: {e}"))),
            },
        }
    }

    /// The next piece of the body; `None` at its end.
    pub(crate) async fn chunk(&mut self) -> Option<Result<Bytes, HttpError>> {
        loop {
            match self.body.frame().await? {
                Ok(frame) => match frame.into_data() {
                    Ok(data) => return Some(Ok(data)),
                    // Trailers: nothing to show.
                    Err(_) => continue,
                },
                Err(e) => return Some(Err(HttpError::from(e))),
            }
        }
    }
}

/// `GET target` (with `Host: authority`) over `io`, up to the answer's head. The connection
/// is driven by a task of its own until the body is read or dropped.
pub(crate) async fn get<IO>(io: IO, authority: &str, target: &str) -> Result<Response, HttpError>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(io)).await?;
    tokio::spawn(async move {
        // Its errors reach the request or the body that is read.
        let _ = connection.await;
    });
    let request = Request::get(target)
        .header(HOST, authority)
        .header(
            USER_AGENT,
            concat!("kubectl-drift/", env!("CARGO_PKG_VERSION")),
        )
        .header(ACCEPT, "application/json, application/x-ndjson")
        .body(Empty::new())
        .map_err(|e| HttpError(format!("cannot build the request for {target:?}: {e}")))?;
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    Ok(Response {
        status,
        body: response.into_body(),
    })
}

/// One line of a newline-delimited body.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// A complete line, without its `\n` (and a `\r` before it).
    Text(String),
    /// A line over the limit, dropped.
    TooLong,
}

/// Splits a body read piece by piece into lines, holding at most `max` bytes of one line; an
/// unterminated last piece (a connection cut mid-record) is never returned.
#[derive(Debug)]
pub(crate) struct LineSplitter {
    buf: Vec<u8>,
    too_long: bool,
    max: usize,
}

impl LineSplitter {
    pub(crate) fn new(max: usize) -> Self {
        LineSplitter {
            buf: Vec::new(),
            too_long: false,
            max,
        }
    }

    /// The lines that `chunk` completes.
    pub(crate) fn push(&mut self, mut chunk: &[u8]) -> Vec<Line> {
        let mut lines = Vec::new();
        while !chunk.is_empty() {
            let (piece, end) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (&chunk[..i], Some(i + 1)),
                None => (chunk, None),
            };
            if !self.too_long {
                if self.buf.len() + piece.len() > self.max {
                    self.too_long = true;
                    self.buf.clear();
                } else {
                    self.buf.extend_from_slice(piece);
                }
            }
            let Some(end) = end else { break };
            chunk = &chunk[end..];
            if std::mem::take(&mut self.too_long) {
                lines.push(Line::TooLong);
            } else {
                let text = String::from_utf8_lossy(&self.buf);
                lines.push(Line::Text(text.trim_end_matches('\r').to_owned()));
            }
            self.buf.clear();
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn admin_urls() {
        let url = AdminUrl::parse("http://127.0.0.1:9090").unwrap();
        assert_eq!(url.to_string(), "http://127.0.0.1:9090");
        assert_eq!(url.target("/violations", ""), "/violations");
        let url = AdminUrl::parse("http://127.0.0.1:9090/violations?follow=true").unwrap();
        assert_eq!(url.to_string(), "http://127.0.0.1:9090");
        let url = AdminUrl::parse("http://h/prefix/").unwrap();
        assert_eq!(url.to_string(), "http://h:80/prefix");
        assert_eq!(url.target("/violations", "a=b"), "/prefix/violations?a=b");
        let url = AdminUrl::parse("http://[::1]:9090").unwrap();
        assert_eq!(url.authority(), "[::1]:9090");
        for bad in [
            "127.0.0.1:9090",
            "ftp://h",
            "localhost:9090",
            "http://",
            "not a url",
        ] {
            let error = AdminUrl::parse(bad).unwrap_err().to_string();
            assert!(error.contains("is not an http:// URL"), "{bad}: {error}");
        }
        let error = AdminUrl::parse("https://h").unwrap_err().to_string();
        assert!(error.contains("plain HTTP"), "{error}");
    }

    #[test]
    fn lines_are_split_capped_and_a_cut_last_piece_dropped() {
        let data = b"one\r\ntwo\n\nthis line is too long\nthree\npartial";
        let mut lines = LineSplitter::new(10);
        let mut seen = Vec::new();
        // Small pieces, so that lines span several of them.
        for piece in data.chunks(4) {
            for line in lines.push(piece) {
                seen.push(match line {
                    Line::Text(text) => text,
                    Line::TooLong => "<too long>".to_owned(),
                });
            }
        }
        assert_eq!(seen, ["one", "two", "", "<too long>", "three"]);
    }

    /// Serves `answer` on one end of a pipe, after reading the request head; returns the
    /// request.
    async fn exchange(answer: &'static [u8]) -> (Result<Vec<u8>, HttpError>, String) {
        let (client, mut server) = tokio::io::duplex(64 * 1024);
        let served = tokio::spawn(async move {
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.ends_with(b"\r\n\r\n") {
                let n = server.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&buf[..n]);
            }
            server.write_all(answer).await.unwrap();
            server.shutdown().await.unwrap();
            String::from_utf8(request).unwrap()
        });
        let body = match get(client, "127.0.0.1:9090", "/status").await {
            Ok(response) => response.bytes(1024 * 1024).await,
            Err(e) => Err(e),
        };
        (body, served.await.unwrap())
    }

    #[tokio::test]
    async fn answers_by_length_chunks_or_end() {
        let (body, request) = exchange(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}").await;
        assert_eq!(body.unwrap(), b"{}");
        assert!(request.starts_with("GET /status HTTP/1.1\r\n"), "{request}");
        assert!(request.contains("host: 127.0.0.1:9090\r\n"), "{request}");
        let (body, _) = exchange(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n4;x=y\r\n\":1}\r\n0\r\n\r\n",
        )
        .await;
        assert_eq!(body.unwrap(), b"{\"a\":1}");
        let (body, _) = exchange(b"HTTP/1.0 404 Not Found\r\n\r\nnope").await;
        assert_eq!(body.unwrap(), b"nope");
    }

    #[tokio::test]
    async fn hostile_or_broken_answers_are_errors_not_panics() {
        for answer in [
            // A chunk size past u64: the hand-written parser this replaced overflowed here.
            &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nx\r\n"[..],
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\nx\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n{}",
            b"",
            b"SSH-2.0-OpenSSH\r\n\r\n",
        ] {
            let (body, _) = exchange(answer).await;
            assert!(
                body.is_err(),
                "{:?}: {body:?}",
                String::from_utf8_lossy(answer)
            );
        }
    }

    #[tokio::test]
    async fn bodies_past_the_limit_are_refused() {
        let (client, mut server) = tokio::io::duplex(64 * 1024);
        tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            let _ = server.read(&mut buf).await;
            let _ = server
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n")
                .await;
            let _ = server.write_all(&[b'x'; 100]).await;
        });
        let response = get(client, "h:1", "/").await.unwrap();
        let error = response.bytes(10).await.unwrap_err();
        assert!(error.0.contains("too large"), "{error}");
    }
}
