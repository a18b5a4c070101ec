//! The scan against serde_json: it accepts exactly the texts serde_json accepts, and indexes
//! them as [`Brackets::of`] does.

use proptest::prelude::*;
use serde::de::IgnoredAny;
use serde_json::Value;

use super::*;

/// The scan without a depth bound of its own. The portable path (first stage without AVX2 or
/// a carry-less multiply, grammar without BMI2) must judge and index every text as the path
/// this CPU takes does.
fn scan_any(text: &str) -> Option<Brackets> {
    let scanned = scan(text, usize::MAX);
    assert_eq!(
        scan_with(text, usize::MAX, classify, prefix_xor),
        scanned,
        "the portable scan differs on {text:?}"
    );
    scanned
}

fn serde_accepts(text: &str) -> bool {
    serde_json::from_str::<IgnoredAny>(text).is_ok()
}

#[test]
fn accepts_what_serde_json_accepts_and_refuses_the_rest() {
    let accepted = [
        r#"{}"#,
        r#" [ ] "#,
        "\t{\"a\" :\n[1, -0.5e+3, 0, 2E-7, true, false, null, \"\"]}\r\n",
        r#"{"s": "\" \\ \/ \b \f \n \r \t \u00e9 \uD800 é", "x": {"y": [[{}]]}}"#,
        r#""just a string""#,
        "-12",
        "null",
        r#"{"a": 1, "a": 2}"#,
    ];
    let refused = [
        "",
        "   ",
        "{",
        "}",
        r#"{"a"}"#,
        r#"{"a": }"#,
        r#"{"a": 1,}"#,
        r#"[1,]"#,
        r#"[1 2]"#,
        r#"{"a": 1 "b": 2}"#,
        r#"{a: 1}"#,
        r#"["a]"#,
        "[\"tab\there\"]",
        r#"["\x"]"#,
        r#"["\u12"]"#,
        r#"["\u12g4"]"#,
        "[01]",
        "[-]",
        "[1.]",
        "[.5]",
        "[1e]",
        "[1e+]",
        "[+1]",
        "[tru]",
        "[nul1]",
        "[truex]",
        "{} {}",
        "[1]]",
        "[}",
        r#"{"a": 1]"#,
        "[NaN]",
    ];
    for text in accepted {
        assert!(serde_accepts(text), "serde_json refuses {text:?}");
        assert!(scan_any(text).is_some(), "refused {text:?}");
    }
    for text in refused {
        assert!(!serde_accepts(text), "serde_json accepts {text:?}");
        assert!(scan_any(text).is_none(), "accepted {text:?}");
    }
}

