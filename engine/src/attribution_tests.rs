use super::*;
use crate::json::{Document as _, RawDocument};
use crate::managed::owned_fields;
use drift_testkit::records::EditRecordBuilder;
use serde_json::json;

const T0: &str = "2026-03-01T10:00:00Z";
const T1: &str = "2026-03-01T10:05:00Z";
const T2: &str = "2026-03-01T10:10:00Z";

fn at(text: &str) -> SystemTime {
    crate::time::parse_rfc3339(text).unwrap()
}

/// A live Deployment whose `spec.replicas` and first container's image are owned as given.
fn live(replicas: u32, image: &str, replicas_owner: (&str, &str)) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "uid": "u-1", "managedFields": [
            {"manager": "kubectl-client-side-apply", "operation": "Update", "time": T0,
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {
                 "k:{\"name\":\"app\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}}},
            {"manager": replicas_owner.0, "operation": "Update", "time": replicas_owner.1,
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}
        ]},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "app", "image": image}]}}}
    })
}

fn fp(value: Value) -> Option<String> {
    fingerprint(Some(&value))
}

fn record(user: &str, why: Why, edits: Vec<RecordedEdit>) -> EditRecord {
    EditRecordBuilder::by(user).why(why).edits(edits).build()
}

fn edit(seen: &str, stamp: (&str, &str), fields: &[(&str, Value)]) -> RecordedEdit {
    RecordedEdit {
        seen: seen.into(),
        manager: Some(stamp.0.into()),
        time: Some(stamp.1.into()),
        fields: fields
            .iter()
            .map(|(path, value)| RecordedField {
                path: (*path).into(),
                new: fp(value.clone()),
            })
            .collect(),
        fields_omitted: 0,
    }
}

fn coverage() -> Result<Coverage, &'static str> {
    Ok(Coverage {
        since: at("2026-03-01T09:00:00Z"),
        read_at: at("2026-03-01T11:00:00Z"),
    })
}

fn attribute_with(
    object: &Value,
    path: &str,
    records: &[EditRecord],
    remembered: &[Remembered],
    interception: &Interception,
    coverage: Result<Coverage, &str>,
) -> Attribution {
    let owned = owned_fields(object);
    let evidence = Evidence {
        records,
        unverified: Unverified::default(),
        remembered,
        interception,
        coverage,
    };
    attribute(object, &FieldPath::parse(path).unwrap(), &owned, &evidence).attribution
}

fn simply(object: &Value, path: &str, records: &[EditRecord]) -> Attribution {
    attribute_with(
        object,
        path,
        records,
        &[],
        &Interception::Intercepted,
        coverage(),
    )
}

/// The digits are SHA-256's of the canonical form, lowercase, as the audit compares them
/// with records written before (`printf '#5;' | sha256sum`).
#[test]
fn a_fingerprint_is_the_digest_of_the_canonical_form() {
    for (value, canonical_digest) in [
        (json!(5), "ccd40383b1dd90d8854b3930f8f929d6"),
        (json!("ab"), "740aa1c3020468189320a550515474b7"),
        (
            json!({"b": 1, "a": "x"}),
            "f32fe6e0bd1381fe064d812465d536c8",
        ),
    ] {
        assert_eq!(
            fp(value.clone()),
            Some(format!("sha256:{canonical_digest}")),
            "{value}"
        );
    }
}

#[test]
fn a_fingerprint_is_the_same_for_text_and_document_and_key_order() {
    let text = r#"{"b": [1, 2.5, "x", null, true], "a": {"z": 1e3, "y": "é"}}"#;
    let raw: &serde_json::value::RawValue = serde_json::from_str(text).unwrap();
    let document = RawDocument::new(raw);
    let from_text = fingerprint(Some(document.node()));
    let reordered = json!({"a": {"y": "é", "z": 1e3}, "b": [1, 2.5, "x", null, true]});
    assert_eq!(from_text, fp(reordered));
    assert!(from_text.as_deref().unwrap().starts_with("sha256:"));
    assert_eq!(from_text.as_deref().unwrap().len(), 7 + 32);
    let different = [
        json!({"a": {"y": "é", "z": 1001}, "b": [1, 2.5, "x", null, true]}),
        json!({"a": {"y": "é", "z": 1e3}, "b": [2.5, 1, "x", null, true]}),
        json!({"a": {"y": "é", "z": 1e3}, "b": [1, 2.5, "x", null, false]}),
        json!("1"),
        json!(1),
        json!(["ab"]),
        json!(["a", "b"]),
    ];
    for value in different {
        assert_ne!(fp(value.clone()), from_text, "{value}");
    }
    assert_ne!(fp(json!(["ab"])), fp(json!(["a", "b"])));
    assert_eq!(fingerprint::<&Value>(None).as_deref(), Some(ABSENT));
    assert_eq!(fp(Value::Null).as_deref(), Some(ABSENT));
    // Too long to fingerprint: none, whatever it is.
    let long = json!("x".repeat(MAX_FINGERPRINTED_BYTES + 1));
    assert_eq!(fp(long), None);
}

