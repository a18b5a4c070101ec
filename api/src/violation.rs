//! The violation record (reference §7, `docs/export.md`): one JSON object per violation, one line of
//! an export file, one line of the admin `/violations` stream — the same type for admission
//! (`violation_admission`) and audit (`violation_audited`) records. The agent builds records
//! that borrow from the request ([`Cow::Borrowed`]); the plugin reads owned ones.
//!
//! Also the `/violations` query (`source`, `since`, `follow`).

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `eventType` of admission records.
pub const ADMISSION_EVENT: &str = "violation_admission";
/// `eventType` of audit records.
pub const AUDIT_EVENT: &str = "violation_audited";
/// `eventType` of the audit's records of bypassed objects (reference §8 step 1).
pub const BYPASS_EVENT: &str = "bypass";
/// A change's `old`/`new` stays a JSON value when its compact encoding is at most this many
/// bytes; otherwise it becomes a string cut to this many bytes (ending in `…`).
pub const MAX_CHANGE_VALUE_BYTES: usize = 256;
/// A record's `details` carry at most this many changes (and as many paths), with the totals; the
/// engine's texts list as many.
pub const MAX_DETAILED_CHANGES: usize = 100;

/// One violation. Read leniently — a field that is missing takes its default — so that a
/// record of another agent version, with more or fewer fields, is still shown.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ViolationRecord<'a> {
    /// [`ADMISSION_EVENT`] or [`AUDIT_EVENT`].
    pub event_type: Cow<'a, str>,
    /// The admission request's uid, or the audit run's id.
    pub id: Cow<'a, str>,
    /// When the request was judged or the object audited (RFC 3339, UTC, microseconds).
    pub timestamp: Cow<'a, str>,
    /// The request's fields; absent from audit records (no request, no requesting user).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub request: Option<RequestFields<'a>>,
    /// The resource's plural name (`deployments`).
    pub resource: Cow<'a, str>,
    /// `scale`, or empty.
    #[serde(default)]
    pub sub_resource: Cow<'a, str>,
    #[serde(rename = "resourceAPIVersion")]
    pub resource_api_version: Cow<'a, str>,
    pub resource_kind: Cow<'a, str>,
    #[serde(default)]
    pub resource_namespace: Cow<'a, str>,
    pub resource_name: Cow<'a, str>,
    /// Labels of the object (after the change, for admission).
    #[serde(default)]
    pub resource_labels: Cow<'a, Map<String, Value>>,
    pub rule_name: Cow<'a, str>,
    pub rule_namespace: Cow<'a, str>,
    /// The effective mode: `enforce`, `warn` or `dry-run`.
    pub mode: Cow<'a, str>,
    /// What the webhook did (or would do): `deny`, `warn` or `dryrun`.
    pub enforcement_action: Cow<'a, str>,
    /// The message the webhook returned, warned or logged (for audit: the reason).
    pub message: Cow<'a, str>,
    pub details: Details<'a>,
    /// The bypass annotation the audit found ([`BYPASS_EVENT`] records only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bypass: Option<BypassFields<'a>>,
    /// The audit's records: who made each drifted field's live value and why it got through
    /// (reference §8 "Who and why"), the first [`MAX_DETAILED_CHANGES`] drifted fields.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub who: Vec<crate::events::FieldAttribution>,
}

/// A bypass annotation as the audit found it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BypassFields<'a> {
    /// `none` (honoured, no end), `active`, `expired` or `not-honoured`.
    pub end_state: Cow<'a, str>,
    /// The end the value names (RFC 3339), when it names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end: Option<Cow<'a, str>>,
    /// The annotation's value, cut to 64 characters.
    pub value: Cow<'a, str>,
    /// The field manager that set it (managedFields name managers, not users), and since when;
    /// both absent where they are not known (an admission request carries no managedFields of
    /// the old object's annotation worth trusting, so the webhook's record leaves them out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set_by: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<Cow<'a, str>>,
    /// The user who set it, from the webhook's record of that edit (the audit in a cluster with
    /// Events); absent when not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<Cow<'a, str>>,
    /// Why the user is not known, when the audit looked for it; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_unknown: Option<Cow<'a, str>>,
}

/// The fields only an admission request has.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestFields<'a> {
    pub operation: Cow<'a, str>,
    pub dry_run: bool,
    pub user_name: Cow<'a, str>,
    #[serde(rename = "userUID")]
    pub user_uid: Cow<'a, str>,
    pub user_groups: Cow<'a, [String]>,
}

