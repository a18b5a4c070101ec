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
//! [`check_yaml`] runs a safe event parser (granit-parser, the one serde-saphyr reads with),
//! stops at the first level past that, and also refuses text whose nesting would cost
//! serde_yaml more than [`YAML_NESTING_BUDGET`] — the work of a whole manifest file at
//! ordinary depths is far below it.
//!
//! The same pass bounds what YAML text stands for, not only how it nests: serde_yaml caps how
//! often it follows an alias, not what the aliases expand to, so a 10 KB rule that aliases a
//! 4 KiB string 2,000 times is an 8 MB rule. A rule spec ([`check_rule_yaml`]) may not use an
//! alias at all — a rule is a few hand-written lines, where an alias saves nothing and is only
//! a way for a small text to stand for a large rule; a file ([`check_yaml`]) may expand through
//! aliases to at most [`expanded_limit`] bytes, measured as the text with every alias written
//! out. Both refuse tags outside YAML's core schema (`mode: !enforce` was read as `enforce`).

use std::collections::HashMap;

/// The deepest nesting accepted in any input (kube-apiserver's JSON decoder stops there too).
pub const MAX_NESTING: usize = 10_000;

/// The deepest nesting of YAML (rules, Namespaces, manifests, Connection files): the most
/// serde_yaml reads. No rule or object that means anything nests half as deep.
pub const MAX_YAML_NESTING: usize = 128;

/// The most libyaml work (summed depth of the open collections, over every event) a YAML text
/// may ask for: a megabyte of tokens at the deepest accepted level would take libyaml a
/// quarter of a second; an ordinary manifest of a megabyte stays below a tenth of this.
pub const YAML_NESTING_BUDGET: u64 = 50_000_000;

/// What aliases may add to a file's YAML beyond a multiple of its size: a small file that
/// reuses an anchored block a few times is read.
pub const YAML_EXPANSION_ALLOWANCE: u64 = 64 * 1024;

/// How many times its own size a file's YAML may expand to through aliases.
pub const YAML_EXPANSION_FACTOR: u64 = 4;

/// The tags a YAML text may carry: the core schema's, which serde_yaml reads as plain values.
/// Any other tag is refused rather than read as something it does not say (serde_yaml reads
/// `!enforce` as an enum variant, and drops an unknown tag on a list).
const CORE_TAGS: [&str; 7] = ["str", "int", "float", "bool", "null", "seq", "map"];
const CORE_TAG_PREFIX: &str = "tag:yaml.org,2002:";

/// A name or tag quoted in a message is cut to this many characters.
const MAX_QUOTED_CHARS: usize = 64;

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

/// Why a YAML text was refused before serde_yaml read it. Each message follows "the spec " or
/// "the text " and ends with the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum YamlError {
    #[error("is {0}")]
    Nesting(#[from] NestingError),
    #[error(
        "uses the YAML alias *{anchor} (at byte {offset}); a rule spec may not use aliases: write out the value that its anchor &{anchor} marks"
    )]
    Alias { anchor: String, offset: usize },
    #[error(
        "expands through YAML aliases to more than {limit} bytes (at byte {offset}): a YAML text of {size} bytes may stand for at most {YAML_EXPANSION_FACTOR}× its size plus 64 KiB; write the repeated values out or alias fewer of them"
    )]
    Expansion {
        size: usize,
        limit: u64,
        offset: usize,
    },
    #[error(
        "has the YAML tag {tag} (at byte {offset}); only YAML's core tags (!!str, !!int, !!float, !!bool, !!null, !!seq, !!map) are read: remove the tag"
    )]
    Tag { tag: String, offset: usize },
}

impl YamlError {
    /// The byte where the text was refused.
    pub fn offset(&self) -> usize {
        match self {
            YamlError::Nesting(e) => e.offset(),
            YamlError::Alias { offset, .. }
            | YamlError::Expansion { offset, .. }
            | YamlError::Tag { offset, .. } => *offset,
        }
    }
}

