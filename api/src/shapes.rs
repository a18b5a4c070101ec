//! The shapes of Kubernetes' built-in kinds, from k8s-openapi's OpenAPI schemas, for the rule
//! linter (`drift_engine::lint`): a pattern that no selected kind can have is probably a typo.
//! [`Shape`] says which paths a kind's objects can have; the built-in kinds' are built once, on
//! first use, from k8s-openapi's schemas.

use std::sync::OnceLock;

use k8s_openapi::api::{apps, autoscaling, batch, core, networking, policy, rbac};
use schemars::JsonSchema;
use serde_json::Value;

/// The shape of a kind's objects, as far as paths are concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    /// A value with no parts (string, number, boolean, quantity, int-or-string).
    Scalar,
    /// An object with these fields.
    Object(Vec<(String, Shape)>),
    /// A map whose every value has this shape (labels, annotations, `nodeSelector`).
    MapOf(Box<Shape>),
    /// A list whose elements have this shape.
    List(Box<Shape>),
    /// Anything (free-form or unknown structure).
    Any,
}

/// The shapes of the kinds a caller knows; `None` for a kind it does not know (a custom
/// resource), about which nothing is claimed.
pub trait Shapes {
    fn shape(&self, group: &str, kind: &str) -> Option<&Shape>;
    /// Every kind known, for selectors with `*`: `(group, kind)`.
    fn kinds(&self) -> Vec<(&str, &str)>;
}

/// The built-in kinds whose shapes are known.
pub struct BuiltInShapes {
    kinds: Vec<(&'static str, &'static str, Shape)>,
}

impl Shapes for BuiltInShapes {
    fn shape(&self, group: &str, kind: &str) -> Option<&Shape> {
        self.kinds
            .iter()
            .find(|(g, k, _)| *g == group && *k == kind)
            .map(|(_, _, shape)| shape)
    }

    fn kinds(&self) -> Vec<(&str, &str)> {
        self.kinds.iter().map(|(g, k, _)| (*g, *k)).collect()
    }
}

/// The shapes of the built-in kinds.
pub fn built_in() -> &'static BuiltInShapes {
    static SHAPES: OnceLock<BuiltInShapes> = OnceLock::new();
    SHAPES.get_or_init(|| BuiltInShapes {
        kinds: vec![
            ("apps", "Deployment", shape_of::<apps::v1::Deployment>()),
            ("apps", "StatefulSet", shape_of::<apps::v1::StatefulSet>()),
            ("apps", "DaemonSet", shape_of::<apps::v1::DaemonSet>()),
            ("apps", "ReplicaSet", shape_of::<apps::v1::ReplicaSet>()),
            ("", "Pod", shape_of::<core::v1::Pod>()),
            (
                "",
                "ReplicationController",
                shape_of::<core::v1::ReplicationController>(),
            ),
            ("", "Service", shape_of::<core::v1::Service>()),
            ("", "ConfigMap", shape_of::<core::v1::ConfigMap>()),
            ("", "Secret", shape_of::<core::v1::Secret>()),
            ("", "ServiceAccount", shape_of::<core::v1::ServiceAccount>()),
            ("", "Namespace", shape_of::<core::v1::Namespace>()),
            ("batch", "Job", shape_of::<batch::v1::Job>()),
            ("batch", "CronJob", shape_of::<batch::v1::CronJob>()),
            (
                "networking.k8s.io",
                "Ingress",
                shape_of::<networking::v1::Ingress>(),
            ),
            (
                "networking.k8s.io",
                "NetworkPolicy",
                shape_of::<networking::v1::NetworkPolicy>(),
            ),
            (
                "policy",
                "PodDisruptionBudget",
                shape_of::<policy::v1::PodDisruptionBudget>(),
            ),
            (
                "rbac.authorization.k8s.io",
                "Role",
                shape_of::<rbac::v1::Role>(),
            ),
            (
                "rbac.authorization.k8s.io",
                "ClusterRole",
                shape_of::<rbac::v1::ClusterRole>(),
            ),
            (
                "rbac.authorization.k8s.io",
                "RoleBinding",
                shape_of::<rbac::v1::RoleBinding>(),
            ),
            (
                "rbac.authorization.k8s.io",
                "ClusterRoleBinding",
                shape_of::<rbac::v1::ClusterRoleBinding>(),
            ),
            (
                "autoscaling",
                "HorizontalPodAutoscaler",
                shape_of::<autoscaling::v2::HorizontalPodAutoscaler>(),
            ),
        ],
    })
}

fn shape_of<T: JsonSchema>() -> Shape {
    let schema = schemars::schema_for!(T);
    let root = schema.as_value();
    let defs = root.get("$defs").or_else(|| root.get("definitions"));
    convert(root, defs, 0)
}

/// Deep enough for every built-in kind; deeper (a recursive schema) is "anything".
const MAX_DEPTH: usize = 48;

fn convert(schema: &Value, defs: Option<&Value>, depth: usize) -> Shape {
    if depth > MAX_DEPTH {
        return Shape::Any;
    }
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let name = reference.rsplit('/').next().unwrap_or("");
        return match defs.and_then(|d| d.get(name)) {
            Some(target) => convert(target, defs, depth + 1),
            None => Shape::Any,
        };
    }
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
        || schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
    {
        return if schema.get("x-kubernetes-int-or-string").is_some() {
            Shape::Scalar
        } else {
            Shape::Any
        };
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                return Shape::Object(
                    properties
                        .iter()
                        .map(|(name, field)| (name.clone(), convert(field, defs, depth + 1)))
                        .collect(),
                );
            }
            match schema.get("additionalProperties") {
                Some(Value::Bool(false)) => Shape::Object(Vec::new()),
                Some(value @ Value::Object(_)) => {
                    Shape::MapOf(Box::new(convert(value, defs, depth + 1)))
                }
                _ => Shape::Any,
            }
        }
        Some("array") => match schema.get("items") {
            Some(items) => Shape::List(Box::new(convert(items, defs, depth + 1))),
            None => Shape::List(Box::new(Shape::Any)),
        },
        Some(_) => Shape::Scalar,
        None => Shape::Any,
    }
}
