//! Unit tests of `stream` (a file of their own, to keep the module's code short).

use super::*;
use std::io::Write;

fn admission(id: u32, time: &str) -> String {
    format!("{{\"eventType\":\"violation_admission\",\"id\":\"a{id}\",\"timestamp\":\"{time}\"}}\n")
}

fn audited(id: u32, time: &str) -> String {
    format!("{{\"eventType\":\"violation_audited\",\"id\":\"u{id}\",\"timestamp\":\"{time}\"}}\n")
}

fn write(dir: &Path, name: &str, content: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, content).unwrap();
    path
}

fn append(path: &Path, content: &str) {
    let mut file = fs::OpenOptions::new().append(true).open(path).unwrap();
    file.write_all(content.as_bytes()).unwrap();
}

/// Sets the modification time to `secs` after 2027-01-15T08:00:00Z.
fn set_mtime(path: &Path, secs: u64) {
    let base = humantime::parse_rfc3339(T0).unwrap();
    let file = fs::OpenOptions::new().write(true).open(path).unwrap();
    file.set_modified(base + Duration::from_secs(secs)).unwrap();
}

/// Names, contents and modification times of a directory.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>, SystemTime)> {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            let content = if meta.is_file() {
                fs::read(e.path()).unwrap()
            } else {
                Vec::new()
            };
            (
                e.file_name().into_string().unwrap(),
                content,
                meta.modified().unwrap(),
            )
        })
        .collect();
    entries.sort();
    entries
}

fn text(lines: &[Bytes]) -> String {
    lines
        .iter()
        .map(|l| String::from_utf8(l.to_vec()).unwrap())
        .collect()
}

fn ids(lines: &[Bytes]) -> Vec<String> {
    lines
        .iter()
        .map(|l| {
            let value: serde_json::Value = serde_json::from_slice(l).unwrap();
            value["id"].as_str().unwrap().to_owned()
        })
        .collect()
}

fn cursor(dir: &Path, query: &str) -> Cursor {
    Cursor::new(dir.to_owned(), &Query::parse(Some(query)).unwrap())
}

const T0: &str = "2027-01-15T08:00:00Z";

#[test]
fn segments_in_time_order_then_only_new_complete_lines() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Written out of order on purpose: the name's time decides, not the listing.
    write(
        d,
        "admission-20270115T080200.000000Z-00000000000000cc.log",
        &(admission(5, T0) + &admission(6, T0)),
    );
    write(
        d,
        "admission-20270115T080000.000000Z-00000000000000aa.log",
        &(admission(1, T0) + &admission(2, T0)),
    );
    // Audit runs are placed by modification time (08:00:30 and 08:01), not by name.
    let late_run = write(d, "a-run.log", &audited(4, T0));
    set_mtime(&late_run, 60);
    let early_run = write(d, "b-run.txt", &audited(3, T0));
    set_mtime(&early_run, 30);
    let open = write(
        d,
        "admission-20270115T080300.000000Z-00000000000000dd.open",
        &(admission(7, T0) + "{\"eventType\":\"violation_admission\",\"id\":\"a8\""),
    );
    let before = snapshot(d);

    let mut cursor = cursor(d, "");
    let first = cursor.poll().unwrap();
    assert_eq!(ids(&first), ["a1", "a2", "u3", "u4", "a5", "a6", "a7"]);
    assert!(first.iter().all(|l| l.ends_with(b"\n")));
    assert_eq!(text(&first[..1]), admission(1, T0));
    // Reading changes nothing on disk.
    assert_eq!(snapshot(d), before);

    // Nothing new: nothing emitted, the partial line is held back.
    assert!(cursor.poll().unwrap().is_empty());

    // The record completes: emitted once.
    append(&open, ",\"timestamp\":\"2027-01-15T08:03:00Z\"}\n");
    assert_eq!(ids(&cursor.poll().unwrap()), ["a8"]);

    // The writer completes the segment: the rename emits nothing again.
    append(&open, &admission(9, T0));
    fs::rename(&open, open.with_extension("log")).unwrap();
    assert_eq!(ids(&cursor.poll().unwrap()), ["a9"]);
    assert!(cursor.poll().unwrap().is_empty());

    // A new segment and a new audit run appear.
    write(
        d,
        "admission-20270115T080400.000000Z-00000000000000ee.open",
        &admission(10, T0),
    );
    assert_eq!(ids(&cursor.poll().unwrap()), ["a10"]);
    assert_eq!(cursor.skipped(), 0);
}

#[test]
fn an_unterminated_last_line_of_a_completed_file_is_a_record() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(
        d,
        "admission-20270115T080000.000000Z-00000000000000aa.log",
        admission(1, T0).trim_end(),
    );
    let mut cursor = cursor(d, "");
    let lines = cursor.poll().unwrap();
    assert_eq!(ids(&lines), ["a1"]);
    assert!(lines[0].ends_with(b"}\n"));
    assert!(cursor.poll().unwrap().is_empty());
}

