//! The decision of reference §3, table-driven through the public API.

use drift_engine::evaluation::{Mismatch, target_of};
use drift_engine::review::AdmissionRequest;
use drift_engine::{Context, Detail, RuleSet, Step, Verdict, evaluate};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::time::SystemTime;

#[path = "common/requests.rs"]
mod requests;
use requests::{deployment, rule, update};
#[path = "common/decisions.rs"]
mod decisions;
use decisions::{IMAGE_ONLY, decide, decide_with, ops_rule};

/// A row of the decision table: a request judged under rule `ops/r` (by default
/// [`IMAGE_ONLY`]) and what the decision must be.
struct Case {
    name: &'static str,
    /// The spec of rule `ops/r`; `None`: no rule at all.
    spec: Option<String>,
    request: AdmissionRequest,
    namespace_mode: Option<&'static str>,
    step: Step,
    allowed: bool,
    outcome: Option<Verdict>,
    mode: Option<&'static str>,
    denied: &'static [&'static str],
    warnings: usize,
}

/// `request` judged under [`IMAGE_ONLY`]: allowed at `step`, in enforce mode, without warnings.
fn case(step: Step, name: &'static str, request: AdmissionRequest) -> Case {
    Case {
        name,
        spec: Some(IMAGE_ONLY.to_owned()),
        request,
        namespace_mode: None,
        step,
        allowed: true,
        outcome: Some(Verdict::Allowed),
        mode: Some("enforce"),
        denied: &[],
        warnings: 0,
    }
}

/// The path the replicas change denies.
const REPLICAS: &[&str] = &["spec.replicas"];

impl Case {
    /// No rule at all.
    fn no_rules(self) -> Self {
        Case { spec: None, ..self }
    }

    /// The rule has `line` too.
    fn also(mut self, line: &str) -> Self {
        if let Some(spec) = &mut self.spec {
            spec.push_str(line);
            spec.push('\n');
        }
        self
    }

    /// The rule is in `mode` (not what the decision is in: see [`Case::mode`]).
    fn rule_mode(self, mode: &str) -> Self {
        let spec = self.spec.as_deref().map(|spec| with_spec(spec, mode));
        Case { spec, ..self }
    }

    /// The namespace's mode annotation says `mode`.
    fn namespace_mode(self, mode: &'static str) -> Self {
        Case {
            namespace_mode: Some(mode),
            ..self
        }
    }

    /// The decision is in `mode`.
    fn mode(self, mode: &'static str) -> Self {
        Case {
            mode: Some(mode),
            ..self
        }
    }

    /// The decision carries `warnings` warnings.
    fn warnings(self, warnings: usize) -> Self {
        Case { warnings, ..self }
    }

    /// No rule decides: no verdict and no mode.
    fn unmatched(self) -> Self {
        Case {
            outcome: None,
            mode: None,
            ..self
        }
    }

    /// The replicas change is denied.
    fn denied(self) -> Self {
        Case {
            allowed: false,
            outcome: Some(Verdict::Denied),
            denied: REPLICAS,
            ..self
        }
    }

    /// The replicas change is allowed with a warning, in warn mode.
    fn warned(self) -> Self {
        Case {
            outcome: Some(Verdict::Warned),
            mode: Some("warn"),
            denied: REPLICAS,
            warnings: 1,
            ..self
        }
    }

    /// The replicas change is allowed silently, in dry-run mode.
    fn would_deny(self) -> Self {
        Case {
            outcome: Some(Verdict::WouldDeny),
            mode: Some("dry-run"),
            denied: REPLICAS,
            ..self
        }
    }
}

fn with_spec(spec: &str, mode: &str) -> String {
    spec.replace("mode: enforce", &format!("mode: {mode}"))
}

