//! Rules: the YAML schema of a rule ConfigMap's `data.spec` (reference §2), its validation, and the
//! compiled form that the decision uses. Everything a request needs (globs, path patterns, the
//! diff scope, the text of messages) is prepared here, once per rule change.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::diff::Scope;
use crate::glob::Glob;
use crate::path::{PathPattern, PatternSegment};

mod compile;

pub use compile::compile;
pub(crate) use compile::position;

/// The annotation that marks a ConfigMap as a rule.
pub const RULE_ANNOTATION: &str = "drift-sentinel.k8s.io/rule";
/// The default bypass annotation.
pub const DEFAULT_BYPASS_ANNOTATION: &str = "drift-sentinel.k8s.io/bypass";
/// The namespace annotation that overrides a rule's mode.
pub const MODE_ANNOTATION: &str = "drift-sentinel.k8s.io/mode";

/// The longest `data.spec` a rule may have. A rule is a few hand-written lines (the default
/// rule is 1.7 KB); compiling one costs up to ~230 times its text in the worst case (32,000
/// one-character patterns), so the bound on the text is what bounds the memory of compiling it
/// (reference §5: at most 16 MiB).
pub const MAX_SPEC_BYTES: usize = 64 * 1024;

/// Fields that Kubernetes manages and that are never compared.
pub const SYSTEM_FIELDS: &[&str] = &[
    "status",
    "metadata.managedFields",
    "metadata.resourceVersion",
    "metadata.generation",
    "metadata.uid",
    "metadata.creationTimestamp",
    "metadata.selfLink",
];

/// What a rule does with a violation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Enforce,
    Warn,
    DryRun,
    Off,
}

impl Mode {
    pub const ALL: [Mode; 4] = [Mode::Enforce, Mode::Warn, Mode::DryRun, Mode::Off];

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Warn => "warn",
            Mode::DryRun => "dry-run",
            Mode::Off => "off",
        }
    }

    /// Exactly one of the four names; anything else is `None`.
    pub fn from_name(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.as_str() == name)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who may have written a rule (reference §2 "Who may write a rule").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// A rule ConfigMap in a cluster rule namespace: applies as written.
    Cluster,
    /// A rule ConfigMap in any other namespace: applies only to objects in its own namespace,
    /// and only where no cluster rule matches.
    Namespace,
}

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Cluster => "cluster",
            Tier::Namespace => "namespace",
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which ConfigMap namespaces hold cluster rules.
#[derive(Debug, Clone, Default)]
pub struct TierPolicy {
    /// `None`: every namespace (offline files, or `--cluster-rule-namespaces '*'`).
    cluster_namespaces: Option<Vec<Glob>>,
}

impl TierPolicy {
    /// Every rule is a cluster rule.
    pub fn all_cluster() -> Self {
        Self::default()
    }

    /// Rules in namespaces matching one of `globs` are cluster rules; the others namespace
    /// rules. A `*` among them makes every rule a cluster rule.
    pub fn cluster_namespaces<S: AsRef<str>>(globs: &[S]) -> Result<Self, crate::glob::GlobError> {
        if globs.iter().any(|g| g.as_ref() == "*") {
            return Ok(Self::all_cluster());
        }
        let globs = globs
            .iter()
            .map(|g| Glob::new(g.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            cluster_namespaces: Some(globs),
        })
    }

    /// The globs of `--cluster-rule-namespaces` as the agent and the plugin take them: each
    /// trimmed, blank ones left out; `None` when none is left (each program has its default).
    pub fn given<S: AsRef<str>>(globs: &[S]) -> Result<Option<Self>, crate::glob::GlobError> {
        let globs: Vec<&str> = globs
            .iter()
            .map(|g| g.as_ref().trim())
            .filter(|g| !g.is_empty())
            .collect();
        if globs.is_empty() {
            return Ok(None);
        }
        Self::cluster_namespaces(&globs).map(Some)
    }

    /// Whether every namespace is a cluster rule namespace.
    pub fn is_all_cluster(&self) -> bool {
        self.cluster_namespaces.is_none()
    }

