//! Where each object and list of a JSON text ends, found in one pass.
//!
//! Reading raw text lazily means finding where a value ends before it can be skipped or
//! compared; scanning a container for its closing bracket costs its whole length, and a walk
//! down to a change asks that of every level on the way (and `get` of every sibling): the cost
//! grows with depth × size. One pass over the text records every container's end instead, so
//! each later question is a lookup in a sorted list, starting where the last one ended
//! ([`Brackets::close_of_near`]). The pass runs only for a document that is actually read (two
//! identical objects are settled by their bytes and never indexed).
//!
//! Bounded: at most one entry per [`BYTES_PER_ENTRY`] bytes of text, plus [`ALWAYS_RECORDED`]
//! (8 bytes each, so the index is at most half the text's size and 512 bytes); containers past
//! that are not recorded and are found by scanning, as without an index.

use std::cell::Cell;

/// Bytes per block of [`blocks_to_string_end`].
const BLOCK: usize = 64;

/// Text per recorded container, at most (the memory bound of the index).
const BYTES_PER_ENTRY: usize = 16;
/// Containers recorded whatever the text's size.
const ALWAYS_RECORDED: usize = 64;

/// The end of every object and list of one text, in the order they open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Brackets {
    /// (opening offset, closing offset) of each recorded container, sorted by opening offset.
    pairs: Vec<(u32, u32)>,
    /// Every container opening before this offset is recorded (past it, the bound ran out).
    recorded_until: u32,
}

/// Eight copies of a byte, for comparing eight bytes at a time.
pub(super) const fn splat(b: u8) -> u64 {
    u64::from_le_bytes([b; 8])
}

/// The bits marking bytes of `x` that are zero: the lowest marked byte is always the first
/// zero byte (bytes above it may be marked falsely, which is never looked at).
#[inline]
pub(super) fn zero_bytes(x: u64) -> u64 {
    x.wrapping_sub(splat(0x01)) & !x & splat(0x80)
}

/// The bits marking the bytes of `x` that stop a run of plain string content: a quote, a
/// backslash or a control character (below 0x20, which a JSON string may not hold). As with
/// [`zero_bytes`], the lowest mark is exact.
#[inline]
pub(super) fn string_stops(x: u64) -> u64 {
    let controls = x.wrapping_sub(splat(0x20)) & !x & splat(0x80);
    zero_bytes(x ^ splat(b'"')) | zero_bytes(x ^ splat(b'\\')) | controls
}

/// The end (exclusive) of the string whose content starts at `i` (just past its opening
/// quote): eight bytes at a time until a quote or a backslash, then the byte itself; from the
/// first escape on, a block at a time ([`blocks_to_string_end`]).
#[inline]
pub(super) fn string_end_from(bytes: &[u8], mut i: usize) -> usize {
    loop {
        while let Some(chunk) = bytes.get(i..i + 8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            let x = u64::from_le_bytes(word);
            let marks = zero_bytes(x ^ splat(b'"')) | zero_bytes(x ^ splat(b'\\'));
            if marks != 0 {
                i += (marks.trailing_zeros() / 8) as usize;
                break;
            }
            i += 8;
        }
        match bytes.get(i) {
            Some(b'"') => return i + 1,
            Some(b'\\') => match blocks_to_string_end(bytes, i) {
                Ok(end) => return end,
                // What is left after the blocks, byte by byte (its first byte escaped or not).
                Err((at, escaped_first)) if at > i => i = at + usize::from(escaped_first),
                Err(_) => i += 2,
            },
            Some(_) => i += 1,
            None => return bytes.len(),
        }
    }
}

/// From `i`, an unescaped backslash inside a string, to the string's end, [`BLOCK`] bytes at a
/// time while that many are left. A string with one escape usually holds many (the JSON of a
/// `last-applied-configuration` annotation has `\"` every few bytes), and stopping at each
/// costs more than classifying the block: the quotes that no odd run of backslashes escapes
/// end the string. `Err` with where the blocks ended and whether the byte there is escaped.
// Out of line: the common string, short and without escapes, stays a small inlined loop.
#[inline(never)]
fn blocks_to_string_end(bytes: &[u8], mut i: usize) -> Result<usize, (usize, bool)> {
    let mut escaped_first = false;
    while let Some(block) = bytes
        .get(i..i + BLOCK)
        .and_then(|b| <&[u8; BLOCK]>::try_from(b).ok())
    {
        let (quotes, backslashes) = quotes_and_backslashes(block);
        let quotes = quotes & !escaped(backslashes, &mut escaped_first);
        if quotes != 0 {
            return Ok(i + quotes.trailing_zeros() as usize + 1);
        }
        i += BLOCK;
    }
    Err((i, escaped_first))
}

