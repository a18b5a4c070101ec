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

use drift_engine::Audit;
use drift_engine::audit::AuditedObject;
use drift_engine::evaluation::JudgedChange;
use drift_engine::json::LazyValue;
use drift_engine::rule::{CompiledRule, Mode};
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
/// A record's `details` carry at most this many changes (and as many paths), with the totals.
pub use drift_engine::message::MAX_DETAILED_CHANGES;

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

impl<'a> Details<'a> {
    /// The details of one evaluation (admission or audit): its first denied and changed paths,
    /// the uncovered changes with their values (and who made them, where the audit knows), and
    /// the counts of all.
    pub fn of(
        denied: &'a [String],
        changes: &'a [JudgedChange<'_>],
        denied_count: usize,
        changed_count: usize,
    ) -> Self {
        let first = |paths: &mut dyn Iterator<Item = &'a str>| {
            paths
                .take(MAX_DETAILED_CHANGES)
                .map(Cow::Borrowed)
                .collect::<Vec<_>>()
        };
        Details {
            denied_paths: first(&mut denied.iter().map(String::as_str)),
            changed_paths: first(&mut changes.iter().map(|c| c.path.as_str())),
            changes: changes
                .iter()
                .filter(|c| !c.mutable)
                .take(MAX_DETAILED_CHANGES)
                .map(|c| {
                    let mut record = ChangeRecord::new(
                        c.path.as_str(),
                        c.change.old.as_ref(),
                        c.change.new.as_ref(),
                    );
                    if let Some(edit) = &c.edit {
                        record.manager = Some(Cow::Borrowed(edit.manager.as_ref()));
                        record.time = edit.time.as_deref().map(Cow::Borrowed);
                    }
                    record
                })
                .collect(),
            denied_count,
            changed_count,
        }
    }
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

impl<'a> ChangeRecord<'a> {
    /// A change with both sides encoded as the record format says.
    pub fn new(
        path: impl Into<Cow<'a, str>>,
        old: Option<&'a LazyValue<'_>>,
        new: Option<&'a LazyValue<'_>>,
    ) -> Self {
        let (old, old_cut) = record_value(old);
        let (new, new_cut) = record_value(new);
        Self {
            path: path.into(),
            old,
            new,
            truncated: old_cut || new_cut,
            manager: None,
            time: None,
        }
    }
}

/// A side of a change as a record holds it, and whether it was cut. Only the first bytes of
/// the encoding are written (reference §5: a value is never built whole to be cut); a value
/// is read whole only when its encoding fits.
fn record_value<'a>(value: Option<&'a LazyValue<'_>>) -> (Option<Cow<'a, Value>>, bool) {
    let Some(value) = value else {
        return (None, false);
    };
    let encoded = value.encoded(MAX_CHANGE_VALUE_BYTES);
    if encoded.complete {
        return (Some(value.value()), false);
    }
    let ellipsis = '…';
    let mut end = MAX_CHANGE_VALUE_BYTES - ellipsis.len_utf8();
    while !encoded.text.is_char_boundary(end) {
        end -= 1;
    }
    let mut cut = encoded.text[..end].to_owned();
    cut.push(ellipsis);
    (Some(Cow::Owned(Value::String(cut))), true)
}

/// What `enforcementAction` a mode records: what the webhook does (or would do) in it.
pub fn enforcement_action(mode: Mode) -> Option<&'static str> {
    match mode {
        Mode::Enforce => Some("deny"),
        Mode::Warn => Some("warn"),
        Mode::DryRun => Some("dryrun"),
        Mode::Off => None,
    }
}

