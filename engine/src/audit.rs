//! The audit evaluation (reference §8): one live object judged under the rule that would win for it at
//! admission — the same matching and priority, tiers, namespace mode annotation, bypass
//! annotation, deletion in progress and mode `off` (the functions of [`crate::evaluation`], not
//! copies) — against what was declared for it: its `last-applied-configuration` baseline
//! ([`crate::baseline`]) and the fields that imperative edits own ([`crate::managed`]). The
//! agent's audit, its export records, reports and metrics, and the plugin's `kubectl drift
//! audit` all render this one value.
//!
//! Offline, as `kubectl drift audit --rules PATH -f OBJECTS` does it:
//!
//! ```
//! use drift_engine::manifests::{parse_documents, rule_sources};
//! use drift_engine::{AuditContext, DEFAULT_DRIFT_MANAGERS, Detail, RuleSet};
//!
//! let rule = r#"
//! apiVersion: v1
//! kind: ConfigMap
//! metadata: {name: web, namespace: ops, annotations: {drift-sentinel.k8s.io/rule: "true"}}
//! data:
//!   spec: |
//!     mode: enforce
//!     namespaces: ["*"]
//!     selectors: [{apiGroup: apps, kind: Deployment}]
//! "#;
//! let rules = RuleSet::build(rule_sources(&parse_documents(rule, "rule.yaml").unwrap(), "rule.yaml"));
//! let live = r#"
//! apiVersion: apps/v1
//! kind: Deployment
//! metadata:
//!   name: web
//!   namespace: shop
//!   annotations:
//!     kubectl.kubernetes.io/last-applied-configuration: '{"spec":{"replicas":2}}'
//! spec: {replicas: 5, strategy: {type: RollingUpdate}}
//! "#;
//! let managers: Vec<String> = DEFAULT_DRIFT_MANAGERS.iter().map(|m| m.to_string()).collect();
//! let now = std::time::SystemTime::now();
//! let context = AuditContext { namespace_mode: None, drift_managers: &managers, now };
//! for object in parse_documents(live, "live.yaml").unwrap() {
//!     if !drift_engine::audit::is_selected(&rules, &object) {
//!         continue;
//!     }
//!     let audit = drift_engine::audit(&rules, &object, &context, Detail::Verdict);
//!     assert_eq!(audit.result_label(), "drifted");
//!     assert_eq!(audit.drift().unwrap().denied, ["spec.replicas"]);
//! }
//! ```

use std::borrow::Cow;
use std::time::SystemTime;

use serde_json::{Map, Value};

use crate::baseline::{self, BaselineError, LAST_APPLIED_ANNOTATION};
use crate::bypass::{Bypass, BypassEnd, BypassRefusal, read_bypass};
use crate::diff::{self, Change, ChangeKind, Coverage, field};
use crate::evaluation::{
    self, Comparison, Considered, Detail, ImperativeEdit, JudgedChange, Labels, Settled, Subject,
    Violation, Winner,
};
use crate::json::LazyValue;
use crate::managed::{self, OwnedField};
use crate::manifests::Namespaces;
use crate::omitted::OmittedZeros;
use crate::path::{FieldPath, PathSegment};
use crate::rule::{CompiledRule, Mode, RuleSet};

/// The field managers whose `Update`s are imperative edits by default: what kubectl 1.37 writes
/// for `edit`, `patch`, `set` (env, image, resources …), `label`, `annotate`, `replace`,
/// `rollout` and — plain `kubectl` — `scale` (reference §8, seen on a real API server; docs/audit.md).
pub const DEFAULT_DRIFT_MANAGERS: &[&str] = &[
    "kubectl-edit",
    "kubectl-patch",
    "kubectl-set",
    "kubectl-label",
    "kubectl-annotate",
    "kubectl-replace",
    "kubectl-rollout",
    "kubectl",
];

