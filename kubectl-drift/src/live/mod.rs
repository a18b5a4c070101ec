//! The cluster commands: `explain KIND/NAME`, `preview -f FILE`, `preview KIND/NAME` (through
//! `$EDITOR`) and `--server-dry-run`.
//!
//! The rules are the cluster's rule ConfigMaps (any namespace), built into a rule set by
//! `drift-engine` with the agent's tiers (reference §2 "Who may write a rule"): the cluster rule
//! namespaces of `--cluster-rule-namespaces`, else those an agent pod's admin `/status` reports
//! (read through port-forwarding), else the agent's default, its own namespace
//! (`--agent-namespace`), with a warning saying so. The mode annotation is the live
//! Namespace's; the verdict is `drift-engine`'s, the agent's own code. Kinds are named
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

mod dry_run;
mod edit;
pub(crate) mod resolve;
pub(crate) mod who;

use std::path::Path;

use anyhow::{Context as _, anyhow, bail};
use drift_engine::apply::{self, Patch};
use drift_engine::manifests;
use drift_engine::rule::{TierPolicy, is_rule_annotation, rule_source_from_config_map};
use drift_engine::{RuleSet, RuleSource};
use futures::future::join_all;
use serde_json::Value;

use crate::cli::Output;
use crate::cluster::{self, Cluster, collection_path, forward, pods};
use crate::files;
use crate::plan::{
    ClusterExplain, ClusterPreview, ClusterTiers, DEFAULT_USER, Edit, Kube, ObjectRef, Print,
};
use crate::render::{self, Style};
use crate::verdict::{Verdict, evaluate_update, request_for};
use drift_api::status::AgentStatus;
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

fn text<'v>(object: &'v Value, pointer: &str) -> &'v str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The namespace a command works in: `-n`, else the kubeconfig context's.
fn namespace_of(kube: &Kube, cluster: &Cluster) -> String {
    kube.namespace
        .clone()
        .unwrap_or_else(|| cluster.default_namespace.clone())
}

