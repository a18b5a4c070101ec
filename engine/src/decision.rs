//! The admission decision (SPEC §3): a request and a rule set in, a verdict out, every step in
//! the order the specification gives. Also the text of the messages a user sees.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::diff::{self, Change, ChangeKind, Coverage, field};
use crate::path::{FieldPath, PathSegment};
use crate::review::{AdmissionRequest, AdmissionResponse, ResponseStatus};
use crate::rule::{CompiledRule, MODE_ANNOTATION, Mode, RuleSet};

/// The fixed beginning of every violation message.
pub const VIOLATION_PREFIX: &str = "Drift Sentinel: immutable fields changed: ";
/// How many changes a message shows values for.
const MAX_VALUES_SHOWN: usize = 10;
/// Values in messages are cut to this many characters.
const MAX_VALUE_CHARS: usize = 64;
/// A warning is cut to this many bytes, `…` included.
const MAX_WARNING_BYTES: usize = 512;

/// What the cluster knows besides the request: the namespace's mode annotation and, for
/// `/scale`, the parent object's labels.
#[derive(Debug, Clone, Copy, Default)]
pub struct Context<'a> {
    /// Value of `drift-sentinel.k8s.io/mode` on the request's namespace, if any.
    pub namespace_mode: Option<&'a str>,
    /// Labels of the object a `/scale` request scales, when known.
    pub parent_labels: Option<&'a Map<String, Value>>,
}

/// The `result` audit annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Allowed,
    Denied,
    Warned,
    WouldDeny,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::Warned => "warned",
            Outcome::WouldDeny => "would-deny",
        }
    }
}

/// Which step of the decision settled the request.
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

/// Where the effective mode came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModeSource {
    Rule,
    NamespaceAnnotation,
}

/// One changed path as judged by the rule.
#[derive(Debug, Clone)]
pub struct JudgedChange<'a> {
    pub change: Change<'a>,
    /// The rendered path (`spec.template.spec.containers[0].image`).
    pub path: String,
    pub mutable: bool,
}

/// The verdict on one request, with everything needed to answer, log and explain it.
#[derive(Debug, Clone)]
pub struct Decision<'a> {
    pub step: Step,
    pub allowed: bool,
    /// `None` when no rule matched.
    pub outcome: Option<Outcome>,
    pub rule: Option<&'a CompiledRule>,
    pub mode: Option<Mode>,
    pub mode_source: Option<ModeSource>,
    /// The full violation message, or the reason of an allowing step.
    pub reason: String,
    pub warnings: Vec<String>,
    /// Every changed path the diff found, in byte order of the rendered path.
    pub changes: Vec<JudgedChange<'a>>,
    /// Rendered uncovered paths, byte order, without repeats.
    pub denied_paths: Vec<String>,
}

impl<'a> Decision<'a> {
    fn unmatched(step: Step, reason: impl Into<String>) -> Self {
        Self {
            step,
            allowed: step != Step::BadRequest,
            outcome: None,
            rule: None,
            mode: None,
            mode_source: None,
            reason: reason.into(),
            warnings: Vec::new(),
            changes: Vec::new(),
            denied_paths: Vec::new(),
        }
    }

    /// Whether the request violated the rule (whatever the mode made of it).
    pub fn is_violation(&self) -> bool {
        self.step == Step::Violation
    }

    /// The message an enforcing webhook returns, the warning, or the logged line.
    pub fn status_message(&self) -> String {
        match self.outcome {
            Some(Outcome::WouldDeny) => format!("would deny: {}", self.reason),
            _ => self.reason.clone(),
        }
    }

    /// The `response` of the AdmissionReview.
    pub fn response(&self, uid: &str) -> AdmissionResponse {
        let code = match (self.allowed, self.step) {
            (true, _) => 200,
            (false, Step::BadRequest) => 400,
            (false, _) => 403,
        };
        let mut audit_annotations = BTreeMap::new();
        if let (Some(rule), Some(mode), Some(outcome)) = (self.rule, self.mode, self.outcome) {
            audit_annotations.insert("rule".to_owned(), rule.id.to_string());
            audit_annotations.insert("mode".to_owned(), mode.as_str().to_owned());
            audit_annotations.insert("result".to_owned(), outcome.as_str().to_owned());
            if self.is_violation() {
                audit_annotations.insert("denied-paths".to_owned(), self.denied_paths.join(", "));
            }
        }
        AdmissionResponse {
            uid: uid.to_owned(),
            allowed: self.allowed,
            status: ResponseStatus {
                status: if self.allowed { "Success" } else { "Failure" },
                code,
                message: self.status_message(),
            },
            warnings: self.warnings.clone(),
            audit_annotations,
        }
    }
}

/// Why a rule did not match a request, for `explain`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    Namespace,
    Selector,
    /// The label requirement that failed (rendered), or why labels could not be checked.
    Labels(String),
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
pub fn target_of(request: &AdmissionRequest) -> Option<Target<'_>> {
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

