//! One run's who and why: a record, its expiry, what was remembered (by a run or a Report),
//! and a value changed since.

use super::*;
use crate::attribution::{EditRecord, Why, fingerprint};
use crate::rule::{RuleId, RuleSource};
use crate::{RuleSet, manifests};
use drift_api::events::MemoryAnnotation;
use drift_api::events::signature::SigningKey;
use drift_testkit::records::EditRecordBuilder;
use serde_json::json;
use std::time::SystemTime;

const APPLIED: &str = "2026-03-01T09:00:00Z";
const EDITED: &str = "2026-03-01T10:05:00Z";

/// Records that all verified.
fn verified(records: HashMap<String, Vec<EditRecord>>) -> Records {
    Records {
        verified: records,
        ..Records::default()
    }
}

fn key() -> drift_api::events::signature::SigningKey {
    drift_api::events::signature::signing_key_of_seed(&[5; 32]).unwrap()
}

fn verification() -> Verification {
    Verification::of_key(key().verifying_key())
}

/// A Report result's signed memory properties, as the audit writes them.
fn signed(uid: &str, name: &str, text: &str) -> Value {
    Value::Object(
        drift_api::events::signed_property(Some(&key()), name, uid, text)
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect(),
    )
}

fn at(text: &str) -> SystemTime {
    crate::time::parse_rfc3339(text).unwrap()
}

fn rules() -> RuleSet {
    RuleSet::build([RuleSource {
        id: RuleId {
            namespace: "drift-system".into(),
            name: "web".into(),
        },
        spec: crate::SpecText::Yaml(
            "mode: warn\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\n"
                .into(),
        ),
        origin: None,
    }])
}

/// A Deployment applied with 2 replicas, edited by `kubectl-edit` at [`EDITED`] to `replicas`.
fn live(replicas: u32) -> Value {
    let applied = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"}, "spec": {"replicas": 2}});
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "uid": "u-1",
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": applied.to_string()},
            "managedFields": [
                {"manager": "kubectl-client-side-apply", "operation": "Update", "time": APPLIED,
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {
                     "f:kubectl.kubernetes.io/last-applied-configuration": {}}}}},
                {"manager": "kubectl-edit", "operation": "Update", "time": EDITED,
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]},
        "spec": {"replicas": replicas}
    })
}

fn fp(value: Value) -> String {
    fingerprint(Some(&value)).unwrap()
}

/// alice's warn-mode edit of `spec.replicas` to 5.
fn alice() -> EditRecord {
    EditRecordBuilder::alice()
        .warn()
        .time(EDITED)
        .field("spec.replicas", fp(json!(5)))
        .build()
}

fn remembered(value: u32) -> Remembered {
    Remembered {
        path: "spec.replicas".into(),
        value: fp(json!(value)),
        attribution: Attribution {
            user: Some("alice".into()),
            why: Why::WarnMode,
            rule: Some("drift-system/web".into()),
            seen: Some("2026-03-01T10:05:00.100000Z".into()),
        },
    }
}

use crate::attribution::Attribution;

/// Records read since `since` (the restart of the audit), last at 11:00.
fn coverage(since: &str) -> Result<Coverage, String> {
    Ok(Coverage {
        since: at(since),
        read_at: at("2026-03-01T11:00:00Z"),
    })
}

fn memory(fields: Vec<Remembered>) -> Memory {
    Memory {
        fields: HashMap::from([("u-1".to_owned(), fields)]),
        setters: HashMap::new(),
    }
}

/// (case, live replicas, records, coverage, what was remembered, the user, the why's kind,
/// remembered for the next run)
type Case = (
    &'static str,
    u32,
    HashMap<String, Vec<EditRecord>>,
    Result<Coverage, String>,
    Memory,
    Option<&'static str>,
    &'static str,
    bool,
);

