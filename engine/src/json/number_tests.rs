//! Exact number equality against a model that cannot be wrong by construction: every number
//! text reduced with arbitrary-precision integers (num-bigint) to its sign, significant digits
//! and the power of ten of its last digit; every parsed number to an exact binary fraction.

use num_bigint::BigInt;
use proptest::prelude::*;
use serde_json::Number;

use super::*;

#[test]
fn text_numbers() {
    let equal = [
        ("1", "1.0"),
        ("1", "1e0"),
        ("100", "1e2"),
        ("100", "1E+2"),
        ("0.5", "5e-1"),
        ("0", "-0"),
        ("-0", "0.0"),
        ("0", "0.000e7"),
        ("-12.50", "-1.25e1"),
        (
            "123456789012345678901234567890",
            "1.2345678901234567890123456789e29",
        ),
    ];
    for (a, b) in equal {
        assert!(text_numbers_eq(a, b), "{a} == {b}");
        assert!(text_numbers_eq(b, a), "{b} == {a}");
    }
    let different = [
        ("9007199254740993", "9007199254740992.0"),
        ("18446744073709551617", "18446744073709551616"),
        ("1", "-1"),
        ("1", "10"),
        ("0.1", "0.01"),
        ("1e400", "1e401"),
        ("12", "21"),
        ("0", "1"),
        ("0", "-1"),
        ("-0", "7"),
    ];
    for (a, b) in different {
        assert!(!text_numbers_eq(a, b), "{a} != {b}");
        assert!(!text_numbers_eq(b, a), "{b} != {a}");
    }
}

#[test]
fn parsed_numbers() {
    let n = |text: &str| serde_json::from_str::<Number>(text).unwrap();
    assert!(numbers_eq(&n("1"), &n("1.0")));
    assert!(numbers_eq(&n("-3"), &n("-3.0")));
    assert!(numbers_eq(
        &n("18446744073709551615"),
        &n("18446744073709551615")
    ));
    assert!(!numbers_eq(
        &n("9007199254740993"),
        &n("9007199254740992.0")
    ));
    assert!(!numbers_eq(&n("1"), &n("1.5")));
    assert!(numbers_eq(&n("0.25"), &n("2.5e-1")));
}

proptest::proptest! {
    /// Whatever two integers and their float forms, text comparison agrees with the exact
    /// value; and a number always equals its own rewritings.
    #[test]
    fn text_comparison_is_exact(a in proptest::num::i64::ANY, b in proptest::num::i64::ANY, shift in 0u32..6) {
        let scaled = |n: i64| format!("{n}{}e-{shift}", "0".repeat(shift as usize));
        proptest::prop_assert_eq!(text_numbers_eq(&a.to_string(), &b.to_string()), a == b);
        proptest::prop_assert!(text_numbers_eq(&a.to_string(), &scaled(a)));
        let padded = format!("{a}.000");
        proptest::prop_assert!(text_numbers_eq(&padded, &a.to_string()));
        proptest::prop_assert_eq!(text_numbers_eq(&scaled(a), &b.to_string()), a == b);
    }
}

/// (negative, significant digits, power of ten of the last one); zero is `None`.
fn model(text: &str) -> Option<Option<(bool, String, BigInt)>> {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(at) => (&rest[..at], rest[at + 1..].trim_start_matches('+')),
        None => (rest, "0"),
    };
    let exponent: BigInt = exponent.parse().ok()?;
    let (integer, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{integer}{fraction}");
    let significant = digits.trim_start_matches('0');
    let trimmed = significant.trim_end_matches('0');
    if trimmed.is_empty() {
        return Some(None);
    }
    let trailing = significant.len() - trimmed.len();
    let last = exponent - BigInt::from(fraction.len()) + BigInt::from(trailing);
    Some(Some((negative, trimmed.to_owned(), last)))
}

/// One number written some way: `digits` (no leading or trailing zero) whose last digit is
/// worth 10^`last`, with `zeros` more trailing zeros, the point after `point` of the written
/// digits, `lead` leading zeros, and the exponent written with `plus` and `padding` zeros.
#[derive(Debug, Clone)]
struct Spelling {
    zeros: usize,
    point: usize,
    lead: usize,
    plus: bool,
    padding: usize,
    upper: bool,
}

