//! `POST /validate-rule` (reference §2, "A typo never opens a hole"): the chart registers it for
//! CREATE and UPDATE of rule ConfigMaps, so `kubectl apply` of a broken rule fails at once with
//! the line and column of the mistake, and a valid rule with a likely mistake is admitted with a
//! warning. The judgement is the engine's (`drift_engine::lint::review_config_map`), with the
//! agent's own tier policy and the namespaces it knows; this module only answers.

use drift_engine::lint::{LintContext, RuleReview, review_config_map};
use drift_engine::message::MAX_WARNING_BYTES;
use drift_engine::review::{AdmissionResponse, ResponseStatus, parse_review};
use drift_engine::truncate::truncate_bytes;
use serde_json::Value;

use drift_api::status::RuleSourceKind;

use crate::state::Shared;

/// At most this many warnings are returned (each within the warning limit).
const MAX_WARNINGS: usize = 10;

/// The AdmissionReview answering `body`; `Err` with a plain message when the body is not an
/// AdmissionReview at all.
pub fn answer(shared: &Shared, body: &[u8]) -> Result<Value, String> {
    let parsed = parse_review(body).map_err(|e| e.0)?;
    let version = parsed.version;
    let request = match parsed.request {
        Ok(request) => request,
        Err(reason) => {
            return Ok(AdmissionResponse::bad_request(&parsed.uid, reason).into_review(version));
        }
    };
    let Some(object) = request.object.as_ref() else {
        // DELETE and the like carry no new object: nothing to judge.
        return Ok(allowed(&request.uid, Vec::new()).into_review(version));
    };
    let snapshot = shared.snapshot();
    // The namespaces that exist are known only from the cluster; files list some at most.
    let namespaces: Option<Vec<String>> = (snapshot.kind == RuleSourceKind::Cluster)
        .then(|| snapshot.namespaces.keys().cloned().collect());
    let context = LintContext {
        shapes: Some(drift_api::shapes::built_in()),
        namespaces: namespaces.as_deref(),
    };
    let review = review_config_map(object, request.namespace(), shared.tier_policy(), &context);
    let response = match review {
        RuleReview::NotARule => allowed(&request.uid, Vec::new()),
        RuleReview::Valid { rule, warnings } => {
            let warnings = warnings
                .iter()
                .take(MAX_WARNINGS)
                .map(|w| {
                    truncate_bytes(
                        &format!("Drift Sentinel: rule {}: {w}", rule.id),
                        MAX_WARNING_BYTES,
                    )
                })
                .collect();
            allowed(&request.uid, warnings)
        }
        RuleReview::Invalid(error) => AdmissionResponse {
            uid: request.uid.clone(),
            allowed: false,
            status: ResponseStatus {
                status: "Failure",
                code: 422,
                reason: Some("Invalid"),
                message: truncate_bytes(
                    &format!("Drift Sentinel: invalid rule, not stored: {error}"),
                    16 * 1024,
                ),
            },
            warnings: Vec::new(),
            audit_annotations: Default::default(),
        },
    };
    Ok(response.into_review(version))
}

fn allowed(uid: &str, warnings: Vec<String>) -> AdmissionResponse {
    AdmissionResponse {
        uid: uid.to_owned(),
        allowed: true,
        status: ResponseStatus {
            status: "Success",
            code: 200,
            reason: None,
            message: String::new(),
        },
        warnings,
        audit_annotations: Default::default(),
    }
}
