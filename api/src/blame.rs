//! What `kubectl drift blame KIND/NAME -o json|yaml` prints (reference §9): each field of a live
//! object with the managedFields entry that owns it (the kubectl-blame view), and the object's
//! drift as the audit finds it (reference §8) — each drifted field declared vs live, the
//! imperative edit that changed it, and who made it and why (§8 "Who and why"). A stable
//! output, defined once here; every value in it is bounded.

use serde::{Deserialize, Serialize};

pub use crate::events::{Attribution, Why};

/// Most fields listed; the others are counted in [`Blame::fields_omitted`].
pub const MAX_BLAMED_FIELDS: usize = 2_000;
/// Most characters of a value (compact JSON), the last being `…` when cut.
pub const MAX_BLAMED_VALUE_CHARS: usize = 256;
/// Most characters of a field path, the last being `…` when cut.
pub const MAX_BLAMED_PATH_CHARS: usize = 512;

/// One object's blame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Blame {
    pub api_version: String,
    pub kind: String,
    /// Empty for a cluster-scoped object.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The audit's result: `drifted`, `clean`, `no_baseline` or `skipped`; `not-audited` when no
    /// rule in mode enforce, warn or dry-run selects the object.
    pub result: String,
    /// The audit's reason, in one sentence (bounded).
    pub reason: String,
    /// The rule the object is judged under (`namespace/name`), when one matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Its effective mode (`enforce`, `warn`, `dry-run`, `off`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Whether the object has client-side apply's baseline, the
    /// `kubectl.kubernetes.io/last-applied-configuration` annotation. Without it (server-side
    /// apply) only the fields imperative edits own are compared, with no declared value.
    pub last_applied: bool,
    /// The fields of `spec` (and the other top-level fields but `status`), `metadata.labels`,
    /// `metadata.annotations`, `metadata.finalizers` and `metadata.ownerReferences`, each leaf at
    /// its path, in the object's order (at most [`MAX_BLAMED_FIELDS`]), then the drifted paths
    /// not in the live object (removed).
    pub fields: Vec<BlamedField>,
    /// Fields left out of `fields`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub fields_omitted: u64,
    /// The drifted paths, as the audit reports them (at most 100).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<FieldDrift>,
    /// Drifted paths left out of `drift`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub drift_omitted: u64,
    /// What could not be told, and why (the webhook's records not readable, its configuration
    /// not readable …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// One field of the object and who owns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlamedField {
    /// The rendered path (reference §4), at most [`MAX_BLAMED_PATH_CHARS`].
    pub path: String,
    /// The live value as compact JSON, at most [`MAX_BLAMED_VALUE_CHARS`]; absent when the field
    /// is not in the live object (a declared field removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// The managedFields entry that owns the field (the latest of those owning it, or an atomic
    /// whole it is part of): absent when none does (a value the API server defaulted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
    /// Whether the field is drift, or part of a drifted path ([`Blame::drift`] says which).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drifted: bool,
}

/// A managedFields entry, without its field set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Owner {
    pub manager: String,
    /// `Update`, or `Apply` (server-side apply).
    pub operation: String,
    /// The subresource it was written through (`scale`), when one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subresource: Option<String>,
    /// The entry's `time` (RFC 3339), when it has one (`kubectl scale` writes none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
}

/// One drifted path, as the audit reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldDrift {
    pub path: String,
    /// The declared value (compact JSON, at most [`MAX_BLAMED_VALUE_CHARS`]); absent when
    /// nothing was declared there, or when that is not known (`declaredUnknown`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared: Option<String>,
    /// No declared value is known: the object has no last-applied baseline (server-side apply),
    /// or an imperative edit rewrote it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub declared_unknown: bool,
    /// The live value; absent when the field was removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<String>,
    /// The imperative edit the audit names for it (`--drift-managers`, operation `Update`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_by: Option<ChangedBy>,
    /// The managedFields entry that owns the path now (or the latest owning a part of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
    /// Who made the live value and why the webhook let it through, or why that is not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub who: Option<Attribution>,
}

/// The imperative edit that changed a drifted path: its field manager and time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangedBy {
    pub manager: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_blame_reads_back_as_written() {
        let blame = Blame {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "shop".into(),
            name: "web".into(),
            uid: "u-1".into(),
            result: "drifted".into(),
            reason: "drift".into(),
            rule: Some("ops/web".into()),
            mode: Some("warn".into()),
            last_applied: true,
            fields: vec![BlamedField {
                path: "spec.replicas".into(),
                value: Some("5".into()),
                owner: Some(Owner {
                    manager: "kubectl-edit".into(),
                    operation: "Update".into(),
                    subresource: None,
                    time: Some("2026-12-06T11:00:00Z".into()),
                }),
                drifted: true,
            }],
            fields_omitted: 0,
            drift: vec![FieldDrift {
                path: "spec.replicas".into(),
                declared: Some("2".into()),
                declared_unknown: false,
                live: Some("5".into()),
                changed_by: Some(ChangedBy {
                    manager: "kubectl-edit".into(),
                    time: Some("2026-12-06T11:00:00Z".into()),
                }),
                owner: None,
                who: Some(Attribution {
                    user: Some("alice".into()),
                    why: Why::WarnMode,
                    rule: Some("ops/web".into()),
                    seen: None,
                }),
            }],
            drift_omitted: 0,
            notes: Vec::new(),
        };
        let value = serde_json::to_value(&blame).unwrap();
        assert_eq!(value["fields"][0]["owner"]["operation"], "Update");
        assert_eq!(
            value["drift"][0]["who"]["why"],
            json!({"kind": "warn-mode"})
        );
        assert!(value.get("fieldsOmitted").is_none() && value.get("notes").is_none());
        assert_eq!(serde_json::from_value::<Blame>(value).unwrap(), blame);
    }
}
