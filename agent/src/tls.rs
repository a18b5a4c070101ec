//! TLS for the webhook listener: rustls with a certificate that is re-read when its files
//! change on disk (a rotated Secret), without a restart. New handshakes get the new
//! certificate; connections already open keep theirs.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

pub use crate::certificates::TlsError;
use crate::certificates::{load_certified_key, provider};
pub use crate::cli::TlsMinVersion;

#[derive(Debug)]
struct ReloadingResolver {
    current: ArcSwap<CertifiedKey>,
}

impl ResolvesServerCert for ReloadingResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// The certificate source and the acceptor built on it.
pub struct ReloadingTls {
    cert_path: PathBuf,
    key_path: PathBuf,
    resolver: Arc<ReloadingResolver>,
    acceptor: TlsAcceptor,
}

const TLS13_ONLY: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];

/// The protocol versions `--tls-min-version` admits.
fn versions(min: TlsMinVersion) -> &'static [&'static rustls::SupportedProtocolVersion] {
    match min {
        TlsMinVersion::Tls12 => rustls::ALL_VERSIONS,
        TlsMinVersion::Tls13 => TLS13_ONLY,
    }
}

/// How the listener's TLS is set up besides its certificate.
#[derive(Debug, Clone, Copy, Default)]
pub struct TlsOptions {
    pub min_version: TlsMinVersion,
    /// Ask callers for a certificate (judged after the handshake: [`crate::client_auth`]).
    pub request_client_certificates: bool,
}

impl ReloadingTls {
    pub fn new(
        cert_path: PathBuf,
        key_path: PathBuf,
        options: TlsOptions,
    ) -> Result<Self, TlsError> {
        let certified = load_certified_key(&cert_path, &key_path)?;
        let resolver = Arc::new(ReloadingResolver {
            current: ArcSwap::from_pointee(certified),
        });
        // The ring provider supports both versions: this cannot fail.
        let builder = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(versions(options.min_version))
            .map_err(|e| TlsError::Mismatch {
                cert: cert_path.clone(),
                key: key_path.clone(),
                reason: e.to_string(),
            })?;
        let builder = if options.request_client_certificates {
            builder
                .with_client_cert_verifier(Arc::new(crate::client_auth::RequestClientCert::new()))
        } else {
            builder.with_no_client_auth()
        };
        let mut config = builder.with_cert_resolver(resolver.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Self {
            cert_path,
            key_path,
            resolver,
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    pub fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.clone()
    }

    fn fingerprint(&self) -> Option<(Vec<u8>, Vec<u8>)> {
        Some((
            std::fs::read(&self.cert_path).ok()?,
            std::fs::read(&self.key_path).ok()?,
        ))
    }

    /// Re-reads the files every `interval` and swaps in a changed, valid certificate. A bad
    /// new pair is logged and the current certificate kept.
    pub async fn watch(self: Arc<Self>, interval: Duration, mut shutdown: watch::Receiver<bool>) {
        let mut last = self.fingerprint();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = shutdown.changed() => return,
            }
            let current = self.fingerprint();
            if current == last {
                continue;
            }
            let vanished = current.is_none();
            last = current;
            if vanished {
                // reference §6: files that vanish keep the last good pair, with a WARN each time.
                tracing::warn!(
                    cert = %self.cert_path.display(),
                    key = %self.key_path.display(),
                    "TLS files cannot be read (removed, or not readable); keeping the current certificate"
                );
                continue;
            }
            match load_certified_key(&self.cert_path, &self.key_path) {
                Ok(certified) => {
                    self.resolver.current.store(Arc::new(certified));
                    tracing::info!(cert = %self.cert_path.display(), "TLS certificate reloaded");
                }
                Err(e) => {
                    // Keep serving the old certificate; the next change of the files is tried again.
                    tracing::warn!(error = %e, "TLS files changed but cannot be used yet; keeping the current certificate");
                }
            }
        }
    }
}

/// The webhook listener's TLS as the command line asks for it — the serving pair and, with
/// `--client-ca-file`, client authentication — each file watched for changes until shutdown.
/// `None` without a certificate (plain HTTP).
pub fn serving(
    args: &crate::cli::ServeArgs,
    shutdown: &watch::Receiver<bool>,
) -> anyhow::Result<Option<crate::server::Tls>> {
    use anyhow::Context as _;
    let (Some(cert), Some(key)) = (&args.tls_cert_file, &args.tls_key_file) else {
        return Ok(None);
    };
    let options = TlsOptions {
        min_version: args.tls_min_version,
        request_client_certificates: args.client_ca_file.is_some(),
    };
    let tls = Arc::new(
        ReloadingTls::new(cert.clone(), key.clone(), options)
            .context("cannot load the TLS certificate")?,
    );
    tokio::spawn(tls.clone().watch(args.reload_interval, shutdown.clone()));
    let client_auth = match &args.client_ca_file {
        Some(ca) => {
            let auth = Arc::new(
                crate::client_auth::ClientAuth::new(ca.clone(), args.client_names.clone())
                    .context("cannot load the client CA (--client-ca-file)")?,
            );
            tokio::spawn(auth.clone().watch(args.reload_interval, shutdown.clone()));
            Some(auth)
        }
        None => None,
    };
    Ok(Some(crate::server::Tls {
        acceptor: tls.acceptor(),
        client_auth,
    }))
}
