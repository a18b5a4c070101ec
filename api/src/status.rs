//! The admin `/status` document of an agent (loopback only, read through `kubectl
//! port-forward` by `kubectl drift status`): readiness, where the rules come from, the rules
//! loaded and the invalid ones with their reasons, source errors, and the export's state.

use serde::{Deserialize, Serialize};

use crate::connection::PodConnectionStatus;

/// `GET /status`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentStatus {
    /// Whether the agent answers `/readyz` with 200.
    pub ready: bool,
    /// Where the rules come from.
    pub source: RuleSourceKind,
    /// When the rule set in force was built (RFC 3339).
    pub loaded_at: String,
    pub rules_loaded: usize,
    pub rules_invalid: usize,
    /// The rules in force, in priority order.
    #[serde(default)]
    pub rules: Vec<LoadedRule>,
    /// Rules that are not applied, and why.
    #[serde(default)]
    pub invalid_rules: Vec<InvalidRule>,
    /// Problems with a source as a whole (a file that cannot be read or parsed).
    #[serde(default)]
    pub source_errors: Vec<SourceError>,
    /// Rule sources whose last loaded rules are kept because what they hold now cannot be
    /// loaded (a file being rewritten, empty, or no longer parsing).
    #[serde(default)]
    pub stale_sources: Vec<StaleSource>,
    /// Rules served in their last valid version (reference §2 "Last good version kept").
    #[serde(default)]
    pub stale_rules: Vec<StaleRule>,
    /// The namespaces (globs) whose rule ConfigMaps are cluster rules (reference §2 "Who may write a
    /// rule"): the agent's `--cluster-rule-namespaces`, by default its own namespace; `["*"]`
    /// when every rule is a cluster rule (offline files). `None` from an agent that predates
    /// it. `kubectl drift explain` and `preview` build the rules with the same tiers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_rule_namespaces: Option<Vec<String>>,
    pub namespaces_known: usize,
    pub export: ExportState,
    /// The audit process only: its last run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<AuditRun>,
    /// The audit process run periodically: seconds between the starts of two runs
    /// (`--audit-interval`); present from startup, before the first run ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_interval_seconds: Option<f64>,
    /// Cluster mode with `--events`: whether the records are signed, and (the webhook) whether
    /// its public key is published (reference §8 "Trust"). `None` from an agent that predates it
    /// or writes and reads no records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_signing: Option<RecordSigning>,
}

/// Whether the agent signs (the webhook) or verifies (the audit) the records with the
/// installation's key (`--record-signing-key`, reference §8 "Trust").
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordSigning {
    /// Whether the agent runs with `--record-signing-key`.
    pub signed: bool,
    /// The webhook only: its public key's publication in the record key ConfigMap, where
    /// `kubectl drift audit|blame` read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<KeyPublication>,
}

/// The most bytes of an error `/status` carries about the public key's publication.
pub const MAX_PUBLICATION_ERROR_BYTES: usize = 512;

/// The webhook's publication of the public key (retried in the background until it succeeds).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyPublication {
    pub state: PublicationState,
    /// `namespace/name` of the ConfigMap.
    pub config_map: String,
    /// Attempts so far.
    pub attempts: u32,
    /// When it was published, or last tried (RFC 3339); absent before the first attempt ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// `failing`: the last attempt's error (at most [`MAX_PUBLICATION_ERROR_BYTES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PublicationState {
    /// Not tried yet, or the first attempt has not ended.
    #[default]
    Pending,
    Published,
    /// The last attempt failed; tried again (5 s doubling up to 5 minutes).
    Failing,
}