fn spell(negative: bool, digits: &str, last: &BigInt, how: &Spelling) -> String {
    let written = format!("{digits}{}", "0".repeat(how.zeros));
    let point = how.point.clamp(1, written.len());
    // The last written digit is worth 10^(written exponent - fraction length); the last
    // significant one `zeros` places left of it.
    let fraction_len = written.len() - point;
    let exponent = last + BigInt::from(fraction_len) - BigInt::from(how.zeros);
    let mut text = String::new();
    if negative {
        text.push('-');
    }
    text.push_str(&"0".repeat(how.lead));
    text.push_str(&written[..point]);
    if point < written.len() {
        text.push('.');
        text.push_str(&written[point..]);
    }
    if exponent != BigInt::from(0) || how.plus {
        text.push(if how.upper { 'E' } else { 'e' });
        let sign = if exponent < BigInt::from(0) {
            "-"
        } else if how.plus {
            "+"
        } else {
            ""
        };
        let magnitude = exponent.magnitude().to_string();
        text.push_str(&format!("{sign}{}{magnitude}", "0".repeat(how.padding)));
    }
    text
}

fn spelling() -> impl Strategy<Value = Spelling> {
    (
        0usize..4,
        1usize..40,
        0usize..2,
        any::<bool>(),
        0usize..3,
        any::<bool>(),
    )
        .prop_map(|(zeros, point, lead, plus, padding, upper)| Spelling {
            zeros,
            point,
            lead,
            plus,
            padding,
            upper,
        })
}

/// Exponents small, near i64's and i128's ends, and far beyond them.
fn exponent() -> impl Strategy<Value = BigInt> {
    prop_oneof![
        (-400i64..400).prop_map(BigInt::from),
        (any::<i64>(), -3i64..3).prop_map(|(n, d)| BigInt::from(n) + d),
        (any::<i128>(), -3i64..3).prop_map(|(n, d)| BigInt::from(n) + d),
        ("-?[1-9][0-9]{36,80}", -3i64..3).prop_map(|(t, d)| t.parse::<BigInt>().unwrap() + d),
        (-3i64..3).prop_map(|d| BigInt::from(10).pow(38) + d),
        (-3i64..3).prop_map(|d| -BigInt::from(10).pow(38) + d),
    ]
}

fn significant_digits() -> impl Strategy<Value = String> {
    prop_oneof!["[1-9]", "[1-9][0-9]{0,25}[1-9]", "9{1,30}"]
}

proptest::proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// Two spellings of one value are equal; changing its digits, sign or exponent by one
    /// makes it another value; and whatever two texts, the comparison says what the exact
    /// model says.
    #[test]
    fn text_equality_is_the_exact_models(
        negative in any::<bool>(),
        digits in significant_digits(),
        last in exponent(),
        a in spelling(),
        b in spelling(),
        nudge in 0u8..4,
    ) {
        let one = spell(negative, &digits, &last, &a);
        let same = spell(negative, &digits, &last, &b);
        prop_assert!(text_numbers_eq(&one, &same), "{one} == {same}");
        let other = match nudge {
            0 => spell(negative, &digits, &(&last + 1), &b),
            1 => spell(negative, &digits, &(&last - 1), &b),
            2 => spell(!negative, &digits, &last, &b),
            _ => spell(negative, &format!("{digits}1"), &(&last - 1), &b),
        };
        prop_assert!(!text_numbers_eq(&one, &other), "{one} != {other}");
        prop_assert!(!text_numbers_eq(&other, &one), "{other} != {one}");
        for (x, y) in [(&one, &same), (&one, &other), (&same, &other)] {
            prop_assert_eq!(text_numbers_eq(x, y), model(x) == model(y), "{} vs {}", x, y);
        }
    }

    /// Any two number texts, not only spellings of one value, agree with the model.
    #[test]
    fn any_two_texts_agree_with_the_model(
        a in "-?[0-9]{1,6}(\\.[0-9]{1,6})?([eE][+-]?[0-9]{1,3})?",
        b in "-?[0-9]{1,6}(\\.[0-9]{1,6})?([eE][+-]?[0-9]{1,3})?",
    ) {
        prop_assert_eq!(text_numbers_eq(&a, &b), model(&a) == model(&b), "{} vs {}", a, b);
    }

    /// Parsed numbers (what a `Value` holds: i64, u64 or a finite f64) are equal exactly
    /// when their exact binary values are.
    #[test]
    fn parsed_equality_is_exact(a in number(), b in number(), near in any::<u64>()) {
        let c = Number::from_f64(near as f64).unwrap();
        let d = Number::from(near);
        for (x, y) in [(&a, &b), (&a, &a), (&c, &d), (&d, &c), (&a, &d)] {
            prop_assert_eq!(numbers_eq(x, y), exact(x) == exact(y), "{} vs {}", x, y);
        }
    }
}

