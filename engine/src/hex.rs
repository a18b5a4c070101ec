//! Lower-case hex digits of bytes, the one writer of the engine's digests (a record's value
//! fingerprint, a Report result's id). Written without the formatter: a fingerprint is made for
//! every recorded field of every finding.

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Appends two lower-case hex digits per byte of `bytes` to `text` (whose capacity the caller
/// sizes).
#[inline]
pub(crate) fn push_hex(text: &mut String, bytes: &[u8]) {
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The digits are the formatter's `{:02x}` of every byte value, appended after what is there.
    #[test]
    fn every_byte_is_its_two_lower_case_digits() {
        let bytes: Vec<u8> = (0..=255).collect();
        let mut text = String::from("sha256:");
        push_hex(&mut text, &bytes);
        let formatted: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(text, format!("sha256:{formatted}"));
    }
}
