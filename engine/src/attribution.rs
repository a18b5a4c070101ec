//! Who made a drifted field's live value, and why the webhook let that edit through (reference §8
//! "Who and why"). The webhook records each edit it lets through with a finding — warned, in a
//! dry-run, under a bypass, from an exempt user, in mode `off` — as an [`EditRecord`] (carried by
//! its Event on the object, reference §6 "Events"); the audit joins a drifted field with those
//! records by the object's uid, the field's path and its live value (a fingerprint of it) and
//! the managedFields entry that owns the field now. Pure: the records, what an earlier run
//! remembered, the webhook configuration's verdict ([`crate::webhook_scope`]) and since when the
//! records have been read are passed in.
//!
//! A user is named only from a record of the edit that made the live value. Anything else says
//! why the user is not known ([`Why::NotSeen`], [`Why::OutsideWebhook`], [`Why::Unknown`]): the
//! join never guesses.

use std::time::{Duration, SystemTime};

use serde_json::Value;
use sha2::Digest as _;

pub use drift_api::events::{
    Attribution, EditRecord, MAX_RECORDED_EDITS, MAX_RECORDED_FIELDS, MAX_USER_BYTES,
    RECORD_VERSION, RecordedEdit, RecordedField, Remembered, Why,
};

use crate::json::{Node, Shape};
use crate::managed::OwnedField;
use crate::path::{FieldPath, PathSegment};
use crate::webhook_scope::Interception;

/// A recorded path longer than this is left out (counted): real field paths are far shorter.
pub const MAX_PATH_BYTES: usize = 512;
/// A value whose canonical form is longer than this gets no fingerprint; its edit is then joined
/// by its managedFields entry alone.
pub const MAX_FINGERPRINTED_BYTES: usize = 64 * 1024;
/// An edit newer than this at the time the records were last read may not have its record
/// written yet (the webhook writes Events a few seconds after its answer): not "not seen".
pub const RECORD_GRACE: Duration = Duration::from_secs(30);

/// `user` as records and reports keep it: whole up to [`MAX_USER_BYTES`], otherwise its first
/// bytes (on a character boundary) and `…(cut from N bytes)`.
pub fn bounded_user(user: &str) -> String {
    if user.len() <= MAX_USER_BYTES {
        return user.to_owned();
    }
    let marker = format!("…(cut from {} bytes)", user.len());
    let mut end = MAX_USER_BYTES.saturating_sub(marker.len());
    while !user.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{marker}", &user[..end])
}

/// A fingerprint of a JSON value, the same for a parsed document and the text of a review:
/// `sha256:` and the first 32 hex digits of the SHA-256 of its canonical form (object keys in
/// byte order, numbers as read). `Some("absent")` for no value; `None` when the canonical form
/// is longer than [`MAX_FINGERPRINTED_BYTES`].
pub fn fingerprint<'v, N: Node<'v>>(value: Option<N>) -> Option<String> {
    let Some(value) = value.filter(|v| !v.is_absent()) else {
        return Some(ABSENT.to_owned());
    };
    let mut canonical = Canonical {
        hasher: sha2::Sha256::new(),
        written: 0,
    };
    canonical.value(value).ok()?;
    let digest = canonical.hasher.finalize();
    let mut text = String::with_capacity(7 + 32);
    text.push_str("sha256:");
    crate::hex::push_hex(&mut text, &digest[..16]);
    Some(text)
}

/// The fingerprint of no value.
pub const ABSENT: &str = "absent";

struct TooLong;

/// The canonical form of a value, written into a hash with a byte budget.
struct Canonical {
    hasher: sha2::Sha256,
    written: usize,
}

impl Canonical {
    fn write(&mut self, bytes: &[u8]) -> Result<(), TooLong> {
        self.written += bytes.len();
        if self.written > MAX_FINGERPRINTED_BYTES {
            return Err(TooLong);
        }
        self.hasher.update(bytes);
        Ok(())
    }

    fn string(&mut self, text: &str) -> Result<(), TooLong> {
        self.write(format!("s{}:", text.len()).as_bytes())?;
        self.write(text.as_bytes())
    }