/// What the audit knows besides the object.
#[derive(Debug, Clone, Copy)]
pub struct AuditContext<'a> {
    /// Value of `drift-sentinel.k8s.io/mode` on the object's namespace, if any.
    pub namespace_mode: Option<&'a str>,
    /// Field managers whose `Update`s are imperative edits (`--audit-drift-managers`).
    pub drift_managers: &'a [String],
    /// When the run judges the object: a bypass end is compared with it.
    pub now: SystemTime,
}

/// One audited object.
#[derive(Debug, Clone)]
pub struct Audit<'a> {
    /// The rules tried, in priority order (up to the winner with [`Detail::Verdict`]).
    pub considered: Vec<Considered<'a>>,
    /// The winning rule and the mode it applies, when a rule matched.
    pub matched: Option<Winner<'a>>,
    pub result: AuditResult<'a>,
    /// The winning rule's bypass annotation, when the object carries it: honoured (the object
    /// is skipped) or not (it is judged, and an expired bypass is where forgotten drift shows).
    pub bypass: Option<BypassFinding<'a>>,
}

/// A bypass annotation the audit found, and who set it (reference §8 step 1).
#[derive(Debug, Clone)]
pub struct BypassFinding<'a> {
    /// The annotation's value.
    pub value: Cow<'a, str>,
    /// What the value means at the run's time.
    pub read: Result<Bypass, BypassRefusal>,
    /// The managedFields entry that owns the annotation: its manager, and since when (its
    /// `time`, when it has one).
    pub set_by: Option<ImperativeEdit<'a>>,
    /// The user who set it, from the webhook's record of the edit that wrote that entry
    /// ([`crate::attribution::bypass_setter`]); `None` when not known (the audit fills it in).
    pub user: Option<String>,
    /// Why the user is not known, when the audit looked for it (in a cluster, with Events):
    /// never a guess ([`crate::attribution::bypass_setter_unknown`]).
    pub user_unknown: Option<String>,
}

impl BypassFinding<'_> {
    /// How the metric counts it.
    pub fn end(&self) -> BypassEnd {
        crate::bypass::end_of(&self.read)
    }

    /// Who set it, as the audit remembers it (reference §8 "Memory"): the user it found and
    /// the managedFields entry (manager and time) that owns the annotation; `None` when the
    /// user is not known or the entry has no time (then it cannot be told apart from a later
    /// one).
    pub fn setter(&self) -> Option<drift_api::events::RememberedSetter> {
        let (user, edit) = (self.user.as_ref()?, self.set_by.as_ref()?);
        Some(drift_api::events::RememberedSetter {
            manager: edit.manager.to_string(),
            time: edit.time.as_deref()?.to_owned(),
            user: user.clone(),
        })
    }

    /// The end the value names, when it names one that could be read.
    pub fn end_time(&self) -> Option<SystemTime> {
        match &self.read {
            Ok(bypass) => bypass.end,
            Err(BypassRefusal::Expired { end, .. } | BypassRefusal::BeyondMax { end, .. }) => {
                Some(*end)
            }
            Err(_) => None,
        }
    }
}

/// What the audit made of an object: the four results of the metric
/// `drift_sentinel_audit_objects{result}`.
#[derive(Debug, Clone)]
pub enum AuditResult<'a> {
    /// Not judged, and why.
    Skipped(SkipReason),
    /// Neither a baseline nor a field owned by an imperative edit: nothing to compare with.
    NoBaseline,
    /// Compared; nothing drifted (or only what `mutable` covers).
    Clean(AuditComparison<'a>),
    /// Compared; `comparison.violation` names the drifted paths and the reason.
    Drifted(AuditComparison<'a>),
}

/// What an object was compared with, and what came of it.
#[derive(Debug, Clone)]
pub struct AuditComparison<'a> {
    /// Whether the object has a `last-applied-configuration` baseline.
    pub has_baseline: bool,
    /// The imperative edit that owns the baseline annotation, having rewritten it (`kubectl
    /// replace`, an edit or patch of the annotation): the fields imperative edits own are then
    /// drift whatever the baseline says, without a declared value (§8 step 3).
    pub baseline_rewritten_by: Option<ImperativeEdit<'a>>,
    /// Every change (old = declared, new = live), judged against `mutable`; the violation is
    /// the drift.
    pub comparison: Comparison<'a>,
}