impl<'a> ViolationRecord<'a> {
    /// The `violation_audited` record of a drifted object (reference §8): `id` is the run's id, there is
    /// no request, and each change carries `old` (declared), `new` (live) and, for imperative edits,
    /// `manager` and `time`. `None` when the object did not drift (or its mode exports nothing).
    pub fn audited(
        run_id: &'a str,
        object: &AuditedObject<'a>,
        audit: &'a Audit<'a>,
        at: SystemTime,
    ) -> Option<ViolationRecord<'a>> {
        let drift = audit.drift()?;
        let mode = audit.mode()?;
        let action = enforcement_action(mode)?;
        let rule = audit.rule()?;
        let changes = audit.changes();
        let details = Details::of(
            &drift.denied,
            changes,
            drift.denied_count,
            audit.comparison().map_or(0, |c| c.changed_count),
        );
        Some(ViolationRecord {
            enforcement_action: Cow::Borrowed(action),
            message: Cow::Owned(audit.reason()),
            details,
            ..Self::of_audited(AUDIT_EVENT, run_id, object, rule, mode, at)
        })
    }

    /// The [`BYPASS_EVENT`] record of an object carrying the bypass annotation: its end, who
    /// set it and since when, and (as `message`) what it means at the run's time. `None`
    /// without the annotation.
    pub fn bypass_listed(
        run_id: &'a str,
        object: &AuditedObject<'a>,
        audit: &'a Audit<'a>,
        at: SystemTime,
    ) -> Option<ViolationRecord<'a>> {
        let finding = audit.bypass.as_ref()?;
        let rule = audit.rule()?;
        let mode = audit.mode()?;
        Some(ViolationRecord {
            enforcement_action: Cow::Borrowed(if finding.read.is_ok() {
                "bypass"
            } else {
                "none"
            }),
            message: Cow::Owned(finding.to_string()),
            details: Details::default(),
            bypass: Some(BypassFields {
                end_state: Cow::Borrowed(finding.end().as_str()),
                end: finding
                    .end_time()
                    .map(|end| Cow::Owned(drift_engine::time::format_rfc3339_seconds(end))),
                value: Cow::Owned(drift_engine::truncate::truncate_chars(&finding.value, 64)),
                set_by: finding.set_by.as_ref().map(|edit| edit.manager.clone()),
                since: finding.set_by.as_ref().and_then(|edit| edit.time.clone()),
            }),
            ..Self::of_audited(BYPASS_EVENT, run_id, object, rule, mode, at)
        })
    }

    /// What every record of an audited object says, of `event_type`: the run, its time, the
    /// object, and the rule it is judged under in `mode`. No request (an audit has none), and
    /// what was done about the object (action, message, details, bypass) left empty for the
    /// caller.
    fn of_audited(
        event_type: &'static str,
        run_id: &'a str,
        object: &AuditedObject<'a>,
        rule: &'a CompiledRule,
        mode: Mode,
        at: SystemTime,
    ) -> ViolationRecord<'a> {
        ViolationRecord {
            event_type: Cow::Borrowed(event_type),
            id: Cow::Borrowed(run_id),
            timestamp: Cow::Owned(format_rfc3339(at)),
            request: None,
            resource: Cow::Borrowed(object.resource),
            sub_resource: Cow::Borrowed(""),
            resource_api_version: Cow::Borrowed(object.api_version),
            resource_kind: Cow::Borrowed(object.kind),
            resource_namespace: Cow::Borrowed(object.namespace),
            resource_name: Cow::Borrowed(object.name),
            resource_labels: Cow::Borrowed(object.labels),
            rule_name: Cow::Borrowed(&rule.id.name),
            rule_namespace: Cow::Borrowed(&rule.id.namespace),
            mode: Cow::Borrowed(mode.as_str()),
            enforcement_action: Cow::Borrowed(""),
            message: Cow::Borrowed(""),
            details: Details::default(),
            bypass: None,
            who: Vec::new(),
        }
    }
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