    fn value<'v, N: Node<'v>>(&mut self, value: N) -> Result<(), TooLong> {
        crate::nesting::guarded(|| match value.shape() {
            Shape::Null => self.write(b"n"),
            Shape::Bool => self.write(if value.as_bool() == Some(true) {
                b"t"
            } else {
                b"f"
            }),
            Shape::Number => {
                let number = match value.to_value().as_ref() {
                    Value::Number(n) => n.to_string(),
                    _ => String::new(),
                };
                self.write(format!("#{number};").as_bytes())
            }
            Shape::String => self.string(&value.as_str().unwrap_or_default()),
            Shape::Array => {
                self.write(b"[")?;
                for item in value.items().into_iter().flatten() {
                    self.value(item)?;
                }
                self.write(b"]")
            }
            Shape::Object => {
                use crate::json::MapView as _;
                self.write(b"{")?;
                let Some(map) = value.as_map() else {
                    return self.write(b"}");
                };
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                for (key, item) in entries {
                    self.string(&key)?;
                    self.value(item)?;
                }
                self.write(b"}")
            }
        })
    }
}

/// The value at `path` in a document, if there is one.
pub fn value_at<'v, N: Node<'v>>(object: N, path: &[PathSegment]) -> Option<N> {
    path.iter()
        .try_fold(object, |value, segment| match segment {
            PathSegment::Key(key) => value.get(key),
            PathSegment::Index(index) => value.items()?.nth(*index),
        })
}

/// Since when the webhook's records have been read without a gap, and when last: an edit made
/// in between whose record is not found was not seen by the webhook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coverage {
    pub since: SystemTime,
    pub read_at: SystemTime,
}

/// The most bytes of why the webhook's records could not be read that an attribution carries.
pub const MAX_UNREAD_REASON_BYTES: usize = 256;

/// Why no user is known when the webhook's records could not be read (`reason`: the read's
/// error, e.g. more than [`drift_api::events::MAX_RECORDS`] of them), bounded.
pub fn records_unread(reason: &str) -> String {
    format!(
        "the webhook's records of edits could not be read: {}",
        crate::truncate::truncate_bytes(reason, MAX_UNREAD_REASON_BYTES)
    )
}

/// What the audit knows of an object besides the object: the webhook's records of it, what
/// earlier runs attributed, whether the webhook is sent its UPDATEs, and since when records
/// have been read (`Err`: why they could not be read, or that the webhook writes none).
#[derive(Debug, Clone, Copy)]
pub struct Evidence<'a> {
    /// The records signed with the installation's key.
    pub records: &'a [EditRecord],
    /// The records that did not verify: never used to name a user.
    pub unverified: Unverified<'a>,
    pub remembered: &'a [Remembered],
    pub interception: &'a Interception,
    pub coverage: Result<Coverage, &'a str>,
}

/// The records of an object that did not verify (unsigned, another key's, altered, copied from
/// another object), and why they name no user: a field whose live value one of them claims is
/// told so, not "not seen" (a forged record is no absent one).
#[derive(Debug, Clone, Copy, Default)]
pub struct Unverified<'a> {
    pub records: &'a [EditRecord],
    pub why: &'a str,
}

/// An attribution and the fingerprint of the live value it is about (what [`Remembered`] keeps).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributed {
    pub attribution: Attribution,
    pub value: Option<String>,
}

impl Attributed {
    /// What a later run may reuse: attributions taken from a record, with the value they are
    /// about; the audit's own conclusions are drawn again each run.
    pub fn remember(&self, path: &FieldPath) -> Option<Remembered> {
        if !self.attribution.why.is_recorded() {
            return None;
        }
        Some(Remembered {
            path: path.to_string(),
            value: self.value.clone()?,
            attribution: self.attribution.clone(),
        })
    }
}

/// An attribution without a user, and why.
fn unknown(why: Why) -> Attribution {
    Attribution {
        user: None,
        why,
        rule: None,
        seen: None,
    }
}