/// Why an object was not judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// The object has no `kind`: no rule can be matched.
    NoKind,
    /// No valid rule matches it.
    NoMatchingRule,
    /// `metadata.deletionTimestamp` is set.
    BeingDeleted,
    /// The rule's bypass annotation is honoured ([`Audit::bypass`] says until when).
    Bypassed,
    /// The effective mode is `off`.
    ModeOff,
    /// The baseline annotation cannot be read.
    InvalidBaseline(BaselineError),
}

impl SkipReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            SkipReason::NoKind => "no-kind",
            SkipReason::NoMatchingRule => "no-matching-rule",
            SkipReason::BeingDeleted => "being-deleted",
            SkipReason::Bypassed => "bypassed",
            SkipReason::ModeOff => "mode-off",
            SkipReason::InvalidBaseline(_) => "invalid-baseline",
        }
    }
}

impl std::fmt::Display for SkipReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SkipReason::NoKind => f.write_str("the object has no kind"),
            SkipReason::NoMatchingRule => f.write_str("no matching rule"),
            SkipReason::BeingDeleted => f.write_str("object is being deleted"),
            SkipReason::Bypassed => f.write_str("bypass annotation present"),
            SkipReason::ModeOff => f.write_str("mode off"),
            SkipReason::InvalidBaseline(e) => write!(f, "{e}"),
        }
    }
}

impl<'a> Audit<'a> {
    /// `drifted`, `clean`, `no_baseline` or `skipped`: the label of the metric.
    pub fn result_label(&self) -> &'static str {
        match self.result {
            AuditResult::Skipped(_) => "skipped",
            AuditResult::NoBaseline => "no_baseline",
            AuditResult::Clean(_) => "clean",
            AuditResult::Drifted(_) => "drifted",
        }
    }

    pub fn rule(&self) -> Option<&'a CompiledRule> {
        self.matched.as_ref().map(|m| m.rule)
    }

    pub fn mode(&self) -> Option<Mode> {
        self.matched.as_ref().map(|m| m.mode)
    }

    /// The bypass the object is skipped under (honoured), when it is.
    pub fn honoured_bypass(&self) -> Option<&BypassFinding<'a>> {
        match self.result {
            AuditResult::Skipped(SkipReason::Bypassed) => self.bypass.as_ref(),
            _ => None,
        }
    }

    /// The comparison, when the object was compared.
    pub fn comparison(&self) -> Option<&Comparison<'a>> {
        match &self.result {
            AuditResult::Clean(c) | AuditResult::Drifted(c) => Some(&c.comparison),
            _ => None,
        }
    }

    /// The drift: drifted paths (byte order) and the reason.
    pub fn drift(&self) -> Option<&Violation> {
        match &self.result {
            AuditResult::Drifted(c) => c.comparison.violation.as_ref(),
            _ => None,
        }
    }

    pub fn is_drifted(&self) -> bool {
        self.drift().is_some()
    }

    /// Every change compared (empty when nothing was).
    pub fn changes(&self) -> &[JudgedChange<'a>] {
        self.comparison().map_or(&[], |c| &c.changes)
    }

    /// The id of what the audit reports about `object` (reference §8 "Reports",
    /// `properties.resultID`): its drift, or the bypass it is skipped under; `None` when it
    /// reports neither. Made of what identifies the finding — which of the two, the rule, the
    /// mode, the object (kind, namespace, name, uid), and the drifted paths or the bypass
    /// annotation's value — never of the run's time or the live values, so that the same
    /// finding has the same id on every run and a reader that notifies on new ids (Policy
    /// Reporter) notifies once; a changed mode, path set or bypass is a new finding. 32 hex
    /// digits of a SHA-256, the same in every version that keeps these inputs.
    pub fn finding_id(&self, object: &AuditedObject<'_>) -> Option<String> {
        use sha2::Digest as _;
        let rule = self.rule()?;
        let mode = self.mode()?;
        let mut hasher = sha2::Sha256::new();
        // Each part with its length first, so that no two lists of parts hash alike.
        let mut part = |bytes: &[u8]| {
            hasher.update((bytes.len() as u64).to_be_bytes());
            hasher.update(bytes);
        };
        let (found, bypass) = match (&self.result, &self.bypass) {
            (AuditResult::Drifted(_), _) => ("drift", None),
            (AuditResult::Skipped(SkipReason::Bypassed), Some(bypass)) => ("bypass", Some(bypass)),
            _ => return None,
        };
        for text in [
            found,
            &rule.id.to_string(),
            mode.as_str(),
            object.kind,
            object.namespace,
            object.name,
            object.uid,
        ] {
            part(text.as_bytes());
        }
        match (self.drift(), bypass) {
            (Some(drift), _) => {
                part(drift.denied_count.to_string().as_bytes());
                for path in &drift.denied {
                    part(path.as_bytes());
                }
            }
            (None, Some(bypass)) => part(bypass.value.trim().as_bytes()),
            (None, None) => return None,
        }
        let digest = hasher.finalize();
        let mut id = String::with_capacity(32);
        crate::hex::push_hex(&mut id, &digest[..16]);
        Some(id)
    }
}