/// The quotes and the backslashes of one block, as bit masks (bit `i` for byte `i`), eight
/// bytes at a time: each byte's equality exactly in its high bit (no borrow crosses bytes), the
/// eight high bits gathered by one multiply.
#[inline]
fn quotes_and_backslashes(block: &[u8; BLOCK]) -> (u64, u64) {
    const LOW7: u64 = splat(0x7f);
    /// The high bit of each byte of `x` that is `b`.
    fn equal(x: u64, b: u8) -> u64 {
        let t = x ^ splat(b);
        !((t & LOW7).wrapping_add(LOW7) | t) & splat(0x80)
    }
    /// The high bits of the eight bytes as the low eight bits (byte `i`'s as bit `i`).
    fn gather(high_bits: u64) -> u64 {
        high_bits.wrapping_mul(0x0002_0408_1020_4081) >> 56
    }
    let (mut quotes, mut backslashes) = (0u64, 0u64);
    let (words, _) = block.as_chunks::<8>();
    for (n, word) in words.iter().enumerate() {
        let x = u64::from_le_bytes(*word);
        quotes |= gather(equal(x, b'"')) << (8 * n);
        backslashes |= gather(equal(x, b'\\')) << (8 * n);
    }
    (quotes, backslashes)
}

/// The bytes escaped by a backslash (the byte after each backslash that is not itself
/// escaped). `carry` says whether the block's first byte is escaped (the last block ended on
/// an escaping backslash), and is set for the next block.
///
/// Without a branch per backslash (simdjson's method, Langdale & Lemire 2019): in a run of
/// backslashes every other one escapes, starting with the first; adding the odd-placed starts
/// of runs to the backslashes carries out of each run, which tells apart the runs that start
/// on an odd byte.
#[inline]
fn escaped(backslash: u64, carry: &mut bool) -> u64 {
    const EVEN: u64 = 0x5555_5555_5555_5555;
    let before = u64::from(*carry);
    // A backslash escaped by the last block's escapes nothing.
    let backslash = backslash & !before;
    let follows_backslash = backslash << 1 | before;
    let odd_starts = backslash & !EVEN & !follows_backslash;
    let (runs_from_even, overflowed) = odd_starts.overflowing_add(backslash);
    *carry = overflowed;
    (EVEN ^ (runs_from_even << 1)) & follows_backslash
}

/// Marks a container opened past the entry bound on the stack of open containers.
const UNRECORDED: u32 = u32::MAX;

impl Brackets {
    /// Indexes `text`, which serde_json validated (on other text the result is only
    /// incomplete: unmatched brackets are never recorded, and lookups of them fail).
    pub(crate) fn of(text: &str) -> Self {
        let bytes = text.as_bytes();
        // Offsets are u32: the agent's bodies are at most 8 MiB. A longer text is not indexed.
        if u32::try_from(bytes.len()).is_err() {
            return Self::default();
        }
        let limit = bytes.len() / BYTES_PER_ENTRY + ALWAYS_RECORDED;
        let mut pairs: Vec<(u32, u32)> = Vec::with_capacity(limit.min(bytes.len() / 32 + 8));
        let mut recorded_until = bytes.len() as u32;
        // Positions in `pairs` of the containers open at this point.
        let mut open: Vec<u32> = Vec::new();
        let mut i = 0;
        while let Some(&b) = bytes.get(i) {
            i += 1;
            match b {
                b'"' => i = string_end_from(bytes, i),
                b'{' | b'[' => {
                    let at = (i - 1) as u32;
                    if pairs.len() < limit {
                        open.push(pairs.len() as u32);
                        pairs.push((at, UNRECORDED));
                    } else {
                        recorded_until = recorded_until.min(at);
                        open.push(UNRECORDED);
                    }
                }
                b'}' | b']' => {
                    if let Some(slot) = open.pop()
                        && slot != UNRECORDED
                    {
                        pairs[slot as usize].1 = (i - 1) as u32;
                    }
                }
                _ => {}
            }
        }
        // Containers never closed (text that was not valid) are forgotten.
        pairs.retain(|&(_, close)| close != UNRECORDED);
        Self {
            pairs,
            recorded_until,
        }
    }

