//! Field paths and path patterns.
//!
//! A [`FieldPath`] names one concrete place in an object (`spec.template.spec.containers[0].image`);
//! a [`PathPattern`] is the constrained JSONPath-like language of rules (`containers[*].image`,
//! `metadata.*`, `metadata.annotations['a/b']`). Both render to the same text form, and every
//! pattern parses back from its rendering unchanged.

use std::fmt;

/// One step of a concrete path: a map key or a list index.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PathSegment {
    Key(String),
    Index(usize),
}

/// A borrowed path step, as the diff walks an object without copying its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentRef<'a> {
    Key(&'a str),
    Index(usize),
}

/// Anything that is one concrete path step; lets patterns match owned and borrowed paths.
pub trait AsSegment {
    fn as_segment(&self) -> SegmentRef<'_>;
}

impl AsSegment for PathSegment {
    fn as_segment(&self) -> SegmentRef<'_> {
        match self {
            PathSegment::Key(key) => SegmentRef::Key(key),
            PathSegment::Index(index) => SegmentRef::Index(*index),
        }
    }
}

impl AsSegment for SegmentRef<'_> {
    fn as_segment(&self) -> SegmentRef<'_> {
        *self
    }
}

impl From<SegmentRef<'_>> for PathSegment {
    fn from(segment: SegmentRef<'_>) -> Self {
        match segment {
            SegmentRef::Key(key) => PathSegment::Key(key.to_owned()),
            SegmentRef::Index(index) => PathSegment::Index(index),
        }
    }
}

/// A concrete place inside an object. The empty path is the root.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FieldPath {
    segments: Vec<PathSegment>,
}

impl FieldPath {
    pub fn root() -> Self {
        Self::default()
    }

    pub fn segments(&self) -> &[PathSegment] {
        &self.segments
    }

    pub fn is_root(&self) -> bool {
        self.segments.is_empty()
    }

    pub fn push(&mut self, segment: PathSegment) {
        self.segments.push(segment);
    }

    pub fn pop(&mut self) {
        self.segments.pop();
    }

    pub fn child_key(&self, key: &str) -> Self {
        let mut child = self.clone();
        child.push(PathSegment::Key(key.to_owned()));
        child
    }

    pub fn child_index(&self, index: usize) -> Self {
        let mut child = self.clone();
        child.push(PathSegment::Index(index));
        child
    }

    /// Reads a rendered path back (`spec.template.spec.containers[0].image`, `metadata.annotations['a/b']`):
    /// `None` for text that is not one concrete path as rendered (a wildcard, `<root>`, a parse
    /// error, another spelling of a path such as `['spec'].replicas`).
    pub fn parse(text: &str) -> Option<Self> {
        let pattern = PathPattern::parse(text).ok()?;
        let segments = pattern
            .segments()
            .iter()
            .map(|segment| match segment {
                PatternSegment::Key(key) => Some(PathSegment::Key(key.clone())),
                PatternSegment::Index(index) => Some(PathSegment::Index(*index)),
                PatternSegment::AnyKey | PatternSegment::AnyIndex => None,
            })
            .collect::<Option<Vec<_>>>()?;
        let path = Self { segments };
        (path.to_string() == text).then_some(path)
    }

    /// The path with every list index written `[*]`, so that metric labels stay bounded.
    pub fn to_wildcard_string(&self) -> String {
        let mut out = String::new();
        for segment in &self.segments {
            match segment {
                PathSegment::Key(key) => render_key(&mut out, 0, key),
                PathSegment::Index(_) => out.push_str("[*]"),
            }
        }
        if out.is_empty() {
            out.push_str(ROOT);
        }
        out
    }
}

impl From<Vec<PathSegment>> for FieldPath {
    fn from(segments: Vec<PathSegment>) -> Self {
        Self { segments }
    }
}

/// How the root is rendered.
pub const ROOT: &str = "<root>";

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        render_path(&self.segments, &mut out);
        f.write_str(&out)
    }
}

