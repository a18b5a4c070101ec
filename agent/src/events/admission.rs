//! The webhook's findings as Events (reference §6 "Events"), rendered from the engine's one
//! evaluation of a request: a warned or dry-run violation, an edit a bypass let through, a bypass
//! annotation that is no bypass, an edit allowed without comparison (all on the object), and a
//! denial (on the winning rule's ConfigMap, counted). The findings on the object carry the
//! webhook's record of the edit ([`drift_api::events::EditRecord`]) that the audit joins drifted
//! fields with (reference §8 "Who and why"). Pure: the request, its evaluation and the time in.

use std::time::SystemTime;

use drift_api::events::{RecordedEdit, RecordedField, Why, reason};
use drift_engine::attribution::{MAX_PATH_BYTES, MAX_RECORDED_FIELDS, fingerprint, value_at};
use drift_engine::evaluation::{Settled, Verdict, target_of};
use drift_engine::json::{Document, Node};
use drift_engine::{AdmissionRequest, Evaluation};

use super::series::{BypassSeen, EventType, Intent, Note, Regarding};

/// How many changes a note shows with their values.
const MAX_NOTED_CHANGES: usize = 10;

/// The Events one evaluated request makes: none for a request that changes nothing on the
/// object (a server-side dry run) or that no rule matched.
pub fn intents_of<O: Document>(
    request: &AdmissionRequest<O>,
    evaluation: &Evaluation<'_>,
    at: SystemTime,
) -> Vec<Intent> {
    let mut intents = Vec::new();
    if request.operation != "UPDATE" || request.dry_run == Some(true) {
        return intents;
    }
    let Some(matched) = evaluation.matched() else {
        return intents;
    };
    // Most requests find nothing to tell: they cost nothing more.
    let finding = match &matched.settled {
        Settled::Compared(_) => evaluation.is_violation(),
        Settled::BeingDeleted => false,
        _ => true,
    };
    if !finding && !matches!(matched.bypass, Some(Err(_))) {
        return intents;
    }
    let (Some(old), Some(new)) = (&request.old_object, &request.object) else {
        return intents;
    };
    let (old, new) = (old.node(), new.node());
    let rule = matched.winner.rule;
    let rule_id = rule.id.to_string();
    let user = request.user_info.username.as_str();
    let Some(regarding) = regarding(request, new) else {
        return intents;
    };
    let base = |type_, reason, action, note: String, record: Option<(Why, RecordedEdit)>| Intent {
        regarding: regarding.clone(),
        type_,
        reason,
        action,
        note: Note::Latest(note),
        user: user.to_owned(),
        rule: rule_id.clone(),
        record,
        bypass: None,
        distinct: None,
        memory: None,
        at,
    };
    let edit = |fields: Vec<RecordedField>, fields_omitted: u32| {
        let stamp = drift_engine::managed::request_entry(old, new);
        RecordedEdit {
            seen: drift_engine::time::format_rfc3339(at),
            manager: stamp.as_ref().map(|s| s.manager.clone()),
            time: stamp.and_then(|s| s.time),
            fields,
            fields_omitted,
        }
    };
    match &matched.settled {
        Settled::Bypassed(bypass) => {
            let value = matched.bypass_value.as_deref().unwrap_or_default();
            let before = old
                .get("metadata")
                .and_then(|m| m.get("annotations"))
                .and_then(|a| a.get(&rule.bypass))
                .and_then(Node::as_str);
            let set_here = before.as_deref() != Some(value);
            let why = Why::Bypass {
                end: bypass.end.map(drift_engine::time::format_rfc3339_seconds),
                set_by: set_here.then(|| drift_engine::attribution::bounded_user(user)),
            };
            let note = format!(
                "{user} edited this object under annotation {} ({bypass}); rule {rule_id} did not judge the edit",
                rule.bypass
            );
            let mut intent = base(
                EventType::Normal,
                reason::BYPASS_USED,
                "Allow",
                note,
                Some((why, edit(Vec::new(), 0))),
            );
            // Whether the annotation was rewritten since the edit that set it was seen is told
            // by its managedFields owner (reference §8 step 1): read for bypassed edits only.
            let owner = |object| {
                drift_engine::managed::annotation_owner(object, &rule.bypass)
                    .map(drift_engine::managed::AnnotationOwner::into_owned)
            };
            intent.bypass = Some(BypassSeen {
                value: value.to_owned(),
                set_here,
                owner: owner(new),
                owner_before: if set_here { None } else { owner(old) },
            });
            intents.push(intent);
        }
        Settled::UserExempt | Settled::UserNotInScope | Settled::ModeOff => {
            let (why, because) = match &matched.settled {
                Settled::UserExempt => (Why::ExemptUser, "the user is exempt (exemptUsers)"),
                Settled::UserNotInScope => {
                    (Why::UserNotInScope, "the rule's users do not list the user")
                }
                _ => (Why::ModeOff, "the effective mode is off"),
            };
            let note = format!(
                "{user} edited this object; rule {rule_id} did not compare the edit: {because}"
            );
            intents.push(base(
                EventType::Normal,
                reason::EDIT_NOT_COMPARED,
                "Allow",
                note,
                Some((why, edit(Vec::new(), 0))),
            ));
        }
        Settled::BeingDeleted | Settled::Compared(_) => {}
    }
    if let Some(Err(refusal)) = &matched.bypass
        && !matches!(matched.settled, Settled::Bypassed(_))
    {
        let note = format!(
            "annotation {} on this object is no bypass: {refusal}; rule {rule_id} judged {user}'s edit ({})",
            rule.bypass,
            evaluation.verdict().map_or("allowed", Verdict::as_str)
        );
        intents.push(base(
            EventType::Warning,
            reason::BYPASS_NOT_HONOURED,
            "Judge",
            note,
            None,
        ));
    }
    let Some(verdict) = evaluation.verdict() else {
        return intents;
    };
    let uncovered: Vec<_> = evaluation.changes().iter().filter(|c| !c.mutable).collect();
    let mut shown: Vec<String> = uncovered
        .iter()
        .take(MAX_NOTED_CHANGES)
        .map(|c| c.text())
        .collect();
    if uncovered.len() > MAX_NOTED_CHANGES {
        shown.push(format!("… ({} more)", uncovered.len() - MAX_NOTED_CHANGES));
    }
    let shown = shown.join("; ");
    match verdict {
        Verdict::Warned | Verdict::WouldDeny => {
            let (why, reason, mode) = if verdict == Verdict::Warned {
                (
                    Why::WarnMode,
                    reason::DRIFT_WARNED,
                    "warn mode: allowed with a warning",
                )
            } else {
                (
                    Why::DryRunMode,
                    reason::DRIFT_DRY_RUN,
                    "dry-run mode: would deny",
                )
            };
            let fields: Vec<RecordedField> = uncovered
                .iter()
                .filter(|c| c.path.len() <= MAX_PATH_BYTES)
                .take(MAX_RECORDED_FIELDS)
                .map(|c| RecordedField {
                    path: c.path.clone(),
                    new: fingerprint(value_at(new, c.change.path.segments())),
                })
                .collect();
            let omitted = u32::try_from(uncovered.len() - fields.len()).unwrap_or(u32::MAX);
            let note =
                format!("{user} changed fields rule {rule_id} does not allow ({mode}): {shown}");
            intents.push(base(
                EventType::Warning,
                reason,
                "Allow",
                note,
                Some((why, edit(fields, omitted))),
            ));
        }
        // Only a rule read from a ConfigMap (no file, not the built-in rule) has one to regard.
        Verdict::Denied if rule.origin.is_none() => {
            let last = format!(
                "{} {}/{} by {user}: {shown}",
                regarding.kind, regarding.namespace, regarding.name
            );
            intents.push(Intent {
                regarding: Regarding {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    namespace: rule.id.namespace.clone(),
                    name: rule.id.name.clone(),
                    uid: String::new(),
                },
                type_: EventType::Warning,
                reason: reason::DRIFT_DENIED,
                action: "Deny",
                note: Note::Counted {
                    what: "edits this rule denied",
                    last,
                },
                user: String::new(),
                rule: rule_id.clone(),
                record: None,
                bypass: None,
                distinct: None,
                memory: None,
                at,
            });
        }
        Verdict::Denied | Verdict::Allowed => {}
    }
    intents
}

/// The object an Event of `request` regards: the edited object (for `/scale`, the scaled one,
/// whose uid the Scale carries).
fn regarding<'v, O, N: Node<'v>>(request: &AdmissionRequest<O>, new: N) -> Option<Regarding> {
    let target = target_of(request)?;
    let (group, version) = if target.scale {
        (&request.resource.group, &request.resource.version)
    } else {
        (&request.kind.group, &request.kind.version)
    };
    let api_version = if group.is_empty() {
        version.clone()
    } else {
        format!("{group}/{version}")
    };
    let uid = new
        .get("metadata")
        .and_then(|m| m.get("uid"))
        .and_then(Node::as_str)?
        .into_owned();
    Some(Regarding {
        api_version,
        kind: target.kind.into_owned(),
        namespace: request.namespace().to_owned(),
        name: request.name().to_owned(),
        uid,
    })
}

#[cfg(test)]
#[path = "admission_tests.rs"]
mod tests;