/// The changed paths of a violation, at most [`MAX_DETAILED_CHANGES`] of each, with totals.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Details<'a> {
    /// Uncovered paths, byte order, without repeats.
    pub denied_paths: Vec<Cow<'a, str>>,
    /// Every changed path (covered or not), byte order.
    pub changed_paths: Vec<Cow<'a, str>>,
    /// Each denied path with its values (and, for imperative edits found by the audit, who).
    pub changes: Vec<ChangeRecord<'a>>,
    /// How many paths were denied in all (more than `deniedPaths` holds when cut).
    #[serde(default)]
    pub denied_count: usize,
    /// How many paths changed in all.
    #[serde(default)]
    pub changed_count: usize,
}

/// One denied path with its values: the JSON values themselves (a number stays a number) when
/// their compact encoding is at most [`MAX_CHANGE_VALUE_BYTES`], else a string cut to that many
/// bytes ending in `…` and `truncated: true`. A side that is absent is omitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangeRecord<'a> {
    pub path: Cow<'a, str>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old: Option<Cow<'a, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new: Option<Cow<'a, Value>>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// The field manager of an imperative edit (audit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager: Option<Cow<'a, str>>,
    /// When the manager last changed the field, when managedFields says (audit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Cow<'a, str>>,
}

impl ViolationRecord<'_> {
    /// Parses one NDJSON line; `None` for a line that is not a record (not a JSON object, or a
    /// field of the wrong type).
    pub fn parse(line: &str) -> Option<ViolationRecord<'static>> {
        serde_json::from_str(line).ok()
    }

    /// Which export the record comes from.
    pub fn source(&self) -> Option<Source> {
        match self.event_type.as_ref() {
            ADMISSION_EVENT => Some(Source::Webhook),
            AUDIT_EVENT => Some(Source::Audit),
            _ => None,
        }
    }

    /// The record's time, when its `timestamp` is RFC 3339.
    pub fn time(&self) -> Option<SystemTime> {
        parse_rfc3339(&self.timestamp)
    }

    /// `namespace/name` of the object, or `name` for a cluster-scoped resource.
    pub fn object(&self) -> String {
        join_namespaced(&self.resource_namespace, &self.resource_name)
    }

    /// `namespace/name` of the rule.
    pub fn rule(&self) -> String {
        join_namespaced(&self.rule_namespace, &self.rule_name)
    }

    /// The requesting user (empty for audit records).
    pub fn user_name(&self) -> &str {
        self.request.as_ref().map_or("", |r| &r.user_name)
    }

    /// The values of a denied path, when the record carries them.
    pub fn change(&self, path: &str) -> Option<&ChangeRecord<'_>> {
        self.details.changes.iter().find(|c| c.path == path)
    }

    /// The record as one JSON line's content (no newline).
    pub fn encode(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }
}

fn join_namespaced(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_owned()
    } else {
        format!("{namespace}/{name}")
    }
}

/// Which export a record comes from, as `?source=` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Webhook,
    Audit,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Webhook => "webhook",
            Source::Audit => "audit",
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Source {
    type Err = QueryError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "webhook" => Ok(Source::Webhook),
            "audit" => Ok(Source::Audit),
            other => Err(QueryError(format!(
                "source must be webhook or audit, not {other:?}"
            ))),
        }
    }
}

/// `GET /violations?source=webhook|audit&since=RFC3339&follow=true`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ViolationsQuery {
    /// Only records of this source.
    pub source: Option<Source>,
    /// Only records at or after this time.
    pub since: Option<SystemTime>,
    /// Keep the stream open and send new records as they are written.
    pub follow: bool,
}

/// How an admin API's `GET /violations` answer begins when the process exports nothing (404: it
/// never will until it is restarted with export on), so that a client gives up instead of
/// asking again; a 503 means export is on but has nothing to read from yet.
pub const EXPORT_NOT_ENABLED: &str = "violation export is not enabled";

/// A `/violations` query that cannot be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct QueryError(pub String);

/// The parameters of [`ViolationsQuery`], for error messages.
const PARAMETERS: &str = "follow, source and since";