#[test]
fn a_recorded_edit_whose_value_is_live_names_its_user() {
    let object = live(5, "web:1", ("kubectl-edit", T1));
    let records = [record(
        "alice",
        Why::WarnMode,
        vec![edit(
            "2026-03-01T10:05:00.100000Z",
            ("kubectl-edit", T1),
            &[("spec.replicas", json!(5))],
        )],
    )];
    let got = simply(&object, "spec.replicas", &records);
    assert_eq!(got.user.as_deref(), Some("alice"));
    assert_eq!(got.why, Why::WarnMode);
    assert_eq!(got.rule.as_deref(), Some("drift-system/web"));
    assert_eq!(got.to_string(), "user alice, warn mode");
    // A field the record did not touch is not its.
    let image = simply(&object, "spec.template.spec.containers[0].image", &records);
    assert_eq!(image.user, None);
}

#[test]
fn the_latest_record_decides_and_a_later_unrecorded_value_is_not_seen() {
    let alice = record(
        "alice",
        Why::WarnMode,
        vec![edit(
            "2026-03-01T10:05:00.000000Z",
            ("kubectl-edit", T1),
            &[("spec.replicas", json!(5))],
        )],
    );
    let bob = record(
        "bob",
        Why::DryRunMode,
        vec![edit(
            "2026-03-01T10:10:00.000000Z",
            ("kubectl-patch", T2),
            &[("spec.replicas", json!(7))],
        )],
    );
    let records = [alice, bob];
    let seven = live(7, "web:1", ("kubectl-patch", T2));
    assert_eq!(
        simply(&seven, "spec.replicas", &records).user.as_deref(),
        Some("bob")
    );
    // Five again, after bob's seven: made by an edit the webhook has no record of.
    let five = live(5, "web:1", ("kubectl-edit", "2026-03-01T10:20:00Z"));
    let got = simply(&five, "spec.replicas", &records);
    assert_eq!(got.user, None);
    assert_eq!(got.why, Why::NotSeen);
    assert_eq!(
        got.to_string(),
        "user unknown: the webhook did not see this edit"
    );
}

#[test]
fn a_record_of_a_whole_element_or_of_a_part_covers_the_drifted_path() {
    let mut object = live(2, "web:2", ("kubectl-client-side-apply", T0));
    let element = object["spec"]["template"]["spec"]["containers"][0].clone();
    let whole = [record(
        "carol",
        Why::WarnMode,
        vec![edit(
            "2026-03-01T10:05:00.000000Z",
            ("kubectl-edit", T1),
            &[("spec.template.spec.containers[0]", element)],
        )],
    )];
    assert_eq!(
        simply(&object, "spec.template.spec.containers[0].image", &whole)
            .user
            .as_deref(),
        Some("carol")
    );
    let part = [record(
        "dan",
        Why::WarnMode,
        vec![edit(
            "2026-03-01T10:05:00.000000Z",
            ("kubectl-set", T1),
            &[("spec.template.spec.containers[0].image", json!("web:2"))],
        )],
    )];
    assert_eq!(
        simply(&object, "spec.template.spec.containers[0]", &part)
            .user
            .as_deref(),
        Some("dan")
    );
    object["spec"]["template"]["spec"]["containers"][0]["image"] = json!("web:3");
    assert_eq!(
        simply(&object, "spec.template.spec.containers[0]", &part).why,
        Why::NotSeen
    );
}