    /// The cluster rule namespaces as globs, as `--cluster-rule-namespaces` takes them: `["*"]`
    /// when every namespace is one (what `/status` reports, and what the plugin reads back).
    pub fn cluster_namespace_globs(&self) -> Vec<String> {
        match &self.cluster_namespaces {
            None => vec!["*".to_owned()],
            Some(globs) => globs.iter().map(|g| g.as_str().to_owned()).collect(),
        }
    }

    pub fn tier_of(&self, namespace: &str) -> Tier {
        match &self.cluster_namespaces {
            None => Tier::Cluster,
            Some(globs) if globs.iter().any(|g| g.matches(namespace)) => Tier::Cluster,
            Some(_) => Tier::Namespace,
        }
    }
}

/// `namespace/name` of the ConfigMap a rule came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct RuleId {
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for RuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A rule as found in a source, before validation: the ConfigMap's identity and `data.spec`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSource {
    pub id: RuleId,
    pub spec: SpecText,
    /// Where the ConfigMap was read from (a file path offline); for messages only.
    pub origin: Option<String>,
}

/// `data.spec` of a rule ConfigMap, as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecText {
    /// The ConfigMap has no `data.spec`.
    Missing,
    /// `data.spec` is there but is not a string (a file can say `spec: 5`; the API server
    /// stores only strings): its type, to name in the error.
    NotAString(&'static str),
    /// The rule YAML.
    Yaml(String),
}

impl SpecText {
    /// The rule YAML, when there is one.
    pub fn yaml(&self) -> Option<&str> {
        match self {
            SpecText::Yaml(yaml) => Some(yaml),
            _ => None,
        }
    }
}

impl From<Option<String>> for SpecText {
    fn from(spec: Option<String>) -> Self {
        spec.map_or(SpecText::Missing, SpecText::Yaml)
    }
}

/// Why a rule is invalid. It names the ConfigMap, the field and, where known, the line and
/// column inside `data.spec`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(rename_all = "camelCase")]
pub struct RuleError {
    pub namespace: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
    pub reason: String,
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rule ConfigMap {}/{}", self.namespace, self.name)?;
        if let Some(origin) = &self.origin {
            write!(f, " (from {origin})")?;
        }
        match (self.line, self.column) {
            (Some(line), Some(column)) => write!(f, ": data.spec line {line} column {column}")?,
            (Some(line), None) => write!(f, ": data.spec line {line}")?,
            _ => {}
        }
        if let Some(field) = &self.field {
            write!(f, ": field {field}")?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// Matches an API group or a kind: a literal, or `*` for any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameMatch {
    Any,
    Exactly(String),
}

impl NameMatch {
    fn new(text: &str) -> Self {
        if text == "*" {
            NameMatch::Any
        } else {
            NameMatch::Exactly(text.to_owned())
        }
    }

    pub fn matches(&self, value: &str) -> bool {
        match self {
            NameMatch::Any => true,
            NameMatch::Exactly(want) => want == value,
        }
    }
}

impl fmt::Display for NameMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameMatch::Any => f.write_str("*"),
            NameMatch::Exactly(name) => f.write_str(name),
        }
    }
}

/// An `{apiGroup, kind}` selector; the core group is `""`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    pub group: NameMatch,
    pub kind: NameMatch,
}

impl Selector {
    pub fn matches(&self, group: &str, kind: &str) -> bool {
        self.group.matches(group) && self.kind.matches(kind)
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.group {
            NameMatch::Exactly(group) if group.is_empty() => write!(f, "core/{}", self.kind),
            group => write!(f, "{group}/{}", self.kind),
        }
    }
}

/// `key=value` (exact) or `key` (presence).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelRequirement {
    pub key: String,
    pub value: Option<String>,
}

impl LabelRequirement {
    pub fn parse(text: &str) -> Result<Self, String> {
        let (key, value) = match text.split_once('=') {
            Some((key, value)) => (key.trim(), Some(value.trim().to_owned())),
            None => (text.trim(), None),
        };
        if key.is_empty() {
            return Err(format!(
                "label requirement {text:?} has an empty key; use key=value or key"
            ));
        }
        if key.contains(char::is_whitespace) || key.contains('!') {
            return Err(format!(
                "label requirement {text:?} is not key=value or key (only exact match and presence are supported)"
            ));
        }
        Ok(Self {
            key: key.to_owned(),
            value,
        })
    }