/// An UPDATE of a Deployment being deleted: only its finalizers change.
fn being_deleted() -> AdmissionRequest {
    let mut old = deployment("nginx:1", 3);
    old["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    let mut new = deployment("nginx:1", 3);
    new["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    new["metadata"]["finalizers"] = json!(null);
    old["metadata"]["finalizers"] = json!(["x"]);
    update(old, new)
}

/// A replicas change whose new object carries the bypass annotation (without an end).
fn bypassed() -> AdmissionRequest {
    let mut new = deployment("nginx:1", 5);
    new["metadata"]["annotations"] = json!({"drift-sentinel.k8s.io/bypass": "TRUE"});
    update(deployment("nginx:1", 3), new)
}

/// An UPDATE that only removes the bypass annotation.
fn bypass_removed() -> AdmissionRequest {
    let mut old = deployment("nginx:1", 3);
    old["metadata"]["annotations"] = json!({"drift-sentinel.k8s.io/bypass": "true"});
    update(old, deployment("nginx:1", 3))
}

/// An UPDATE that changes only system fields and the status.
fn system_fields_only() -> AdmissionRequest {
    let mut new = deployment("nginx:1", 3);
    new["metadata"]["resourceVersion"] = json!("11");
    new["metadata"]["generation"] = json!(4);
    new["metadata"]["managedFields"] = json!([]);
    new["status"] = json!({"replicas": 9});
    update(deployment("nginx:1", 3), new)
}

/// The rows of [`decision_table`].
fn decision_cases() -> Vec<Case> {
    let image_change = || update(deployment("nginx:1", 3), deployment("nginx:2", 3));
    let replicas_change = || update(deployment("nginx:1", 3), deployment("nginx:1", 5));
    let mut create = image_change();
    create.operation = "CREATE".into();
    let mut other_ns = replicas_change();
    other_ns.namespace = Some("dev".into());
    let mut bob = replicas_change();
    bob.user_info.username = "bob".into();
    use Step::*;
    vec![
        case(
            OperationNotEnforced,
            "non-UPDATE operations are not enforced",
            create,
        )
        .no_rules()
        .unmatched(),
        case(NoMatchingRule, "no rule matches the namespace", other_ns).unmatched(),
        case(OnlyMutable, "image change is mutable", image_change()),
        case(Violation, "replicas change is denied", replicas_change()).denied(),
        case(Violation, "warn mode warns", replicas_change())
            .rule_mode("warn")
            .warned(),
        case(Violation, "dry-run allows silently", replicas_change())
            .rule_mode("dry-run")
            .would_deny(),
        case(ModeOff, "off allows without diffing", replicas_change())
            .rule_mode("off")
            .mode("off"),
        case(
            Violation,
            "namespace annotation overrides the mode",
            replicas_change(),
        )
        .namespace_mode("warn")
        .warned(),
        case(ModeOff, "namespace annotation off", replicas_change())
            .namespace_mode("off")
            .mode("off"),
        case(
            Violation,
            "invalid namespace annotation is ignored with a warning",
            replicas_change(),
        )
        .namespace_mode("Warn")
        .denied()
        .warnings(1),
        case(
            OnlyMutable,
            "invalid annotation warns whatever the outcome",
            image_change(),
        )
        .namespace_mode("bogus")
        .warnings(1),
        case(UserNotInScope, "users set and user not listed", bob.clone()).also("users: [alice]"),
        case(Violation, "users set and user listed", bob.clone())
            .also("users: [bob]")
            .denied(),
        case(UserExempt, "exempt user", bob)
            .also("exemptUsers: ['b*']")
            .namespace_mode("dry-run")
            .mode("dry-run"),
        case(
            BeingDeleted,
            "deletion in progress is never blocked",
            being_deleted(),
        ),
        // "bypass without an end"
        case(Bypassed, "bypass annotation", bypassed()).warnings(1),
        case(
            NoChanges,
            "removing the bypass annotation is allowed",
            bypass_removed(),
        ),
        case(
            NoChanges,
            "system fields are stripped",
            system_fields_only(),
        ),
        case(NoChanges, "exclude removes a subtree", replicas_change())
            .also("exclude: [spec.replicas]"),
        case(
            NoChanges,
            "include keeps only its subtrees",
            replicas_change(),
        )
        .also("include: [spec.template]"),
        case(NoMatchingRule, "labels must all hold", replicas_change())
            .also("labels: [app=web, missing]")
            .unmatched(),
        case(
            Violation,
            "labels key=value and presence",
            replicas_change(),
        )
        .also("labels: [app=web, team]")
        .denied(),
    ]
}

#[test]
fn decision_table() {
    for case in decision_cases() {
        check_decision(&case);
    }
}

/// The decision on the case's request is the one it expects, and so is the response.
fn check_decision(case: &Case) {
    let rules = RuleSet::build(case.spec.iter().map(|spec| rule("ops", "r", spec)));
    assert!(
        rules.invalid().is_empty(),
        "{}: {:?}",
        case.name,
        rules.invalid()
    );
    let context = Context {
        namespace_mode: case.namespace_mode,
        parent_labels: None,
        now: SystemTime::UNIX_EPOCH,
    };
    let decision = evaluate(&rules, &case.request, &context, Detail::Verdict);
    assert_eq!(
        decision.step(),
        case.step,
        "{}: {}",
        case.name,
        decision.reason()
    );
    assert_eq!(decision.allowed(), case.allowed, "{}", case.name);
    assert_eq!(decision.verdict(), case.outcome, "{}", case.name);
    assert_eq!(
        decision.mode().map(|m| m.as_str()),
        case.mode,
        "{}",
        case.name
    );
    assert_eq!(decision.denied_paths(), case.denied, "{}", case.name);
    assert_eq!(
        decision.warnings().len(),
        case.warnings,
        "{}: {:?}",
        case.name,
        decision.warnings()
    );

    let response = decision.response("req-1");
    assert_eq!(response.uid, "req-1");
    assert_eq!(response.allowed, case.allowed);
    let annotations = &response.audit_annotations;
    match case.outcome {
        None => assert!(annotations.is_empty(), "{}: {annotations:?}", case.name),
        Some(outcome) => {
            assert_eq!(annotations["rule"], "ops/r", "{}", case.name);
            assert_eq!(
                Some(annotations["mode"].as_str()),
                case.mode,
                "{}",
                case.name
            );
            assert_eq!(annotations["result"], outcome.as_str(), "{}", case.name);
            assert_eq!(
                annotations.get("denied-paths").map(String::as_str),
                (!case.denied.is_empty())
                    .then(|| case.denied.join(", "))
                    .as_deref(),
                "{}",
                case.name
            );
        }
    }
    if !case.allowed {
        assert_eq!(response.status.code, 403);
        assert!(
            response
                .status
                .message
                .starts_with("Drift Sentinel: immutable fields changed: ")
        );
    }
}

#[test]
fn priority_and_tie_breaks() {
    let spec = |priority: i64, mode: &str| {
        format!(
            "mode: {mode}\npriority: {priority}\nnamespaces: ['*']\nselectors: [{{apiGroup: '*', kind: '*'}}]\n"
        )
    };
    let request = update(deployment("nginx:1", 3), deployment("nginx:1", 5));
    // Two rules (namespace, name, priority, mode) and the one that wins.
    let cases = [
        (("a", "low", 1, "off"), ("z", "high", 2, "warn"), "z/high"),
        (("b", "x", 5, "off"), ("a", "y", 5, "warn"), "a/y"),
        (("a", "b", 5, "off"), ("a", "a", 5, "warn"), "a/a"),
        (("a", "x", 5, "off"), ("B", "x", 5, "warn"), "B/x"),
        (("a", "x", -1, "off"), ("b", "x", 0, "warn"), "b/x"),
    ];
    for (first, second, want) in cases {
        let rules =
            RuleSet::build([first, second].map(|(namespace, name, priority, mode)| {
                rule(namespace, name, &spec(priority, mode))
            }));
        let decision = decide(&rules, &request);
        assert_eq!(
            decision.rule().map(|r| r.id.to_string()).as_deref(),
            Some(want)
        );
    }
}

#[test]
fn users_rule_wins_the_match_without_fall_through() {
    let rules = RuleSet::build(vec![
        rule(
            "a",
            "scoped",
            "mode: enforce\npriority: 10\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\nusers: [carol]\n",
        ),
        rule(
            "a",
            "fallback",
            "mode: enforce\npriority: 1\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\n",
        ),
    ]);
    let request = update(deployment("nginx:1", 3), deployment("nginx:1", 5));
    let decision = decide(&rules, &request);
    assert_eq!(decision.step(), Step::UserNotInScope);
    assert_eq!(decision.rule().unwrap().id.name, "scoped");
    assert_eq!(decision.reason(), "user not in scoped user list");
}

#[test]
fn malformed_update_objects_are_bad_requests() {
    let rules = ops_rule(IMAGE_ONLY);
    let mut request = update(deployment("a", 1), deployment("a", 1));
    request.old_object = Some(json!("nope"));
    let decision = decide(&rules, &request);
    assert_eq!(decision.step(), Step::BadRequest);
    let response = decision.response("x");
    assert!(!response.allowed);
    assert_eq!(response.status.code, 400);
    assert!(response.status.message.contains("oldObject"));
    assert!(response.audit_annotations.is_empty());
    // Other operations are allowed whatever their objects.
    request.operation = "DELETE".into();
    request.object = None;
    assert!(decide(&rules, &request).allowed());
}

fn scale_request(old: i64, new: i64) -> AdmissionRequest {
    let scale = |replicas: i64| json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "web", "namespace": "prod"}, "spec": {"replicas": replicas}, "status": {"replicas": old}});
    serde_json::from_value(json!({
        "uid": "s-1",
        "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "subResource": "scale",
        "name": "web", "namespace": "prod", "operation": "UPDATE",
        "userInfo": {"username": "hpa"},
        "object": scale(new), "oldObject": scale(old)
    }))
    .unwrap()
}

