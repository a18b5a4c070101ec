//! How deep text the agent did not write may nest (reference §5, "No input stops the agent").
//!
//! A review, a rule's YAML, a Namespace, a `last-applied-configuration` baseline,
//! `managedFields`, a spool line or a Connection is checked here before anything walks it:
//! deeper than [`MAX_NESTING`] levels (where kube-apiserver's own JSON decoder stops) is refused
//! with a [`NestingError`] that says so. Within the limit, the recursive walks of the engine run
//! under [`guarded`], which grows the stack on demand, so that no thread's stack size decides
//! whether a legal input is answered.
//!
//! YAML is read to [`MAX_YAML_NESTING`] levels, no further: serde_yaml stops there itself, and
//! reading deeper only costs time — libyaml's scanner looks at every open flow collection for
//! every token, so its time grows with tokens × depth (10,000 levels of `[` alone take ~0.2 s,
//! 200,000 take minutes, and a rule set is compiled again on every rule change).
//! [`check_yaml`] runs libyaml's own event parser, stops at the first level past that, and
//! also refuses text whose nesting would cost more than [`YAML_NESTING_BUDGET`] — the work of
//! a whole manifest file at ordinary depths is far below it.

use std::mem::MaybeUninit;
use std::ptr::addr_of_mut;

/// The deepest nesting accepted in any input (kube-apiserver's JSON decoder stops there too).
pub const MAX_NESTING: usize = 10_000;

/// The deepest nesting of YAML (rules, Namespaces, manifests, Connection files): the most
/// serde_yaml reads. No rule or object that means anything nests half as deep.
pub const MAX_YAML_NESTING: usize = 128;

/// The most libyaml work (summed depth of the open collections, over every event) a YAML text
/// may ask for: a megabyte of tokens at the deepest accepted level would take libyaml a
/// quarter of a second; an ordinary manifest of a megabyte stays below a tenth of this.
pub const YAML_NESTING_BUDGET: u64 = 50_000_000;

/// Stack kept free before a guarded walk goes one level deeper; a new segment when less is.
const RED_ZONE: usize = 256 * 1024;
const STACK_SEGMENT: usize = 4 * 1024 * 1024;

/// Why a text was refused before it was walked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NestingError {
    #[error(
        "nested deeper than {limit} levels (at byte {offset}); no valid Kubernetes object nests that deep"
    )]
    TooDeep { limit: usize, offset: usize },
    #[error(
        "too much content nested in YAML flow collections (at byte {offset}); reading it would stall the agent"
    )]
    TooCostly { offset: usize },
}

impl NestingError {
    /// The byte where the text was found too deep or too costly.
    pub fn offset(&self) -> usize {
        match self {
            NestingError::TooDeep { offset, .. } | NestingError::TooCostly { offset } => *offset,
        }
    }
}

/// Runs `walk` with enough stack for one more level of a recursive walk, whatever the thread.
#[inline]
pub fn guarded<R>(walk: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(RED_ZONE, STACK_SEGMENT, walk)
}

/// Checks that JSON text nests at most [`MAX_NESTING`] levels. One pass, no allocation;
/// text that is not valid JSON is not refused here (its parser says what is wrong).
pub fn check_json(text: &[u8]) -> Result<(), NestingError> {
    check_json_within(text, MAX_NESTING)
}

/// [`check_json`] of text that wraps the documents it carries in `wrapping` levels of its own
/// (an AdmissionReview holds its objects two levels down): those may still nest
/// [`MAX_NESTING`] levels.
pub fn check_json_wrapping(text: &[u8], wrapping: usize) -> Result<(), NestingError> {
    check_json_within(text, MAX_NESTING + wrapping).map_err(|e| match e {
        NestingError::TooDeep { offset, .. } => NestingError::TooDeep {
            limit: MAX_NESTING,
            offset,
        },
        other => other,
    })
}

