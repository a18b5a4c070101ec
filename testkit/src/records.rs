//! The webhook's records of edits ([`EditRecord`]) as tests build them: one builder, so that a
//! test says only what its record is about (`EditRecordBuilder::alice().warn().field("spec.replicas",
//! fp)`) and every test starts from the same object, rule and time.

use drift_api::events::{EditRecord, RECORD_VERSION, RecordedEdit, RecordedField, Why};

/// The object every built record is about (`metadata.uid`).
pub const UID: &str = "u-1";
/// The rule of a built record unless [`EditRecordBuilder::rule`] says otherwise.
pub const RULE: &str = "drift-system/web";
/// When the webhook judged a built record's edit unless [`EditRecordBuilder::seen`] says otherwise.
pub const SEEN: &str = "2026-03-01T10:05:00.100000Z";

/// An [`EditRecord`] of one user's one edit by `kubectl-edit` of [`UID`] under [`RULE`], in warn
/// mode, seen at [`SEEN`], with no fields until [`Self::field`] adds them.
#[derive(Debug, Clone)]
pub struct EditRecordBuilder {
    record: EditRecord,
}

impl EditRecordBuilder {
    /// alice's edit.
    pub fn alice() -> Self {
        Self::by("alice")
    }

    /// `user`'s edit.
    pub fn by(user: &str) -> Self {
        Self {
            record: EditRecord {
                v: RECORD_VERSION,
                uid: UID.into(),
                user: user.into(),
                why: Why::WarnMode,
                rule: RULE.into(),
                edits: vec![kubectl_edit()],
                omitted: 0,
            },
        }
    }

    /// Let through in warn mode (the default, said for the reader).
    pub fn warn(self) -> Self {
        self.why(Why::WarnMode)
    }

    /// Let through for `why`.
    pub fn why(mut self, why: Why) -> Self {
        self.record.why = why;
        self
    }

    /// Judged by `rule` (`namespace/name`).
    pub fn rule(mut self, rule: &str) -> Self {
        self.record.rule = rule.into();
        self
    }

    /// The edit was judged at `seen` (RFC 3339).
    pub fn seen(mut self, seen: &str) -> Self {
        self.edit().seen = seen.into();
        self
    }

    /// The edit's managedFields entry: `manager` …
    pub fn manager(mut self, manager: &str) -> Self {
        self.edit().manager = Some(manager.into());
        self
    }

    /// … at `time`.
    pub fn time(mut self, time: &str) -> Self {
        self.edit().time = Some(time.into());
        self
    }

    /// The edit changed `path` to the value of fingerprint `new` (none: too long to take one).
    pub fn field(mut self, path: &str, new: impl Into<Option<String>>) -> Self {
        self.edit().fields.push(RecordedField {
            path: path.into(),
            new: new.into(),
        });
        self
    }

    /// These edits instead of the one built.
    pub fn edits(mut self, edits: Vec<RecordedEdit>) -> Self {
        self.record.edits = edits;
        self
    }

    pub fn build(self) -> EditRecord {
        self.record
    }

    fn edit(&mut self) -> &mut RecordedEdit {
        if self.record.edits.is_empty() {
            self.record.edits.push(kubectl_edit());
        }
        let last = self.record.edits.len() - 1;
        &mut self.record.edits[last]
    }
}

/// An edit by `kubectl-edit` seen at [`SEEN`], no time, no fields.
fn kubectl_edit() -> RecordedEdit {
    RecordedEdit {
        seen: SEEN.into(),
        manager: Some("kubectl-edit".into()),
        time: None,
        fields: Vec::new(),
        fields_omitted: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a test builds is a record the audit can read as the webhook writes it.
    #[test]
    fn a_built_record_is_valid_and_says_what_it_was_told() {
        let record = EditRecordBuilder::alice()
            .warn()
            .time("2026-03-01T10:05:00Z")
            .field("spec.replicas", "sha256:00".to_owned())
            .build();
        assert!(record.is_valid());
        assert_eq!(record.user, "alice");
        assert_eq!(record.edits.len(), 1);
        assert_eq!(
            record.edits[0].time.as_deref(),
            Some("2026-03-01T10:05:00Z")
        );
        assert_eq!(record.edits[0].fields[0].path, "spec.replicas");
        assert_eq!(record.edits[0].fields[0].new.as_deref(), Some("sha256:00"));
    }
}