#[test]
fn scale_subresource_is_a_replicas_change_of_the_parent() {
    let rules = ops_rule(IMAGE_ONLY);
    let request = scale_request(3, 5);
    let decision = decide(&rules, &request);
    assert_eq!(decision.step(), Step::Violation);
    assert_eq!(decision.denied_paths(), ["spec.replicas"]);
    assert_eq!(decide(&rules, &scale_request(3, 3)).step(), Step::NoChanges);

    let mutable = ops_rule(&IMAGE_ONLY.replace("mutable: [", "mutable: [spec.replicas, "));
    assert!(mutable.invalid().is_empty(), "{:?}", mutable.invalid());
    assert_eq!(
        decide(&mutable, &scale_request(3, 5)).step(),
        Step::OnlyMutable
    );

    // Label selectors need the parent's labels: unknown offline means no match.
    let labelled = ops_rule(&format!("{IMAGE_ONLY}labels: [app=web]\n"));
    assert_eq!(
        decide(&labelled, &scale_request(3, 5)).step(),
        Step::NoMatchingRule
    );
    let labels = json!({"app": "web"});
    let context = Context {
        namespace_mode: None,
        parent_labels: labels.as_object(),
        now: SystemTime::UNIX_EPOCH,
    };
    assert_eq!(
        evaluate(&labelled, &scale_request(3, 5), &context, Detail::Verdict).step(),
        Step::Violation
    );

    let request = scale_request(3, 5);
    let target = target_of(&request).unwrap();
    assert_eq!(
        (target.group.as_ref(), target.kind.as_ref()),
        ("apps", "Deployment")
    );
    let evaluation = decide(&labelled, &request);
    assert!(matches!(
        evaluation.considered[0].matched,
        Err(Mismatch::ParentLabelsUnknown)
    ));
}

