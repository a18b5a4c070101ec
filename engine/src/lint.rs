//! Likely mistakes in a valid rule (reference §2 "A typo never opens a hole"): what the agent's
//! `/validate-rule` admits with a warning and `kubectl drift explain --rules` shows offline
//! (worded the same, `kubectl-drift/src/offline.rs`; offline the namespaces that exist are not
//! known, so the glob check below does not run there). The errors of an invalid rule are the
//! compiler's ([`crate::rule::compile`]), not this module's.
//!
//! - a pattern that no selected kind can have (`containerz[*].image`), judged against the
//!   kinds' shapes — the caller supplies them ([`Shapes`]; `drift-api` builds them from
//!   k8s-openapi), so the engine stays free of Kubernetes types;
//! - a `mutable` pattern inside an `exclude`d subtree (never compared, so never needed);
//! - a namespace glob that matches no namespace that exists (when the caller knows them);
//! - a namespace rule whose globs reach beyond its own namespace (it only ever acts there).

use serde_json::Value;

pub use drift_api::shapes::{Shape, Shapes};

use crate::path::{PathPattern, PatternSegment};
use crate::rule::{
    CompiledRule, NameMatch, RuleError, RuleSet, Tier, TierPolicy, rule_source_from_config_map,
};

/// What a rule ConfigMap is, as the `/validate-rule` webhook judges it before it is stored.
#[derive(Debug, Clone)]
pub enum RuleReview {
    /// Not a rule ConfigMap (no rule annotation): nothing to judge.
    NotARule,
    /// A rule that would never be applied, and why (line and column where known).
    Invalid(RuleError),
    /// A valid rule, with the likely mistakes found in it.
    Valid {
        rule: Box<CompiledRule>,
        warnings: Vec<String>,
    },
}

/// Judges a ConfigMap object as a rule: compiled exactly as the agent will compile it (the
/// same tier policy), then linted.
pub fn review_config_map(
    object: &Value,
    default_namespace: &str,
    policy: &TierPolicy,
    context: &LintContext<'_>,
) -> RuleReview {
    let Some(source) = rule_source_from_config_map(object, default_namespace, None) else {
        return RuleReview::NotARule;
    };
    let set = RuleSet::build_with([source], policy);
    if let Some(error) = set.invalid().first() {
        return RuleReview::Invalid(error.clone());
    }
    match set.rules().first() {
        Some(rule) => RuleReview::Valid {
            warnings: lint(rule, context),
            rule: Box::new(rule.clone()),
        },
        None => RuleReview::NotARule,
    }
}

/// Whether some object of `shape` can have a value at `pattern`.
fn admits(shape: &Shape, pattern: &[PatternSegment]) -> bool {
    let Some((first, rest)) = pattern.split_first() else {
        return true;
    };
    match (shape, first) {
        (Shape::Any, _) => true,
        (Shape::Object(fields), PatternSegment::Key(key)) => fields
            .iter()
            .any(|(name, shape)| name == key && admits(shape, rest)),
        (Shape::Object(fields), PatternSegment::AnyKey) => {
            fields.iter().any(|(_, shape)| admits(shape, rest))
        }
        (Shape::MapOf(value), PatternSegment::Key(_) | PatternSegment::AnyKey) => {
            admits(value, rest)
        }
        (Shape::List(item), PatternSegment::Index(_) | PatternSegment::AnyIndex) => {
            admits(item, rest)
        }
        _ => false,
    }
}

/// What the linter may know besides the rule.
#[derive(Default)]
pub struct LintContext<'a> {
    pub shapes: Option<&'a dyn Shapes>,
    /// The namespaces that exist, when known.
    pub namespaces: Option<&'a [String]>,
}