impl RecordSigning {
    /// What an operator is told of it, when it is not as it should be: records unsigned, or the
    /// public key not (yet) published; `None` when the records are signed and the key published.
    /// `audit`: the audit's status (it verifies, publishes nothing).
    pub fn concern(&self, audit: bool) -> Option<String> {
        if !self.signed {
            return Some(if audit {
                "no --record-signing-key: the webhook's records and the audit's memory cannot be verified, so the audit names no user from them".to_owned()
            } else {
                "no --record-signing-key: records are written unsigned; the audit names no user from them".to_owned()
            });
        }
        let publication = self.public_key.as_ref()?;
        match publication.state {
            PublicationState::Published => None,
            PublicationState::Pending => Some(format!(
                "the record key's public half is not published yet in ConfigMap {}: kubectl drift audit|blame name no user until it is",
                publication.config_map
            )),
            PublicationState::Failing => Some(format!(
                "cannot publish the record key's public half in ConfigMap {} ({} attempts, retried): {}; kubectl drift audit|blame name no user until it is",
                publication.config_map,
                publication.attempts,
                publication.last_error.as_deref().unwrap_or("unknown error")
            )),
        }
    }
}

/// What an audit run read of the webhook's records, and what the audit process read back of its
/// memory, and what of each did not verify (reference §8 "Trust").
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvidence {
    /// The run's read of the webhook's records (`unverified`: no user is named from them;
    /// `error`: no user is named this run).
    pub records: SignedRead,
    /// The last read of each memory (Reports, `DriftDetected` and `Bypassed` Events) since the
    /// process started: read once, retried each run until it can be.
    #[serde(default)]
    pub memory: Vec<MemoryRead>,
}

/// One read of what must carry the installation's signature: the webhook's records, or a memory.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignedRead {
    /// Items read: valid records (signed or not), or remembered entries read back.
    pub read: u64,
    /// Items that did not verify: records no user is named from, entries not read back.
    pub unverified: u64,
    /// Why they did not verify, when some did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unverified_why: Option<String>,
    /// Why nothing could be read (bounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One read of the audit's memory from `source` (`report` or `event-memory`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryRead {
    pub source: SignedSource,
    #[serde(flatten)]
    pub outcome: SignedRead,
}

impl AuditEvidence {
    /// What did not verify, by source: the `drift_sentinel_audit_unverified_records` gauge (every
    /// source, 0 when nothing of it was read).
    pub fn unverified_by_source(&self) -> [(SignedSource, u64); 3] {
        SignedSource::ALL.map(|source| {
            let count = match source {
                SignedSource::Record => self.records.unverified,
                memory => self
                    .memory
                    .iter()
                    .filter(|m| m.source == memory)
                    .map(|m| m.outcome.unverified)
                    .sum(),
            };
            (source, count)
        })
    }

    /// One line per read that did not go as it should (an error, or items that did not
    /// verify), as `kubectl drift status` warns.
    pub fn concerns(&self) -> Vec<String> {
        let mut out = Vec::new();
        let r = &self.records;
        if let Some(error) = &r.error {
            out.push(format!("the webhook's records could not be read: {error}"));
        }
        if r.unverified > 0 {
            out.push(format!(
                "{} of {} of the webhook's records did not verify: {}",
                r.unverified,
                r.read,
                r.unverified_why
                    .as_deref()
                    .unwrap_or("no user is named from them")
            ));
        }
        for m in &self.memory {
            let what = match m.source {
                SignedSource::Report => "the audit's Reports",
                _ => "the audit's DriftDetected and Bypassed Events",
            };
            if let Some(error) = &m.outcome.error {
                out.push(format!("the memory in {what} could not be read: {error}"));
            }
            if m.outcome.unverified > 0 {
                out.push(format!(
                    "{} remembered entries in {what} did not verify and were not read back: {}",
                    m.outcome.unverified,
                    m.outcome
                        .unverified_why
                        .as_deref()
                        .unwrap_or("not signed by this installation")
                ));
            }
        }
        out
    }
}

