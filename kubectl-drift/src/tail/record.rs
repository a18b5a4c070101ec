//! Exported violation records as `tail` handles them: the wire type is `drift-api`'s
//! [`ViolationRecord`] (the agent writes the same type); here only what the terminal UI adds —
//! how a value is shown and which records were seen already.

use std::collections::{HashSet, VecDeque};

use serde_json::Value;

pub(crate) use drift_api::violation::Source;

/// A record as `tail` holds it.
pub(crate) type Record = drift_api::violation::ViolationRecord<'static>;

/// One side of a change as shown: a string as itself, anything else as compact JSON, or
/// `(absent)`.
pub(crate) fn value_text(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => "(absent)".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// The key records are deduplicated by: the same record seen again after a reconnection
/// (`since=` is inclusive) or from two streams.
fn dedupe_key(record: &Record) -> (String, String) {
    (record.id.to_string(), record.timestamp.to_string())
}

/// The records already seen, by [`dedupe_key`]; bounded, forgetting the oldest keys.
#[derive(Debug)]
pub(crate) struct Dedupe {
    seen: HashSet<(String, String)>,
    order: VecDeque<(String, String)>,
    capacity: usize,
}

impl Dedupe {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            seen: HashSet::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// True the first time a record is seen.
    pub(crate) fn first_time(&mut self, record: &Record) -> bool {
        let key = dedupe_key(record);
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

    pub const LINE: &str = r#"{"eventType":"violation_admission","id":"uid-1","timestamp":"2027-01-15T08:00:00.000001Z","operation":"UPDATE","dryRun":false,"userName":"alice","userUID":"u1","userGroups":["dev","system:authenticated"],"resource":"deployments","subResource":"","resourceAPIVersion":"apps/v1","resourceKind":"Deployment","resourceNamespace":"prod-eu","resourceName":"checkout","resourceLabels":{"app":"checkout"},"ruleName":"strict","ruleNamespace":"drift-sentinel","mode":"enforce","enforcementAction":"deny","message":"Drift Sentinel: immutable fields changed: spec.replicas","details":{"deniedPaths":["spec.replicas"],"changedPaths":["spec.replicas"],"changes":[{"path":"spec.replicas","old":3,"new":5}]}}"#;

    #[test]
    fn shows_the_export_format() {
        let record = Record::parse(LINE).unwrap();
        assert_eq!(record.source(), Some(Source::Webhook));
        assert_eq!(record.object(), "prod-eu/checkout");
        assert_eq!(record.user_name(), "alice");
        let change = record.change("spec.replicas").unwrap();
        assert_eq!(value_text(change.old.as_deref()), "3");
        assert_eq!(value_text(change.new.as_deref()), "5");
        assert_eq!(value_text(None), "(absent)");
        assert_eq!(value_text(Some(&serde_json::json!({"a": 1}))), r#"{"a":1}"#);
    }

    #[test]
    fn dedupe_by_id_and_timestamp_bounded() {
        let record = |id: &str, t: &str| Record {
            id: id.to_owned().into(),
            timestamp: t.to_owned().into(),
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