#[test]
fn an_edit_recorded_without_fields_counts_only_by_its_exact_managed_fields_entry() {
    let bypass = Why::Bypass {
        end: Some("2026-03-02T00:00:00Z".into()),
        set_by: Some("erin".into()),
    };
    let records = [record(
        "erin",
        bypass.clone(),
        vec![edit(
            "2026-03-01T10:05:00.000000Z",
            ("kubectl-patch", T1),
            &[],
        )],
    )];
    let owned_by_it = live(5, "web:1", ("kubectl-patch", T1));
    let got = simply(&owned_by_it, "spec.replicas", &records);
    assert_eq!(got.user.as_deref(), Some("erin"));
    assert_eq!(got.why, bypass);
    assert_eq!(
        got.to_string(),
        "user erin, bypass until 2026-03-02T00:00:00Z, set by erin"
    );
    // The same manager a second later: another edit.
    let later = live(5, "web:1", ("kubectl-patch", "2026-03-01T10:05:01Z"));
    assert_eq!(simply(&later, "spec.replicas", &records).why, Why::NotSeen);
    // A record with the value beats one without fields.
    let mut both = records.to_vec();
    both.push(record(
        "frank",
        Why::WarnMode,
        vec![edit(
            "2026-03-01T10:00:00.000000Z",
            ("kubectl-edit", T0),
            &[("spec.replicas", json!(5))],
        )],
    ));
    assert_eq!(
        simply(&owned_by_it, "spec.replicas", &both).user.as_deref(),
        Some("frank")
    );
}

#[test]
fn without_a_record_the_user_is_unknown_and_the_why_says_so() {
    let edited_at = |time: &str| live(5, "web:1", ("kubectl-edit", time));
    let intercepted = Interception::Intercepted;
    let cases: Vec<(Value, Interception, Result<Coverage, &str>, Why)> = vec![
        (
            edited_at(T1),
            Interception::Outside("its namespaceSelector does not select namespace shop".into()),
            coverage(),
            Why::OutsideWebhook {
                detail: "its namespaceSelector does not select namespace shop".into(),
            },
        ),
        (edited_at(T1), intercepted.clone(), coverage(), Why::NotSeen),
        (
            edited_at("2026-03-01T08:00:00Z"),
            intercepted.clone(),
            coverage(),
            Why::Unknown {
                detail: "no record of this edit (kubectl-edit at 2026-03-01T08:00:00Z): it came before the webhook's records were read (since 2026-03-01T09:00:00Z)".into(),
            },
        ),
        (
            edited_at("2026-03-01T10:59:50Z"),
            intercepted.clone(),
            coverage(),
            Why::Unknown {
                detail: "no record of this edit (kubectl-edit at 2026-03-01T10:59:50Z) yet: it is too recent for the webhook's record to be written".into(),
            },
        ),
        (
            edited_at(T1),
            intercepted.clone(),
            Err("events.k8s.io is forbidden"),
            Why::Unknown {
                detail: "the webhook's records of edits could not be read: events.k8s.io is forbidden".into(),
            },
        ),
    ];
    for (object, interception, coverage, want) in cases {
        let got = attribute_with(&object, "spec.replicas", &[], &[], &interception, coverage);
        assert_eq!(got.user, None);
        assert_eq!(got.why, want);
    }
    // `kubectl scale` writes no time: whether the webhook would have recorded it is not known.
    let mut scaled = edited_at(T1);
    scaled["metadata"]["managedFields"][1]
        .as_object_mut()
        .unwrap()
        .remove("time");
    assert!(matches!(
        attribute_with(&scaled, "spec.replicas", &[], &[], &intercepted, coverage()).why,
        Why::Unknown { detail } if detail.contains("has no time")
    ));
}

#[test]
fn what_a_run_attributed_is_kept_for_the_same_live_value() {
    let object = live(5, "web:1", ("kubectl-edit", T1));
    let records = [record(
        "alice",
        Why::WarnMode,
        vec![edit(
            "2026-03-01T10:05:00.000000Z",
            ("kubectl-edit", T1),
            &[("spec.replicas", json!(5))],
        )],
    )];
    let owned = owned_fields(&object);
    let path = FieldPath::parse("spec.replicas").unwrap();
    let intercepted = Interception::Intercepted;
    let evidence = Evidence {
        records: &records,
        unverified: Unverified::default(),
        remembered: &[],
        interception: &intercepted,
        coverage: coverage(),
    };
    let first = attribute(&object, &path, &owned, &evidence);
    let remembered = [first.remember(&path).unwrap()];
    // The Event has expired: the memory answers for the same value …
    let later = attribute_with(
        &object,
        "spec.replicas",
        &[],
        &remembered,
        &intercepted,
        coverage(),
    );
    assert_eq!(later, first.attribution);
    // … and not for another one.
    let changed = live(6, "web:1", ("kubectl-edit", T2));
    assert_eq!(
        attribute_with(
            &changed,
            "spec.replicas",
            &[],
            &remembered,
            &intercepted,
            coverage()
        )
        .why,
        Why::NotSeen
    );
    // The audit's own conclusions are not kept: they are drawn again.
    let not_seen = attribute(
        &changed,
        &path,
        &owned_fields(&changed),
        &Evidence {
            records: &[],
            ..evidence
        },
    );
    assert_eq!(not_seen.remember(&path), None);
}

