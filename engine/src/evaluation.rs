//! The admission evaluation (reference §3): a request and a rule set in, one value out that says
//! everything that happened — the rules considered and why each matched or not, and an outcome
//! in which impossible states cannot be written. The admission response, the agent's log line,
//! metrics and export record, and the plugin's `explain` and `preview` all render this value
//! (see [`crate::message`] for the texts); none of them decides anything again.

use std::borrow::Cow;
use std::time::SystemTime;

use serde_json::{Map, Value};

use crate::bypass::{Bypass, BypassRefusal, read_bypass};
use crate::comparison::Judging;
pub use crate::comparison::{
    Comparison, ImperativeEdit, JudgedChange, MAX_KEPT_CHANGES, Violation,
};
use crate::diff::{self, Change, ChangeKind, Coverage, Side};
use crate::json::{Document, Node, Shape};
use crate::omitted::OmittedZeros;
use crate::review::AdmissionRequest;
use crate::rule::{CompiledRule, LabelRequirement, Mode, RuleSet, Tier};

/// What the cluster knows besides the request: the namespace's mode annotation, for
/// `/scale` the parent object's labels, and the time the request is judged at (the one clock,
/// passed in: the engine reads none).
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// Value of `drift-sentinel.k8s.io/mode` on the request's namespace, if any.
    pub namespace_mode: Option<&'a str>,
    /// Labels of the object a `/scale` request scales, when known.
    pub parent_labels: Option<&'a Map<String, Value>>,
    /// When the request is judged: a bypass end is compared with it.
    pub now: SystemTime,
}

impl Context<'_> {
    /// A request judged at `now`, with no namespace annotation and no parent labels.
    pub fn at(now: SystemTime) -> Self {
        Context {
            namespace_mode: None,
            parent_labels: None,
            now,
        }
    }
}

/// How much an evaluation finds out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Detail {
    /// What an answer needs: rules are tried in priority order until one matches.
    #[default]
    Verdict,
    /// Also every rule after the winner, and the changes that `include`/`exclude` leave out:
    /// what `explain` and `preview` show a person.
    Full,
}

/// Everything one evaluation found.
#[derive(Debug, Clone)]
pub struct Evaluation<'a> {
    /// The rules tried, in priority order, each with whether it matched (with
    /// [`Detail::Verdict`], up to the winner).
    pub considered: Vec<Considered<'a>>,
    pub outcome: Outcome<'a>,
    /// The violation reason once [`crate::message`] has rendered it: the response, the warning,
    /// the log line and the export record all show it, and it is rendered once.
    pub(crate) rendered_reason: std::sync::OnceLock<String>,
}

/// One rule tried against the request.
#[derive(Debug, Clone)]
pub struct Considered<'a> {
    pub rule: &'a CompiledRule,
    pub matched: Result<(), Mismatch<'a>>,
}

/// Why a rule did not match a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch<'a> {
    Namespace,
    /// A namespace rule applies only to objects of its own namespace.
    OtherNamespace,
    /// A namespace rule never applies where a cluster rule matches.
    ClusterRuleMatched,
    Selector,
    /// This label requirement does not hold on the object (or the scaled parent).
    Label(&'a LabelRequirement),
    /// The rule selects by labels, and a `/scale` request's parent labels are not known.
    ParentLabelsUnknown,
}

/// How the request was settled.
#[derive(Debug, Clone)]
pub enum Outcome<'a> {
    /// Operations other than UPDATE are allowed without matching any rule.
    NotEnforced,
    /// The request cannot be judged (code 400).
    BadRequest(BadRequest),
    /// No rule matched: allowed.
    NoMatch(NoMatch),
    /// A rule matched; what it made of the request.
    Matched(Matched<'a>),
}

/// What is wrong with a request that cannot be judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadRequest {
    /// `object` and/or `oldObject` of an UPDATE is missing or not a JSON object.
    ObjectsMissing { object: bool, old_object: bool },
    /// An UPDATE without `request.kind` cannot be matched.
    KindMissing,
}