/// Who made the live value at `path` of `object` and why it got through. `owned`: the object's
/// managedFields ([`crate::managed::owned_fields`]).
///
/// 1. The records of the object whose edits changed the field (the path, a part of it or a whole
///    it is part of): the latest decides. When its recorded values are the live ones, it made
///    them: its user and why. When they are not, a later edit the webhook has no record of made
///    them: not seen. A record without fields (a bypassed, exempt or `off` edit) counts only when
///    its managedFields entry is exactly the one that owns the field now, and only when no record
///    with fields explains the value.
/// 2. Without such a record: what an earlier run attributed to the same live value.
/// 3. Otherwise the user is not known, and why: outside what the webhook intercepts, not seen
///    (an edit made while the records have been read, its time known), or unknown.
pub fn attribute(
    object: &Value,
    path: &FieldPath,
    owned: &[OwnedField<'_>],
    evidence: &Evidence<'_>,
) -> Attributed {
    let owner = crate::managed::owner_of(owned, path.segments());
    let value = fingerprint(value_at(object, path.segments()));
    let attributed = |attribution| Attributed {
        attribution,
        value: value.clone(),
    };
    let found = from_records(object, path, owner, evidence.records);
    if let Some(found) = found.as_ref().filter(|f| f.user.is_some()) {
        return attributed(found.clone());
    }
    if claims(object, path, owner, evidence.unverified.records) {
        return attributed(unknown(Why::Unknown {
            detail: evidence.unverified.why.to_owned(),
        }));
    }
    if let Some(found) = found {
        return attributed(found);
    }
    let text = path.to_string();
    if let Some(remembered) = evidence
        .remembered
        .iter()
        .find(|r| r.path == text && value.as_deref() == Some(r.value.as_str()))
    {
        return attributed(remembered.attribution.clone());
    }
    attributed(unknown(unrecorded(owner, evidence)))
}

/// [`attribute`] for each drifted field of an audited object (a change `mutable` does not
/// cover), the first `max` of them: what the audit and `kubectl drift blame` report.
pub fn attribute_drift<'c, 'a>(
    object: &Value,
    changes: &'c [crate::evaluation::JudgedChange<'a>],
    evidence: &Evidence<'_>,
    max: usize,
) -> Vec<(&'c crate::evaluation::JudgedChange<'a>, Attributed)> {
    let owned = crate::managed::owned_fields(object);
    changes
        .iter()
        .filter(|c| !c.mutable)
        .take(max)
        .map(|change| {
            (
                change,
                attribute(object, &change.change.path, &owned, evidence),
            )
        })
        .collect()
}

/// Step 1 of [`attribute`].
fn from_records(
    object: &Value,
    path: &FieldPath,
    owner: Option<&OwnedField<'_>>,
    records: &[EditRecord],
) -> Option<Attribution> {
    let segments = path.segments();
    let mut latest: Option<(&EditRecord, &RecordedEdit, bool)> = None;
    let mut stamped: Option<(&EditRecord, &RecordedEdit)> = None;
    for record in records {
        for edit in &record.edits {
            if edit.fields.is_empty() {
                let same_entry = owner.is_some_and(|o| {
                    o.time.is_some()
                        && edit.manager.as_deref() == Some(o.manager)
                        && edit.time.as_deref() == o.time
                });
                if same_entry && stamped.is_none_or(|(_, s)| s.seen < edit.seen) {
                    stamped = Some((record, edit));
                }
                continue;
            }
            let related: Vec<(FieldPath, &RecordedField)> = edit
                .fields
                .iter()
                .filter_map(|f| Some((FieldPath::parse(&f.path)?, f)))
                .filter(|(p, _)| {
                    p.segments().starts_with(segments) || segments.starts_with(p.segments())
                })
                .collect();
            if related.is_empty() || latest.is_some_and(|(_, l, _)| l.seen >= edit.seen) {
                continue;
            }
            let explains = related.iter().all(|(p, field)| match &field.new {
                Some(new) => fingerprint(value_at(object, p.segments())).as_ref() == Some(new),
                // Too long to fingerprint: only its own managedFields entry can say.
                None => owner.is_some_and(|o| {
                    o.time.is_some()
                        && edit.manager.as_deref() == Some(o.manager)
                        && edit.time.as_deref() == o.time
                }),
            });
            latest = Some((record, edit, explains));
        }
    }
    match (latest, stamped) {
        (Some((record, edit, true)), _) => Some(from_record(record, edit)),
        (_, Some((record, edit))) => Some(from_record(record, edit)),
        (Some((_, _, false)), None) => Some(unknown(Why::NotSeen)),
        (None, None) => None,
    }
}

/// Whether one of `records` (that did not verify) claims the live value at `path`: an edit of
/// the field (or a part or a whole of it) whose recorded values are the live ones, or an edit
/// without fields whose managedFields entry is the one owning the field now.
fn claims(
    object: &Value,
    path: &FieldPath,
    owner: Option<&OwnedField<'_>>,
    records: &[EditRecord],
) -> bool {
    let segments = path.segments();
    let same_entry = |edit: &RecordedEdit| {
        owner.is_some_and(|o| {
            o.time.is_some()
                && edit.manager.as_deref() == Some(o.manager)
                && edit.time.as_deref() == o.time
        })
    };
    records.iter().flat_map(|r| &r.edits).any(|edit| {
        if edit.fields.is_empty() {
            return same_entry(edit);
        }
        let mut related = edit
            .fields
            .iter()
            .filter_map(|f| Some((FieldPath::parse(&f.path)?, f)))
            .filter(|(p, _)| {
                p.segments().starts_with(segments) || segments.starts_with(p.segments())
            })
            .peekable();
        related.peek().is_some()
            && related.all(|(p, field)| match &field.new {
                Some(new) => fingerprint(value_at(object, p.segments())).as_ref() == Some(new),
                None => same_entry(edit),
            })
    })
}