/// The most bytes a file's YAML of `size` bytes may stand for with its aliases written out.
pub fn expanded_limit(size: usize) -> u64 {
    (size as u64)
        .saturating_mul(YAML_EXPANSION_FACTOR)
        .saturating_add(YAML_EXPANSION_ALLOWANCE)
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

/// Checks a YAML file (manifests, Namespaces, objects, a Connection): it nests at most
/// [`MAX_YAML_NESTING`] levels, libyaml can read it without stalling (see the module's
/// comment), its aliases expand it to at most [`expanded_limit`] bytes and it carries only core
/// tags. Text that is not valid YAML is not refused here: serde_yaml reads it next and says
/// where it is wrong.
pub fn check_yaml(text: &str) -> Result<(), YamlError> {
    check_yaml_within(
        text,
        MAX_YAML_NESTING,
        YAML_NESTING_BUDGET,
        Aliases::Bounded,
    )
}

/// [`check_yaml`] for a rule spec: no alias at all.
pub fn check_rule_yaml(text: &str) -> Result<(), YamlError> {
    check_yaml_within(
        text,
        MAX_YAML_NESTING,
        YAML_NESTING_BUDGET,
        Aliases::Refused,
    )
}

/// What aliases a YAML text may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Aliases {
    Refused,
    /// Up to [`expanded_limit`] of the text's size.
    Bounded,
}

fn check_yaml_within(
    text: &str,
    limit: usize,
    budget: u64,
    aliases: Aliases,
) -> Result<(), YamlError> {
    // Every level opens with one of these bytes, and no event costs more than the levels
    // open: text with few of them can neither nest too deep nor cost too much, and without
    // an anchor (`&`) no alias stands for anything, nor is there a tag without `!`; such text
    // is not parsed twice (most rule specs).
    let mut openers = 0usize;
    let mut marked = false;
    for b in text.bytes() {
        openers += usize::from(matches!(b, b'{' | b'[' | b'-' | b'?' | b':'));
        marked |= matches!(b, b'&' | b'!');
    }
    if !marked && openers <= limit && (openers as u64).saturating_mul(text.len() as u64) <= budget {
        return Ok(());
    }
    let mut parser = EventParser::new(text, limit);
    let mut expansion = Expansion::new(text.len(), aliases);
    let mut depth = 0usize;
    let mut work = 0u64;
    loop {
        let Some(event) = parser.next() else {
            return Ok(());
        };
        if let Some(tag) = &event.tag
            && !is_core_tag(tag)
        {
            return Err(YamlError::Tag {
                tag: quoted(tag),
                offset: event.start,
            });
        }
        match event.kind {
            EventKind::Open => {
                depth += 1;
                if depth > limit {
                    return Err(NestingError::TooDeep {
                        limit,
                        offset: event.start,
                    }
                    .into());
                }
            }
            EventKind::TooDeep => {
                return Err(NestingError::TooDeep {
                    limit,
                    offset: event.start,
                }
                .into());
            }
            EventKind::Close => depth = depth.saturating_sub(1),
            EventKind::Alias | EventKind::Scalar | EventKind::Other => {}
            EventKind::End => return Ok(()),
        }
        expansion.see(&event, depth)?;
        work += depth as u64;
        if work > budget {
            return Err(NestingError::TooCostly {
                offset: event.start,
            }
            .into());
        }
    }
}

fn is_core_tag(tag: &[u8]) -> bool {
    tag.strip_prefix(CORE_TAG_PREFIX.as_bytes())
        .is_some_and(|name| CORE_TAGS.iter().any(|core| core.as_bytes() == name))
}

/// A name or tag from the text, as a message quotes it.
fn quoted(bytes: &[u8]) -> String {
    crate::truncate::truncate_chars(&String::from_utf8_lossy(bytes), MAX_QUOTED_CHARS)
}

/// The size of the text with every alias written out, as the events go by: each anchored
/// node's size (its span in the text, plus what the aliases inside it add) is kept by name,
/// and each alias adds the size of the node it names.
struct Expansion {
    size: usize,
    aliases: Aliases,
    limit: u64,
    /// What the aliases seen so far add to the text.
    added: u64,
    /// The expanded size of each anchor's node, by name (a later anchor of the same name
    /// replaces it, as it does for the aliases after it).
    anchors: HashMap<Vec<u8>, u64>,
    /// Anchored collections still open: their depth, name, first byte and `added` then.
    open: Vec<(usize, Vec<u8>, usize, u64)>,
}

impl Expansion {
    fn new(size: usize, aliases: Aliases) -> Self {
        Self {
            size,
            aliases,
            limit: expanded_limit(size),
            added: 0,
            anchors: HashMap::new(),
            open: Vec::new(),
        }
    }

