//! `POST /validate`: one AdmissionReview parsed, evaluated by the engine against the active rule
//! snapshot, answered, and recorded (metrics, the decision log line, the export record) — all
//! rendered from the engine's one [`Evaluation`].
//!
//! Decisions run on the decision threads ([`crate::decisions`]), never on the async workers
//! that also answer `/healthz` and `/readyz` (reference §6: those answer within the kubelet's
//! probe timeout whatever the decision load), under the write timeout for every body size and however long a request
//! waited for a thread (reference §5). When the timeout wins, the API server is told 500 and
//! nothing is recorded as a decision: the late evaluation finds its request abandoned and
//! records nothing (one still waiting for a thread is not evaluated at all), so log, metrics
//! (`result="timeout"`) and export agree with the answer.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use drift_engine::json::RawDocument;
use drift_engine::review::{
    AdmissionResponse, HeldReview, ParsedReview, ReviewVersion, parse_review_raw,
};
use drift_engine::{AdmissionRequest, Context, Detail, Evaluation, evaluate};
use serde_json::{Map, Value};

use super::response::{count_error, json, plain};
use crate::state::{ServeState, Shared};

/// How many changed (and denied) fields a decision log line lists; the counts are always there.
const MAX_LOGGED_FIELDS: usize = 50;

/// Who answered a request: the evaluation, or the write timeout.
#[derive(Default)]
struct Race {
    state: AtomicU8,
    /// The request's uid, once parsed, for a timeout answer.
    uid: OnceLock<String>,
}

const PENDING: u8 = 0;
const DECIDED: u8 = 1;
const TIMED_OUT: u8 = 2;

