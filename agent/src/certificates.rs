//! The PEM files TLS is set up from — the serving certificate chain and key, the client CA —
//! read and checked, and the crypto provider the listener and client authentication share.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Why the certificate files could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("{path} is not a PEM certificate chain: {reason}")]
    BadCertificate { path: PathBuf, reason: String },
    #[error("{path} is not a PEM private key (PKCS#8, PKCS#1 or SEC1): {reason}")]
    BadKey { path: PathBuf, reason: String },
    #[error("the key in {key} cannot sign with the certificate in {cert}: {reason}")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        reason: String,
    },
}

pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates of a PEM file (at least one), and the file's bytes.
pub(crate) fn read_certificates(
    path: &Path,
) -> Result<(Vec<CertificateDer<'static>>, Vec<u8>), TlsError> {
    let pem = std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadCertificate {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    if certificates.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok((certificates, pem))
}

/// Reads and checks a certificate chain and its key.
pub fn load_certified_key(cert_path: &Path, key_path: &Path) -> Result<CertifiedKey, TlsError> {
    let (chain, _) = read_certificates(cert_path)?;
    let key_pem = std::fs::read(key_path).map_err(|source| TlsError::Read {
        path: key_path.to_owned(),
        source,
    })?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::BadKey {
        path: key_path.to_owned(),
        reason: e.to_string(),
    })?;
    let certified =
        CertifiedKey::from_der(chain, key, &provider()).map_err(|e| TlsError::Mismatch {
            cert: cert_path.to_owned(),
            key: key_path.to_owned(),
            reason: e.to_string(),
        })?;
    Ok(certified)
}
