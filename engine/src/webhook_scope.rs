//! Whether a ValidatingWebhookConfiguration sends an object's UPDATEs to the webhook, as far as
//! that can be told outside the API server: its webhooks' `rules` (operations, groups, versions,
//! resources, scope), `namespaceSelector` (against the namespace's labels) and `objectSelector`
//! (against the object's). `matchConditions` are CEL, evaluated by the API server alone: a
//! webhook that has them may or may not be called, and says so. The audit uses this to tell "outside
//! what the webhook intercepts" from "the webhook did not see this edit" (reference §8 "Who and
//! why"). Pure: the configuration and the labels are passed in.

use serde_json::{Map, Value};

/// What a webhook configuration does with an object's UPDATEs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Interception {
    /// A webhook of the configuration is called for them.
    Intercepted,
    /// None is, and why.
    Outside(String),
    /// It cannot be told, and why (CEL `matchConditions`, a selector this code does not read,
    /// the configuration not read).
    Unknown(String),
}

/// The object an UPDATE would be about.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub group: &'a str,
    pub version: &'a str,
    /// The plural resource (`deployments`).
    pub resource: &'a str,
    /// Empty for a cluster-scoped object.
    pub namespace: &'a str,
    /// The namespace's labels (`None` when not known; cluster-scoped objects have none).
    pub namespace_labels: Option<&'a Map<String, Value>>,
    pub object_labels: Option<&'a Map<String, Value>>,
}

/// Whether `configuration` (a ValidatingWebhookConfiguration as JSON) sends UPDATEs of
/// `target` to one of its webhooks.
pub fn interception(configuration: &Value, target: &Target<'_>) -> Interception {
    let name = configuration
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let webhooks = configuration
        .get("webhooks")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let mut outside = Vec::new();
    let mut unknown = Vec::new();
    let mut covering = 0;
    for webhook in webhooks {
        let webhook_name = webhook.get("name").and_then(Value::as_str).unwrap_or("");
        if !covers(webhook, target) {
            continue;
        }
        covering += 1;
        match selected(webhook, target) {
            Interception::Intercepted => return Interception::Intercepted,
            Interception::Outside(why) => outside.push(format!("webhook {webhook_name}: {why}")),
            Interception::Unknown(why) => unknown.push(format!("webhook {webhook_name}: {why}")),
        }
    }
    if covering == 0 {
        let resource = if target.group.is_empty() {
            target.resource.to_owned()
        } else {
            format!("{}.{}", target.resource, target.group)
        };
        return Interception::Outside(format!(
            "no webhook of ValidatingWebhookConfiguration {name} has a rule for UPDATE of {resource}"
        ));
    }
    if !unknown.is_empty() {
        return Interception::Unknown(unknown.join("; "));
    }
    Interception::Outside(outside.join("; "))
}

/// Whether any of `configurations` sends UPDATEs of `target` to one of its webhooks: intercepted
/// when one does; otherwise unknown when one cannot be told; otherwise outside, with each
/// configuration's why (none at all: outside).
pub fn interception_by(configurations: &[Value], target: &Target<'_>) -> Interception {
    let mut outside = Vec::new();
    let mut unknown = Vec::new();
    for configuration in configurations {
        match interception(configuration, target) {
            Interception::Intercepted => return Interception::Intercepted,
            Interception::Outside(why) => outside.push(why),
            Interception::Unknown(why) => unknown.push(why),
        }
    }
    if !unknown.is_empty() {
        return Interception::Unknown(unknown.join("; "));
    }
    if outside.is_empty() {
        return Interception::Outside("no webhook configuration is installed".to_owned());
    }
    Interception::Outside(outside.join("; "))
}

/// Whether one of `webhook`'s rules names UPDATE of the target's resource (not a subresource).
fn covers(webhook: &Value, target: &Target<'_>) -> bool {
    let exact = webhook.get("matchPolicy").and_then(Value::as_str) == Some("Exact");
    let rules = webhook
        .get("rules")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    rules.iter().any(|rule| {
        let names = |key: &str, wanted: &str| {
            rule.get(key).and_then(Value::as_array).is_some_and(|list| {
                list.iter()
                    .filter_map(Value::as_str)
                    .any(|v| v == "*" || v == wanted)
            })
        };
        let scope = rule.get("scope").and_then(Value::as_str).unwrap_or("*");
        let scope_fits = match scope {
            "Namespaced" => !target.namespace.is_empty(),
            "Cluster" => target.namespace.is_empty(),
            _ => true,
        };
        names("operations", "UPDATE")
            && names("apiGroups", target.group)
            // Equivalent (the default) also sends requests made through another version.
            && (!exact || names("apiVersions", target.version))
            && names("resources", target.resource)
            && scope_fits
    })
}