#[test]
fn a_record_its_expiry_what_was_remembered_and_a_value_changed_since() {
    let rules = rules();
    let namespaces = manifests::Namespaces::default();
    let managers = vec!["kubectl-edit".to_owned()];
    let records = |r: Vec<EditRecord>| HashMap::from([("u-1".to_owned(), r)]);
    let cases: Vec<Case> = vec![
        (
            "record present",
            5,
            records(vec![alice()]),
            coverage("2026-03-01T10:00:00Z"),
            Memory::default(),
            Some("alice"),
            "warn-mode",
            true,
        ),
        (
            "record expired, nothing remembered (the audit restarted after the edit)",
            5,
            HashMap::new(),
            coverage("2026-03-01T10:30:00Z"),
            Memory::default(),
            None,
            "unknown",
            false,
        ),
        (
            "record expired, remembered for the live value",
            5,
            HashMap::new(),
            coverage("2026-03-01T10:30:00Z"),
            memory(vec![remembered(5)]),
            Some("alice"),
            "warn-mode",
            true,
        ),
        (
            "records unreadable, remembered for the live value",
            5,
            HashMap::new(),
            Err("forbidden".into()),
            memory(vec![remembered(5)]),
            Some("alice"),
            "warn-mode",
            true,
        ),
        (
            "value changed since: remembered for another value",
            7,
            HashMap::new(),
            coverage("2026-03-01T10:30:00Z"),
            memory(vec![remembered(5)]),
            None,
            "unknown",
            false,
        ),
        (
            "value changed since, the record still there",
            7,
            records(vec![alice()]),
            coverage("2026-03-01T10:00:00Z"),
            memory(vec![remembered(5)]),
            None,
            "not-seen",
            false,
        ),
        (
            "another path remembered",
            5,
            HashMap::new(),
            coverage("2026-03-01T10:30:00Z"),
            memory(vec![Remembered {
                path: "spec.paused".into(),
                ..remembered(5)
            }]),
            None,
            "unknown",
            false,
        ),
    ];
    for (case, replicas, records, coverage, earlier, user, why, kept) in cases {
        let object = live(replicas);
        let audit = crate::audit::audit_object(&rules, &namespaces, &object, &managers, at(EDITED))
            .expect("selected");
        assert!(audit.is_drifted(), "{case}");
        let identity = AuditedObject::of(&object, "deployments");
        let mut run = RunEvidence::new(
            verified(records),
            coverage,
            earlier,
            WebhookScope::Unknown("not read in this test".into()),
        );
        let found = run.attribute(&object, &identity, &audit);
        assert_eq!(found.fields.len(), 1, "{case}");
        let field = &found.fields[0];
        assert_eq!(field.path, "spec.replicas", "{case}");
        assert_eq!(field.attribution.user.as_deref(), user, "{case}: {field}");
        assert_eq!(field.attribution.why.as_str(), why, "{case}: {field}");
        let next = run.finish(true);
        assert_eq!(next.fields.contains_key("u-1"), kept, "{case}");
        if kept {
            assert_eq!(next.fields["u-1"], vec![remembered(replicas)], "{case}");
        }
    }
}

/// A run that did not reach every object keeps what was remembered of the objects it did not
/// reach, and only those: an object it judged keeps what this run found of it (reference §8
/// "Memory"), so a value changed since, or a field no longer drifted, is not remembered again.
#[test]
fn an_incomplete_run_keeps_the_memory_of_the_objects_it_did_not_reach_only() {
    let rules = rules();
    let namespaces = manifests::Namespaces::default();
    let managers = vec!["kubectl-edit".to_owned()];
    // (case, live replicas of u-1: 7 is another value than remembered, 2 is no drift)
    for (case, replicas) in [("value changed since", 7), ("no longer drifted", 2)] {
        let mut earlier = memory(vec![remembered(5)]);
        earlier.fields.insert("u-2".to_owned(), vec![remembered(3)]);
        let mut run = RunEvidence::new(
            Records::default(),
            coverage("2026-03-01T10:30:00Z"),
            earlier,
            WebhookScope::Unknown("not read in this test".into()),
        );
        let object = live(replicas);
        let mut audit =
            crate::audit::audit_object(&rules, &namespaces, &object, &managers, at(EDITED))
                .expect("selected");
        let identity = AuditedObject::of(&object, "deployments");
        let found = run.judge(&object, &identity, &mut audit);
        assert!(
            found.fields.iter().all(|f| f.attribution.user.is_none()),
            "{case}: {:?}",
            found.fields
        );
        let next = run.finish(false);
        assert!(
            !next.fields.contains_key("u-1"),
            "{case}: judged, found nothing"
        );
        assert_eq!(
            next.fields["u-2"],
            vec![remembered(3)],
            "{case}: not reached"
        );
    }
}