    /// Whether the requirement holds on an object's labels (a map node, or none).
    pub fn matches_node<'v, N: crate::json::Node<'v>>(&self, labels: Option<N>) -> bool {
        let Some(actual) = labels.and_then(|l| l.get(&self.key)) else {
            return false;
        };
        match &self.value {
            None => true,
            Some(want) => actual.as_str().as_deref() == Some(want.as_str()),
        }
    }

    pub fn matches(&self, labels: Option<&serde_json::Map<String, Value>>) -> bool {
        let Some(actual) = labels.and_then(|l| l.get(&self.key)) else {
            return false;
        };
        match &self.value {
            None => true,
            Some(want) => actual.as_str() == Some(want.as_str()),
        }
    }
}

impl fmt::Display for LabelRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(value) => write!(f, "{}={value}", self.key),
            None => f.write_str(&self.key),
        }
    }
}

/// A validated rule, ready for requests.
#[derive(Debug, Clone)]
pub struct CompiledRule {
    pub id: RuleId,
    pub mode: Mode,
    pub priority: i64,
    pub namespaces: Vec<Glob>,
    pub selectors: Vec<Selector>,
    pub labels: Vec<LabelRequirement>,
    pub users: Vec<String>,
    pub exempt_users: Vec<Glob>,
    pub include: Vec<PathPattern>,
    pub exclude: Vec<PathPattern>,
    pub mutable: Vec<PathPattern>,
    pub bypass: String,
    /// `maxBypass`: how far after a request a bypass may end; with it, `true` is no bypass.
    pub max_bypass: Option<std::time::Duration>,
    /// Cluster rule or namespace rule (decided by [`TierPolicy`] when the set is built).
    pub tier: Tier,
    /// The diff scope: `include`, then system fields, `exclude` and the bypass annotation skipped.
    pub scope: Scope,
    /// `mutable` rendered for messages.
    pub mutable_text: String,
    pub origin: Option<String>,
}

impl CompiledRule {
    pub fn matches_namespace(&self, namespace: &str) -> bool {
        self.namespaces.iter().any(|g| g.matches(namespace))
    }

    pub fn matches_kind(&self, group: &str, kind: &str) -> bool {
        self.selectors.iter().any(|s| s.matches(group, kind))
    }

    /// All label requirements hold (true when there are none).
    pub fn matches_labels(&self, labels: Option<&serde_json::Map<String, Value>>) -> bool {
        self.labels.iter().all(|l| l.matches(labels))
    }

    pub fn user_in_scope(&self, user: &str) -> bool {
        self.users.is_empty() || self.users.iter().any(|u| u == user)
    }

    pub fn user_exempt(&self, user: &str) -> bool {
        self.exempt_users.iter().any(|g| g.matches(user))
    }

    /// Whether a mutable pattern covers the path.
    pub fn is_mutable<S: crate::path::AsSegment>(&self, path: &[S]) -> bool {
        self.mutable.iter().any(|p| p.covers(path))
    }
}

/// The annotation `kubectl drift bypass --reason` writes beside the bypass: part of the
/// bypass, so never compared either (setting or clearing a bypass changes both).
pub const BYPASS_REASON_ANNOTATION: &str = "drift-sentinel.k8s.io/bypass-reason";

/// What no rule ever compares: the implicit system fields, the rule's bypass annotation and
/// the bypass reason.
pub fn never_compared(bypass: &str) -> Vec<PathPattern> {
    let mut skip: Vec<PathPattern> = SYSTEM_FIELDS
        .iter()
        .filter_map(|p| PathPattern::parse(p).ok())
        .collect();
    skip.push(bypass_pattern(bypass));
    skip.push(bypass_pattern(BYPASS_REASON_ANNOTATION));
    skip
}

/// `metadata.annotations['<key>']`.
pub fn bypass_pattern(key: &str) -> PathPattern {
    PathPattern::from_segments(vec![
        PatternSegment::Key("metadata".into()),
        PatternSegment::Key("annotations".into()),
        PatternSegment::Key(key.to_owned()),
    ])
}

