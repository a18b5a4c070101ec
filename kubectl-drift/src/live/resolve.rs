//! Kinds named the way kubectl names them, resolved through the API server's discovery
//! documents (`/api`, `/apis`, `/api/VERSION`, `/apis/GROUP/VERSION`): a resource's plural
//! (`deployments`), singular (`deployment`), kind (`Deployment`) or short name (`deploy`, `sts`,
//! `ro`), optionally qualified by its group (`deployment.apps`, `rollouts.argoproj.io`) or by
//! version and group (`deployments.v1.apps`); case-insensitive.
//!
//! kube-rs's `Discovery` keeps neither short names nor singular names, so the APIResourceLists
//! are read with the kube client's own discovery requests and matched here.

use anyhow::{Context as _, bail};
use futures::future::join_all;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;

use crate::cluster::{Cluster, collection_path};

/// A resource the API server serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resource {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
}

impl Resource {
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// As kubectl names it in messages: `deployments.apps`, `configmaps`.
    pub(crate) fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The URL path of the collection holding the object in `namespace` (ignored for
    /// cluster-scoped resources).
    pub(crate) fn collection(&self, namespace: &str) -> String {
        collection_path(
            &self.group,
            &self.version,
            self.namespaced.then_some(namespace),
            &self.plural,
        )
    }

    fn from_api(group: &str, version: &str, resource: &APIResource) -> Self {
        Self {
            group: resource.group.clone().unwrap_or_else(|| group.to_owned()),
            version: resource
                .version
                .clone()
                .unwrap_or_else(|| version.to_owned()),
            kind: resource.kind.clone(),
            plural: resource.name.clone(),
            namespaced: resource.namespaced,
        }
    }
}

/// One served resource, in discovery order: the core group first, then the groups as `/apis`
/// lists them, the preferred version of a group before its others.
struct Entry {
    group: String,
    version: String,
    resource: APIResource,
}

impl Entry {
    fn names_it(&self, name: &str) -> bool {
        let kind = self.resource.kind.to_lowercase();
        let singular = if self.resource.singular_name.is_empty() {
            &kind
        } else {
            &self.resource.singular_name
        };
        self.resource.name.eq_ignore_ascii_case(name)
            || singular.eq_ignore_ascii_case(name)
            || kind == name
    }