/// `(group, kind)` of an object from its `apiVersion` and `kind`.
fn group_kind(object: &Value) -> Option<(&str, &str)> {
    let kind = field(object, "kind")?.as_str().filter(|k| !k.is_empty())?;
    let api_version = field(object, "apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
    Some((group, kind))
}

/// Whether a rule audits: its mode is `enforce`, `warn` or `dry-run` (§8 step 1).
pub fn audits(rule: &CompiledRule) -> bool {
    rule.mode != Mode::Off
}

/// Whether an auditing rule selects `object` — by namespace (and tier), kind and labels, as at
/// admission: the objects a run audits (§8 step 1). The rule `object` is then judged under is
/// the one [`audit`] finds, which may be another (a higher priority one, `off` included).
pub fn is_selected(rules: &RuleSet, object: &Value) -> bool {
    let Some((group, kind)) = group_kind(object) else {
        return false;
    };
    let subject = Subject {
        namespace: field(object, "metadata")
            .and_then(|m| field(m, "namespace"))
            .and_then(Value::as_str)
            .unwrap_or(""),
        group,
        kind,
        labels: Labels::Object(evaluation::labels_of(Some(object))),
    };
    rules
        .rules()
        .iter()
        .any(|rule| audits(rule) && evaluation::match_rule(rule, &subject).is_ok())
}

/// Whether an auditing rule selects objects of `(group, kind)`: a selector naming both, or — for
/// a selector with a `*` — a resource the webhook intercepts (`webhook_resource`).
pub fn selects_kind(rules: &RuleSet, group: &str, kind: &str, webhook_resource: bool) -> bool {
    use crate::rule::NameMatch;
    rules.rules().iter().filter(|r| audits(r)).any(|rule| {
        rule.selectors.iter().any(|s| {
            let literal = matches!(
                (&s.group, &s.kind),
                (NameMatch::Exactly(_), NameMatch::Exactly(_))
            );
            s.matches(group, kind) && (literal || webhook_resource)
        })
    })
}

/// The resources a `*` selector audits when nothing else says: the webhook's, as the chart's
/// default `webhook.rules` lists them (`group/resource`; the core group is empty).
pub const DEFAULT_AUDIT_RESOURCES: &str =
    "apps/deployments,apps/statefulsets,apps/daemonsets,argoproj.io/rollouts";

/// `group/resource` pairs of a list such as [`DEFAULT_AUDIT_RESOURCES`] (`/pods` or `pods` is
/// the core group); empty entries are dropped.
pub fn parse_resources<S: AsRef<str>>(texts: &[S]) -> Vec<(String, String)> {
    texts
        .iter()
        .flat_map(|t| t.as_ref().split(','))
        .filter_map(|t| {
            let t = t.trim();
            let (group, resource) = t.rsplit_once('/').unwrap_or(("", t));
            (!resource.is_empty()).then(|| (group.to_owned(), resource.to_owned()))
        })
        .collect()
}

/// Judges one live object as a run does: `None` when no auditing rule selects it (it is not
/// part of the run, not even counted); otherwise the engine's audit under the rule that would
/// win at admission, with the object's namespace's mode annotation.
pub fn audit_object<'a>(
    rules: &'a RuleSet,
    namespaces: &'a Namespaces,
    object: &'a Value,
    drift_managers: &'a [String],
    now: SystemTime,
) -> Option<Audit<'a>> {
    if !is_selected(rules, object) {
        return None;
    }
    let namespace = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let context = AuditContext {
        namespace_mode: namespaces
            .get(namespace)
            .and_then(|n| n.mode_annotation.as_deref()),
        drift_managers,
        now,
    };
    Some(audit(rules, object, &context, Detail::Verdict))
}

