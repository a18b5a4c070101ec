//! Compiling a rule: `data.spec` read into its document (unknown keys refused), then each
//! field checked and prepared once — globs, label requirements, path patterns, the diff scope —
//! with every problem a [`RuleError`] naming the ConfigMap, the field and, where the offending
//! text is found, its line and column in `data.spec`.

use serde::{Deserialize, Deserializer};

use super::{
    CompiledRule, DEFAULT_BYPASS_ANNOTATION, LabelRequirement, MAX_SPEC_BYTES, Mode, NameMatch,
    RuleError, RuleSource, Selector, SpecText, Tier, never_compared,
};
use crate::diff::Scope;
use crate::glob::Glob;
use crate::path::PathPattern;

/// The document in `data.spec`, exactly as written. Unknown keys are errors.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RuleSpecDocument {
    mode: Mode,
    #[serde(default, deserialize_with = "null_as_default")]
    priority: i64,
    #[serde(default, deserialize_with = "null_as_default")]
    namespaces: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    selectors: Vec<SelectorDocument>,
    #[serde(default, deserialize_with = "null_as_default")]
    labels: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    users: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    exempt_users: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    include: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    exclude: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    mutable: Vec<String>,
    #[serde(default)]
    bypass: Option<String>,
    #[serde(default)]
    max_bypass: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SelectorDocument {
    #[serde(default, deserialize_with = "null_as_default")]
    api_group: String,
    #[serde(default)]
    kind: Option<String>,
}

