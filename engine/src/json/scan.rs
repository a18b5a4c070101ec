//! One strict pass over a request body: it checks that the body is JSON and records where each
//! object and list ends, both at once.
//!
//! The agent's parse used to pay for the body twice before any comparison: serde_json walked it
//! to check it (skipping the objects as raw values), then each object that was read was walked
//! again to index its brackets ([`Brackets::of`]). Those two passes were three quarters of the
//! cost of a decision. This pass does both, at a few instructions per byte: strings eight bytes
//! at a time, structure byte by byte.
//!
//! It is at least as strict as serde_json reading a review: what it accepts, serde_json accepts
//! (proved by a differential property test). Anything it refuses is read again the old way,
//! so serde_json still says what is wrong, in its words, and a body it refused but serde_json
//! accepts (never yet seen) is only slower, never answered differently.

use super::brackets::{ALWAYS_RECORDED, BYTES_PER_ENTRY, Brackets, UNRECORDED, string_stops};

/// Checks that `text` is one JSON value (white space around it allowed), nested at most
/// `max_depth` levels, and indexes its containers within the bound of [`Brackets`]; `None`
/// when it is not JSON, nests deeper, or is JSON this pass does not accept.
pub(crate) fn scan(text: &str, max_depth: usize) -> Option<Brackets> {
    let bytes = text.as_bytes();
    // Offsets are u32: the agent's bodies are at most 8 MiB.
    u32::try_from(bytes.len()).ok()?;
    let limit = bytes.len() / BYTES_PER_ENTRY + ALWAYS_RECORDED;
    let mut pairs: Vec<(u32, u32)> = Vec::with_capacity(limit.min(bytes.len() / 32 + 8));
    let mut recorded_until = bytes.len();
    // The containers open at this point: their place in `pairs` (or UNRECORDED), and whether
    // each is an object.
    let mut open: Vec<u32> = Vec::new();
    let mut in_object: Vec<bool> = Vec::new();
    let mut i = skip_whitespace(bytes, 0);
    'value: loop {
        // A value starts at `i`.
        match *bytes.get(i)? {
            b'"' => i = string_end(bytes, i + 1)?,
            opener @ (b'{' | b'[') => {
                if open.len() >= max_depth {
                    return None;
                }
                if pairs.len() < limit {
                    open.push(pairs.len() as u32);
                    pairs.push((i as u32, UNRECORDED));
                } else {
                    recorded_until = recorded_until.min(i);
                    open.push(UNRECORDED);
                }
                let is_object = opener == b'{';
                in_object.push(is_object);
                i = skip_whitespace(bytes, i + 1);
                let closer = if is_object { b'}' } else { b']' };
                if bytes.get(i) == Some(&closer) {
                    close(&mut pairs, &mut open, &mut in_object, i);
                    i += 1;
                } else {
                    if is_object {
                        i = after_key(bytes, i)?;
                    }
                    continue 'value;
                }
            }
            b't' => i = literal_end(bytes, i, b"true")?,
            b'f' => i = literal_end(bytes, i, b"false")?,
            b'n' => i = literal_end(bytes, i, b"null")?,
            b'-' | b'0'..=b'9' => i = number_end(bytes, i)?,
            _ => return None,
        }
        // A value ended at `i`: the next entry or item, or the end of containers.
        loop {
            i = skip_whitespace(bytes, i);
            let Some(&is_object) = in_object.last() else {
                return (i == bytes.len())
                    .then(|| Brackets::from_pairs(pairs, recorded_until as u32));
            };
            match (*bytes.get(i)?, is_object) {
                (b',', _) => {
                    i = skip_whitespace(bytes, i + 1);
                    if is_object {
                        i = after_key(bytes, i)?;
                    }
                    continue 'value;
                }
                (b'}', true) | (b']', false) => {
                    close(&mut pairs, &mut open, &mut in_object, i);
                    i += 1;
                }
                _ => return None,
            }
        }
    }
}

/// Records the end of the innermost open container, which closes at `at`.
#[inline]
fn close(pairs: &mut [(u32, u32)], open: &mut Vec<u32>, in_object: &mut Vec<bool>, at: usize) {
    in_object.pop();
    if let Some(slot) = open.pop()
        && slot != UNRECORDED
    {
        pairs[slot as usize].1 = at as u32;
    }
}

#[inline]
fn skip_whitespace(bytes: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = bytes.get(at) {
        at += 1;
    }
    at
}

/// Past a key and its colon, where its value starts: `at` must open the key's string.
#[inline]
fn after_key(bytes: &[u8], at: usize) -> Option<usize> {
    if bytes.get(at) != Some(&b'"') {
        return None;
    }
    let end = string_end(bytes, at + 1)?;
    // Compact JSON (what the API server sends): the colon right after the key.
    let colon = if bytes.get(end) == Some(&b':') {
        end
    } else {
        skip_whitespace(bytes, end)
    };
    (bytes.get(colon) == Some(&b':')).then(|| skip_whitespace(bytes, colon + 1))
}

/// The end (exclusive) of the string whose content starts at `i`, checked: no control
/// character, every escape one of JSON's. Eight bytes at a time until a quote, a backslash
/// or a control character.
#[inline(always)]
fn string_end(bytes: &[u8], mut i: usize) -> Option<usize> {
    loop {
        while let Some(word) = bytes.get(i..).and_then(<[u8]>::first_chunk::<8>) {
            let x = u64::from_le_bytes(*word);
            let marks = string_stops(x);
            if marks != 0 {
                i += (marks.trailing_zeros() / 8) as usize;
                break;
            }
            i += 8;
        }
        match *bytes.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' => match *bytes.get(i + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                b'u' => {
                    let hex = bytes.get(i + 2..i + 6)?;
                    if !hex.iter().all(u8::is_ascii_hexdigit) {
                        return None;
                    }
                    i += 6;
                }
                _ => return None,
            },
            0x00..=0x1f => return None,
            _ => i += 1,
        }
    }
}

#[inline]
fn literal_end(bytes: &[u8], at: usize, literal: &[u8]) -> Option<usize> {
    let end = at + literal.len();
    (bytes.get(at..end)? == literal).then_some(end)
}

/// The end of the number at `at`: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
#[inline]
fn number_end(bytes: &[u8], mut at: usize) -> Option<usize> {
    let digits_from = |bytes: &[u8], mut at: usize| {
        while bytes.get(at).is_some_and(u8::is_ascii_digit) {
            at += 1;
        }
        at
    };
    if bytes.get(at) == Some(&b'-') {
        at += 1;
    }
    match *bytes.get(at)? {
        b'0' => at += 1,
        b'1'..=b'9' => at = digits_from(bytes, at + 1),
        _ => return None,
    }
    if bytes.get(at) == Some(&b'.') {
        let end = digits_from(bytes, at + 1);
        if end == at + 1 {
            return None;
        }
        at = end;
    }
    if let Some(b'e' | b'E') = bytes.get(at) {
        at += 1;
        if let Some(b'+' | b'-') = bytes.get(at) {
            at += 1;
        }
        let end = digits_from(bytes, at);
        if end == at {
            return None;
        }
        at = end;
    }
    Some(at)
}

#[cfg(test)]
#[path = "scan_tests.rs"]
mod tests;