impl ViolationsQuery {
    /// Parses the query string of a `/violations` request: `follow=true|false` (a bare
    /// `follow` means true), `source=webhook|audit`, `since=<RFC 3339>`. Values are
    /// percent-decoded, but `+` stays a plus sign (not a space), so that
    /// `since=2027-01-15T09:00:00+01:00` can be typed as is. Unknown or repeated parameters
    /// are errors.
    pub fn parse(query: Option<&str>) -> Result<Self, QueryError> {
        let query = query.unwrap_or("").replace('+', "%2B");
        let mut parsed = Self::default();
        let mut seen: Vec<String> = Vec::new();
        for (name, value) in form_urlencoded::parse(query.as_bytes()) {
            let invalid = |allowed: &str| {
                QueryError(format!(
                    "invalid value {value:?} for query parameter {name}: {allowed}"
                ))
            };
            match name.as_ref() {
                "follow" => {
                    parsed.follow = match value.as_ref() {
                        "" | "true" => true,
                        "false" => false,
                        _ => return Err(invalid("the values are true and false")),
                    }
                }
                "source" => {
                    parsed.source = Some(match value.as_ref() {
                        "webhook" => Source::Webhook,
                        "audit" => Source::Audit,
                        _ => return Err(invalid("the values are webhook and audit")),
                    })
                }
                "since" => {
                    let time = parse_rfc3339(&value).ok_or_else(|| {
                        invalid("expected an RFC 3339 time such as 2027-01-15T08:00:00Z")
                    })?;
                    parsed.since = Some(time);
                }
                other => {
                    return Err(QueryError(format!(
                        "unknown query parameter {other:?}: the parameters are {PARAMETERS}"
                    )));
                }
            }
            if seen.iter().any(|s| *s == name) {
                return Err(QueryError(format!(
                    "query parameter {name} is given more than once"
                )));
            }
            seen.push(name.into_owned());
        }
        Ok(parsed)
    }

    /// The query string (without `?`), for a client.
    pub fn to_query_string(&self) -> String {
        let mut pairs: Vec<(&str, String)> = Vec::new();
        if let Some(source) = self.source {
            pairs.push(("source", source.as_str().to_owned()));
        }
        if let Some(since) = self.since {
            pairs.push(("since", format_rfc3339(since)));
        }
        if self.follow {
            pairs.push(("follow", "true".to_owned()));
        }
        form_urlencoded::Serializer::new(String::new())
            .extend_pairs(pairs)
            .finish()
    }
}