#[test]
fn what_a_report_remembers_is_read_back_whole_or_not_at_all() {
    let recorded = vec![remembered(5)];
    let property = drift_api::events::who_recorded_property(&recorded).unwrap();
    let setter = BypassSetter {
        manager: "kubectl-patch".into(),
        time: EDITED.into(),
        user: "carol".into(),
    };
    let report = json!({"results": [
        {"resources": [{"uid": "u-1"}], "properties": signed("u-1", "whoRecorded", &property)},
        {"resources": [{"uid": "u-2"}], "properties": signed("u-2", "bypassSetter", &serde_json::to_string(&setter).unwrap())},
        // Not ours to read: no uid, a broken value, a why the audit concludes itself.
        {"resources": [{}], "properties": {"whoRecorded": "[]"}},
        // (signed: what is left out is so for what it says)
        {"resources": [{"uid": "u-3"}], "properties": signed("u-3", "whoRecorded", "alice did it")},
        {"resources": [{"uid": "u-4"}], "properties": signed("u-4", "whoRecorded",
            &serde_json::to_string(&[Remembered { attribution: Attribution { user: None, why: Why::NotSeen, rule: None, seen: None }, ..remembered(5) }]).unwrap())},
        // Forged: the text of u-1's, unsigned, on u-5.
        {"resources": [{"uid": "u-5"}], "properties": {"whoRecorded": property}},
    ]});
    let memory = Memory::of_reports([&report], &verification());
    assert_eq!(memory.fields.len(), 1);
    assert_eq!(memory.fields["u-1"], recorded);
    assert_eq!(memory.setters.len(), 1);
    assert_eq!(memory.setters["u-2"], setter);

    // Bounded: whole entries only, the rest not remembered.
    let many: Vec<Remembered> = (0..100)
        .map(|i| Remembered {
            path: format!("spec.template.metadata.labels.key-{i}"),
            ..remembered(5)
        })
        .collect();
    let text = drift_api::events::who_recorded_property(&many).unwrap();
    assert!(text.len() <= drift_api::events::MAX_WHO_RECORDED_BYTES);
    let back: Vec<Remembered> = serde_json::from_str(&text).unwrap();
    assert!(!back.is_empty() && back.len() < many.len());
    assert_eq!(back[..], many[..back.len()]);
    assert_eq!(drift_api::events::who_recorded_property(&[]), None);
}

/// carol's edit setting the bypass, by `kubectl-patch` at [`EDITED`].
fn carol_set_the_bypass() -> EditRecord {
    EditRecordBuilder::by("carol")
        .why(Why::Bypass {
            end: None,
            set_by: Some("carol".into()),
        })
        .manager("kubectl-patch")
        .time(EDITED)
        .build()
}