/// Appends the rendering of `segments` (reference §4) to `out`, which should be empty: the path
/// the diff is at is rendered into one reused buffer, without allocating per change.
pub fn render_path<S: AsSegment>(segments: &[S], out: &mut String) {
    if segments.is_empty() {
        out.push_str(ROOT);
        return;
    }
    let start = out.len();
    for segment in segments {
        render_segment(out, start, segment.as_segment());
    }
}

/// Appends one segment to a rendering begun at `start` of `out` (see [`render_path`]).
pub fn render_segment(out: &mut String, start: usize, segment: SegmentRef<'_>) {
    match segment {
        SegmentRef::Key(key) => render_key(out, start, key),
        SegmentRef::Index(index) => {
            let mut buffer = [0; 24];
            out.extend(
                render_index(index, &mut buffer)
                    .iter()
                    .map(|&b| char::from(b)),
            );
        }
    }
}

/// `[index]` as a path renders it, written into `buffer` (no formatter, no allocation: the
/// diff may render an index for each of millions of changed list items).
pub fn render_index(mut index: usize, buffer: &mut [u8; 24]) -> &[u8] {
    let mut at = buffer.len() - 1;
    buffer[at] = b']';
    loop {
        at -= 1;
        // `index % 10` is below 10: the cast cannot truncate.
        buffer[at] = b'0' + (index % 10) as u8;
        index /= 10;
        if index == 0 {
            break;
        }
    }
    at -= 1;
    buffer[at] = b'[';
    &buffer[at..]
}

/// Keys made only of letters, digits, `_` and `-` are written bare; anything else is quoted.
fn is_bare_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Appends a key as a path renders it: bare after a `.` (unless the rendering, begun at
/// `start` of `out`, is still empty), or quoted.
fn render_key(out: &mut String, start: usize, key: &str) {
    if is_bare_key(key) {
        if out.len() > start {
            out.push('.');
        }
        out.push_str(key);
    } else {
        out.push_str("['");
        if key.contains(['\'', '\\']) {
            for c in key.chars() {
                if c == '\'' || c == '\\' {
                    out.push('\\');
                }
                out.push(c);
            }
        } else {
            out.push_str(key);
        }
        out.push_str("']");
    }
}

/// One step of a pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PatternSegment {
    /// A literal map key.
    Key(String),
    /// `*`: any one map key.
    AnyKey,
    /// `[n]`: one list index.
    Index(usize),
    /// `[*]`: any one list index.
    AnyIndex,
}

impl PatternSegment {
    /// Whether this pattern step matches one concrete path step.
    pub fn matches<S: AsSegment>(&self, segment: &S) -> bool {
        match (self, segment.as_segment()) {
            (PatternSegment::Key(want), SegmentRef::Key(got)) => want == got,
            (PatternSegment::AnyKey, SegmentRef::Key(_)) => true,
            (PatternSegment::Index(want), SegmentRef::Index(got)) => *want == got,
            (PatternSegment::AnyIndex, SegmentRef::Index(_)) => true,
            _ => false,
        }
    }
}

/// A parsed path pattern. Parse once (at rule load), match many times.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PathPattern {
    segments: Vec<PatternSegment>,
}

/// Why a pattern did not parse. `column` is 1-based, counted in characters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid path pattern {pattern:?} at column {column}: {message}")]
pub struct PatternError {
    pub pattern: String,
    pub column: usize,
    pub message: String,
}