/// An empty `key:` in YAML is `null`; for optional lists that means "not set".
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Compiles one rule. Every problem is a [`RuleError`] naming the ConfigMap and the field.
// Runs once per rule change, never per request: the size of the error is of no consequence.
#[allow(clippy::result_large_err)]
pub fn compile(source: &RuleSource) -> Result<CompiledRule, RuleError> {
    let spec = spec_yaml(source)?;
    let checks = Checks { source, spec };
    // Any tenant can write a rule ConfigMap: its nesting, aliases and tags are checked before
    // libyaml reads it (reference §5, "No input stops the agent"; §2).
    crate::nesting::check_rule_yaml(spec).map_err(|e| {
        let (line, column) = position(spec, e.offset());
        checks.error(None, line, column, format!("the spec {e}"))
    })?;
    let document: RuleSpecDocument = serde_yaml::from_str(spec).map_err(|e| {
        // The place is counted from serde_yaml's byte index, as every other place in a rule
        // error is: YAML also breaks lines at a lone carriage return, an editor does not.
        let (line, column) = e
            .location()
            .map_or((None, None), |l| position(spec, l.index()));
        let (field, reason) = describe_yaml_error(&e);
        checks.error(field, line, column, reason)
    })?;

    let namespaces = checks.namespaces(&document.namespaces)?;
    let selectors = checks.selectors(&document.selectors)?;
    let labels = document
        .labels
        .iter()
        .enumerate()
        .map(|(i, text)| {
            LabelRequirement::parse(text)
                .map_err(|reason| checks.semantic(format!("labels[{i}]"), text, reason))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let exempt_users = checks.globs("exemptUsers", &document.exempt_users)?;
    let include = checks.patterns("include", &document.include)?;
    let exclude = checks.patterns("exclude", &document.exclude)?;
    let mutable = checks.patterns("mutable", &document.mutable)?;
    let bypass = checks.bypass(document.bypass.as_deref())?;
    let max_bypass = document
        .max_bypass
        .as_deref()
        .map(|text| checks.max_bypass(text))
        .transpose()?;

    let mut skip = never_compared(&bypass);
    skip.extend(exclude.iter().cloned());
    let scope = Scope::new((!include.is_empty()).then(|| include.clone()), skip);

    let mutable_text = if mutable.is_empty() {
        "none".to_owned()
    } else {
        mutable
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };

    Ok(CompiledRule {
        id: source.id.clone(),
        mode: document.mode,
        priority: document.priority,
        namespaces,
        selectors,
        labels,
        users: document.users,
        exempt_users,
        include,
        exclude,
        mutable,
        bypass,
        max_bypass,
        tier: Tier::Cluster,
        scope,
        mutable_text,
        origin: source.origin.clone(),
    })
}

/// The rule YAML of a source, or why there is none.
#[allow(clippy::result_large_err)]
fn spec_yaml(source: &RuleSource) -> Result<&str, RuleError> {
    let problem = |reason: String| rule_error(source, Some("data.spec".into()), None, None, reason);
    match &source.spec {
        SpecText::Yaml(spec) if spec.trim().is_empty() => Err(problem(
            "data.spec is empty; it must hold the rule YAML (at least mode, namespaces and selectors)".into(),
        )),
        SpecText::Yaml(spec) if spec.len() > MAX_SPEC_BYTES => Err(problem(format!(
            "data.spec is {} bytes, more than the {} KiB a rule may have; split it into several rules",
            spec.len(),
            MAX_SPEC_BYTES / 1024
        ))),
        SpecText::Yaml(spec) => Ok(spec),
        SpecText::Missing => Err(problem(
            "the ConfigMap is annotated as a rule but has no data.spec; put the rule YAML under data.spec".into(),
        )),
        SpecText::NotAString(kind) => Err(problem(format!(
            "expected the rule YAML as a string, found {kind}; write it as a block string (spec: |) indented under data"
        ))),
    }
}

/// An error of `source`'s rule, at `field` (and a place in `data.spec`, where known).
fn rule_error(
    source: &RuleSource,
    field: Option<String>,
    line: Option<usize>,
    column: Option<usize>,
    reason: String,
) -> RuleError {
    RuleError {
        namespace: source.id.namespace.clone(),
        name: source.id.name.clone(),
        origin: source.origin.clone(),
        field,
        line,
        column,
        reason,
    }
}

/// The semantic checks of one rule's document, each error naming the ConfigMap, the field and
/// (where the offending text is found in the spec) its line and column.
struct Checks<'s> {
    source: &'s RuleSource,
    spec: &'s str,
}

#[allow(clippy::result_large_err)]
impl Checks<'_> {
    fn error(
        &self,
        field: Option<String>,
        line: Option<usize>,
        column: Option<usize>,
        reason: String,
    ) -> RuleError {
        rule_error(self.source, field, line, column, reason)
    }

    /// An error at the first place `needle` appears in the spec.
    fn semantic(&self, field: String, needle: &str, reason: String) -> RuleError {
        let (line, column) = locate(self.spec, needle);
        self.error(Some(field), line, column, reason)
    }

    fn namespaces(&self, texts: &[String]) -> Result<Vec<Glob>, RuleError> {
        if texts.is_empty() {
            return Err(self.semantic(
                "namespaces".into(),
                "namespaces",
                "must list at least one namespace glob (use \"*\" for every namespace)".into(),
            ));
        }
        self.globs("namespaces", texts)
    }

    fn globs(&self, field: &str, texts: &[String]) -> Result<Vec<Glob>, RuleError> {
        texts
            .iter()
            .enumerate()
            .map(|(i, text)| {
                Glob::new(text)
                    .map_err(|e| self.semantic(format!("{field}[{i}]"), text, e.to_string()))
            })
            .collect()
    }

    fn selectors(&self, documents: &[SelectorDocument]) -> Result<Vec<Selector>, RuleError> {
        if documents.is_empty() {
            return Err(self.semantic(
                "selectors".into(),
                "selectors",
                "must list at least one {apiGroup, kind} selector".into(),
            ));
        }
        documents
            .iter()
            .enumerate()
            .map(
                |(i, selector)| match selector.kind.as_deref().map(str::trim) {
                    Some(kind) if !kind.is_empty() => Ok(Selector {
                        group: NameMatch::new(selector.api_group.trim()),
                        kind: NameMatch::new(kind),
                    }),
                    _ => Err(self.semantic(
                        format!("selectors[{i}].kind"),
                        "selectors",
                        "a selector needs a kind (e.g. Deployment, or \"*\" for any kind)".into(),
                    )),
                },
            )
            .collect()
    }

    fn patterns(&self, field: &str, texts: &[String]) -> Result<Vec<PathPattern>, RuleError> {
        texts
            .iter()
            .enumerate()
            .map(|(i, text)| {
                PathPattern::parse(text).map_err(|e| {
                    let (line, column) = locate(self.spec, text);
                    // Point at the bad character itself where the pattern was found.
                    let column = column.map(|c| c + e.column - 1);
                    self.error(Some(format!("{field}[{i}]")), line, column, e.to_string())
                })
            })
            .collect()
    }

    /// The bypass annotation key: the default when left out, never empty.
    fn bypass(&self, key: Option<&str>) -> Result<String, RuleError> {
        match key.map(str::trim) {
            None => Ok(DEFAULT_BYPASS_ANNOTATION.to_owned()),
            Some("") => Err(self.semantic(
                "bypass".into(),
                "bypass",
                "must be a non-empty annotation key (or be left out for the default drift-sentinel.k8s.io/bypass)".into(),
            )),
            Some(key) => Ok(key.to_owned()),
        }
    }

    /// `maxBypass`: a duration of at least a second.
    fn max_bypass(&self, text: &str) -> Result<std::time::Duration, RuleError> {
        crate::time::parse_duration(text).map_err(|reason| {
            self.semantic(
                "maxBypass".into(),
                "maxBypass",
                format!("{reason}; it caps how far ahead a bypass may end, e.g. maxBypass: 72h"),
            )
        })
    }
}