impl Race {
    /// The evaluation claims the answer; false when the timeout already gave one.
    fn decide(&self) -> bool {
        self.state
            .compare_exchange(PENDING, DECIDED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Whether the timeout already answered: then nothing is left to decide.
    fn timed_out(&self) -> bool {
        self.state.load(Ordering::Acquire) == TIMED_OUT
    }

    /// The timeout claims the answer; false when the evaluation already gave one.
    fn time_out(&self) -> bool {
        self.state
            .compare_exchange(PENDING, TIMED_OUT, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

enum Answer {
    NotAReview(String),
    Review(Bytes),
    Internal(String),
    /// The write timeout answered first; this evaluation recorded nothing.
    Abandoned,
}

/// What the first blocking step produced.
enum Parsed {
    Answered(Answer),
    /// Evaluated: the answer went through the step's early sender ([`give_early`]).
    Evaluated,
    /// A `/scale` UPDATE whose rules need the scaled object's labels (an API read) first: the
    /// request without its objects, for the read, and the review as read, to evaluate after it
    /// (its objects' text is kept, so the body is not parsed again).
    NeedsParentLabels(Box<(AdmissionRequest, HeldReview)>),
}

/// The answer of a decision step: the one sent early, or else what the step returned.
async fn first_answer<T>(
    step: impl std::future::Future<Output = Result<T, String>>,
    early: tokio::sync::oneshot::Receiver<Answer>,
) -> Result<Result<T, String>, Answer> {
    tokio::pin!(step);
    tokio::pin!(early);
    tokio::select! {
        biased;
        Ok(answer) = &mut early => Err(answer),
        returned = &mut step => match returned {
            // Sent just before the step returned (or never, after a panic).
            Ok(value) => match early.try_recv() {
                Ok(answer) => Err(answer),
                Err(_) => Ok(Ok(value)),
            },
            Err(failure) => Ok(Err(failure)),
        },
    }
}

/// Answers one review body within `write_timeout` of `started`.
pub(super) async fn answer(
    shared: &Arc<Shared>,
    serving: &Arc<ServeState>,
    body: Bytes,
    started: Instant,
    write_timeout: Duration,
) -> Response {
    let deadline = tokio::time::Instant::from_std(started + write_timeout);
    let race = Arc::new(Race::default());
    let work = decide(
        shared.clone(),
        serving.clone(),
        body.clone(),
        started,
        race.clone(),
    );
    tokio::pin!(work);
    let answer = tokio::select! {
        answer = &mut work => answer,
        _ = tokio::time::sleep_until(deadline) => {
            if race.time_out() {
                // The parse's uid, or else read without a parse (a few microseconds whatever
                // the body): only a request the timeout answers pays for it.
                let uid = race
                    .uid
                    .get()
                    .cloned()
                    .or_else(|| drift_engine::review::peek_uid(&body))
                    .unwrap_or_default();
                record_timeout(shared, &uid, started.elapsed());
                return internal_error(&uid, "no decision within the write timeout");
            }
            // The evaluation claimed the answer just as the timeout fired: it is recorded
            // and moments away, so it is the answer.
            work.await
        }
    };
    match answer {
        Answer::NotAReview(message) => {
            count_error(shared);
            plain(StatusCode::BAD_REQUEST, message)
        }
        Answer::Review(body) => json(body),
        Answer::Internal(message) => {
            tracing::error!(reason = %message, "internal failure while deciding a request");
            count_error(shared);
            internal_error(race.uid.get().map_or("", String::as_str), &message)
        }
        Answer::Abandoned => internal_error("", "no decision within the write timeout"),
    }
}

/// Parse, (for `/scale`, read the parent's labels,) evaluate, on the decision threads.
async fn decide(
    shared: Arc<Shared>,
    serving: Arc<ServeState>,
    body: Bytes,
    started: Instant,
    race: Arc<Race>,
) -> Answer {
    let parse_shared = shared.clone();
    let parse_serving = serving.clone();
    let parse_race = race.clone();
    let (early, answered) = tokio::sync::oneshot::channel();
    let step = serving.decisions.run(move || {
        if parse_race.timed_out() {
            // It waited for a thread past the write timeout, which answered for it.
            return Parsed::Answered(Answer::Abandoned);
        }
        match parse_review_raw(&body) {
            Err(e) => Parsed::Answered(Answer::NotAReview(e.0)),
            Ok(parsed) => {
                let _ = parse_race.uid.set(parsed.uid.clone());
                match needs_parent_labels(&parse_shared, &parse_serving, &parsed) {
                    Some(request) => Parsed::NeedsParentLabels(Box::new((request, parsed.hold()))),
                    None => {
                        evaluate_and_record(
                            &parse_shared,
                            &parse_serving,
                            parsed,
                            None,
                            started,
                            &parse_race,
                            |answer| give_early(early, answer),
                        );
                        Parsed::Evaluated
                    }
                }
            }
        }
    });
    let (request, held) = match first_answer(step, answered).await {
        Err(answer) | Ok(Ok(Parsed::Answered(answer))) => return answer,
        Ok(Ok(Parsed::NeedsParentLabels(waiting))) => *waiting,
        Ok(Ok(Parsed::Evaluated)) => {
            return Answer::Internal("the evaluation gave no answer".into());
        }
        Ok(Err(failure)) => return Answer::Internal(failure),
    };
    let labels = match &serving.parents {
        Some(lookup) => lookup.labels(&request).await,
        None => None,
    };
    let evaluating = serving.clone();
    let (early, answered) = tokio::sync::oneshot::channel();
    let step = serving.decisions.run(move || {
        if race.timed_out() {
            return Some(Answer::Abandoned);
        }
        evaluate_and_record(
            &shared,
            &evaluating,
            held.review(),
            labels.as_ref(),
            started,
            &race,
            |answer| give_early(early, answer),
        );
        None
    });
    match first_answer(step, answered).await {
        Err(answer) | Ok(Ok(Some(answer))) => answer,
        Ok(Ok(None)) => Answer::Internal("the evaluation gave no answer".into()),
        Ok(Err(failure)) => Answer::Internal(failure),
    }
}

/// A `/scale` UPDATE needs the scaled object's labels when a rule selects by labels and the
/// agent can read them (cluster mode): then the request, for the read.
fn needs_parent_labels(
    shared: &Shared,
    serving: &ServeState,
    parsed: &ParsedReview<RawDocument<'_>>,
) -> Option<AdmissionRequest> {
    let request = parsed.request.as_ref().ok()?;
    let needed = request.sub_resource() == "scale"
        && request.operation == "UPDATE"
        && serving.parents.is_some()
        && shared
            .snapshot()
            .rules
            .rules()
            .iter()
            .any(|r| !r.labels.is_empty());
    needed.then(|| request.without_objects())
}

fn internal_error(uid: &str, message: &str) -> Response {
    // HTTP 500: the API server treats the call as failed, so the webhook's failurePolicy
    // decides, and it quotes this reason. The body says the same.
    let review =
        AdmissionResponse::internal_error(uid, format!("Drift Sentinel internal error: {message}"))
            .into_review(ReviewVersion::V1);
    let mut response = json(Bytes::from(review.to_string()));
    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    response
}

/// Evaluates a parsed review against the active rules and, unless the write timeout answered
/// first, records the decision (metrics, log line), queues the export record, gives the answer
/// (`give`: [`give_early`], the request's task), and only then makes the Events' findings and
/// hands them to their writer (reference §6 "Events": the answer never waits for them).
fn evaluate_and_record(
    shared: &Shared,
    serving: &ServeState,
    parsed: ParsedReview<RawDocument<'_>>,
    parent_labels: Option<&Map<String, Value>>,
    started: Instant,
    race: &Race,
    give: impl FnOnce(Answer),
) {
    let request = match parsed.request {
        Ok(request) => request,
        Err(reason) => {
            if !race.decide() {
                return give(Answer::Abandoned);
            }
            tracing::warn!(uid = %parsed.uid, reason = %reason, "malformed AdmissionReview");
            count_error(shared);
            let review =
                AdmissionResponse::bad_request(&parsed.uid, reason).encode_review(parsed.version);
            return give(Answer::Review(Bytes::from(review)));
        }
    };
    let snapshot = shared.snapshot();
    let namespace_mode = snapshot
        .namespaces
        .get(request.namespace())
        .and_then(|n| n.mode_annotation.as_deref());
    let context = Context {
        namespace_mode,
        parent_labels,
        now: std::time::SystemTime::now(),
    };
    let evaluation = evaluate(&snapshot.rules, &request, &context, Detail::Verdict);
    let encoded = Bytes::from(
        evaluation
            .response(&request.uid)
            .encode_review(parsed.version),
    );
    // From here on the answer is this evaluation's — unless the timeout answered first, in
    // which case nothing of it is recorded.
    if !race.decide() {
        return give(Answer::Abandoned);
    }
    record(shared, &request, &evaluation, started.elapsed());
    // The export record is queued before the answer goes, so that records keep the order of
    // the answers a caller saw (reference §7); only the Events' findings follow the answer.
    if let Some(export) = &serving.export {
        // Whatever happens to the record, the response stands.
        let exported = std::panic::catch_unwind(AssertUnwindSafe(|| {
            export.exporter.export_admission(&request, &evaluation);
        }));
        if exported.is_err() {
            tracing::error!(uid = %request.uid, "exporting the violation record failed (panic); the response is unchanged");
        }
    }
    give(Answer::Review(encoded));
    if let Some(events) = &serving.events {
        events.send_admission(&request, &evaluation, context.now);
    }
}

/// Sends a decision step's answer to the request's task as soon as it is given, before the work
/// that only follows from it (the Events' findings) runs on the same thread.
fn give_early(early: tokio::sync::oneshot::Sender<Answer>, answer: Answer) {
    // The receiver is gone only when the request is: nothing is left to answer.
    let _ = early.send(answer);
}

/// The metric label `resource`: `group/version/resource` as the original Go agent writes it
/// (`apps/v1/deployments`), `/scale` appended for the subresource; the core group is left out
/// (`v1/pods`).
fn resource_label<O>(request: &AdmissionRequest<O>) -> String {
    let gvr = &request.resource;
    let mut label = String::with_capacity(64);
    if !gvr.group.is_empty() {
        label.push_str(&gvr.group);
        label.push('/');
    }
    label.push_str(&gvr.version);
    label.push('/');
    label.push_str(&gvr.resource);
    if !request.sub_resource().is_empty() {
        label.push('/');
        label.push_str(request.sub_resource());
    }
    label
}

/// A request the write timeout answered: counted and logged as what the API server was told.
fn record_timeout(shared: &Shared, uid: &str, elapsed: Duration) {
    shared.metrics.admission_requests.inc(["", "", "timeout"]);
    shared
        .metrics
        .admission_duration
        .observe(elapsed.as_secs_f64());
    tracing::warn!(
        uid,
        result = "timeout",
        latency_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
        "admission decision: no decision within the write timeout; answered 500 (the webhook's failurePolicy decides)"
    );
}

/// Metrics and the decision log line, rendered from the evaluation.
fn record<O>(
    shared: &Shared,
    request: &AdmissionRequest<O>,
    evaluation: &Evaluation<'_>,
    elapsed: Duration,
) {
    let metrics = &shared.metrics;
    let resource = resource_label(request);
    let result = match (evaluation.verdict(), evaluation.allowed()) {
        (Some(verdict), _) => verdict.as_str(),
        (None, true) => "allowed",
        (None, false) => "error",
    };
    metrics
        .admission_requests
        .inc([request.namespace(), &resource, result]);
    metrics.admission_duration.observe(elapsed.as_secs_f64());
    let changes = evaluation.changes();
    if let (Some(_), Some(mode)) = (evaluation.violation(), evaluation.mode()) {
        // One count per field and request, whatever the number of indices it changed at.
        let fields: std::collections::BTreeSet<String> = changes
            .iter()
            .filter(|c| !c.mutable)
            .map(|c| c.change.path.to_wildcard_string())
            .collect();
        for field in fields {
            metrics
                .violations
                .inc([request.namespace(), &resource, &field, mode.as_str()]);
        }
    }
    let listed = |paths: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (n, path) in paths.take(MAX_LOGGED_FIELDS).enumerate() {
            if n > 0 {
                text.push_str(", ");
            }
            text.push_str(path);
        }
        text
    };
    let denied = evaluation.denied_paths();
    let rule = evaluation.rule();
    // Text fields as `&str`: the log line writes those as they are, where `%` would take each
    // through the formatting machinery.
    tracing::info!(
        uid = request.uid.as_str(),
        operation = request.operation.as_str(),
        namespace = request.namespace(),
        resource = resource.as_str(),
        name = request.name(),
        user = request.user_info.username.as_str(),
        rule = rule.map(|r| r.id.to_string()).unwrap_or_default(),
        tier = rule.map(|r| r.tier.as_str()).unwrap_or(""),
        mode = evaluation.mode().map(|m| m.as_str()).unwrap_or(""),
        step = ?evaluation.step(),
        result = result,
        reason = evaluation.status_message().as_str(),
        changed_fields = listed(&mut changes.iter().map(|c| c.path.as_str())).as_str(),
        changed_count = evaluation.comparison().map_or(0, |c| c.changed_count),
        denied_fields = listed(&mut denied.iter().map(String::as_str)).as_str(),
        denied_count = evaluation.violation().map_or(0, |v| v.denied_count),
        dry_run = request.dry_run.unwrap_or(false),
        latency_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
        "admission decision"
    );
}

#[cfg(test)]
#[path = "admission_tests.rs"]
mod tests;