impl PathPattern {
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        Parser::new(text).parse()
    }

    /// A pattern built from segments (e.g. for a fixed annotation key); never fails.
    pub fn from_segments(segments: Vec<PatternSegment>) -> Self {
        Self { segments }
    }

    pub fn segments(&self) -> &[PatternSegment] {
        &self.segments
    }

    pub fn len(&self) -> usize {
        self.segments.len()
    }

    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// Whether the pattern matches `path` itself or one of its ancestors, i.e. whether the
    /// pattern's subtree contains `path`.
    /// Whether the pattern names a list index (`[n]`): otherwise two paths that differ only
    /// in an index are matched alike.
    pub fn names_an_index(&self) -> bool {
        self.segments
            .iter()
            .any(|s| matches!(s, PatternSegment::Index(_)))
    }

    pub fn covers<S: AsSegment>(&self, path: &[S]) -> bool {
        self.segments.len() <= path.len() && self.matches_prefix_of(path)
    }

    /// Whether `path` is a strict ancestor of something this pattern can match: the pattern
    /// reaches below `path`.
    pub fn reaches_below<S: AsSegment>(&self, path: &[S]) -> bool {
        self.segments.len() > path.len()
            && self
                .segments
                .iter()
                .zip(path)
                .all(|(pattern, segment)| pattern.matches(segment))
    }

    fn matches_prefix_of<S: AsSegment>(&self, path: &[S]) -> bool {
        self.segments
            .iter()
            .zip(path)
            .all(|(pattern, segment)| pattern.matches(segment))
    }
}

impl fmt::Display for PathPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        for segment in &self.segments {
            match segment {
                PatternSegment::Key(key) => render_key(&mut out, 0, key),
                PatternSegment::AnyKey => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push('*');
                }
                PatternSegment::Index(index) => {
                    out.push('[');
                    out.push_str(&index.to_string());
                    out.push(']');
                }
                PatternSegment::AnyIndex => out.push_str("[*]"),
            }
        }
        f.write_str(&out)
    }
}