#[test]
fn audit_control_records_and_ignored_files_are_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(
        d,
        "run-1.txt",
        &format!(
            "{{\"id\":\"run-1\",\"message\":\"audit is started\"}}\n{}{}",
            audited(1, T0),
            // Policy text that looks like a control message is still a violation.
            "{\"eventType\":\"violation_audited\",\"id\":\"u2\",\"message\":\"audit is completed\"}\n"
        ),
    );
    write(
        d,
        "admission-20270115T080000.000000Z-aa.deleting",
        &admission(9, T0),
    );
    write(d, "notes.json", &admission(9, T0));
    write(
        d,
        "admission-20270115T080000.000000Z-bb.txt",
        &admission(9, T0),
    );
    fs::create_dir(d.join("sub.log")).unwrap();
    let mut cursor = cursor(d, "");
    assert_eq!(ids(&cursor.poll().unwrap()), ["u1", "u2"]);
    append(
        &d.join("run-1.txt"),
        "{\"id\":\"run-1\",\"message\":\"audit is completed\"}\n",
    );
    fs::rename(d.join("run-1.txt"), d.join("run-1.log")).unwrap();
    assert!(cursor.poll().unwrap().is_empty());
    assert_eq!(cursor.skipped(), 0);
}

#[test]
fn source_filter() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(
        d,
        "admission-20270115T080000.000000Z-00000000000000aa.log",
        &admission(1, T0),
    );
    write(d, "run-1.log", &audited(2, T0));
    assert_eq!(ids(&cursor(d, "source=webhook").poll().unwrap()), ["a1"]);
    assert_eq!(ids(&cursor(d, "source=audit").poll().unwrap()), ["u2"]);
    // The record's eventType decides too: an audited record in an admission segment is not
    // a webhook record.
    write(
        d,
        "admission-20270115T080100.000000Z-00000000000000bb.log",
        &audited(3, T0),
    );
    assert_eq!(ids(&cursor(d, "source=webhook").poll().unwrap()), ["a1"]);
}

#[test]
fn since_filter_keeps_records_at_or_after_the_time() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(
        d,
        "admission-20270115T080000.000000Z-00000000000000aa.log",
        &[
            admission(1, "2027-01-15T07:59:59.999999Z"),
            admission(2, "2027-01-15T08:00:00Z"),
            admission(3, "2027-01-15T08:00:00.5Z"),
            "{\"eventType\":\"violation_admission\",\"id\":\"a4\"}\n".to_string(),
            admission(5, "not a time"),
        ]
        .concat(),
    );
    assert_eq!(
        ids(&cursor(d, "since=2027-01-15T08:00:00Z").poll().unwrap()),
        ["a2", "a3"]
    );
    // A numeric offset: 09:00:00.2+01:00 is 08:00:00.2Z.
    assert_eq!(
        ids(&cursor(d, "since=2027-01-15T09:00:00.2+01:00")
            .poll()
            .unwrap()),
        ["a3"]
    );
    assert_eq!(
        ids(&cursor(d, "since=2027-01-15T09%3A00%3A00.2%2B01%3A00")
            .poll()
            .unwrap()),
        ["a3"]
    );
    // Without since, a record without a usable time is still a record.
    assert_eq!(
        ids(&cursor(d, "").poll().unwrap()),
        ["a1", "a2", "a3", "a4", "a5"]
    );
}

#[test]
fn lines_that_are_not_json_objects_are_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(
        d,
        "admission-20270115T080000.000000Z-00000000000000aa.log",
        &[
            admission(1, T0),
            "{\"eventType\":\"violation_admission\",\"id\":\n".to_string(),
            "\n".to_string(),
            "[\"violation_admission\",\"x\"]\n".to_string(),
            "garbage\n".to_string(),
            admission(2, T0),
        ]
        .concat(),
    );
    let mut cursor = cursor(d, "");
    assert_eq!(ids(&cursor.poll().unwrap()), ["a1", "a2"]);
    assert_eq!(cursor.skipped(), 3);
    assert!(cursor.poll().unwrap().is_empty());
    assert_eq!(cursor.skipped(), 3);
}

