//! The installation's record signing key (`--record-signing-key`, reference §8 "Trust") and the
//! previous public keys it still trusts after a rotation (`--record-verify-keys`): read once at
//! start; the webhook's Events writer signs records with the key, the audit signs what its
//! Reports remember and verifies both with the key's public half or a previous key. The webhook
//! publishes the public keys in a ConfigMap of its namespace (`--record-key-configmap`) for
//! `kubectl drift`.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use drift_api::events::signature::{self, SigningKey, TrustedKeys, Verification, VerifyingKey};
use drift_api::status::{KeyPublication, MAX_PUBLICATION_ERROR_BYTES, PublicationState};

/// The record keys of the flags: the signing key, and the previous public keys still trusted.
#[derive(Debug, Clone, Default)]
pub struct RecordKeys {
    pub signing: Option<Arc<SigningKey>>,
    pub previous: Vec<VerifyingKey>,
}

/// The keys of `--record-signing-key` and `--record-verify-keys`. A missing, unreadable or
/// wrongly sized key file, a bad line of the previous keys, or previous keys without a signing
/// key are startup errors naming the file and the fix.
pub fn load(signing: Option<&Path>, verify: Option<&Path>) -> anyhow::Result<RecordKeys> {
    let signing = load_signing(signing)?;
    let previous = match verify {
        None => Vec::new(),
        Some(path) => {
            if signing.is_none() {
                anyhow::bail!(
                    "--record-verify-keys {} needs --record-signing-key: previous keys are trusted next to the installation's current key",
                    path.display()
                );
            }
            load_previous(path)?
        }
    };
    Ok(RecordKeys { signing, previous })
}

fn load_signing(path: Option<&Path>) -> anyhow::Result<Option<Arc<SigningKey>>> {
    let Some(path) = path else {
        return Ok(None);
    };
    let fix = "give --record-signing-key a file of exactly 32 random bytes (e.g. `head -c 32 /dev/urandom > seed`; the chart mounts its Secret's)";
    let metadata = std::fs::metadata(path).with_context(|| {
        format!(
            "cannot read the record signing key {}: {fix}",
            path.display()
        )
    })?;
    if metadata.len() != signature::SEED_BYTES as u64 {
        anyhow::bail!(
            "the record signing key {} holds {} bytes, not {}: {fix}",
            path.display(),
            metadata.len(),
            signature::SEED_BYTES
        );
    }
    let bytes = std::fs::read(path).with_context(|| {
        format!(
            "cannot read the record signing key {}: {fix}",
            path.display()
        )
    })?;
    let key = signature::signing_key_of_seed(&bytes)
        .map_err(|e| anyhow::anyhow!("the record signing key {} {e}: {fix}", path.display()))?;
    Ok(Some(Arc::new(key)))
}

/// The previous public keys of a `--record-verify-keys` file.
fn load_previous(path: &Path) -> anyhow::Result<Vec<VerifyingKey>> {
    // A bounded read: 16 keys and their comments fit in far less.
    const MAX_BYTES: u64 = 64 * 1024;
    let fix = "list the public keys the installation signed with before (each as the public key ConfigMap's data.ed25519 showed it), one per line";
    let metadata = std::fs::metadata(path).with_context(|| {
        format!(
            "cannot read the previous record keys {}: {fix}",
            path.display()
        )
    })?;
    if metadata.len() > MAX_BYTES {
        anyhow::bail!(
            "the previous record keys {} hold {} bytes, more than {MAX_BYTES}: {fix}",
            path.display(),
            metadata.len()
        );
    }
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "cannot read the previous record keys {}: {fix}",
            path.display()
        )
    })?;
    signature::previous_keys_of_text(&text)
        .map_err(|e| anyhow::anyhow!("the previous record keys {}, {e}", path.display()))
}