#[test]
fn a_record_keeps_its_latest_edits_and_drops_superseded_ones_first() {
    let mut r = record("alice", Why::WarnMode, Vec::new());
    for n in 0..MAX_RECORDED_EDITS {
        r.push(edit(
            &format!("2026-03-01T10:00:0{n}.000000Z"),
            ("kubectl-edit", T0),
            &[(
                if n == 1 {
                    "spec.paused"
                } else {
                    "spec.replicas"
                },
                json!(n),
            )],
        ));
    }
    assert_eq!(r.edits.len(), MAX_RECORDED_EDITS);
    r.push(edit(
        "2026-03-01T10:00:09.000000Z",
        ("kubectl-edit", T0),
        &[("spec.replicas", json!(9))],
    ));
    assert_eq!(r.edits.len(), MAX_RECORDED_EDITS);
    assert_eq!(r.omitted, 1);
    // The first replicas edit went; the only paused edit stays.
    assert!(r.edits.iter().any(|e| e.fields[0].path == "spec.paused"));
    assert_eq!(r.edits[0].fields[0].path, "spec.paused");
    assert_eq!(r.edits.last().unwrap().seen, "2026-03-01T10:00:09.000000Z");
}

#[test]
fn records_are_read_strictly() {
    let r = record(
        "alice",
        Why::Bypass {
            end: None,
            set_by: None,
        },
        vec![edit(
            "2026-03-01T10:00:00.000000Z",
            ("kubectl-edit", T0),
            &[],
        )],
    );
    let text = serde_json::to_string(&r).unwrap();
    assert_eq!(
        text,
        r#"{"v":1,"uid":"u-1","user":"alice","why":{"kind":"bypass"},"rule":"drift-system/web","edits":[{"seen":"2026-03-01T10:00:00.000000Z","manager":"kubectl-edit","time":"2026-03-01T10:00:00Z"}]}"#
    );
    assert_eq!(serde_json::from_str::<EditRecord>(&text).unwrap(), r);
    assert!(r.is_valid());
    let unknown_field = text.replace(r#""v":1"#, r#""v":1,"extra":true"#);
    assert!(serde_json::from_str::<EditRecord>(&unknown_field).is_err());
    let mut not_recorded = r.clone();
    not_recorded.why = Why::NotSeen;
    assert!(!not_recorded.is_valid());
    let mut other_version = r;
    other_version.v = 2;
    assert!(!other_version.is_valid());
}

#[test]
fn long_user_names_are_cut_and_say_so() {
    assert_eq!(bounded_user("alice"), "alice");
    let long = "é".repeat(400);
    let cut = bounded_user(&long);
    assert!(cut.len() <= MAX_USER_BYTES, "{}", cut.len());
    assert!(cut.ends_with("…(cut from 800 bytes)"), "{cut}");
    assert!(cut.starts_with("éé"));
}

#[test]
fn rendered_paths_parse_back() {
    for text in [
        "spec.replicas",
        "spec.template.spec.containers[12].image",
        "metadata.annotations['kubernetes.io/change-cause']",
        "metadata.labels['*']",
        "metadata.labels['a.b']",
    ] {
        let path = FieldPath::parse(text).unwrap();
        assert_eq!(path.to_string(), text);
    }
    for text in [
        "<root>",
        "spec.*",
        "spec[*]",
        "",
        "spec..x",
        "['spec'].replicas",
    ] {
        assert_eq!(FieldPath::parse(text), None, "{text}");
    }
}

#[test]
fn the_bypass_setter_comes_from_the_record_of_the_edit_that_wrote_the_annotations_entry() {
    let bypass = |set_by: Option<&str>| Why::Bypass {
        end: None,
        set_by: set_by.map(str::to_owned),
    };
    let t1 = "2026-12-06T09:00:00Z";
    let t2 = "2026-12-06T09:05:00Z";
    // carol set it at t1; dave edited under it at t2 with the same manager (the entry's time
    // moved to t2): the webhook recorded dave's edit with the setter it saw, carol.
    let records = [
        record(
            "carol",
            bypass(Some("carol")),
            vec![edit("2026-12-06T09:00:00.1Z", ("kubectl-patch", t1), &[])],
        ),
        record(
            "dave",
            bypass(Some("carol")),
            vec![edit("2026-12-06T09:05:00.1Z", ("kubectl-patch", t2), &[])],
        ),
        // A warned edit by eve with the same stamp names no setter.
        record(
            "eve",
            Why::WarnMode,
            vec![edit("2026-12-06T09:05:00.2Z", ("kubectl-patch", t2), &[])],
        ),
    ];
    let cases = [
        (("kubectl-patch", t1), Some("carol")),
        (("kubectl-patch", t2), Some("carol")),
        // Another entry owns the annotation now: not known, never a guess.
        (("kubectl-annotate", t2), None),
        (("kubectl-patch", "2026-12-06T09:10:00Z"), None),
    ];
    for ((manager, time), want) in cases {
        assert_eq!(
            bypass_setter(&records, manager, time),
            want,
            "{manager} at {time}"
        );
    }
    // A record of a bypassed edit that did not see who set the bypass names nobody.
    let unknown = [record(
        "dave",
        bypass(None),
        vec![edit("2026-12-06T09:05:00.1Z", ("kubectl-patch", t2), &[])],
    )];
    assert_eq!(bypass_setter(&unknown, "kubectl-patch", t2), None);
}

/// A record that did not verify never names a user, and never becomes "not seen" either: the
/// field whose live value it claims is unknown, with why; a verified record explaining the value
/// still names its user; a field no record claims is judged as before.
#[test]
fn a_record_that_did_not_verify_names_no_user_and_is_no_absent_record() {
    let object = live(5, "web:1", ("kubectl-edit", T1));
    let owned = owned_fields(&object);
    let forged = [record(
        "alice",
        Why::WarnMode,
        vec![edit(
            T1,
            ("kubectl-edit", T1),
            &[("spec.replicas", json!(5))],
        )],
    )];
    let genuine = [record(
        "bob",
        Why::WarnMode,
        vec![edit(
            T1,
            ("kubectl-edit", T1),
            &[("spec.replicas", json!(5))],
        )],
    )];
    let stale = [record(
        "bob",
        Why::WarnMode,
        vec![edit(
            T1,
            ("kubectl-edit", T1),
            &[("spec.replicas", json!(3))],
        )],
    )];
    let reason = drift_api::events::signature::UNVERIFIED_RECORD;
    let unknown = || Attribution {
        user: None,
        why: Why::Unknown {
            detail: reason.to_owned(),
        },
        rule: None,
        seen: None,
    };
    // (case, verified records, unverified records, path, the attribution's user, its why)
    type Case<'c> = (
        &'c str,
        &'c [EditRecord],
        &'c [EditRecord],
        &'c str,
        Option<&'c str>,
        Why,
    );
    let cases: [Case<'_>; 5] = [
        (
            "forged only",
            &[],
            &forged,
            "spec.replicas",
            None,
            unknown().why,
        ),
        (
            "forged and genuine",
            &genuine,
            &forged,
            "spec.replicas",
            Some("bob"),
            Why::WarnMode,
        ),
        (
            "forged, genuine of another value",
            &stale,
            &forged,
            "spec.replicas",
            None,
            unknown().why,
        ),
        (
            "genuine of another value only",
            &stale,
            &[],
            "spec.replicas",
            None,
            Why::NotSeen,
        ),
        (
            "forged claims another field",
            &[],
            &forged,
            "spec.template.spec.containers[0].image",
            None,
            Why::NotSeen,
        ),
    ];
    for (case, records, unverified, path, user, why) in cases {
        let evidence = Evidence {
            records,
            unverified: Unverified {
                records: unverified,
                why: reason,
            },
            remembered: &[],
            interception: &Interception::Intercepted,
            coverage: coverage(),
        };
        let Some(path) = FieldPath::parse(path) else {
            panic!("{case}: {path}");
        };
        let got = attribute(&object, &path, &owned, &evidence);
        assert_eq!(got.attribution.user.as_deref(), user, "{case}");
        assert_eq!(got.attribution.why, why, "{case}");
        // What a record that did not verify said is never remembered.
        if user.is_none() {
            assert_eq!(got.remember(&path), None, "{case}");
        }
    }
}