/// One completed audit run (reference §8), as `/status` of the audit process shows it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditRun {
    /// The run id: also the name of its export file and the `id` of its records.
    pub id: String,
    /// When the run started (RFC 3339).
    pub start: String,
    pub duration_seconds: f64,
    /// Objects by result.
    pub counts: AuditCounts,
    /// Why the run failed, when it did (its counts are then partial).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The start (RFC 3339) of the last run that completed: this one's, or — when this one
    /// failed — an earlier one's; absent when none has completed yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_completed: Option<String>,
    /// Cluster mode with `--events`: the records the run read and the memory the process read
    /// back, with what did not verify.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<AuditEvidence>,
}

/// Audited objects by result: the `result` label of `drift_sentinel_audit_objects`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditCounts {
    pub drifted: u64,
    pub clean: u64,
    pub no_baseline: u64,
    pub skipped: u64,
    /// Objects carrying the bypass annotation, by its end (they are counted above too: an
    /// honoured bypass as skipped, another as what its judgement found).
    #[serde(default)]
    pub bypassed: BypassCounts,
}

/// How the audit counts bypassed objects (`drift_sentinel_audit_bypassed_objects{end}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BypassEnd {
    /// `true`: honoured, without an end.
    None,
    /// An end still ahead: honoured.
    Active,
    /// An end that has passed: not honoured, the object is audited.
    Expired,
    /// Any other value, or one over `maxBypass`: not honoured, the object is audited.
    NotHonoured,
}

impl BypassEnd {
    pub fn as_str(self) -> &'static str {
        match self {
            BypassEnd::None => "none",
            BypassEnd::Active => "active",
            BypassEnd::Expired => "expired",
            BypassEnd::NotHonoured => "not-honoured",
        }
    }
}

/// Bypassed objects by end: the `end` label of `drift_sentinel_audit_bypassed_objects`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BypassCounts {
    /// `true`: honoured without an end.
    pub none: u64,
    /// An end still ahead.
    pub active: u64,
    /// An end that has passed: audited.
    pub expired: u64,
    /// Another value, or an end past the rule's `maxBypass`: audited.
    pub not_honoured: u64,
}

impl BypassCounts {
    /// Counts one object whose annotation ends as `end`.
    pub fn add(&mut self, end: BypassEnd) {
        *match end {
            BypassEnd::None => &mut self.none,
            BypassEnd::Active => &mut self.active,
            BypassEnd::Expired => &mut self.expired,
            BypassEnd::NotHonoured => &mut self.not_honoured,
        } += 1;
    }

    /// `(end label, count)` for each end.
    pub fn by_end(&self) -> [(&'static str, u64); 4] {
        [
            (BypassEnd::None.as_str(), self.none),
            (BypassEnd::Active.as_str(), self.active),
            (BypassEnd::Expired.as_str(), self.expired),
            (BypassEnd::NotHonoured.as_str(), self.not_honoured),
        ]
    }
}

/// What the audit reads that must carry the installation's signature (reference §8 "Trust"):
/// the `source` label of `drift_sentinel_audit_unverified_records`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SignedSource {
    /// The webhook's records of edits (its Events' `drift-sentinel.k8s.io/edits`).
    Record,
    /// What the audit's Reports remember (`whoRecorded`, `bypassSetter`).
    Report,
    /// What the audit's `DriftDetected` and `Bypassed` Events remember
    /// (`drift-sentinel.k8s.io/who-recorded`, `drift-sentinel.k8s.io/bypass-setter`).
    EventMemory,
}

impl SignedSource {
    pub const ALL: [SignedSource; 3] = [
        SignedSource::Record,
        SignedSource::Report,
        SignedSource::EventMemory,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SignedSource::Record => "record",
            SignedSource::Report => "report",
            SignedSource::EventMemory => "event-memory",
        }
    }
}

/// Where the rules come from.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum RuleSourceKind {
    /// The built-in default rule; no source was configured.
    #[default]
    BuiltIn,
    /// Rule ConfigMaps and Namespaces watched in the cluster.
    Cluster,
    /// Files given with `--rules` / `--namespaces`.
    Files {
        rules: Vec<String>,
        namespaces: Vec<String>,
    },
}