static NO_LABELS: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);

/// The identity of an audited object, as the audit listed (or read) it.
#[derive(Debug, Clone, Copy)]
pub struct AuditedObject<'a> {
    /// The resource's plural name (`deployments`).
    pub resource: &'a str,
    pub api_version: &'a str,
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    /// `metadata.uid`; empty for an object read from a file that has none.
    pub uid: &'a str,
    pub labels: &'a Map<String, Value>,
}

impl<'a> AuditedObject<'a> {
    /// Reads the identity of `object` (its `apiVersion`, `kind` and metadata).
    pub fn of(object: &'a Value, resource: &'a str) -> Self {
        let text = |pointer: &str| {
            object
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or("")
        };
        Self {
            resource,
            api_version: text("/apiVersion"),
            kind: text("/kind"),
            namespace: text("/metadata/namespace"),
            name: text("/metadata/name"),
            uid: text("/metadata/uid"),
            labels: object
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .unwrap_or(&NO_LABELS),
        }
    }

    /// `namespace/name`, or `name` for a cluster-scoped object.
    pub fn display_name(&self) -> String {
        if self.namespace.is_empty() {
            self.name.to_owned()
        } else {
            format!("{}/{}", self.namespace, self.name)
        }
    }
}

/// The rules tried for a live object and the one that would win for it at admission.
fn winner_for<'a>(
    rules: &'a RuleSet,
    object: &Value,
    group: &str,
    kind: &str,
    namespace: &str,
    detail: Detail,
) -> (Vec<Considered<'a>>, Option<&'a CompiledRule>) {
    let subject = Subject {
        namespace,
        group,
        kind,
        labels: Labels::Object(evaluation::labels_of(Some(object))),
    };
    evaluation::find_winner(rules, &subject, detail)
}

/// The rule that would win for a live object at admission (its namespace, kind and labels), as
/// the audit and `kubectl drift bypass` find it.
pub fn winning_rule<'a>(rules: &'a RuleSet, object: &Value) -> Option<&'a CompiledRule> {
    let (group, kind) = group_kind(object)?;
    let namespace = field(object, "metadata")
        .and_then(|m| field(m, "namespace"))
        .and_then(Value::as_str)
        .unwrap_or("");
    winner_for(rules, object, group, kind, namespace, Detail::Verdict).1
}