/// Why no rule matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoMatch {
    /// No valid rule matches the namespace, kind and labels.
    NoRule,
    /// A `/scale` of a resource whose kind is not known (not enforced).
    ScaleOfUnknownResource(String),
}

/// The winning rule and the mode it applies (step 5): what a matched request and a matched
/// object (the audit's) both report.
#[derive(Debug, Clone)]
pub struct Winner<'a> {
    pub rule: &'a CompiledRule,
    /// The effective mode, reported for every matched UPDATE and every matched object.
    pub mode: Mode,
    pub mode_source: ModeSource,
    /// The namespace's mode annotation when it names no mode: ignored, and warned about.
    pub ignored_mode_annotation: Option<IgnoredModeAnnotation<'a>>,
}

/// A matched rule and what it made of the request. Its [`Winner`]'s fields read as its own
/// (`matched.rule`, `matched.mode`).
#[derive(Debug, Clone)]
pub struct Matched<'a> {
    pub winner: Winner<'a>,
    /// The value of the rule's bypass annotation on the new object, when present.
    pub bypass_value: Option<Cow<'a, str>>,
    /// What that value means at the request's time (step 4): a bypass, or why it is none.
    pub bypass: Option<Result<Bypass, BypassRefusal>>,
    pub settled: Settled<'a>,
}

/// A namespace mode annotation that names no mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IgnoredModeAnnotation<'a> {
    pub namespace: &'a str,
    pub value: &'a str,
}

/// Where the effective mode came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModeSource {
    Rule,
    NamespaceAnnotation,
}

/// The step that settled a matched request.
#[derive(Debug, Clone)]
pub enum Settled<'a> {
    /// Step 2: the rule scopes users and this one is not listed.
    UserNotInScope,
    /// Step 2: the user matches `exemptUsers`.
    UserExempt,
    /// Step 3: the old object is being deleted.
    BeingDeleted,
    /// Step 4: the bypass annotation is honoured.
    Bypassed(Bypass),
    /// Step 5: mode `off` allows without diffing.
    ModeOff,
    /// Steps 6–9: the objects were compared.
    Compared(Comparison<'a>),
}

/// Which step settled the request, as one word (for logs and documents).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    OperationNotEnforced,
    BadRequest,
    NoMatchingRule,
    UserNotInScope,
    UserExempt,
    BeingDeleted,
    Bypassed,
    ModeOff,
    NoChanges,
    OnlyMutable,
    Violation,
}

/// The `result` audit annotation of a matched request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Allowed,
    Denied,
    Warned,
    WouldDeny,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allowed => "allowed",
            Verdict::Denied => "denied",
            Verdict::Warned => "warned",
            Verdict::WouldDeny => "would-deny",
        }
    }
}

impl Step {
    /// The reason text of an allowing step.
    pub fn reason(self) -> &'static str {
        match self {
            Step::OperationNotEnforced => "operation not enforced",
            Step::BadRequest => "bad request",
            Step::NoMatchingRule => "no matching rule",
            Step::UserNotInScope => "user not in scoped user list",
            Step::UserExempt => "user exempt",
            Step::BeingDeleted => "object is being deleted",
            Step::Bypassed => "bypass annotation present",
            Step::ModeOff => "mode off",
            Step::NoChanges => "no changes detected",
            Step::OnlyMutable => "only mutable fields changed",
            Step::Violation => "immutable fields changed",
        }
    }
}