/// Who set a bypass: from the record of the edit that wrote the annotation's entry, or what was
/// remembered for that same entry; otherwise unknown, and why — an earlier setter is never
/// carried over to an entry a later unrecorded edit moved.
#[test]
fn who_set_a_bypass_holds_only_for_the_entry_it_was_recorded_for() {
    const LATER: &str = "2026-03-01T10:40:00Z";
    let setter = BypassSetter {
        manager: "kubectl-patch".into(),
        time: EDITED.into(),
        user: "carol".into(),
    };
    let finding = |time: &'static str| BypassFinding {
        value: "true".into(),
        read: Ok(crate::bypass::Bypass {
            end: None,
            now: at(EDITED),
        }),
        set_by: Some(crate::comparison::ImperativeEdit {
            manager: "kubectl-patch".into(),
            time: Some(time.into()),
        }),
        user: None,
        user_unknown: None,
    };
    let remembered = || HashMap::from([("u-1".to_owned(), setter.clone())]);
    let recorded = || HashMap::from([("u-1".to_owned(), vec![carol_set_the_bypass()])]);
    let read = coverage("2026-03-01T10:00:00Z");
    // (case, the entry's time, records, coverage, remembered, Ok(user) or Err(a part of why))
    type Case = (
        &'static str,
        &'static str,
        HashMap<String, Vec<EditRecord>>,
        Result<Coverage, String>,
        HashMap<String, BypassSetter>,
        Result<&'static str, &'static str>,
    );
    let cases: Vec<Case> = vec![
        (
            "recorded",
            EDITED,
            recorded(),
            read.clone(),
            HashMap::new(),
            Ok("carol"),
        ),
        (
            "remembered for the same entry",
            EDITED,
            HashMap::new(),
            read.clone(),
            remembered(),
            Ok("carol"),
        ),
        (
            "remembered, records unreadable",
            EDITED,
            HashMap::new(),
            Err("forbidden".into()),
            remembered(),
            Ok("carol"),
        ),
        (
            "remembered for another entry",
            LATER,
            HashMap::new(),
            read.clone(),
            remembered(),
            Err(
                "no record of the edit kubectl-patch at 2026-03-01T10:40:00Z that owns the annotation",
            ),
        ),
        (
            "a later unrecorded edit by the same manager moved the entry",
            LATER,
            recorded(),
            read.clone(),
            HashMap::new(),
            Err(
                "a later edit by kubectl-patch at 2026-03-01T10:40:00Z, which the webhook has no record of, took over the annotation's managedFields entry after carol set the bypass (kubectl-patch at 2026-03-01T10:05:00Z); whether it rewrote the annotation cannot be told",
            ),
        ),
        (
            "records unreadable",
            EDITED,
            HashMap::new(),
            Err("more than 50000 of the webhook's records".into()),
            HashMap::new(),
            Err(
                "the webhook's records of edits could not be read: more than 50000 of the webhook's records",
            ),
        ),
    ];
    for (case, time, records, coverage, setters, want) in cases {
        let mut run = RunEvidence::new(
            verified(records),
            coverage,
            Memory {
                fields: HashMap::new(),
                setters,
            },
            WebhookScope::Unknown("not read".into()),
        );
        let found = run.bypass_setter("u-1", &finding(time));
        match want {
            Ok(user) => assert_eq!(found.as_deref(), Ok(user), "{case}"),
            Err(part) => {
                let why = found.expect_err(case);
                assert!(why.contains(part), "{case}: {why}");
            }
        }
        assert_eq!(
            run.finish(true).setters.contains_key("u-1"),
            want.is_ok(),
            "{case}"
        );
    }
    // What the listing says.
    let mut unknown = finding(LATER);
    unknown.user_unknown = Some("no record".into());
    assert_eq!(
        unknown.to_string(),
        "bypass without an end (set by kubectl-patch at 2026-03-01T10:40:00Z; user unknown: no record)"
    );
}

