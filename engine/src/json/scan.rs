//! One strict pass over a request body: it checks that the body is JSON and records where each
//! object and list ends, both at once.
//!
//! The agent's parse used to pay for the body twice before any comparison: serde_json walked it
//! to check it (skipping the objects as raw values), then each object that was read was walked
//! again to index its brackets ([`Brackets::of`]). Those two passes were three quarters of the
//! cost of a decision. This pass does both in two stages: [`super::classify`] finds, 64 bytes
//! at a time, the bytes that matter (the structure, the strings' openings, the scalars'
//! starts) and checks the strings' contents; the grammar then steps from one such byte to the
//! next instead of reading every byte.
//!
//! It is at least as strict as serde_json reading a review: what it accepts, serde_json accepts
//! (proved by a differential property test). Anything it refuses is read again the old way,
//! so serde_json still says what is wrong, in its words, and a body it refused but serde_json
//! accepts (never yet seen) is only slower, never answered differently.

use super::brackets::{ALWAYS_RECORDED, BYTES_PER_ENTRY, Brackets, UNRECORDED};
use super::classify::{BLOCK, Classes, classify, escaped, prefix_xor};

/// Checks that `text` is one JSON value (white space around it allowed), nested at most
/// `max_depth` levels, and indexes its containers within the bound of [`Brackets`]; `None`
/// when it is not JSON, nests deeper, or is JSON this pass does not accept.
pub(crate) fn scan(text: &str, max_depth: usize) -> Option<Brackets> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("bmi2")
        && std::arch::is_x86_feature_detected!("pclmulqdq")
    {
        // SAFETY: `scan_avx2` asks only that the CPU have AVX2, BMI2 and PCLMULQDQ, which it
        // was just asked.
        return unsafe { scan_avx2(text, max_depth) };
    }
    scan_with(text, max_depth, classify, prefix_xor)
}

/// [`scan`] compiled for AVX2 as a whole, so that the classifier and both stages make one loop.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi2,pclmulqdq")]
fn scan_avx2(text: &str, max_depth: usize) -> Option<Brackets> {
    scan_with(
        text,
        max_depth,
        |block| super::classify::classify_avx2(block),
        |quotes| super::classify::prefix_xor_clmul(quotes),
    )
}

/// [`scan`] with the given first-stage classifier and prefix XOR.
#[inline(always)]
fn scan_with(
    text: &str,
    max_depth: usize,
    classify: impl Fn(&[u8; BLOCK]) -> Classes,
    prefix_xor: impl Fn(u64) -> u64,
) -> Option<Brackets> {
    let bytes = text.as_bytes();
    // Offsets are u32: the agent's bodies are at most 8 MiB.
    u32::try_from(bytes.len()).ok()?;
    let mut index = Index::new(bytes.len(), max_depth);
    let mut strings = Strings::default();
    let mut grammar = Grammar {
        expect: column::of(state::VALUE_AT_TOP),
    };
    let mut blocks = bytes.chunks_exact(BLOCK);
    for (n, block) in blocks.by_ref().enumerate() {
        let block: &[u8; BLOCK] = block.try_into().ok()?;
        let base = n * BLOCK;
        let marks = strings.marks(bytes, base, classify(block), &prefix_xor)?;
        grammar.steps(bytes, base, block, marks, &mut index)?;
    }
    let rest = blocks.remainder();
    if !rest.is_empty() {
        // White space after the end changes nothing.
        let mut padded = [b' '; BLOCK];
        padded[..rest.len()].copy_from_slice(rest);
        let base = bytes.len() - rest.len();
        let marks = strings.marks(bytes, base, classify(&padded), &prefix_xor)?;
        grammar.steps(bytes, base, &padded, marks, &mut index)?;
    }
    (!strings.in_string && grammar.expect == column::of(state::END)).then(|| index.into_brackets())
}

/// The first stage, block by block: where strings lie, their contents checked, and the bytes
/// that matter to the grammar. Holds what one block leaves to the next.
#[derive(Default)]
struct Strings {
    /// The next block's first byte is escaped.
    escaped: bool,
    /// The next block starts inside a string.
    in_string: bool,
    /// The block ended on a byte of a scalar (a number or a literal), which goes on.
    scalar: bool,
}