/// The namespace of an object read from a file: its own, else `-n`, else the context's; its own
/// and `-n` differing is kubectl's error.
fn namespace_for_file(
    kube: &Kube,
    cluster: &Cluster,
    object: &Value,
    namespaced: bool,
) -> anyhow::Result<String> {
    if !namespaced {
        return Ok(String::new());
    }
    let own = text(object, "/metadata/namespace");
    match (&kube.namespace, own) {
        (_, "") => Ok(namespace_of(kube, cluster)),
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
/// namespace): listed as metadata, the rules' data read one by one, to be compiled by
/// `drift-engine` as the offline commands compile files.
async fn cluster_rules(cluster: &Cluster) -> anyhow::Result<Vec<RuleSource>> {
    let config_maps = collection_path("", "v1", None, "configmaps");
    let listed = cluster
        .list(&config_maps, true)
        .await
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
            .with_context(|| format!("cannot read the rule ConfigMap {namespace}/{name}"))?;
        // Deleted since the list: no longer a rule.
        let Some(mut config_map) = config_map else {
            continue;
        };
        config_map["kind"] = Value::from("ConfigMap");
        config_map["apiVersion"] = Value::from("v1");
        sources.extend(rule_source_from_config_map(&config_map, "default", None));
    }
    Ok(sources)
}

/// Which rule ConfigMaps are cluster rules, as the agent decides it: `--cluster-rule-namespaces`
/// when given, else what an agent pod's `/status` reports, else (with a warning on stderr) the
/// agent's default, its own namespace.
async fn tier_policy(cluster: &Cluster, tiers: &ClusterTiers) -> anyhow::Result<TierPolicy> {
    if let Some(policy) = &tiers.given {
        return Ok(policy.clone());
    }
    let agents = &pods::locate(cluster, &tiers.agents).await?;
    Ok(match agent_tier_policy(cluster, agents).await {
        Ok(policy) => policy,
        Err(why) => {
            eprintln!(
                "warning: {why}; assuming the agent's default: rule ConfigMaps in its namespace {:?} (--agent-namespace) are cluster rules, those elsewhere namespace rules (say which with --cluster-rule-namespaces)",
                agents.namespace
            );
            // A namespace name is a valid glob (it has none of a glob's special characters).
            TierPolicy::cluster_namespaces(&[agents.namespace.as_str()])
                .unwrap_or_else(|_| TierPolicy::all_cluster())
        }
    })
}

/// The cluster rule namespaces an agent pod's admin `/status` reports (the first running pod
/// that answers), or why none could be read.
async fn agent_tier_policy(
    cluster: &Cluster,
    agents: &pods::Located,
) -> Result<TierPolicy, String> {
    let pods = pods::agent_pods(cluster, &agents.namespace, &agents.selector)
        .await
        .map_err(|e| format!("{e:#}"))?;
    let running: Vec<_> = pods.iter().filter(|p| p.reachable()).collect();
    if running.is_empty() {
        return Err(format!(
            "no running agent pod in namespace {} matches the selector {} to read its cluster rule namespaces from",
            agents.namespace, agents.selector
        ));
    }
    let mut reasons = Vec::new();
    for pod in running {
        let answer = forward::admin_get(
            cluster,
            &agents.namespace,
            &pod.name,
            agents.port,
            "/status",
        )
        .await;
        let reason = match answer {
            Ok((200, body)) => match serde_json::from_slice::<AgentStatus>(&body) {
                Ok(AgentStatus {
                    cluster_rule_namespaces: Some(globs),
                    ..
                }) => match TierPolicy::cluster_namespaces(&globs) {
                    Ok(policy) => return Ok(policy),
                    Err(e) => format!("its cluster rule namespaces {globs:?}: {e}"),
                },
                Ok(_) => "its /status does not report the cluster rule namespaces (an older agent)"
                    .to_owned(),
                Err(e) => format!("GET /status did not answer the agent's status document ({e})"),
            },
            Ok((status, _)) => format!("GET /status answered HTTP {status}"),
            Err(e) => format!("cannot read its admin API (port {}): {e}", agents.port),
        };
        reasons.push(format!("pod {}: {reason}", pod.name));
    }
    Err(format!(
        "cannot read the agent's cluster rule namespaces: {}",
        reasons.join("; ")
    ))
}

/// The raw value of the Namespace's `drift-sentinel.k8s.io/mode` annotation.
async fn namespace_mode(cluster: &Cluster, namespace: &str) -> anyhow::Result<Option<String>> {
    if namespace.is_empty() {
        return Ok(None);
    }
    let object = cluster
        .get(&collection_path("", "v1", None, "namespaces"), namespace)
        .await
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

/// What the rules are judged with: the rules (in the agent's tiers), the namespace's mode
/// annotation and the user.
async fn judging_context(
    cluster: &Cluster,
    tiers: &ClusterTiers,
    namespace: &str,
    user_flag: Option<&str>,
) -> anyhow::Result<(RuleSet, Option<String>, String)> {
    let (rules, mode, user) = tokio::join!(
        tiered_rules(cluster, tiers),
        namespace_mode(cluster, namespace),
        user(user_flag, cluster)
    );
    Ok((rules?, mode?, user))
}

/// The cluster's rules, compiled in the agent's tiers.
pub(crate) async fn tiered_rules(
    cluster: &Cluster,
    tiers: &ClusterTiers,
) -> anyhow::Result<RuleSet> {
    let (sources, policy) = tokio::join!(cluster_rules(cluster), tier_policy(cluster, tiers));
    Ok(RuleSet::build_with(sources?, &policy?))
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

pub(crate) use resolve::kinds;

/// The names of the objects of `kind` (as kubectl names kinds) in `namespace`, for completion.
pub(crate) async fn names(
    cluster: &Cluster,
    kind: &str,
    namespace: &str,
) -> anyhow::Result<Vec<String>> {
    let resource = resolve::resolve(cluster, kind).await?;
    let listed = cluster.list(&resource.collection(namespace), true).await?;
    Ok(listed
        .iter()
        .map(|o| text(o, "/metadata/name").to_owned())
        .filter(|n| !n.is_empty())
        .collect())
}

/// Connects as the plan says; without a cluster, the hint is to work offline.
pub(crate) async fn connect(kube: &Kube) -> anyhow::Result<Cluster> {
    cluster::connect(kube, ", or work offline with --rules PATH").await
}

/// `explain KIND/NAME` (the live object) or `explain -f FILE` (the file's object), against the
/// cluster's rules.
pub(crate) async fn explain(plan: &ClusterExplain, print: Print) -> anyhow::Result<Verdict> {
    let cluster = connect(&plan.kube).await?;
    let (object, namespace) = match &plan.object {
        ObjectRef::Live { kind, name } => {
            let resource = resolve::resolve(&cluster, kind).await?;
            let namespace = if resource.namespaced {
                namespace_of(&plan.kube, &cluster)
            } else {
                String::new()
            };
            let object = fetch_live(&cluster, &resource, &namespace, name).await?;
            (object, namespace)
        }
        ObjectRef::File(path) => {
            // The object of a file, judged against the cluster's rules (not fetched).
            let mut object = files::read_object(path)?;
            let namespaced = match text(&object, "/kind") {
                "" => true,
                kind => resolve::resolve_kind(&cluster, text(&object, "/apiVersion"), kind)
                    .await?
                    .is_none_or(|r| r.namespaced),
            };
            let namespace = namespace_for_file(&plan.kube, &cluster, &object, namespaced)?;
            if namespaced {
                object["metadata"]["namespace"] = Value::from(namespace.clone());
            }
            (object, namespace)
        }
    };
    let (rules, mode, user) =
        judging_context(&cluster, &plan.tiers, &namespace, plan.user.as_deref()).await?;
    // Explaining an object is explaining an edit of it that changes nothing.
    let request = request_for(object.clone(), object, &user)
        .context("cannot read the object as a Kubernetes object")?;
    let evaluation = evaluate_update(&rules, &request, mode.as_deref());
    render::explain(print, &request, &evaluation, mode.as_deref(), &rules, &[])?;
    Ok(Verdict::Allowed)
}

/// The object to preview: the live object and what the edit makes of it.
struct Edited {
    resource: Resource,
    namespace: String,
    name: String,
    live: Value,
    edited: Value,
    /// Where the edit came from, for messages.
    origin: String,
}

/// The file's object as `kubectl apply -f` (or `kubectl replace -f`) would send it.
async fn edited_file(
    cluster: &Cluster,
    kube: &Kube,
    path: &Path,
    replace: bool,
) -> anyhow::Result<Edited> {
    let object = files::read_object(path)?;
    let origin = path.display().to_string();
    let (api_version, kind, name) = (
        text(&object, "/apiVersion"),
        text(&object, "/kind"),
        text(&object, "/metadata/name").to_owned(),
    );
    if api_version.is_empty() || kind.is_empty() || name.is_empty() {
        bail!("{origin}: the object needs apiVersion, kind and metadata.name");
    }
    let resource = resolve::resolve_kind(cluster, api_version, kind)
        .await?
        .ok_or_else(|| {
            anyhow!(
                "resource mapping not found for {kind} {name:?} from {origin}: no matches for kind {kind:?} in version {api_version:?}; ensure CRDs are installed first"
            )
        })?;
    let namespace = namespace_for_file(kube, cluster, &object, resource.namespaced)?;
    let live = fetch_live(cluster, &resource, &namespace, &name).await?;
    let edited = edited_from_file(&live, object, &resource, &namespace, replace);
    Ok(Edited {
        resource,
        namespace,
        name,
        live,
        edited,
        origin,
    })
}

/// The live object as edited in `$EDITOR`; `None` when the edit was cancelled (and said so).
async fn edited_in_editor(
    cluster: &Cluster,
    kube: &Kube,
    kind: &str,
    name: &str,
    print: Print,
) -> anyhow::Result<Option<Edited>> {
    let resource = resolve::resolve(cluster, kind).await?;
    let namespace = if resource.namespaced {
        namespace_of(kube, cluster)
    } else {
        String::new()
    };
    let live = fetch_live(cluster, &resource, &namespace, name).await?;
    let what = describe_object(&resource, &namespace, name);
    let shown = edit::cleaned(&live);
    // The editor holds the terminal until it exits: off the runtime's threads.
    let edited = tokio::task::spawn_blocking(move || edit::edit(&shown, &what))
        .await
        .context("the editor's thread failed")??;
    let edited = match edited {
        edit::Edited::Object(edited) => edited,
        edit::Edited::Cancelled(message) => {
            match print.output {
                Output::Text => println!("{message}"),
                Output::Json | Output::Yaml => eprintln!("{message}"),
            }
            return Ok(None);
        }
    };
    let edited_namespace = text(&edited, "/metadata/namespace");
    if !edited_namespace.is_empty() && edited_namespace != namespace {
        bail!(
            "the edit moved the object to namespace {edited_namespace:?}; an update keeps the namespace ({namespace:?})"
        );
    }
    Ok(Some(Edited {
        resource,
        namespace,
        name: name.to_owned(),
        live,
        edited,
        origin: "the edit".to_owned(),
    }))
}

/// `preview -f FILE` or `preview KIND/NAME` (through `$EDITOR`), with `--server-dry-run` the
/// API server's answer beside.
pub(crate) async fn preview(plan: &ClusterPreview, print: Print) -> anyhow::Result<Verdict> {
    let cluster = connect(&plan.kube).await?;
    let edited = match &plan.edit {
        Edit::File { path, replace } => edited_file(&cluster, &plan.kube, path, *replace).await?,
        Edit::Editor { kind, name } => {
            match edited_in_editor(&cluster, &plan.kube, kind, name, print).await? {
                Some(edited) => edited,
                None => return Ok(Verdict::Allowed),
            }
        }
    };
    let Edited {
        resource,
        namespace,
        name,
        mut live,
        mut edited,
        origin,
    } = edited;
    let (rules, mode, user) =
        judging_context(&cluster, &plan.tiers, &namespace, plan.user.as_deref()).await?;
    let what = describe_object(&resource, &namespace, &name);
    let mut attempts = 0;
    loop {
        let new = as_update(&live, edited.clone(), &namespace);
        let request = request_for(live.clone(), new.clone(), &user)
            .with_context(|| format!("{origin} is not an update of the live {what}"))?;
        let evaluation = evaluate_update(&rules, &request, mode.as_deref());
        let verdict = Verdict::of(&evaluation);
        let parts = render::preview_parts(
            &request,
            &evaluation,
            &rules,
            verdict,
            &Style::new(print.colour),
        );
        if !plan.server_dry_run {
            render::emit(print, &parts.document, |_| parts.screen)?;
            return Ok(verdict);
        }
        match dry_run::send(&cluster, &resource, &namespace, &name, &new).await? {
            dry_run::Sent::Answered(answer) => {
                return dry_run::report(print, verdict, parts, &answer);
            }
            // The live object changed between the read and the dry run (a controller writing
            // its status, say): judge the edit of the new version, as kubectl apply retries a
            // conflicting patch. An edit made in $EDITOR cannot be redone.
            dry_run::Sent::Conflict(message) => {
                attempts += 1;
                let Edit::File { path, replace } = &plan.edit else {
                    bail!(
                        "the server-side dry-run of {what} failed: {message}; the object changed while it was being previewed, run the preview again"
                    );
                };
                if attempts >= 5 {
                    bail!(
                        "the server-side dry-run of {what} failed: {message}; the object changed while it was being previewed, run the preview again"
                    );
                }
                live = fetch_live(&cluster, &resource, &namespace, &name).await?;
                let object = files::read_object(path)?;
                edited = edited_from_file(&live, object, &resource, &namespace, *replace);
            }
        }
    }
}

/// What `kubectl apply -f` (or, with `replace`, `kubectl replace -f`) makes of the live object.
fn edited_from_file(
    live: &Value,
    mut object: Value,
    resource: &Resource,
    namespace: &str,
    replace: bool,
) -> Value {
    if replace {
        return object;
    }
    // kubectl sets the namespace it applies to on the object: the last-applied annotation
    // names it.
    if resource.namespaced && text(&object, "/metadata/namespace").is_empty() {
        object["metadata"]["namespace"] = Value::from(namespace);
    }
    let patch = Patch::for_api_version(text(&object, "/apiVersion"));
    apply::apply(live, &object, patch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
