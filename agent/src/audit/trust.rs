//! What the audit reads that must carry this installation's signature (reference §8 "Trust"):
//! the webhook's records of edits, and its own memory in Reports and `DriftDetected` and
//! `Bypassed` Events.
//! The one place that says in the log what of a read did not verify.

use drift_api::events::signature::Verification;
use drift_api::status::{SignedRead, SignedSource};

/// What of `source` did not verify, and what becomes of it: named no user from (records) or
/// not read back (memory).
fn consequence(source: SignedSource) -> &'static str {
    match source {
        SignedSource::Record => "records of edits that did not verify: no user is named from them",
        SignedSource::Report => {
            "Report properties of who made drifted fields or set a bypass that did not verify: not read back"
        }
        SignedSource::EventMemory => {
            "DriftDetected and Bypassed Event annotations of who made drifted fields or set a bypass that did not verify: not read back"
        }
    }
}

/// Why what was read did not verify: forged or an earlier key's, or this agent has no key.
pub fn unverified_reason(verification: &Verification) -> &str {
    match verification {
        Verification::Keys(_) => {
            "not signed by this installation's key nor a previous key of --record-verify-keys (forged, unsigned, or signed by a key rotated out and not listed)"
        }
        Verification::Unavailable(why) => why.as_str(),
    }
}

/// One read of `source` for `/status`: `Ok((items read, items that did not verify))`, with why
/// they did not, or why nothing could be read (bounded).
pub fn signed_read(
    outcome: Result<(usize, usize), &str>,
    unverified_why: impl FnOnce() -> String,
) -> SignedRead {
    let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    match outcome {
        Ok((read, unverified)) => SignedRead {
            read: count(read),
            unverified: count(unverified),
            unverified_why: (unverified > 0).then(unverified_why),
            error: None,
        },
        Err(e) => SignedRead {
            error: Some(drift_engine::truncate::truncate_bytes(
                e,
                drift_engine::attribution::MAX_UNREAD_REASON_BYTES,
            )),
            ..SignedRead::default()
        },
    }
}

/// Logs the `unverified` items of one read of `source` (nothing when there are none), with why
/// they did not verify: forged or an earlier key's, or this agent has no key to verify with.
pub fn warn_unverified(source: SignedSource, unverified: usize, verification: &Verification) {
    if unverified == 0 {
        return;
    }
    let why = unverified_reason(verification);
    tracing::warn!(
        source = source.as_str(),
        unverified,
        reason = why,
        "{}",
        consequence(source)
    );
}