impl<'a> Evaluation<'a> {
    /// The step that settled the request.
    pub fn step(&self) -> Step {
        match &self.outcome {
            Outcome::NotEnforced => Step::OperationNotEnforced,
            Outcome::BadRequest(_) => Step::BadRequest,
            Outcome::NoMatch(_) => Step::NoMatchingRule,
            Outcome::Matched(matched) => match &matched.settled {
                Settled::UserNotInScope => Step::UserNotInScope,
                Settled::UserExempt => Step::UserExempt,
                Settled::BeingDeleted => Step::BeingDeleted,
                Settled::Bypassed(_) => Step::Bypassed,
                Settled::ModeOff => Step::ModeOff,
                Settled::Compared(c) if c.violation.is_some() => Step::Violation,
                Settled::Compared(c) if c.changed_count == 0 => Step::NoChanges,
                Settled::Compared(_) => Step::OnlyMutable,
            },
        }
    }

    /// The matched rule and what it made of the request, if a rule matched.
    pub fn matched(&self) -> Option<&Matched<'a>> {
        match &self.outcome {
            Outcome::Matched(matched) => Some(matched),
            _ => None,
        }
    }

    /// The winning rule.
    pub fn rule(&self) -> Option<&'a CompiledRule> {
        self.matched().map(|m| m.winner.rule)
    }

    /// The effective mode of a matched request.
    pub fn mode(&self) -> Option<Mode> {
        self.matched().map(|m| m.winner.mode)
    }

    /// The comparison, when the objects were compared.
    pub fn comparison(&self) -> Option<&Comparison<'a>> {
        match &self.matched()?.settled {
            Settled::Compared(comparison) => Some(comparison),
            _ => None,
        }
    }

    /// The violation, whatever the mode made of it.
    pub fn violation(&self) -> Option<&Violation> {
        self.comparison()?.violation.as_ref()
    }

    pub fn is_violation(&self) -> bool {
        self.violation().is_some()
    }

    /// Every compared change (empty when nothing was compared).
    pub fn changes(&self) -> &[JudgedChange<'a>] {
        self.comparison().map_or(&[], |c| &c.changes)
    }

    /// Uncovered paths (empty without a violation).
    pub fn denied_paths(&self) -> &[String] {
        self.violation().map_or(&[], |v| &v.denied)
    }

    /// The `result` of a matched request; `None` when no rule matched.
    pub fn verdict(&self) -> Option<Verdict> {
        let matched = self.matched()?;
        Some(match (&self.violation(), matched.winner.mode) {
            (None, _) | (Some(_), Mode::Off) => Verdict::Allowed,
            (Some(_), Mode::Enforce) => Verdict::Denied,
            (Some(_), Mode::Warn) => Verdict::Warned,
            (Some(_), Mode::DryRun) => Verdict::WouldDeny,
        })
    }

    /// Whether the API server may go ahead.
    pub fn allowed(&self) -> bool {
        match &self.outcome {
            Outcome::BadRequest(_) => false,
            _ => self.verdict() != Some(Verdict::Denied),
        }
    }
}

/// The group and kind a request is judged as: the object's, or for `/scale` the parent's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target<'r> {
    pub group: Cow<'r, str>,
    pub kind: Cow<'r, str>,
    pub scale: bool,
}

/// Maps a request to the group and kind rules are matched with. `None` for a `/scale` of a
/// resource whose kind is not known.
pub fn target_of<O>(request: &AdmissionRequest<O>) -> Option<Target<'_>> {
    if request.sub_resource() == "scale" {
        let kind = match (
            request.resource.group.as_str(),
            request.resource.resource.as_str(),
        ) {
            ("apps", "deployments") | ("extensions", "deployments") => "Deployment",
            ("apps", "statefulsets") => "StatefulSet",
            ("apps", "replicasets") | ("extensions", "replicasets") => "ReplicaSet",
            ("argoproj.io", "rollouts") => "Rollout",
            ("", "replicationcontrollers") => "ReplicationController",
            _ => return None,
        };
        return Some(Target {
            group: Cow::Borrowed(request.resource.group.as_str()),
            kind: Cow::Borrowed(kind),
            scale: true,
        });
    }
    Some(Target {
        group: Cow::Borrowed(request.kind.group.as_str()),
        kind: Cow::Borrowed(request.kind.kind.as_str()),
        scale: false,
    })
}