/// The warnings of one valid rule, each a sentence naming what to check.
pub fn lint(rule: &CompiledRule, context: &LintContext<'_>) -> Vec<String> {
    let mut warnings = Vec::new();
    if let Some(shapes) = context.shapes {
        impossible_patterns(rule, shapes, &mut warnings);
    }
    for pattern in &rule.mutable {
        if let Some(exclude) = rule.exclude.iter().find(|e| subsumes(e, pattern)) {
            warnings.push(format!(
                "mutable pattern {pattern} lies inside the excluded subtree {exclude}: it is never compared, so listing it as mutable has no effect"
            ));
        }
    }
    if let Some(namespaces) = context.namespaces {
        for glob in &rule.namespaces {
            if !namespaces.iter().any(|n| glob.matches(n)) && !glob.matches("") {
                warnings.push(format!(
                    "namespace glob {:?} matches no namespace that exists now",
                    glob.as_str()
                ));
            }
        }
    }
    if rule.tier == Tier::Namespace {
        let own = &rule.id.namespace;
        let beyond: Vec<&str> = rule
            .namespaces
            .iter()
            .filter(|g| g.as_str() != own.as_str())
            .map(|g| g.as_str())
            .collect();
        if !beyond.is_empty() {
            warnings.push(format!(
                "this is a namespace rule (ConfigMap in namespace {own:?}, not a cluster rule namespace): it applies only to objects in {own:?}, and only where no cluster rule matches; its namespaces {} reach no further",
                beyond.join(", ")
            ));
        }
    }
    warnings
}

