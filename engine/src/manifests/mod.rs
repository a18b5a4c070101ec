//! Kubernetes manifests as they would be applied: multi-document YAML holding ConfigMaps,
//! Namespaces and `List`s of them. Turns text into rule sources and namespace annotations.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::rule::{MODE_ANNOTATION, RuleSource, rule_source_from_config_map};

mod document;
use document::JsonDocument;

/// A YAML document that could not be read, with where it went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: line {line} column {column}: {reason}")]
pub struct ManifestError {
    pub origin: String,
    pub line: usize,
    pub column: usize,
    pub reason: String,
}

/// Every non-empty document of a multi-document YAML text, as JSON values. `List` objects are
/// flattened into their items.
pub fn parse_documents(text: &str, origin: &str) -> Result<Vec<Value>, ManifestError> {
    // Measured before libyaml reads it: nesting, what its aliases expand to, its tags
    // (reference §5, "No input stops the agent").
    crate::nesting::check_yaml(text).map_err(|e| {
        let (line, column) = crate::rule::position(text, e.offset());
        ManifestError {
            origin: origin.to_owned(),
            line: line.unwrap_or(0),
            column: column.unwrap_or(0),
            reason: format!("the text {e}"),
        }
    })?;
    let mut documents = Vec::new();
    for document in serde_yaml::Deserializer::from_str(text) {
        let value = JsonDocument::deserialize(document)
            .map(|d| d.0)
            .map_err(|e| {
                let location = e.location();
                let mut reason = e.to_string();
                if let Some(at) = reason.rfind(" at line ") {
                    reason.truncate(at);
                }
                ManifestError {
                    origin: origin.to_owned(),
                    line: location.as_ref().map_or(0, |l| l.line()),
                    column: location.as_ref().map_or(0, |l| l.column()),
                    reason,
                }
            })?;
        flatten(value, &mut documents);
    }
    Ok(documents)
}

fn flatten(value: Value, out: &mut Vec<Value>) {
    match value {
        Value::Null => {}
        Value::Object(mut map)
            if map
                .get("kind")
                .and_then(Value::as_str)
                .is_some_and(|k| k.ends_with("List"))
                && map.get("items").is_some_and(Value::is_array) =>
        {
            if let Some(Value::Array(items)) = map.remove("items") {
                for item in items {
                    flatten(item, out);
                }
            }
        }
        other => out.push(other),
    }
}

/// The one object of a manifest file (a file with several objects, or none, is an error).
pub fn single_object(text: &str, origin: &str) -> Result<Value, ManifestError> {
    let mut documents = parse_documents(text, origin)?;
    let error = |reason: String| ManifestError {
        origin: origin.to_owned(),
        line: 1,
        column: 1,
        reason,
    };
    match documents.len() {
        1 => Ok(documents.remove(0)),
        0 => Err(error("holds no object".into())),
        n => Err(error(format!(
            "holds {n} objects; give one object per file"
        ))),
    }
}

/// The rule ConfigMaps among `documents`. ConfigMaps without a namespace land in `default`,
/// as `kubectl apply` would put them.
pub fn rule_sources(documents: &[Value], origin: &str) -> Vec<RuleSource> {
    documents
        .iter()
        .filter_map(|d| rule_source_from_config_map(d, "default", Some(origin)))
        .collect()
}

/// What the decision needs to know of a namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceInfo {
    /// The raw value of the `drift-sentinel.k8s.io/mode` annotation.
    pub mode_annotation: Option<String>,
}

/// Namespaces by name.
pub type Namespaces = BTreeMap<String, NamespaceInfo>;

/// The Namespace objects among `documents`.
pub fn namespaces(documents: &[Value]) -> Namespaces {
    documents
        .iter()
        .filter(|d| d.get("kind").and_then(Value::as_str) == Some("Namespace"))
        .filter_map(|d| {
            let metadata = d.get("metadata")?;
            let name = metadata.get("name")?.as_str()?.to_owned();
            let mode_annotation = metadata
                .get("annotations")
                .and_then(|a| a.get(MODE_ANNOTATION))
                .and_then(Value::as_str)
                .map(str::to_owned);
            Some((name, NamespaceInfo { mode_annotation }))
        })
        .collect()
}

