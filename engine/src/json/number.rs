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
        /// Power of ten of the last significant digit, however large the written exponent.
        exponent: Exponent,
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
        let written = match rest.split_first() {
            None => WrittenExponent::ZERO,
            Some((b'e' | b'E', rest)) => WrittenExponent::parse(rest)?,
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
        // whose power of ten is `exponent - fraction.len()`. Lengths of text fit an i128
        // with room to spare.
        let shift = (total - end) as i128 - fraction.len() as i128;
        Some(Decimal::NonZero {
            negative,
            integer,
            fraction,
            start,
            end,
            exponent: written.plus(shift),
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

/// The most decimal digits an [`Exponent::Small`] has: below 10^38, an i128 holds it and any
/// shift by a text's length.
const SMALL_DIGITS: usize = 38;

/// A power of ten of any size, exactly (JSON puts no limit on an exponent's digits). Canonical,
/// so that equal values are equal variants: `Small` below 10^38 in magnitude, `Big` from there.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Exponent {
    Small(i128),
    Big {
        negative: bool,
        /// The magnitude's digits (`0`–`9`, most significant first, no leading zero), more
        /// than [`SMALL_DIGITS`] of them.
        digits: Vec<u8>,
    },
}

/// The exponent as the text writes it, after `e`: a sign and digits, leading zeros dropped.
struct WrittenExponent<'a> {
    negative: bool,
    digits: &'a [u8],
}

impl<'a> WrittenExponent<'a> {
    const ZERO: WrittenExponent<'static> = WrittenExponent {
        negative: false,
        digits: &[],
    };

    fn parse(text: &'a [u8]) -> Option<Self> {
        let (negative, digits) = match text.split_first() {
            Some((b'-', rest)) => (true, rest),
            Some((b'+', rest)) => (false, rest),
            _ => (false, text),
        };
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let zeros = digits.iter().take_while(|&&d| d == b'0').count();
        Some(Self {
            negative,
            digits: &digits[zeros..],
        })
    }

    /// This exponent plus `shift`, exactly.
    fn plus(&self, shift: i128) -> Exponent {
        if self.digits.len() <= SMALL_DIGITS {
            let magnitude = self
                .digits
                .iter()
                .fold(0i128, |n, d| n * 10 + i128::from(d - b'0'));
            let value = if self.negative { -magnitude } else { magnitude };
            // |value| < 10^38 and |shift| < 2^65: the sum fits an i128.
            return Exponent::canonical(value + shift);
        }
        // Beyond 10^38 the shift cannot change the sign: the magnitude grows when the shift
        // points the same way, and shrinks otherwise.
        let mut digits: Vec<u8> = self.digits.iter().map(|d| d - b'0').collect();
        let away_from_zero = (shift < 0) == self.negative;
        if away_from_zero {
            add_small(&mut digits, shift.unsigned_abs());
        } else {
            subtract_small(&mut digits, shift.unsigned_abs());
        }
        Exponent::of_digits(self.negative, digits)
    }
}

impl Exponent {
    fn canonical(value: i128) -> Exponent {
        if value.unsigned_abs() < 10u128.pow(SMALL_DIGITS as u32) {
            return Exponent::Small(value);
        }
        let digits = value
            .unsigned_abs()
            .to_string()
            .bytes()
            .map(|d| d - b'0')
            .collect();
        Exponent::of_digits(value < 0, digits)
    }

    /// From a magnitude's digit values (0–9, leading zeros allowed).
    fn of_digits(negative: bool, digits: Vec<u8>) -> Exponent {
        let zeros = digits.iter().take_while(|&&d| d == 0).count();
        let significant = &digits[zeros..];
        if significant.len() <= SMALL_DIGITS {
            let magnitude = significant
                .iter()
                .fold(0i128, |n, &d| n * 10 + i128::from(d));
            return Exponent::Small(if negative { -magnitude } else { magnitude });
        }
        Exponent::Big {
            negative,
            digits: significant.to_vec(),
        }
    }
}

/// `digits += n`, digit values most significant first.
fn add_small(digits: &mut Vec<u8>, mut n: u128) {
    for digit in digits.iter_mut().rev() {
        if n == 0 {
            return;
        }
        let sum = u128::from(*digit) + n % 10;
        *digit = (sum % 10) as u8;
        n = n / 10 + sum / 10;
    }
    let mut carried = Vec::new();
    while n > 0 {
        carried.push((n % 10) as u8);
        n /= 10;
    }
    carried.reverse();
    digits.splice(0..0, carried);
}

/// `digits -= n`, for `n` at most the value of `digits`.
fn subtract_small(digits: &mut [u8], mut n: u128) {
    let mut borrow = 0u8;
    for digit in digits.iter_mut().rev() {
        if n == 0 && borrow == 0 {
            return;
        }
        let take = (n % 10) as u8 + borrow;
        n /= 10;
        if *digit >= take {
            *digit -= take;
            borrow = 0;
        } else {
            *digit = *digit + 10 - take;
            borrow = 1;
        }
    }
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
#[path = "number_tests.rs"]
mod tests;