/// The bypass annotation of `rule` on a live object, what it means at `now`, and who set it
/// (managedFields); `None` without it.
pub fn bypass_finding<'a>(
    rule: &CompiledRule,
    object: &'a Value,
    now: SystemTime,
) -> Option<BypassFinding<'a>> {
    let value = evaluation::annotation(object, &rule.bypass)?;
    Some(BypassFinding {
        read: read_bypass(&value, now, rule.max_bypass),
        value,
        set_by: managed::annotation_owner(object, &rule.bypass).map(|owner| ImperativeEdit {
            manager: owner.manager().clone(),
            time: owner.time().cloned(),
        }),
        user: None,
        user_unknown: None,
    })
}

/// Audits one live object against `rules`.
pub fn audit<'a>(
    rules: &'a RuleSet,
    object: &'a Value,
    context: &AuditContext<'a>,
    detail: Detail,
) -> Audit<'a> {
    let skipped = |why| Audit {
        considered: Vec::new(),
        matched: None,
        result: AuditResult::Skipped(why),
        bypass: None,
    };
    let Some((group, kind)) = group_kind(object) else {
        return skipped(SkipReason::NoKind);
    };
    let namespace = field(object, "metadata")
        .and_then(|m| field(m, "namespace"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let (considered, winner) = winner_for(rules, object, group, kind, namespace, detail);
    let Some(rule) = winner else {
        return Audit {
            considered,
            matched: None,
            result: AuditResult::Skipped(SkipReason::NoMatchingRule),
            bypass: None,
        };
    };
    let winner = evaluation::effective_mode(rule, context.namespace_mode, namespace);
    let bypass = bypass_finding(rule, object, context.now);
    let read = bypass.as_ref().map(|b| &b.read);
    let result = match evaluation::settle_before_diff(object, read, winner.mode) {
        Some(Settled::BeingDeleted) => AuditResult::Skipped(SkipReason::BeingDeleted),
        Some(Settled::Bypassed(_)) => AuditResult::Skipped(SkipReason::Bypassed),
        Some(_) => AuditResult::Skipped(SkipReason::ModeOff),
        None => compare(
            rule,
            object,
            OmittedZeros::of_kind(group, kind),
            context.drift_managers,
        ),
    };
    Audit {
        considered,
        matched: Some(winner),
        result,
        bypass,
    }
}

/// Steps 2–3 and the judgement: the baseline's changes, the imperative edits, `mutable`.
/// `zeros`: the zeros the object's kind leaves out, equal to their absence (§8 step 2).
fn compare<'a>(
    rule: &CompiledRule,
    object: &'a Value,
    zeros: OmittedZeros,
    managers: &[String],
) -> AuditResult<'a> {
    let declared = match baseline::baseline_of(object) {
        None => None,
        Some(Ok(declared)) => Some(declared),
        Some(Err(e)) => return AuditResult::Skipped(SkipReason::InvalidBaseline(e)),
    };
    let owned = managed::imperative_fields(object, managers);
    if declared.is_none() && owned.is_empty() {
        return AuditResult::NoBaseline;
    }
    // `kubectl replace` (or an edit or patch of the annotation) rewrote the baseline: while an
    // imperative edit owns the annotation, it no longer says what was declared (§8 step 3).
    let rewritten_by = latest_edit(&owned, &[], |owned, _| is_last_applied(owned));
    let trusted = declared.as_ref().filter(|_| rewritten_by.is_none());
    let mut judged: Vec<JudgedChange<'a>> = match &declared {
        Some(declared) => baseline::changes(declared, object, &rule.scope, &rule.mutable, zeros)
            .into_iter()
            .map(JudgedChange::new)
            // Fields an imperative edit owns under a rewritten baseline are reported below,
            // without the rewritten value as if it had been declared.
            .filter(|c| {
                trusted.is_some()
                    || !owned
                        .iter()
                        .any(|f| related(c.change.path.segments(), f.path.segments()))
            })
            .collect(),
        None => Vec::new(),
    };
    // Who changed a declared field: the latest imperative edit that owns it (or a part of it).
    for change in &mut judged {
        change.edit = latest_edit(&owned, change.change.path.segments(), |owned, changed| {
            changed.starts_with(owned) || owned.starts_with(changed)
        });
    }
    // Fields the baseline does not declare (or, without a trusted one, every field) that an
    // imperative edit owns are changes too; declared ones are drift only when their value
    // differs, which the baseline comparison above already says.
    let mut extra: Vec<JudgedChange<'a>> = Vec::new();
    for field in &owned {
        let path = field.path.segments();
        if is_last_applied(path)
            || judged
                .iter()
                .any(|c| related(c.change.path.segments(), path))
            || extra.iter().any(|c| c.change.path == field.path)
            || trusted.is_some_and(|d| baseline::declares(d, object, path, zeros))
        {
            continue;
        }
        if let Some(mut change) = owned_change(rule, object, field, &owned) {
            change.declared_unknown = trusted.is_none();
            extra.push(change);
        }
    }
    judged.extend(extra);
    let comparison = crate::comparison::judge_changes(rule, judged, None);
    let comparison = AuditComparison {
        has_baseline: declared.is_some(),
        baseline_rewritten_by: rewritten_by,
        comparison,
    };
    if comparison.comparison.violation.is_some() {
        AuditResult::Drifted(comparison)
    } else {
        AuditResult::Clean(comparison)
    }
}

