//! Shell-style globs for namespace and user names: `*` (any run, also empty), `?` (one
//! character), `[abc]`, `[a-z]`, `[!a-z]` / `[^a-z]`, and `\` to escape the next character.
//! Compiled once when a rule loads; matching never allocates.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(char),
    AnyOne,
    AnyRun,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

/// A compiled glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    source: String,
    tokens: Vec<Token>,
}

/// Why a glob did not compile. `column` is 1-based, counted in characters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid glob {glob:?} at column {column}: {message}")]
pub struct GlobError {
    pub glob: String,
    pub column: usize,
    pub message: String,
}

impl Glob {
    pub fn new(source: &str) -> Result<Self, GlobError> {
        let chars: Vec<char> = source.chars().collect();
        let error = |at: usize, message: &str| GlobError {
            glob: source.to_owned(),
            column: at + 1,
            message: message.to_owned(),
        };
        let mut tokens = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            match chars[i] {
                '*' => {
                    // Consecutive stars mean the same as one.
                    if tokens.last() != Some(&Token::AnyRun) {
                        tokens.push(Token::AnyRun);
                    }
                    i += 1;
                }
                '?' => {
                    tokens.push(Token::AnyOne);
                    i += 1;
                }
                '\\' => {
                    let Some(&c) = chars.get(i + 1) else {
                        return Err(error(i, "trailing '\\' escapes nothing"));
                    };
                    tokens.push(Token::Literal(c));
                    i += 2;
                }
                '[' => {
                    let open = i;
                    i += 1;
                    let negated = matches!(chars.get(i), Some('!' | '^'));
                    if negated {
                        i += 1;
                    }
                    let mut ranges = Vec::new();
                    let mut first = true;
                    loop {
                        let Some(&c) = chars.get(i) else {
                            return Err(error(open, "unterminated character class"));
                        };
                        // A ']' right after the opening bracket is a literal member.
                        if c == ']' && !first {
                            i += 1;
                            break;
                        }
                        first = false;
                        let low = if c == '\\' {
                            i += 1;
                            *chars
                                .get(i)
                                .ok_or_else(|| error(open, "unterminated character class"))?
                        } else {
                            c
                        };
                        i += 1;
                        if chars.get(i) == Some(&'-') && chars.get(i + 1).is_some_and(|&c| c != ']')
                        {
                            let high = chars[i + 1];
                            if high < low {
                                return Err(error(i, "character range is out of order"));
                            }
                            ranges.push((low, high));
                            i += 2;
                        } else {
                            ranges.push((low, low));
                        }
                    }
                    tokens.push(Token::Class { negated, ranges });
                }
                c => {
                    tokens.push(Token::Literal(c));
                    i += 1;
                }
            }
        }
        Ok(Self {
            source: source.to_owned(),
            tokens,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    pub fn matches(&self, text: &str) -> bool {
        // Iterative wildcard matching with single-star backtracking: linear in practice,
        // never exponential. `s` is a byte offset that always sits on a char boundary.
        let tokens = &self.tokens;
        let (mut t, mut s) = (0usize, 0usize);
        let mut star: Option<(usize, usize)> = None;
        while let Some(c) = text[s..].chars().next() {
            let step = match tokens.get(t) {
                Some(Token::AnyRun) => {
                    star = Some((t, s));
                    t += 1;
                    continue;
                }
                Some(Token::AnyOne) => true,
                Some(Token::Literal(want)) => *want == c,
                Some(Token::Class { negated, ranges }) => {
                    ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated
                }
                None => false,
            };
            if step {
                t += 1;
                s += c.len_utf8();
            } else if let Some((star_t, star_s)) = star {
                let skipped = text[star_s..].chars().next().map_or(1, char::len_utf8);
                t = star_t + 1;
                s = star_s + skipped;
                star = Some((star_t, s));
            } else {
                return false;
            }
        }
        tokens[t..].iter().all(|token| *token == Token::AnyRun)
    }
}

impl fmt::Display for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn matches_table() {
        let cases: &[(&str, &str, bool)] = &[
            ("*", "", true),
            ("*", "anything", true),
            ("prod-*", "prod-eu", true),
            ("prod-*", "prod-", true),
            ("prod-*", "staging", false),
            ("prod-*", "", false),
            ("?", "a", true),
            ("?", "", false),
            ("team-?", "team-a", true),
            ("team-?", "team-ab", false),
            ("[ab]*", "alpha", true),
            ("[ab]*", "charlie", false),
            ("[a-c]x", "bx", true),
            ("[!a-c]x", "bx", false),
            ("[^a-c]x", "dx", true),
            ("[]]", "]", true),
            ("a\\*", "a*", true),
            ("a\\*", "ab", false),
            (
                "system:serviceaccount:*:argocd-*",
                "system:serviceaccount:argocd:argocd-application-controller",
                true,
            ),
            ("*a*b*c", "xaxbxc", true),
            ("*a*b*c", "xaxbxcx", false),
            ("ünï*", "ünïcode", true),
            ("exact", "exact", true),
            ("exact", "exactly", false),
        ];
        for (glob, text, want) in cases {
            let compiled = Glob::new(glob).unwrap();
            assert_eq!(compiled.matches(text), *want, "{glob} vs {text}");
        }
    }

    #[test]
    fn errors_name_the_column() {
        let cases: &[(&str, usize)] = &[("prod-[a", 6), ("[z-a]", 3), ("a\\", 2), ("[", 1)];
        for (glob, column) in cases {
            let err = Glob::new(glob).expect_err(glob);
            assert_eq!(err.column, *column, "{glob}: {err}");
        }
    }

    proptest! {
        #[test]
        fn literal_text_matches_itself(text in "[a-z0-9-]{0,20}") {
            prop_assert!(Glob::new(&text).unwrap().matches(&text));
        }

        #[test]
        fn compiling_and_matching_never_panic(glob in ".{0,12}", text in ".{0,12}") {
            if let Ok(g) = Glob::new(&glob) {
                let _ = g.matches(&text);
            }
        }
    }
}
