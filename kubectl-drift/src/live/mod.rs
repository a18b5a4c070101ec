//! The cluster commands: `explain KIND/NAME`, `preview -f FILE`, `preview KIND/NAME` (through
//! `$EDITOR`) and `--server-dry-run`.
//!
//! The rules are the cluster's rule ConfigMaps (any namespace), built into a rule set by
//! `drift-engine` exactly as the offline commands build it from files; the mode annotation is
//! the live Namespace's; the verdict is `drift-engine`'s, the agent's own code. Kinds are named
//! as kubectl names them and resolved through the API server's discovery ([`resolve`]).
//!
//! What is judged is the update the API server would receive:
//! - `preview -f FILE`: what `kubectl apply -f FILE` makes of the live object (client-side
//!   apply's three-way merge with the live object's last-applied annotation,
//!   [`drift_engine::apply`]), so that fields the server defaulted and the file leaves out are
//!   not changes; with `--replace`, the file as written (`kubectl replace -f FILE`).
//! - `preview KIND/NAME` (the editor): the saved object, with the fields the editor did not
//!   show (status, the server's metadata) kept from the live object. `kubectl edit` sends a
//!   two-way patch from the object it showed to the object saved; as everything else was
//!   shown, that patch applied to the live object gives exactly this.

mod client;
mod dry_run;
mod edit;
mod resolve;

use anyhow::{Context as _, anyhow, bail};
use drift_engine::RuleSet;
use drift_engine::apply::{self, Patch};
use drift_engine::manifests;
use drift_engine::rule::{is_rule_annotation, rule_source_from_config_map};
use futures::future::join_all;
use serde_json::Value;

use crate::cli::{Common, ExplainArgs, Output, PreviewArgs};
use crate::offline::{self, LoadedRules};
use crate::{DEFAULT_USER, Verdict, judge, render, request_for};
use client::{Cluster, collection_path, connect, describe};
use resolve::Resource;

/// Metadata the API server keeps on an update when the sent object lacks it, as the update
/// `kubectl apply` sends would find it.
const SERVER_METADATA: &[&str] = &[
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// `KIND/NAME` split in two.
fn split_target(target: &str) -> anyhow::Result<(&str, &str)> {
    match target.split_once('/') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((kind, name))
        }
        _ => bail!("expected KIND/NAME (e.g. deploy/web), got {target:?}"),
    }
}

fn text<'v>(object: &'v Value, pointer: &str) -> &'v str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The namespace a command works in: `-n`, else the kubeconfig context's.
fn namespace_of(common: &Common, cluster: &Cluster) -> String {
    common
        .namespace
        .clone()
        .unwrap_or_else(|| cluster.default_namespace.clone())
}

/// The namespace of an object read from a file: its own, else `-n`, else the context's; its own
/// and `-n` differing is kubectl's error.
fn namespace_for_file(
    common: &Common,
    cluster: &Cluster,
    object: &Value,
    namespaced: bool,
) -> anyhow::Result<String> {
    if !namespaced {
        return Ok(String::new());
    }
    let own = text(object, "/metadata/namespace");
    match (&common.namespace, own) {
        (_, "") => Ok(namespace_of(common, cluster)),
        (Some(flag), own) if flag != own => bail!(
            "the namespace from the provided object {own:?} does not match the namespace {flag:?}; pass --namespace={own} or remove the object's namespace"
        ),
        (_, own) => Ok(own.to_owned()),
    }
}

/// A description of an object for messages: `deployments.apps "web" in namespace "prod"`.
fn describe_object(resource: &Resource, namespace: &str, name: &str) -> String {
    if resource.namespaced {
        format!(
            "{} {name:?} in namespace {namespace:?}",
            resource.qualified()
        )
    } else {
        format!("{} {name:?}", resource.qualified())
    }
}