#[test]
fn rollout_restart_is_covered_by_descent() {
    let rules = ops_rule(
        "mode: enforce\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\nmutable: [\"spec.template.metadata.annotations['kubectl.kubernetes.io/restartedAt']\"]\n",
    );
    let mut new = deployment("nginx:1", 3);
    new["spec"]["template"]["metadata"]["annotations"] =
        json!({"kubectl.kubernetes.io/restartedAt": "2026-12-02T10:00:00Z"});
    let request = update(deployment("nginx:1", 3), new.clone());
    let decision = decide(&rules, &request);
    assert_eq!(decision.step(), Step::OnlyMutable, "{}", decision.reason());
    new["spec"]["template"]["metadata"]["annotations"]["other"] = json!("x");
    let request = update(deployment("nginx:1", 3), new);
    let decision = decide(&rules, &request);
    assert_eq!(
        decision.denied_paths(),
        ["spec.template.metadata.annotations.other"]
    );
}

fn arb_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i32>().prop_map(|n| json!(n)),
        "[a-z:0-9.]{1,10}".prop_map(Value::String),
        any::<bool>().prop_map(Value::Bool),
    ]
}

proptest! {
    /// A change under a mutable pattern is never reported as denied.
    #[test]
    fn covered_changes_are_never_denied(
        image in "[a-z]{1,8}:[0-9]{1,3}",
        field in prop_oneof![Just("image"), Just("args"), Just("env"), Just("resources")],
        value in arb_scalar(),
        index in 0usize..3,
    ) {
        let containers: Vec<Value> = (0..3).map(|i| json!({"name": format!("c{i}"), "image": "base:1", "args": ["a"], "env": [{"name": "E", "value": "1"}]})).collect();
        let mut old = deployment("x", 1);
        old["spec"]["template"]["spec"]["containers"] = Value::Array(containers);
        let mut new = old.clone();
        new["spec"]["template"]["spec"]["containers"][index][field] = if field == "image" { json!(image) } else { value };
        let spec = format!(
            "mode: enforce\nnamespaces: ['*']\nselectors: [{{apiGroup: apps, kind: Deployment}}]\nmutable: ['spec.template.spec.containers[*].{field}']\n"
        );
        let rules = ops_rule(&spec);
        let request = update(old, new);
        let decision = decide(&rules, &request);
        prop_assert!(decision.allowed(), "{}", decision.reason());
        prop_assert!(decision.denied_paths().is_empty());
    }

    /// An update that changes nothing is never a violation, whatever the object.
    #[test]
    fn identical_objects_are_never_violations(replicas in 0i64..100, image in "[a-z]{1,8}") {
        let rules = ops_rule("mode: enforce\nnamespaces: ['*']\nselectors: [{apiGroup: '*', kind: '*'}]\n");
        let object = deployment(&image, replicas);
        let request = update(object.clone(), object);
        let decision = decide(&rules, &request);
        prop_assert_eq!(decision.step(), Step::NoChanges);
    }
}