/// Turns a serde_yaml error into (field, reason) without the trailing location.
fn describe_yaml_error(error: &serde_yaml::Error) -> (Option<String>, String) {
    let mut message = error.to_string();
    if let Some(at) = message.rfind(" at line ") {
        message.truncate(at);
    }
    // serde_yaml prefixes nested errors with their path: "selectors[0]: missing field `kind`".
    let (field, reason) = match message.split_once(": ") {
        Some((path, rest))
            if !path.contains(' ') && !path.is_empty() && !path.starts_with("invalid") =>
        {
            (Some(path.to_owned()), rest.to_owned())
        }
        _ => (None, message.clone()),
    };
    // "unknown field `mutabel`, expected one of ..." / "missing field `mode`": the key is the
    // field, below the path serde_yaml gave, if any.
    let named_key = (reason.starts_with("unknown field") || reason.starts_with("missing field"))
        .then(|| {
            let start = reason.find('`')? + 1;
            let end = start + reason[start..].find('`')?;
            Some(reason[start..end].to_owned())
        })
        .flatten();
    let field = match (field, named_key) {
        (Some(path), Some(key)) => Some(format!("{path}.{key}")),
        (path, key) => path.or(key),
    };
    let reason = if reason.starts_with("unknown field") {
        format!("{reason} (unknown keys are rejected; check the spelling)")
    } else {
        reason
    };
    (field, reason)
}

/// 1-based line and column of the first occurrence of `needle` in `text`.
fn locate(text: &str, needle: &str) -> (Option<usize>, Option<usize>) {
    if needle.is_empty() {
        return (None, None);
    }
    match text.find(needle) {
        Some(offset) => position(text, offset),
        None => (None, None),
    }
}

/// 1-based line (lines end at `\n` only) and column (in characters) of the byte `offset` of
/// `text`; an offset past the end or inside a character is placed at the nearest character
/// before it.
pub(crate) fn position(text: &str, offset: usize) -> (Option<usize>, Option<usize>) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = text[line_start..offset].chars().count() + 1;
    (Some(line), Some(column))
}
