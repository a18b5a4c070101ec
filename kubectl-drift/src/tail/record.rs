//! One exported violation record as `GET /violations` sends it (SPEC §7, `docs/export.md`), read
//! leniently: every field is optional, so that a record of a newer agent with more or fewer
//! fields is still shown.

use std::collections::{HashSet, VecDeque};
use std::time::SystemTime;

use serde::Deserialize;
use serde_json::Value;

/// `eventType` of admission (webhook) records.
pub const WEBHOOK_EVENT: &str = "violation_admission";
/// `eventType` of audit records.
pub const AUDIT_EVENT: &str = "violation_audited";

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Record {
    pub event_type: String,
    pub id: String,
    pub timestamp: String,
    pub operation: String,
    pub dry_run: bool,
    pub user_name: String,
    #[serde(rename = "userUID")]
    pub user_uid: String,
    pub user_groups: Vec<String>,
    pub resource: String,
    pub sub_resource: String,
    #[serde(rename = "resourceAPIVersion")]
    pub resource_api_version: String,
    pub resource_kind: String,
    pub resource_namespace: String,
    pub resource_name: String,
    pub rule_name: String,
    pub rule_namespace: String,
    pub mode: String,
    pub enforcement_action: String,
    pub message: String,
    pub details: Details,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Details {
    pub denied_paths: Vec<String>,
    pub changed_paths: Vec<String>,
    pub changes: Vec<Change>,
}

/// A denied path with its old and new values, as compact JSON text (`None`: that side is absent).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Change {
    pub path: String,
    pub old: Option<Value>,
    pub new: Option<Value>,
}

/// Which export a record comes from, as `?source=` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

impl Record {
    /// Parses one NDJSON line; `None` for a line that is not a JSON object.
    pub fn parse(line: &str) -> Option<Record> {
        let value: Value = serde_json::from_str(line).ok()?;
        if !value.is_object() {
            return None;
        }
        // A field of an unexpected type must not lose the whole record: fall back field by
        // field only when the strict reading fails.
        serde_json::from_value(value.clone())
            .ok()
            .or_else(|| Some(lenient(&value)))
    }

    /// The record's time, when its `timestamp` is RFC 3339.
    pub fn time(&self) -> Option<SystemTime> {
        parse_rfc3339(&self.timestamp)
    }

    pub fn source(&self) -> Option<Source> {
        match self.event_type.as_str() {
            WEBHOOK_EVENT => Some(Source::Webhook),
            AUDIT_EVENT => Some(Source::Audit),
            _ => None,
        }
    }

    /// `namespace/name`, or `name` for a cluster-scoped resource.
    pub fn object(&self) -> String {
        if self.resource_namespace.is_empty() {
            self.resource_name.clone()
        } else {
            format!("{}/{}", self.resource_namespace, self.resource_name)
        }
    }

    /// `namespace/name` of the rule, or its name alone.
    pub fn rule(&self) -> String {
        if self.rule_namespace.is_empty() {
            self.rule_name.clone()
        } else {
            format!("{}/{}", self.rule_namespace, self.rule_name)
        }
    }

    /// The key records are deduplicated by: the same record seen again after a reconnection
    /// (`since=` is inclusive) or from two streams.
    pub fn dedupe_key(&self) -> (String, String) {
        (self.id.clone(), self.timestamp.clone())
    }

    /// The old and new value of a denied path, when the record carries them.
    pub fn change(&self, path: &str) -> Option<&Change> {
        self.details.changes.iter().find(|c| c.path == path)
    }
}

fn lenient(value: &Value) -> Record {
    let text = |name: &str| {
        value
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let texts = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let details = value.get("details");
    Record {
        event_type: text("eventType"),
        id: match value.get("id") {
            Some(Value::String(s)) => s.clone(),
            Some(other) if !other.is_null() => other.to_string(),
            _ => String::new(),
        },
        timestamp: text("timestamp"),
        operation: text("operation"),
        dry_run: value
            .get("dryRun")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        user_name: text("userName"),
        user_uid: text("userUID"),
        user_groups: texts(value.get("userGroups")),
        resource: text("resource"),
        sub_resource: text("subResource"),
        resource_api_version: text("resourceAPIVersion"),
        resource_kind: text("resourceKind"),
        resource_namespace: text("resourceNamespace"),
        resource_name: text("resourceName"),
        rule_name: text("ruleName"),
        rule_namespace: text("ruleNamespace"),
        mode: text("mode"),
        enforcement_action: text("enforcementAction"),
        message: text("message"),
        details: Details {
            denied_paths: texts(details.and_then(|d| d.get("deniedPaths"))),
            changed_paths: texts(details.and_then(|d| d.get("changedPaths"))),
            changes: details
                .and_then(|d| d.get("changes"))
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|c| serde_json::from_value(c.clone()).ok())
                        .collect()
                })
                .unwrap_or_default(),
        },
    }
}

/// One side of a change as shown: the compact JSON text the record carries, or `(absent)`.
pub fn value_text(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => "(absent)".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// RFC 3339 with `Z` or a numeric offset (`2027-01-15T09:00:00.5+01:00`), to the instant.
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let text = text.trim();
    if let Ok(time) = humantime::parse_rfc3339(&text.to_ascii_uppercase()) {
        return Some(time);
    }
    // A numeric offset: read the local part as UTC, then move it by the offset.
    let at = text.len().checked_sub(6)?;
    if !text.is_char_boundary(at) {
        return None;
    }
    let (local, offset) = text.split_at(at);
    let sign = match offset.as_bytes().first()? {
        b'+' => 1i64,
        b'-' => -1i64,
        _ => return None,
    };
    let (hours, minutes) = offset[1..].split_once(':')?;
    if hours.len() != 2 || minutes.len() != 2 {
        return None;
    }
    let hours: u64 = hours.parse().ok()?;
    let minutes: u64 = minutes.parse().ok()?;
    if hours > 23 || minutes > 59 {
        return None;
    }
    let shift = std::time::Duration::from_secs(hours * 3600 + minutes * 60);
    let local = humantime::parse_rfc3339(&format!("{}Z", local.to_ascii_uppercase())).ok()?;
    if sign > 0 {
        local.checked_sub(shift)
    } else {
        local.checked_add(shift)
    }
}