/// The labels rules are matched against.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Labels<'s, N> {
    /// The object's `metadata.labels`, `None` when it has none.
    Object(Option<N>),
    /// The labels of the object a `/scale` request scales.
    Parent(&'s Map<String, Value>),
    /// A `/scale` request whose parent's labels are not known.
    ParentUnknown,
}

/// What rules are matched with: the same for an admission request and an audited object.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Subject<'s, N> {
    pub namespace: &'s str,
    pub group: &'s str,
    pub kind: &'s str,
    pub labels: Labels<'s, N>,
}

/// Whether `rule` matches: namespace glob, selector, then labels (of the new object, or of the
/// scaled parent).
pub(crate) fn match_rule<'a, 'v, N: Node<'v>>(
    rule: &'a CompiledRule,
    subject: &Subject<'_, N>,
) -> Result<(), Mismatch<'a>> {
    if rule.tier == Tier::Namespace && rule.id.namespace != subject.namespace {
        return Err(Mismatch::OtherNamespace);
    }
    if !rule.matches_namespace(subject.namespace) {
        return Err(Mismatch::Namespace);
    }
    if !rule.matches_kind(subject.group, subject.kind) {
        return Err(Mismatch::Selector);
    }
    if rule.labels.is_empty() {
        return Ok(());
    }
    let failed = match subject.labels {
        Labels::Object(labels) => rule.labels.iter().find(|l| !l.matches_node(labels)),
        Labels::Parent(labels) => rule.labels.iter().find(|l| !l.matches(Some(labels))),
        Labels::ParentUnknown => return Err(Mismatch::ParentLabelsUnknown),
    };
    match failed {
        Some(failed) => Err(Mismatch::Label(failed)),
        None => Ok(()),
    }
}

/// Step 1, shared by admission and the audit: the rules tried in match order and the winner.
/// With [`Detail::Verdict`] the rules after the winner are not tried.
pub(crate) fn find_winner<'a, 'v, N: Node<'v>>(
    rules: &'a RuleSet,
    subject: &Subject<'_, N>,
    detail: Detail,
) -> (Vec<Considered<'a>>, Option<&'a CompiledRule>) {
    let mut considered = Vec::new();
    let mut winner = None;
    for rule in rules.rules() {
        // Rules come cluster tier first: a namespace rule is only tried when no cluster rule
        // matched (reference §2), so it can never override, switch off or weaken one.
        let shadowed = rule.tier == Tier::Namespace
            && winner.is_some_and(|w: &CompiledRule| w.tier == Tier::Cluster);
        let matched = if shadowed {
            Err(Mismatch::ClusterRuleMatched)
        } else {
            match_rule(rule, subject)
        };
        let wins = matched.is_ok() && winner.is_none();
        considered.push(Considered { rule, matched });
        if wins {
            winner = Some(rule);
            if detail == Detail::Verdict {
                break;
            }
        }
    }
    (considered, winner)
}

/// Step 5: the namespace annotation if it names a mode, else the rule's mode (an annotation
/// naming no mode is ignored and reported).
pub(crate) fn effective_mode<'a>(
    rule: &'a CompiledRule,
    namespace_mode: Option<&'a str>,
    namespace: &'a str,
) -> Winner<'a> {
    let (mode, mode_source, ignored_mode_annotation) = match namespace_mode {
        Some(value) => match Mode::from_name(value) {
            Some(mode) => (mode, ModeSource::NamespaceAnnotation, None),
            None => (
                rule.mode,
                ModeSource::Rule,
                Some(IgnoredModeAnnotation { namespace, value }),
            ),
        },
        None => (rule.mode, ModeSource::Rule, None),
    };
    Winner {
        rule,
        mode,
        mode_source,
        ignored_mode_annotation,
    }
}

