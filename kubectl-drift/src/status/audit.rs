//! The audit part of `status`: the chart's audit pods (found by their labels, in the agents'
//! namespace) and the last run each one's admin `/status` reports (`audit`, reference §8). An audit
//! that has not completed a run within 3 of its intervals is a problem — the same threshold as
//! the chart's `DriftSentinelAuditNotCompleting` alert. Pure, as [`super::health`].

use std::time::{Duration, SystemTime};

use drift_api::status::{AgentStatus, AuditRun, RecordSigning};
use serde::Serialize;

use super::fetch::AdminAnswer;
use super::time::{age, ago, short_duration};
use crate::cluster::pods::AgentPod;

/// Completed runs may be this many intervals apart before the audit is late.
pub(super) const LATE_AFTER_INTERVALS: u32 = 3;

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AuditReport {
    pub selector: String,
    pub pods: Vec<AuditPodReport>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AuditPodReport {
    #[serde(flatten)]
    pub pod: AgentPod,
    /// The pod's admin `/status`; `None` when the pod is not running.
    pub admin: Option<AuditAdmin>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AuditAdmin {
    pub reachable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `--audit-interval`, when the process runs periodically.
    pub interval_seconds: Option<f64>,
    /// The last run, completed or failed.
    pub last_run: Option<AuditRun>,
    pub state: AuditState,
    /// Whether the audit verifies the records with the installation's key (reference §8
    /// "Trust"); `None` from an audit that does not say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record_signing: Option<RecordSigning>,
}

/// How the audit is doing.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum AuditState {
    /// A run completed within the last 3 intervals, and the last one did not fail.
    Ok,
    /// No run has completed yet, and the pod is younger than 3 intervals.
    Starting,
    /// The last run failed; one completed within the last 3 intervals.
    Failed,
    /// No run completed within the last 3 intervals.
    Late,
    /// The admin API could not be read, or gave no interval to judge by.
    Unknown,
}

/// The audit pods with their admin answers, judged as of `now`: the report, the problems and
/// the warnings.
pub(super) fn audit_health(
    selector: &str,
    namespace: &str,
    pods: Vec<AgentPod>,
    answers: Vec<Option<AdminAnswer>>,
    now: SystemTime,
) -> (AuditReport, Vec<String>, Vec<String>) {
    let (mut problems, mut warnings) = (Vec::new(), Vec::new());
    if pods.is_empty() {
        warnings.push(format!(
            "no audit pods in namespace {namespace} match {selector} (see --audit-selector): drift made past the webhook is not looked for (the chart's audit.enabled)"
        ));
    }
    let pods: Vec<AuditPodReport> = pods
        .into_iter()
        .zip(answers)
        .map(|(pod, answer)| {
            let admin = answer.map(|a| admin(a, &pod, now));
            findings(&pod, admin.as_ref(), now, &mut problems, &mut warnings);
            AuditPodReport { pod, admin }
        })
        .collect();
    let report = AuditReport {
        selector: selector.to_owned(),
        pods,
    };
    (report, problems, warnings)
}

fn admin(answer: AdminAnswer, pod: &AgentPod, now: SystemTime) -> AuditAdmin {
    let unreachable = |error: String| AuditAdmin {
        reachable: false,
        error: Some(error),
        interval_seconds: None,
        last_run: None,
        state: AuditState::Unknown,
        record_signing: None,
    };
    let (status, body) = match answer {
        Ok(answer) => answer,
        Err(e) => return unreachable(e.to_string()),
    };
    if status != 200 {
        return unreachable(format!("GET /status answered HTTP {status}"));
    }
    let document = match serde_json::from_slice::<AgentStatus>(&body) {
        Ok(document) => document,
        Err(e) => {
            return unreachable(format!(
                "GET /status did not answer the audit's status document ({e})"
            ));
        }
    };
    let interval = document
        .audit_interval_seconds
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(Duration::from_secs_f64);
    AuditAdmin {
        reachable: true,
        error: None,
        interval_seconds: document.audit_interval_seconds,
        state: state(interval, document.audit.as_ref(), pod, now),
        last_run: document.audit,
        record_signing: document.record_signing,
    }
}

fn state(
    interval: Option<Duration>,
    run: Option<&AuditRun>,
    pod: &AgentPod,
    now: SystemTime,
) -> AuditState {
    let Some(interval) = interval else {
        return AuditState::Unknown;
    };
    let limit = interval * LATE_AFTER_INTERVALS;
    let completed = run.and_then(|r| r.last_completed.as_deref());
    let since = match completed {
        Some(start) => age(start, now),
        // None completed yet: late once the pod has been up for 3 intervals.
        None => pod.created.as_deref().and_then(|c| age(c, now)),
    };
    match (since, completed) {
        (Some(since), _) if since > limit => AuditState::Late,
        (_, None) => AuditState::Starting,
        _ if run.is_some_and(|r| r.error.is_some()) => AuditState::Failed,
        _ => AuditState::Ok,
    }
}

fn findings(
    pod: &AgentPod,
    admin: Option<&AuditAdmin>,
    now: SystemTime,
    problems: &mut Vec<String>,
    warnings: &mut Vec<String>,
) {
    let name = &pod.name;
    if pod.deleting {
        warnings.push(format!("audit pod {name} is terminating"));
    } else if !pod.ready {
        problems.push(format!(
            "audit pod {name} is not ready (phase {}): no audit runs",
            pod.phase
        ));
    }
    let Some(admin) = admin else {
        return;
    };
    if let Some(error) = &admin.error {
        problems.push(format!(
            "audit pod {name}: cannot read its admin API through port-forwarding: {error}"
        ));
        return;
    }
    let run = admin.last_run.as_ref();
    let error = run.and_then(|r| r.error.as_deref());
    let interval = admin
        .interval_seconds
        .map(|s| short_duration(Duration::from_secs_f64(s.max(0.0))));
    match admin.state {
        AuditState::Late => {
            let since = match run.and_then(|r| r.last_completed.as_deref()) {
                Some(start) => format!(
                    "its last completed run started {}",
                    ago(Some(start), now)
                ),
                None => "no run has completed since the pod started".to_owned(),
            };
            let why = error.map_or(String::new(), |e| format!("; the last run failed: {e}"));
            problems.push(format!(
                "audit pod {name}: the audit has not completed a run within {LATE_AFTER_INTERVALS} intervals ({}): {since}{why}",
                interval.unwrap_or_default()
            ));
        }
        AuditState::Failed => warnings.push(format!(
            "audit pod {name}: the last audit run failed: {}",
            error.unwrap_or_default()
        )),
        AuditState::Starting => warnings.push(format!(
            "audit pod {name}: no audit run has completed yet"
        )),
        AuditState::Unknown => warnings.push(format!(
            "audit pod {name}: its /status gives no audit interval (not a periodic drift-sentinel audit?)"
        )),
        AuditState::Ok => {}
    }
    if let Some(concern) = admin.record_signing.as_ref().and_then(|s| s.concern(true)) {
        warnings.push(format!("audit pod {name}: {concern}"));
    }
    for concern in run
        .and_then(|r| r.evidence.as_ref())
        .map(drift_api::status::AuditEvidence::concerns)
        .unwrap_or_default()
    {
        warnings.push(format!("audit pod {name}: {concern}"));
    }
}

/// What the last run of an audit pod read of the webhook's records and the process of its
/// memory, one line (`None` when it does not say): `POD: records 7 read, 3 did not verify;
/// memory read back: report 2 (1 did not verify), event-memory 0`.
pub(super) fn evidence_line(p: &AuditPodReport) -> Option<String> {
    let evidence = p.admin.as_ref()?.last_run.as_ref()?.evidence.as_ref()?;
    let records = &evidence.records;
    let mut line = match &records.error {
        Some(_) => format!("{}: records not read", p.pod.name),
        None => format!(
            "{}: records {} read, {} did not verify",
            p.pod.name, records.read, records.unverified
        ),
    };
    let memory: Vec<String> = evidence
        .memory
        .iter()
        .map(|m| match (&m.outcome.error, m.outcome.unverified) {
            (Some(_), _) => format!("{} not read", m.source.as_str()),
            (None, 0) => format!("{} {}", m.source.as_str(), m.outcome.read),
            (None, n) => format!(
                "{} {} ({n} did not verify)",
                m.source.as_str(),
                m.outcome.read
            ),
        })
        .collect();
    if !memory.is_empty() {
        line.push_str(&format!("; memory read back: {}", memory.join(", ")));
    }
    Some(line)
}

/// The row of an audit pod: pod, ready, last run, its age, duration, counts, bypasses, state.
pub(super) fn row(p: &AuditPodReport, now: SystemTime) -> Vec<String> {
    let admin = p.admin.as_ref();
    let run = admin.and_then(|a| a.last_run.as_ref());
    let dash = || "-".to_owned();
    vec![
        p.pod.name.clone(),
        if p.pod.ready { "yes" } else { "no" }.to_owned(),
        admin
            .and_then(|a| a.interval_seconds)
            .map_or_else(dash, |s| {
                short_duration(Duration::from_secs_f64(s.max(0.0)))
            }),
        run.map_or_else(dash, |r| r.id.clone()),
        run.and_then(|r| r.last_completed.as_deref())
            .map_or_else(dash, |t| ago(Some(t), now)),
        run.map_or_else(dash, |r| format!("{:.1}s", r.duration_seconds)),
        run.map_or_else(dash, |r| {
            let c = r.counts;
            format!("{}/{}/{}/{}", c.drifted, c.clean, c.no_baseline, c.skipped)
        }),
        run.map_or_else(dash, |r| {
            let b = r.counts.bypassed;
            format!("{}/{}/{}", b.none, b.active, b.expired + b.not_honoured)
        }),
        match admin {
            None => dash(),
            Some(a) if !a.reachable => "unreachable".to_owned(),
            Some(a) => serde_json::to_value(a.state)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
        },
    ]
}

/// The audit table's header.
pub(super) const HEADER: &[&str] = &[
    "POD",
    "READY",
    "INTERVAL",
    "LAST RUN",
    "COMPLETED",
    "DURATION",
    "DRIFTED/CLEAN/NO_BASELINE/SKIPPED",
    // Bypass annotations: without an end, active, ended or not honoured (audited).
    "BYPASSED NO-END/ACTIVE/ENDED",
    "STATE",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(created_seconds_ago: u64, now: SystemTime) -> AgentPod {
        AgentPod {
            name: "audit-0".into(),
            phase: "Running".into(),
            ready: true,
            restarts: 0,
            created: Some(drift_api::violation::format_rfc3339(
                now - Duration::from_secs(created_seconds_ago),
            )),
            deleting: false,
            node: None,
        }
    }

    fn answer(
        interval: f64,
        completed_ago: Option<u64>,
        error: Option<&str>,
        now: SystemTime,
    ) -> AdminAnswer {
        let at = |s: u64| drift_api::violation::format_rfc3339(now - Duration::from_secs(s));
        let status = AgentStatus {
            audit_interval_seconds: Some(interval),
            audit: Some(AuditRun {
                id: "run".into(),
                start: at(completed_ago.unwrap_or(5)),
                error: error.map(str::to_owned),
                last_completed: completed_ago.map(at),
                ..AuditRun::default()
            }),
            ..AgentStatus::default()
        };
        Ok((200, serde_json::to_vec(&status).unwrap()))
    }

    fn state_of(
        created: u64,
        answer_: AdminAnswer,
        now: SystemTime,
    ) -> (AuditState, Vec<String>, Vec<String>) {
        let (report, problems, warnings) = audit_health(
            "sel",
            "ns",
            vec![pod(created, now)],
            vec![Some(answer_)],
            now,
        );
        (
            report.pods[0].admin.as_ref().unwrap().state,
            problems,
            warnings,
        )
    }

    #[test]
    fn an_audit_not_completing_within_3_intervals_is_a_problem() {
        let now = SystemTime::now();
        let (state, problems, _) = state_of(3600, answer(60.0, Some(100), None, now), now);
        assert_eq!((state, problems.len()), (AuditState::Ok, 0));
        let (state, problems, _) = state_of(
            3600,
            answer(
                60.0,
                Some(200),
                Some("cannot list deployments.apps: forbidden"),
                now,
            ),
            now,
        );
        assert_eq!(state, AuditState::Late);
        assert!(
            problems[0].contains("within 3 intervals (60s)"),
            "{problems:?}"
        );
        assert!(problems[0].contains("forbidden"), "{problems:?}");
        let (state, problems, warnings) =
            state_of(3600, answer(60.0, Some(100), Some("boom"), now), now);
        assert_eq!((state, problems.len()), (AuditState::Failed, 0));
        assert!(warnings[0].contains("boom"));
        // None completed yet: young pods are starting, old ones late.
        let (state, problems, _) = state_of(100, answer(60.0, None, Some("x"), now), now);
        assert_eq!((state, problems.len()), (AuditState::Starting, 0));
        let (state, problems, _) = state_of(1000, answer(60.0, None, Some("x"), now), now);
        assert_eq!(state, AuditState::Late);
        assert!(
            problems[0].contains("no run has completed since the pod started"),
            "{problems:?}"
        );
    }

    #[test]
    fn no_audit_pods_is_a_warning_and_an_unreadable_admin_a_problem() {
        let now = SystemTime::now();
        let (_, problems, warnings) = audit_health("sel", "ns", vec![], vec![], now);
        assert!(problems.is_empty() && warnings[0].contains("no audit pods"));
        let (state, problems, _) = state_of(10, Ok((500, Vec::new())), now);
        assert_eq!(state, AuditState::Unknown);
        assert!(problems[0].contains("HTTP 500"), "{problems:?}");
    }

    #[test]
    fn what_the_runs_read_and_did_not_verify_is_shown_and_warned() {
        use drift_api::status::{
            AuditEvidence, MemoryRead, RecordSigning, SignedRead, SignedSource,
        };
        let now = SystemTime::now();
        let memory = |source, read, unverified, error: Option<&str>| MemoryRead {
            source,
            outcome: SignedRead {
                read,
                unverified,
                unverified_why: (unverified > 0).then(|| "forged".to_owned()),
                error: error.map(str::to_owned),
            },
        };
        // (signing, evidence, the evidence line, the warnings' parts)
        type Case<'c> = (
            Option<RecordSigning>,
            Option<AuditEvidence>,
            Option<&'c str>,
            Vec<&'c str>,
        );
        let cases: Vec<Case> = vec![
            (None, None, None, vec![]),
            (
                Some(RecordSigning {
                    signed: true,
                    public_key: None,
                }),
                Some(AuditEvidence {
                    records: SignedRead {
                        read: 7,
                        ..SignedRead::default()
                    },
                    memory: vec![memory(SignedSource::EventMemory, 2, 0, None)],
                }),
                Some("audit-0: records 7 read, 0 did not verify; memory read back: event-memory 2"),
                vec![],
            ),
            (
                Some(RecordSigning {
                    signed: false,
                    public_key: None,
                }),
                Some(AuditEvidence {
                    records: SignedRead {
                        read: 7,
                        unverified: 7,
                        unverified_why: Some("no key".into()),
                        error: None,
                    },
                    memory: vec![
                        memory(SignedSource::Report, 1, 3, None),
                        memory(SignedSource::EventMemory, 0, 0, Some("events is forbidden")),
                    ],
                }),
                Some(
                    "audit-0: records 7 read, 7 did not verify; memory read back: report 1 (3 did not verify), event-memory not read",
                ),
                vec![
                    "audit pod audit-0: no --record-signing-key",
                    "audit pod audit-0: 7 of 7 of the webhook's records did not verify: no key",
                    "audit pod audit-0: 3 remembered entries in the audit's Reports did not verify",
                    "audit pod audit-0: the memory in the audit's DriftDetected and Bypassed Events could not be read: events is forbidden",
                ],
            ),
            (
                None,
                Some(AuditEvidence {
                    records: SignedRead {
                        error: Some("more than 50000 of the webhook's records".into()),
                        ..SignedRead::default()
                    },
                    memory: vec![],
                }),
                Some("audit-0: records not read"),
                vec![
                    "audit pod audit-0: the webhook's records could not be read: more than 50000 of the webhook's records",
                ],
            ),
        ];
        for (signing, evidence, line, warned) in cases {
            let status = AgentStatus {
                audit_interval_seconds: Some(60.0),
                record_signing: signing,
                audit: Some(AuditRun {
                    id: "run".into(),
                    start: drift_api::violation::format_rfc3339(now),
                    last_completed: Some(drift_api::violation::format_rfc3339(now)),
                    evidence: evidence.clone(),
                    ..AuditRun::default()
                }),
                ..AgentStatus::default()
            };
            let answer = Ok((200, serde_json::to_vec(&status).unwrap()));
            let (report, problems, warnings) =
                audit_health("sel", "ns", vec![pod(3600, now)], vec![Some(answer)], now);
            assert!(problems.is_empty(), "{problems:?}");
            assert_eq!(evidence_line(&report.pods[0]).as_deref(), line);
            assert_eq!(warnings.len(), warned.len(), "{warnings:#?}");
            for (warning, part) in warnings.iter().zip(&warned) {
                assert!(warning.starts_with(part), "{warning:?} is not {part:?}");
            }
        }
    }
}
