//! The first stage of [`super::scan`]: what each byte of a 64-byte block is, as bit masks
//! (bit `i` for byte `i`), and which bytes lie inside strings.
//!
//! Sixty-four bytes are classified with a few vector compares where the target has SSE2 (every
//! x86_64), with two nibble lookups where the CPU has AVX2 (found out once, at run time), byte
//! by byte elsewhere; all give the same masks (tested). [`super::scan`] picks one per scan. Which quotes open and
//! close strings then follows from the masks alone, with a carry from block to block (the
//! technique of simdjson, Langdale & Lemire 2019): a quote preceded by an odd run of
//! backslashes is escaped, and the bytes between an opening and a closing quote are the
//! prefix XOR of the other quotes. Finding where one string ends (`super::brackets`) needs only
//! the quotes and the backslashes: [`quotes_and_backslashes`].

/// Bytes per block.
pub(super) const BLOCK: usize = 64;

/// What the bytes of one block are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Classes {
    pub quote: u64,
    pub backslash: u64,
    /// Below 0x20 (none may stand unescaped in a string).
    pub control: u64,
    /// `{ } [ ] : ,`
    pub structural: u64,
    /// Space, tab, line feed, carriage return.
    pub whitespace: u64,
}

/// Classifies one block.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline]
pub(super) fn classify(block: &[u8; BLOCK]) -> Classes {
    // SAFETY: `classify_sse2` asks only that the CPU have SSE2; this is compiled only where
    // SSE2 is enabled for the whole program (every x86_64 target). It reads no memory through
    // a pointer.
    unsafe { classify_sse2(block) }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline]
#[target_feature(enable = "sse2")]
fn classify_sse2(block: &[u8; BLOCK]) -> Classes {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
    };
    let splat = |b: u8| _mm_set1_epi8(b as i8);
    let quote = splat(b'"');
    let backslash = splat(b'\\');
    let last_control = splat(0x1f);
    let open_brace = splat(b'{');
    let close_brace = splat(b'}');
    let fold = splat(0x20);
    let colon = splat(b':');
    let comma = splat(b',');
    let space = splat(b' ');
    let tab = splat(b'\t');
    let line_feed = splat(b'\n');
    let carriage_return = splat(b'\r');
    let mask = |v: __m128i| u64::from(_mm_movemask_epi8(v) as u16);
    let mut classes = Classes::default();
    for (lane, chunk) in block.chunks_exact(16).enumerate() {
        let v = load_sse2(chunk);
        let shift = 16 * lane as u32;
        classes.quote |= mask(_mm_cmpeq_epi8(v, quote)) << shift;
        classes.backslash |= mask(_mm_cmpeq_epi8(v, backslash)) << shift;
        classes.control |= mask(_mm_cmpeq_epi8(_mm_min_epu8(v, last_control), v)) << shift;
        // `[` and `]` are `{` and `}` without the 0x20 bit.
        let folded = _mm_or_si128(v, fold);
        let brackets = _mm_or_si128(
            _mm_cmpeq_epi8(folded, open_brace),
            _mm_cmpeq_epi8(folded, close_brace),
        );
        let separators = _mm_or_si128(_mm_cmpeq_epi8(v, colon), _mm_cmpeq_epi8(v, comma));
        classes.structural |= mask(_mm_or_si128(brackets, separators)) << shift;
        let blank = _mm_or_si128(_mm_cmpeq_epi8(v, space), _mm_cmpeq_epi8(v, tab));
        let newline = _mm_or_si128(
            _mm_cmpeq_epi8(v, line_feed),
            _mm_cmpeq_epi8(v, carriage_return),
        );
        classes.whitespace |= mask(_mm_or_si128(blank, newline)) << shift;
    }
    classes
}

