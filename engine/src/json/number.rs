//! Numbers compared by value, exactly (reference §4): `1 == 1.0 == 1e0`, but `9007199254740993`
//! differs from `9007199254740992.0`, and integers beyond 64 bits too. JSON text is compared as
//! decimal digits, never through a float; parsed values are compared without rounding.

use serde_json::Number;

/// Whether two JSON number texts denote the same value.
pub fn text_numbers_eq(a: &str, b: &str) -> bool {
    a == b
        // Two JSON integers are written one way only (no leading zeros, no `+`; zero as `0`,
        // its other spelling `-0` aside): different text, different values. Most numbers of
        // an object are such.
        || (!(is_plain_integer(a) && is_plain_integer(b))
            && match (Decimal::parse(a), Decimal::parse(b)) {
            (Some(x), Some(y)) => x == y,
            // Not number text: only the same text is the same.
            _ => false,
        })
}

/// An integer as JSON writes it: `0`, or `-` and then digits without a leading zero.
#[inline]
fn is_plain_integer(text: &str) -> bool {
    match text.as_bytes() {
        [b'0'] => true,
        [b'1'..=b'9', rest @ ..] | [b'-', b'1'..=b'9', rest @ ..] => {
            rest.iter().all(u8::is_ascii_digit)
        }
        _ => false,
    }
}

/// A decimal number reduced to a canonical form: zero, or a sign, its significant digits
/// (no leading or trailing zeros) and the power of ten of the last digit.
#[derive(Debug)]
enum Decimal<'a> {
    Zero,
    NonZero {
        negative: bool,
        /// The integer and fraction digits of the text; the significant ones are
        /// `digits()[start..end]`.
        integer: &'a [u8],
        fraction: &'a [u8],
        start: usize,
        end: usize,
        /// Power of ten of the last significant digit.
        exponent: i64,
    },
}

impl<'a> Decimal<'a> {
    fn parse(text: &'a str) -> Option<Self> {
        let bytes = text.as_bytes();
        let (negative, rest) = match bytes.split_first() {
            Some((b'-', rest)) => (true, rest),
            _ => (false, bytes),
        };
        let integer_len = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        let (integer, rest) = rest.split_at(integer_len);
        let (fraction, rest) = match rest.split_first() {
            Some((b'.', rest)) => {
                let len = rest.iter().take_while(|b| b.is_ascii_digit()).count();
                rest.split_at(len)
            }
            _ => (&rest[..0], rest),
        };
        let exponent: i64 = match rest.split_first() {
            None => 0,
            Some((b'e' | b'E', rest)) => parse_exponent(rest)?,
            Some(_) => return None,
        };
        if integer.is_empty() {
            return None;
        }
        let digit = |i: usize| {
            if i < integer.len() {
                integer[i]
            } else {
                fraction[i - integer.len()]
            }
        };
        let total = integer.len() + fraction.len();
        let Some(start) = (0..total).find(|&i| digit(i) != b'0') else {
            return Some(Decimal::Zero);
        };
        let end = (start..total).rev().find(|&i| digit(i) != b'0')? + 1;
        // The last significant digit sits `total - end` places left of the text's last digit,
        // whose power of ten is `exponent - fraction.len()`.
        let trailing = i64::try_from(total - end).ok()?;
        let fraction_len = i64::try_from(fraction.len()).ok()?;
        Some(Decimal::NonZero {
            negative,
            integer,
            fraction,
            start,
            end,
            exponent: exponent
                .saturating_sub(fraction_len)
                .saturating_add(trailing),
        })
    }

    fn significant(&self) -> impl Iterator<Item = u8> + '_ {
        let (integer, fraction, start, end) = match self {
            Decimal::Zero => (&[][..], &[][..], 0, 0),
            Decimal::NonZero {
                integer,
                fraction,
                start,
                end,
                ..
            } => (*integer, *fraction, *start, *end),
        };
        integer
            .iter()
            .chain(fraction)
            .copied()
            .skip(start)
            .take(end - start)
    }
}

impl PartialEq for Decimal<'_> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Decimal::Zero, Decimal::Zero) => true,
            (
                Decimal::NonZero {
                    negative: n1,
                    start: s1,
                    end: e1,
                    exponent: x1,
                    ..
                },
                Decimal::NonZero {
                    negative: n2,
                    start: s2,
                    end: e2,
                    exponent: x2,
                    ..
                },
            ) => {
                n1 == n2
                    && x1 == x2
                    && e1 - s1 == e2 - s2
                    && self.significant().eq(other.significant())
            }
            _ => false,
        }
    }
}

/// The exponent after `e`, saturated: an exponent beyond `i64` is beyond any number's meaning.
fn parse_exponent(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let magnitude = digits.iter().fold(0i64, |n, d| {
        n.saturating_mul(10).saturating_add(i64::from(d - b'0'))
    });
    Some(if negative { -magnitude } else { magnitude })
}

/// Whether two parsed numbers are equal, exactly: an integer equals a float only when the float
/// is that very integer (a float holds an integer exactly or not at all).
pub fn numbers_eq(x: &Number, y: &Number) -> bool {
    fn integer(n: &Number) -> Option<i128> {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    }
    match (integer(x), integer(y)) {
        (Some(a), Some(b)) => a == b,
        (Some(a), None) => y.as_f64().is_some_and(|f| float_is_integer(f, a)),
        (None, Some(b)) => x.as_f64().is_some_and(|f| float_is_integer(f, b)),
        (None, None) => x.as_f64() == y.as_f64(),
    }
}

fn float_is_integer(float: f64, integer: i128) -> bool {
    // Every integral float below 2^127 converts to i128 exactly.
    float.fract() == 0.0 && float.abs() < 1.7e38 && float as i128 == integer
}

#[cfg(test)]
mod tests {
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
}