impl Strings {
    /// The bytes of the block at `base` that matter to the grammar: brackets, colons and
    /// commas outside strings, the quotes that open strings, the first bytes of scalars.
    /// `None` when a string in it holds a control character or an escape that is not JSON's.
    #[inline(always)]
    fn marks(
        &mut self,
        bytes: &[u8],
        base: usize,
        classes: Classes,
        prefix_xor: impl Fn(u64) -> u64,
    ) -> Option<u64> {
        let escaped = escaped(classes.backslash, &mut self.escaped);
        let quotes = classes.quote & !escaped;
        let in_string = prefix_xor(quotes) ^ if self.in_string { u64::MAX } else { 0 };
        self.in_string = in_string >> 63 == 1;
        if classes.control & in_string != 0 {
            return None;
        }
        // `\"` and `\\` are the common escapes (a `last-applied-configuration` annotation
        // holds one every few bytes): only the others are looked at one by one. (An escape
        // outside a string follows a stray backslash, which is refused below as a scalar.)
        let mut escapes = escaped & in_string & !(classes.quote | classes.backslash);
        while escapes != 0 {
            let at = base + escapes.trailing_zeros() as usize;
            escapes &= escapes - 1;
            if !escape_is_valid(bytes, at) {
                return None;
            }
        }
        let scalar = !(classes.structural | classes.whitespace | classes.quote | in_string);
        let scalar_starts = scalar & !(scalar << 1 | u64::from(self.scalar));
        self.scalar = scalar >> 63 == 1;
        Some((classes.structural & !in_string) | (quotes & in_string) | scalar_starts)
    }
}

/// The grammar's states (what the next byte that matters may be), and the other outcomes of
/// a transition, as small numbers for the table. A value's state says where it stands, so
/// that a string value — a third of the bytes that matter — is one step of the table.
mod state {
    /// A value after a colon.
    pub const VALUE_IN_OBJECT: u8 = 0;
    /// A value after a comma in a list.
    pub const VALUE_IN_LIST: u8 = 1;
    /// A value or `]` (just after `[`).
    pub const VALUE_OR_CLOSE: u8 = 2;
    /// The one value of the text.
    pub const VALUE_AT_TOP: u8 = 3;
    /// A key (after a comma in an object).
    pub const KEY: u8 = 4;
    /// A key or `}` (just after `{`).
    pub const KEY_OR_CLOSE: u8 = 5;
    pub const COLON: u8 = 6;
    /// A comma or `}`.
    pub const NEXT_IN_OBJECT: u8 = 7;
    /// A comma or `]`.
    pub const NEXT_IN_LIST: u8 = 8;
    /// Nothing: the one value is complete.
    pub const END: u8 = 9;
    /// How many states there are; what the table gives from here on are outcomes that need
    /// more than a new state: an object or a list opens; the innermost container closes; a
    /// scalar starts in an object, in a list, or as the one value; not JSON.
    pub const STATES: u8 = 10;
    pub const OPEN_OBJECT: u8 = 10;
    pub const OPEN_LIST: u8 = 11;
    pub const CLOSE: u8 = 12;
    pub const SCALAR_IN_OBJECT: u8 = 13;
    pub const SCALAR_IN_LIST: u8 = 14;
    pub const SCALAR_AT_TOP: u8 = 15;
    pub const REFUSED: u8 = 16;
}

/// The kinds of bytes that matter: a quote, `{`, `[`, `}`, `]`, `:`, `,`, anything else (the
/// first byte of a scalar).
const KINDS: usize = 8;
const fn kind(byte: u8) -> usize {
    match byte {
        b'"' => 0,
        b'{' => 1,
        b'[' => 2,
        b'}' => 3,
        b']' => 4,
        b':' => 5,
        b',' => 6,
        _ => 7,
    }
}

/// `TRANSITION[state][kind]`: the next state, or an outcome that needs more than a new state.
const TRANSITION: [[u8; KINDS]; state::STATES as usize] = {
    use state::*;
    /// A value that, once complete, is followed by `then` (a string is complete at once).
    const fn value(then: u8, scalar: u8) -> [u8; KINDS] {
        let mut row = [REFUSED; KINDS];
        row[kind(b'"')] = then;
        row[kind(b'{')] = OPEN_OBJECT;
        row[kind(b'[')] = OPEN_LIST;
        row[kind(b'a')] = scalar;
        row
    }
    let mut table = [[REFUSED; KINDS]; STATES as usize];
    table[VALUE_IN_OBJECT as usize] = value(NEXT_IN_OBJECT, SCALAR_IN_OBJECT);
    table[VALUE_IN_LIST as usize] = value(NEXT_IN_LIST, SCALAR_IN_LIST);
    table[VALUE_OR_CLOSE as usize] = value(NEXT_IN_LIST, SCALAR_IN_LIST);
    table[VALUE_OR_CLOSE as usize][kind(b']')] = CLOSE;
    table[VALUE_AT_TOP as usize] = value(END, SCALAR_AT_TOP);
    table[KEY as usize][kind(b'"')] = COLON;
    table[KEY_OR_CLOSE as usize][kind(b'"')] = COLON;
    table[KEY_OR_CLOSE as usize][kind(b'}')] = CLOSE;
    table[COLON as usize][kind(b':')] = VALUE_IN_OBJECT;
    table[NEXT_IN_OBJECT as usize][kind(b',')] = KEY;
    table[NEXT_IN_OBJECT as usize][kind(b'}')] = CLOSE;
    table[NEXT_IN_LIST as usize][kind(b',')] = VALUE_IN_LIST;
    table[NEXT_IN_LIST as usize][kind(b']')] = CLOSE;
    table
};