/// Steps 3–5, shared by admission and the audit: an object being deleted, an honoured bypass
/// and mode `off` each settle before anything is compared.
pub(crate) fn settle_before_diff<'v, N: Node<'v>>(
    object: N,
    bypass: Option<&Result<Bypass, BypassRefusal>>,
    mode: Mode,
) -> Option<Settled<'static>> {
    let deleting = object
        .get("metadata")
        .and_then(|m| m.get("deletionTimestamp"))
        .is_some_and(|t| !t.is_absent() && t.as_str().as_deref() != Some(""));
    if deleting {
        return Some(Settled::BeingDeleted);
    }
    if let Some(Ok(bypass)) = bypass {
        return Some(Settled::Bypassed(*bypass));
    }
    if mode == Mode::Off {
        return Some(Settled::ModeOff);
    }
    None
}

/// `metadata.labels` of an object, when it is a map.
pub(crate) fn labels_of<'v, N: Node<'v>>(object: Option<N>) -> Option<N> {
    object?
        .get("metadata")?
        .get("labels")
        .filter(|labels| labels.shape() == Shape::Object)
}

/// `metadata.annotations[key]` of an object, when it is a string.
pub(crate) fn annotation<'v, N: Node<'v>>(object: N, key: &str) -> Option<Cow<'v, str>> {
    object
        .get("metadata")?
        .get("annotations")?
        .get(key)?
        .as_str()
}

/// Evaluates one request against `rules`. The request's objects may be parsed documents or
/// the raw text of the request body ([`crate::review::parse_review_raw`]): the evaluation is
/// the same.
pub fn evaluate<'a, O: Document>(
    rules: &'a RuleSet,
    request: &'a AdmissionRequest<O>,
    context: &Context<'a>,
    detail: Detail,
) -> Evaluation<'a> {
    let settled = |outcome| Evaluation {
        considered: Vec::new(),
        outcome,
        rendered_reason: std::sync::OnceLock::new(),
    };
    if request.operation != "UPDATE" {
        return settled(Outcome::NotEnforced);
    }
    let object = |document: &'a Option<O>| {
        document
            .as_ref()
            .map(O::node)
            .filter(|node| node.shape() == Shape::Object)
    };
    let (Some(new), Some(old)) = (object(&request.object), object(&request.old_object)) else {
        return settled(Outcome::BadRequest(BadRequest::ObjectsMissing {
            object: object(&request.object).is_none(),
            old_object: object(&request.old_object).is_none(),
        }));
    };
    if request.kind.kind.is_empty() && request.sub_resource() != "scale" {
        return settled(Outcome::BadRequest(BadRequest::KindMissing));
    }

    // 1. Match.
    let Some(target) = target_of(request) else {
        return settled(Outcome::NoMatch(NoMatch::ScaleOfUnknownResource(
            request.resource.resource.clone(),
        )));
    };
    let labels = if target.scale {
        context
            .parent_labels
            .map_or(Labels::ParentUnknown, Labels::Parent)
    } else {
        Labels::Object(labels_of(Some(new)))
    };
    let subject = Subject {
        namespace: request.namespace(),
        group: &target.group,
        kind: &target.kind,
        labels,
    };
    let (considered, winner) = find_winner(rules, &subject, detail);
    let Some(rule) = winner else {
        return Evaluation {
            considered,
            outcome: Outcome::NoMatch(NoMatch::NoRule),
            rendered_reason: std::sync::OnceLock::new(),
        };
    };

    // 5 (computed first: it is reported for every matched request).
    let winner = effective_mode(rule, context.namespace_mode, request.namespace());
    let bypass_value = annotation(new, &rule.bypass);
    let bypass = bypass_value
        .as_deref()
        .map(|value| read_bypass(value, context.now, rule.max_bypass));
    let objects = Objects {
        old,
        new,
        zeros: OmittedZeros::of_kind(&target.group, &target.kind),
    };
    let settled = settle(
        rule,
        &request.user_info.username,
        objects,
        winner.mode,
        bypass.as_ref(),
        target.scale,
        detail,
    );
    Evaluation {
        considered,
        outcome: Outcome::Matched(Matched {
            winner,
            bypass_value,
            bypass,
            settled,
        }),
        rendered_reason: std::sync::OnceLock::new(),
    }
}

