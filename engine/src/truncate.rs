//! Cutting text to a bound, on a character boundary, marking the cut with `…`: what keeps every
//! message, annotation, log line and record bounded whatever the input (reference §5). The
//! bottom of the engine: the wire parser and the renderers both use it, and it uses nothing.

use std::borrow::Cow;

/// Cuts `text` to at most `max` characters, the last being `…` when cut.
pub fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some(_) => {
            let keep = max.saturating_sub(1);
            let end = text.char_indices().nth(keep).map_or(text.len(), |(i, _)| i);
            let mut out = String::with_capacity(end + 3);
            out.push_str(&text[..end]);
            out.push('…');
            out
        }
    }
}

/// Cuts `text` to at most `max` bytes, the `…` included, on a character boundary.
pub fn truncate_bytes(text: &str, max: usize) -> String {
    bytes_within(Cow::Borrowed(text), max).into_owned()
}

/// [`truncate_bytes`], borrowing `text` when it fits (no copy, no allocation).
pub fn bytes_within(text: Cow<'_, str>, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return text;
    }
    let ellipsis = '…';
    let mut end = max.saturating_sub(ellipsis.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = String::with_capacity(end + ellipsis.len_utf8());
    out.push_str(&text[..end]);
    out.push(ellipsis);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_the_limit() {
        assert_eq!(truncate_chars("abcdef", 6), "abcdef");
        assert_eq!(truncate_chars("abcdefg", 6), "abcde…");
        assert_eq!(truncate_chars("ééééééé", 6).chars().count(), 6);
        assert_eq!(truncate_chars("", 0), "");
        assert_eq!(truncate_bytes("abcdef", 6), "abcdef");
        let cut = truncate_bytes("abcdefghij", 6);
        assert!(cut.len() <= 6 && cut.ends_with('…'), "{cut}");
        let cut = truncate_bytes(&"é".repeat(600), 512);
        assert!(cut.len() <= 512, "{}", cut.len());
    }

    #[test]
    fn text_that_fits_is_borrowed() {
        assert!(matches!(
            bytes_within(Cow::Borrowed("abcdef"), 6),
            Cow::Borrowed("abcdef")
        ));
        let cut = bytes_within(Cow::Borrowed("abcdefghij"), 6);
        assert!(matches!(cut, Cow::Owned(_)));
        assert_eq!(cut, truncate_bytes("abcdefghij", 6));
        let owned = bytes_within(Cow::Owned("é".repeat(600)), 512);
        assert_eq!(owned, truncate_bytes(&"é".repeat(600), 512));
    }
}