/// The selectors and conditions of a webhook whose rules cover the target.
fn selected(webhook: &Value, target: &Target<'_>) -> Interception {
    if !target.namespace.is_empty() {
        match (webhook.get("namespaceSelector"), target.namespace_labels) {
            (None, _) => {}
            (Some(selector), Some(labels)) => match selects(selector, labels) {
                Ok(true) => {}
                Ok(false) => {
                    return Interception::Outside(format!(
                        "its namespaceSelector does not select namespace {}",
                        target.namespace
                    ));
                }
                Err(e) => return Interception::Unknown(format!("its namespaceSelector: {e}")),
            },
            (Some(selector), None) if !is_everything(selector) => {
                return Interception::Unknown(format!(
                    "namespace {}'s labels are not known for its namespaceSelector",
                    target.namespace
                ));
            }
            (Some(_), None) => {}
        }
    }
    if let Some(selector) = webhook.get("objectSelector") {
        let empty = Map::new();
        match selects(selector, target.object_labels.unwrap_or(&empty)) {
            Ok(true) => {}
            Ok(false) => {
                return Interception::Outside(
                    "its objectSelector does not select the object".to_owned(),
                );
            }
            Err(e) => return Interception::Unknown(format!("its objectSelector: {e}")),
        }
    }
    let conditions = webhook
        .get("matchConditions")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    if conditions > 0 {
        return Interception::Unknown(format!(
            "its {conditions} matchConditions (CEL, evaluated by the API server alone) may skip the edit"
        ));
    }
    Interception::Intercepted
}

fn is_everything(selector: &Value) -> bool {
    selector.as_object().is_none_or(|s| {
        s.values().all(|v| {
            v.is_null()
                || v.as_object().is_some_and(Map::is_empty)
                || v.as_array().is_some_and(Vec::is_empty)
        })
    })
}

