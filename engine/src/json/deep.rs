//! The containers of a JSON text that stand above a deep chain of others: their ends and
//! whether they are absent, found in one pass.
//!
//! A walk down a chain of nested containers asks of every level where it ends and whether it
//! is absent (a map whose entries are all absent). Answered by scanning, each question costs
//! the rest of the chain, and the walk the square of its depth: 10,000 levels (the most
//! reference §5 accepts) would take seconds. Ordinary objects never get here: their
//! containers are in the [`super::brackets::Brackets`] index and their absence is settled a
//! level or two down. Only when a scan would go deep is this index built, once per document.
//!
//! Levels are counted by kind, as the scans count them (a scan for a list's end counts lists;
//! absence descends through maps): a container is recorded when at least [`DEEP`] containers of
//! its own kind nest in a chain below it, and then only every [`STRIDE`]th such level (a scan
//! meets one within [`STRIDE`] levels of its kind). So the entries (12 bytes each) take at most
//! 1.5 times the text (a chain holds two bytes a level); the pass keeps one frame per open
//! container (at most the accepted depth).

use super::brackets::string_end_from;

/// Levels of a container's kind below it from which it is recorded; also how deep a scan
/// goes before it asks this index instead.
pub(super) const DEEP: u32 = 16;
/// Of a chain's deep containers, those whose count of levels is a multiple of this are
/// recorded.
const STRIDE: u32 = 4;

#[derive(Debug, Clone, Copy)]
struct Entry {
    open: u32,
    close: u32,
    absent: bool,
}

/// Deep containers of one text, sorted by opening offset.
#[derive(Debug, Clone, Default)]
pub(super) struct DeepIndex {
    entries: Vec<Entry>,
}

struct Frame {
    open: u32,
    is_map: bool,
    /// The longest chains of maps and of lists below, so far.
    maps_below: u32,
    lists_below: u32,
    present: bool,
}

impl Frame {
    /// Levels of its own kind below.
    fn own_kind_below(&self) -> u32 {
        if self.is_map {
            self.maps_below
        } else {
            self.lists_below
        }
    }
}

impl DeepIndex {
    /// Indexes `text`, which serde_json validated (other text gives an incomplete index).
    pub(super) fn of(text: &str) -> Self {
        let bytes = text.as_bytes();
        if u32::try_from(bytes.len()).is_err() {
            return Self::default();
        }
        let mut entries = Vec::new();
        let mut open: Vec<Frame> = Vec::new();
        let mut i = 0;
        while let Some(&b) = bytes.get(i) {
            i += 1;
            match b {
                b'"' => {
                    // A key, or a string value: a map's value follows a colon, handled there.
                    if let Some(top) = open.last_mut()
                        && !top.is_map
                    {
                        top.present = true;
                    }
                    i = string_end_from(bytes, i);
                }
                b'{' | b'[' => {
                    if let Some(top) = open.last_mut()
                        && !top.is_map
                    {
                        // A list with an element is present, whatever the element.
                        top.present = true;
                    }
                    open.push(Frame {
                        open: (i - 1) as u32,
                        is_map: b == b'{',
                        maps_below: 0,
                        lists_below: 0,
                        present: false,
                    });
                }
                b'}' | b']' => {
                    let Some(frame) = open.pop() else { continue };
                    let below = frame.own_kind_below();
                    if below >= DEEP && below % STRIDE == 0 {
                        entries.push(Entry {
                            open: frame.open,
                            close: (i - 1) as u32,
                            absent: !frame.present,
                        });
                    }
                    if let Some(parent) = open.last_mut() {
                        let (map, list) = (u32::from(frame.is_map), u32::from(!frame.is_map));
                        parent.maps_below = parent.maps_below.max(frame.maps_below + map);
                        parent.lists_below = parent.lists_below.max(frame.lists_below + list);
                        parent.present |= frame.present;
                    }
                }
                b':' => {
                    let value = skip_whitespace(bytes, i);
                    let scalar = !matches!(bytes.get(value), Some(b'{' | b'[' | b'n') | None);
                    if let Some(top) = open.last_mut()
                        && scalar
                    {
                        top.present = true;
                    }
                }
                b' ' | b'\n' | b'\r' | b'\t' | b',' => {}
                // A number, true, false or null inside a list (in a map they follow a colon).
                _ => {
                    if let Some(top) = open.last_mut()
                        && !top.is_map
                    {
                        top.present = true;
                    }
                }
            }
        }
        entries.sort_unstable_by_key(|e| e.open);
        Self { entries }
    }