#[test]
fn files_that_vanish_or_complete_after_the_listing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let gone = write(
        d,
        "admission-20270115T080000.000000Z-00000000000000aa.log",
        &admission(1, T0),
    );
    let renamed = write(
        d,
        "admission-20270115T080100.000000Z-00000000000000bb.open",
        &admission(2, T0),
    );
    let gone_run = write(d, "run-1.txt", &audited(3, T0));
    write(
        d,
        "admission-20270115T080200.000000Z-00000000000000cc.log",
        &admission(4, T0),
    );
    let mut cursor = cursor(d, "");
    let listed = cursor.list().unwrap();
    assert_eq!(listed.len(), 4);
    fs::remove_file(&gone).unwrap();
    fs::remove_file(&gone_run).unwrap();
    fs::rename(&renamed, renamed.with_extension("log")).unwrap();
    let (lines, more) = cursor.read_listed(&listed, usize::MAX).unwrap();
    assert!(!more);
    assert_eq!(ids(&lines), ["a2", "a4"]);
    assert!(cursor.poll().unwrap().is_empty());
}

#[test]
fn a_missing_directory_has_no_records_until_it_appears() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("audit-channel");
    let mut cursor = cursor(&d, "follow=true");
    assert!(cursor.poll().unwrap().is_empty());
    fs::create_dir(&d).unwrap();
    write(
        &d,
        "admission-20270115T080000.000000Z-00000000000000aa.open",
        &admission(1, T0),
    );
    assert_eq!(ids(&cursor.poll().unwrap()), ["a1"]);
}

#[test]
fn the_budget_splits_a_backlog_without_losing_or_repeating() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for segment in 0..3u32 {
        let content: String = (0..4).map(|i| admission(segment * 4 + i, T0)).collect();
        write(
            d,
            &format!("admission-20270115T08000{segment}.000000Z-00000000000000aa.log"),
            &content,
        );
    }
    let mut cursor = cursor(d, "");
    let mut all = Vec::new();
    loop {
        let (lines, more) = cursor.poll_budget(150).unwrap();
        assert!(lines.len() <= 3, "{}", lines.len());
        all.extend(lines);
        if !more {
            break;
        }
    }
    let expected: Vec<String> = (0..12).map(|i| format!("a{i}")).collect();
    assert_eq!(ids(&all), expected);
}

#[test]
fn forgotten_only_after_several_listings_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let path = write(
        d,
        "admission-20270115T080000.000000Z-00000000000000aa.log",
        &admission(1, T0),
    );
    let mut cursor = cursor(d, "");
    assert_eq!(cursor.poll().unwrap().len(), 1);
    let hidden = d.join("elsewhere");
    fs::rename(&path, &hidden).unwrap();
    assert!(cursor.poll().unwrap().is_empty());
    // A listing that missed it once (as one racing with a rename may) does not re-emit it.
    fs::rename(&hidden, &path).unwrap();
    assert!(cursor.poll().unwrap().is_empty());
    fs::remove_file(&path).unwrap();
    for _ in 0..FORGET_AFTER {
        cursor.poll().unwrap();
    }
    assert!(cursor.progress.is_empty());
}

async fn body_text(response: Response) -> String {
    use http_body_util::BodyExt;
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test]
async fn response_statuses() {
    let (_tx, rx) = watch::channel(false);
    let response = super::response(
        Ok(PathBuf::from("/nonexistent")),
        Some("source=all"),
        Duration::from_millis(10),
        rx.clone(),
    );
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(
        response.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    assert!(body_text(response).await.contains("webhook and audit"));

    // Export off, for good: 404 and how to turn it on; on but nothing to read yet: 503.
    for (why, status, says) in [
        (
            Unavailable::WebhookExportOff,
            StatusCode::NOT_FOUND,
            "violation export is not enabled on this agent: start it with --enable-admission-violation-export (the chart's enableAdmissionViolationExport=true)",
        ),
        (
            Unavailable::AuditExportOff,
            StatusCode::NOT_FOUND,
            "violation export is not enabled on this audit: start it with --enable-violation-export (the chart's enableViolationExport=true)",
        ),
        (
            Unavailable::NoConnection,
            StatusCode::SERVICE_UNAVAILABLE,
            "no usable Connection yet",
        ),
        (
            Unavailable::NoAuditRun,
            StatusCode::SERVICE_UNAVAILABLE,
            "no audit run",
        ),
    ] {
        let response = super::response(Err(why), None, Duration::from_millis(10), rx.clone());
        assert_eq!(response.status(), status, "{why:?}");
        let text = body_text(response).await;
        assert!(text.contains(says), "{why:?}: {text}");
        assert_eq!(
            status == StatusCode::NOT_FOUND,
            text.starts_with(drift_api::violation::EXPORT_NOT_ENABLED),
            "{text}"
        );
    }

    let dir = tempfile::tempdir().unwrap();
    let response = super::response(
        Ok(dir.path().join("missing")),
        None,
        Duration::from_millis(10),
        rx.clone(),
    );
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "application/x-ndjson"
    );
    assert_eq!(body_text(response).await, "");
}