async fn fetch_live(
    cluster: &Cluster,
    resource: &Resource,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Value> {
    let what = describe_object(resource, namespace, name);
    let mut object = cluster
        .get(&resource.collection(namespace), name)
        .await
        .map_err(describe)
        .with_context(|| format!("cannot read {what}"))?
        .ok_or_else(|| {
            let place = if resource.namespaced {
                format!(" in namespace {namespace:?}")
            } else {
                String::new()
            };
            anyhow!("{} {name:?} not found{place}", resource.qualified())
        })?;
    // A GET answers with apiVersion and kind; an aggregated API might not.
    if text(&object, "/kind").is_empty() {
        object["kind"] = Value::String(resource.kind.clone());
        object["apiVersion"] = Value::String(resource.api_version());
    }
    Ok(object)
}

/// The cluster's rule ConfigMaps (annotated `drift-sentinel.k8s.io/rule: "true"`, any
/// namespace): listed as metadata, the rules' data read one by one, compiled by `drift-engine`
/// as the offline commands compile files.
async fn cluster_rules(cluster: &Cluster) -> anyhow::Result<LoadedRules> {
    let config_maps = collection_path("", "v1", None, "configmaps");
    let listed = cluster
        .list(&config_maps, true)
        .await
        .map_err(describe)
        .context("cannot list the rule ConfigMaps (configmaps in all namespaces)")?;
    let rules: Vec<(String, String)> = listed
        .iter()
        .filter(|m| {
            is_rule_annotation(
                m.pointer("/metadata/annotations")
                    .and_then(Value::as_object),
            )
        })
        .map(|m| {
            (
                text(m, "/metadata/namespace").to_owned(),
                text(m, "/metadata/name").to_owned(),
            )
        })
        .collect();
    let fetched = join_all(rules.iter().map(|(namespace, name)| {
        let collection = collection_path("", "v1", Some(namespace), "configmaps");
        async move { cluster.get(&collection, name).await }
    }))
    .await;
    let mut sources = Vec::new();
    for ((namespace, name), config_map) in rules.iter().zip(fetched) {
        let config_map = config_map
            .map_err(describe)
            .with_context(|| format!("cannot read the rule ConfigMap {namespace}/{name}"))?;
        // Deleted since the list: no longer a rule.
        let Some(mut config_map) = config_map else {
            continue;
        };
        config_map["kind"] = Value::from("ConfigMap");
        config_map["apiVersion"] = Value::from("v1");
        sources.extend(rule_source_from_config_map(&config_map, "default", None));
    }
    Ok(LoadedRules {
        set: RuleSet::build(sources),
    })
}

/// The raw value of the Namespace's `drift-sentinel.k8s.io/mode` annotation.
async fn namespace_mode(cluster: &Cluster, namespace: &str) -> anyhow::Result<Option<String>> {
    if namespace.is_empty() {
        return Ok(None);
    }
    let object = cluster
        .get(&collection_path("", "v1", None, "namespaces"), namespace)
        .await
        .map_err(describe)
        .with_context(|| {
            format!(
                "cannot read Namespace {namespace:?} (for its drift-sentinel.k8s.io/mode annotation)"
            )
        })?;
    let Some(mut object) = object else {
        return Ok(None);
    };
    object["kind"] = Value::from("Namespace");
    Ok(manifests::namespaces(std::slice::from_ref(&object))
        .remove(namespace)
        .and_then(|n| n.mode_annotation))
}

/// The user edits are judged for: `--user`, else who the kubeconfig authenticates as.
async fn user(flag: Option<&str>, cluster: &Cluster) -> String {
    match flag {
        Some(user) => user.to_owned(),
        None => cluster
            .whoami()
            .await
            .unwrap_or_else(|| DEFAULT_USER.to_owned()),
    }
}

/// What the rules are judged with: the rules, the namespace's mode annotation and the user.
async fn judging_context(
    cluster: &Cluster,
    namespace: &str,
    user_flag: Option<&str>,
) -> anyhow::Result<(LoadedRules, Option<String>, String)> {
    let (rules, mode, user) = tokio::join!(
        cluster_rules(cluster),
        namespace_mode(cluster, namespace),
        user(user_flag, cluster)
    );
    Ok((rules?, mode?, user))
}

/// The object an update of `live` into `edited` sends, as the API server sees it: the server's
/// metadata kept from the live object where the edit lacks it, the namespace filled in, and the
/// live status (an update of the object never changes its status).
fn as_update(live: &Value, mut edited: Value, namespace: &str) -> Value {
    if !edited["metadata"].is_object() {
        edited["metadata"] = Value::Object(serde_json::Map::new());
    }
    for field in SERVER_METADATA {
        if edited["metadata"].get(*field).is_none()
            && let Some(value) = live["metadata"].get(*field)
        {
            edited["metadata"][*field] = value.clone();
        }
    }
    if !namespace.is_empty() && text(&edited, "/metadata/namespace").is_empty() {
        edited["metadata"]["namespace"] = Value::from(namespace);
    }
    match (live.get("status"), edited.as_object_mut()) {
        (Some(status), Some(map)) => {
            map.insert("status".into(), status.clone());
        }
        (None, Some(map)) => {
            map.remove("status");
        }
        _ => {}
    }
    edited
}

pub fn explain(args: &ExplainArgs) -> anyhow::Result<Verdict> {
    let target = match (&args.target, &args.file) {
        (Some(_), Some(_)) => bail!("give KIND/NAME or -f FILE, not both"),
        (None, None) => bail!(
            "explain needs KIND/NAME of a live object (e.g. deploy/web) or -f FILE; offline: --rules PATH -f FILE"
        ),
        (target, _) => target.as_deref(),
    };
    runtime()?.block_on(async {
        let cluster = connect(&args.common).await?;
        let (object, namespace) = match target {
            Some(target) => {
                let (kind, name) = split_target(target)?;
                let resource = resolve::resolve(&cluster, kind).await?;
                let namespace = if resource.namespaced {
                    namespace_of(&args.common, &cluster)
                } else {
                    String::new()
                };
                let object = fetch_live(&cluster, &resource, &namespace, name).await?;
                (object, namespace)
            }
            None => {
                // The object of a file, judged against the cluster's rules (not fetched).
                let path = args.file.as_deref().unwrap_or_else(|| unreachable!());
                let mut object = offline::read_object(path)?;
                let namespaced = match text(&object, "/kind") {
                    "" => true,
                    kind => resolve::resolve_kind(&cluster, text(&object, "/apiVersion"), kind)
                        .await?
                        .is_none_or(|r| r.namespaced),
                };
                let namespace = namespace_for_file(&args.common, &cluster, &object, namespaced)?;
                if namespaced {
                    object["metadata"]["namespace"] = Value::from(namespace.clone());
                }
                (object, namespace)
            }
        };
        let (rules, mode, user) =
            judging_context(&cluster, &namespace, args.user.as_deref()).await?;
        // Explaining an object is explaining an edit of it that changes nothing.
        let request = request_for(object.clone(), object, &user)
            .context("cannot read the object as a Kubernetes object")?;
        render::explain(&args.common, &request, mode.as_deref(), &rules)?;
        Ok(Verdict::Allowed)
    })
}

pub fn preview(args: &PreviewArgs) -> anyhow::Result<Verdict> {
    if args.old.is_some() || args.new.is_some() {
        bail!(
            "--old and --new are for offline preview (with --rules); against a cluster use -f FILE or KIND/NAME"
        );
    }
    match (&args.file, &args.target) {
        (Some(_), Some(_)) => bail!("give -f FILE or KIND/NAME, not both"),
        (None, None) => bail!(
            "preview needs -f FILE (the edited object) or KIND/NAME (to edit the live object in $EDITOR); offline: --rules PATH --old FILE --new FILE"
        ),
        _ => {}
    }
    runtime()?.block_on(async {
        let cluster = connect(&args.common).await?;
        let (resource, namespace, name, live, edited, origin) = match (&args.file, &args.target)
        {
            (Some(path), _) => {
                let mut object = offline::read_object(path)?;
                let origin = path.display().to_string();
                let (api_version, kind, name) = (
                    text(&object, "/apiVersion"),
                    text(&object, "/kind"),
                    text(&object, "/metadata/name").to_owned(),
                );
                if api_version.is_empty() || kind.is_empty() || name.is_empty() {
                    bail!("{origin}: the object needs apiVersion, kind and metadata.name");
                }
                let resource = resolve::resolve_kind(&cluster, api_version, kind)
                    .await?
                    .ok_or_else(|| {
                        anyhow!(
                            "resource mapping not found for {kind} {name:?} from {origin}: no matches for kind {kind:?} in version {api_version:?}; ensure CRDs are installed first"
                        )
                    })?;
                let namespace =
                    namespace_for_file(&args.common, &cluster, &object, resource.namespaced)?;
                let live = fetch_live(&cluster, &resource, &namespace, &name).await?;
                // kubectl sets the namespace it applies to on the object: the last-applied
                // annotation names it.
                if !args.replace
                    && resource.namespaced
                    && text(&object, "/metadata/namespace").is_empty()
                {
                    object["metadata"]["namespace"] = Value::from(namespace.clone());
                }
                let edited = edited_from_file(&live, &object, args.replace);
                (resource, namespace, name, live, edited, origin)
            }
            (None, Some(target)) => {
                let (kind, name) = split_target(target)?;
                let resource = resolve::resolve(&cluster, kind).await?;
                let namespace = if resource.namespaced {
                    namespace_of(&args.common, &cluster)
                } else {
                    String::new()
                };
                let live = fetch_live(&cluster, &resource, &namespace, name).await?;
                let what = describe_object(&resource, &namespace, name);
                let edited = match edit::edit(&edit::cleaned(&live), &what)? {
                    edit::Edited::Object(edited) => edited,
                    edit::Edited::Cancelled(message) => {
                        match args.common.output {
                            Output::Text => println!("{message}"),
                            Output::Json | Output::Yaml => eprintln!("{message}"),
                        }
                        return Ok(Verdict::Allowed);
                    }
                };
                let edited_namespace = text(&edited, "/metadata/namespace");
                if !edited_namespace.is_empty() && edited_namespace != namespace {
                    bail!(
                        "the edit moved the object to namespace {edited_namespace:?}; an update keeps the namespace ({namespace:?})"
                    );
                }
                (resource, namespace, name.to_owned(), live, edited, "the edit".to_owned())
            }
            (None, None) => unreachable!(),
        };
        let (rules, mode, user) = judging_context(&cluster, &namespace, args.user.as_deref()).await?;
        let what = describe_object(&resource, &namespace, &name);
        let (mut live, mut edited) = (live, edited);
        let mut attempts = 0;
        loop {
            let new = as_update(&live, edited.clone(), &namespace);
            let request = request_for(live.clone(), new.clone(), &user)
                .with_context(|| format!("{origin} is not an update of the live {what}"))?;
            let judged = judge(&rules, &request, mode.as_deref());
            if !args.server_dry_run {
                render::emit(&args.common, &judged.document, || judged.screen)?;
                return Ok(judged.verdict);
            }
            match dry_run::send(&cluster, &resource, &namespace, &name, &new).await? {
                dry_run::Sent::Answered(answer) => {
                    return dry_run::report(&args.common, judged, &answer);
                }
                // The live object changed between the read and the dry run (a controller
                // writing its status, say): judge the edit of the new version, as kubectl
                // apply retries a conflicting patch. An edit made in $EDITOR cannot be redone.
                dry_run::Sent::Conflict(message) => {
                    attempts += 1;
                    let Some(path) = args.file.as_ref().filter(|_| attempts < 5) else {
                        bail!(
                            "the server-side dry-run of {what} failed: {message}; the object changed while it was being previewed, run the preview again"
                        );
                    };
                    live = fetch_live(&cluster, &resource, &namespace, &name).await?;
                    let mut object = offline::read_object(path)?;
                    if !args.replace
                        && resource.namespaced
                        && text(&object, "/metadata/namespace").is_empty()
                    {
                        object["metadata"]["namespace"] = Value::from(namespace.clone());
                    }
                    edited = edited_from_file(&live, &object, args.replace);
                }
            }
        }
    })
}

/// What `kubectl apply -f` (or, with `--replace`, `kubectl replace -f`) makes of the live object.
fn edited_from_file(live: &Value, object: &Value, replace: bool) -> Value {
    if replace {
        return object.clone();
    }
    let patch = Patch::for_api_version(text(object, "/apiVersion"));
    apply::apply(live, object, patch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn targets_are_kind_slash_name() {
        assert_eq!(split_target("deploy/web").unwrap(), ("deploy", "web"));
        assert_eq!(
            split_target("deployment.apps/web").unwrap(),
            ("deployment.apps", "web")
        );
        for bad in ["web", "deploy/", "/web", "a/b/c"] {
            assert!(split_target(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_update_keeps_the_server_metadata_and_status() {
        let live = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "prod", "resourceVersion": "7", "uid": "u1"},
            "spec": {"replicas": 1}, "status": {"ready": 1}});
        let edited = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "uid": "u2"}, "spec": {"replicas": 2}, "status": {"ready": 9}});
        let update = as_update(&live, edited, "prod");
        assert_eq!(update["metadata"]["resourceVersion"], "7");
        assert_eq!(
            update["metadata"]["uid"], "u2",
            "the file's own value stays"
        );
        assert_eq!(update["metadata"]["namespace"], "prod");
        assert_eq!(update["status"], json!({"ready": 1}));
        assert_eq!(update["spec"]["replicas"], 2);
    }
}