/// Reference §8 "Memory": a restarted audit fills in who set a bypass from its `Bypassed`
/// Events only for objects its Reports have nothing of; the setter then names the user of the
/// same managedFields entry only (manager and time), and is what the run remembers and writes
/// again ([`BypassFinding::setter`]); a setter remembered for another entry names nobody.
#[test]
fn a_setter_remembered_by_an_event_fills_only_what_the_reports_lack_for_its_entry() {
    const LATER: &str = "2026-03-01T10:40:00Z";
    let setter = |user: &str, time: &str| BypassSetter {
        manager: "kubectl-patch".into(),
        time: time.into(),
        user: user.into(),
    };
    let mut reports = Memory {
        fields: HashMap::new(),
        setters: HashMap::from([("u-1".to_owned(), setter("carol", EDITED))]),
    };
    reports.fill_from(Memory {
        fields: HashMap::new(),
        setters: HashMap::from([
            ("u-1".to_owned(), setter("mallory", EDITED)),
            ("u-2".to_owned(), setter("dave", EDITED)),
        ]),
    });
    assert_eq!(reports.setters["u-1"], setter("carol", EDITED));
    assert_eq!(reports.setters["u-2"], setter("dave", EDITED));

    let bypassed = |uid: &str, time: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "held", "namespace": "shop", "uid": uid,
                "annotations": {"drift-sentinel.k8s.io/bypass": "true"},
                "managedFields": [{"manager": "kubectl-patch", "operation": "Update", "time": time,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:annotations": {"f:drift-sentinel.k8s.io/bypass": {}}}}}]},
            "spec": {"replicas": 2}})
    };
    let rules = rules();
    let namespaces = manifests::Namespaces::new();
    // (object uid, the entry's time, the user named, the setter kept)
    let cases = [
        ("u-1", EDITED, Some("carol"), Some(setter("carol", EDITED))),
        ("u-2", EDITED, Some("dave"), Some(setter("dave", EDITED))),
        ("u-2", LATER, None, None),
        ("u-3", EDITED, None, None),
    ];
    for (uid, time, user, kept) in cases {
        let object = bypassed(uid, time);
        let mut audit =
            crate::audit::audit_object(&rules, &namespaces, &object, &[], at(LATER)).unwrap();
        let identity = AuditedObject::of(&object, "deployments");
        let mut run = RunEvidence::new(
            Records::default(),
            coverage("2026-03-01T10:30:00Z"),
            reports.clone(),
            WebhookScope::Unknown("not read".into()),
        );
        run.judge(&object, &identity, &mut audit);
        let finding = audit.honoured_bypass().expect("honoured");
        assert_eq!(finding.user.as_deref(), user, "{uid} {time}");
        assert_eq!(
            finding.user_unknown.is_some(),
            user.is_none(),
            "{uid} {time}"
        );
        assert_eq!(finding.setter(), kept, "{uid} {time}");
        assert_eq!(
            run.finish(true).setters.get(uid),
            kept.as_ref(),
            "{uid} {time}"
        );
    }
}

/// What is remembered is bounded in bytes, whatever the entries weigh: filling from a memory
/// of large entries keeps whole objects up to [`MAX_REMEMBERED_BYTES`] and no more.
#[test]
fn what_is_remembered_is_bounded_in_bytes() {
    let large = |n: usize| Remembered {
        path: format!("spec.{}", "p".repeat(1024 * 1024)),
        ..remembered(u32::try_from(n).unwrap())
    };
    let other = Memory {
        fields: (0..40)
            .map(|n| (format!("u-{n}"), vec![large(n)]))
            .collect(),
        setters: HashMap::new(),
    };
    let mut kept = Memory::default();
    kept.fill_from(other);
    assert!(
        kept.bytes() <= MAX_REMEMBERED_BYTES,
        "{} bytes",
        kept.bytes()
    );
    assert!(
        (10..40).contains(&kept.fields.len()),
        "{} objects kept",
        kept.fields.len()
    );
    // Full: a further object is not taken, and nothing kept is cut.
    let before = kept.fields.len();
    kept.fill_from(memory(vec![large(99)]));
    assert_eq!(kept.fields.len(), before);
    assert!(
        kept.fields
            .values()
            .all(|r| r.len() == 1 && r[0].path.len() > 1024 * 1024)
    );
}