fn check_json_within(text: &[u8], limit: usize) -> Result<(), NestingError> {
    // No text with fewer brackets than the limit can nest deeper: the common case is a count.
    if text.len() <= limit || openers(text) <= limit {
        return Ok(());
    }
    let mut depth = 0usize;
    let mut at = 0;
    while at < text.len() {
        match text[at] {
            b'"' => {
                at = string_end(text, at + 1);
                continue;
            }
            b'{' | b'[' => {
                depth += 1;
                if depth > limit {
                    return Err(NestingError::TooDeep { limit, offset: at });
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        at += 1;
    }
    Ok(())
}

/// How many bytes of `text` are `{` or `[`: on the admission path for every review, so counted
/// the way the compiler vectorises (`b | 0x20` is `{` for exactly those two bytes; counts are
/// kept in bytes, 255 at a time).
fn openers(text: &[u8]) -> usize {
    text.chunks(255)
        .map(|chunk| {
            chunk
                .iter()
                .fold(0u8, |n, &b| n + u8::from(b | 0x20 == b'{')) as usize
        })
        .sum()
}

/// The index just past the closing quote of the string whose contents start at `at`.
fn string_end(text: &[u8], mut at: usize) -> usize {
    while let Some(found) = memchr::memchr2(b'"', b'\\', &text[at.min(text.len())..]) {
        let i = at + found;
        if text[i] == b'\\' {
            at = i + 2;
            continue;
        }
        return i + 1;
    }
    text.len()
}

/// Checks that YAML text nests at most [`MAX_YAML_NESTING`] levels and that libyaml can read it
/// without stalling (see the module's comment). Text that is not valid YAML is not refused
/// here: serde_yaml reads it next and says where it is wrong.
pub fn check_yaml(text: &str) -> Result<(), NestingError> {
    check_yaml_within(text, MAX_YAML_NESTING, YAML_NESTING_BUDGET)
}

fn check_yaml_within(text: &str, limit: usize, budget: u64) -> Result<(), NestingError> {
    // Every level opens with one of these bytes, and no event costs more than the levels
    // open: text with few of them can neither nest too deep nor cost too much, and is not
    // parsed twice (most rule specs).
    let openers = text
        .bytes()
        .filter(|&b| matches!(b, b'{' | b'[' | b'-' | b'?' | b':'))
        .count();
    if openers <= limit && (openers as u64).saturating_mul(text.len() as u64) <= budget {
        return Ok(());
    }
    let mut parser = EventParser::new(text.as_bytes());
    let mut depth = 0usize;
    let mut work = 0u64;
    loop {
        let Some((kind, offset)) = parser.next() else {
            return Ok(());
        };
        match kind {
            EventKind::Open => {
                depth += 1;
                if depth > limit {
                    return Err(NestingError::TooDeep { limit, offset });
                }
            }
            EventKind::Close => depth = depth.saturating_sub(1),
            EventKind::Other => {}
            EventKind::End => return Ok(()),
        }
        work += depth as u64;
        if work > budget {
            return Err(NestingError::TooCostly { offset });
        }
    }
}

enum EventKind {
    Open,
    Close,
    Other,
    End,
}

/// libyaml's event parser over borrowed text, reduced to what nesting needs. The one place
/// the engine calls libyaml directly; serde_yaml calls it the same way.
struct EventParser<'t> {
    parser: Box<MaybeUninit<unsafe_libyaml::yaml_parser_t>>,
    _text: &'t [u8],
}

impl<'t> EventParser<'t> {
    fn new(text: &'t [u8]) -> Self {
        let mut parser = Box::new(MaybeUninit::<unsafe_libyaml::yaml_parser_t>::uninit());
        // SAFETY: initialize writes the whole struct (it fails only when malloc does, which
        // aborts Rust's allocator too); the input outlives the parser (`_text`), which reads
        // it in place; the parser is boxed so that its address never changes.
        unsafe {
            let raw = parser.as_mut_ptr();
            if unsafe_libyaml::yaml_parser_initialize(raw).fail {
                std::alloc::handle_alloc_error(std::alloc::Layout::new::<
                    unsafe_libyaml::yaml_parser_t,
                >());
            }
            unsafe_libyaml::yaml_parser_set_encoding(raw, unsafe_libyaml::YAML_UTF8_ENCODING);
            unsafe_libyaml::yaml_parser_set_input_string(raw, text.as_ptr(), text.len() as u64);
        }
        Self {
            parser,
            _text: text,
        }
    }

    /// The next event's kind and byte offset; `None` on a syntax error (left to serde_yaml).
    /// Not called again after `None` or [`EventKind::End`].
    fn next(&mut self) -> Option<(EventKind, usize)> {
        let mut event = MaybeUninit::<unsafe_libyaml::yaml_event_t>::uninit();
        // SAFETY: the parser was initialized in `new`; a successful parse initializes the
        // event, which is read and then deleted exactly once.
        unsafe {
            let raw = self.parser.as_mut_ptr();
            let event = event.as_mut_ptr();
            if unsafe_libyaml::yaml_parser_parse(raw, event).fail {
                return None;
            }
            let kind = match (*event).type_ {
                unsafe_libyaml::YAML_SEQUENCE_START_EVENT
                | unsafe_libyaml::YAML_MAPPING_START_EVENT => EventKind::Open,
                unsafe_libyaml::YAML_SEQUENCE_END_EVENT
                | unsafe_libyaml::YAML_MAPPING_END_EVENT => EventKind::Close,
                unsafe_libyaml::YAML_STREAM_END_EVENT => EventKind::End,
                _ => EventKind::Other,
            };
            let offset = (*event).start_mark.index as usize;
            unsafe_libyaml::yaml_event_delete(event);
            Some((kind, offset))
        }
    }
}

impl Drop for EventParser<'_> {
    fn drop(&mut self) {
        // SAFETY: initialized in `new`, deleted once.
        unsafe { unsafe_libyaml::yaml_parser_delete(addr_of_mut!(*self.parser.as_mut_ptr())) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested_json(levels: usize) -> String {
        format!("{}1{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn json_at_the_limit_passes_and_one_more_is_refused() {
        assert_eq!(check_json(nested_json(MAX_NESTING).as_bytes()), Ok(()));
        assert_eq!(
            check_json(nested_json(MAX_NESTING + 1).as_bytes()),
            Err(NestingError::TooDeep {
                limit: MAX_NESTING,
                offset: MAX_NESTING
            })
        );
    }

    #[test]
    fn openers_are_counted_exactly() {
        let text: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
        let want = text.iter().filter(|&&b| b == b'{' || b == b'[').count();
        assert_eq!(openers(&text), want);
        assert_eq!(openers(b""), 0);
        assert_eq!(openers(&[b'['; 1000]), 1000);
    }

    #[test]
    fn json_brackets_inside_strings_do_not_nest() {
        let cases = [
            (r#"{"a":"[[[[[[","b":[1]}"#, Ok(())),
            (r#"{"a":"\"[[[[[","b":[1]}"#, Ok(())),
            (r#"{"a":"\\","b":[[[[1]]]]}"#, Err(16)),
            (r#"[{"k":[[1]]}]"#, Err(7)),
            (r#"[[1],[1],[1],[1],[1],[1]]"#, Ok(())),
        ];
        for (text, want) in cases {
            let got = check_json_within(text.as_bytes(), 3);
            match want {
                Ok(()) => assert_eq!(got, Ok(()), "{text}"),
                Err(offset) => assert_eq!(
                    got,
                    Err(NestingError::TooDeep { limit: 3, offset }),
                    "{text}"
                ),
            }
        }
    }

    #[test]
    fn yaml_flow_block_and_mixed_nesting_are_counted() {
        let flow = |n: usize| format!("a: {}1{}\n", "[".repeat(n), "]".repeat(n));
        let block = |n: usize| format!("{}1\n", "- ".repeat(n));
        let mapping = |n: usize| format!("{}1{}\n", "{a: ".repeat(n), "}".repeat(n));
        for make in [flow, block, mapping] {
            // The outer mapping of `flow` is one more level.
            let at = make(200);
            assert!(check_yaml_within(&at, 201, u64::MAX).is_ok(), "{at}");
            assert!(matches!(
                check_yaml_within(&at, 199, u64::MAX),
                Err(NestingError::TooDeep { limit: 199, .. })
            ));
        }
        // Quoted brackets are text, as libyaml reads them.
        let quoted = format!("a: [{}]\n", r#""]]]","#.repeat(300));
        assert!(check_yaml_within(&quoted, 2, u64::MAX).is_ok());
    }

    #[test]
    fn yaml_whose_nesting_would_stall_libyaml_is_refused_quickly() {
        let deep = format!("a: {}1{}\n", "[".repeat(1_000_000), "]".repeat(1_000_000));
        let started = std::time::Instant::now();
        assert!(matches!(
            check_yaml(&deep),
            Err(NestingError::TooDeep { .. })
        ));
        // Within the depth, a megabyte of content at the deepest levels costs too much.
        let wide = format!(
            "a: {}{}{}\n",
            "[".repeat(120),
            "1,".repeat(500_000),
            "]".repeat(120)
        );
        assert!(matches!(
            check_yaml(&wide),
            Err(NestingError::TooCostly { .. })
        ));
        // Generous for a debug build on a loaded machine; a stall takes minutes.
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
    }

    #[test]
    fn yaml_is_read_to_its_limit_and_not_one_level_more() {
        let flow = |n: usize| format!("{}1{}\n", "[".repeat(n), "]".repeat(n));
        assert_eq!(check_yaml(&flow(MAX_YAML_NESTING)), Ok(()));
        assert_eq!(
            check_yaml(&flow(MAX_YAML_NESTING + 1)),
            Err(NestingError::TooDeep {
                limit: MAX_YAML_NESTING,
                offset: MAX_YAML_NESTING
            })
        );
        // What serde_yaml itself reads: the limit is its own.
        let at_limit: Result<serde_json::Value, _> = serde_yaml::from_str(&flow(MAX_YAML_NESTING));
        assert!(at_limit.is_ok());
        let past: Result<serde_json::Value, _> = serde_yaml::from_str(&flow(MAX_YAML_NESTING + 1));
        assert!(past.is_err());
    }

    #[test]
    fn ordinary_yaml_is_far_below_the_budget() {
        let many = "- name: a\n  value: [1, 2, {b: c}]\n".repeat(20_000);
        assert_eq!(check_yaml(&many), Ok(()));
    }

    #[test]
    fn invalid_yaml_is_left_to_its_parser() {
        assert_eq!(check_yaml(&format!("{}: : [", "a: [".repeat(50))), Ok(()));
    }

    #[test]
    fn guarded_recursion_goes_past_the_limit_on_a_small_stack() {
        fn depth(n: usize) -> usize {
            if n == 0 {
                0
            } else {
                guarded(|| depth(n - 1)) + 1
            }
        }
        let handle = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(|| depth(MAX_NESTING * 10))
            .expect("thread");
        assert_eq!(handle.join().expect("no overflow"), MAX_NESTING * 10);
    }
}