/// Classifies one block with AVX2: white space and structure each by one table lookup on the
/// low nibble (the technique of simdjson): a byte is white space when the table holds that
/// very byte at its low nibble, and structure when, with the 0x20 bit set (`[`, `]` become
/// `{`, `}`), it equals the other table's entry; two control characters that pass the second
/// test (0x0c, 0x1a) are taken out with the controls.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn classify_avx2(block: &[u8; BLOCK]) -> Classes {
    use std::arch::x86_64::{
        __m256i, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_min_epu8, _mm256_movemask_epi8,
        _mm256_or_si256, _mm256_set1_epi8, _mm256_setr_epi8, _mm256_shuffle_epi8,
    };
    // SAFETY: an unaligned load of the 32 bytes `half` borrows. (Built from four u64 words
    // instead, each half took 14 instructions to load.)
    let load = |half: &[u8; 32]| unsafe { _mm256_loadu_si256(half.as_ptr().cast()) };
    // Every other entry is 0, which only a byte of low nibble 0 could equal, and that place
    // holds a space.
    #[rustfmt::skip]
    let spaces = _mm256_setr_epi8(
        b' ' as i8, 0, 0, 0, 0, 0, 0, 0, 0, b'\t' as i8, b'\n' as i8, 0, 0, b'\r' as i8, 0, 0,
        b' ' as i8, 0, 0, 0, 0, 0, 0, 0, 0, b'\t' as i8, b'\n' as i8, 0, 0, b'\r' as i8, 0, 0,
    );
    #[rustfmt::skip]
    let operators = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, b':' as i8, b'{' as i8, b',' as i8, b'}' as i8, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, b':' as i8, b'{' as i8, b',' as i8, b'}' as i8, 0, 0,
    );
    let quote = _mm256_set1_epi8(b'"' as i8);
    let backslash = _mm256_set1_epi8(b'\\' as i8);
    let last_control = _mm256_set1_epi8(0x1f);
    let fold = _mm256_set1_epi8(0x20);
    let mask = |v: __m256i| u64::from(_mm256_movemask_epi8(v) as u32);
    let mut classes = Classes::default();
    let (halves, _) = block.as_chunks::<32>();
    for (n, half) in halves.iter().enumerate() {
        let v = load(half);
        let shift = 32 * n as u32;
        classes.quote |= mask(_mm256_cmpeq_epi8(v, quote)) << shift;
        classes.backslash |= mask(_mm256_cmpeq_epi8(v, backslash)) << shift;
        classes.control |= mask(_mm256_cmpeq_epi8(_mm256_min_epu8(v, last_control), v)) << shift;
        // A byte with its high bit set looks up 0, which no such byte equals.
        classes.whitespace |= mask(_mm256_cmpeq_epi8(_mm256_shuffle_epi8(spaces, v), v)) << shift;
        let folded = _mm256_or_si256(v, fold);
        classes.structural |=
            mask(_mm256_cmpeq_epi8(_mm256_shuffle_epi8(operators, v), folded)) << shift;
    }
    classes.structural &= !classes.control;
    classes
}

/// Sixteen bytes of a block as a vector. The load goes through two u64 halves: no pointer, so
/// nothing here can read out of bounds (a shorter `chunk` panics).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline]
#[target_feature(enable = "sse2")]
fn load_sse2(chunk: &[u8]) -> std::arch::x86_64::__m128i {
    let half = |from: usize| {
        let mut word = [0u8; 8];
        word.copy_from_slice(&chunk[from..from + 8]);
        i64::from_le_bytes(word)
    };
    std::arch::x86_64::_mm_set_epi64x(half(8), half(0))
}

/// The quotes and the backslashes of one block, as [`Classes`] has them: all that finding a
/// string's end needs (see [`super::brackets`]), at a quarter of a whole classification.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline]
pub(super) fn quotes_and_backslashes(block: &[u8; BLOCK]) -> (u64, u64) {
    // SAFETY: as for `classify`: SSE2 is enabled for every x86_64 target; no pointer is read.
    unsafe { quotes_and_backslashes_sse2(block) }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline]
#[target_feature(enable = "sse2")]
fn quotes_and_backslashes_sse2(block: &[u8; BLOCK]) -> (u64, u64) {
    use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_movemask_epi8, _mm_set1_epi8};
    let quote = _mm_set1_epi8(b'"' as i8);
    let backslash = _mm_set1_epi8(b'\\' as i8);
    let (mut quotes, mut backslashes) = (0, 0);
    for (lane, chunk) in block.chunks_exact(16).enumerate() {
        let v = load_sse2(chunk);
        let shift = 16 * lane as u32;
        quotes |= u64::from(_mm_movemask_epi8(_mm_cmpeq_epi8(v, quote)) as u16) << shift;
        backslashes |= u64::from(_mm_movemask_epi8(_mm_cmpeq_epi8(v, backslash)) as u16) << shift;
    }
    (quotes, backslashes)
}

/// The quotes and the backslashes of one block (byte by byte, where no vector unit is assumed).
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline]
pub(super) fn quotes_and_backslashes(block: &[u8; BLOCK]) -> (u64, u64) {
    let classes = classify_bytes(block);
    (classes.quote, classes.backslash)
}

/// Classifies one block (byte by byte, where no vector unit is assumed).
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline]
pub(super) fn classify(block: &[u8; BLOCK]) -> Classes {
    classify_bytes(block)
}

/// Classifies one block byte by byte: the portable classifier, and the one the vector
/// classifier is tested against.
#[cfg_attr(all(target_arch = "x86_64", target_feature = "sse2"), allow(dead_code))]
pub(super) fn classify_bytes(block: &[u8; BLOCK]) -> Classes {
    let mut classes = Classes::default();
    for (i, &b) in block.iter().enumerate() {
        let bit = 1u64 << i;
        match b {
            b'"' => classes.quote |= bit,
            b'\\' => classes.backslash |= bit,
            b'{' | b'}' | b'[' | b']' | b':' | b',' => classes.structural |= bit,
            _ => {}
        }
        if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            classes.whitespace |= bit;
        }
        if b < 0x20 {
            classes.control |= bit;
        }
    }
    classes
}