/// The grammar as the step runs it: a state is held as its column in a 64-bit row (six bits
/// per state, ten states), and each byte has the row of [`TRANSITION`] for its kind. A step is
/// then a shift of the byte's row by the state: the row's load depends only on the byte, so
/// the chain from one state to the next is a shift and a mask, not a load from a table indexed
/// by the state (which made each step wait for the one before).
mod column {
    use super::state;

    /// Bits per state in a row.
    pub const WIDTH: u32 = 6;
    /// The column of a state.
    pub const fn of(state: u8) -> u32 {
        state as u32 * WIDTH
    }
    /// A column's value at or past this is an outcome, not a state: the outcomes take the
    /// codes above the last state's column.
    pub const OUTCOMES: u64 = of(state::STATES - 1) as u64 + 1;
    /// The code of an outcome (`state::OPEN_OBJECT` and the rest) in a row.
    pub const fn outcome(outcome: u8) -> u64 {
        OUTCOMES + (outcome - state::STATES) as u64
    }
    pub const OPEN_OBJECT: u64 = outcome(state::OPEN_OBJECT);
    pub const OPEN_LIST: u64 = outcome(state::OPEN_LIST);
    pub const CLOSE: u64 = outcome(state::CLOSE);
    pub const SCALAR_IN_OBJECT: u64 = outcome(state::SCALAR_IN_OBJECT);
    pub const SCALAR_IN_LIST: u64 = outcome(state::SCALAR_IN_LIST);
    pub const SCALAR_AT_TOP: u64 = outcome(state::SCALAR_AT_TOP);
    const _: () = assert!(outcome(state::REFUSED) < 1 << WIDTH);
    // The step takes any outcome up to OPEN_LIST for an opening.
    const _: () = assert!(OPEN_OBJECT == OUTCOMES && OPEN_LIST == OUTCOMES + 1);
    const _: () = assert!(of(state::STATES) <= 64);
}

/// `ROW[byte]`: for each state's column, what `byte` leads to from that state.
const ROW: [u64; 256] = {
    let mut rows = [0u64; 256];
    let mut byte = 0;
    while byte < 256 {
        let kind = kind(byte as u8);
        let mut from = 0;
        while from < state::STATES {
            let next = TRANSITION[from as usize][kind];
            let code = if next < state::STATES {
                column::of(next) as u64
            } else {
                column::outcome(next)
            };
            rows[byte] |= code << column::of(from);
            from += 1;
        }
        byte += 1;
    }
    rows
};

/// For each state's column where a value may start, the column of the state once that value
/// is complete (what a string leads to there): a container records it when it opens, and its
/// close goes there.
const AFTER_VALUE: u64 = {
    let mut row = 0u64;
    let mut from = 0;
    while from < state::STATES {
        let then = TRANSITION[from as usize][kind(b'"')];
        if then < state::STATES {
            row |= (column::of(then) as u64) << column::of(from);
        }
        from += 1;
    }
    row
};

/// The second stage: JSON's grammar, stepped from one byte that matters to the next.
struct Grammar {
    /// The column ([`column::of`]) of the state: what the next byte that matters may be.
    expect: u32,
}

