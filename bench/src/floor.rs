//! The floor of the serving stack: `POST /validate` reads the whole body with the agent's own
//! `read_review_body` (JSON only, at most 8 MiB, within the read timeout; see
//! [`crate::serve_reference`]), finds the request's uid by a byte search and answers `allowed`
//! with it ([`answer`]). No parse at all, so no decision can cost less: the agent's ratio to it
//! is what deciding costs beyond receiving and answering.
//!
//! The checked floor ([`answer_checked`], binary `drift-checked-floor`) also reads the review
//! as the agent does first ([`parse_review_raw`]: the one strict pass over the whole body, which
//! reference §5 asks of every body, and the request's small fields), then answers the same way:
//! the agent's ratio to it is what the decision costs beyond the work every answer needs.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use drift_engine::review::parse_review_raw;
use drift_sentinel::webhook::plain;

/// The text of the first `"uid":"…"` string in `body`, as it is written (escapes kept, so that
/// it can be echoed into JSON unchanged). The API server writes `request.uid` before anything
/// else of the request; a body without one has none.
pub fn uid_text(body: &[u8]) -> Option<&[u8]> {
    const KEY: &[u8] = b"\"uid\":\"";
    let start = memchr::memmem::find(body, KEY)? + KEY.len();
    let rest = &body[start..];
    let mut at = 0;
    loop {
        at += memchr::memchr2(b'"', b'\\', &rest[at..])?;
        if rest[at] == b'"' {
            return Some(&rest[..at]);
        }
        at += 2;
    }
}

/// The checked floor's answer to a review `body` (see the module).
pub fn answer_checked(body: &[u8]) -> Response {
    if let Err(not_a_review) = parse_review_raw(body) {
        return plain(StatusCode::BAD_REQUEST, not_a_review.to_string());
    }
    answer(body)
}

/// The floor's answer to a review `body`: `allowed`, with its uid as written.
pub fn answer(body: &[u8]) -> Response {
    let Some(uid) = uid_text(body) else {
        return plain(StatusCode::BAD_REQUEST, "no \"uid\":\"…\" in the body");
    };
    let mut answer = Vec::with_capacity(uid.len() + 96);
    answer.extend_from_slice(
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":""#,
    );
    answer.extend_from_slice(uid);
    answer.extend_from_slice(br#"","allowed":true}}"#);
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        answer,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::uid_text;

    #[test]
    fn the_uid_is_found_as_written() {
        let cases: [(&[u8], Option<&[u8]>); 5] = [
            (br#"{"request":{"uid":"abc","x":1}}"#, Some(b"abc")),
            (br#"{"request":{"uid":"a\"b\\","x":1}}"#, Some(br#"a\"b\\"#)),
            (br#"{"request":{"uid":""}}"#, Some(b"")),
            (br#"{"request":{"name":"x"}}"#, None),
            (br#"{"request":{"uid":"unterminated"#, None),
        ];
        for (body, want) in cases {
            assert_eq!(uid_text(body), want, "{}", String::from_utf8_lossy(body));
        }
    }
}