/// What the audit verifies records and Reports with: its own key's public half and the previous
/// keys, or why it has none.
pub fn verification(keys: &RecordKeys) -> Verification {
    match &keys.signing {
        Some(key) => match TrustedKeys::with_previous(key.verifying_key(), keys.previous.clone()) {
            Ok(trusted) => Verification::Keys(trusted),
            // `load` bounds the previous keys already.
            Err(e) => Verification::Unavailable(format!("--record-verify-keys {e}")),
        },
        None => Verification::Unavailable(
            "this agent has no --record-signing-key, so it cannot tell its webhook's records from forged ones".to_owned(),
        ),
    }
}

/// Publishes the public key of the signing key and the previous keys in the ConfigMap
/// `configmap` of `namespace` (the chart creates it; the agent may only get and patch it), where
/// `kubectl drift` reads them to verify the records. Without a key, an empty value says the
/// records are unsigned. A failure is logged: the webhook serves anyway, and the plugin then
/// says the records could not be verified.
pub async fn publish(
    client: &kube::Client,
    namespace: &str,
    configmap: &str,
    keys: &RecordKeys,
) -> Result<(), String> {
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), namespace);
    let value = keys.signing.as_ref().map_or_else(String::new, |k| {
        signature::public_key_text(&k.verifying_key())
    });
    let patch = serde_json::json!({"data": {
        signature::PUBLIC_KEY_DATA: value,
        signature::PREVIOUS_KEYS_DATA: signature::previous_keys_text(&keys.previous),
    }});
    match api
        .patch(
            configmap,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => {
            tracing::info!(
                namespace,
                configmap,
                signed = keys.signing.is_some(),
                previous_keys = keys.previous.len(),
                "published the record signing key's public half for kubectl drift"
            );
            Ok(())
        }
        Err(e) => {
            tracing::warn!(
            namespace,
            configmap,
            error = %e,
            "cannot publish the record signing key's public half: kubectl drift cannot verify the webhook's records and names no user from them (the chart creates this ConfigMap and lets the agent patch it; --record-key-configmap names it)"
            );
            Err(e.to_string())
        }
    }
}

/// The record signing of a process for its `/status` (reference §8 "Trust"): whether it has a
/// key, and — the webhook — where the publication of its public half stands.
#[derive(Clone)]
pub struct SigningStatus {
    pub signed: bool,
    pub publication: Option<Arc<PublicationStatus>>,
}

impl SigningStatus {
    pub fn status(&self) -> drift_api::status::RecordSigning {
        drift_api::status::RecordSigning {
            signed: self.signed,
            public_key: self.publication.as_ref().map(|p| p.get()),
        }
    }
}

/// Where the publication stands, for the webhook's `/status` (reference §8 "Trust"): pending,
/// published, or failing with the last error (bounded).
pub struct PublicationStatus(std::sync::Mutex<KeyPublication>);

impl PublicationStatus {
    /// Pending, for the ConfigMap `configmap` of `namespace`.
    pub fn new(namespace: &str, configmap: &str) -> Self {
        Self(std::sync::Mutex::new(KeyPublication {
            config_map: format!("{namespace}/{configmap}"),
            ..KeyPublication::default()
        }))
    }

    fn attempted(&self, outcome: &Result<(), String>, at: std::time::SystemTime) {
        if let Ok(mut publication) = self.0.lock() {
            publication.attempts = publication.attempts.saturating_add(1);
            publication.at = Some(humantime::format_rfc3339_seconds(at).to_string());
            (publication.state, publication.last_error) = match outcome {
                Ok(()) => (PublicationState::Published, None),
                Err(e) => (
                    PublicationState::Failing,
                    Some(drift_engine::truncate::truncate_bytes(
                        e,
                        MAX_PUBLICATION_ERROR_BYTES,
                    )),
                ),
            };
        }
    }

    pub fn get(&self) -> KeyPublication {
        self.0.lock().map(|p| p.clone()).unwrap_or_default()
    }
}