    /// The offset of the closing bracket of the container opening at `open`, when recorded.
    #[cfg(test)]
    pub(crate) fn close_of(&self, open: usize) -> Option<usize> {
        let open = u32::try_from(open).ok()?;
        let at = self.pairs.binary_search_by_key(&open, |&(o, _)| o).ok()?;
        Some(self.pairs[at].1 as usize)
    }

    /// [`Brackets::close_of`], looked up from `cursor`, which it leaves just past the
    /// container found. A walk reads a document forward: the container it asks for next is
    /// most often the first one inside the last (found at the cursor) or the next sibling
    /// (found by doubling steps past the last one's descendants). A binary search of the whole
    /// index for each was three fifths of the time spent finding where values end (a chain
    /// of about ten dependent loads per container).
    pub(crate) fn close_of_near(&self, open: usize, cursor: &Cell<u32>) -> Option<usize> {
        let open = u32::try_from(open).ok()?;
        let pairs = &self.pairs;
        let from = (cursor.get() as usize).min(pairs.len());
        let at = if pairs.get(from).is_some_and(|&(o, _)| o <= open) {
            // pairs[low] opens at or before `open`; pairs[high] (or the end) after it.
            let (mut low, mut step) = (from, 1);
            let high = loop {
                let probe = low + step;
                match pairs.get(probe) {
                    Some(&(o, _)) if o <= open => {
                        low = probe;
                        step *= 2;
                    }
                    Some(_) => break probe,
                    None => break pairs.len(),
                }
            };
            low + pairs[low..high]
                .binary_search_by_key(&open, |&(o, _)| o)
                .ok()?
        } else {
            pairs[..from]
                .binary_search_by_key(&open, |&(o, _)| o)
                .ok()?
        };
        cursor.set((at + 1) as u32);
        Some(pairs[at].1 as usize)
    }