/// A rule in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadedRule {
    /// `namespace/name` of the rule ConfigMap.
    pub rule: String,
    pub mode: String,
    pub priority: i64,
    /// `cluster` (applies as written) or `namespace` (only in its own namespace, only where no
    /// cluster rule matches).
    #[serde(default = "cluster_tier")]
    pub tier: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
}

fn cluster_tier() -> String {
    "cluster".to_owned()
}

/// A rule that is not applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InvalidRule {
    /// `namespace/name` of the rule ConfigMap.
    pub rule: String,
    pub namespace: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// The field at fault (`selectors[0].kind`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
    /// The one-line reason.
    pub reason: String,
    /// The whole message, as the log and the Event give it.
    pub message: String,
}

/// A problem with a source as a whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceError {
    /// The file (or source) at fault.
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
    pub reason: String,
}

impl std::fmt::Display for SourceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.source)?;
        if let (Some(line), Some(column)) = (self.line, self.column) {
            write!(f, ": line {line} column {column}")?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// A rule source whose last loaded rules are kept because what it holds now cannot be loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StaleSource {
    pub source: String,
    /// RFC 3339: since when the kept rules are out of date.
    pub since: String,
    pub reason: String,
}

/// A rule served in its last valid version because its ConfigMap now holds an invalid one (or
/// one that cannot be read).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StaleRule {
    /// `namespace/name`.
    pub rule: String,
    /// Why the newest version is not served.
    pub reason: String,
    /// RFC 3339: since when (unknown for a version kept by an earlier run and never seen
    /// invalid by this one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// The resourceVersion of the version served.
    pub served_resource_version: String,
    /// The newest resourceVersion of the ConfigMap.
    pub resource_version: String,
}

/// The export's state in `/status`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportState {
    pub enabled: bool,
    /// `namespace/name` of the Connection (or the file it is read from).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_directory: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueDepth>,
    /// This pod's entry of the Connection's `status.byPod`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_pod: Option<PodConnectionStatus>,
}

/// Records waiting to be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct QueueDepth {
    pub messages: usize,
    pub bytes: usize,
}

impl AuditCounts {
    /// Every object judged.
    pub fn total(&self) -> u64 {
        self.drifted + self.clean + self.no_baseline + self.skipped
    }

