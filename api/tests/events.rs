//! The public reading and writing of Drift Sentinel's Events (`drift_api::events`, reference §6
//! "Events", §8 "Who and why", "Memory", "Trust"), with testkit's builders of records and
//! memory: the webhook's records, the audit's memory on its Events and in its Reports, and
//! their signatures.

use drift_api::events::*;
use drift_testkit::records::{EditRecordBuilder, RememberedBuilder, setter};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;

/// alice's record of her edit of `spec.replicas`.
fn record() -> EditRecord {
    EditRecordBuilder::alice()
        .time("2026-03-01T10:00:00Z")
        .field("spec.replicas", "sha256:00".to_owned())
        .build()
}

/// An Event of `controller` regarding `uid` whose annotations are `annotations`.
fn event(controller: &str, uid: &str, annotations: Vec<(String, String)>) -> Event {
    let mut event = Event {
        reporting_controller: Some(controller.into()),
        regarding: Some(ObjectReference {
            uid: Some(uid.into()),
            ..ObjectReference::default()
        }),
        ..Event::default()
    };
    if !annotations.is_empty() {
        event.metadata.annotations = Some(annotations.into_iter().collect());
    }
    event
}

/// An Event of `controller` regarding `uid` carrying the record text `text`, if any.
fn record_event(controller: &str, uid: &str, text: Option<String>) -> Event {
    let annotations = text.map(|text| (EDITS_ANNOTATION.to_owned(), text));
    event(controller, uid, annotations.into_iter().collect())
}

fn key(seed: u8) -> signature::SigningKey {
    signature::signing_key_of_seed(&[seed; 32]).unwrap()
}

fn verification() -> signature::Verification {
    signature::Verification::of_key(key(1).verifying_key())
}

/// An Event of the webhook regarding `uid` carrying `record`, signed by `signer`.
fn signed(uid: &str, record: &EditRecord, signer: Option<&signature::SigningKey>) -> Event {
    let text = record_annotation(record).unwrap();
    let mut event = record_event(WEBHOOK_CONTROLLER, uid, Some(text.clone()));
    if let Some(key) = signer {
        event.metadata.annotations.as_mut().unwrap().insert(
            signature::RECORD_SIGNATURE_ANNOTATION.to_owned(),
            signature::sign_record(key, &text),
        );
    }
    event
}