#[tokio::test]
async fn response_without_follow_ends_after_the_backlog() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // More than one chunk of backlog.
    let record = admission(1, T0);
    let count = CHUNK_BYTES / record.len() * 2 + 7;
    let content: String = (0..count).map(|i| admission(i as u32, T0)).collect();
    write(
        d,
        "admission-20270115T080000.000000Z-00000000000000aa.log",
        &content,
    );
    write(d, "run-1.txt", &audited(1, T0));
    let (_tx, rx) = watch::channel(false);
    let response = super::response(
        Ok(d.to_owned()),
        Some("source=webhook"),
        Duration::from_secs(3600),
        rx,
    );
    let body = body_text(response).await;
    assert_eq!(body.len(), content.len());
    assert!(body == content);
}

#[tokio::test]
async fn response_follows_until_shutdown() {
    use futures::StreamExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_owned();
    let open = write(
        &d,
        "admission-20270115T080000.000000Z-00000000000000aa.open",
        &admission(1, T0),
    );
    let (tx, rx) = watch::channel(false);
    let response = super::response(
        Ok(d.clone()),
        Some("follow=true"),
        Duration::from_millis(20),
        rx,
    );
    let mut body = response.into_body().into_data_stream();
    let first = body.next().await.unwrap().unwrap();
    assert_eq!(first, admission(1, T0));
    append(
        &open,
        "{\"eventType\":\"violation_admission\",\"id\":\"a2\"",
    );
    append(&open, ",\"timestamp\":\"2027-01-15T08:00:00Z\"}\n");
    let second = tokio::time::timeout(Duration::from_secs(10), body.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(second, admission(2, T0));
    fs::rename(&open, open.with_extension("log")).unwrap();
    write(
        &d,
        "admission-20270115T080100.000000Z-00000000000000bb.open",
        &admission(3, T0),
    );
    let third = tokio::time::timeout(Duration::from_secs(10), body.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(third, admission(3, T0));
    tx.send(true).unwrap();
    let end = tokio::time::timeout(Duration::from_secs(10), body.next())
        .await
        .unwrap();
    assert!(end.is_none());
}

/// Over real HTTP on loopback: the follow stream stops (and releases what it holds) when the
/// client disconnects, even while there is nothing new to send.
#[tokio::test]
async fn follow_stops_when_the_client_goes_away() {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::service::TowerToHyperService;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_owned();
    write(
        &d,
        "admission-20270115T080000.000000Z-00000000000000aa.open",
        &admission(1, T0),
    );
    let (tx, rx) = watch::channel(false);
    let router = axum::Router::new().route(
        "/violations",
        axum::routing::get(move |uri: axum::http::Uri| {
            let (d, rx) = (d.clone(), rx.clone());
            async move { super::response(Ok(d), uri.query(), Duration::from_millis(20), rx) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        let _ = builder
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(router))
            .await;
    });
    let idle = tx.receiver_count();

    let mut client = tokio::net::TcpStream::connect(address).await.unwrap();
    client
        .write_all(b"GET /violations?follow=true HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    while !String::from_utf8_lossy(&received).contains("\"id\":\"a1\"") {
        let n = tokio::time::timeout(Duration::from_secs(10), client.read(&mut buffer))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "connection closed early");
        received.extend_from_slice(&buffer[..n]);
    }
    let head = String::from_utf8_lossy(&received).to_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(
        head.contains("content-type: application/x-ndjson"),
        "{head}"
    );
    // The streaming body holds a shutdown receiver while it runs.
    assert_eq!(tx.receiver_count(), idle + 1);

    drop(client);
    tokio::time::timeout(Duration::from_secs(10), async {
        while tx.receiver_count() > idle {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the stream outlived its client");
}

#[test]
fn lines_nested_past_the_limit_are_skipped_like_lines_that_are_not_json() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let nested = |levels: usize| {
        format!(
            "{{\"eventType\":\"violation_admission\",\"id\":\"deep{levels}\",\"details\":{}1{}}}\n",
            "[".repeat(levels),
            "]".repeat(levels)
        )
    };
    write(
        d,
        "admission-20270115T080000.000000Z-00000000000000aa.log",
        &(admission(1, T0) + &nested(9_999) + &nested(10_000) + &admission(2, T0)),
    );
    let mut cursor = cursor(d, "");
    // 9,999 levels inside the record's own one: 10,000 in all, served as it is; one more is
    // not. (Matched by text: serde_json's own parser stops at 128 levels.)
    let lines = cursor.poll().unwrap();
    let served: Vec<bool> = ["\"id\":\"a1\"", "\"id\":\"deep9999\"", "\"id\":\"a2\""]
        .iter()
        .zip(&lines)
        .map(|(id, line)| String::from_utf8_lossy(line).contains(id))
        .collect();
    assert_eq!((lines.len(), served), (3, vec![true, true, true]));
    assert_eq!(cursor.skipped(), 1);
}
