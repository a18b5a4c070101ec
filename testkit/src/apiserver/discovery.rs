//! Discovery documents of the API server double, for clients that resolve kinds the way kubectl
//! does (`deploy`, `deployment.apps`, `sts`, `ro`): `GET /api` (APIVersions), `/apis`
//! (APIGroupList), `/api/v1` and `/apis/{group}/{version}` (APIResourceList with `shortNames`,
//! `singularName`, `namespaced`, `verbs`, and the `status`/`scale` subresources) — for exactly the
//! kinds the double serves, with the short names a real cluster gives them.

use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{KINDS, Kind};

/// The short names a real cluster gives the kinds the double serves (the CRDs' as their
/// manifests declare them).
fn short_names(kind: &Kind) -> &'static [&'static str] {
    match (kind.group, kind.plural) {
        ("", "configmaps") => &["cm"],
        ("", "namespaces") => &["ns"],
        ("", "pods") => &["po"],
        ("", "events") => &["ev"],
        ("apps", "deployments") => &["deploy"],
        ("apps", "statefulsets") => &["sts"],
        ("apps", "daemonsets") => &["ds"],
        ("argoproj.io", "rollouts") => &["ro"],
        ("connection.drift-sentinel.io", "connections") => &["dsconn"],
        _ => &[],
    }
}

/// Subresources listed after their resource, as `plural/sub`, with their verbs.
fn subresources(kind: &Kind) -> &'static [(&'static str, &'static [&'static str])] {
    const STATUS: (&str, &[&str]) = ("status", &["get", "patch", "update"]);
    const SCALE: (&str, &[&str]) = ("scale", &["get", "patch", "update"]);
    match (kind.group, kind.plural) {
        ("", "configmaps" | "events") | ("events.k8s.io", _) => &[],
        ("", "pods") => &[STATUS, ("portforward", &["create", "get"])],
        ("apps", "deployments" | "statefulsets") | ("argoproj.io", "rollouts") => &[STATUS, SCALE],
        _ => &[STATUS],
    }
}

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The groups other than core, in the order they are first served.
fn groups() -> Vec<(&'static str, &'static str)> {
    let mut groups: Vec<(&str, &str)> = Vec::new();
    for kind in KINDS.iter().filter(|k| !k.group.is_empty()) {
        if !groups.contains(&(kind.group, kind.version)) {
            groups.push((kind.group, kind.version));
        }
    }
    groups
}

fn resource_list(group: &str, version: &str) -> Option<Value> {
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    let mut resources = Vec::new();
    for kind in KINDS
        .iter()
        .filter(|k| k.group == group && k.version == version)
    {
        let mut resource = json!({
            "name": kind.plural,
            "singularName": kind.kind.to_lowercase(),
            "namespaced": kind.namespaced,
            "kind": kind.kind,
            "verbs": VERBS,
        });
        let short = short_names(kind);
        if !short.is_empty() {
            resource["shortNames"] = json!(short);
        }
        resources.push(resource);
        for (sub, verbs) in subresources(kind) {
            let kind_name = if *sub == "scale" { "Scale" } else { kind.kind };
            let mut entry = json!({
                "name": format!("{}/{sub}", kind.plural),
                "singularName": "",
                "namespaced": kind.namespaced,
                "kind": kind_name,
                "verbs": verbs,
            });
            if *sub == "scale" {
                entry["group"] = json!("autoscaling");
                entry["version"] = json!("v1");
            }
            resources.push(entry);
        }
    }
    (!resources.is_empty()).then(|| {
        json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": group_version,
            "resources": resources,
        })
    })
}

fn group_document(group: &str, version: &str) -> Value {
    let group_version = json!({"groupVersion": format!("{group}/{version}"), "version": version});
    json!({
        "name": group,
        "versions": [group_version],
        "preferredVersion": group_version,
    })
}

fn ok(value: &Value) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

/// The discovery document at `path`, or `None` when `path` is not a discovery path (an object
/// or collection path, or a group or version the double does not serve, answered 404 by the
/// caller).
pub(crate) fn serve(method: &Method, path: &str) -> Option<Response> {
    if method != Method::GET {
        return None;
    }
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let document = match parts.as_slice() {
        ["api"] => json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:443"}],
        }),
        ["apis"] => json!({
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": groups().into_iter().map(|(g, v)| group_document(g, v)).collect::<Vec<_>>(),
        }),
        ["apis", group] => {
            let (group, version) = groups().into_iter().find(|(g, _)| g == group)?;
            let mut document = group_document(group, version);
            document["kind"] = json!("APIGroup");
            document["apiVersion"] = json!("v1");
            document
        }
        ["api", version] => resource_list("", version)?,
        ["apis", group, version] => resource_list(group, version)?,
        _ => return None,
    };
    Some(ok(&document))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(path: &str) -> Value {
        let response = serve(&Method::GET, path).expect(path);
        assert_eq!(response.status(), StatusCode::OK);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let bytes = runtime
            .block_on(axum::body::to_bytes(response.into_body(), usize::MAX))
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn lists_every_served_kind_with_short_names() {
        assert_eq!(body("/api")["versions"], json!(["v1"]));
        let groups = body("/apis");
        let names: Vec<&str> = groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        assert!(
            names.contains(&"apps") && names.contains(&"argoproj.io"),
            "{names:?}"
        );
        let apps = body("/apis/apps/v1");
        let deployments = apps["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "deployments")
            .unwrap();
        assert_eq!(deployments["shortNames"], json!(["deploy"]));
        assert_eq!(deployments["namespaced"], true);
        assert!(
            apps["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["name"] == "statefulsets/scale")
        );
        let core = body("/api/v1");
        let namespaces = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "namespaces")
            .unwrap();
        assert_eq!(namespaces["namespaced"], false);
    }

    #[test]
    fn other_paths_are_left_to_the_caller() {
        assert!(serve(&Method::GET, "/api/v1/namespaces").is_none());
        assert!(serve(&Method::GET, "/apis/apps/v1/deployments").is_none());
        assert!(serve(&Method::GET, "/apis/nope.io/v1").is_none());
        assert!(serve(&Method::POST, "/apis").is_none());
    }
}