    fn short_named(&self, name: &str) -> bool {
        self.resource
            .short_names
            .iter()
            .flatten()
            .any(|s| s.eq_ignore_ascii_case(name))
    }
}

/// Every resource the API server serves (not subresources). A group whose list cannot be read
/// is left out, as kubectl leaves it out (an unavailable aggregated API must not break the
/// others).
async fn discover(cluster: &Cluster) -> anyhow::Result<Vec<Entry>> {
    let client = &cluster.client;
    let (core, groups) = tokio::join!(
        cluster.timed(client.list_core_api_versions()),
        cluster.timed(client.list_api_groups())
    );
    let core = core
        .with_context(|| format!("cannot read the API discovery of {} (/api)", cluster.server))?;
    let groups = groups.with_context(|| {
        format!(
            "cannot read the API discovery of {} (/apis)",
            cluster.server
        )
    })?;
    let mut versions: Vec<(String, String)> = core
        .versions
        .iter()
        .map(|v| (String::new(), v.clone()))
        .collect();
    for group in &groups.groups {
        let preferred = group
            .preferred_version
            .as_ref()
            .or_else(|| group.versions.first())
            .map(|v| v.version.clone());
        versions.extend(preferred.iter().map(|v| (group.name.clone(), v.clone())));
        versions.extend(
            group
                .versions
                .iter()
                .filter(|v| Some(&v.version) != preferred.as_ref())
                .map(|v| (group.name.clone(), v.version.clone())),
        );
    }
    let lists = join_all(versions.iter().map(|(group, version)| async move {
        if group.is_empty() {
            cluster.timed(client.list_core_api_resources(version)).await
        } else {
            let group_version = format!("{group}/{version}");
            cluster
                .timed(client.list_api_group_resources(&group_version))
                .await
        }
    }))
    .await;
    let mut entries = Vec::new();
    for ((group, version), list) in versions.into_iter().zip(lists) {
        let Ok(list) = list else { continue };
        entries.extend(
            list.resources
                .into_iter()
                .filter(|r| !r.name.contains('/'))
                .map(|resource| Entry {
                    group: group.clone(),
                    version: version.clone(),
                    resource,
                }),
        );
    }
    Ok(entries)
}

/// The resources that can be listed, as kubectl completes them: plural names, first seen
/// first (the preferred version of a group).
pub(crate) async fn kinds(cluster: &Cluster) -> anyhow::Result<Vec<String>> {
    let mut seen = std::collections::BTreeSet::new();
    Ok(discover(cluster)
        .await?
        .into_iter()
        .filter(|e| e.resource.verbs.iter().any(|v| v == "list"))
        .map(|e| e.resource.name)
        .filter(|name| seen.insert(name.clone()))
        .collect())
}

/// Every resource that can be listed, in the version discovery recommends: for each group and
/// resource the first version seen (a group's preferred version first), as the agent's audit
/// resolves the kinds its rules select.
pub(crate) async fn listable(cluster: &Cluster) -> anyhow::Result<Vec<Resource>> {
    let mut seen = std::collections::BTreeSet::new();
    Ok(discover(cluster)
        .await?
        .into_iter()
        .filter(|e| e.resource.verbs.iter().any(|v| v == "list"))
        .filter(|e| seen.insert((e.group.clone(), e.resource.name.clone())))
        .map(|e| Resource::from_api(&e.group, &e.version, &e.resource))
        .collect())
}

/// What an argument can mean, in the order kubectl tries: `resource.version.group` (two dots
/// or more), `resource.group` (a dot), `resource`.
fn readings(argument: &str) -> Vec<(&str, Option<&str>, Option<&str>)> {
    let mut readings = Vec::new();
    let parts: Vec<&str> = argument.splitn(3, '.').collect();
    if let [resource, version, group] = parts.as_slice() {
        readings.push((*resource, Some(*version), Some(*group)));
    }
    match argument.split_once('.') {
        Some((resource, group)) => readings.push((resource, None, Some(group))),
        None => readings.push((argument, None, None)),
    }
    readings
}

/// The resource `argument` names (`deploy`, `deployment.apps`, `deployments.v1.apps`, `sts`,
/// `ro`, …); an unknown one is kubectl's error.
pub(crate) async fn resolve(cluster: &Cluster, argument: &str) -> anyhow::Result<Resource> {
    let wanted = argument.to_lowercase();
    let entries = discover(cluster).await?;
    for (name, version, group) in readings(&wanted) {
        let fits = |e: &&Entry| {
            group.is_none_or(|g| e.group.eq_ignore_ascii_case(g))
                && version.is_none_or(|v| e.version.eq_ignore_ascii_case(v))
        };
        // Names first, then short names: a short name never hides a resource's own name.
        let found = entries
            .iter()
            .filter(fits)
            .find(|e| e.names_it(name))
            .or_else(|| entries.iter().filter(fits).find(|e| e.short_named(name)));
        if let Some(entry) = found {
            return Ok(Resource::from_api(
                &entry.group,
                &entry.version,
                &entry.resource,
            ));
        }
    }
    bail!("the server doesn't have a resource type {argument:?}")
}

/// The resource `kind` names ([`resolve`]) and the namespace of its object named on the
/// command line: `--namespace`, else the kubeconfig context's; empty for a cluster-scoped kind.
pub(crate) async fn resolve_target(
    cluster: &Cluster,
    kind: &str,
    namespace: Option<&str>,
) -> anyhow::Result<(Resource, String)> {
    let resource = resolve(cluster, kind).await?;
    let namespace = if resource.namespaced {
        namespace.map_or_else(|| cluster.default_namespace.clone(), str::to_owned)
    } else {
        String::new()
    };
    Ok((resource, namespace))
}

/// The resource of objects of `api_version` and `kind` (from a manifest), reading only that
/// group version's list.
pub(crate) async fn resolve_kind(
    cluster: &Cluster,
    api_version: &str,
    kind: &str,
) -> anyhow::Result<Option<Resource>> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let client = &cluster.client;
    let list = if group.is_empty() {
        cluster.timed(client.list_core_api_resources(version)).await
    } else {
        cluster
            .timed(client.list_api_group_resources(api_version))
            .await
    };
    let list = match list {
        Ok(list) => list,
        Err(e) if e.code() == Some(404) => return Ok(None),
        Err(e) => {
            return Err(e).with_context(|| {
                format!(
                    "cannot read the API discovery of {} for {api_version}",
                    cluster.server
                )
            });
        }
    };
    Ok(list
        .resources
        .iter()
        .find(|r| !r.name.contains('/') && r.kind == kind)
        .map(|r| Resource::from_api(group, version, r)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_follow_kubectl() {
        assert_eq!(readings("deploy"), [("deploy", None, None)]);
        assert_eq!(
            readings("deployment.apps"),
            [("deployment", None, Some("apps"))]
        );
        assert_eq!(
            readings("deployments.v1.apps"),
            [
                ("deployments", Some("v1"), Some("apps")),
                ("deployments", None, Some("v1.apps"))
            ]
        );
        assert_eq!(
            readings("rollouts.argoproj.io"),
            [
                ("rollouts", Some("argoproj"), Some("io")),
                ("rollouts", None, Some("argoproj.io"))
            ]
        );
    }
}