/// Reference §8 "Memory" and "Trust": each memory annotation of the audit's Events — who made
/// the drifted fields (`DriftDetected`) and who set a bypass (`Bypassed`) — is read back with
/// its one reader only from the audit's own Events about an object with a uid, and only with
/// this installation's signature over that uid, the annotation's name and the exact text:
/// forged, unsigned, another key's, copied to another object or signed as the other memory
/// annotation, it is unverified (counted, not read).
#[test]
fn the_memory_of_an_audit_event_is_read_back_only_from_the_audit_signed() {
    let alice = RememberedBuilder::alice()
        .value("sha256:00112233445566778899aabbccddeeff")
        .rule("ops/web")
        .seen("2026-12-06T10:00:00Z")
        .build();
    let unknown = RememberedBuilder::not_seen()
        .path("spec.paused")
        .value(&alice.value)
        .build();
    let who = who_recorded_property(&[alice.clone(), unknown]).unwrap();
    assert_eq!(who_recorded_of(&who), Some(vec![alice.clone()]));
    let carol = bypass_setter_text(&setter("carol")).unwrap();
    // (memory annotation, the other one, its text, the user it names, what is read back)
    let memories = [
        (
            MemoryAnnotation::WHO_RECORDED,
            MemoryAnnotation::BYPASS_SETTER,
            who,
            "alice",
            EventMemory::Remembered("u-1".to_owned(), vec![alice]),
        ),
        (
            MemoryAnnotation::BYPASS_SETTER,
            MemoryAnnotation::WHO_RECORDED,
            carol,
            "carol",
            EventMemory::Setter("u-1".into(), setter("carol")),
        ),
    ];
    for (memory, other, text, user, read) in memories {
        let genuine = memory.signed(Some(&key(1)), "u-1", &text);
        let mut forged = genuine.clone();
        forged[0].1 = text.replace(user, "mallory");
        let mut not_ed25519 = genuine.clone();
        not_ed25519[1].1 = "ed25519:AAAA".to_owned();
        let mut as_other = other.signed(Some(&key(1)), "u-1", &text);
        as_other[0].0 = memory.name.to_owned();
        as_other[1].0 = memory.signature.to_owned();
        let over = " ".repeat(MAX_WHO_RECORDED_BYTES) + &text;
        // (what, controller, regarded uid, annotations, what is read back)
        let cases = [
            (
                "genuine",
                AUDIT_CONTROLLER,
                "u-1",
                genuine.clone(),
                read.clone(),
            ),
            (
                "unsigned",
                AUDIT_CONTROLLER,
                "u-1",
                memory.signed(None, "u-1", &text),
                EventMemory::Unverified,
            ),
            (
                "another key's",
                AUDIT_CONTROLLER,
                "u-1",
                memory.signed(Some(&key(2)), "u-1", &text),
                EventMemory::Unverified,
            ),
            (
                "text altered after signing",
                AUDIT_CONTROLLER,
                "u-1",
                forged,
                EventMemory::Unverified,
            ),
            (
                "copied to another object",
                AUDIT_CONTROLLER,
                "u-2",
                genuine.clone(),
                EventMemory::Unverified,
            ),
            (
                "signature not ed25519",
                AUDIT_CONTROLLER,
                "u-1",
                not_ed25519,
                EventMemory::Unverified,
            ),
            (
                "signed as the other memory",
                AUDIT_CONTROLLER,
                "u-1",
                as_other,
                EventMemory::Unverified,
            ),
            (
                "the webhook's Event",
                WEBHOOK_CONTROLLER,
                "u-1",
                genuine.clone(),
                EventMemory::None,
            ),
            (
                "no object uid",
                AUDIT_CONTROLLER,
                "",
                memory.signed(Some(&key(1)), "", &text),
                EventMemory::None,
            ),
            (
                "signed, unreadable",
                AUDIT_CONTROLLER,
                "u-1",
                memory.signed(Some(&key(1)), "u-1", "[{"),
                EventMemory::None,
            ),
            (
                "signed, over its bound",
                AUDIT_CONTROLLER,
                "u-1",
                memory.signed(Some(&key(1)), "u-1", &over),
                EventMemory::None,
            ),
        ];
        for (what, controller, uid, annotations, expected) in cases {
            let event = event(controller, uid, annotations);
            let what = format!("{}: {what}", memory.name);
            assert_eq!(
                remembered_of_event(&event, &verification()),
                expected,
                "{what}"
            );
            // Without the public key it is never what a genuine Event reads back.
            let unavailable = signature::Verification::Unavailable("no key".into());
            assert_ne!(
                remembered_of_event(&event, &unavailable),
                read,
                "{what}, no key"
            );
        }
    }
}

#[test]
fn a_record_is_read_back_only_from_the_webhook_about_its_own_object() {
    let text = record_annotation(&record()).unwrap();
    assert_eq!(
        record_of(&record_event(WEBHOOK_CONTROLLER, "u-1", Some(text.clone()))),
        Some(record())
    );
    assert_eq!(
        record_of(&record_event(AUDIT_CONTROLLER, "u-1", Some(text.clone()))),
        None
    );
    assert_eq!(
        record_of(&record_event(WEBHOOK_CONTROLLER, "u-2", Some(text))),
        None
    );
    assert_eq!(
        record_of(&record_event(WEBHOOK_CONTROLLER, "u-1", None)),
        None
    );
    assert_eq!(
        record_of(&record_event(
            WEBHOOK_CONTROLLER,
            "u-1",
            Some("alice did it".into())
        )),
        None
    );
}

#[test]
fn the_reader_keeps_the_valid_records_of_each_page_within_its_bound() {
    let genuine = signed("u-1", &record(), Some(&key(1)));
    let other = record_event(AUDIT_CONTROLLER, "u-1", record_annotation(&record()));
    let mut reader = RecordReader::new(verification());
    reader.add_page(&[genuine.clone(), other], true).unwrap();
    reader
        .add_page(std::slice::from_ref(&genuine), false)
        .unwrap();
    assert_eq!(
        reader.into_records().verified["u-1"],
        vec![record(), record()]
    );

    // Exactly MAX_RECORDS, the last page: read. (Unsigned, so that the test does not spend
    // its time verifying: the bound counts every record read.)
    let unsigned = signed("u-1", &record(), None);
    let page = vec![unsigned.clone(); 500];
    let mut reader = RecordReader::new(verification());
    for n in 0..MAX_RECORDS / 500 {
        reader.add_page(&page, n + 1 < MAX_RECORDS / 500).unwrap();
    }
    assert_eq!(reader.into_records().unverified["u-1"].len(), MAX_RECORDS);
    // More than MAX_RECORDS: an error, nothing kept (an edit on an unread page is no
    // unseen edit).
    let mut reader = RecordReader::new(verification());
    let mut outcome = Ok(());
    for _ in 0..MAX_RECORDS / 500 {
        outcome = reader.add_page(&page, true);
        if outcome.is_err() {
            break;
        }
    }
    assert_eq!(outcome, Err(TooManyRecords));
    assert_eq!(reader.into_records().unverified_count(), 0);
    assert!(
        TooManyRecords
            .to_string()
            .contains("no edit can be called unseen")
    );
    // One page over the bound.
    let mut reader = RecordReader::new(verification());
    assert_eq!(
        reader.add_page(&vec![unsigned; MAX_RECORDS + 1], false),
        Err(TooManyRecords)
    );
}

