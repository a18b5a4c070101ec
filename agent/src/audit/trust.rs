//! What the audit reads that must carry this installation's signature (reference §8 "Trust"):
//! the webhook's records of edits, and its own memory in Reports and `DriftDetected` and
//! `Bypassed` Events.
//! The one place that says in the log what of a read did not verify.

use drift_api::events::signature::Verification;
use drift_api::status::SignedSource;

/// What of `source` did not verify, and what becomes of it: named no user from (records) or
/// not read back (memory).
fn consequence(source: SignedSource) -> &'static str {
    match source {
        SignedSource::Record => "records of edits that did not verify: no user is named from them",
        SignedSource::Report => {
            "Report properties of who made drifted fields or set a bypass that did not verify: not read back"
        }
        SignedSource::EventMemory => {
            "audit Event annotations of who made drifted fields (DriftDetected) or set a bypass (Bypassed) that did not verify: not read back"
        }
    }
}

/// Logs the `unverified` items of one read of `source` (nothing when there are none), with why
/// they did not verify: forged or an earlier key's, or this agent has no key to verify with.
pub fn warn_unverified(source: SignedSource, unverified: usize, verification: &Verification) {
    if unverified == 0 {
        return;
    }
    let why = match verification {
        Verification::Key(_) => {
            "not signed by this installation's key (forged, unsigned, or signed by an earlier key)"
        }
        Verification::Unavailable(why) => why.as_str(),
    };
    tracing::warn!(
        source = source.as_str(),
        unverified,
        reason = why,
        "{}",
        consequence(source)
    );
}
