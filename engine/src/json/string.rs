//! JSON string literals read without a parser: decoded, and compared while decoding.
//!
//! Kubernetes objects carry JSON inside strings (the `last-applied-configuration` annotation
//! is the whole manifest, with an escape every few bytes). Decoding such a string through
//! serde_json's general parser, or decoding two of them whole only to compare them, was the
//! largest cost of deciding a real `kubectl apply` (1.3 M instructions of 3.4 M). Here runs
//! without escapes are copied or compared whole, and escapes are decoded in place.
//!
//! Both refuse what serde_json refuses when it reads a `String` (a bad escape, a lone
//! surrogate, a control character): the caller then keeps its old way, so no answer changes.

use std::borrow::Cow;

/// The character an escape at the start of `bytes` stands for, and its length in bytes.
fn escape(bytes: &[u8]) -> Option<(char, usize)> {
    let c = match *bytes.get(1)? {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => {
            let high = hex4(bytes.get(2..6)?)?;
            if !(0xD800..0xE000).contains(&high) {
                return Some((char::from_u32(high)?, 6));
            }
            // A surrogate: a high one followed by a low one makes one character.
            if high >= 0xDC00 || bytes.get(6..8)? != b"\\u" {
                return None;
            }
            let low = hex4(bytes.get(8..12)?)?;
            if !(0xDC00..0xE000).contains(&low) {
                return None;
            }
            let c = 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00);
            return Some((char::from_u32(c)?, 12));
        }
        _ => return None,
    };
    Some((c, 2))
}

fn hex4(digits: &[u8]) -> Option<u32> {
    digits.iter().try_fold(0u32, |n, &d| {
        let v = (d as char).to_digit(16)?;
        Some(n * 16 + v)
    })
}

/// Where the run of plain text starting at `at` ends: at a backslash, a quote, a control
/// character, or the end.
#[inline]
fn run_end(bytes: &[u8], mut at: usize) -> usize {
    while let Some(&b) = bytes.get(at) {
        if b == b'\\' || b == b'"' || b < 0x20 {
            break;
        }
        at += 1;
    }
    at
}

