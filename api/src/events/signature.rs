//! The signatures that make the webhook's records and the audit's memory trustworthy (reference
//! §8 "Trust"): the webhook signs each [`super::EDITS_ANNOTATION`] it writes, the audit each
//! Report property it reads back ([`super::WHO_RECORDED_PROPERTY`],
//! [`super::BYPASS_SETTER_PROPERTY`]), with the installation's Ed25519 key (a 32-byte seed in a
//! file, `--record-signing-key`). Anyone who may create Events or write Reports can write the
//! text; only the agent can sign it, and the plugin verifies with the public key alone.
//! Verification is pure: key in, verdict out.

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

fn sign(key: &SigningKey, parts: &[&str]) -> String {
    let signature = key.sign(parts.concat().as_bytes());
    format!(
        "{SIGNATURE_PREFIX}{}",
        STANDARD.encode(signature.to_bytes())
    )
}

fn verify(key: &VerifyingKey, parts: &[&str], signature: Option<&str>) -> bool {
    let Some(encoded) = signature.and_then(|s| s.strip_prefix(SIGNATURE_PREFIX)) else {
        return false;
    };
    // 64 bytes are 88 base64 characters: anything longer is no signature.
    if encoded.len() > 96 {
        return false;
    }
    let Ok(bytes) = STANDARD.decode(encoded) else {
        return false;
    };
    let Ok(signature) = Signature::from_slice(&bytes) else {
        return false;
    };
    key.verify(parts.concat().as_bytes(), &signature).is_ok()
}

/// The [`RECORD_SIGNATURE_ANNOTATION`] value of an [`super::EDITS_ANNOTATION`] value: over its
/// exact text (which holds the object's uid, so a copy on another object's Event does not
/// verify).
pub fn sign_record(key: &SigningKey, annotation: &str) -> String {
    sign(key, &[RECORD_DOMAIN, annotation])
}

/// Whether `signature` is this key's over the record annotation `annotation`.
pub fn record_verifies(key: &VerifyingKey, annotation: &str, signature: Option<&str>) -> bool {
    verify(key, &[RECORD_DOMAIN, annotation], signature)
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
    verify(
        key,
        &[PROPERTY_DOMAIN, name, "\n", uid, "\n", text],
        signature,
    )
}

/// The name of the property holding the signature of property `name`.
pub fn signature_property(name: &str) -> String {
    format!("{name}{PROPERTY_SIGNATURE_SUFFIX}")
}

/// What a reader verifies the webhook's records and the audit's memory with: the installation's
/// public key, or why it has none (then nothing read names a user).
#[derive(Debug, Clone)]
pub enum Verification {
    Key(VerifyingKey),
    Unavailable(String),
}

impl Verification {
    /// Why a record that does not verify names no user (`Why::Unknown`'s detail).
    pub fn unverified_why(&self) -> String {
        match self {
            Verification::Key(_) => UNVERIFIED_RECORD.to_owned(),
            Verification::Unavailable(why) => {
                format!("the webhook's records could not be verified: {why}")
            }
        }
    }

    /// Whether an Event's record annotation text carries this key's signature.
    pub fn record(&self, annotation: &str, signature: Option<&str>) -> bool {
        match self {
            Verification::Key(key) => record_verifies(key, annotation, signature),
            Verification::Unavailable(_) => false,
        }
    }

    /// Whether a Report property carries this key's signature.
    pub fn property(&self, name: &str, uid: &str, text: &str, signature: Option<&str>) -> bool {
        match self {
            Verification::Key(key) => property_verifies(key, name, uid, text, signature),
            Verification::Unavailable(_) => false,
        }
    }
}

/// Why a record that does not verify with the installation's key names no user.
pub const UNVERIFIED_RECORD: &str = "a record of this object's edits did not verify: not signed by this installation's webhook key (forged, or signed by an earlier key)";

/// The ConfigMap, in the agent's namespace, where the webhook publishes its public key (the
/// chart creates it empty; `kubectl drift` finds the namespace in the webhook configuration).
pub const PUBLIC_KEY_CONFIGMAP: &str = "drift-sentinel-record-key";
/// Its `data` key: the public key as [`public_key_text`] writes it.
pub const PUBLIC_KEY_DATA: &str = "ed25519";
