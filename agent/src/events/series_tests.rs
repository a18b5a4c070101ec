use std::time::{Duration, SystemTime};

use drift_api::events::{EDITS_ANNOTATION, EditRecord, RecordedEdit, RecordedField, Why};

use super::*;

fn at(seconds: f64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000) + Duration::from_secs_f64(seconds)
}

fn reporter() -> Reporter {
    Reporter {
        controller: drift_api::events::WEBHOOK_CONTROLLER,
        instance: "drift-sentinel-0".into(),
        signing_key: None,
    }
}

fn warned(user: &str, time: SystemTime) -> Intent {
    Intent {
        regarding: Regarding {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "shop".into(),
            name: "web".into(),
            uid: "u-1".into(),
        },
        type_: EventType::Warning,
        reason: drift_api::events::reason::DRIFT_WARNED,
        action: "Allow",
        note: Note::Latest(format!("{user} changed spec.replicas: 3 → 5")),
        user: user.into(),
        rule: "ops/web".into(),
        record: Some((
            Why::WarnMode,
            RecordedEdit {
                seen: drift_engine::time::format_rfc3339(time),
                manager: Some("kubectl-edit".into()),
                time: None,
                fields: vec![RecordedField {
                    path: "spec.replicas".into(),
                    new: Some("sha256:00".into()),
                }],
                fields_omitted: 0,
            },
        )),
        bypass: None,
        distinct: None,
        memory: None,
        at: time,
    }
}

/// Answers every due write with `outcome`; returns them.
fn flush(store: &mut Store, now: SystemTime, outcome: Outcome) -> Vec<Write> {
    let writes = store.due(now);
    for write in &writes {
        store.written(write, outcome, now);
    }
    writes
}

fn record_of(event: &Event) -> EditRecord {
    let text = &event.metadata.annotations.as_ref().unwrap()[EDITS_ANNOTATION];
    serde_json::from_str(text).unwrap()
}

