//! OpenReports (reference §8 "Reports"): one `openreports.io/v1alpha1` `Report` per namespace (a
//! `ClusterReport` for cluster-scoped objects) named [`REPORT_NAME`], written by server-side apply
//! with one field manager and replaced whole every run, so that an object no longer drifting
//! leaves it; reports of namespaces the run found nothing in are deleted. `results[]` holds one
//! entry per drifted object (policy and rule = rule `namespace/name`, `fail` for enforce and
//! `warn` otherwise, a [`severity`] by mode, category [`DRIFT_CATEGORY`], message = the reason,
//! properties = the drifted paths and the finding's stable `resultID`) and one `skip` entry per
//! bypassed object, `summary` counts every audited object. Messages hold absolute times only
//! and `resultID` is [`drift_engine::Audit::finding_id`]: Policy Reporter, the usual reader,
//! notifies its targets of results whose id it has not seen, so a finding must keep its id
//! from one run to the next (docs/audit.md "Policy Reporter"). A report stays under 1 MiB: past [`MAX_RESULTS`] results (or
//! [`MAX_REPORT_BYTES`]) the first ones are kept and an annotation says how many more there were.

use drift_api::events::signature::SigningKey;
use std::collections::BTreeMap;

use drift_engine::audit::AuditedObject;
use drift_engine::truncate::truncate_bytes;
use drift_engine::{Audit, rule::Mode};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::value::RawValue;
use serde_json::{Value, json};

/// The name of every report the audit writes.
pub const REPORT_NAME: &str = drift_api::events::AUDIT_REPORT_NAME;
/// The field manager of the reports.
pub const FIELD_MANAGER: &str = "drift-sentinel-audit";
/// The label that marks the audit's reports.
pub const MANAGED_BY: (&str, &str) = drift_api::events::AUDIT_REPORT_LABEL;
/// The annotation that says how many results were left out.
pub const OMITTED_ANNOTATION: &str = "drift-sentinel.k8s.io/omitted-results";
pub const MAX_RESULTS: usize = 500;
/// Results are kept while the report stays below this size (the API server's limit is ~1.5 MiB;
/// the reference's 1 MiB with room for metadata and summary).
pub const MAX_REPORT_BYTES: usize = 900 * 1024;
const MAX_MESSAGE_BYTES: usize = 1024;
const MAX_PATHS_BYTES: usize = 1024;
pub const GROUP: &str = "openreports.io";
/// The `category` of a drift result, and of a bypass result.
pub const DRIFT_CATEGORY: &str = "Drift";
pub const BYPASS_CATEGORY: &str = "Bypass";
/// The key of a result's stable id in its `properties`, as Policy Reporter reads it.
pub const RESULT_ID_PROPERTY: &str = "resultID";

/// The `severity` of a drift result, by the effective mode: how much the rule's owner asked
/// for it to matter. `enforce` (an edit of it would be denied) is `high`, `warn` `medium`,
/// `dry-run` (only recorded) `low`; `critical` is left to the operator's own tooling. A
/// bypassed object is `info`: it is listed to be seen, not a failure.
pub fn severity(mode: Mode) -> &'static str {
    match mode {
        Mode::Enforce => "high",
        Mode::Warn => "medium",
        Mode::DryRun => "low",
        Mode::Off => "info",
    }
}
pub const VERSION: &str = "v1alpha1";
/// Reports read a page when the audit reads back what they remember.
const REMEMBERED_PAGE: u32 = 10;

/// One namespace's report, as the run builds it.
#[derive(Debug, Default)]
struct Pending {
    pass: u64,
    fail: u64,
    warn: u64,
    skip: u64,
    /// Kept as text: a result is held until the run ends, and a document of it takes several
    /// times its text's size (at 100,000 objects, 1 % drifted, that was 4 of the run's 22 MiB).
    results: Vec<Box<RawValue>>,
    bytes: usize,
    omitted: u64,
}

