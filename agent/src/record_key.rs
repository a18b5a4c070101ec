//! The installation's record signing key (`--record-signing-key`, reference §8 "Trust"): read
//! once at start; the webhook's Events writer signs records with it, the audit signs what its
//! Reports remember and verifies both with its public key. The webhook publishes the public key
//! in the ConfigMap [`drift_api::events::signature::PUBLIC_KEY_CONFIGMAP`] of its namespace for
//! `kubectl drift`.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use drift_api::events::signature::{self, SigningKey, Verification};
use drift_api::status::{KeyPublication, MAX_PUBLICATION_ERROR_BYTES, PublicationState};

/// The key of `--record-signing-key`, or `None` without the flag. A missing, unreadable or
/// wrongly sized file is a startup error naming the file and the fix.
pub fn load(path: Option<&Path>) -> anyhow::Result<Option<Arc<SigningKey>>> {
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

/// What the audit verifies records and Reports with: its own key's public half, or why it has
/// none.
pub fn verification(key: Option<&SigningKey>) -> Verification {
    match key {
        Some(key) => Verification::Key(key.verifying_key()),
        None => Verification::Unavailable(
            "this agent has no --record-signing-key, so it cannot tell its webhook's records from forged ones".to_owned(),
        ),
    }
}

/// Publishes the public key of `key` in the ConfigMap
/// [`signature::PUBLIC_KEY_CONFIGMAP`] of `namespace` (the chart creates it; the agent may only
/// get and patch it), where `kubectl drift` reads it to verify the records. Without a key, an
/// empty value says the records are unsigned. A failure is logged: the webhook serves anyway,
/// and the plugin then says the records could not be verified.
pub async fn publish(
    client: &kube::Client,
    namespace: &str,
    key: Option<&SigningKey>,
) -> Result<(), String> {
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), namespace);
    let value = key.map_or_else(String::new, |k| {
        signature::public_key_text(&k.verifying_key())
    });
    let patch = serde_json::json!({"data": {signature::PUBLIC_KEY_DATA: value}});
    match api
        .patch(
            signature::PUBLIC_KEY_CONFIGMAP,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => {
            tracing::info!(
                namespace,
                configmap = signature::PUBLIC_KEY_CONFIGMAP,
                signed = key.is_some(),
                "published the record signing key's public half for kubectl drift"
            );
            Ok(())
        }
        Err(e) => {
            tracing::warn!(
            namespace,
            configmap = signature::PUBLIC_KEY_CONFIGMAP,
            error = %e,
            "cannot publish the record signing key's public half: kubectl drift cannot verify the webhook's records and names no user from them (the chart creates this ConfigMap and lets the agent patch it)"
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
    /// Pending, for the ConfigMap of `namespace`.
    pub fn new(namespace: &str) -> Self {
        Self(std::sync::Mutex::new(KeyPublication {
            config_map: format!("{namespace}/{}", signature::PUBLIC_KEY_CONFIGMAP),
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
    key: Option<Arc<SigningKey>>,
    status: Arc<PublicationStatus>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut wait = std::time::Duration::from_secs(5);
    loop {
        let outcome = publish(&client, &namespace, key.as_deref()).await;
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
        let key = load(Some(&good)).unwrap().unwrap();
        assert!(
            matches!(verification(Some(&key)), Verification::Key(k) if k == key.verifying_key())
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
            let e = format!("{:#}", load(Some(&path)).unwrap_err());
            assert!(
                e.contains(want) && e.contains(&path.display().to_string()),
                "{e}"
            );
            assert!(e.contains("32 random bytes"), "{e}");
        }
        assert!(load(None).unwrap().is_none());
    }
}