    /// How many containers are recorded.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.pairs.len()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The closing offset of every container by a plain stack, for comparison.
    fn expected(text: &str) -> Vec<(usize, usize)> {
        let value: serde_json::Value = serde_json::from_str(text).expect("valid");
        drop(value);
        let bytes = text.as_bytes();
        let (mut stack, mut out, mut in_string, mut escaped) = (vec![], vec![], false, false);
        for (i, &b) in bytes.iter().enumerate() {
            if in_string {
                match (escaped, b) {
                    (true, _) => escaped = false,
                    (false, b'\\') => escaped = true,
                    (false, b'"') => in_string = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => in_string = true,
                b'{' | b'[' => stack.push(i),
                b'}' | b']' => out.push((stack.pop().expect("balanced"), i)),
                _ => {}
            }
        }
        out.sort();
        out
    }

    #[test]
    fn every_container_is_found_with_its_end() {
        let texts = [
            r#"{"a": [1, {"b": "]}"}, [[]]], "c": {"d\"{": "\\"}}"#,
            r#"[ { } , [ "[" , "\\\"]" ] , { "k" : [ ] } ]"#,
            r#"{"s": "é{[", "n": null}"#,
        ];
        for text in texts {
            let brackets = Brackets::of(text);
            let want = expected(text);
            assert_eq!(brackets.len(), want.len(), "{text}");
            for (open, close) in want {
                assert_eq!(brackets.close_of(open), Some(close), "{text} at {open}");
            }
            // Positions that open nothing are not found.
            assert_eq!(brackets.close_of(text.len() + 5), None);
        }
    }

    #[test]
    fn the_index_is_bounded_by_the_text() {
        // 10,000 empty lists in 30,001 bytes: at most 1 entry per 16 bytes is kept; the rest
        // are left to scanning, and those kept are right.
        let text = format!("[{}]", vec!["[]"; 10_000].join(","));
        let brackets = Brackets::of(&text);
        assert_eq!(
            brackets.len(),
            text.len() / BYTES_PER_ENTRY + ALWAYS_RECORDED
        );
        assert_eq!(brackets.close_of(0), Some(text.len() - 1));
        assert_eq!(brackets.close_of(1), Some(2));
        assert_eq!(brackets.close_of(text.len() - 3), None);
    }

    fn nested() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::Value;
        Just(Value::Null).prop_recursive(6, 96, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec(("[a-c]{1,2}", inner), 0..6)
                    .prop_map(|entries| Value::Object(entries.into_iter().collect())),
            ]
        })
    }

    /// The end of the string whose content starts at `i`, byte by byte.
    fn string_end_bytewise(bytes: &[u8], mut i: usize) -> usize {
        while let Some(&b) = bytes.get(i) {
            match b {
                b'"' => return i + 1,
                b'\\' => i += 2,
                _ => i += 1,
            }
        }
        bytes.len()
    }

    /// String contents dense with escapes (runs of backslashes of any length, escaped quotes,
    /// `\u` escapes) and of any length around the block size, text after the string included.
    fn escaped_contents() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            Just("a".to_owned()),
            Just("ab cd".to_owned()),
            Just("\\\"".to_owned()),
            Just("\\\\".to_owned()),
            Just("\\\\\\\\".to_owned()),
            Just("\\u00e9".to_owned()),
            Just("é".to_owned()),
            "[a-z]{0,70}",
        ];
        prop::collection::vec(piece, 0..60).prop_map(|pieces| pieces.concat())
    }

    #[test]
    fn quotes_and_backslashes_are_found_at_every_place() {
        for byte in 0..=255u8 {
            for at in 0..BLOCK {
                let mut block = [b'a'; BLOCK];
                block[at] = byte;
                let bit = 1u64 << at;
                let (quotes, backslashes) = quotes_and_backslashes(&block);
                assert_eq!(quotes, if byte == b'"' { bit } else { 0 }, "{byte} at {at}");
                assert_eq!(
                    backslashes,
                    if byte == b'\\' { bit } else { 0 },
                    "{byte} at {at}"
                );
            }
        }
        let all = [b'"'; BLOCK];
        assert_eq!(quotes_and_backslashes(&all), (u64::MAX, 0));
    }

    #[test]
    fn string_ends_around_block_edges() {
        // An escaped quote, or a run of backslashes, at each offset around one block.
        for offset in 0..2 * BLOCK + 3 {
            for (escape, tail) in [("\\\"", "x"), ("\\\\", ""), ("\\\\\\", "")] {
                // Text after the string, so that a block can reach past its end.
                let text = format!(
                    "\"{}{escape}{tail}\", \"{}\"]",
                    "y".repeat(offset),
                    "z".repeat(BLOCK)
                );
                let bytes = text.as_bytes();
                assert_eq!(
                    string_end_from(bytes, 1),
                    string_end_bytewise(bytes, 1),
                    "{text}"
                );
            }
        }
    }

    proptest! {
        /// Whether found 8 bytes or a block at a time, a string ends where reading it byte by
        /// byte ends it; also when the text is cut inside it.
        #[test]
        fn string_ends_are_those_of_reading_byte_by_byte(
            content in escaped_contents(),
            after in "[a-z\\\\\",]{0,80}",
            cut in any::<prop::sample::Index>(),
        ) {
            let text = format!("\"{content}\"{after}");
            let bytes = text.as_bytes();
            prop_assert_eq!(string_end_from(bytes, 1), string_end_bytewise(bytes, 1));
            prop_assert_eq!(string_end_from(bytes, 1), content.len() + 2);
            let cut = &bytes[..cut.index(bytes.len() + 1)];
            prop_assert_eq!(string_end_from(cut, 1.min(cut.len())), string_end_bytewise(cut, 1.min(cut.len())));
        }

        /// Lookups from a cursor answer as lookups of the whole index do, whatever their
        /// order: forward as a walk reads, backward, or anywhere, on or off a container.
        #[test]
        fn lookups_from_a_cursor_answer_as_a_search_of_the_whole_index(
            document in nested(),
            picks in prop::collection::vec(any::<prop::sample::Index>(), 0..40),
        ) {
            let text = serde_json::to_string(&document).unwrap();
            let brackets = Brackets::of(&text);
            let opens: Vec<usize> = (0..text.len())
                .filter(|&i| matches!(text.as_bytes()[i], b'{' | b'['))
                .collect();
            let anywhere: Vec<usize> = picks.iter().map(|p| p.index(text.len() + 2)).collect();
            let backward: Vec<usize> = opens.iter().rev().copied().collect();
            for order in [&opens, &backward, &anywhere] {
                let cursor = Cell::new(0);
                for &open in order {
                    prop_assert_eq!(
                        brackets.close_of_near(open, &cursor),
                        brackets.close_of(open),
                        "at {} of {}", open, text
                    );
                }
            }
        }
    }

    #[test]
    fn unbalanced_text_gives_no_wrong_answer() {
        let brackets = Brackets::of(r#"{"a": [1, 2"#);
        assert_eq!(brackets.close_of(0), None);
        assert_eq!(brackets.close_of(6), None);
    }
}