/// The bytes escaped by a backslash (the byte after each backslash that is not itself
/// escaped). `carry` says whether the block's first byte is escaped (the last block ended on
/// an escaping backslash), and is set for the next block.
///
/// Without a branch per backslash (simdjson's method): in a run of backslashes every other one
/// escapes, starting with the first; adding the odd-placed starts of runs to the backslashes
/// carries out of each run, which tells apart the runs that start on an odd byte.
#[inline]
pub(super) fn escaped(backslash: u64, carry: &mut bool) -> u64 {
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

/// [`prefix_xor`] as one carry-less multiply by all ones (simdjson's way): a latency of a few
/// cycles against the twelve of six dependent shifts and XORs, on the first stage's chain
/// from one block to the next.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "pclmulqdq,sse2")]
#[inline]
pub(super) fn prefix_xor_clmul(x: u64) -> u64 {
    use std::arch::x86_64::{
        _mm_clmulepi64_si128, _mm_cvtsi64_si128, _mm_cvtsi128_si64, _mm_set1_epi8,
    };
    let product = _mm_clmulepi64_si128(_mm_cvtsi64_si128(x as i64), _mm_set1_epi8(-1), 0);
    _mm_cvtsi128_si64(product) as u64
}

/// Bit `i` set when an odd number of bits `0..=i` of `x` are set: with `x` the unescaped
/// quotes, the bytes from each opening quote up to (not including) its closing quote.
#[inline]
pub(super) fn prefix_xor(mut x: u64) -> u64 {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    x
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The widest classifier this CPU runs (the baseline where it has no AVX2).
    fn widest(block: &[u8; BLOCK]) -> Classes {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, as just asked.
            return unsafe { classify_avx2(block) };
        }
        classify(block)
    }

    /// The escaped bytes by the definition: walking the text, each backslash not escaped
    /// escapes the byte after it.
    fn escaped_by_walking(bytes: &[u8]) -> Vec<bool> {
        let mut escaped = vec![false; bytes.len() + 1];
        for i in 0..bytes.len() {
            if bytes[i] == b'\\' && !escaped[i] {
                escaped[i + 1] = true;
            }
        }
        escaped
    }

    #[test]
    fn prefix_xor_spans_from_each_opening_quote() {
        assert_eq!(prefix_xor(0), 0);
        assert_eq!(prefix_xor(0b1), u64::MAX);
        assert_eq!(prefix_xor(0b1001), 0b0111);
        assert_eq!(prefix_xor(1 << 63), 1 << 63);
    }

    /// Every byte value at every place of a block, through every classifier.
    #[test]
    fn classifiers_agree_on_every_byte_at_every_place() {
        for shift in 0..BLOCK {
            for quarter in 0..4 {
                let block: [u8; BLOCK] =
                    std::array::from_fn(|i| ((i + shift) % BLOCK + quarter * BLOCK) as u8);
                let expected = classify_bytes(&block);
                assert_eq!(
                    classify(&block),
                    expected,
                    "shift {shift} quarter {quarter}"
                );
                assert_eq!(widest(&block), expected, "shift {shift} quarter {quarter}");
                assert_eq!(
                    quotes_and_backslashes(&block),
                    (expected.quote, expected.backslash),
                    "shift {shift} quarter {quarter}"
                );
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// The carry-less multiply gives the prefix XOR of the shifts.
        #[cfg(target_arch = "x86_64")]
        #[test]
        fn prefix_xor_by_multiply(x in any::<u64>()) {
            if std::arch::is_x86_feature_detected!("pclmulqdq") {
                // SAFETY: the CPU has PCLMULQDQ, as just asked (and SSE2, as every x86_64).
                prop_assert_eq!(unsafe { prefix_xor_clmul(x) }, prefix_xor(x));
            }
        }

        /// The vector classifier and the byte-by-byte one agree on every block.
        #[test]
        fn classifiers_agree(block in prop::array::uniform32(any::<u8>()),
                             tail in prop::array::uniform32(
                                 prop::sample::select(b"\"\\{}[]:, \t\n\r\x00\x1f\x20\x7b\x7d\x5b\x5d\xff\x80a".to_vec()))) {
            let mut whole = [0u8; BLOCK];
            whole[..32].copy_from_slice(&block);
            whole[32..].copy_from_slice(&tail);
            prop_assert_eq!(classify(&whole), classify_bytes(&whole));
            prop_assert_eq!(widest(&whole), classify_bytes(&whole));
            let expected = classify_bytes(&whole);
            prop_assert_eq!(quotes_and_backslashes(&whole), (expected.quote, expected.backslash));
        }

        /// Escapes found block by block with the carry are the escapes of the whole text.
        #[test]
        fn escapes_carry_across_blocks(text in prop::collection::vec(
            prop::sample::select(b"\\\\\\a\"".to_vec()), 0..300)) {
            let expected = escaped_by_walking(&text);
            let mut carry = false;
            for (n, block) in text.chunks(BLOCK).enumerate() {
                let mut padded = [b' '; BLOCK];
                padded[..block.len()].copy_from_slice(block);
                let found = escaped(classify_bytes(&padded).backslash, &mut carry);
                for (i, _) in block.iter().enumerate() {
                    prop_assert_eq!(found >> i & 1 == 1, expected[n * BLOCK + i], "byte {}", n * BLOCK + i);
                }
            }
            prop_assert_eq!(carry, expected[text.len()] && text.len() % BLOCK == 0 && !text.is_empty());
        }
    }
}