/// Whether a ConfigMap's annotations mark it as a rule: `"true"`, any case, spaces trimmed.
pub fn is_rule_annotation(annotations: Option<&serde_json::Map<String, Value>>) -> bool {
    annotations
        .and_then(|a| a.get(RULE_ANNOTATION))
        .and_then(Value::as_str)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// Reads a ConfigMap object. `None` when it is not a rule ConfigMap (wrong kind or not
/// annotated). `default_namespace` stands in for a missing `metadata.namespace`, as
/// `kubectl apply` would use the current namespace.
pub fn rule_source_from_config_map(
    object: &Value,
    default_namespace: &str,
    origin: Option<&str>,
) -> Option<RuleSource> {
    if object.get("kind").and_then(Value::as_str) != Some("ConfigMap") {
        return None;
    }
    let metadata = object.get("metadata")?;
    if !is_rule_annotation(metadata.get("annotations").and_then(Value::as_object)) {
        return None;
    }
    let namespace = metadata
        .get("namespace")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or(default_namespace);
    let name = metadata.get("name").and_then(Value::as_str).unwrap_or("");
    let spec = match object.get("data").and_then(|d| d.get("spec")) {
        None | Some(Value::Null) => SpecText::Missing,
        Some(Value::String(yaml)) => SpecText::Yaml(yaml.clone()),
        Some(Value::Bool(_)) => SpecText::NotAString("a boolean"),
        Some(Value::Number(_)) => SpecText::NotAString("a number"),
        Some(Value::Array(_)) => SpecText::NotAString("a list"),
        Some(Value::Object(_)) => SpecText::NotAString("a map"),
    };
    Some(RuleSource {
        id: RuleId {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        },
        spec,
        origin: origin.map(str::to_owned),
    })
}

/// The valid rules in match order (cluster rules first, then namespace rules; within a tier
/// priority descending, then namespace and name ascending as byte strings), and the invalid
/// ones with their errors.
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    rules: Vec<CompiledRule>,
    invalid: Vec<RuleError>,
}

impl RuleSet {
    /// Compiles every source as a cluster rule (offline files; see [`RuleSet::build_with`]).
    pub fn build(sources: impl IntoIterator<Item = RuleSource>) -> Self {
        Self::build_with(sources, &TierPolicy::all_cluster())
    }

    /// Compiles every source, each in the tier `policy` gives its ConfigMap's namespace. One
    /// invalid rule never stops the others. A second definition of the same ConfigMap is
    /// reported as invalid rather than silently replacing the first.
    pub fn build_with(sources: impl IntoIterator<Item = RuleSource>, policy: &TierPolicy) -> Self {
        let mut seen: BTreeMap<RuleId, Option<String>> = BTreeMap::new();
        let mut rules = Vec::new();
        let mut invalid = Vec::new();
        for source in sources {
            if let Some(first_origin) = seen.get(&source.id) {
                invalid.push(RuleError {
                    namespace: source.id.namespace.clone(),
                    name: source.id.name.clone(),
                    origin: source.origin.clone(),
                    field: None,
                    line: None,
                    column: None,
                    reason: format!(
                        "ConfigMap {} is defined more than once (first in {}); this definition is ignored",
                        source.id,
                        first_origin.as_deref().unwrap_or("another source")
                    ),
                });
                continue;
            }
            seen.insert(source.id.clone(), source.origin.clone());
            match compile(&source) {
                Ok(mut rule) => {
                    rule.tier = policy.tier_of(&rule.id.namespace);
                    rules.push(rule);
                }
                Err(e) => invalid.push(e),
            }
        }
        rules.sort_by(|a, b| {
            a.tier
                .cmp(&b.tier)
                .then_with(|| b.priority.cmp(&a.priority))
                .then_with(|| a.id.namespace.as_bytes().cmp(b.id.namespace.as_bytes()))
                .then_with(|| a.id.name.as_bytes().cmp(b.id.name.as_bytes()))
        });
        invalid.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        Self { rules, invalid }
    }

    /// Adds a rule that could not even be read (its source failed), so that it is reported
    /// with the others.
    pub fn push_invalid(&mut self, error: RuleError) {
        self.invalid.push(error);
        self.invalid
            .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    }

    /// Valid rules in match order.
    pub fn rules(&self) -> &[CompiledRule] {
        &self.rules
    }

    pub fn invalid(&self) -> &[RuleError] {
        &self.invalid
    }
}

#[cfg(test)]
#[path = "rule_tests.rs"]
mod tests;