fn related(a: &[PathSegment], b: &[PathSegment]) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// Whether `path` is where the baseline lives: `metadata.annotations[last-applied-configuration]`.
fn is_last_applied(path: &[PathSegment]) -> bool {
    matches!(path, [PathSegment::Key(m), PathSegment::Key(a), PathSegment::Key(k)]
        if m == "metadata" && a == "annotations" && k == LAST_APPLIED_ANNOTATION)
}

/// The edit with the latest `time` among the owned fields `relates` to `path` (an entry without
/// a time counts as oldest).
fn latest_edit<'a>(
    owned: &[OwnedField<'a>],
    path: &[PathSegment],
    relates: impl Fn(&[PathSegment], &[PathSegment]) -> bool,
) -> Option<ImperativeEdit<'a>> {
    owned
        .iter()
        .filter(|f| relates(f.path.segments(), path))
        .max_by(|a, b| a.time.cmp(&b.time))
        .map(|f| ImperativeEdit {
            manager: Cow::Borrowed(f.manager),
            time: f.time.map(Cow::Borrowed),
        })
}

/// A field an imperative edit owns that nothing declares: a change from absent to its live
/// value, scoped by the rule as the diff scopes its own changes.
fn owned_change<'a>(
    rule: &CompiledRule,
    object: &'a Value,
    owned_field: &OwnedField<'a>,
    owned: &[OwnedField<'a>],
) -> Option<JudgedChange<'a>> {
    let path = owned_field.path.segments();
    if rule.scope.coverage(path) == Coverage::Out {
        return None;
    }
    let live = value_at(object, path).filter(|v| !diff::is_absent(v))?;
    let scoped = diff::scoped_value(&rule.scope, &owned_field.path, live)?.into_owned();
    let mut change = JudgedChange::new(Change {
        path: FieldPath::from(path.to_vec()),
        kind: ChangeKind::Added,
        old: None,
        new: Some(LazyValue::from(scoped)),
    });
    change.edit = latest_edit(owned, path, |owned, wanted| owned == wanted);
    Some(change)
}

fn value_at<'v>(object: &'v Value, path: &[PathSegment]) -> Option<&'v Value> {
    path.iter()
        .try_fold(object, |value, segment| match segment {
            PathSegment::Key(key) => field(value, key),
            PathSegment::Index(index) => value.as_array()?.get(*index),
        })
}

#[cfg(test)]
#[path = "audit_tests/mod.rs"]
mod tests;