/// The two versions of the object of an UPDATE, and the zeros their kind leaves out.
#[derive(Clone, Copy)]
struct Objects<N> {
    old: N,
    new: N,
    zeros: OmittedZeros,
}

/// Steps 2–9 for the winning rule.
fn settle<'a, N: Node<'a>>(
    rule: &'a CompiledRule,
    user: &str,
    objects: Objects<N>,
    mode: Mode,
    bypass: Option<&Result<Bypass, BypassRefusal>>,
    scale: bool,
    detail: Detail,
) -> Settled<'a> {
    // 2. Users.
    if !rule.user_in_scope(user) {
        return Settled::UserNotInScope;
    }
    if rule.user_exempt(user) {
        return Settled::UserExempt;
    }
    // 3–5. Deletion in progress, bypass, mode off.
    if let Some(settled) = settle_before_diff(objects.old, bypass, mode) {
        return settled;
    }
    // 6–9. Scope and diff; each change judged as it is found; the violation. Only what an
    // answer shows is kept (reference §5), unless a person asked for everything.
    let limit = match detail {
        Detail::Verdict => MAX_KEPT_CHANGES,
        Detail::Full => usize::MAX,
    };
    let mut judging = Judging::new(rule, limit);
    if scale {
        scale_changes(rule, objects, &mut judging);
    } else {
        diff::diff_into(
            objects.old,
            objects.new,
            &rule.scope,
            &rule.mutable,
            objects.zeros,
            &mut judging,
        );
    }
    let excluded = (detail == Detail::Full && !scale).then(|| excluded_changes(rule, objects));
    Settled::Compared(judging.finish(excluded))
}

/// The changes that `rule` does not compare because of its `include` / `exclude` (the system
/// fields left aside), for previews that show a person what was ignored and why.
fn excluded_changes<'a, N: Node<'a>>(rule: &CompiledRule, objects: Objects<N>) -> Vec<Change<'a>> {
    let unscoped = crate::diff::Scope::new(None, crate::rule::never_compared(&rule.bypass));
    diff::diff(
        objects.old,
        objects.new,
        &unscoped,
        &rule.mutable,
        objects.zeros,
    )
    .into_iter()
    .filter(|change| rule.scope.coverage(change.path.segments()) == Coverage::Out)
    .collect()
}

/// A `/scale` update can only change `spec.replicas`.
fn scale_changes<'a, N: Node<'a>>(
    rule: &CompiledRule,
    objects: Objects<N>,
    judging: &mut Judging<'_, 'a, N>,
) {
    use crate::diff::{Found, PathStep, Sink};
    let path = [
        PathStep::Key(Cow::Borrowed("spec")),
        PathStep::Key(Cow::Borrowed("replicas")),
    ];
    if rule.scope.coverage(&path) == Coverage::Out {
        return;
    }
    let replicas = |v: N| {
        v.get("spec")
            .and_then(|s| s.get("replicas"))
            .filter(|r| !r.is_absent())
    };
    let (old_value, new_value) = (replicas(objects.old), replicas(objects.new));
    let kind = match (old_value, new_value) {
        (None, None) => return,
        (Some(a), Some(b)) if diff::value_eq(a, b) => return,
        (None, Some(_)) => ChangeKind::Added,
        (Some(_), None) => ChangeKind::Removed,
        _ => ChangeKind::Modified,
    };
    judging.change(Found {
        path: &path,
        kind,
        old: old_value.map(Side::Node),
        new: new_value.map(Side::Node),
        repeat: false,
    });
}