/// The namespaces' labels: the first [`MAX_NAMESPACES`], none of a namespace over
/// [`MAX_LABELS_PER_NAMESPACE`] (its labels are then not known, never partly known).
#[test]
fn the_namespace_labels_reader_keeps_its_bounds() {
    let labels = |n: usize| -> Map<String, Value> {
        (0..n)
            .map(|i| (format!("k-{i}"), Value::from("v")))
            .collect()
    };
    let mut reader = NamespaceLabels::default();
    reader.add("shop", labels(2));
    reader.add("crowded", labels(MAX_LABELS_PER_NAMESPACE + 1));
    reader.add("edge", labels(MAX_LABELS_PER_NAMESPACE));
    let read = reader.into_map();
    assert_eq!(read["shop"].len(), 2);
    assert_eq!(read["edge"].len(), MAX_LABELS_PER_NAMESPACE);
    assert!(!read.contains_key("crowded"));

    let mut reader = NamespaceLabels::default();
    for n in 0..MAX_NAMESPACES {
        assert!(!reader.is_full());
        reader.add(&format!("ns-{n}"), Map::new());
    }
    assert!(reader.is_full());
    reader.add("one-more", labels(1));
    let read = reader.into_map();
    assert_eq!(read.len(), MAX_NAMESPACES);
    assert!(!read.contains_key("one-more"));
}

/// The Reports read back: at most [`MAX_REPORTS`] whatever the pages hold, and the reader says
/// when to stop listing.
#[test]
fn the_report_reader_reads_at_most_max_reports() {
    let property = drift_api::events::who_recorded_property(&[remembered(5)]).unwrap();
    let report = |uid: usize| {
        let uid = format!("u-{uid}");
        json!({"results": [{"resources": [{"uid": uid}],
                            "properties": signed(&uid, "whoRecorded", &property)}]})
    };
    let mut reader = ReportReader::new(verification());
    let page: Vec<Value> = (0..10).map(report).collect();
    reader.add_page(&page);
    assert!(!reader.is_full());
    assert_eq!(reader.into_memory().fields.len(), 10);

    // Reports remembering nothing, then one that would: past MAX_REPORTS it is not read.
    let mut all: Vec<Value> = (0..MAX_REPORTS).map(|_| json!({"results": []})).collect();
    all.push(report(1));
    let mut reader = ReportReader::new(verification());
    let mut pages = 0;
    for page in all.chunks(1000) {
        if reader.is_full() {
            break;
        }
        pages += 1;
        reader.add_page(page);
    }
    assert!(reader.is_full());
    assert_eq!(pages, MAX_REPORTS.div_ceil(1000));
    assert!(reader.into_memory().fields.is_empty());
}

/// An audit memory Event about `uid`, last observed at `observed`, with `annotations`.
fn memory_event(uid: &str, observed: &str, annotations: Vec<(String, String)>) -> Event {
    let annotations: Map<String, Value> = annotations
        .into_iter()
        .map(|(name, text)| (name, Value::String(text)))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": format!("{uid}.{observed}"), "namespace": "shop",
                     "annotations": annotations},
        "eventTime": observed,
        "reportingController": drift_api::events::AUDIT_CONTROLLER,
        "reportingInstance": "audit",
        "regarding": {"uid": uid},
    }))
    .expect("an Event")
}

fn setter_event(uid: &str, observed: &str, user: &str, key: Option<&SigningKey>) -> Event {
    let text = drift_api::events::bypass_setter_text(&BypassSetter {
        manager: "kubectl-annotate".into(),
        time: APPLIED.into(),
        user: user.into(),
    })
    .unwrap();
    let annotations = MemoryAnnotation::BYPASS_SETTER.signed(key, uid, &text);
    memory_event(uid, observed, annotations)
}