/// Only a record signed with the installation's key over its exact text names a user; the
/// others are kept apart (never "no record").
#[test]
fn a_record_is_used_only_with_the_installations_signature() {
    // alice's signed record with its text replaced by `forged`'s (the signature stays).
    let forged = |forged: EditRecord| {
        let mut event = signed("u-1", &record(), Some(&key(1)));
        let text = record_annotation(&forged).unwrap();
        event
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(EDITS_ANNOTATION.to_owned(), text);
        event
    };
    let altered = forged(EditRecord {
        user: "mallory".into(),
        ..record()
    });
    // Copied to another object: its uid changed to the other's (the signature was over u-1).
    let mut copied = forged(EditRecord {
        uid: "u-2".into(),
        ..record()
    });
    copied.regarding.as_mut().unwrap().uid = Some("u-2".into());
    let mut garbled = signed("u-1", &record(), Some(&key(1)));
    garbled.metadata.annotations.as_mut().unwrap().insert(
        signature::RECORD_SIGNATURE_ANNOTATION.to_owned(),
        "ed25519:not-base64!".into(),
    );
    // (case, event, verifies, the uid it is kept under)
    let cases = [
        (
            "genuine",
            signed("u-1", &record(), Some(&key(1))),
            true,
            "u-1",
        ),
        ("unsigned", signed("u-1", &record(), None), false, "u-1"),
        (
            "another key's",
            signed("u-1", &record(), Some(&key(2))),
            false,
            "u-1",
        ),
        ("altered after signing", altered, false, "u-1"),
        ("copied to another object", copied, false, "u-2"),
        ("a signature that is none", garbled, false, "u-1"),
    ];
    for (case, event, verifies, uid) in cases {
        let mut reader = RecordReader::new(verification());
        reader.add_page(&[event], false).unwrap();
        let records = reader.into_records();
        let (kept, apart) = if verifies {
            (&records.verified, &records.unverified)
        } else {
            (&records.unverified, &records.verified)
        };
        assert_eq!(kept.get(uid).map(Vec::len), Some(1), "{case}");
        assert!(apart.is_empty(), "{case}");
        assert_eq!(records.unverified_count(), usize::from(!verifies), "{case}");
        assert_eq!(
            records.unverified_why,
            signature::UNVERIFIED_RECORD,
            "{case}"
        );
    }
    // Without a key nothing verifies, and the reason says why.
    let mut reader = RecordReader::new(signature::Verification::Unavailable("no key".into()));
    reader
        .add_page(&[signed("u-1", &record(), Some(&key(1)))], false)
        .unwrap();
    let records = reader.into_records();
    assert!(records.verified.is_empty());
    assert_eq!(
        records.unverified_why,
        "the webhook's records could not be verified: no key"
    );
}