fn number() -> impl Strategy<Value = Number> {
    prop_oneof![
        any::<i64>().prop_map(Number::from),
        any::<u64>().prop_map(Number::from),
        any::<f64>().prop_filter_map("finite", Number::from_f64),
        any::<i64>().prop_filter_map("finite", |n| Number::from_f64(n as f64)),
        (0u32..128).prop_filter_map("finite", |k| Number::from_f64(2f64.powi(k as i32))),
    ]
}

/// The exact value of a parsed number as numerator × 2^exponent (reduced: an odd numerator
/// or zero).
fn exact(n: &Number) -> (BigInt, i64) {
    let (mut numerator, mut exponent) = if let Some(i) = n.as_i64() {
        (BigInt::from(i), 0)
    } else if let Some(u) = n.as_u64() {
        (BigInt::from(u), 0)
    } else {
        let f = n.as_f64().unwrap();
        let bits = f.to_bits();
        let sign = if bits >> 63 == 1 { -1 } else { 1 };
        let biased = ((bits >> 52) & 0x7ff) as i64;
        let fraction = bits & ((1 << 52) - 1);
        let (mantissa, exponent) = if biased == 0 {
            (fraction, -1074)
        } else {
            (fraction | (1 << 52), biased - 1075)
        };
        (BigInt::from(mantissa) * sign, exponent)
    };
    if numerator == BigInt::from(0) {
        return (numerator, 0);
    }
    while (&numerator % 2u8) == BigInt::from(0) {
        numerator /= 2u8;
        exponent += 1;
    }
    (numerator, exponent)
}

#[test]
fn exponents_past_every_fixed_width() {
    let equal = [
        ("1e9223372036854775807", "10e9223372036854775806"),
        ("1e9223372036854775808", "0.1e9223372036854775809"),
        ("1e-9223372036854775809", "10e-9223372036854775810"),
        (
            "1e100000000000000000000000000000000000000000000",
            "1000e99999999999999999999999999999999999999999997",
        ),
        (
            "1e-100000000000000000000000000000000000000000000",
            "0.001e-99999999999999999999999999999999999999999997",
        ),
        (
            "1e99999999999999999999999999999999999999",
            "10e99999999999999999999999999999999999998",
        ),
        ("5e-0000000000000000000000000000000000000000000001", "0.5"),
        ("0e99999999999999999999999999999999999999999999999", "-0"),
    ];
    for (a, b) in equal {
        assert!(text_numbers_eq(a, b), "{a} == {b}");
        assert!(text_numbers_eq(b, a), "{b} == {a}");
    }
    let different = [
        // Saturated to i64's end, these two read as one before.
        ("1e9223372036854775807", "1e9223372036854775808"),
        ("1e-9223372036854775808", "1e-9223372036854775809"),
        (
            "1e170141183460469231731687303715884105727",
            "1e170141183460469231731687303715884105728",
        ),
        (
            "1e100000000000000000000000000000000000000000000",
            "1e100000000000000000000000000000000000000000001",
        ),
        (
            "1e99999999999999999999999999999999999999",
            "1e100000000000000000000000000000000000000",
        ),
        (
            "1e-99999999999999999999999999999999999999",
            "1e-100000000000000000000000000000000000000",
        ),
    ];
    for (a, b) in different {
        assert!(!text_numbers_eq(a, b), "{a} != {b}");
        assert!(!text_numbers_eq(b, a), "{b} != {a}");
    }
}

#[test]
fn an_exponent_of_a_million_digits_is_compared_in_linear_time() {
    let nines = "9".repeat(1_000_000);
    let a = format!("1e{nines}");
    let b = format!("10e{}8", &nines[1..]);
    let started = std::time::Instant::now();
    assert!(text_numbers_eq(&a, &b));
    assert!(!text_numbers_eq(&a, &format!("1e{}8", &nines[1..])));
    // A quadratic conversion would take minutes; generous for a debug build.
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}