/// The plural resource name of a kind, where no API server is there to say (objects read from
/// files, reviews built from manifests): `Deployment` → `deployments`, `Ingress` → `ingresses`, `NetworkPolicy` →
/// `networkpolicies`.
pub fn resource_of(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    if let Some(stem) = lower.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        return format!("{stem}ies");
    }
    if lower.ends_with('s') || lower.ends_with('x') || lower.ends_with("ch") {
        return format!("{lower}es");
    }
    format!("{lower}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_of_kinds() {
        for (kind, resource) in [
            ("Deployment", "deployments"),
            ("Ingress", "ingresses"),
            ("NetworkPolicy", "networkpolicies"),
            ("Gateway", "gateways"),
            ("Box", "boxes"),
            ("Patch", "patches"),
        ] {
            assert_eq!(resource_of(kind), resource, "{kind}");
        }
    }

    /// What JSON cannot hold is refused with where it is, never turned into something else.
    #[test]
    fn refuses_what_json_cannot_hold() {
        for (text, line, reason) in [
            (
                "a: 1\nb: .inf\n",
                2,
                "the number inf cannot be written in JSON",
            ),
            (
                "a:\n  - -.Inf\n",
                2,
                "the number -inf cannot be written in JSON",
            ),
            (
                "a: {b: .nan}\n",
                1,
                "the number NaN cannot be written in JSON",
            ),
            // A key given twice is placed at the start of its mapping.
            (
                "a: 1\nb: 2\na: 3\n",
                1,
                "the mapping that starts here gives the key \"a\" twice",
            ),
            (
                "x:\n  y: {k: 1, k: 1}\n",
                2,
                "gives the key \"k\" twice; keep one",
            ),
        ] {
            let error = parse_documents(text, "objects.yaml").unwrap_err();
            assert_eq!(error.origin, "objects.yaml");
            assert_eq!(error.line, line, "{text:?}: {error}");
            assert!(error.reason.contains(reason), "{text:?}: {error}");
        }
    }

    /// Numbers and keys JSON can hold read as they are written.
    #[test]
    fn reads_what_json_can_hold() {
        let text =
            "i: -3\nu: 18446744073709551615\nf: 1.5e300\ninf: \".inf\"\nn: ~\n1: one\nt: true\n";
        let documents = parse_documents(text, "o.yaml").unwrap();
        assert_eq!(
            documents,
            [serde_json::json!({
                "i": -3, "u": 18446744073709551615u64, "f": 1.5e300, "inf": ".inf",
                "n": null, "1": "one", "t": true
            })]
        );
    }

    #[test]
    fn reads_multi_document_files_and_lists() {
        let text = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: a
  namespace: ops
  annotations:
    drift-sentinel.k8s.io/rule: "true"
data:
  spec: |
    mode: enforce
---
---
apiVersion: v1
kind: List
items:
  - apiVersion: v1
    kind: ConfigMap
    metadata: {name: b, annotations: {drift-sentinel.k8s.io/rule: "TRUE"}}
    data: {spec: "mode: warn"}
  - apiVersion: v1
    kind: ConfigMap
    metadata: {name: not-a-rule}
  - apiVersion: v1
    kind: Namespace
    metadata: {name: prod, annotations: {drift-sentinel.k8s.io/mode: warn}}
"#;
        let documents = parse_documents(text, "rules.yaml").unwrap();
        assert_eq!(documents.len(), 4);
        let sources = rule_sources(&documents, "rules.yaml");
        let ids: Vec<String> = sources.iter().map(|s| s.id.to_string()).collect();
        assert_eq!(ids, ["ops/a", "default/b"]);
        let namespaces = namespaces(&documents);
        assert_eq!(namespaces["prod"].mode_annotation.as_deref(), Some("warn"));
    }

    #[test]
    fn syntax_errors_carry_the_location() {
        let err = parse_documents("a: 1\nb: [1, 2\n", "bad.yaml").unwrap_err();
        assert_eq!(err.origin, "bad.yaml");
        assert!(err.line >= 2, "{err}");
        assert!(err.to_string().starts_with("bad.yaml: line"), "{err}");
    }
}