    /// `bypass annotations: 1 without an end, 2 active, 0 expired, 0 not honoured`, as the
    /// agent's and the plugin's audits end their summary; `None` when no object carries one.
    pub fn bypass_summary(&self) -> Option<String> {
        let b = &self.bypassed;
        (b.none + b.active + b.expired + b.not_honoured > 0).then(|| {
            format!(
                "bypass annotations: {} without an end, {} active, {} expired, {} not honoured",
                b.none, b.active, b.expired, b.not_honoured
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::StatusError;

    #[test]
    fn status_round_trips_with_real_errors() {
        let status = AgentStatus {
            ready: true,
            source: RuleSourceKind::Files {
                rules: vec!["rules/".into()],
                namespaces: vec![],
            },
            loaded_at: "2026-07-28T12:00:00Z".into(),
            rules_loaded: 1,
            rules_invalid: 1,
            rules: vec![LoadedRule {
                rule: "ops/r".into(),
                mode: "enforce".into(),
                priority: 10,
                tier: "cluster".into(),
                origin: Some("rules/r.yaml".into()),
            }],
            invalid_rules: vec![InvalidRule {
                rule: "ops/typo".into(),
                namespace: "ops".into(),
                name: "typo".into(),
                origin: None,
                field: Some("mutabel".into()),
                line: Some(4),
                column: Some(1),
                reason: "unknown field `mutabel`".into(),
                message: "rule ConfigMap ops/typo: data.spec line 4 column 1: field mutabel: unknown field `mutabel`".into(),
            }],
            source_errors: vec![SourceError {
                source: "rules/broken.yaml".into(),
                line: Some(3),
                column: Some(7),
                reason: "did not find expected key".into(),
            }],
            stale_sources: vec![],
            stale_rules: vec![StaleRule {
                rule: "ops/r".into(),
                reason: "line 2 column 1: unknown field `mutabel`".into(),
                since: Some("2026-07-28T12:01:00Z".into()),
                served_resource_version: "7".into(),
                resource_version: "9".into(),
            }],
            cluster_rule_namespaces: Some(vec!["ops".into(), "platform-*".into()]),
            namespaces_known: 3,
            export: ExportState {
                enabled: true,
                connection: Some("drift-system/audit-connection".into()),
                channel_directory: Some("/tmp/violations/audit-channel".into()),
                queue: Some(QueueDepth {
                    messages: 2,
                    bytes: 900,
                }),
                by_pod: Some(PodConnectionStatus {
                    id: "pod-a".into(),
                    connection_uid: Some("uid".into()),
                    connection_errors: vec![StatusError {
                        type_: "UpsertConnection".into(),
                        message: "unknown driver \"kafka\"".into(),
                    }],
                    publish_statuses: vec![],
                }),
            },
            audit: Some(AuditRun {
                id: "2026-07-28T12:00:00Z".into(),
                start: "2026-07-28T12:00:00Z".into(),
                duration_seconds: 1.5,
                counts: AuditCounts {
                    drifted: 1,
                    clean: 2,
                    no_baseline: 3,
                    skipped: 4,
                    bypassed: BypassCounts {
                        none: 1,
                        active: 2,
                        expired: 3,
                        not_honoured: 4,
                    },
                },
                error: None,
                last_completed: Some("2026-07-28T12:00:00Z".into()),
                evidence: Some(AuditEvidence {
                    records: SignedRead {
                        read: 10,
                        unverified: 2,
                        unverified_why: Some("forged".into()),
                        error: None,
                    },
                    memory: vec![MemoryRead {
                        source: SignedSource::EventMemory,
                        outcome: SignedRead {
                            read: 1,
                            unverified: 1,
                            unverified_why: Some("forged".into()),
                            error: None,
                        },
                    }],
                }),
            }),
            audit_interval_seconds: Some(60.0),
            record_signing: Some(RecordSigning {
                signed: true,
                public_key: Some(KeyPublication {
                    state: PublicationState::Failing,
                    config_map: "drift-system/drift-sentinel-record-key".into(),
                    attempts: 3,
                    at: Some("2026-07-28T12:00:00Z".into()),
                    last_error: Some("configmaps is forbidden".into()),
                }),
            }),
        };
        let text = serde_json::to_string(&status).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        // Source errors are objects on the wire; a reader shows their text.
        assert_eq!(value["sourceErrors"][0]["source"], "rules/broken.yaml");
        assert_eq!(
            status.source_errors[0].to_string(),
            "rules/broken.yaml: line 3 column 7: did not find expected key"
        );
        assert_eq!(value["source"]["kind"], "files");
        assert_eq!(value["audit"]["counts"]["noBaseline"], 3);
        assert_eq!(value["clusterRuleNamespaces"][1], "platform-*");
        assert_eq!(value["staleRules"][0]["servedResourceVersion"], "7");
        assert_eq!(value["recordSigning"]["publicKey"]["state"], "failing");
        assert_eq!(
            value["audit"]["evidence"]["memory"][0]["source"],
            "event-memory"
        );
        let back: AgentStatus = serde_json::from_str(&text).unwrap();
        assert_eq!(back, status);
    }

    #[test]
    fn an_older_agent_reports_no_cluster_rule_namespaces() {
        let status: AgentStatus = serde_json::from_value(serde_json::json!({
            "ready": true, "source": {"kind": "cluster"}, "loadedAt": "2026-07-28T12:00:00Z",
            "rulesLoaded": 0, "rulesInvalid": 0, "namespacesKnown": 0, "export": {"enabled": false}
        }))
        .unwrap();
        assert_eq!(status.cluster_rule_namespaces, None);
        let text = serde_json::to_string(&status).unwrap();
        assert!(!text.contains("clusterRuleNamespaces"), "{text}");
    }

    #[test]
    fn what_is_said_of_the_record_signing() {
        let publication = |state, last_error: Option<&str>| KeyPublication {
            state,
            config_map: "ops/drift-sentinel-record-key".into(),
            attempts: 4,
            at: None,
            last_error: last_error.map(str::to_owned),
        };
        let signing = |signed, public_key| RecordSigning { signed, public_key };
        // (signing, the audit's status, what is said)
        let cases = [
            (signing(true, None), true, None),
            (
                signing(true, Some(publication(PublicationState::Published, None))),
                false,
                None,
            ),
            (
                signing(false, None),
                false,
                Some("records are written unsigned; the audit names no user from them"),
            ),
            (
                signing(false, None),
                true,
                Some("cannot be verified, so the audit names no user from them"),
            ),
            (
                signing(true, Some(publication(PublicationState::Pending, None))),
                false,
                Some("not published yet in ConfigMap ops/drift-sentinel-record-key"),
            ),
            (
                signing(
                    true,
                    Some(publication(PublicationState::Failing, Some("forbidden"))),
                ),
                false,
                Some("ConfigMap ops/drift-sentinel-record-key (4 attempts, retried): forbidden"),
            ),
        ];
        for (signing, audit, want) in cases {
            let said = signing.concern(audit);
            match want {
                None => assert_eq!(said, None, "{signing:?}"),
                Some(part) => assert!(
                    said.as_deref().is_some_and(|s| s.contains(part)),
                    "{said:?} lacks {part:?}"
                ),
            }
        }
    }

    #[test]
    fn what_is_said_of_the_evidence_read() {
        let memory = |source, unverified, error: Option<&str>| MemoryRead {
            source,
            outcome: SignedRead {
                read: 5,
                unverified,
                unverified_why: (unverified > 0).then(|| "forged".to_owned()),
                error: error.map(str::to_owned),
            },
        };
        let read = |unverified, error: Option<&str>| SignedRead {
            read: 7,
            unverified,
            unverified_why: (unverified > 0).then(|| "not signed".to_owned()),
            error: error.map(str::to_owned),
        };
        // (evidence, what is said, the gauge by source: record, report, event-memory)
        let cases: Vec<(AuditEvidence, Vec<&str>, [u64; 3])> = vec![
            (AuditEvidence::default(), vec![], [0, 0, 0]),
            (
                AuditEvidence {
                    records: read(0, Some("more than 50000 records")),
                    memory: vec![memory(
                        SignedSource::Report,
                        0,
                        Some("reports is forbidden"),
                    )],
                },
                vec![
                    "the webhook's records could not be read: more than 50000 records",
                    "the memory in the audit's Reports could not be read: reports is forbidden",
                ],
                [0, 0, 0],
            ),
            (
                AuditEvidence {
                    records: read(3, None),
                    memory: vec![
                        memory(SignedSource::Report, 1, None),
                        memory(SignedSource::EventMemory, 2, None),
                    ],
                },
                vec![
                    "3 of 7 of the webhook's records did not verify: not signed",
                    "1 remembered entries in the audit's Reports did not verify and were not read back: forged",
                    "2 remembered entries in the audit's DriftDetected and Bypassed Events did not verify and were not read back: forged",
                ],
                [3, 1, 2],
            ),
        ];
        for (evidence, said, gauge) in cases {
            assert_eq!(evidence.concerns(), said, "{evidence:?}");
            let by_source = evidence.unverified_by_source();
            assert_eq!(by_source.map(|(_, n)| n), gauge, "{evidence:?}");
            assert_eq!(by_source.map(|(s, _)| s), SignedSource::ALL);
        }
    }
}
