//! The signatures that make the webhook's records and the audit's memory trustworthy (reference
//! §8 "Trust"): the webhook signs each [`super::EDITS_ANNOTATION`] it writes, the audit each
//! Report property it reads back ([`super::WHO_RECORDED_PROPERTY`],
//! [`super::BYPASS_SETTER_PROPERTY`]), with the installation's Ed25519 key (a 32-byte seed in a
//! file, `--record-signing-key`). Anyone who may create Events or write Reports can write the
//! text; only the agent can sign it, and the plugin verifies with the public key alone.
//! Verification is pure: keys in, verdict out. A reader trusts the current key and the previous
//! ones an operator still lists after a rotation ([`TrustedKeys`]); only the current one signs.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signature, Signer, Verifier};

pub use ed25519_dalek::{SigningKey, VerifyingKey};

/// The annotation holding the signature of an Event's [`super::EDITS_ANNOTATION`].
pub const RECORD_SIGNATURE_ANNOTATION: &str = "drift-sentinel.k8s.io/edits-signature";
/// The annotation holding the signature of an audit `DriftDetected` Event's
/// [`super::WHO_RECORDED_ANNOTATION`] ([`sign_property`] over that name, the object's uid and
/// the text, like the Report's `whoRecorded`).
pub const WHO_RECORDED_SIGNATURE_ANNOTATION: &str = "drift-sentinel.k8s.io/who-recorded-signature";
/// The annotation holding the signature of an audit `Bypassed` Event's
/// [`super::BYPASS_SETTER_ANNOTATION`] (the same way, over that name).
pub const BYPASS_SETTER_SIGNATURE_ANNOTATION: &str =
    "drift-sentinel.k8s.io/bypass-setter-signature";
/// The suffix of a Report property holding the signature of its sibling (`whoRecorded` →
/// `whoRecordedSignature`).
pub const PROPERTY_SIGNATURE_SUFFIX: &str = "Signature";
/// How a signature is written: `ed25519:<base64 of the 64 bytes>`.
pub const SIGNATURE_PREFIX: &str = "ed25519:";
/// The bytes of a signing key's seed file.
pub const SEED_BYTES: usize = 32;

/// What is signed before a record's text: a signature of a record is no signature of anything
/// else the key signs.
const RECORD_DOMAIN: &str = "drift-sentinel.k8s.io/edits\n";
/// What is signed before a Report property: its name, the object's uid, then its text.
const PROPERTY_DOMAIN: &str = "drift-sentinel.k8s.io/report-property\n";

/// Why a seed or a public key cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("holds {0} bytes: an Ed25519 seed is exactly {SEED_BYTES} bytes")]
    SeedLength(usize),
    #[error("is not base64 of a {SEED_BYTES}-byte Ed25519 public key")]
    PublicKey,
}

/// Why a list of previous public keys ([`previous_keys_of_text`]) cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PreviousKeysError {
    #[error(
        "line {line}: {error} (one base64 public key per line, as `data.{PUBLIC_KEY_DATA}` of the public key ConfigMap shows it; `#` starts a comment)"
    )]
    Line { line: usize, error: KeyError },
    #[error(
        "lists more than {MAX_PREVIOUS_KEYS} previous public keys: keep only those whose records still matter (Events live an hour, the audit's Reports keep what they remember)"
    )]
    TooMany,
}

/// The signing key of a seed file's bytes (exactly [`SEED_BYTES`]).
pub fn signing_key_of_seed(bytes: &[u8]) -> Result<SigningKey, KeyError> {
    let seed: [u8; SEED_BYTES] = bytes
        .try_into()
        .map_err(|_| KeyError::SeedLength(bytes.len()))?;
    Ok(SigningKey::from_bytes(&seed))
}

/// A public key as published (base64 of its 32 bytes).
pub fn public_key_text(key: &VerifyingKey) -> String {
    STANDARD.encode(key.as_bytes())
}

/// The public key of its published text ([`public_key_text`]).
pub fn public_key_of_text(text: &str) -> Result<VerifyingKey, KeyError> {
    let bytes = STANDARD
        .decode(text.trim())
        .map_err(|_| KeyError::PublicKey)?;
    let bytes: [u8; 32] = bytes.try_into().map_err(|_| KeyError::PublicKey)?;
    VerifyingKey::from_bytes(&bytes).map_err(|_| KeyError::PublicKey)
}