#[test]
fn nesting_past_the_bound_is_refused() {
    let nested = |levels: usize| format!("{}{}", "[".repeat(levels), "]".repeat(levels));
    assert!(scan(&nested(5), 5).is_some());
    assert!(scan(&nested(6), 5).is_none());
    assert!(scan(r#"{"a": [{"b": []}]}"#, 4).is_some());
    assert!(scan(r#"{"a": [{"b": []}]}"#, 3).is_none());
}

#[test]
fn a_part_gets_the_index_of_its_own_text() {
    let text = r#"{"a": {"b": [1, {"c": "]"}], "d": {}}, "e": [[], {}]}"#;
    let all = scan_any(text).expect("JSON");
    assert_eq!(all, Brackets::of(text));
    for (start, end) in [(6, 37), (12, 27), (44, 52), (0, text.len())] {
        let part = all.within(start, end).expect("recorded");
        assert_eq!(
            part,
            Brackets::of(&text[start..end]),
            "{}",
            &text[start..end]
        );
    }
}

#[test]
fn a_part_past_the_bound_is_left_to_be_indexed_on_need() {
    // 10,000 empty lists: the bound (one container per 16 bytes, plus 64) runs out before the
    // last ones, which are not recorded; a part that holds one is not given an index.
    let text = format!("[{}]", vec!["[]"; 10_000].join(","));
    let all = scan_any(&text).expect("JSON");
    assert_eq!(all, Brackets::of(&text));
    assert_eq!(all.within(1, 3).map(|b| b.close_of(0)), Some(Some(1)));
    let last = text.len() - 3;
    assert_eq!(all.within(last, last + 2), None);
}

/// Texts whose every byte that matters lands, at one shift or another, on each place of a
/// 64-byte block and across the boundary between two: judged as serde_json judges them.
#[test]
fn every_shift_across_block_boundaries_is_judged_as_serde_json_judges_it() {
    let snippets = [
        r#"["abc\\", "\"", "x\\\"y", 12345, -0.5e-7, true, false, null]"#,
        r#"{"k\u00e9y": {"l": [[], {}, ""]}, "m": "\\"}"#,
        r#"["\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\"]"#,
        r#"["a\"]"#,
        r#"["a\u12"]"#,
        r#"[12345678901234567890123456789012345678901234567890123456789012345678901234567890x]"#,
        r#"[truex]"#,
        r#"["tab	in a string"]"#,
        r#"[1 2]"#,
        r#"{"a" "b"}"#,
        r#"["unclosed]"#,
    ];
    for snippet in snippets {
        for shift in 0..=130 {
            for pad in [" ", "\n"] {
                let text = format!("{}{snippet}{}", pad.repeat(shift), pad.repeat(shift % 7));
                assert_eq!(
                    scan_any(&text).is_some(),
                    serde_accepts(&text),
                    "shift {shift}: {text:?}"
                );
                if let Some(brackets) = scan_any(&text) {
                    assert_eq!(brackets, Brackets::of(&text), "{text:?}");
                }
            }
        }
    }
}

/// JSON documents with the strings that trip scanners: quotes, backslashes, control
/// characters (escaped by serde_json), brackets, non-ASCII.
fn document() -> impl Strategy<Value = Value> {
    document_with("[a-c\"\\\\\u{1}\u{1f}{}\\[\\]:, é/]{0,6}")
}

/// Documents as [`document`], with strings of up to 90 characters and runs of backslashes:
/// strings, escapes and scalars that cross 64-byte blocks.
fn long_document() -> impl Strategy<Value = Value> {
    document_with("[a\"\\\\\\\\\\\\\u{1}{}\\[\\]:, é]{0,90}")
}

fn document_with(text: &'static str) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        text.prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((text, inner), 0..6)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

/// One edit of a text: a byte deleted, inserted or replaced, with the bytes that matter to a
/// JSON reader.
fn edit() -> impl Strategy<Value = (usize, u8, u8)> {
    let byte = prop::sample::select(b"\"\\{}[],: \n\t0123456789-+.eEutrfalsn\x01\x1fx/".to_vec());
    (any::<usize>(), 0u8..3, byte)
}

fn apply(text: &str, edits: &[(usize, u8, u8)]) -> Option<String> {
    let mut bytes = text.as_bytes().to_vec();
    for &(at, kind, byte) in edits {
        let at = at % (bytes.len() + 1);
        match kind {
            0 if at < bytes.len() => {
                bytes.remove(at);
            }
            1 => bytes.insert(at, byte),
            _ if at < bytes.len() => bytes[at] = byte,
            _ => bytes.push(byte),
        }
    }
    String::from_utf8(bytes).ok()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Valid JSON, compact or pretty: accepted, and indexed as `Brackets::of` indexes it.
    #[test]
    fn json_is_accepted_and_indexed(document in document(), pretty in any::<bool>()) {
        let text = if pretty {
            serde_json::to_string_pretty(&document).unwrap()
        } else {
            serde_json::to_string(&document).unwrap()
        };
        let scanned = scan_any(&text);
        prop_assert_eq!(scanned, Some(Brackets::of(&text)));
    }

    /// Long documents behind any amount of white space: accepted and indexed as
    /// `Brackets::of` indexes them; a few edits away, judged as serde_json judges them.
    #[test]
    fn long_json_at_any_shift_is_judged_as_serde_json_judges_it(
        document in long_document(),
        pretty in any::<bool>(),
        shift in prop::collection::vec(prop::sample::select(b" \n\t\r".to_vec()), 0..130),
        edits in prop::collection::vec(edit(), 0..3),
    ) {
        let body = if pretty {
            serde_json::to_string_pretty(&document).unwrap()
        } else {
            serde_json::to_string(&document).unwrap()
        };
        let text = format!("{}{body}", String::from_utf8(shift).unwrap());
        prop_assert_eq!(scan_any(&text), Some(Brackets::of(&text)));
        if let Some(edited) = apply(&text, &edits) {
            prop_assert_eq!(scan_any(&edited).is_some(), serde_accepts(&edited), "{:?}", edited);
        }
    }

    /// Text a few edits away from JSON: accepted exactly when serde_json accepts it.
    #[test]
    fn edited_json_is_judged_as_serde_json_judges_it(
        document in document(),
        edits in prop::collection::vec(edit(), 1..4),
    ) {
        let text = serde_json::to_string(&document).unwrap();
        if let Some(edited) = apply(&text, &edits) {
            prop_assert_eq!(scan_any(&edited).is_some(), serde_accepts(&edited), "{:?}", edited);
        }
    }
}