pub use drift_engine::time::{format_rfc3339, parse_rfc3339};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const RULE: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n  namespace: ops\n  annotations: {drift-sentinel.k8s.io/rule: \"true\"}\ndata:\n  spec: |\n    mode: enforce\n    namespaces: [\"*\"]\n    selectors: [{apiGroup: apps, kind: Deployment}]\n";

    /// The rule set of [`RULE`], as read from its file.
    fn rules() -> drift_engine::RuleSet {
        let documents = drift_engine::manifests::parse_documents(RULE, "rule.yaml").unwrap();
        drift_engine::RuleSet::build(drift_engine::manifests::rule_sources(
            &documents,
            "rule.yaml",
        ))
    }

    #[test]
    fn a_drifted_object_as_record_text_and_count() {
        let rules = rules();
        let namespaces = drift_engine::manifests::Namespaces::new();
        let managers = vec!["kubectl".to_owned()];
        let object = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{\"replicas\":2}}"}},
            "spec": {"replicas": 5}
        });
        let audit = drift_engine::audit::audit_object(
            &rules,
            &namespaces,
            &object,
            &managers,
            SystemTime::UNIX_EPOCH,
        )
        .unwrap();
        let mut counts = crate::status::AuditCounts::default();
        counts.add(&audit);
        assert_eq!((counts.drifted, counts.total()), (1, 1));
        let identity = AuditedObject::of(&object, "deployments");
        assert_eq!(
            drift_engine::message::drift_text(&identity, &audit),
            "drifted apps/v1 Deployment shop/web (rule ops/web, enforce)\n  spec.replicas: 2 → 5\n"
        );
        let record =
            ViolationRecord::audited("run-1", &identity, &audit, SystemTime::UNIX_EPOCH).unwrap();
        assert_eq!(record.details.denied_paths, ["spec.replicas"]);
        assert_eq!(record.enforcement_action, "deny");
        assert_eq!(record.event_type, AUDIT_EVENT);
        assert_eq!(record.timestamp, "1970-01-01T00:00:00.000000Z");
    }

    #[test]
    fn a_bypassed_object_as_record_and_text() {
        let rules = rules();
        let namespaces = drift_engine::manifests::Namespaces::new();
        let now = parse_rfc3339("2026-12-04T12:00:00Z").unwrap();
        let object = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop",
                "annotations": {"drift-sentinel.k8s.io/bypass": "2026-12-04T16:00:00Z"},
                "managedFields": [{"manager": "kubectl-drift", "operation": "Update", "time": "2026-12-04T11:00:00Z",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {"f:drift-sentinel.k8s.io/bypass": {}}}}}]},
            "spec": {"replicas": 5}
        });
        let audit =
            drift_engine::audit::audit_object(&rules, &namespaces, &object, &[], now).unwrap();
        let mut counts = crate::status::AuditCounts::default();
        counts.add(&audit);
        assert_eq!((counts.skipped, counts.bypassed.active), (1, 1));
        let identity = AuditedObject::of(&object, "deployments");
        assert_eq!(
            drift_engine::message::bypass_text(&identity, &audit).unwrap(),
            "bypass apps/v1 Deployment shop/web (rule ops/web): bypass until 2026-12-04T16:00:00Z (set by kubectl-drift at 2026-12-04T11:00:00Z)\n"
        );
        let record = ViolationRecord::bypass_listed("run-1", &identity, &audit, now).unwrap();
        assert_eq!(record.event_type, BYPASS_EVENT);
        assert_eq!(record.enforcement_action, "bypass");
        let bypass = record.bypass.as_ref().unwrap();
        assert_eq!(bypass.end_state, "active");
        assert_eq!(bypass.end.as_deref(), Some("2026-12-04T16:00:00Z"));
        assert_eq!(bypass.set_by.as_deref(), Some("kubectl-drift"));
        assert_eq!(bypass.since.as_deref(), Some("2026-12-04T11:00:00Z"));
        let line = String::from_utf8(record.encode().unwrap()).unwrap();
        assert_eq!(ViolationRecord::parse(&line).unwrap(), record);
        // An object without the annotation has no bypass record; a violation record has no
        // bypass field.
        let plain = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"}, "spec": {"replicas": 5}});
        let audit =
            drift_engine::audit::audit_object(&rules, &namespaces, &plain, &[], now).unwrap();
        let identity = AuditedObject::of(&plain, "deployments");
        assert!(ViolationRecord::bypass_listed("run-1", &identity, &audit, now).is_none());
        assert!(
            !String::from_utf8(admission().encode().unwrap())
                .unwrap()
                .contains("bypass")
        );
    }

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
                changes: vec![ChangeRecord::new("spec.replicas", None, None)],
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
        let two = LazyValue::from(json!(2));
        let five = LazyValue::Text("5");
        record.details.changes = vec![ChangeRecord::new("spec.replicas", Some(&two), Some(&five))];
        let line = String::from_utf8(record.encode().unwrap()).unwrap();
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
    fn large_values_are_cut_and_marked() {
        let big = LazyValue::from(json!({"args": vec!["x".repeat(50); 20]}));
        let change = ChangeRecord::new("spec.args", Some(&big), None);
        let Some(Cow::Owned(Value::String(cut))) = &change.old else {
            panic!("{change:?}");
        };
        assert!(
            cut.len() <= MAX_CHANGE_VALUE_BYTES && cut.ends_with('…'),
            "{}",
            cut.len()
        );
        assert!(change.truncated);
        assert!(change.new.is_none());
        let small = LazyValue::from(json!({"a": 1}));
        assert!(!ChangeRecord::new("a", Some(&small), Some(&small)).truncated);
        // Text is cut as its value would be, without reading it whole.
        let text = format!("[{}]", vec!["0"; 100_000].join(", "));
        let long = LazyValue::Text(&text);
        let change = ChangeRecord::new("spec.args", None, Some(&long));
        let Some(Cow::Owned(Value::String(cut))) = &change.new else {
            panic!("{change:?}");
        };
        assert_eq!(cut.len(), MAX_CHANGE_VALUE_BYTES);
        assert!(cut.starts_with("[0,0,0,") && cut.ends_with('…'), "{cut}");
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