#[test]
fn a_thousand_warned_edits_in_a_minute_are_one_event_with_a_series() {
    let mut store = Store::new(reporter());
    let (mut creates, mut patches) = (Vec::new(), Vec::new());
    let mut next_flush = 0.0;
    for i in 0..1000 {
        let t = f64::from(i) * 0.06;
        assert!(store.observe(warned("alice", at(t))));
        if t >= next_flush {
            for write in flush(&mut store, at(t), Outcome::Done) {
                match write {
                    Write::Create { event, .. } => creates.push(event),
                    Write::Patch { patch, .. } => patches.push(patch),
                }
            }
            next_flush += 1.0;
        }
    }
    for write in flush(&mut store, at(70.0), Outcome::Done) {
        if let Write::Patch { patch, .. } = write {
            patches.push(patch);
        }
    }
    assert_eq!(creates.len(), 1, "one Event object");
    assert!(patches.len() <= 8, "{} patches", patches.len());
    let last = patches.last().unwrap();
    assert_eq!(last["series"]["count"], 1000);
    let event = &creates[0];
    assert_eq!(event.reason.as_deref(), Some("DriftWarned"));
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(
        event.reporting_controller.as_deref(),
        Some("drift-sentinel.k8s.io/webhook")
    );
    assert_eq!(
        event.reporting_instance.as_deref(),
        Some("drift-sentinel-0")
    );
    assert_eq!(
        event.regarding.as_ref().unwrap().uid.as_deref(),
        Some("u-1")
    );
    // The record in the last patch keeps the latest edits, the others counted.
    let record: EditRecord = serde_json::from_str(
        last["metadata"]["annotations"][EDITS_ANNOTATION]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(record.user, "alice");
    assert_eq!(record.edits.len() as u32 + record.omitted, 1000);
    assert!(
        drift_api::events::record_of(&{
            let mut e = (**event).clone();
            e.metadata.annotations.as_mut().unwrap().insert(
                EDITS_ANNOTATION.into(),
                last["metadata"]["annotations"][EDITS_ANNOTATION]
                    .as_str()
                    .unwrap()
                    .into(),
            );
            e
        })
        .is_some()
    );
}

#[test]
fn each_user_and_each_window_is_its_own_event() {
    let mut store = Store::new(reporter());
    store.observe(warned("alice", at(0.0)));
    store.observe(warned("bob", at(1.0)));
    let writes = flush(&mut store, at(2.0), Outcome::Done);
    assert_eq!(writes.len(), 2);
    // Past the window: a new Event, not a patch of the old one.
    store.observe(warned("alice", at(2.0 + SERIES_WINDOW.as_secs_f64() + 1.0)));
    let writes = flush(&mut store, at(400.0), Outcome::Done);
    assert!(
        matches!(writes.as_slice(), [Write::Create { .. }]),
        "{writes:?}"
    );
}

#[test]
fn a_failed_write_is_tried_again_after_a_backoff_and_a_gone_event_is_created_again() {
    let mut store = Store::new(reporter());
    store.observe(warned("alice", at(0.0)));
    assert_eq!(flush(&mut store, at(0.0), Outcome::Failed).len(), 1);
    assert!(store.due(at(0.5)).is_empty(), "backing off");
    assert_eq!(flush(&mut store, at(3.0), Outcome::Done).len(), 1);
    store.observe(warned("alice", at(4.0)));
    assert!(store.due(at(5.0)).is_empty(), "within the write interval");
    let writes = flush(&mut store, at(14.0), Outcome::Gone);
    assert!(matches!(writes.as_slice(), [Write::Patch { .. }]));
    match store.due(at(15.0)).as_slice() {
        [Write::Create { event, .. }] => {
            assert_eq!(event.series.as_ref().unwrap().count, 2);
            assert_eq!(record_of(event).edits.len(), 2);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_write_failing_every_time_is_given_up_and_counted() {
    let mut store = Store::new(reporter());
    store.observe(warned("alice", at(0.0)));
    let mut given_up = 0;
    let mut now = 0.0;
    for _ in 0..200 {
        for write in store.due(at(now)) {
            given_up += u32::from(store.written(&write, Outcome::Failed, at(now)));
        }
        now += 1.0;
    }
    assert_eq!(given_up, 1);
    assert!(store.due(at(now)).is_empty());
}

#[test]
fn an_edit_under_a_bypass_names_who_set_it() {
    let mut store = Store::new(reporter());
    let bypassed = |user: &str, set_here: bool, time| {
        let mut intent = warned(user, time);
        intent.type_ = EventType::Normal;
        intent.reason = drift_api::events::reason::BYPASS_USED;
        intent.note = Note::Latest(format!("{user} edited this object under the bypass"));
        let set_by = set_here.then(|| user.to_owned());
        intent.record.as_mut().unwrap().0 = Why::Bypass {
            end: Some("2057-01-15T08:00:00Z".into()),
            set_by,
        };
        let owner = drift_engine::managed::EntryStamp {
            manager: "kubectl-annotate".into(),
            operation: "Update".into(),
            subresource: String::new(),
            time: Some("2027-01-15T08:00:00Z".into()),
        };
        intent.bypass = Some(BypassSeen {
            value: "2057-01-15T08:00:00Z".into(),
            set_here,
            owner: Some(owner.clone()),
            owner_before: (!set_here).then_some(owner),
        });
        intent
    };
    store.observe(bypassed("bob", true, at(0.0)));
    store.observe(bypassed("alice", false, at(5.0)));
    let writes = flush(&mut store, at(6.0), Outcome::Done);
    let alice = writes
        .iter()
        .find_map(|w| match w {
            Write::Create { event, .. } if record_of(event).user == "alice" => Some(event),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        record_of(alice).why,
        Why::Bypass {
            end: Some("2057-01-15T08:00:00Z".into()),
            set_by: Some("bob".into())
        }
    );
    assert!(
        alice
            .note
            .as_ref()
            .unwrap()
            .ends_with("the bypass was set by bob")
    );
}

#[test]
fn denials_are_counted_on_the_rule() {
    let mut store = Store::new(reporter());
    for i in 0..3 {
        let mut intent = warned("alice", at(f64::from(i)));
        intent.regarding = Regarding {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "ops".into(),
            name: "web".into(),
            uid: String::new(),
        };
        intent.reason = drift_api::events::reason::DRIFT_DENIED;
        intent.user = String::new();
        intent.record = None;
        intent.note = Note::Counted {
            what: "edits this rule denied",
            last: format!("Deployment shop/web-{i} by alice: spec.replicas: 3 → 5"),
        };
        store.observe(intent);
        if i == 0 {
            match flush(&mut store, at(0.5), Outcome::Done).as_slice() {
                [Write::Create { event, .. }] => {
                    assert_eq!(
                        event.note.as_deref(),
                        Some(
                            "edits this rule denied; the first: Deployment shop/web-0 by alice: spec.replicas: 3 → 5; series.count counts them, annotation drift-sentinel.k8s.io/last-denied names the last"
                        )
                    );
                    assert!(event.regarding.as_ref().unwrap().uid.is_none());
                    let annotations = event.metadata.annotations.as_ref().unwrap();
                    assert!(!annotations.contains_key(EDITS_ANNOTATION));
                }
                other => panic!("{other:?}"),
            }
        }
    }
    // The note cannot change: the count and the last go into the series and the annotation.
    match flush(&mut store, at(12.0), Outcome::Done).as_slice() {
        [Write::Patch { patch, .. }] => {
            assert_eq!(patch["series"]["count"], 3);
            assert!(patch.get("note").is_none());
            assert_eq!(
                patch["metadata"]["annotations"]["drift-sentinel.k8s.io/last-denied"],
                "Deployment shop/web-2 by alice: spec.replicas: 3 → 5"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_series_kept_are_bounded() {
    let mut store = Store::new(reporter());
    for i in 0..MAX_SERIES {
        assert!(store.observe(warned(&format!("user-{i}"), at(0.0))));
    }
    // Every series has its first write pending: no room.
    assert!(!store.observe(warned("one-more", at(0.0))));
    for write in store.due(at(1.0)) {
        store.written(&write, Outcome::Done, at(1.0));
    }
    assert!(store.observe(warned("one-more", at(2.0))));
    assert_eq!(store.series.len(), MAX_SERIES);
}

/// A warned edit of `fields` changed fields whose paths are `path_bytes` long each: an edit
/// record of about `fields × path_bytes` bytes.
fn large(user: &str, fields: usize, path_bytes: usize, time: SystemTime) -> Intent {
    let mut intent = warned(user, time);
    if let Some((_, edit)) = &mut intent.record {
        edit.fields = (0..fields)
            .map(|i| RecordedField {
                path: format!("{i:04}{}", "p".repeat(path_bytes.saturating_sub(4))),
                new: Some("sha256:00".into()),
            })
            .collect();
    }
    intent
}

/// The kept bytes are what the kept series weigh, within the budget.
fn assert_bounded(store: &Store) {
    let weighed: usize = store.series.iter().map(|(k, s)| s.weigh(k)).sum();
    assert_eq!(store.kept_bytes, weighed);
    assert!(store.series.len() <= store.max_series);
    assert!(
        store.kept_bytes <= store.max_bytes,
        "{} bytes kept",
        store.kept_bytes
    );
}

#[test]
fn the_bytes_kept_are_bounded_and_the_newest_series_survive() {
    // (users, fields per edit, path bytes, repeats per user, flush every n findings)
    let rows = [
        // ~16 KiB records, one edit each (in the record and the latest finding): about 500
        // fit the budget.
        (2_000, 20, 800, 1, 10),
        // Each series grows to 8 edits of ~16 KiB, written once a user is done: about 110 fit.
        (400, 20, 800, 8, 8),
        // Small records: the number of series binds, not the bytes.
        (MAX_SERIES + 500, 1, 16, 1, 50),
    ];
    for (users, fields, path_bytes, repeats, flush_every) in rows {
        let mut store = Store::new(reporter());
        let mut findings = 0usize;
        for i in 0..users {
            for r in 0..repeats {
                let t = at(i as f64 * 0.01 + r as f64 * 0.001);
                let kept = store.observe(large(&format!("user-{i}"), fields, path_bytes, t));
                assert!(kept, "row {users}×{fields}×{path_bytes}: user-{i} dropped");
                assert_bounded(&store);
                findings += 1;
                if findings.is_multiple_of(flush_every) {
                    flush(&mut store, t, Outcome::Done);
                }
            }
        }
        let newest = (users - 20..users).map(|i| format!("user-{i}"));
        for user in newest {
            assert!(
                store.series.keys().any(|k| k.user == user),
                "row {users}×{fields}×{path_bytes}: {user} was not kept"
            );
        }
        assert!(store.series.len() < users, "nothing was forgotten");
    }
}

#[test]
fn with_every_series_pending_a_finding_past_the_budget_is_dropped() {
    let mut store = Store::new(reporter());
    let mut dropped = 0;
    for i in 0..1_000 {
        if !store.observe(large(&format!("user-{i}"), 20, 800, at(0.0))) {
            dropped += 1;
        }
        assert_bounded(&store);
    }
    // Nothing written yet: the series kept are the first, and the rest were dropped (counted).
    assert!(dropped > 0);
    assert!(store.series.keys().any(|k| k.user == "user-0"));
    assert!(!store.series.keys().any(|k| k.user == "user-999"));
    // A repeat that would make a kept series heavier is dropped too, and leaves it as it was.
    let before = store.kept_bytes;
    let count = |store: &Store| {
        store
            .series
            .iter()
            .find(|(k, _)| k.user == "user-0")
            .map(|(_, s)| s.count)
    };
    if !store.observe(large("user-0", 20, 800, at(1.0))) {
        assert_eq!(store.kept_bytes, before);
        assert_eq!(count(&store), Some(1));
    }
    assert_bounded(&store);
    // Once written, the oldest make room for the newest.
    flush(&mut store, at(2.0), Outcome::Done);
    assert!(store.observe(large("user-999", 20, 800, at(3.0))));
    assert!(store.series.keys().any(|k| k.user == "user-999"));
    assert_bounded(&store);
    // Forgotten past their window: nothing is counted any more.
    flush(&mut store, at(3.0), Outcome::Done);
    store.due(at(10.0 + SERIES_WINDOW.as_secs_f64()));
    assert!(store.series.is_empty());
    assert_eq!(store.kept_bytes, 0);
}

/// The index of the series that may be forgotten holds exactly the kept series with no write
/// pending, each once, at its last observation and id.
fn assert_index_agrees(store: &Store) {
    let expected: std::collections::BTreeMap<(SystemTime, u64), &Key> = store
        .series
        .iter()
        .filter(|(_, s)| !s.pending())
        .map(|(k, s)| ((s.last, s.id), k.as_ref()))
        .collect();
    let unpending = store.series.values().filter(|s| !s.pending()).count();
    assert_eq!(expected.len(), unpending, "two series share an index entry");
    let actual: std::collections::BTreeMap<(SystemTime, u64), &Key> = store
        .evictable
        .iter()
        .map(|(entry, k)| (*entry, k.as_ref()))
        .collect();
    assert_eq!(actual, expected);
}

/// What happens to a store: a finding of one of a few users (small, or large), or the due
/// writes answered, some of them, one way.
#[derive(Debug, Clone)]
enum Step {
    Observe { user: u8, large: bool, back: u16 },
    Flush { outcome: u8, every: u8 },
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        3 => (0..40u8, any::<bool>(), 0..30u16)
            .prop_map(|(user, large, back)| Step::Observe { user, large, back }),
        1 => (0..3u8, 1..4u8).prop_map(|(outcome, every)| Step::Flush { outcome, every }),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    #[test]
    fn the_index_of_forgettable_series_always_agrees_with_the_series(
        steps in proptest::collection::vec((step(), 0..200u16), 1..160),
    ) {
        // Room for 12 series and about 8 large ones: both bounds are reached in a few steps.
        let mut store = Store {
            max_series: 12,
            max_bytes: 8 * large("user-0", 4, 256, at(0.0)).weight() * 3,
            ..Store::new(reporter())
        };
        let mut now = 0.0;
        for (step, advance) in steps {
            // Time moves on by up to 200 s a step: past a series' window now and then.
            now += f64::from(advance);
            match step {
                Step::Observe { user, large: big, back } => {
                    // Findings may arrive a little out of order.
                    let t = at((now - f64::from(back)).max(0.0));
                    let user = format!("user-{user}");
                    let intent = if big { large(&user, 4, 256, t) } else { warned(&user, t) };
                    store.observe(intent);
                }
                Step::Flush { outcome, every } => {
                    let outcome = [Outcome::Done, Outcome::Gone, Outcome::Failed][usize::from(outcome)];
                    let writes = store.due(at(now));
                    for write in writes.iter().step_by(usize::from(every)) {
                        store.written(write, outcome, at(now));
                    }
                }
            }
            assert_index_agrees(&store);
            assert_bounded(&store);
        }
    }
}

/// Reference §8 "Memory" and "Trust": the audit's `DriftDetected` Event carries what it
/// attributed from records, its `Bypassed` Event who set the bypass (label and annotation) and,
/// with a key, its signature over the object's uid and the text; created with it and patched
/// with each repeat; a repeat without any takes the label, the annotation and the signature
/// away. Without a key: no signature.
#[test]
fn an_audit_event_carries_the_audits_memory_signed() {
    use drift_api::events::reason::{BYPASSED, DRIFT_DETECTED};
    use drift_api::events::signature::{Verification, signing_key_of_seed};
    let key = signing_key_of_seed(&[5; 32]).unwrap();
    let verification = Verification::of_key(key.verifying_key());
    for (reason, memory) in [
        (DRIFT_DETECTED, MemoryAnnotation::WHO_RECORDED),
        (BYPASSED, MemoryAnnotation::BYPASS_SETTER),
    ] {
        let signed = |annotations: &Value, text: &str| {
            let signature = annotations[memory.signature].as_str();
            verification.property(memory.name, "u-1", text, signature)
        };
        let audited = |remembered: Option<&str>, time| {
            let mut intent = warned("", time);
            intent.reason = reason;
            intent.record = None;
            intent.distinct = Some("drift".into());
            intent.memory = remembered.map(str::to_owned);
            intent
        };
        for signing_key in [Some(Arc::new(key.clone())), None] {
            let with_key = signing_key.is_some();
            let mut store = Store::new(Reporter {
                controller: drift_api::events::AUDIT_CONTROLLER,
                signing_key,
                ..reporter()
            });
            store.observe(audited(Some("[alice]"), at(0.0)));
            let writes = flush(&mut store, at(0.5), Outcome::Done);
            let [Write::Create { event, .. }] = writes.as_slice() else {
                panic!("{writes:?}")
            };
            assert_eq!(
                event.metadata.labels.as_ref().unwrap()[AUDIT_MEMORY_LABEL],
                AUDIT_MEMORY_VERSION
            );
            let annotations = serde_json::to_value(event.metadata.annotations.as_ref()).unwrap();
            assert_eq!(annotations[memory.name], "[alice]", "{reason}");
            assert_eq!(signed(&annotations, "[alice]"), with_key, "{annotations}");
            assert_eq!(annotations.get(memory.signature).is_some(), with_key);
            // Only its own reason's memory annotation.
            assert_eq!(
                annotations.as_object().map(|a| a.len()),
                Some(1 + usize::from(with_key))
            );
            store.observe(audited(Some("[alice, bob]"), at(20.0)));
            let writes = flush(&mut store, at(20.5), Outcome::Done);
            let [Write::Patch { patch, .. }] = writes.as_slice() else {
                panic!("{writes:?}")
            };
            let annotations = &patch["metadata"]["annotations"];
            assert_eq!(annotations[memory.name], "[alice, bob]");
            assert_eq!(signed(annotations, "[alice, bob]"), with_key, "{patch}");
            assert!(!signed(annotations, "[alice]"), "{patch}");
            if !with_key {
                // No key: a signature left from an earlier write is removed.
                assert_eq!(annotations[memory.signature], Value::Null);
            }
            store.observe(audited(None, at(40.0)));
            let writes = flush(&mut store, at(40.5), Outcome::Done);
            let [Write::Patch { patch, .. }] = writes.as_slice() else {
                panic!("{writes:?}")
            };
            // JSON merge patch: a null removes.
            for (key, name) in [
                ("annotations", memory.name),
                ("annotations", memory.signature),
                ("labels", AUDIT_MEMORY_LABEL),
            ] {
                assert_eq!(
                    patch["metadata"][key].as_object().and_then(|m| m.get(name)),
                    Some(&Value::Null),
                    "{reason}: {patch}"
                );
            }
        }
    }
}