/// The records already seen, by [`Record::dedupe_key`]; bounded, forgetting the oldest keys.
#[derive(Debug)]
pub struct Dedupe {
    seen: HashSet<(String, String)>,
    order: VecDeque<(String, String)>,
    capacity: usize,
}

impl Dedupe {
    pub fn new(capacity: usize) -> Self {
        Self {
            seen: HashSet::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// True the first time a record is seen.
    pub fn first_time(&mut self, record: &Record) -> bool {
        let key = record.dedupe_key();
        if self.seen.contains(&key) {
            return false;
        }
        if self.order.len() >= self.capacity
            && let Some(old) = self.order.pop_front()
        {
            self.seen.remove(&old);
        }
        self.seen.insert(key.clone());
        self.order.push_back(key);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub const LINE: &str = r#"{"eventType":"violation_admission","id":"uid-1","timestamp":"2027-01-15T08:00:00.000001Z","operation":"UPDATE","dryRun":false,"userName":"alice","userUID":"u1","userGroups":["dev","system:authenticated"],"resource":"deployments","subResource":"","resourceAPIVersion":"apps/v1","resourceKind":"Deployment","resourceNamespace":"prod-eu","resourceName":"checkout","resourceLabels":{"app":"checkout"},"ruleName":"strict","ruleNamespace":"drift-sentinel","mode":"enforce","enforcementAction":"deny","message":"Drift Sentinel: immutable fields changed: spec.replicas","details":{"deniedPaths":["spec.replicas"],"changedPaths":["spec.replicas"],"changes":[{"path":"spec.replicas","old":"3","new":"5"}]}}"#;

    #[test]
    fn reads_every_field_of_the_export_format() {
        let record = Record::parse(LINE).unwrap();
        assert_eq!(record.id, "uid-1");
        assert_eq!(record.source(), Some(Source::Webhook));
        assert_eq!(record.object(), "prod-eu/checkout");
        assert_eq!(record.rule(), "drift-sentinel/strict");
        assert_eq!(record.user_groups, ["dev", "system:authenticated"]);
        assert_eq!(record.enforcement_action, "deny");
        assert_eq!(record.details.denied_paths, ["spec.replicas"]);
        let change = record.change("spec.replicas").unwrap();
        assert_eq!(value_text(change.old.as_ref()), "3");
        assert_eq!(value_text(change.new.as_ref()), "5");
        assert_eq!(
            record.time(),
            Some(humantime::parse_rfc3339("2027-01-15T08:00:00.000001Z").unwrap())
        );
    }

    #[test]
    fn lenient_about_missing_and_mistyped_fields() {
        let record = Record::parse(
            r#"{"id":7,"timestamp":"x","userGroups":"nope","details":{"deniedPaths":["a",1]}}"#,
        )
        .unwrap();
        assert_eq!(record.id, "7");
        assert!(record.user_groups.is_empty());
        assert_eq!(record.details.denied_paths, ["a"]);
        assert_eq!(record.time(), None);
        assert_eq!(record.source(), None);
        assert!(Record::parse("[1,2]").is_none());
        assert!(Record::parse("not json").is_none());
        let absent =
            Record::parse(r#"{"details":{"changes":[{"path":"p","old":null,"new":"{\"a\":1}"}]}}"#)
                .unwrap();
        let change = absent.change("p").unwrap();
        assert_eq!(value_text(change.old.as_ref()), "(absent)");
        assert_eq!(value_text(change.new.as_ref()), r#"{"a":1}"#);
    }

    #[test]
    fn rfc3339_with_offsets() {
        let utc = humantime::parse_rfc3339("2027-01-15T08:00:00.2Z").unwrap();
        assert_eq!(parse_rfc3339("2027-01-15T09:00:00.2+01:00"), Some(utc));
        assert_eq!(parse_rfc3339("2027-01-15T03:00:00.2-05:00"), Some(utc));
        assert_eq!(parse_rfc3339("2027-01-15t08:00:00.2z"), Some(utc));
        assert_eq!(parse_rfc3339("2027-01-15T08:00:00.2+1:00"), None);
        assert_eq!(parse_rfc3339("yesterday"), None);
        assert_eq!(parse_rfc3339(""), None);
    }

    #[test]
    fn dedupe_by_id_and_timestamp_bounded() {
        let record = |id: &str, t: &str| Record {
            id: id.to_owned(),
            timestamp: t.to_owned(),
            ..Record::default()
        };
        let mut dedupe = Dedupe::new(2);
        assert!(dedupe.first_time(&record("a", "1")));
        assert!(!dedupe.first_time(&record("a", "1")));
        // Same id at another time (a retried request judged again) is another record.
        assert!(dedupe.first_time(&record("a", "2")));
        // Capacity 2: the oldest key is forgotten.
        assert!(dedupe.first_time(&record("b", "1")));
        assert!(dedupe.first_time(&record("a", "1")));
        assert!(!dedupe.first_time(&record("b", "1")));
    }
}