pub use crate::time::{format_rfc3339, parse_rfc3339};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn admission() -> ViolationRecord<'static> {
        ViolationRecord {
            event_type: ADMISSION_EVENT.into(),
            id: "u-1".into(),
            timestamp: "2026-07-28T12:00:00.000001Z".into(),
            request: Some(RequestFields {
                operation: "UPDATE".into(),
                dry_run: false,
                user_name: "alice".into(),
                user_uid: "a-1".into(),
                user_groups: Cow::Owned(vec!["dev".into()]),
            }),
            resource: "deployments".into(),
            sub_resource: "".into(),
            resource_api_version: "apps/v1".into(),
            resource_kind: "Deployment".into(),
            resource_namespace: "shop".into(),
            resource_name: "web".into(),
            resource_labels: Cow::Owned(json!({"app": "web"}).as_object().cloned().unwrap()),
            rule_name: "r".into(),
            rule_namespace: "ops".into(),
            mode: "enforce".into(),
            enforcement_action: "deny".into(),
            message: "Drift Sentinel: immutable fields changed: spec.replicas; …".into(),
            details: Details {
                denied_paths: vec!["spec.replicas".into()],
                changed_paths: vec!["spec.replicas".into()],
                changes: vec![ChangeRecord {
                    path: "spec.replicas".into(),
                    old: None,
                    new: None,
                    truncated: false,
                    manager: None,
                    time: None,
                }],
                denied_count: 1,
                changed_count: 1,
            },
            bypass: None,
            who: Vec::new(),
        }
    }

    #[test]
    fn records_round_trip() {
        let mut record = admission();
        record.details.changes = vec![ChangeRecord {
            old: Some(Cow::Owned(json!(2))),
            new: Some(Cow::Owned(json!(5))),
            ..record.details.changes[0].clone()
        }];
        let line = String::from_utf8(record.encode().unwrap()).unwrap();
        // A violation record has no bypass field.
        assert!(!line.contains("bypass"), "{line}");
        let parsed = ViolationRecord::parse(&line).expect("parses");
        assert_eq!(parsed, record);
        assert_eq!(parsed.source(), Some(Source::Webhook));
        assert_eq!(parsed.object(), "shop/web");
        assert_eq!(parsed.rule(), "ops/r");
        assert_eq!(parsed.user_name(), "alice");
        // Numbers stay numbers.
        let value: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["details"]["changes"][0]["old"], 2);
        assert_eq!(value["userName"], "alice");
        assert!(value["details"]["changes"][0].get("truncated").is_none());

        let mut audit = admission();
        audit.event_type = AUDIT_EVENT.into();
        audit.request = None;
        let line = String::from_utf8(audit.encode().unwrap()).unwrap();
        let value: Value = serde_json::from_str(&line).unwrap();
        assert!(value.get("userName").is_none(), "{value}");
        let parsed = ViolationRecord::parse(&line).expect("parses");
        assert_eq!(parsed, audit);
        assert_eq!(parsed.source(), Some(Source::Audit));

        // Lenient about missing fields, not about what is not a record.
        let sparse = ViolationRecord::parse(r#"{"id":"7","details":{"deniedPaths":["a"]}}"#)
            .expect("parses");
        assert_eq!(sparse.id, "7");
        assert_eq!(sparse.details.denied_paths, ["a"]);
        assert_eq!(sparse.source(), None);
        assert_eq!(sparse.time(), None);
        assert!(ViolationRecord::parse("[1,2]").is_none());
        assert!(ViolationRecord::parse("not json").is_none());
        assert!(ViolationRecord::parse(r#"{"id":7}"#).is_none());
    }

    #[test]
    fn queries() {
        assert_eq!(
            ViolationsQuery::parse(None).unwrap(),
            ViolationsQuery::default()
        );
        assert_eq!(
            ViolationsQuery::parse(Some("")).unwrap(),
            ViolationsQuery::default()
        );
        let query =
            ViolationsQuery::parse(Some("follow=true&source=audit&since=2027-01-15T08:00:00Z"))
                .unwrap();
        assert!(query.follow);
        assert_eq!(query.source, Some(Source::Audit));
        assert_eq!(query.since, parse_rfc3339("2027-01-15T08:00:00Z"));
        // The last second RFC 3339 writes, read and written back as it is.
        let last = ViolationsQuery::parse(Some("since=9999-12-31T23:59:59Z")).unwrap();
        let since = last.since.expect("since");
        assert_eq!(format_rfc3339(since), "9999-12-31T23:59:59.000000Z");
        assert!(
            last.to_query_string()
                .contains("since=9999-12-31T23%3A59%3A59.000000Z"),
            "{}",
            last.to_query_string()
        );
        assert!(ViolationsQuery::parse(Some("follow")).unwrap().follow);
        assert!(!ViolationsQuery::parse(Some("follow=false")).unwrap().follow);
        let same_time = [
            "since=2027-01-15t08:00:00z",
            "since=2027-01-15T03:00:00-05:00",
            // `+` stays a plus sign, escaped or not.
            "since=2027-01-15T09:00:00+01:00",
            "since=2027-01-15T09:00:00%2B01:00",
        ];
        for text in same_time {
            assert_eq!(
                ViolationsQuery::parse(Some(text)).unwrap().since,
                query.since,
                "{text}"
            );
        }
        let round = ViolationsQuery::parse(Some(&query.to_query_string())).unwrap();
        assert_eq!(round, query);

        let error = |q: &str| ViolationsQuery::parse(Some(q)).unwrap_err().0;
        let cases: &[(&str, &[&str])] = &[
            ("follow=yes", &["follow", "true and false"]),
            ("source=admission", &["source", "webhook and audit"]),
            ("source", &["source", "webhook and audit"]),
            ("since=yesterday", &["since", "RFC 3339"]),
            ("since=2027-01-15T08:00:00", &["since"]),
            ("since=2027-01-15T08:00:00+25:00", &["since"]),
            ("since=%zz", &["since"]),
            ("since=%", &["since"]),
            ("source=%ff", &["source"]),
            ("limit=10", &["limit", "follow, source and since"]),
            ("follow=true&follow=false", &["follow", "more than once"]),
        ];
        for (query, fragments) in cases {
            let e = error(query);
            for fragment in *fragments {
                assert!(e.contains(fragment), "{query}: {e}");
            }
        }
    }
}