    /// Takes one event; `depth` is the depth after it.
    fn see(&mut self, event: &Event, depth: usize) -> Result<(), YamlError> {
        match event.kind {
            EventKind::Alias => {
                let anchor = event.anchor.as_deref().unwrap_or_default();
                if self.aliases == Aliases::Refused {
                    return Err(YamlError::Alias {
                        anchor: quoted(anchor),
                        offset: event.start,
                    });
                }
                // An alias of no anchor (yet) is serde_yaml's error to report.
                let stands_for = self.anchors.get(anchor).copied().unwrap_or(0);
                self.added = self.added.saturating_add(stands_for);
                if (self.size as u64).saturating_add(self.added) > self.limit {
                    return Err(YamlError::Expansion {
                        size: self.size,
                        limit: self.limit,
                        offset: event.start,
                    });
                }
            }
            EventKind::Scalar => {
                if let Some(anchor) = &event.anchor {
                    let span = event.end.saturating_sub(event.start) as u64;
                    self.anchors.insert(anchor.clone(), span);
                }
            }
            EventKind::Open => {
                if let Some(anchor) = &event.anchor {
                    self.open
                        .push((depth, anchor.clone(), event.start, self.added));
                }
            }
            EventKind::Close => {
                // The collection closed was at `depth + 1`.
                if self.open.last().is_some_and(|(at, ..)| *at == depth + 1)
                    && let Some((_, anchor, start, added_before)) = self.open.pop()
                {
                    let span = event.end.saturating_sub(start) as u64;
                    let size = span.saturating_add(self.added - added_before);
                    self.anchors.insert(anchor, size);
                }
            }
            EventKind::Other | EventKind::End | EventKind::TooDeep => {}
        }
        Ok(())
    }
}

enum EventKind {
    Open,
    Close,
    Scalar,
    Alias,
    Other,
    End,
    /// Nested past the parser's own limit (the limit checked).
    TooDeep,
}

/// What the checks read of one YAML event.
struct Event {
    kind: EventKind,
    /// Byte offsets of the event's first byte and of the byte after it.
    start: usize,
    end: usize,
    /// The anchor a node is marked with (`&name`), or the one an alias names (`*name`).
    anchor: Option<Vec<u8>>,
    /// The node's tag, resolved (`!!str` is `tag:yaml.org,2002:str`).
    tag: Option<Vec<u8>>,
}

/// granit-parser's event parser (a safe YAML parser, the one serde-saphyr reads with) over
/// borrowed text, reduced to what nesting needs: anchors are asked for by name, as events of
/// their own right after the node they mark, and are folded into that node's event.
struct EventParser<'t> {
    parser: granit_parser::Parser<'t, granit_parser::StrInput<'t>>,
    /// The name of each anchor seen, by its id (aliases name the id).
    names: HashMap<usize, Vec<u8>>,
    /// The node event read ahead while looking for its anchor.
    ahead: Option<Event>,
    ended: bool,
}

impl<'t> EventParser<'t> {
    /// A parser that refuses to nest past `limit` levels of flow or of block collections (its
    /// scanner reads ahead of the events: without its own limit it would scan a deep flow
    /// collection whole before the first event past the limit).
    fn new(text: &'t str, limit: usize) -> Self {
        let options = granit_parser::options! {
            emit_anchor_events: true,
            emit_comments: false,
            flow_nesting_limit: limit,
            block_nesting_limit: limit,
        };
        Self {
            parser: granit_parser::Parser::new_from_str_with_options(text, options),
            names: HashMap::new(),
            ahead: None,
            ended: false,
        }
    }