    /// The closing offset of the container opening at `open` and whether it is absent, when
    /// it is recorded.
    pub(super) fn lookup(&self, open: usize) -> Option<(usize, bool)> {
        let open = u32::try_from(open).ok()?;
        let at = self.entries.binary_search_by_key(&open, |e| e.open).ok()?;
        let entry = self.entries[at];
        Some((entry.close as usize, entry.absent))
    }
}

fn skip_whitespace(bytes: &[u8], mut at: usize) -> usize {
    while matches!(bytes.get(at), Some(b' ' | b'\n' | b'\r' | b'\t')) {
        at += 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::Node;
    use serde_json::Value;

    fn chain(levels: usize, leaf: &str, map: bool) -> String {
        if map {
            format!("{}{leaf}{}", r#"{"a":"#.repeat(levels), "}".repeat(levels))
        } else {
            format!("{}{leaf}{}", "[".repeat(levels), "]".repeat(levels))
        }
    }

    #[test]
    fn deep_containers_are_recorded_with_their_end_and_absence() {
        for (leaf, map, absent) in [
            ("1", true, false),
            ("null", true, true),
            ("{}", true, true),
            ("[]", true, true),
            (r#""""#, true, false),
            ("null", false, false),
            ("1", false, false),
        ] {
            // 40 levels of its kind below the outermost container: recorded (a multiple of the
            // stride). A leaf of the chain's kind is one of them.
            let leaf_of_kind = leaf.starts_with(if map { '{' } else { '[' });
            let levels = if leaf_of_kind { 40 } else { 41 };
            let text = chain(levels, leaf, map);
            let index = DeepIndex::of(&text);
            let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            let (close, got_absent) = index.lookup(0).expect("recorded");
            assert_eq!(close, text.len() - 1, "{text}");
            assert_eq!(got_absent, absent, "{text}");
            if map && leaf == "1" {
                assert_eq!(Node::is_absent(&value), absent);
            }
            // The innermost few are too shallow to be recorded.
            let inner = if map { 5 * (levels - 2) } else { levels - 2 };
            assert!(index.lookup(inner).is_none(), "{text}");
        }
    }

    #[test]
    fn absence_agrees_with_the_documents_for_mixed_chains() {
        let texts = [
            r#"{"a":{"b":null,"c":{"d":[]}},"e":{}}"#,
            r#"{"a":{"b":null,"c":{"d":[null]}},"e":{}}"#,
            r#"{"a":{"b":true}}"#,
            r#"{"a":{"b":-1.5e3}}"#,
            r#"{ "a" : { "b" : null } }"#,
        ];
        for inner in texts {
            // Wrapped deep enough for some wrapper to be recorded; each wrapper (one key) is
            // absent exactly when `inner` is.
            let text = chain(DEEP as usize + STRIDE as usize, inner, true);
            let value: Value = serde_json::from_str(inner).expect("valid");
            let index = DeepIndex::of(&text);
            let (_, absent) = (0..text.len())
                .find_map(|at| index.lookup(at))
                .expect("a wrapper is recorded");
            assert_eq!(absent, Node::is_absent(&value), "{text}");
        }
    }

    #[test]
    fn levels_are_counted_by_kind() {
        // Lists and maps alternate: 40 lists below the outermost list, 40 maps below the
        // outermost map.
        let text = format!("{}1{}", r#"[{"a":"#.repeat(41), "}]".repeat(41));
        let index = DeepIndex::of(&text);
        assert_eq!(
            index.lookup(0).map(|(close, _)| close),
            Some(text.len() - 1)
        );
        assert_eq!(
            index.lookup(1).map(|(close, _)| close),
            Some(text.len() - 2)
        );
    }

    #[test]
    fn the_index_is_bounded_by_the_text() {
        let text = chain(10_000, "1", false);
        let index = DeepIndex::of(&text);
        assert!(index.entries.len() * 12 <= text.len() * 3 / 2);
        // Every stride of the chain has its entry.
        let recorded = (0..text.len() / 2)
            .filter(|&at| index.lookup(at).is_some())
            .count();
        assert_eq!(recorded, (10_000 - DEEP as usize) / STRIDE as usize);
    }
}