/// A label selector (`matchLabels`, `matchExpressions` with `In`, `NotIn`, `Exists`,
/// `DoesNotExist`) against labels; an error names what cannot be read.
pub fn selects(selector: &Value, labels: &Map<String, Value>) -> Result<bool, String> {
    let label = |key: &str| labels.get(key).and_then(Value::as_str);
    if let Some(wanted) = selector.get("matchLabels").and_then(Value::as_object) {
        for (key, value) in wanted {
            if label(key) != value.as_str() {
                return Ok(false);
            }
        }
    }
    let expressions = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    for expression in expressions {
        let key = expression
            .get("key")
            .and_then(Value::as_str)
            .ok_or("an expression without a key")?;
        let values: Vec<&str> = expression
            .get("values")
            .and_then(Value::as_array)
            .map(|v| v.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let operator = expression
            .get("operator")
            .and_then(Value::as_str)
            .unwrap_or("");
        let holds = match operator {
            "In" => label(key).is_some_and(|v| values.contains(&v)),
            "NotIn" => label(key).is_none_or(|v| !values.contains(&v)),
            "Exists" => labels.contains_key(key),
            "DoesNotExist" => !labels.contains_key(key),
            other => {
                return Err(format!(
                    "operator {other:?} is not one of In, NotIn, Exists, DoesNotExist"
                ));
            }
        };
        if !holds {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chart_configuration() -> Value {
        json!({
            "metadata": {"name": "drift-sentinel"},
            "webhooks": [
                {"name": "validate.drift-sentinel.k8s.io",
                 "namespaceSelector": {"matchExpressions": [
                     {"key": "drift-sentinel.k8s.io/enabled", "operator": "NotIn", "values": ["false"]},
                     {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["drift-system", "kube-system"]}]},
                 "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["UPDATE"],
                            "resources": ["deployments", "statefulsets", "daemonsets"], "scope": "Namespaced"}]},
                {"name": "validate-rule.drift-sentinel.k8s.io",
                 "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                            "resources": ["configmaps"]}]}
            ]
        })
    }

    fn target<'a>(
        resource: &'a str,
        namespace: &'a str,
        labels: Option<&'a Map<String, Value>>,
    ) -> Target<'a> {
        Target {
            group: "apps",
            version: "v1",
            resource,
            namespace,
            namespace_labels: labels,
            object_labels: None,
        }
    }

    fn labels(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn any_configuration_that_intercepts_decides() {
        let ns = labels(json!({"kubernetes.io/metadata.name": "shop"}));
        let other = json!({"metadata": {"name": "other"}, "webhooks": []});
        let cel = json!({"metadata": {"name": "cel"}, "webhooks": [
            {"name": "w", "matchConditions": [{"name": "c", "expression": "true"}],
             "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["deployments"]}]}]});
        let t = target("deployments", "shop", Some(&ns));
        for (configurations, expected) in [
            (vec![other.clone(), chart_configuration()], "intercepted"),
            (vec![other.clone(), cel.clone()], "unknown"),
            (vec![other.clone()], "outside"),
            (vec![], "outside"),
        ] {
            let found = match interception_by(&configurations, &t) {
                Interception::Intercepted => "intercepted",
                Interception::Unknown(_) => "unknown",
                Interception::Outside(_) => "outside",
            };
            assert_eq!(found, expected, "{configurations:?}");
        }
    }

    #[test]
    fn the_charts_selectors_are_evaluated() {
        let configuration = chart_configuration();
        let shop = labels(json!({"kubernetes.io/metadata.name": "shop"}));
        let opted_out = labels(
            json!({"kubernetes.io/metadata.name": "lab", "drift-sentinel.k8s.io/enabled": "false"}),
        );
        let own = labels(json!({"kubernetes.io/metadata.name": "drift-system"}));
        let cases = [
            (target("deployments", "shop", Some(&shop)), None),
            (
                target("deployments", "lab", Some(&opted_out)),
                Some(
                    "webhook validate.drift-sentinel.k8s.io: its namespaceSelector does not select namespace lab",
                ),
            ),
            (
                target("deployments", "drift-system", Some(&own)),
                Some(
                    "webhook validate.drift-sentinel.k8s.io: its namespaceSelector does not select namespace drift-system",
                ),
            ),
            (
                target("replicasets", "shop", Some(&shop)),
                Some(
                    "no webhook of ValidatingWebhookConfiguration drift-sentinel has a rule for UPDATE of replicasets.apps",
                ),
            ),
        ];
        for (target, outside) in cases {
            let got = interception(&configuration, &target);
            match outside {
                None => assert_eq!(got, Interception::Intercepted, "{target:?}"),
                Some(why) => assert_eq!(got, Interception::Outside(why.to_owned()), "{target:?}"),
            }
        }
    }

    #[test]
    fn match_conditions_and_unknown_labels_cannot_be_told() {
        let mut configuration = chart_configuration();
        configuration["webhooks"][0]["matchConditions"] =
            json!([{"name": "not-flux", "expression": "request.userInfo.username != 'flux'"}]);
        let shop = labels(json!({"kubernetes.io/metadata.name": "shop"}));
        assert!(matches!(
            interception(&configuration, &target("deployments", "shop", Some(&shop))),
            Interception::Unknown(why) if why.contains("1 matchConditions")
        ));
        assert!(matches!(
            interception(&chart_configuration(), &target("deployments", "shop", None)),
            Interception::Unknown(why) if why.contains("labels are not known")
        ));
    }

    #[test]
    fn object_selectors_scope_and_exact_versions() {
        let configuration = json!({"metadata": {"name": "c"}, "webhooks": [{
            "name": "w", "matchPolicy": "Exact", "objectSelector": {"matchLabels": {"guarded": "yes"}},
            "rules": [{"apiGroups": ["*"], "apiVersions": ["v1"], "operations": ["*"], "resources": ["*"], "scope": "Namespaced"}]}]});
        let guarded = labels(json!({"guarded": "yes"}));
        let mut t = target("deployments", "shop", None);
        t.object_labels = Some(&guarded);
        assert_eq!(interception(&configuration, &t), Interception::Intercepted);
        t.object_labels = None;
        assert_eq!(
            interception(&configuration, &t),
            Interception::Outside(
                "webhook w: its objectSelector does not select the object".into()
            )
        );
        t.object_labels = Some(&guarded);
        t.version = "v1beta1";
        assert!(matches!(
            interception(&configuration, &t),
            Interception::Outside(_)
        ));
        t.version = "v1";
        t.namespace = "";
        assert!(matches!(
            interception(&configuration, &t),
            Interception::Outside(_)
        ));
    }

    #[test]
    fn selector_operators() {
        let l = labels(json!({"a": "1", "b": "2"}));
        let cases = [
            (json!({"matchLabels": {"a": "1"}}), Ok(true)),
            (json!({"matchLabels": {"a": "2"}}), Ok(false)),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "3"]}]}),
                Ok(true),
            ),
            (
                json!({"matchExpressions": [{"key": "c", "operator": "NotIn", "values": ["1"]}]}),
                Ok(true),
            ),
            (
                json!({"matchExpressions": [{"key": "b", "operator": "Exists"}]}),
                Ok(true),
            ),
            (
                json!({"matchExpressions": [{"key": "b", "operator": "DoesNotExist"}]}),
                Ok(false),
            ),
            (json!({}), Ok(true)),
        ];
        for (selector, want) in cases {
            assert_eq!(selects(&selector, &l), want, "{selector}");
        }
        assert!(
            selects(
                &json!({"matchExpressions": [{"key": "a", "operator": "Gt"}]}),
                &l
            )
            .is_err()
        );
    }
}