fn fields_event(uid: &str, observed: &str, user: &str) -> Event {
    let mut recorded = remembered(5);
    recorded.attribution.user = Some(user.into());
    let text = drift_api::events::who_recorded_property(&[recorded]).unwrap();
    let annotations = MemoryAnnotation::WHO_RECORDED.signed(Some(&key()), uid, &text);
    memory_event(uid, observed, annotations)
}

/// The audit's memory Events read back through the one reader, in pages: of two Events of one
/// object the one observed last wins (whichever page or order it came in), an unsigned one is
/// counted and not read, and more Events than the bound read back nothing.
#[test]
fn the_memory_events_read_back_the_latest_of_each_object() {
    const EARLY: &str = "2026-03-01T10:00:00.000000Z";
    const LATE: &str = "2026-03-01T11:00:00.000000Z";
    let setter_of = |memory: &Memory, uid: &str| memory.setters.get(uid).map(|s| s.user.clone());
    let user_of = |memory: &Memory, uid: &str| {
        memory
            .fields
            .get(uid)
            .and_then(|f| f[0].attribution.user.clone())
    };
    // (what, pages, u-1's setter, u-2's fields' user, unverified)
    let cases = [
        (
            "later second",
            vec![vec![
                setter_event("u-1", EARLY, "carol", Some(&key())),
                setter_event("u-1", LATE, "dave", Some(&key())),
            ]],
            Some("dave"),
            None,
            0,
        ),
        (
            "later first, earlier on the next page",
            vec![
                vec![
                    setter_event("u-1", LATE, "dave", Some(&key())),
                    fields_event("u-2", LATE, "erin"),
                ],
                vec![
                    setter_event("u-1", EARLY, "carol", Some(&key())),
                    fields_event("u-2", EARLY, "alice"),
                ],
            ],
            Some("dave"),
            Some("erin"),
            0,
        ),
        (
            "a later unsigned one is counted, not read",
            vec![vec![
                setter_event("u-1", EARLY, "carol", Some(&key())),
                setter_event("u-1", LATE, "mallory", None),
            ]],
            Some("carol"),
            None,
            1,
        ),
    ];
    for (what, pages, setter, user, unverified) in cases {
        let mut reader = MemoryEventReader::new(verification());
        let last = pages.len() - 1;
        for (i, page) in pages.iter().enumerate() {
            assert_eq!(reader.add_page(page, i < last), Ok(()), "{what}");
        }
        assert_eq!(reader.unverified(), unverified, "{what}");
        let memory = reader.into_memory();
        assert_eq!(setter_of(&memory, "u-1").as_deref(), setter, "{what}");
        assert_eq!(user_of(&memory, "u-2").as_deref(), user, "{what}");
    }

    // The bound: a full page with more to read, or more than it, reads back nothing.
    let mut reader = MemoryEventReader::new(verification());
    let first = [setter_event("u-1", EARLY, "carol", Some(&key()))];
    assert_eq!(reader.add_page(&first, true), Ok(()));
    let filler = vec![Event::default(); MAX_REMEMBERED_OBJECTS - 1];
    assert_eq!(reader.add_page(&filler, true), Err(TooManyMemoryEvents));
    assert!(reader.into_memory().setters.is_empty());
    let mut reader = MemoryEventReader::new(verification());
    let over = vec![Event::default(); MAX_REMEMBERED_OBJECTS + 1];
    assert_eq!(reader.add_page(&over, false), Err(TooManyMemoryEvents));
    // Exactly the bound, nothing more to read: read.
    let mut reader = MemoryEventReader::new(verification());
    let mut full = vec![Event::default(); MAX_REMEMBERED_OBJECTS - 1];
    full.push(setter_event("u-1", EARLY, "carol", Some(&key())));
    assert_eq!(reader.add_page(&full, false), Ok(()));
    assert_eq!(
        setter_of(&reader.into_memory(), "u-1").as_deref(),
        Some("carol")
    );
    assert!(
        TooManyMemoryEvents
            .to_string()
            .contains("none was read back")
    );
}