/// [`publish`] until it succeeds or the agent shuts down, waiting 5 s after the first failure,
/// doubling up to 5 minutes: a ConfigMap made after the agent started is still filled in. Each
/// attempt is told to `status`.
pub async fn publish_until_done(
    client: kube::Client,
    namespace: String,
    configmap: String,
    keys: RecordKeys,
    status: Arc<PublicationStatus>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut wait = std::time::Duration::from_secs(5);
    loop {
        let outcome = publish(&client, &namespace, &configmap, &keys).await;
        status.attempted(&outcome, std::time::SystemTime::now());
        if outcome.is_ok() {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => return,
        }
        wait = (wait * 2).min(std::time::Duration::from_secs(300));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_of_32_bytes_only() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("seed");
        std::fs::write(&good, [7u8; 32]).unwrap();
        let keys = load(Some(&good), None).unwrap();
        let key = keys.signing.clone().unwrap();
        assert!(
            matches!(verification(&keys), Verification::Keys(k) if *k.current() == key.verifying_key() && k.previous().is_empty())
        );
        let short = dir.path().join("short");
        std::fs::write(&short, [7u8; 31]).unwrap();
        let cases = [
            (short, "holds 31 bytes, not 32"),
            (
                dir.path().join("absent"),
                "cannot read the record signing key",
            ),
        ];
        for (path, want) in cases {
            let e = format!("{:#}", load(Some(&path), None).unwrap_err());
            assert!(
                e.contains(want) && e.contains(&path.display().to_string()),
                "{e}"
            );
            assert!(e.contains("32 random bytes"), "{e}");
        }
        let none = load(None, None).unwrap();
        assert!(none.signing.is_none() && none.previous.is_empty());
        assert!(!verification(&none).has_keys());
    }

    #[test]
    fn previous_keys_from_a_file_or_a_startup_error_naming_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let seed = dir.path().join("seed");
        std::fs::write(&seed, [7u8; 32]).unwrap();
        let old = signature::signing_key_of_seed(&[8u8; 32]).unwrap();
        let old_text = signature::public_key_text(&old.verifying_key());
        let good = dir.path().join("previous");
        std::fs::write(&good, format!("# rotated out in December\n{old_text}\n")).unwrap();
        let keys = load(Some(&seed), Some(&good)).unwrap();
        assert_eq!(keys.previous, vec![old.verifying_key()]);
        let record = r#"{"uid":"u-1"}"#;
        let by_old = signature::sign_record(&old, record);
        assert!(verification(&keys).record(record, Some(&by_old)));
        assert!(!verification(&load(Some(&seed), None).unwrap()).record(record, Some(&by_old)));

        let bad = dir.path().join("bad");
        std::fs::write(&bad, format!("{old_text}\n\nnot a key\n")).unwrap();
        let too_many = dir.path().join("too-many");
        std::fs::write(
            &too_many,
            (0..=signature::MAX_PREVIOUS_KEYS as u8)
                .map(|i| {
                    let k = signature::signing_key_of_seed(&[i + 20; 32]).unwrap();
                    signature::public_key_text(&k.verifying_key())
                })
                .collect::<Vec<_>>()
                .join("\n"),
        )
        .unwrap();
        let big = dir.path().join("big");
        std::fs::write(&big, "#".repeat(70 * 1024)).unwrap();
        // (signing key, previous keys file, what the error says)
        let cases = [
            (
                Some(&seed),
                bad.clone(),
                vec!["line 3:", "one base64 public key per line"],
            ),
            (
                Some(&seed),
                too_many.clone(),
                vec!["more than 16 previous public keys"],
            ),
            (Some(&seed), big.clone(), vec!["more than 65536"]),
            (
                Some(&seed),
                dir.path().join("absent"),
                vec!["cannot read the previous record keys"],
            ),
            (None, good.clone(), vec!["needs --record-signing-key"]),
        ];
        for (signing, path, wants) in cases {
            let e = format!(
                "{:#}",
                load(signing.map(|p| p.as_path()), Some(&path)).unwrap_err()
            );
            assert!(e.contains(&path.display().to_string()), "{e}");
            for want in wants {
                assert!(e.contains(want), "{e} lacks {want}");
            }
        }
    }
}