/// At most this many previous public keys are trusted besides the current one: verifying an
/// unsigned or forged record costs one check per key.
pub const MAX_PREVIOUS_KEYS: usize = 16;

/// The previous public keys of their listed text: one base64 key per line; blank lines and
/// `#` comments (whole-line or after a key) are skipped. A duplicate is kept once.
pub fn previous_keys_of_text(text: &str) -> Result<Vec<VerifyingKey>, PreviousKeysError> {
    let mut keys: Vec<VerifyingKey> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line_text = line.split('#').next().unwrap_or_default().trim();
        if line_text.is_empty() {
            continue;
        }
        let key = public_key_of_text(line_text).map_err(|error| PreviousKeysError::Line {
            line: index + 1,
            error,
        })?;
        if !keys.contains(&key) {
            if keys.len() == MAX_PREVIOUS_KEYS {
                return Err(PreviousKeysError::TooMany);
            }
            keys.push(key);
        }
    }
    Ok(keys)
}

/// The text [`previous_keys_of_text`] reads: one key per line.
pub fn previous_keys_text(keys: &[VerifyingKey]) -> String {
    keys.iter()
        .map(public_key_text)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The public keys a reader trusts: the installation's current key, and up to
/// [`MAX_PREVIOUS_KEYS`] it was rotated from that the operator still lists (reference §8
/// "Trust"). A record or property verifies if any of them signed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedKeys {
    current: VerifyingKey,
    previous: Vec<VerifyingKey>,
}

impl TrustedKeys {
    /// Only the current key.
    pub fn new(current: VerifyingKey) -> Self {
        Self {
            current,
            previous: Vec::new(),
        }
    }

    /// The current key and the previous ones (the current one, if listed, is not repeated).
    pub fn with_previous(
        current: VerifyingKey,
        previous: Vec<VerifyingKey>,
    ) -> Result<Self, PreviousKeysError> {
        let mut kept: Vec<VerifyingKey> = Vec::with_capacity(previous.len());
        for key in previous {
            if key != current && !kept.contains(&key) {
                kept.push(key);
            }
        }
        if kept.len() > MAX_PREVIOUS_KEYS {
            return Err(PreviousKeysError::TooMany);
        }
        Ok(Self {
            current,
            previous: kept,
        })
    }

    /// The key the installation signs with now.
    pub fn current(&self) -> &VerifyingKey {
        &self.current
    }

    /// The keys it signed with before, still trusted.
    pub fn previous(&self) -> &[VerifyingKey] {
        &self.previous
    }

    fn verifies(&self, parts: &[&str], signature: Option<&str>) -> bool {
        let Some(signature) = decode_signature(signature) else {
            return false;
        };
        let message = parts.concat();
        std::iter::once(&self.current)
            .chain(&self.previous)
            .any(|key| key.verify(message.as_bytes(), &signature).is_ok())
    }
}

fn sign(key: &SigningKey, parts: &[&str]) -> String {
    let signature = key.sign(parts.concat().as_bytes());
    format!(
        "{SIGNATURE_PREFIX}{}",
        STANDARD.encode(signature.to_bytes())
    )
}

/// The signature of its written form ([`SIGNATURE_PREFIX`] and base64), or `None`.
fn decode_signature(signature: Option<&str>) -> Option<Signature> {
    let encoded = signature?.strip_prefix(SIGNATURE_PREFIX)?;
    // 64 bytes are 88 base64 characters: anything longer is no signature.
    if encoded.len() > 96 {
        return None;
    }
    let bytes = STANDARD.decode(encoded).ok()?;
    Signature::from_slice(&bytes).ok()
}

/// The [`RECORD_SIGNATURE_ANNOTATION`] value of an [`super::EDITS_ANNOTATION`] value: over its
/// exact text (which holds the object's uid, so a copy on another object's Event does not
/// verify).
pub fn sign_record(key: &SigningKey, annotation: &str) -> String {
    sign(key, &[RECORD_DOMAIN, annotation])
}

/// Whether `signature` is this key's over the record annotation `annotation`.
pub fn record_verifies(key: &VerifyingKey, annotation: &str, signature: Option<&str>) -> bool {
    Verification::of_key(*key).record(annotation, signature)
}

