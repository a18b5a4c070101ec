//! The webhook's records of edits ([`EditRecord`]) and the audit's memory of them
//! ([`Remembered`], [`RememberedSetter`]) as tests build them: one builder each, so that a test
//! says only what its record is about (`EditRecordBuilder::alice().warn().field("spec.replicas",
//! fp)`) and every test starts from the same object, rule and time.

use drift_api::events::{
    Attribution, EditRecord, RECORD_VERSION, RecordedEdit, RecordedField, Remembered,
    RememberedSetter, Why,
};

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

/// The field every built [`Remembered`] is about unless [`RememberedBuilder::path`] says otherwise.
pub const PATH: &str = "spec.replicas";
/// The fingerprint of a built [`Remembered`]'s value unless [`RememberedBuilder::value`] says
/// otherwise.
pub const VALUE: &str = "sha256:00";
/// When a built [`RememberedSetter`] set the bypass (its managedFields entry's time).
pub const SET_AT: &str = "2026-03-01T10:00:00Z";

/// A [`Remembered`] attribution of [`PATH`] at [`VALUE`] to one user's edit let through in warn
/// mode, with no rule and no time until [`Self::rule`] and [`Self::seen`] add them.
#[derive(Debug, Clone)]
pub struct RememberedBuilder {
    remembered: Remembered,
}

impl RememberedBuilder {
    /// Made by alice.
    pub fn alice() -> Self {
        Self::by("alice")
    }

    /// Made by `user`.
    pub fn by(user: &str) -> Self {
        let mut built = Self::not_seen();
        built.remembered.attribution.user = Some(user.into());
        built.remembered.attribution.why = Why::WarnMode;
        built
    }

    /// Made by nobody the audit can name (no record: [`Why::NotSeen`]).
    pub fn not_seen() -> Self {
        Self {
            remembered: Remembered {
                path: PATH.into(),
                value: VALUE.into(),
                attribution: Attribution {
                    user: None,
                    why: Why::NotSeen,
                    rule: None,
                    seen: None,
                },
            },
        }
    }

    /// The attributed field.
    pub fn path(mut self, path: &str) -> Self {
        self.remembered.path = path.into();
        self
    }

    /// The fingerprint of its value.
    pub fn value(mut self, value: &str) -> Self {
        self.remembered.value = value.into();
        self
    }

    /// Judged by `rule` (`namespace/name`).
    pub fn rule(mut self, rule: &str) -> Self {
        self.remembered.attribution.rule = Some(rule.into());
        self
    }

    /// The edit was judged at `seen` (RFC 3339).
    pub fn seen(mut self, seen: &str) -> Self {
        self.remembered.attribution.seen = Some(seen.into());
        self
    }

    pub fn build(self) -> Remembered {
        self.remembered
    }
}

/// `user` set a bypass by `kubectl-patch` at [`SET_AT`].
pub fn setter(user: &str) -> RememberedSetter {
    RememberedSetter {
        manager: "kubectl-patch".into(),
        time: SET_AT.into(),
        user: user.into(),
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