/// reference §2 "Who may write a rule": a namespace rule applies only in its own namespace and only
/// where no cluster rule matches, whatever its priority.
#[test]
fn namespace_rules_cannot_weaken_cluster_rules() {
    use drift_engine::evaluation::Mismatch;
    use drift_engine::rule::{Tier, TierPolicy};
    let policy = TierPolicy::cluster_namespaces(&["drift-system"]).unwrap();
    let platform = rule(
        "drift-system",
        "platform",
        "mode: enforce\nnamespaces: ['prod-*', team-a]\nselectors: [{apiGroup: apps, kind: Deployment}]\nmutable: ['spec.template.spec.containers[*].image']\n",
    );
    let tenant_off = rule(
        "team-a",
        "switch-off",
        "mode: 'off'\npriority: 100000\nnamespaces: ['*']\nselectors: [{apiGroup: '*', kind: '*'}]\n",
    );
    let tenant_enforce = rule(
        "team-a",
        "strict",
        "mode: enforce\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: StatefulSet}]\n",
    );
    let rules = RuleSet::build_with(vec![platform, tenant_off, tenant_enforce], &policy);
    assert!(rules.invalid().is_empty());
    assert_eq!(
        rules.rules()[0].id.name,
        "platform",
        "cluster rules come first"
    );
    assert_eq!(rules.rules()[0].tier, Tier::Cluster);
    assert_eq!(rules.rules()[1].tier, Tier::Namespace);

    let in_namespace = |namespace: &str| {
        let mut request = update(deployment("nginx:1", 3), deployment("nginx:1", 5));
        request.namespace = Some(namespace.into());
        request
    };
    // The tenant's `off` rule (priority 100000, namespaces '*') changes nothing where the
    // platform's rule matches — not in prod, not even in its own namespace.
    for namespace in ["prod-eu", "team-a"] {
        let request = in_namespace(namespace);
        let evaluation = decide_with(Detail::Full, &rules, &request);
        assert_eq!(evaluation.step(), Step::Violation, "{namespace}");
        assert_eq!(evaluation.rule().unwrap().id.name, "platform");
        let tenant = evaluation
            .considered
            .iter()
            .find(|c| c.rule.id.name == "switch-off")
            .unwrap();
        assert_eq!(
            tenant.matched,
            Err(Mismatch::ClusterRuleMatched),
            "{namespace}"
        );
    }
    // Where the platform left things unprotected, the tenant's rules act in its own namespace
    // only.
    let mut statefulset = in_namespace("team-a");
    statefulset.kind.kind = "StatefulSet".into();
    statefulset.resource.resource = "statefulsets".into();
    let evaluation = decide(&rules, &statefulset);
    assert_eq!(
        evaluation.rule().unwrap().id.name,
        "switch-off",
        "the highest namespace rule"
    );
    statefulset.namespace = Some("team-b".into());
    let evaluation = decide_with(Detail::Full, &rules, &statefulset);
    assert_eq!(evaluation.step(), Step::NoMatchingRule);
    assert!(
        evaluation
            .considered
            .iter()
            .filter(|c| c.rule.tier == Tier::Namespace)
            .all(|c| c.matched == Err(Mismatch::OtherNamespace))
    );

    // `*` restores the original's behaviour: every rule is a cluster rule.
    let all = RuleSet::build_with(
        vec![rule(
            "team-a",
            "switch-off",
            "mode: 'off'\npriority: 100000\nnamespaces: ['*']\nselectors: [{apiGroup: '*', kind: '*'}]\n",
        )],
        &TierPolicy::cluster_namespaces(&["*"]).unwrap(),
    );
    let request = in_namespace("prod-eu");
    let evaluation = decide(&all, &request);
    assert_eq!(evaluation.step(), Step::ModeOff);
}
