//! `RawJson` read against the parsed document of the same text: every question the engine
//! asks gets the same answer from both.

use proptest::prelude::*;
use serde_json::Value;

use super::*;
use crate::json::{MapView, Node};

/// Read as the agent reads a request's objects: within a document, with its index of brackets.
fn raw(text: &str) -> RawJson<'_> {
    let value: &RawValue = serde_json::from_str(text).expect("valid JSON");
    Box::leak(Box::new(RawDocument::new(value))).node()
}

/// Read without an index: every container is scanned for its end.
fn scanned(text: &str) -> RawJson<'_> {
    RawJson::from_valid(text)
}

fn parsed(text: &str) -> Value {
    serde_json::from_str(text).expect("valid JSON")
}

/// Arbitrary JSON documents, with the keys, escapes and whitespace that trip scanners.
fn document() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("a".to_owned()),
        Just("b".to_owned()),
        Just("name".to_owned()),
        Just("q\"uote".to_owned()),
        Just("back\\slash".to_owned()),
        Just("brace}[".to_owned()),
        Just("é".to_owned()),
        "[a-c]{0,3}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "[a-z\"\\\\{}\\[\\],: é\n]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 40, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..5)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

/// The same document as compact text, pretty text, or with `\u` escapes.
fn spellings(value: &Value) -> Vec<String> {
    let compact = value.to_string();
    let escaped = compact.replace('a', "\\u0061");
    // `\u0061` is only valid inside strings; `a` only ever appears inside them in JSON text
    // apart from `false`, which the replacement would break.
    let mut out = vec![
        compact.clone(),
        serde_json::to_string_pretty(value).unwrap_or_default(),
    ];
    if !compact.contains("false") {
        out.push(escaped);
    }
    out
}

fn assert_same(raw: RawJson<'_>, value: &Value) {
    assert_eq!(raw.shape(), value.shape(), "{raw:?}");
    assert_eq!(raw.is_absent(), value.is_absent(), "{raw:?}");
    assert_eq!(raw.to_value().as_ref(), value, "{raw:?}");
    assert_eq!(Node::as_str(raw), Node::as_str(value), "{raw:?}");
    match (raw.as_map(), value.as_map()) {
        (Some(r), Some(v)) => {
            assert_eq!(r.len(), MapView::len(&v));
            for ((rk, rv), (vk, vv)) in r.iter().zip(MapView::iter(&v)) {
                assert_eq!(rk, vk);
                assert_same(rv, vv);
                assert_same(raw.get(&rk).expect("key"), vv);
                assert_same(r.get(&rk).expect("key"), vv);
            }
        }
        (None, None) => {}
        _ => panic!("map mismatch at {raw:?}"),
    }
    match (raw.items(), value.items()) {
        (Some(r), Some(v)) => {
            let r: Vec<_> = r.collect();
            assert_eq!(r.len(), v.len());
            for (ri, vi) in r.into_iter().zip(v) {
                assert_same(ri, vi);
            }
        }
        (None, None) => {}
        _ => panic!("list mismatch at {raw:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn raw_reads_as_the_parsed_document(value in document()) {
        for text in spellings(&value) {
            assert_same(raw(&text), &parsed(&text));
            assert_same(scanned(&text), &parsed(&text));
        }
    }
}

#[test]
fn whitespace_everywhere() {
    let text = " { \"a\" : [ 1 , { } , [ ] , null ] ,\n\t\"b\" : { \"c\" : \"}\" } } ";
    assert_same(raw(text), &parsed(text));
    assert!(raw("{ }").is_absent());
    assert!(raw("[ ]").is_absent());
    assert!(raw("{\"a\": {\"b\": [ ]}, \"c\": null}").is_absent());
}

#[test]
fn a_repeated_key_keeps_its_first_place_and_last_value() {
    let text = r#"{"a": 1, "b": 2, "a": 3}"#;
    let map = raw(text).as_map().unwrap();
    let entries: Vec<_> = map
        .iter()
        .map(|(k, v)| (k.into_owned(), v.text()))
        .collect();
    assert_eq!(entries, [("a".to_owned(), "3"), ("b".to_owned(), "2")]);
    assert_eq!(raw(text).get("a").unwrap().text(), "3");
    assert_same(raw(text), &parsed(text));

    // The same in a map large enough to be looked up through its sorted index.
    let mut large: Vec<String> = (0..40).map(|i| format!("\"k{i}\": {i}")).collect();
    large.push("\"k7\": \"last\"".into());
    let text = format!("{{{}}}", large.join(", "));
    let map = raw(&text).as_map().unwrap();
    assert_eq!(map.len(), 40);
    assert_eq!(map.get("k7").unwrap().text(), "\"last\"");
    assert_eq!(map.get("k39").unwrap().text(), "39");
    assert!(map.get("k40").is_none());
    assert_same(raw(&text), &parsed(&text));
}

#[test]
fn escaped_strings_equal_their_plain_spelling() {
    assert!(raw(r#""\u0061b""#).scalar_eq(raw(r#""ab""#)));
    assert!(!raw(r#""\u0061b""#).scalar_eq(raw(r#""ac""#)));
    assert!(raw(r#""a\"b""#).scalar_eq(raw(r#""a\u0022b""#)));
    let map = raw(r#"{"\u006eame": "x"}"#);
    assert_eq!(map.get("name").unwrap().text(), "\"x\"");
}

#[test]
fn numbers_compare_exactly_as_text() {
    assert!(raw("1").scalar_eq(raw("1.0")));
    assert!(raw("1e2").scalar_eq(raw("100")));
    assert!(!raw("9007199254740993").scalar_eq(raw("9007199254740992.0")));
    assert!(!raw("18446744073709551617").scalar_eq(raw("18446744073709551616")));
    // A number a `Value` cannot hold exactly is still shown, as its text; one it holds
    // exactly stays a number.
    for text in [
        "1e400",
        "18446744073709551617",
        "-18446744073709551617",
        "0.10000000000000000001",
    ] {
        assert_eq!(raw(text).to_value().as_ref(), &Value::String(text.into()));
    }
    for (text, value) in [
        ("18446744073709551615", serde_json::json!(u64::MAX)),
        ("-9223372036854775808", serde_json::json!(i64::MIN)),
        ("9007199254740993", serde_json::json!(9007199254740993u64)),
        ("0.1", serde_json::json!(0.1)),
        ("1e2", serde_json::json!(100.0)),
        ("2.50", serde_json::json!(2.5)),
    ] {
        assert_eq!(raw(text).to_value().as_ref(), &value, "{text}");
    }
}

#[test]
fn keys_are_matched_by_what_they_spell() {
    // (quoted key, key, is it)
    let cases = [
        (r#""name""#, "name", true),
        (r#""name""#, "nam", false),
        (r#""nam""#, "name", false),
        (r#""n\u0061me""#, "name", true),
        (r#""n\u0061me""#, "n\\u0061me", false),
        // As many bytes as the key, but one of them starts an escape: the key is `"`.
        (r#""\"""#, r#"\""#, false),
        (r#""\"""#, "\"", true),
        (r#""a\\b""#, r"a\b", true),
        (r#""""#, "", true),
    ];
    for (quoted, key, is) in cases {
        assert_eq!(key_is(quoted, key), is, "{quoted} against {key:?}");
    }
}

/// A key spelt with every character as a `\u` escape (surrogate pairs past the first plane).
fn spelt_with_escapes(key: &str) -> String {
    let mut quoted = String::from("\"");
    for unit in key.encode_utf16() {
        quoted.push_str(&format!("\\u{unit:04x}"));
    }
    quoted.push('"');
    quoted
}

proptest! {
    /// A quoted key is a key exactly when it decodes to it, however it is spelt.
    #[test]
    fn a_key_is_matched_as_decoding_it_would(
        key in "[ab\\\\\"é\\x01😀]{0,4}",
        other in "[ab\\\\\"é\\x01😀]{0,4}",
    ) {
        for quoted in [serde_json::to_string(&key).unwrap(), spelt_with_escapes(&key)] {
            prop_assert!(key_is(&quoted, &key), "{} is {:?}", quoted, key);
            prop_assert_eq!(key_is(&quoted, &other), decode_string(&quoted) == other.as_str(),
                "{} against {:?}", quoted, other);
        }
    }
}