/// A Report property is read back only with the installation's signature over the object's
/// uid and its exact text.
#[test]
fn a_report_property_is_read_back_only_when_signed() {
    let text = who_recorded_property(&[RememberedBuilder::alice().build()]).unwrap();
    let setter = bypass_setter_text(&setter("carol")).unwrap();
    let result = |uid: &str, properties: Vec<(String, String)>| {
        serde_json::json!({"resources": [{"uid": uid}],
            "properties": properties.into_iter().map(|(k, v)| (k, serde_json::Value::String(v))).collect::<serde_json::Map<_, _>>()})
    };
    let signed = |key: Option<&signature::SigningKey>, uid: &str, name: &str, text: &str| {
        signed_property(key, name, uid, text)
    };
    let forged_text = text.replace("alice", "mallory");
    let mut forged = signed(Some(&key(1)), "u-1", WHO_RECORDED_PROPERTY, &text);
    forged[0].1 = forged_text;
    // (case, result, fields read back, setters read back)
    let cases = [
        (
            "genuine",
            result(
                "u-1",
                signed(Some(&key(1)), "u-1", WHO_RECORDED_PROPERTY, &text),
            ),
            1,
            0,
        ),
        (
            "genuine setter",
            result(
                "u-1",
                signed(Some(&key(1)), "u-1", BYPASS_SETTER_PROPERTY, &setter),
            ),
            0,
            1,
        ),
        (
            "unsigned",
            result("u-1", signed(None, "u-1", WHO_RECORDED_PROPERTY, &text)),
            0,
            0,
        ),
        (
            "another key's",
            result(
                "u-1",
                signed(Some(&key(2)), "u-1", WHO_RECORDED_PROPERTY, &text),
            ),
            0,
            0,
        ),
        ("forged text", result("u-1", forged), 0, 0),
        (
            "copied to another object",
            result(
                "u-2",
                signed(Some(&key(1)), "u-1", WHO_RECORDED_PROPERTY, &text),
            ),
            0,
            0,
        ),
        (
            "a setter signed as who",
            result("u-1", {
                let mut p = signed(Some(&key(1)), "u-1", WHO_RECORDED_PROPERTY, &setter);
                p[0].0 = BYPASS_SETTER_PROPERTY.into();
                p[1].0 = signature::signature_property(BYPASS_SETTER_PROPERTY);
                p
            }),
            0,
            0,
        ),
    ];
    for (case, result, fields, setters) in cases {
        let report = serde_json::json!({ "results": [result] });
        let memory = remembered_of_report(&report, &verification());
        assert_eq!(memory.fields.len(), fields, "{case}");
        assert_eq!(memory.setters.len(), setters, "{case}");
        assert_eq!(memory.unverified, 1 - fields - setters, "{case}");
    }
}

#[test]
fn an_annotation_fits_its_bound_by_leaving_out_the_oldest_edits() {
    // 8 edits of 20 fields of 500 bytes each: over the bound.
    let mut edit = EditRecordBuilder::alice();
    for _ in 0..20 {
        edit = edit.field(&"p".repeat(500), "sha256:00".to_owned());
    }
    let edit = edit.build().edits.remove(0);
    let big = EditRecordBuilder::alice().edits(vec![edit; 8]).build();
    let text = record_annotation(&big).unwrap();
    assert!(text.len() <= MAX_RECORD_BYTES, "{}", text.len());
    let read: EditRecord = serde_json::from_str(&text).unwrap();
    assert_eq!(read.edits.len() as u32 + read.omitted, 8);
    assert!(read.omitted > 0);
}

/// Reference §8 "Memory": who set a bypass is written once (the Report property and the
/// `Bypassed` Event's annotation are the same JSON) and read back by the one reader, which
/// takes only a setter with a user and a time.
#[test]
fn a_bypass_setter_is_written_and_read_back_by_one_builder_and_reader() {
    let text = bypass_setter_text(&setter("carol")).unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&text).unwrap(),
        serde_json::json!({"manager": "kubectl-patch", "time": "2026-03-01T10:00:00Z", "user": "carol"})
    );
    assert_eq!(bypass_setter_of(&text), Some(setter("carol")));
    for unreadable in [
        "",
        "{",
        r#"{"manager": "kubectl-patch", "time": "2026-03-01T10:00:00Z"}"#,
        r#"{"manager": "kubectl-patch", "time": "2026-03-01T10:00:00Z", "user": ""}"#,
        r#"{"manager": "kubectl-patch", "time": "", "user": "carol"}"#,
    ] {
        assert_eq!(bypass_setter_of(unreadable), None, "{unreadable}");
    }
    let over = text.clone() + &" ".repeat(MAX_WHO_RECORDED_BYTES);
    assert_eq!(bypass_setter_of(&over), None);
    assert_eq!(
        MemoryAnnotation::of_reason(reason::BYPASSED),
        Some(MemoryAnnotation::BYPASS_SETTER)
    );
    assert_eq!(
        MemoryAnnotation::of_reason(reason::DRIFT_DETECTED),
        Some(MemoryAnnotation::WHO_RECORDED)
    );
    assert_eq!(MemoryAnnotation::of_reason(reason::BYPASS_USED), None);
    // The signature annotations are their memory annotation's name and `-signature`.
    for memory in [
        MemoryAnnotation::WHO_RECORDED,
        MemoryAnnotation::BYPASS_SETTER,
    ] {
        assert_eq!(memory.signature, format!("{}-signature", memory.name));
    }
}
