//! What an admission record (reference §7) holds: one list of its fields for the export's unit
//! tests (`src/export/record.rs` includes this file) and its black-box tests.
#![allow(dead_code)]

use serde_json::Value;

/// The fields of an admission record, in the order the agent writes them.
pub const ADMISSION_RECORD_FIELDS: [&str; 21] = [
    "eventType",
    "id",
    "timestamp",
    "operation",
    "dryRun",
    "userName",
    "userUID",
    "userGroups",
    "resource",
    "subResource",
    "resourceAPIVersion",
    "resourceKind",
    "resourceNamespace",
    "resourceName",
    "resourceLabels",
    "ruleName",
    "ruleNamespace",
    "mode",
    "enforcementAction",
    "message",
    "details",
];

/// The keys of a JSON object, in its order.
pub fn keys(object: &Value) -> Vec<&str> {
    object
        .as_object()
        .expect("a JSON object")
        .keys()
        .map(String::as_str)
        .collect()
}