impl Grammar {
    /// Steps over the bytes of `marks` in the block at `base`.
    #[inline(always)]
    fn steps(
        &mut self,
        bytes: &[u8],
        base: usize,
        block: &[u8; BLOCK],
        mut marks: u64,
        index: &mut Index,
    ) -> Option<()> {
        const MASK: u64 = (1 << column::WIDTH) - 1;
        // In a register for the block, not behind `self`.
        let mut expect = self.expect;
        while marks != 0 {
            let at = marks.trailing_zeros() as usize & (BLOCK - 1);
            marks &= marks - 1;
            // SAFETY: `expect` is always a column, below 64: each value it takes is a state's
            // column, a row's code masked by MASK, or one `Index::open` recorded so masked.
            // Said to the compiler, it takes the shift's own mask of the count off the chain
            // from one step to the next (a third of its latency).
            unsafe { std::hint::assert_unchecked(expect < 64) };
            let next = (ROW[block[at] as usize] >> expect) & MASK;
            // Keys, colons, commas and string values: only the state changes.
            if next < column::OUTCOMES {
                expect = next as u32;
                continue;
            }
            // Containers open and close at a fifth of the bytes that matter: one branch each
            // (with a jump table over every outcome, a decision took 1.5 % longer).
            if next == column::CLOSE {
                expect = index.close(base + at)?;
                continue;
            }
            if next <= column::OPEN_LIST {
                let is_object = next == column::OPEN_OBJECT;
                index.open(base + at, (AFTER_VALUE >> expect) as u32 & MASK as u32)?;
                expect = if is_object {
                    column::of(state::KEY_OR_CLOSE)
                } else {
                    column::of(state::VALUE_OR_CLOSE)
                };
                continue;
            }
            expect = match next {
                column::SCALAR_IN_OBJECT => {
                    scalar_end(bytes, base + at)?;
                    column::of(state::NEXT_IN_OBJECT)
                }
                column::SCALAR_IN_LIST => {
                    scalar_end(bytes, base + at)?;
                    column::of(state::NEXT_IN_LIST)
                }
                column::SCALAR_AT_TOP => {
                    scalar_end(bytes, base + at)?;
                    column::of(state::END)
                }
                _ => return None,
            };
        }
        self.expect = expect;
        Some(())
    }
}

/// The containers open at a point of the text, and the index of those seen so far.
struct Index {
    max_depth: usize,
    /// At most this many containers are recorded (the bound of [`Brackets`]).
    limit: usize,
    pairs: Vec<(u32, u32)>,
    recorded_until: usize,
    /// The open containers: their place in `pairs` (or UNRECORDED), and the grammar's state
    /// (its column) once each is closed.
    open: Vec<(u32, u32)>,
}

impl Index {
    fn new(len: usize, max_depth: usize) -> Self {
        let limit = len / BYTES_PER_ENTRY + ALWAYS_RECORDED;
        Self {
            max_depth,
            limit,
            pairs: Vec::with_capacity(limit.min(len / 32 + 8)),
            recorded_until: len,
            open: Vec::new(),
        }
    }

    /// A container opens at `at`, to be followed by the state `after`; `None` past the depth
    /// bound.
    #[inline]
    fn open(&mut self, at: usize, after: u32) -> Option<()> {
        if self.open.len() >= self.max_depth {
            return None;
        }
        let slot = if self.pairs.len() < self.limit {
            self.pairs.push((at as u32, UNRECORDED));
            (self.pairs.len() - 1) as u32
        } else {
            self.recorded_until = self.recorded_until.min(at);
            UNRECORDED
        };
        self.open.push((slot, after));
        Some(())
    }

    /// The innermost container closes at `at`: the state that follows it (`None` when none
    /// is open, which the grammar never asks).
    #[inline]
    fn close(&mut self, at: usize) -> Option<u32> {
        let (slot, after) = self.open.pop()?;
        if slot != UNRECORDED {
            self.pairs[slot as usize].1 = at as u32;
        }
        Some(after)
    }

    fn into_brackets(self) -> Brackets {
        Brackets::from_pairs(self.pairs, self.recorded_until as u32)
    }
}

/// Checks the scalar that starts at `at`: a number or a literal that runs up to the next
/// byte that matters (white space, structure, a quote, or the end).
#[inline]
fn scalar_end(bytes: &[u8], at: usize) -> Option<()> {
    let end = match *bytes.get(at)? {
        b't' => literal_end(bytes, at, b"true")?,
        b'f' => literal_end(bytes, at, b"false")?,
        b'n' => literal_end(bytes, at, b"null")?,
        b'-' | b'0'..=b'9' => number_end(bytes, at)?,
        _ => return None,
    };
    match bytes.get(end) {
        None
        | Some(b' ' | b'\t' | b'\n' | b'\r' | b'{' | b'}' | b'[' | b']' | b':' | b',' | b'"') => {
            Some(())
        }
        Some(_) => None,
    }
}

/// Whether the escape whose letter is at `at` (just past its backslash) is one of JSON's.
#[inline]
fn escape_is_valid(bytes: &[u8], at: usize) -> bool {
    match bytes.get(at) {
        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => true,
        Some(b'u') => bytes
            .get(at + 1..at + 5)
            .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit)),
        _ => false,
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
