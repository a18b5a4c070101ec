//! What `tail` shows of the records: the source, namespace, rule and text filters. The
//! namespace and rule filters are the engine's globs (`*`, `?`, `[a-z]`, as in rules).

use drift_engine::glob::Glob;

use super::record::{Record, Source};
use crate::plan::TailFilters;

/// The source filter that `s` cycles through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum SourceFilter {
    #[default]
    All,
    Only(Source),
}

impl SourceFilter {
    pub(crate) fn next(self) -> Self {
        match self {
            SourceFilter::All => SourceFilter::Only(Source::Webhook),
            SourceFilter::Only(Source::Webhook) => SourceFilter::Only(Source::Audit),
            SourceFilter::Only(Source::Audit) => SourceFilter::All,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SourceFilter::All => "all",
            SourceFilter::Only(source) => source.as_str(),
        }
    }
}

/// A namespace or rule filter as typed, and as matched: the engine's glob (`*`, `?`, `[a-z]`,
/// as in rules); a pattern that is not a glob (yet, while typing) matches itself literally.
#[derive(Debug, Clone, Default)]
pub(crate) struct Pattern {
    text: String,
    glob: Option<Glob>,
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for Pattern {}

impl PartialEq<&str> for Pattern {
    fn eq(&self, other: &&str) -> bool {
        self.text == *other
    }
}

impl From<&str> for Pattern {
    fn from(text: &str) -> Self {
        let mut pattern = Pattern::default();
        pattern.set(text.to_owned());
        pattern
    }
}

impl Pattern {
    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    #[cfg(test)]
    pub(crate) fn clear(&mut self) {
        self.set(String::new());
    }

    fn set(&mut self, text: String) {
        self.glob = Glob::new(&text).ok();
        self.text = text;
    }

    /// Edits the text as typed.
    pub(super) fn edit(&mut self, change: impl FnOnce(&mut String)) {
        let mut text = std::mem::take(&mut self.text);
        change(&mut text);
        self.set(text);
    }

    fn matches(&self, text: &str) -> bool {
        match &self.glob {
            _ if self.text.is_empty() => true,
            Some(glob) => glob.matches(text),
            None => self.text == text,
        }
    }
}

/// What the list shows. Empty texts filter nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Filters {
    /// Case-insensitive text in the namespace, name, kind, rule, user or a path.
    pub text: String,
    /// The object's namespace.
    pub namespace: Pattern,
    /// The rule's `name` or `namespace/name`.
    pub rule: Pattern,
    pub source: SourceFilter,
}

impl Filters {
    /// The filters of the command line.
    pub(crate) fn of(plan: &TailFilters) -> Self {
        let text = |glob: &Option<Glob>| Pattern::from(glob.as_ref().map_or("", Glob::as_str));
        Filters {
            text: String::new(),
            namespace: text(&plan.namespace),
            rule: text(&plan.rule),
            source: plan.source.map_or(SourceFilter::All, SourceFilter::Only),
        }
    }

    pub(crate) fn matches(&self, record: &Record) -> bool {
        if let SourceFilter::Only(source) = self.source
            && record.source() != Some(source)
        {
            return false;
        }
        if !self.namespace.matches(&record.resource_namespace) {
            return false;
        }
        if !self.rule.is_empty()
            && !self.rule.matches(&record.rule_name)
            && !self.rule.matches(&record.rule())
        {
            return false;
        }
        if !self.text.is_empty() {
            let needle = self.text.to_lowercase();
            let hit = |s: &str| s.to_lowercase().contains(&needle);
            let details = &record.details;
            if !(hit(&record.object())
                || hit(&record.resource_kind)
                || hit(&record.rule())
                || hit(record.user_name())
                || details.denied_paths.iter().any(|p| hit(p))
                || details.changed_paths.iter().any(|p| hit(p)))
            {
                return false;
            }
        }
        true
    }

    pub(crate) fn is_empty(&self) -> bool {
        *self == Filters::default()
    }

    /// `namespace=prod rule=strict source=webhook text="img"`, the active filters only.
    pub(crate) fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.namespace.is_empty() {
            parts.push(format!("namespace={}", self.namespace.as_str()));
        }
        if !self.rule.is_empty() {
            parts.push(format!("rule={}", self.rule.as_str()));
        }
        if self.source != SourceFilter::All {
            parts.push(format!("source={}", self.source.as_str()));
        }
        if !self.text.is_empty() {
            parts.push(format!("text={:?}", self.text));
        }
        parts.join(" ")
    }
}