/// The signature of a Report property `name` = `text` of the object `uid`.
pub fn sign_property(key: &SigningKey, name: &str, uid: &str, text: &str) -> String {
    sign(key, &[PROPERTY_DOMAIN, name, "\n", uid, "\n", text])
}

/// Whether `signature` is this key's over the Report property `name` = `text` of `uid`.
pub fn property_verifies(
    key: &VerifyingKey,
    name: &str,
    uid: &str,
    text: &str,
    signature: Option<&str>,
) -> bool {
    Verification::of_key(*key).property(name, uid, text, signature)
}

/// The name of the property holding the signature of property `name`.
pub fn signature_property(name: &str) -> String {
    format!("{name}{PROPERTY_SIGNATURE_SUFFIX}")
}

/// What a reader verifies the webhook's records and the audit's memory with: the installation's
/// public keys, or why it has none (then nothing read names a user).
#[derive(Debug, Clone)]
pub enum Verification {
    Keys(TrustedKeys),
    Unavailable(String),
}

impl Verification {
    /// Verification with one key only (no previous keys).
    pub fn of_key(key: VerifyingKey) -> Self {
        Verification::Keys(TrustedKeys::new(key))
    }

    /// Whether it has keys (a record that does not verify is then forged or too old).
    pub fn has_keys(&self) -> bool {
        matches!(self, Verification::Keys(_))
    }

    /// Why a record that does not verify names no user (`Why::Unknown`'s detail).
    pub fn unverified_why(&self) -> String {
        match self {
            Verification::Keys(_) => UNVERIFIED_RECORD.to_owned(),
            Verification::Unavailable(why) => {
                format!("the webhook's records could not be verified: {why}")
            }
        }
    }

    /// Whether an Event's record annotation text carries the signature of a trusted key.
    pub fn record(&self, annotation: &str, signature: Option<&str>) -> bool {
        match self {
            Verification::Keys(keys) => keys.verifies(&[RECORD_DOMAIN, annotation], signature),
            Verification::Unavailable(_) => false,
        }
    }

    /// Whether a Report property carries the signature of a trusted key.
    pub fn property(&self, name: &str, uid: &str, text: &str, signature: Option<&str>) -> bool {
        match self {
            Verification::Keys(keys) => {
                keys.verifies(&[PROPERTY_DOMAIN, name, "\n", uid, "\n", text], signature)
            }
            Verification::Unavailable(_) => false,
        }
    }
}

/// Why a record that does not verify with the installation's key names no user.
pub const UNVERIFIED_RECORD: &str = "a record of this object's edits did not verify: not signed by this installation's webhook key nor a previous key it still trusts (forged, or signed by a key rotated out: list it in --record-verify-keys)";