/// [`run_end`], eight bytes at a time.
#[inline]
fn run_end_words(bytes: &[u8], mut at: usize) -> usize {
    while let Some(word) = bytes.get(at..).and_then(<[u8]>::first_chunk::<8>) {
        let marks = super::brackets::string_stops(u64::from_le_bytes(*word));
        if marks != 0 {
            return at + (marks.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    run_end(bytes, at)
}

/// The content of the string literal `quoted`: borrowed when it has no escapes; `None` when
/// serde_json would refuse it as a `String`.
pub(crate) fn decode(quoted: &str) -> Option<Cow<'_, str>> {
    let inner = quoted.strip_prefix('"')?.strip_suffix('"')?;
    let bytes = inner.as_bytes();
    let first = run_end_words(bytes, 0);
    if first == bytes.len() {
        return Some(Cow::Borrowed(inner));
    }
    // Runs between escapes copied whole; the escapes of JSON held in a string come every few
    // bytes, so the next one is looked for eight bytes at a time rather than by a library
    // search, whose setup costs more than such a run.
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len());
    let mut at = 0;
    let mut end = first;
    loop {
        out.extend_from_slice(&bytes[at..end]);
        let Some(&b) = bytes.get(end) else { break };
        if b != b'\\' {
            return None;
        }
        let (c, used) = escape(&bytes[end..])?;
        match u8::try_from(c) {
            Ok(ascii) if ascii.is_ascii() => out.push(ascii),
            _ => out.extend_from_slice(c.encode_utf8(&mut [0u8; 4]).as_bytes()),
        }
        at = end + used;
        end = run_end_words(bytes, at);
    }
    String::from_utf8(out).ok().map(Cow::Owned)
}

/// Whether `\\` and `e` make a whole escape.
#[inline]
fn is_short_escape(e: u8) -> bool {
    matches!(e, b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't')
}

/// The character at `at` of `text` (a char boundary) and its length: an escape decoded, or
/// the character itself.
pub(super) fn char_at(text: &str, at: usize) -> Option<(char, usize)> {
    let bytes = text.as_bytes();
    match *bytes.get(at)? {
        b'\\' => escape(&bytes[at..]),
        b'"' | 0x00..=0x1f => None,
        _ => text.get(at..)?.chars().next().map(|c| (c, c.len_utf8())),
    }
}

/// Whether two string literals hold the same content, compared while decoding (no copy);
/// `None` when either is one serde_json would refuse. Literals of text already checked as
/// JSON (the only ones the engine compares) without `\\u` escapes are compared by their
/// longest equal runs of bytes, eight at a time; the others escape by escape.
pub(crate) fn contents_eq(a: &str, b: &str) -> Option<bool> {
    let a = a.strip_prefix('"')?.strip_suffix('"')?;
    let b = b.strip_prefix('"')?.strip_suffix('"')?;
    let (x, y) = (a.as_bytes(), b.as_bytes());
    let checked_json = |bytes: &[u8]| {
        run_end(bytes, 0) == bytes.len() || memchr::memmem::find(bytes, b"\\u").is_none()
    };
    if !(checked_json(x) && checked_json(y)) {
        return contents_eq_escape_by_escape(a, b);
    }
    let (mut i, mut j) = (0, 0);
    loop {
        let mut k = common_prefix(&x[i..], &y[j..]);
        // A prefix ending just past an escaping backslash stops before it: the escape is
        // judged whole below.
        let backslashes = x[i..i + k]
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        if backslashes % 2 == 1 {
            k -= 1;
        }
        i += k;
        j += k;
        match (x.get(i), y.get(j)) {
            (None, None) => return Some(true),
            // What is left of the other side holds at least one character.
            (None, Some(_)) | (Some(_), None) => return Some(false),
            (Some(&p), Some(&q)) if p != b'\\' && q != b'\\' => return Some(false),
            (Some(_), Some(_)) => {
                // An escape against a character or another escape (`\\/` is `/`).
                let (c, used_a) = char_at(a, i)?;
                let (d, used_b) = char_at(b, j)?;
                if c != d {
                    return Some(false);
                }
                i += used_a;
                j += used_b;
            }
        }
    }
}

/// How many leading bytes `x` and `y` share, compared eight at a time.
fn common_prefix(x: &[u8], y: &[u8]) -> usize {
    let n = x.len().min(y.len());
    let word = |s: &[u8], at: usize| {
        s.get(at..at + 8)
            .and_then(|w| <[u8; 8]>::try_from(w).ok())
            .map_or(0, u64::from_le_bytes)
    };
    let mut k = 0;
    while k + 8 <= n {
        let diff = word(x, k) ^ word(y, k);
        if diff != 0 {
            return k + (diff.trailing_zeros() / 8) as usize;
        }
        k += 8;
    }
    while k < n && x[k] == y[k] {
        k += 1;
    }
    k
}

/// [`contents_eq`] of content (without its quotes) that may hold `\\u` escapes or be
/// invalid: every escape is decoded and the rest past a difference is checked.
fn contents_eq_escape_by_escape(a: &str, b: &str) -> Option<bool> {
    let (x, y) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    loop {
        // Equal bytes, compared as bytes: plain text, and the same two-byte escape on both
        // sides (`\\"` in an annotation that holds JSON comes every few bytes).
        while let (Some(&p), Some(&q)) = (x.get(i), y.get(j)) {
            if p != q || p == b'"' || p < 0x20 {
                break;
            }
            if p == b'\\' {
                match (x.get(i + 1), y.get(j + 1)) {
                    (Some(&e), Some(&f)) if e == f && is_short_escape(e) => {
                        i += 2;
                        j += 2;
                        continue;
                    }
                    _ => break,
                }
            }
            i += 1;
            j += 1;
        }
        match (i == x.len(), j == y.len()) {
            (true, true) => return Some(true),
            (false, false) => {}
            // One ended first: different, once the rest of the other is known valid.
            (true, false) => return valid_from(b, j).then_some(false),
            (false, true) => return valid_from(a, i).then_some(false),
        }
        // Both stand at a character boundary here: a backslash is never inside a character,
        // and bytes that differ inside one would have differed at its first byte unless
        // one side spells it with an escape (a backslash, at a boundary).
        if x[i] != b'\\' && y[j] != b'\\' && x[i] != y[j] && x[i] >= 0x20 && y[j] >= 0x20 {
            // Two plain characters that differ (possibly mid-character: same lead bytes).
            return (valid_from(a, char_start(x, i)) && valid_from(b, char_start(y, j)))
                .then_some(false);
        }
        let (c, used_a) = char_at(a, i)?;
        let (d, used_b) = char_at(b, j)?;
        if c != d {
            return (valid_from(a, i + used_a) && valid_from(b, j + used_b)).then_some(false);
        }
        i += used_a;
        j += used_b;
    }
}

/// The start of the character that byte `at` of `bytes` belongs to.
fn char_start(bytes: &[u8], mut at: usize) -> usize {
    while at > 0 && bytes.get(at).is_some_and(|b| (b & 0xC0) == 0x80) {
        at -= 1;
    }
    at
}

/// Whether the content from `at` on (a char boundary) is text serde_json reads as a `String`.
pub(super) fn valid_from(inner: &str, mut at: usize) -> bool {
    let bytes = inner.as_bytes();
    loop {
        at = run_end(bytes, at);
        if at == bytes.len() {
            return true;
        }
        if bytes[at] != b'\\' {
            return false;
        }
        match bytes.get(at + 1) {
            Some(&e) if is_short_escape(e) => at += 2,
            _ => match escape(&bytes[at..]) {
                Some((_, used)) => at += used,
                None => return false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn serde_decode(quoted: &str) -> Option<String> {
        serde_json::from_str::<String>(quoted).ok()
    }

    #[test]
    fn decodes_as_serde_json_does() {
        let cases = [
            r#""""#,
            r#""plain""#,
            r#""a\"b\\c\/d\b\f\n\r\t""#,
            r#""\u00e9\u20AC\ud83d\ude00""#,
            r#""é€😀 raw""#,
            r#""{\"kind\":\"Deployment\",\"spec\":{\"replicas\":2}}""#,
            r#""\ud83d""#,
            r#""\ude00x""#,
            r#""\ud83d\u0041""#,
            r#""\x""#,
            r#""\u12""#,
            "\"tab\there\"",
            r#""unterminated"#,
        ];
        for quoted in cases {
            assert_eq!(
                decode(quoted).map(Cow::into_owned),
                serde_decode(quoted),
                "{quoted}"
            );
        }
    }

    #[test]
    fn compares_contents_not_spellings() {
        let cases = [
            (r#""abc""#, r#""abc""#, Some(true)),
            (r#""abc""#, r#""abd""#, Some(false)),
            (r#""abc""#, r#""ab""#, Some(false)),
            (r#""\u0061bc""#, r#""abc""#, Some(true)),
            (r#""\/""#, r#""/""#, Some(true)),
            (r#""é""#, r#""\u00e9""#, Some(true)),
            (r#""😀""#, r#""\ud83d\ude00""#, Some(true)),
            (r#""x\"y""#, r#""x\u0022y""#, Some(true)),
            (r#""a\ud83d""#, r#""b""#, None),
        ];
        for (a, b, want) in cases {
            assert_eq!(contents_eq(a, b), want, "{a} {b}");
            assert_eq!(contents_eq(b, a), want, "{b} {a}");
        }
        // Text that is not JSON (never compared by the engine, which reads checked text) is
        // refused when read escape by escape.
        assert_eq!(contents_eq_escape_by_escape("b", "b\\q"), None);
        assert_eq!(contents_eq_escape_by_escape("b\\q", "b"), None);
    }

    /// A string literal spelt with a random mix of raw characters and escapes.
    fn spelt(content: &str, seed: &[u8]) -> String {
        let mut out = String::from('"');
        for (i, c) in content.chars().enumerate() {
            let choice = seed.get(i % seed.len().max(1)).copied().unwrap_or(0) % 3;
            match (c, choice) {
                ('"', _) => out.push_str("\\\""),
                ('\\', _) => out.push_str("\\\\"),
                (c, _) if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                (c, 1) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{unit:04X}"));
                    }
                }
                (c, _) => out.push(c),
            }
        }
        out.push('"');
        out
    }

    proptest! {
        #[test]
        fn any_spelling_decodes_and_compares_as_serde_json(
            a in "[a-c\"\\\\é😀\u{1}/]{0,12}",
            b in "[a-c\"\\\\é😀\u{1}/]{0,12}",
            seed_a in prop::collection::vec(any::<u8>(), 1..8),
            seed_b in prop::collection::vec(any::<u8>(), 1..8),
        ) {
            let (qa, qb) = (spelt(&a, &seed_a), spelt(&b, &seed_b));
            prop_assert_eq!(decode(&qa).map(Cow::into_owned), serde_decode(&qa));
            prop_assert_eq!(contents_eq(&qa, &qb), Some(a == b));
            let same = spelt(&a, &seed_b);
            prop_assert_eq!(contents_eq(&qa, &same), Some(true));
        }
    }
}
