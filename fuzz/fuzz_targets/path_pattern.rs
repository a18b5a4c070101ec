//! (c) Path patterns: any text parses or fails with a column inside it; a parsed pattern
//! renders to text that parses back to the same pattern; and a concrete path built from the
//! input renders (reference §4's rendering) to text that parses as a pattern of the same steps.
#![no_main]

use drift_engine::PatternSegment;
use drift_engine::{FieldPath, PathPattern, PathSegment};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match PathPattern::parse(text) {
        Ok(pattern) => {
            let rendered = pattern.to_string();
            let back = PathPattern::parse(&rendered)
                .unwrap_or_else(|e| panic!("{text:?} → {pattern:?} renders as {rendered:?}: {e}"));
            assert_eq!(back, pattern, "{text:?} renders as {rendered:?}");
            assert!(pattern.covers(&pattern_path(&pattern)));
        }
        Err(error) => {
            assert!(
                error.column >= 1 && error.column <= text.chars().count() + 1,
                "column {} of {text:?}",
                error.column
            );
            assert_eq!(error.pattern, text);
        }
    }
    // A concrete path: the input split at NUL into keys, `#n` being index n.
    let mut path = FieldPath::root();
    for part in text.split('\0').filter(|_| !text.is_empty()) {
        match part.strip_prefix('#').and_then(|n| n.parse::<usize>().ok()) {
            Some(index) => path.push(PathSegment::Index(index)),
            None => path.push(PathSegment::Key(part.to_owned())),
        }
    }
    if path.is_root() {
        assert_eq!(path.to_string(), "<root>");
        return;
    }
    let rendered = path.to_string();
    let pattern = PathPattern::parse(&rendered)
        .unwrap_or_else(|e| panic!("path {path:?} renders as {rendered:?}, not a pattern: {e}"));
    let expected: Vec<PatternSegment> = path
        .segments()
        .iter()
        .map(|s| match s {
            PathSegment::Key(k) => PatternSegment::Key(k.clone()),
            PathSegment::Index(i) => PatternSegment::Index(*i),
        })
        .collect();
    assert_eq!(pattern.segments(), expected.as_slice(), "{rendered:?}");
    assert!(pattern.covers(path.segments()));
});

/// A concrete path the pattern matches (wildcards made concrete).
fn pattern_path(pattern: &PathPattern) -> Vec<PathSegment> {
    pattern
        .segments()
        .iter()
        .map(|s| match s {
            PatternSegment::Key(k) => PathSegment::Key(k.clone()),
            PatternSegment::AnyKey => PathSegment::Key("any".into()),
            PatternSegment::Index(i) => PathSegment::Index(*i),
            PatternSegment::AnyIndex => PathSegment::Index(7),
        })
        .collect()
}