/// The ConfigMap, in the agent's namespace, where the webhook publishes its public key (the
/// chart creates it empty; `kubectl drift` finds the namespace in the webhook configuration).
pub const PUBLIC_KEY_CONFIGMAP: &str = "drift-sentinel-record-key";
/// Its `data` key: the public key as [`public_key_text`] writes it.
pub const PUBLIC_KEY_DATA: &str = "ed25519";
/// Its `data` key for the previous public keys still trusted, as [`previous_keys_text`]
/// writes them (empty: none).
pub const PREVIOUS_KEYS_DATA: &str = "ed25519-previous";
/// The annotation on the webhook configuration naming that ConfigMap when it is not
/// [`PUBLIC_KEY_CONFIGMAP`] (the chart sets it: one ConfigMap per release).
pub const PUBLIC_KEY_CONFIGMAP_ANNOTATION: &str = "drift-sentinel.k8s.io/record-key-configmap";

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> SigningKey {
        signing_key_of_seed(&[byte; SEED_BYTES]).unwrap()
    }

    #[test]
    fn verifies_with_the_current_key_or_a_listed_previous_one() {
        let trusted = Verification::Keys(
            TrustedKeys::with_previous(
                key(1).verifying_key(),
                vec![key(2).verifying_key(), key(3).verifying_key()],
            )
            .unwrap(),
        );
        let record = r#"{"uid":"u-1"}"#;
        // (signed by, verifies)
        let cases = [
            (key(1), true),  // the current key
            (key(2), true),  // a listed previous key
            (key(3), true),  // another listed previous key
            (key(4), false), // an unlisted key
        ];
        for (signer, want) in cases {
            let signature = sign_record(&signer, record);
            assert_eq!(
                trusted.record(record, Some(&signature)),
                want,
                "record signed by {:?}",
                signer.verifying_key()
            );
            let property = sign_property(&signer, "whoRecorded", "u-1", "alice");
            assert_eq!(
                trusted.property("whoRecorded", "u-1", "alice", Some(&property)),
                want
            );
            // A signature of another text, or of another object, never verifies.
            assert!(!trusted.record(r#"{"uid":"u-2"}"#, Some(&signature)));
            assert!(!trusted.property("whoRecorded", "u-2", "alice", Some(&property)));
            // Only the current key is trusted without a previous list.
            let current_only = Verification::of_key(key(1).verifying_key());
            assert_eq!(
                current_only.record(record, Some(&signature)),
                signer.verifying_key() == key(1).verifying_key()
            );
        }
        for garbage in [
            None,
            Some(""),
            Some("ed25519:"),
            Some("ed25519:!!"),
            Some("rsa:AAAA"),
        ] {
            assert!(!trusted.record(record, garbage), "{garbage:?}");
        }
        let long = format!("{SIGNATURE_PREFIX}{}", "A".repeat(200));
        assert!(!trusted.record(record, Some(&long)));
        assert!(!Verification::Unavailable("no key".into()).record(record, None));
    }

    #[test]
    fn previous_keys_are_read_one_per_line() {
        let a = public_key_text(&key(1).verifying_key());
        let b = public_key_text(&key(2).verifying_key());
        let text = format!("# rotated out 2026-12-01\n{a}\n\n  {b}  # the one before\n{a}\n");
        assert_eq!(
            previous_keys_of_text(&text).unwrap(),
            vec![key(1).verifying_key(), key(2).verifying_key()]
        );
        assert_eq!(
            previous_keys_of_text(&previous_keys_text(&[
                key(1).verifying_key(),
                key(2).verifying_key()
            ]))
            .unwrap(),
            vec![key(1).verifying_key(), key(2).verifying_key()]
        );
        assert_eq!(previous_keys_of_text("").unwrap(), vec![]);
        assert_eq!(previous_keys_text(&[]), "");
        // (text, error)
        let cases = [
            (
                format!("{a}\nnot-a-key\n"),
                PreviousKeysError::Line {
                    line: 2,
                    error: KeyError::PublicKey,
                },
            ),
            (
                // base64 of 31 bytes
                format!("\n\n{}\n", STANDARD.encode([0u8; 31])),
                PreviousKeysError::Line {
                    line: 3,
                    error: KeyError::PublicKey,
                },
            ),
            (
                (0..=MAX_PREVIOUS_KEYS as u8)
                    .map(|i| public_key_text(&key(i + 10).verifying_key()))
                    .collect::<Vec<_>>()
                    .join("\n"),
                PreviousKeysError::TooMany,
            ),
        ];
        for (text, want) in cases {
            let got = previous_keys_of_text(&text).unwrap_err();
            assert_eq!(got, want, "{text}");
            assert!(
                got.to_string().contains("one base64 public key per line")
                    || got == PreviousKeysError::TooMany
            );
        }
        let sixteen: Vec<_> = (0..MAX_PREVIOUS_KEYS as u8)
            .map(|i| key(i + 10).verifying_key())
            .collect();
        assert_eq!(
            previous_keys_of_text(&previous_keys_text(&sixteen))
                .unwrap()
                .len(),
            MAX_PREVIOUS_KEYS
        );
    }

    #[test]
    fn trusted_keys_keep_the_current_key_once_and_are_bounded() {
        let current = key(1).verifying_key();
        let keys = TrustedKeys::with_previous(
            current,
            vec![current, key(2).verifying_key(), key(2).verifying_key()],
        )
        .unwrap();
        assert_eq!(keys.current(), &current);
        assert_eq!(keys.previous(), &[key(2).verifying_key()]);
        let too_many: Vec<_> = (0..=MAX_PREVIOUS_KEYS as u8)
            .map(|i| key(i + 10).verifying_key())
            .collect();
        assert_eq!(
            TrustedKeys::with_previous(current, too_many),
            Err(PreviousKeysError::TooMany)
        );
    }
}
