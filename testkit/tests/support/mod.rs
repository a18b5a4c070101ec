//! HTTP/1.1 over a TCP stream, for the tests of the API server double: one request on its own
//! connection ([`request`]), a watch read event by event ([`Watch`]), a query value encoded as
//! kube-rs encodes it. (The double is tested with bytes on the wire, not through a client that
//! might smooth its answers.)

use std::time::Duration;

use drift_testkit::ApiServer;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Form-encodes a query value as kube-rs does (`/` → `%2F`, `=` → `%3D`).
pub fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                (b as char).to_string()
            }
            b' ' => "+".to_owned(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub fn address(server: &ApiServer) -> String {
    server.url().trim_start_matches("http://").to_owned()
}

pub fn split_head(raw: &[u8]) -> Option<(u16, bool, usize)> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let chunked = head
        .lines()
        .any(|l| l.starts_with("transfer-encoding:") && l.contains("chunked"));
    Some((status, chunked, end + 4))
}

/// Moves complete chunks of a chunked body from `raw` to `data`; returns whether the last chunk
/// was seen.
pub fn dechunk(raw: &mut Vec<u8>, data: &mut Vec<u8>) -> bool {
    loop {
        let Some(line_end) = raw.windows(2).position(|w| w == b"\r\n") else {
            return false;
        };
        let size_text = String::from_utf8_lossy(&raw[..line_end]).to_string();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap();
        if size == 0 {
            return true;
        }
        let start = line_end + 2;
        if raw.len() < start + size + 2 {
            return false;
        }
        data.extend_from_slice(&raw[start..start + size]);
        raw.drain(..start + size + 2);
    }
}

/// One request on its own connection: (HTTP status, JSON body or Null).
pub async fn request(
    server: &ApiServer,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &str,
) -> (u16, Value) {
    let address = address(server);
    let mut stream = TcpStream::connect(&address).await.unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nAccept: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(content_type) = content_type {
        head.push_str(&format!("Content-Type: {content_type}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .expect("response within 10 s")
        .unwrap();
    let (status, chunked, start) = split_head(&raw).expect("an HTTP response");
    let mut body = raw.split_off(start);
    if chunked {
        let mut data = Vec::new();
        dechunk(&mut body, &mut data);
        body = data;
    }
    let value = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body).unwrap_or_else(|e| {
            panic!("body is not JSON ({e}): {}", String::from_utf8_lossy(&body))
        })
    };
    (status, value)
}

/// A watch stream read line by line.
pub struct Watch {
    stream: TcpStream,
    raw: Vec<u8>,
    data: Vec<u8>,
    chunked: bool,
}

impl Watch {
    pub async fn open(server: &ApiServer, path: &str) -> Self {
        let address = address(server);
        let mut stream = TcpStream::connect(&address).await.unwrap();
        let head =
            format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nAccept: application/json\r\n\r\n");
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        let mut buffer = [0u8; 4096];
        loop {
            if let Some((status, chunked, start)) = split_head(&raw) {
                assert_eq!(status, 200, "{}", String::from_utf8_lossy(&raw));
                raw.drain(..start);
                return Self {
                    stream,
                    raw,
                    data: Vec::new(),
                    chunked,
                };
            }
            let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer))
                .await
                .expect("watch headers within 5 s")
                .unwrap();
            assert!(n > 0, "the watch closed before its headers");
            raw.extend_from_slice(&buffer[..n]);
        }
    }

    /// The next event, or None if none comes within `wait` (or the stream ends).
    pub async fn next(&mut self, wait: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut buffer = [0u8; 4096];
        loop {
            if self.chunked {
                dechunk(&mut self.raw, &mut self.data);
            } else {
                self.data.append(&mut self.raw);
            }
            if let Some(end) = self.data.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.data.drain(..=end).collect();
                return Some(serde_json::from_slice(&line).unwrap());
            }
            let read = tokio::time::timeout_at(deadline, self.stream.read(&mut buffer)).await;
            match read {
                Ok(Ok(n)) if n > 0 => self.raw.extend_from_slice(&buffer[..n]),
                _ => return None,
            }
        }
    }
}