    /// The next event; `None` on a syntax error (left to serde_yaml) and after
    /// [`EventKind::End`].
    fn next(&mut self) -> Option<Event> {
        if self.ended {
            return None;
        }
        loop {
            let event = match self.parser.next_event() {
                Some(Ok(event)) => event,
                Some(Err(e))
                    if matches!(e.kind(), granit_parser::ErrorKind::RecursionLimitExceeded) =>
                {
                    self.ended = true;
                    let at = e.marker();
                    return Some(Event {
                        kind: EventKind::TooDeep,
                        start: at.byte_offset().unwrap_or(at.index()),
                        end: at.byte_offset().unwrap_or(at.index()),
                        anchor: None,
                        tag: None,
                    });
                }
                // An error, or the end without a stream end (not seen): what follows is
                // serde_yaml's to report.
                Some(Err(_)) | None => {
                    self.ended = true;
                    return self.ahead.take();
                }
            };
            let (event, span) = event;
            let offset = |at: &granit_parser::Marker| at.byte_offset().unwrap_or(at.index());
            // A node starts at its properties: a tag before it counts as its first byte.
            let start = offset(&span.start).min(span.tag_start.as_ref().map_or(usize::MAX, offset));
            let end = offset(&span.end);
            let tag = |tag: Option<std::borrow::Cow<'_, granit_parser::Tag>>| {
                tag.map(|tag| format!("{}{}", tag.handle(), tag.suffix()).into_bytes())
            };
            let read = match event {
                granit_parser::Event::Anchor(id, name) => {
                    let name = name.as_bytes().to_vec();
                    self.names.insert(id, name.clone());
                    if let Some(node) = self.ahead.as_mut() {
                        // The anchor's `&` comes before the node's text.
                        node.start = node.start.min(start);
                        node.anchor = Some(name);
                    }
                    continue;
                }
                granit_parser::Event::SequenceStart(_, _, found)
                | granit_parser::Event::MappingStart(_, _, found) => Event {
                    kind: EventKind::Open,
                    start,
                    end,
                    anchor: None,
                    tag: tag(found),
                },
                granit_parser::Event::SequenceEnd | granit_parser::Event::MappingEnd => Event {
                    kind: EventKind::Close,
                    start,
                    end,
                    anchor: None,
                    tag: None,
                },
                granit_parser::Event::Scalar(_, _, _, found) => Event {
                    kind: EventKind::Scalar,
                    start,
                    end,
                    anchor: None,
                    tag: tag(found),
                },
                granit_parser::Event::Alias(id) => Event {
                    kind: EventKind::Alias,
                    start,
                    end,
                    anchor: Some(self.names.get(&id).cloned().unwrap_or_default()),
                    tag: None,
                },
                granit_parser::Event::StreamEnd => Event {
                    kind: EventKind::End,
                    start,
                    end,
                    anchor: None,
                    tag: None,
                },
                _ => Event {
                    kind: EventKind::Other,
                    start,
                    end,
                    anchor: None,
                    tag: None,
                },
            };
            // A node's anchor follows it: each event is handed out once the next is read.
            if let Some(before) = self.ahead.replace(read) {
                return Some(before);
            }
        }
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
            assert!(
                check_yaml_within(&at, 201, u64::MAX, Aliases::Bounded).is_ok(),
                "{at}"
            );
            assert!(matches!(
                check_yaml_within(&at, 199, u64::MAX, Aliases::Bounded),
                Err(YamlError::Nesting(NestingError::TooDeep { limit: 199, .. }))
            ));
        }
        // Quoted brackets are text, as libyaml reads them.
        let quoted = format!("a: [{}]\n", r#""]]]","#.repeat(300));
        assert!(check_yaml_within(&quoted, 2, u64::MAX, Aliases::Bounded).is_ok());
    }

    #[test]
    fn yaml_whose_nesting_would_stall_libyaml_is_refused_quickly() {
        let deep = format!("a: {}1{}\n", "[".repeat(1_000_000), "]".repeat(1_000_000));
        let started = std::time::Instant::now();
        assert!(matches!(
            check_yaml(&deep),
            Err(YamlError::Nesting(NestingError::TooDeep { .. }))
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
            Err(YamlError::Nesting(NestingError::TooCostly { .. }))
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
            Err(YamlError::Nesting(NestingError::TooDeep {
                limit: MAX_YAML_NESTING,
                offset: MAX_YAML_NESTING
            }))
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

    /// The rule of the issue: one 4 KiB string anchored, aliased 2,000 times (8 MB written
    /// out); and the classic billion laughs, each level aliasing the one before ten times.
    fn bombs() -> [String; 2] {
        let aliased = format!(
            "mode: enforce\nnamespaces: [&n \"{}\", {}]\n",
            "x".repeat(4096),
            vec!["*n"; 2000].join(", ")
        );
        let mut laughs =
            String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for level in 1..10 {
            let before = format!("*a{}", level - 1);
            let _ = std::fmt::Write::write_fmt(
                &mut laughs,
                format_args!(
                    "a{level}: &a{level} [{}]\n",
                    [before.as_str(); 10].join(", ")
                ),
            );
        }
        [aliased, laughs]
    }

    #[test]
    fn a_rule_spec_may_not_alias() {
        for bomb in bombs() {
            let refused = check_rule_yaml(&bomb).expect_err("an alias");
            assert!(matches!(refused, YamlError::Alias { .. }), "{refused}");
            let message = refused.to_string();
            assert!(
                message.contains("YAML alias *") && message.contains("&"),
                "{message}"
            );
        }
        let error = check_rule_yaml("mode: enforce\nnamespaces: [&ns a, b]\nexemptUsers: [*ns]\n");
        assert_eq!(
            error,
            Err(YamlError::Alias {
                anchor: "ns".into(),
                offset: 51
            })
        );
        // An anchor alone stands for nothing more than its text.
        assert_eq!(
            check_rule_yaml("mode: &m enforce\nnamespaces: ['*']\n"),
            Ok(())
        );
        // A long name is quoted cut.
        let long = format!("a: &{0} 1\nb: *{0}\n", "n".repeat(10_000));
        match check_rule_yaml(&long) {
            Err(YamlError::Alias { anchor, .. }) => assert_eq!(anchor.chars().count(), 64),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_file_expands_to_four_times_its_size_and_64_kib_no_more() {
        let started = std::time::Instant::now();
        for bomb in bombs() {
            match check_yaml(&bomb) {
                Err(YamlError::Expansion { size, limit, .. }) => {
                    assert_eq!(size, bomb.len());
                    assert_eq!(limit, expanded_limit(bomb.len()));
                }
                other => panic!("{other:?}"),
            }
        }
        // Refused at the first alias past the limit, without expanding anything.
        assert!(started.elapsed() < std::time::Duration::from_secs(2));

        // Aliases of a 1,000-byte value: the text with each written out is measured.
        let value = format!("\"{}\"", "v".repeat(998));
        let file =
            |aliases: usize| format!("a: &v {value}\nb: [{}]\n", vec!["*v"; aliases].join(", "));
        let fits = |aliases: usize| {
            let text = file(aliases);
            text.len() as u64 + aliases as u64 * 1_003 <= expanded_limit(text.len())
        };
        let most = (1..200).take_while(|&n| fits(n)).last().unwrap();
        assert_eq!(check_yaml(&file(most)), Ok(()), "{most}");
        assert!(matches!(
            check_yaml(&file(most + 2)),
            Err(YamlError::Expansion { .. })
        ));
        // Anchors inside anchors count what their aliases add.
        let nested = "a: &a [x, x]\nb: &b [*a, *a, *a]\nc: [*b, *b]\n";
        assert_eq!(check_yaml(nested), Ok(()));
        // A rule file of ordinary size that reuses a block a few times is read.
        let reuse = format!(
            "common: &c {{labels: {{team: a}}, annotations: {{{}}}}}\n{}",
            (0..40)
                .map(|i| format!("k{i}: v"))
                .collect::<Vec<_>>()
                .join(", "),
            (0..50).map(|i| format!("o{i}: *c\n")).collect::<String>()
        );
        assert_eq!(check_yaml(&reuse), Ok(()));
    }

    #[test]
    fn only_core_tags_are_read() {
        let tag = |text: &str| match check_yaml(text) {
            Err(YamlError::Tag { tag, offset }) => Some((tag, offset)),
            Ok(()) => None,
            other => panic!("{text}: {other:?}"),
        };
        assert_eq!(tag("mode: !enforce\n"), Some(("!enforce".into(), 6)));
        assert_eq!(tag("mode: !warn warn\n"), Some(("!warn".into(), 6)));
        assert_eq!(tag("namespaces: !set [a]\n"), Some(("!set".into(), 12)));
        assert_eq!(tag("a: {b: !x {c: 1}}\n"), Some(("!x".into(), 7)));
        assert_eq!(tag("a: ! 3\n"), Some(("!".into(), 3)));
        assert_eq!(
            tag("a: !!binary aGk=\n"),
            Some(("tag:yaml.org,2002:binary".into(), 3))
        );
        // A %TAG directive cannot make another tag look like a core one.
        assert_eq!(
            tag("%TAG !! tag:example.com,2000:\n---\na: !!str x\n"),
            Some(("tag:example.com,2000:str".into(), 37))
        );
        for core in [
            "a: !!str 3\n",
            "a: !!int 3\n",
            "a: !!float 3\n",
            "a: !!bool true\n",
            "a: !!null ~\n",
            "a: !!seq [1]\n",
            "a: !!map {b: 1}\n",
            "a: !<tag:yaml.org,2002:str> 3\n",
            // Text, not tags.
            "a: '!x'\nb: \"[!a-z]*\"\nc: x!y\n",
        ] {
            assert_eq!(tag(core), None, "{core}");
            assert_eq!(check_rule_yaml(core), Ok(()), "{core}");
        }
        let message = check_rule_yaml("mode: !enforce\n").unwrap_err().to_string();
        assert!(
            message.contains("YAML tag !enforce") && message.contains("remove the tag"),
            "{message}"
        );
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