fn from_record(record: &EditRecord, edit: &RecordedEdit) -> Attribution {
    Attribution {
        user: Some(record.user.clone()),
        why: record.why.clone(),
        rule: Some(record.rule.clone()),
        seen: Some(edit.seen.clone()),
    }
}

/// Who set an object's bypass annotation (reference §8 step 1): the user of the webhook's record
/// of the edit that wrote the managedFields entry owning the annotation now (`manager` at
/// `time`), when that record names who set the bypass — the edit's own user when it set it,
/// the setter the webhook remembered when a later edit under the bypass moved the entry's time.
/// `None` without such a record: never a guess.
pub fn bypass_setter<'r>(records: &'r [EditRecord], manager: &str, time: &str) -> Option<&'r str> {
    bypass_edits(records, manager)
        .filter(|(edit, _)| edit.time.as_deref() == Some(time))
        .max_by(|a, b| a.0.seen.cmp(&b.0.seen))
        .map(|(_, user)| user.as_str())
}

/// The recorded edits by `manager` under a bypass whose setter the webhook knew, with the setter.
fn bypass_edits<'r>(
    records: &'r [EditRecord],
    manager: &str,
) -> impl Iterator<Item = (&'r RecordedEdit, &'r String)> {
    records
        .iter()
        .filter_map(|record| match &record.why {
            Why::Bypass {
                set_by: Some(user), ..
            } => Some((record, user)),
            _ => None,
        })
        .flat_map(|(record, user)| record.edits.iter().map(move |edit| (edit, user)))
        .filter(move |(edit, _)| edit.manager.as_deref() == Some(manager))
}

/// Why the user who set a bypass is not known when [`bypass_setter`] finds no record of the edit
/// that wrote the annotation's managedFields entry (`manager` at `time`), from the records that
/// could be read. A record of an earlier bypass edit by the same manager is not carried over:
/// a manager's entry moves on any edit it makes, and managedFields cannot tell whether the later
/// edit, which the webhook has no record of, rewrote the annotation (or removed and set it again).
pub fn bypass_setter_unknown(records: &[EditRecord], manager: &str, time: &str) -> String {
    let owns_since = crate::time::parse_rfc3339(time);
    let earlier = bypass_edits(records, manager)
        .filter(|(edit, _)| {
            edit.time
                .as_deref()
                .and_then(crate::time::parse_rfc3339)
                .zip(owns_since)
                .is_some_and(|(recorded, owns)| recorded < owns)
        })
        .max_by(|a, b| a.0.seen.cmp(&b.0.seen));
    match earlier {
        Some((edit, user)) => format!(
            "a later edit by {manager} at {time}, which the webhook has no record of, took over the annotation's managedFields entry after {user} set the bypass ({manager} at {}); whether it rewrote the annotation cannot be told",
            edit.time.as_deref().unwrap_or_default()
        ),
        None => format!(
            "no record of the edit {manager} at {time} that owns the annotation (the webhook did not see it, or its Event expired)"
        ),
    }
}

/// Step 3 of [`attribute`]: why the user is not known.
fn unrecorded(owner: Option<&OwnedField<'_>>, evidence: &Evidence<'_>) -> Why {
    if let Interception::Outside(detail) = evidence.interception {
        return Why::OutsideWebhook {
            detail: detail.clone(),
        };
    }
    let coverage = match evidence.coverage {
        Ok(coverage) => coverage,
        Err(reason) => {
            return Why::Unknown {
                detail: records_unread(reason),
            };
        }
    };
    let Some((manager, time)) = owner.and_then(|o| Some((o.manager, o.time?))) else {
        return Why::Unknown {
            detail: "no record of this edit, and its managedFields entry has no time to tell whether the webhook would have recorded it".to_owned(),
        };
    };
    let Some(at) = crate::time::parse_rfc3339(time) else {
        return Why::Unknown {
            detail: format!("no record of this edit, and its time {time:?} cannot be read"),
        };
    };
    let since = crate::time::format_rfc3339_seconds(coverage.since);
    if at < coverage.since {
        return Why::Unknown {
            detail: format!(
                "no record of this edit ({manager} at {time}): it came before the webhook's records were read (since {since})"
            ),
        };
    }
    if at + RECORD_GRACE > coverage.read_at {
        return Why::Unknown {
            detail: format!(
                "no record of this edit ({manager} at {time}) yet: it is too recent for the webhook's record to be written"
            ),
        };
    }
    Why::NotSeen
}

#[cfg(test)]
#[path = "attribution_tests.rs"]
mod tests;