impl std::str::FromStr for PathPattern {
    type Err = PatternError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

struct Parser<'a> {
    text: &'a str,
    chars: Vec<char>,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            text,
            chars: text.chars().collect(),
            pos: 0,
        }
    }

    fn error(&self, column_index: usize, message: impl Into<String>) -> PatternError {
        PatternError {
            pattern: self.text.to_owned(),
            column: column_index + 1,
            message: message.into(),
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn parse(mut self) -> Result<PathPattern, PatternError> {
        if self.chars.is_empty() {
            return Err(self.error(0, "empty pattern"));
        }
        let mut segments = Vec::new();
        // A segment is a bare key (or `*`) followed by any number of bracket suffixes, or a
        // bracket first. Segments are separated by `.`.
        loop {
            match self.peek() {
                Some('[') => {}
                Some('.') | None => {
                    return Err(self.error(self.pos, "empty segment"));
                }
                Some(_) => segments.push(self.bare_key()?),
            }
            while self.peek() == Some('[') {
                segments.push(self.bracket()?);
            }
            match self.peek() {
                None => break,
                Some('.') => {
                    self.pos += 1;
                    if self.peek().is_none() {
                        return Err(self.error(self.pos, "empty segment after '.'"));
                    }
                }
                Some(c) => {
                    return Err(self.error(self.pos, format!("unexpected {c:?} after ']'")));
                }
            }
        }
        Ok(PathPattern { segments })
    }

    fn bare_key(&mut self) -> Result<PatternSegment, PatternError> {
        let start = self.pos;
        while let Some(c) = self.peek() {
            match c {
                '.' | '[' => break,
                ']' => return Err(self.error(self.pos, "unexpected ']' without '['")),
                '\'' | '"' => {
                    return Err(self.error(
                        self.pos,
                        "quotes are only allowed inside brackets, e.g. ['a.b']",
                    ));
                }
                c if c.is_whitespace() => {
                    return Err(self.error(
                        self.pos,
                        "whitespace in a key; quote the key, e.g. ['my key']",
                    ));
                }
                _ => self.pos += 1,
            }
        }
        let key: String = self.chars[start..self.pos].iter().collect();
        if key == "*" {
            return Ok(PatternSegment::AnyKey);
        }
        if let Some(offset) = key.find('*') {
            let column = start + key[..offset].chars().count();
            return Err(self.error(
                column,
                "'*' must be a whole segment (it matches one map key); quote a literal '*' as ['*']",
            ));
        }
        Ok(PatternSegment::Key(key))
    }

    fn bracket(&mut self) -> Result<PatternSegment, PatternError> {
        let open = self.pos;
        self.pos += 1; // '['
        let segment = match self.peek() {
            None => return Err(self.error(open, "unterminated bracket")),
            Some(quote @ ('\'' | '"')) => {
                self.pos += 1;
                let mut key = String::new();
                loop {
                    match self.peek() {
                        None => return Err(self.error(open, "unterminated quoted key")),
                        Some('\\') => {
                            self.pos += 1;
                            match self.peek() {
                                Some(c) => {
                                    key.push(c);
                                    self.pos += 1;
                                }
                                None => return Err(self.error(open, "unterminated quoted key")),
                            }
                        }
                        Some(c) if c == quote => {
                            self.pos += 1;
                            break;
                        }
                        Some(c) => {
                            key.push(c);
                            self.pos += 1;
                        }
                    }
                }
                PatternSegment::Key(key)
            }
            Some('*') => {
                self.pos += 1;
                PatternSegment::AnyIndex
            }
            Some(_) => {
                let start = self.pos;
                while matches!(self.peek(), Some(c) if c != ']') {
                    self.pos += 1;
                }
                let digits: String = self.chars[start..self.pos].iter().collect();
                if self.peek().is_none() {
                    return Err(self.error(open, "unterminated bracket"));
                }
                if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
                    return Err(self.error(
                        start,
                        format!("bad index {digits:?}: expected a number, '*' or a quoted key"),
                    ));
                }
                let index = digits
                    .parse::<usize>()
                    .map_err(|_| self.error(start, format!("bad index {digits:?}: too large")))?;
                PatternSegment::Index(index)
            }
        };
        match self.peek() {
            Some(']') => {
                self.pos += 1;
                Ok(segment)
            }
            None => Err(self.error(open, "unterminated bracket")),
            Some(c) => Err(self.error(self.pos, format!("expected ']' but found {c:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(k: &str) -> PatternSegment {
        PatternSegment::Key(k.to_owned())
    }

    #[test]
    fn parses_the_grammar() {
        let cases: &[(&str, Vec<PatternSegment>)] = &[
            ("spec.replicas", vec![key("spec"), key("replicas")]),
            (
                "spec.template.spec.containers[*].image",
                vec![
                    key("spec"),
                    key("template"),
                    key("spec"),
                    key("containers"),
                    PatternSegment::AnyIndex,
                    key("image"),
                ],
            ),
            (
                "containers[0]",
                vec![key("containers"), PatternSegment::Index(0)],
            ),
            ("metadata.*", vec![key("metadata"), PatternSegment::AnyKey]),
            (
                "metadata.annotations['kubectl.kubernetes.io/last-applied-configuration']",
                vec![
                    key("metadata"),
                    key("annotations"),
                    key("kubectl.kubernetes.io/last-applied-configuration"),
                ],
            ),
            (
                "metadata.annotations[\"a/b\"]",
                vec![key("metadata"), key("annotations"), key("a/b")],
            ),
            ("a['*']", vec![key("a"), key("*")]),
            (
                "a[1][2]",
                vec![key("a"), PatternSegment::Index(1), PatternSegment::Index(2)],
            ),
            ("['a.b'].c", vec![key("a.b"), key("c")]),
            ("a['it\\'s']", vec![key("a"), key("it's")]),
            ("a[*].b", vec![key("a"), PatternSegment::AnyIndex, key("b")]),
        ];
        for (text, want) in cases {
            let got = PathPattern::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(got.segments(), want.as_slice(), "{text}");
        }
    }

    #[test]
    fn parse_errors_name_the_column() {
        let cases: &[(&str, usize, &str)] = &[
            ("", 1, "empty pattern"),
            ("a..b", 3, "empty segment"),
            (".a", 1, "empty segment"),
            ("a.", 3, "empty segment"),
            ("containers[0", 11, "unterminated bracket"),
            ("containers[", 11, "unterminated bracket"),
            ("a['b", 2, "unterminated quoted key"),
            ("a[x]", 3, "bad index"),
            ("a[-1]", 3, "bad index"),
            ("a[]", 3, "bad index"),
            ("a[1]b", 5, "unexpected"),
            ("a]", 2, "without '['"),
            ("ab*", 3, "whole segment"),
            ("a b", 2, "whitespace"),
            ("a'b'", 2, "quotes"),
            ("a[1x]", 3, "bad index"),
            ("a['b'x]", 6, "expected ']'"),
        ];
        for (text, column, fragment) in cases {
            let err = PathPattern::parse(text).expect_err(text);
            assert_eq!(err.column, *column, "{text}: {err}");
            assert!(err.message.contains(fragment), "{text}: {err}");
            assert!(
                err.to_string().contains(&format!("{text:?}")),
                "{text}: {err}"
            );
        }
    }

    #[test]
    fn renders_paths() {
        let path = FieldPath::from(vec![
            PathSegment::Key("spec".into()),
            PathSegment::Key("containers".into()),
            PathSegment::Index(3),
            PathSegment::Key("image".into()),
        ]);
        assert_eq!(path.to_string(), "spec.containers[3].image");
        assert_eq!(path.to_wildcard_string(), "spec.containers[*].image");
        let quoted = FieldPath::from(vec![
            PathSegment::Key("metadata".into()),
            PathSegment::Key("annotations".into()),
            PathSegment::Key("app.kubernetes.io/name".into()),
        ]);
        assert_eq!(
            quoted.to_string(),
            "metadata.annotations['app.kubernetes.io/name']"
        );
        assert_eq!(FieldPath::root().to_string(), "<root>");
        assert_eq!(
            FieldPath::from(vec![PathSegment::Key("a b".into())]).to_string(),
            "['a b']"
        );
        assert_eq!(
            FieldPath::from(vec![PathSegment::Key("under_score-1".into())]).to_string(),
            "under_score-1"
        );
    }

    #[test]
    fn coverage_is_subtree() {
        let pattern = PathPattern::parse("spec.containers[*].env").unwrap();
        let covered = FieldPath::from(vec![
            PathSegment::Key("spec".into()),
            PathSegment::Key("containers".into()),
            PathSegment::Index(0),
            PathSegment::Key("env".into()),
            PathSegment::Index(1),
            PathSegment::Key("value".into()),
        ]);
        assert!(pattern.covers(covered.segments()));
        let ancestor = FieldPath::from(vec![
            PathSegment::Key("spec".into()),
            PathSegment::Key("containers".into()),
        ]);
        assert!(!pattern.covers(ancestor.segments()));
        assert!(pattern.reaches_below(ancestor.segments()));
        assert!(
            !PathPattern::parse("spec.*")
                .unwrap()
                .covers(&[PathSegment::Key("status".into())])
        );
        // `*` is a map key, `[*]` a list index: they do not stand in for each other.
        assert!(
            !PathPattern::parse("a.*")
                .unwrap()
                .covers(&[PathSegment::Key("a".into()), PathSegment::Index(0)])
        );
        assert!(
            !PathPattern::parse("a[*]")
                .unwrap()
                .covers(&[PathSegment::Key("a".into()), PathSegment::Key("0".into())])
        );
    }

    fn arb_segment() -> impl Strategy<Value = PatternSegment> {
        prop_oneof![
            "[a-zA-Z0-9_-]{1,8}".prop_map(PatternSegment::Key),
            ".{0,8}".prop_map(PatternSegment::Key),
            Just(PatternSegment::AnyKey),
            (0usize..1000).prop_map(PatternSegment::Index),
            Just(PatternSegment::AnyIndex),
        ]
    }

    proptest! {
        #[test]
        fn rendering_then_parsing_round_trips(segments in proptest::collection::vec(arb_segment(), 1..6)) {
            let pattern = PathPattern { segments };
            let text = pattern.to_string();
            let parsed = PathPattern::parse(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(parsed, pattern);
        }

        #[test]
        fn parsing_never_panics(text in ".{0,40}") {
            let _ = PathPattern::parse(&text);
        }
    }
}