/// A pattern that none of the rule's selected kinds can have.
fn impossible_patterns(rule: &CompiledRule, shapes: &dyn Shapes, warnings: &mut Vec<String>) {
    // The shapes of every selected kind; a selected kind without a known shape (a custom
    // resource) could have any path, so nothing is claimed then.
    let mut selected = Vec::new();
    for selector in &rule.selectors {
        let kinds: Vec<(&str, &str)> = match (&selector.group, &selector.kind) {
            (NameMatch::Exactly(group), NameMatch::Exactly(kind)) => vec![(group, kind)],
            _ => shapes
                .kinds()
                .into_iter()
                .filter(|(g, k)| selector.matches(g, k))
                .collect(),
        };
        if kinds.is_empty() {
            return;
        }
        for (group, kind) in kinds {
            match shapes.shape(group, kind) {
                Some(shape) => selected.push(shape),
                None => return,
            }
        }
    }
    let lists: [(&str, &[PathPattern]); 3] = [
        ("include", &rule.include),
        ("exclude", &rule.exclude),
        ("mutable", &rule.mutable),
    ];
    for (field, patterns) in lists {
        for pattern in patterns {
            if !selected.iter().any(|s| admits(s, pattern.segments())) {
                warnings.push(format!(
                    "{field} pattern {pattern} names a path that none of the selected kinds ({}) has: check its spelling",
                    rule.selectors
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
    }
}

/// Whether every path `inner` can match lies in the subtree of `outer` (outer is a prefix of
/// inner, step by step, and each of its steps matches at least what inner's does).
fn subsumes(outer: &PathPattern, inner: &PathPattern) -> bool {
    outer.len() <= inner.len()
        && outer
            .segments()
            .iter()
            .zip(inner.segments())
            .all(|(o, i)| match (o, i) {
                (PatternSegment::AnyKey, PatternSegment::Key(_) | PatternSegment::AnyKey) => true,
                (PatternSegment::AnyIndex, PatternSegment::Index(_) | PatternSegment::AnyIndex) => {
                    true
                }
                (o, i) => o == i,
            })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::{RuleId, RuleSet, RuleSource, TierPolicy};

    struct Deployments(Shape);

    impl Shapes for Deployments {
        fn shape(&self, group: &str, kind: &str) -> Option<&Shape> {
            (group == "apps" && kind == "Deployment").then_some(&self.0)
        }
        fn kinds(&self) -> Vec<(&str, &str)> {
            vec![("apps", "Deployment")]
        }
    }

    fn deployments() -> Deployments {
        let object = |fields: &[(&str, Shape)]| {
            Shape::Object(
                fields
                    .iter()
                    .map(|(k, s)| ((*k).to_owned(), s.clone()))
                    .collect(),
            )
        };
        let container = object(&[("name", Shape::Scalar), ("image", Shape::Scalar)]);
        let metadata = object(&[
            ("labels", Shape::MapOf(Box::new(Shape::Scalar))),
            ("annotations", Shape::MapOf(Box::new(Shape::Scalar))),
        ]);
        let template = object(&[
            ("metadata", metadata.clone()),
            (
                "spec",
                object(&[("containers", Shape::List(Box::new(container)))]),
            ),
        ]);
        Deployments(object(&[
            ("metadata", metadata),
            (
                "spec",
                object(&[("replicas", Shape::Scalar), ("template", template)]),
            ),
        ]))
    }

    fn rule(namespace: &str, spec: &str, policy: &TierPolicy) -> CompiledRule {
        let set = RuleSet::build_with(
            [RuleSource {
                id: RuleId {
                    namespace: namespace.into(),
                    name: "r".into(),
                },
                spec: crate::SpecText::Yaml(spec.into()),
                origin: None,
            }],
            policy,
        );
        assert!(set.invalid().is_empty(), "{:?}", set.invalid());
        set.rules()[0].clone()
    }

    #[test]
    fn warnings_for_likely_mistakes() {
        let shapes = deployments();
        let context = LintContext {
            shapes: Some(&shapes),
            namespaces: Some(&["prod".to_owned(), "team-a".to_owned()]),
        };
        let policy = TierPolicy::cluster_namespaces(&["drift-system"]).unwrap();
        let warnings =
            |namespace: &str, spec: &str| lint(&rule(namespace, spec, &policy), &context);

        let clean = warnings(
            "drift-system",
            "mode: enforce\nnamespaces: [prod]\nselectors: [{apiGroup: apps, kind: Deployment}]\nmutable: ['spec.template.spec.containers[*].image', \"metadata.annotations['a/b']\", 'spec.*']\n",
        );
        assert!(clean.is_empty(), "{clean:?}");

        let typo = warnings(
            "drift-system",
            "mode: enforce\nnamespaces: [prod]\nselectors: [{apiGroup: apps, kind: Deployment}]\nmutable: ['spec.template.spec.containerz[*].image', 'spec.replicas.x']\n",
        );
        assert_eq!(typo.len(), 2, "{typo:?}");
        assert!(
            typo[0].contains("spec.template.spec.containerz[*].image"),
            "{typo:?}"
        );
        assert!(typo[1].contains("spec.replicas.x"), "{typo:?}");

        let unknown_kind = warnings(
            "drift-system",
            "mode: enforce\nnamespaces: [prod]\nselectors: [{apiGroup: argoproj.io, kind: Rollout}]\nmutable: ['spec.anything']\n",
        );
        assert!(
            unknown_kind.is_empty(),
            "nothing is claimed of unknown kinds: {unknown_kind:?}"
        );

        let inside = warnings(
            "drift-system",
            "mode: enforce\nnamespaces: [prod]\nselectors: [{apiGroup: apps, kind: Deployment}]\nexclude: ['spec.template']\nmutable: ['spec.template.spec.containers[0].image']\n",
        );
        assert_eq!(inside.len(), 1, "{inside:?}");
        assert!(
            inside[0].contains("inside the excluded subtree spec.template"),
            "{inside:?}"
        );

        let nowhere = warnings(
            "drift-system",
            "mode: enforce\nnamespaces: [prod, 'staging-*', '*']\nselectors: [{apiGroup: apps, kind: Deployment}]\n",
        );
        assert_eq!(nowhere.len(), 1, "{nowhere:?}");
        assert!(nowhere[0].contains("\"staging-*\""), "{nowhere:?}");

        let tenant = warnings(
            "team-a",
            "mode: enforce\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\n",
        );
        assert_eq!(tenant.len(), 1, "{tenant:?}");
        assert!(
            tenant[0].contains("applies only to objects in \"team-a\""),
            "{tenant:?}"
        );
    }

    fn built_in_admits(group: &str, kind: &str, pattern: &str) -> bool {
        let pattern = PathPattern::parse(pattern).unwrap();
        let shape = drift_api::shapes::built_in()
            .shape(group, kind)
            .expect("known kind");
        admits(shape, pattern.segments())
    }

    #[test]
    fn deployments_have_the_paths_rules_name() {
        for pattern in [
            "spec.replicas",
            "spec.template.spec.containers[*].image",
            "spec.template.spec.containers[0].resources.limits.cpu",
            "spec.template.spec.initContainers[*].env[*].value",
            "metadata.annotations['kubectl.kubernetes.io/last-applied-configuration']",
            "spec.template.metadata.annotations['kubectl.kubernetes.io/restartedAt']",
            "spec.*",
            "status",
        ] {
            assert!(built_in_admits("apps", "Deployment", pattern), "{pattern}");
        }
        for pattern in [
            "spec.template.spec.containerz[*].image",
            "spec.replicas.x",
            "spec.template.spec.containers.image",
            "spec.restartAt",
        ] {
            assert!(!built_in_admits("apps", "Deployment", pattern), "{pattern}");
        }
        assert!(built_in_admits("", "ConfigMap", "data.anything"));
        assert!(built_in_admits("", "Service", "spec.ports[*].targetPort"));
    }
}