impl Pending {
    /// Keeps a result while the report stays under its bounds; counts it as omitted otherwise.
    fn push(&mut self, entry: Value) {
        // Written once, straight into text (a document always serializes; were it refused,
        // the result would be counted out).
        let Ok(raw) = serde_json::value::to_raw_value(&entry) else {
            self.omitted += 1;
            return;
        };
        let size = raw.get().len();
        if self.results.len() >= MAX_RESULTS || self.bytes + size > MAX_REPORT_BYTES {
            self.omitted += 1;
            return;
        }
        self.bytes += size;
        self.results.push(raw);
    }
}

/// The reports of one run.
#[derive(Debug, Default)]
pub struct Reports {
    by_namespace: BTreeMap<String, Pending>,
    /// Signs the memory properties (`--record-signing-key`): read back only when signed.
    signing_key: Option<std::sync::Arc<SigningKey>>,
}

impl Reports {
    pub fn signed_with(signing_key: Option<std::sync::Arc<SigningKey>>) -> Self {
        Self {
            by_namespace: BTreeMap::new(),
            signing_key,
        }
    }

    /// Sets a result's memory property `name` and its signature over the object's `uid`.
    fn remember(key: Option<&SigningKey>, entry: &mut Value, name: &str, uid: &str, text: &str) {
        for (name, text) in drift_api::events::signed_property(key, name, uid, text) {
            entry["properties"][name] = Value::String(text);
        }
    }

    /// Counts an audited object and, when it drifted, adds its result.
    pub fn add(
        &mut self,
        namespace: &str,
        object: &Value,
        audit: &Audit<'_>,
        who: &drift_engine::who::Attributions,
        seconds: i64,
    ) {
        let key = self.signing_key.clone();
        let pending = self.by_namespace.entry(namespace.to_owned()).or_default();
        let identity = AuditedObject::of(object, "");
        let resources = json!([{
            "apiVersion": identity.api_version,
            "kind": identity.kind,
            "namespace": identity.namespace,
            "name": identity.name,
            "uid": identity.uid,
        }]);
        let result_id = audit.finding_id(&identity).unwrap_or_default();
        let (Some(drift), Some(rule)) = (audit.drift(), audit.rule()) else {
            match audit.result_label() {
                "skipped" | "no_baseline" => pending.skip += 1,
                _ => pending.pass += 1,
            }
            // A bypassed object is listed (a `skip` result), so that a forgotten bypass is
            // seen where the drift would be (reference §8 step 1).
            if let (Some(finding), Some(rule)) = (audit.honoured_bypass(), audit.rule()) {
                let mut entry = json!({
                    "source": "drift-sentinel",
                    "policy": rule.id.to_string(),
                    "rule": rule.id.to_string(),
                    "result": "skip",
                    "scored": false,
                    "severity": "info",
                    "category": BYPASS_CATEGORY,
                    "message": truncate_bytes(&finding.to_string(), MAX_MESSAGE_BYTES),
                    "properties": {
                        RESULT_ID_PROPERTY: result_id,
                        "bypassEnd": finding.end_time().map(drift_engine::time::format_rfc3339_seconds).unwrap_or_else(|| "none".to_owned()),
                        "bypassSetBy": finding.set_by.as_ref().map(|e| e.to_string()).unwrap_or_default(),
                        "mode": audit.mode().map_or("", |m| m.as_str()),
                    },
                    "resources": resources,
                    "timestamp": {"seconds": seconds, "nanos": 0},
                });
                // Who set it, for a restarted audit and the plugin once the record expires.
                if let Some(setter) = finding
                    .setter()
                    .and_then(|s| drift_api::events::bypass_setter_text(&s))
                {
                    Self::remember(
                        key.as_deref(),
                        &mut entry,
                        drift_api::events::BYPASS_SETTER_PROPERTY,
                        identity.uid,
                        &setter,
                    );
                }
                pending.push(entry);
            }
            return;
        };
        let result = if audit.mode() == Some(Mode::Enforce) {
            pending.fail += 1;
            "fail"
        } else {
            pending.warn += 1;
            "warn"
        };
        // Who changed the drifted fields imperatively (managers, not users: §8 step 3).
        let mut changed_by: Vec<String> = Vec::new();
        for change in audit.changes().iter().filter(|c| !c.mutable) {
            if let Some(edit) = &change.edit {
                let who = edit.to_string();
                if !changed_by.contains(&who) {
                    changed_by.push(who);
                }
            }
        }
        let mut entry = json!({
            "source": "drift-sentinel",
            "policy": rule.id.to_string(),
            "rule": rule.id.to_string(),
            "result": result,
            "scored": true,
            "severity": audit.mode().map_or("info", severity),
            "category": DRIFT_CATEGORY,
            "message": truncate_bytes(&audit.reason(), MAX_MESSAGE_BYTES),
            "properties": {
                RESULT_ID_PROPERTY: result_id,
                "paths": truncate_bytes(&drift.denied.join(", "), MAX_PATHS_BYTES),
                "mode": audit.mode().map_or("", |m| m.as_str()),
                "changedBy": truncate_bytes(&changed_by.join("; "), MAX_PATHS_BYTES),
                // Who made the drifted fields and why it got through (reference §8 "Who and why").
                "who": truncate_bytes(
                    &who.fields.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "),
                    MAX_PATHS_BYTES,
                ),
            },
            "resources": resources,
            "timestamp": {"seconds": seconds, "nanos": 0},
        });
        // What was attributed from records, with the values it is about: what a restarted
        // audit and the plugin remember once the records' Events expire.
        if let Some(recorded) = drift_api::events::who_recorded_property(&who.recorded) {
            Self::remember(
                key.as_deref(),
                &mut entry,
                drift_api::events::WHO_RECORDED_PROPERTY,
                identity.uid,
                &recorded,
            );
        }
        pending.push(entry);
    }