/// Whether `rule` matches: namespace glob, selector, then labels (of the new object, or of the
/// scaled parent).
pub fn match_rule(
    rule: &CompiledRule,
    request: &AdmissionRequest,
    target: &Target<'_>,
    context: &Context<'_>,
) -> Result<(), Mismatch> {
    if !rule.matches_namespace(request.namespace()) {
        return Err(Mismatch::Namespace);
    }
    if !rule.matches_kind(&target.group, &target.kind) {
        return Err(Mismatch::Selector);
    }
    if rule.labels.is_empty() {
        return Ok(());
    }
    let labels = if target.scale {
        match context.parent_labels {
            Some(labels) => Some(labels),
            None => {
                return Err(Mismatch::Labels(
                    "labels of the scaled object are not known".into(),
                ));
            }
        }
    } else {
        labels_of(request.object.as_ref())
    };
    match rule.labels.iter().find(|l| !l.matches(labels)) {
        Some(failed) => Err(Mismatch::Labels(failed.to_string())),
        None => Ok(()),
    }
}

fn labels_of(object: Option<&Value>) -> Option<&Map<String, Value>> {
    field(field(object?, "metadata")?, "labels")?.as_object()
}

fn annotation<'v>(object: Option<&'v Value>, key: &str) -> Option<&'v str> {
    field(field(field(object?, "metadata")?, "annotations")?, key)?.as_str()
}

/// Decides one request.
pub fn decide<'a>(
    rules: &'a RuleSet,
    request: &'a AdmissionRequest,
    context: &Context<'_>,
) -> Decision<'a> {
    if request.operation != "UPDATE" {
        return Decision::unmatched(
            Step::OperationNotEnforced,
            Step::OperationNotEnforced.reason(),
        );
    }
    let (Some(new), Some(old)) = (
        request.object.as_ref().filter(|v| v.is_object()),
        request.old_object.as_ref().filter(|v| v.is_object()),
    ) else {
        let which = match (
            request.object.as_ref().is_some_and(Value::is_object),
            request.old_object.as_ref().is_some_and(Value::is_object),
        ) {
            (false, false) => "object and oldObject are",
            (false, true) => "object is",
            _ => "oldObject is",
        };
        return Decision::unmatched(
            Step::BadRequest,
            format!("UPDATE request {which} missing or not a JSON object"),
        );
    };

    // 1. Match.
    let Some(target) = target_of(request) else {
        return Decision::unmatched(
            Step::NoMatchingRule,
            format!(
                "{} (scale of resource {:?} is not enforced)",
                Step::NoMatchingRule.reason(),
                request.resource.resource
            ),
        );
    };
    let Some(rule) = rules
        .rules()
        .iter()
        .find(|rule| match_rule(rule, request, &target, context).is_ok())
    else {
        return Decision::unmatched(Step::NoMatchingRule, Step::NoMatchingRule.reason());
    };

    // 5 (computed first: it is reported for every matched request).
    let mut warnings = Vec::new();
    let (mode, mode_source) = match context.namespace_mode {
        Some(value) => match Mode::from_name(value) {
            Some(mode) => (mode, ModeSource::NamespaceAnnotation),
            None => {
                warnings.push(format!(
                    "Drift Sentinel: namespace {:?} has an invalid {MODE_ANNOTATION} annotation {value:?} (expected one of enforce, warn, dry-run, off); it is ignored and rule {} applies its mode {}",
                    request.namespace(),
                    rule.id,
                    rule.mode
                ));
                (rule.mode, ModeSource::Rule)
            }
        },
        None => (rule.mode, ModeSource::Rule),
    };
    let allow = |step: Step, warnings: Vec<String>| Decision {
        step,
        allowed: true,
        outcome: Some(Outcome::Allowed),
        rule: Some(rule),
        mode: Some(mode),
        mode_source: Some(mode_source),
        reason: step.reason().to_owned(),
        warnings,
        changes: Vec::new(),
        denied_paths: Vec::new(),
    };

    // 2. Users.
    let user = request.user_info.username.as_str();
    if !rule.user_in_scope(user) {
        return allow(Step::UserNotInScope, warnings);
    }
    if rule.user_exempt(user) {
        return allow(Step::UserExempt, warnings);
    }
    // 3. Deletion in progress.
    let deleting = old
        .get("metadata")
        .and_then(|m| field(m, "deletionTimestamp"))
        .is_some_and(|t| !diff::is_absent(t) && t.as_str() != Some(""));
    if deleting {
        return allow(Step::BeingDeleted, warnings);
    }
    // 4. Bypass.
    if annotation(Some(new), &rule.bypass).is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return allow(Step::Bypassed, warnings);
    }
    // 5. Mode off decides before the diff.
    if mode == Mode::Off {
        return allow(Step::ModeOff, warnings);
    }

    // 6–7. Scope and diff.
    let changes = if target.scale {
        scale_changes(rule, old, new)
    } else {
        diff::diff(old, new, &rule.scope, &rule.mutable)
    };
    if changes.is_empty() {
        return allow(Step::NoChanges, warnings);
    }

    // 8. Partition.
    let mut judged: Vec<JudgedChange<'a>> = changes
        .into_iter()
        .map(|change| {
            let mutable = rule.is_mutable(change.path.segments());
            JudgedChange {
                path: change.path.to_string(),
                change,
                mutable,
            }
        })
        .collect();
    judged.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
    let mut denied_paths: Vec<String> = judged
        .iter()
        .filter(|c| !c.mutable)
        .map(|c| c.path.clone())
        .collect();
    denied_paths.dedup();
    if denied_paths.is_empty() {
        let mut decision = allow(Step::OnlyMutable, warnings);
        decision.changes = judged;
        return decision;
    }

    // 9. Violation.
    let reason = violation_message(rule, &judged, &denied_paths);
    let (allowed, outcome) = match mode {
        Mode::Enforce => (false, Outcome::Denied),
        Mode::Warn => {
            warnings.insert(0, truncate_bytes(&reason, MAX_WARNING_BYTES));
            (true, Outcome::Warned)
        }
        // `off` returned above; dry-run allows without a warning.
        Mode::DryRun | Mode::Off => (true, Outcome::WouldDeny),
    };
    Decision {
        step: Step::Violation,
        allowed,
        outcome: Some(outcome),
        rule: Some(rule),
        mode: Some(mode),
        mode_source: Some(mode_source),
        reason,
        warnings,
        changes: judged,
        denied_paths,
    }
}