    /// The report documents of the run: `(namespace, document)`, `""` for the ClusterReport.
    pub fn documents(&self) -> impl Iterator<Item = (&str, Value)> {
        self.by_namespace.iter().map(|(namespace, p)| {
            let cluster = namespace.is_empty();
            let mut metadata = json!({
                "name": REPORT_NAME,
                "labels": {MANAGED_BY.0: MANAGED_BY.1},
                "annotations": {OMITTED_ANNOTATION: p.omitted.to_string()},
            });
            if !cluster {
                metadata["namespace"] = json!(namespace);
            }
            let document = json!({
                "apiVersion": format!("{GROUP}/{VERSION}"),
                "kind": if cluster { "ClusterReport" } else { "Report" },
                "metadata": metadata,
                "source": "drift-sentinel",
                "summary": {"pass": p.pass, "fail": p.fail, "warn": p.warn, "error": 0, "skip": p.skip},
                "results": p.results,
            });
            (namespace.as_str(), document)
        })
    }
}

fn api_resource(cluster: bool) -> ApiResource {
    let (kind, plural) = if cluster {
        ("ClusterReport", "clusterreports")
    } else {
        ("Report", "reports")
    };
    ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Whether the OpenReports CRDs are served.
pub async fn installed(client: &kube::Client) -> bool {
    kube::discovery::group(client, GROUP).await.is_ok()
}

/// What the audit's Reports (and ClusterReport) remember of what earlier runs attributed
/// ([`drift_engine::who::Memory::of_reports`]): read once when the audit starts, so that a
/// restart does not forget users whose Events have expired. With it, how many properties did not
/// verify.
pub async fn remembered(
    client: &kube::Client,
    verification: &drift_api::events::signature::Verification,
) -> anyhow::Result<(drift_engine::who::Memory, usize)> {
    let selector = format!("{}={}", MANAGED_BY.0, MANAGED_BY.1);
    let mut reader = drift_engine::who::ReportReader::new(verification.clone());
    for cluster in [false, true] {
        let resource = api_resource(cluster);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        // Few reports a page: each may be near 1 MiB.
        let mut pages = drift_api::paging::Pages::new(REMEMBERED_PAGE);
        while let Some(params) = pages.next_params()
            && !reader.is_full()
        {
            let page = api
                .list(&params.labels(&selector))
                .await
                .map_err(|e| anyhow::anyhow!("cannot list the audit's {}: {e}", resource.plural))?;
            let reports = page
                .items
                .iter()
                .map(serde_json::to_value)
                .collect::<Result<Vec<_>, _>>()?;
            reader.add_page(&reports);
            pages.answered(page.metadata.continue_.as_deref());
        }
    }
    super::trust::warn_unverified(
        drift_api::status::SignedSource::Report,
        reader.unverified(),
        verification,
    );
    let unverified = reader.unverified();
    Ok((reader.into_memory(), unverified))
}

/// Applies every report of the run and deletes the audit's reports of namespaces it no longer
/// has one for. Returns how many were written.
pub async fn publish(client: &kube::Client, reports: &Reports) -> anyhow::Result<usize> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut written = 0;
    for (namespace, document) in reports.documents() {
        let cluster = namespace.is_empty();
        let resource = api_resource(cluster);
        let api: Api<DynamicObject> = if cluster {
            Api::all_with(client.clone(), &resource)
        } else {
            Api::namespaced_with(client.clone(), namespace, &resource)
        };
        api.patch(REPORT_NAME, &params, &Patch::Apply(&document))
            .await
            .map_err(|e| anyhow::anyhow!("cannot apply the report of {namespace:?}: {e}"))?;
        written += 1;
    }
    let selector = format!("{}={}", MANAGED_BY.0, MANAGED_BY.1);
    for cluster in [false, true] {
        let resource = api_resource(cluster);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let listed = api
            .list_metadata(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| anyhow::anyhow!("cannot list the audit's reports: {e}"))?;
        for item in listed.items {
            let namespace = item.metadata.namespace.clone().unwrap_or_default();
            if reports.by_namespace.contains_key(&namespace) {
                continue;
            }
            let name = item.metadata.name.clone().unwrap_or_default();
            let target: Api<DynamicObject> = if cluster {
                Api::all_with(client.clone(), &resource)
            } else {
                Api::namespaced_with(client.clone(), &namespace, &resource)
            };
            if let Err(e) = target.delete(&name, &DeleteParams::default()).await {
                tracing::warn!(namespace, name, error = %e, "cannot delete a stale audit report");
            }
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use drift_engine::{AuditContext, Detail, RuleSet};

    #[test]
    fn results_are_bounded_and_counted() {
        let rules = RuleSet::build(drift_engine::manifests::rule_sources(
            &drift_engine::manifests::parse_documents(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: r, namespace: ops, annotations: {drift-sentinel.k8s.io/rule: 'true'}}\ndata:\n  spec: |\n    mode: warn\n    namespaces: ['*']\n    selectors: [{apiGroup: apps, kind: Deployment}]\n",
                "r.yaml",
            )
            .unwrap(),
            "r.yaml",
        ));
        let managers: Vec<String> = vec!["kubectl-set".into()];
        let mut reports = Reports::default();
        for i in 0..1200 {
            let object = json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": format!("d{i}"), "namespace": "shop", "labels": {"x": "y"},
                    "annotations": {"kubectl.kubernetes.io/last-applied-configuration":
                        "{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"spec\":{\"replicas\":1}}"}},
                "spec": {"replicas": if i % 2 == 0 { 2 } else { 1 }}
            });
            let audit = drift_engine::audit(
                &rules,
                &object,
                &AuditContext {
                    namespace_mode: None,
                    drift_managers: &managers,
                    now: std::time::SystemTime::UNIX_EPOCH,
                },
                Detail::Verdict,
            );
            reports.add(
                "shop",
                &object,
                &audit,
                &drift_engine::who::Attributions::default(),
                1_800_000_000,
            );
        }
        let (namespace, document) = reports.documents().next().unwrap();
        assert_eq!(namespace, "shop");
        assert_eq!(document["kind"], "Report");
        assert_eq!(document["summary"]["warn"], 600);
        assert_eq!(document["summary"]["pass"], 600);
        assert_eq!(document["results"].as_array().unwrap().len(), MAX_RESULTS);
        assert_eq!(
            document["metadata"]["annotations"][OMITTED_ANNOTATION],
            "100"
        );
        let first = &document["results"][0];
        assert_eq!(first["policy"], "ops/r");
        assert_eq!(first["result"], "warn");
        assert_eq!(first["properties"]["paths"], "spec.replicas");
        assert!(document.to_string().len() < 1024 * 1024);

        // Cluster-scoped objects go to the ClusterReport, which has no namespace.
        let mut cluster = Reports::default();
        let namespace_object =
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}});
        let audit = drift_engine::audit(
            &rules,
            &namespace_object,
            &AuditContext {
                namespace_mode: None,
                drift_managers: &managers,
                now: std::time::SystemTime::UNIX_EPOCH,
            },
            Detail::Verdict,
        );
        cluster.add("", &json!({}), &audit, &Default::default(), 0);
        let (namespace, document) = cluster.documents().next().unwrap();
        assert_eq!(
            (namespace, &document["kind"]),
            ("", &json!("ClusterReport"))
        );
        assert!(document["metadata"].get("namespace").is_none());
        assert_eq!(document["summary"]["skip"], 1);
    }

    /// The rule `ops/r` for every Deployment, in `mode`.
    fn rule_ops_r(mode: &str) -> RuleSet {
        RuleSet::build([drift_engine::RuleSource {
            id: drift_engine::RuleId {
                namespace: "ops".into(),
                name: "r".into(),
            },
            spec: drift_engine::SpecText::Yaml(format!(
                "mode: {mode}\nnamespaces: ['*']\nselectors: [{{apiGroup: apps, kind: Deployment}}]\n"
            )),
            origin: None,
        }])
    }

    #[test]
    fn a_bypassed_object_is_a_skip_result() {
        let rule = rule_ops_r("enforce");
        let object = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "uid": "u",
                "annotations": {"drift-sentinel.k8s.io/bypass": "2026-12-04T16:00:00Z"}}});
        let now = drift_engine::time::parse_rfc3339("2026-12-04T12:00:00Z").unwrap();
        let audit = drift_engine::audit(
            &rule,
            &object,
            &AuditContext {
                namespace_mode: None,
                drift_managers: &[],
                now,
            },
            Detail::Verdict,
        );
        let mut reports = Reports::default();
        reports.add("shop", &object, &audit, &Default::default(), 0);
        let (_, document) = reports.documents().next().unwrap();
        assert_eq!(document["summary"]["skip"], 1);
        let result = &document["results"][0];
        assert_eq!(result["result"], "skip");
        assert_eq!(result["policy"], "ops/r");
        assert_eq!(result["message"], "bypass until 2026-12-04T16:00:00Z");
        assert_eq!(result["properties"]["bypassEnd"], "2026-12-04T16:00:00Z");
        assert_eq!(result["resources"][0]["name"], "web");
        assert_eq!(
            (&result["rule"], &result["severity"], &result["category"]),
            (&json!("ops/r"), &json!("info"), &json!(BYPASS_CATEGORY))
        );
        assert_eq!(
            result["properties"][RESULT_ID_PROPERTY]
                .as_str()
                .map(str::len),
            Some(32)
        );
    }

    #[test]
    fn what_was_attributed_from_records_is_read_back_from_the_report() {
        let rules = rule_ops_r("warn");
        let object = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "uid": "u-web",
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration":
                    "{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"spec\":{\"replicas\":1}}"}},
            "spec": {"replicas": 3}});
        let audit = drift_engine::audit(
            &rules,
            &object,
            &AuditContext {
                namespace_mode: None,
                drift_managers: &[],
                now: std::time::SystemTime::UNIX_EPOCH,
            },
            Detail::Verdict,
        );
        let attribution = drift_api::events::Attribution {
            user: Some("alice".into()),
            why: drift_api::events::Why::WarnMode,
            rule: Some("ops/r".into()),
            seen: Some("2026-12-04T12:00:00.000000Z".into()),
        };
        let recorded = drift_api::events::Remembered {
            path: "spec.replicas".into(),
            value: drift_engine::attribution::fingerprint(Some(&json!(3))).unwrap(),
            attribution: attribution.clone(),
        };
        let who = drift_engine::who::Attributions {
            fields: vec![drift_api::events::FieldAttribution {
                path: "spec.replicas".into(),
                attribution,
            }],
            recorded: vec![recorded.clone()],
        };
        let key = drift_api::events::signature::signing_key_of_seed(&[3; 32]).unwrap();
        let verification = drift_api::events::signature::Verification::of_key(key.verifying_key());
        let mut reports = Reports::signed_with(Some(std::sync::Arc::new(key)));
        reports.add("shop", &object, &audit, &who, 0);
        let (_, document) = reports.documents().next().unwrap();
        let properties = &document["results"][0]["properties"];
        assert_eq!(properties["who"], "spec.replicas: user alice, warn mode");
        let memory = drift_engine::who::Memory::of_reports([&document], &verification);
        assert_eq!(memory.fields["u-web"], vec![recorded.clone()]);
        // Unsigned (no key): written, and not read back.
        let mut reports = Reports::default();
        reports.add("shop", &object, &audit, &who, 0);
        let (_, document) = reports.documents().next().unwrap();
        let memory = drift_engine::who::Memory::of_reports([&document], &verification);
        assert!(memory.fields.is_empty());
        // Nothing recorded: no property (the map holds strings only).
        let mut reports = Reports::default();
        reports.add("shop", &object, &audit, &Default::default(), 0);
        let (_, document) = reports.documents().next().unwrap();
        assert!(
            document["results"][0]["properties"]
                .get(drift_api::events::WHO_RECORDED_PROPERTY)
                .is_none()
        );
    }

    #[test]
    fn severity_by_mode() {
        let table = [
            (Mode::Enforce, "high"),
            (Mode::Warn, "medium"),
            (Mode::DryRun, "low"),
            (Mode::Off, "info"),
        ];
        for (mode, want) in table {
            assert_eq!(severity(mode), want, "{mode:?}");
        }
    }

    /// One drifted object under an expired bypass, reported by two runs ten minutes apart: the
    /// same result, field for field but the timestamp (its message holds no relative time, its
    /// `resultID` is the finding's); another object, another `resultID`. Every result has what
    /// Policy Reporter reads: policy, rule, result, severity, category, message, properties.
    #[test]
    fn a_finding_is_the_same_result_on_every_run() {
        let rules = rule_ops_r("dry-run");
        let object = |name: &str| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}"),
                    "annotations": {"drift-sentinel.k8s.io/bypass": "2026-12-04T11:00:00Z",
                        "kubectl.kubernetes.io/last-applied-configuration":
                            "{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"spec\":{\"replicas\":1}}"}},
                "spec": {"replicas": 3}})
        };
        let result = |object: &Value, now: &str, seconds: i64| {
            let now = drift_engine::time::parse_rfc3339(now).unwrap();
            let context = AuditContext {
                namespace_mode: None,
                drift_managers: &[],
                now,
            };
            let audit = drift_engine::audit(&rules, object, &context, Detail::Verdict);
            let mut reports = Reports::default();
            reports.add("shop", object, &audit, &Default::default(), seconds);
            let (_, document) = reports.documents().next().unwrap();
            document["results"][0].clone()
        };
        let web = object("web");
        let mut first = result(&web, "2026-12-04T12:00:00Z", 1);
        let mut second = result(&web, "2026-12-04T12:10:04Z", 2);
        assert_eq!(first["result"], "warn");
        assert_eq!(first["severity"], "low");
        assert_eq!(first["category"], DRIFT_CATEGORY);
        assert_eq!(first["rule"], "ops/r");
        assert_eq!(first["policy"], "ops/r");
        assert_eq!(first["properties"]["paths"], "spec.replicas");
        let message = first["message"].as_str().unwrap();
        assert!(
            message.contains("is no bypass: its end 2026-12-04T11:00:00Z has passed;")
                && !message.contains(" ago"),
            "{message}"
        );
        for result in [&mut first, &mut second] {
            result.as_object_mut().unwrap().remove("timestamp");
        }
        assert_eq!(first, second);
        let other = result(&object("api"), "2026-12-04T12:00:00Z", 1);
        assert_ne!(
            other["properties"][RESULT_ID_PROPERTY],
            first["properties"][RESULT_ID_PROPERTY]
        );
    }
}