/// The changes that `rule` does not compare because of its `include` / `exclude` (the system
/// fields left aside), for previews that show a person what was ignored and why.
pub fn excluded_changes<'a>(
    rule: &CompiledRule,
    old: &'a Value,
    new: &'a Value,
) -> Vec<Change<'a>> {
    let unscoped = crate::diff::Scope::new(None, crate::rule::never_compared(&rule.bypass));
    diff::diff(old, new, &unscoped, &rule.mutable)
        .into_iter()
        .filter(|change| rule.scope.coverage(change.path.segments()) == Coverage::Out)
        .collect()
}

/// A `/scale` update can only change `spec.replicas`.
fn scale_changes<'a>(rule: &CompiledRule, old: &'a Value, new: &'a Value) -> Vec<Change<'a>> {
    let path = FieldPath::from(vec![
        PathSegment::Key("spec".into()),
        PathSegment::Key("replicas".into()),
    ]);
    if rule.scope.coverage(path.segments()) == Coverage::Out {
        return Vec::new();
    }
    let replicas = |v: &'a Value| {
        v.get("spec")
            .and_then(|s| s.get("replicas"))
            .filter(|r| !diff::is_absent(r))
    };
    let (old_value, new_value) = (replicas(old), replicas(new));
    let kind = match (old_value, new_value) {
        (None, None) => return Vec::new(),
        (Some(a), Some(b)) if diff::value_eq(a, b) => return Vec::new(),
        (None, Some(_)) => ChangeKind::Added,
        (Some(_), None) => ChangeKind::Removed,
        _ => ChangeKind::Modified,
    };
    vec![Change {
        path,
        kind,
        old: old_value.map(Cow::Borrowed),
        new: new_value.map(Cow::Borrowed),
    }]
}

/// The violation message: fixed prefix, the uncovered paths, their values, the rule and how to
/// bypass it.
fn violation_message(
    rule: &CompiledRule,
    judged: &[JudgedChange<'_>],
    denied: &[String],
) -> String {
    let mut message = String::with_capacity(256);
    message.push_str(VIOLATION_PREFIX);
    message.push_str(&denied.join(", "));
    let uncovered: Vec<&JudgedChange<'_>> = judged.iter().filter(|c| !c.mutable).collect();
    for change in uncovered.iter().take(MAX_VALUES_SHOWN) {
        let _ = write!(
            message,
            "; {}: {} → {}",
            change.path,
            display_value(change.change.old.as_deref()),
            display_value(change.change.new.as_deref())
        );
    }
    if uncovered.len() > MAX_VALUES_SHOWN {
        let _ = write!(message, "; and {} more", uncovered.len() - MAX_VALUES_SHOWN);
    }
    let _ = write!(
        message,
        "; rule {} allows changes only to: {}; to bypass, set annotation {}: \"true\" on the object",
        rule.id, rule.mutable_text, rule.bypass
    );
    message
}

/// A value for a message: compact JSON, `<absent>` for a missing side, cut to 64 characters.
pub fn display_value(value: Option<&Value>) -> String {
    match value {
        None => "<absent>".to_owned(),
        Some(value) => truncate_chars(&value.to_string(), MAX_VALUE_CHARS),
    }
}

/// Cuts `text` to at most `max` characters, the last being `…` when cut.
pub fn truncate_chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Cuts `text` to at most `max` bytes, the `…` included, on a character boundary.
pub fn truncate_bytes(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let ellipsis = '…';
    let mut end = max.saturating_sub(ellipsis.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = text[..end].to_owned();
    out.push(ellipsis);
    out
}
