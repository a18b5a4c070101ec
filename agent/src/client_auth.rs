//! Who may call the webhook (reference §6, "Who may call"): with `--client-ca-file`, only a
//! caller presenting a certificate signed by that CA whose CN or a DNS SAN is one of
//! `--client-names` (the API server, by its AdmissionConfiguration's kubeconfig).
//!
//! The TLS handshake asks every caller for a certificate but requires none, and checks only
//! that a presented certificate's key signed the handshake ([`RequestClientCert`]): the probes
//! and `/metrics` share the listener and must stay open to the kubelet and Prometheus. Each
//! connection keeps the chain it presented ([`PeerCertificates`]); the webhook's paths ask
//! [`ClientAuth::refusal`] before reading a body and answer 401 to a refused caller. The
//! verdict is kept per connection and judged again when the CA changes and every
//! [`REJUDGE_EVERY`], so that a long-lived connection (the API server's HTTP/2 one) follows a
//! CA rotation and a certificate's expiry. The CA file is re-read when it changes, like the
//! serving pair; a bad new file keeps the last good one.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use rustls::DistinguishedName;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls_pki_types::{CertificateDer, UnixTime};
use tokio::sync::watch;

use crate::certificates::{TlsError, provider, read_certificates};
use crate::log_limit::LogLimit;

/// Why a caller was refused; `reason` is the metric's label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    NoCertificate,
    Untrusted { error: String },
    NameNotAllowed { names: Vec<String> },
}

impl Refusal {
    /// The `reason` label of `drift_sentinel_webhook_refused_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::NoCertificate => "no_certificate",
            Refusal::Untrusted { .. } => "untrusted_certificate",
            Refusal::NameNotAllowed { .. } => "name_not_allowed",
        }
    }

    /// What the caller is told (and the log says): no detail it could not see itself.
    pub fn message(&self, allowed: &[String]) -> String {
        let allowed = allowed.join(", ");
        match self {
            Refusal::NoCertificate => format!(
                "client authentication is required: present a client certificate signed by the CA of --client-ca-file, named {allowed}"
            ),
            Refusal::Untrusted { error } => format!(
                "the client certificate is not signed by the CA of --client-ca-file (or is not valid now): {error}; only {allowed} with a certificate of that CA may call"
            ),
            Refusal::NameNotAllowed { names } => format!(
                "the client certificate names {} (CN and DNS SANs); only {allowed} may call",
                if names.is_empty() {
                    "nothing".to_owned()
                } else {
                    names.join(", ")
                }
            ),
        }
    }
}

/// How long a connection's verdict stands before it is judged again (a certificate may
/// expire while its connection is open).
pub const REJUDGE_EVERY: Duration = Duration::from_secs(60);

/// The certificate chain one connection presented (end entity first; empty: none), with its
/// last verdict.
pub struct PeerCertificates {
    pub peer: std::net::SocketAddr,
    chain: Vec<CertificateDer<'static>>,
    /// (CA generation, when, `None` when accepted) of the last judgement.
    verdict: Mutex<Option<(u64, Instant, Option<Refusal>)>>,
}

impl PeerCertificates {
    pub fn new(peer: std::net::SocketAddr, chain: Option<&[CertificateDer<'_>]>) -> Self {
        Self {
            peer,
            chain: chain
                .unwrap_or_default()
                .iter()
                .map(|c| c.clone().into_owned())
                .collect(),
            verdict: Mutex::new(None),
        }
    }
}

impl std::fmt::Debug for PeerCertificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerCertificates")
            .field("peer", &self.peer)
            .field("certificates", &self.chain.len())
            .finish_non_exhaustive()
    }
}

/// The CA bundle (re-read when it changes) and the names that may call.
pub struct ClientAuth {
    ca_path: PathBuf,
    names: Vec<String>,
    verifier: ArcSwap<Arc<dyn ClientCertVerifier>>,
    /// Counts the CA's changes: a connection's verdict of another generation is stale.
    generation: AtomicU64,
    /// The CA file as last seen (`None`: unreadable), which the watch compares with.
    seen: Mutex<Option<Vec<u8>>>,
    refusals_logged: LogLimit<()>,
}

impl std::fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientAuth")
            .field("ca_path", &self.ca_path)
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

impl ClientAuth {
    pub fn new(ca_path: PathBuf, names: Vec<String>) -> Result<Self, TlsError> {
        let (verifier, loaded) = load_verifier(&ca_path)?;
        Ok(Self {
            ca_path,
            names,
            verifier: ArcSwap::from_pointee(verifier),
            generation: AtomicU64::new(0),
            seen: Mutex::new(Some(loaded)),
            refusals_logged: LogLimit::new(Duration::from_secs(10)),
        })
    }

    /// Why the caller of `connection` may not call, or `None`: its last verdict while it is of
    /// the current CA and younger than [`REJUDGE_EVERY`], else a new one.
    pub fn refusal(&self, connection: &PeerCertificates) -> Option<Refusal> {
        let generation = self.generation.load(Ordering::Acquire);
        // Never `None` for a lock that cannot be had: that would accept the caller.
        let mut verdict = connection
            .verdict
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((of, at, refusal)) = verdict.as_ref()
            && *of == generation
            && at.elapsed() < REJUDGE_EVERY
        {
            return refusal.clone();
        }
        let refusal = self.refusal_of(&connection.chain);
        *verdict = Some((generation, Instant::now(), refusal.clone()));
        refusal
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Why the certificate chain a caller presented (end entity first; empty: none) may not
    /// call under the current CA, or `None`.
    fn refusal_of(&self, chain: &[CertificateDer<'_>]) -> Option<Refusal> {
        let Some((end_entity, intermediates)) = chain.split_first() else {
            return Some(Refusal::NoCertificate);
        };
        let verifier = self.verifier.load();
        if let Err(e) = verifier.verify_client_cert(end_entity, intermediates, UnixTime::now()) {
            return Some(Refusal::Untrusted {
                error: e.to_string(),
            });
        }
        let names = certificate_names(end_entity);
        if names.iter().any(|name| self.allows(name)) {
            return None;
        }
        // Bounded for the answer and the log: a few names, each cut.
        Some(Refusal::NameNotAllowed {
            names: names
                .iter()
                .take(16)
                .map(|name| drift_engine::truncate::truncate_chars(name.text(), 253))
                .collect(),
        })
    }

    /// A CN is a Kubernetes user name, compared exactly; a DNS name ignores case.
    fn allows(&self, name: &CertificateName) -> bool {
        self.names.iter().any(|allowed| match name {
            CertificateName::CommonName(cn) => allowed == cn,
            CertificateName::Dns(dns) => allowed.eq_ignore_ascii_case(dns),
        })
    }

    /// Logs a refusal, at most once per period, with how many the quiet period hid.
    pub fn log_refusal(&self, refusal: &Refusal, peer: Option<std::net::SocketAddr>) {
        if let Some(allowed) = self.refusals_logged.allow(&()) {
            tracing::warn!(
                reason = refusal.reason(),
                peer = %peer.map(|p| p.to_string()).unwrap_or_default(),
                refused_since_last_log = allowed.held_back,
                detail = %refusal.message(&self.names),
                "webhook caller refused (401): client authentication failed"
            );
        }
    }

    /// Re-reads the CA file every `interval` and swaps in a changed, valid bundle; a file that
    /// vanishes or does not parse keeps the current one, with a WARN.
    pub async fn watch(self: Arc<Self>, interval: Duration, mut shutdown: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = shutdown.changed() => return,
            }
            match self.reload_if_changed() {
                Ok(true) => tracing::info!(ca = %self.ca_path.display(), "client CA reloaded"),
                Ok(false) => {}
                Err(e) => tracing::warn!(
                    error = %e,
                    "client CA file changed but cannot be used; keeping the current one"
                ),
            }
        }
    }

    /// Takes the CA file again when it differs from what was last seen (compared with what was
    /// loaded, not with a second read: a change in between would be missed). `Ok(true)`: a new
    /// CA is in force, and every connection's verdict is judged again.
    fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let current = std::fs::read(&self.ca_path).ok();
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *seen == current {
            return Ok(false);
        }
        *seen = current;
        let (verifier, loaded) = load_verifier(&self.ca_path)?;
        self.verifier.store(Arc::new(verifier));
        self.generation.fetch_add(1, Ordering::AcqRel);
        *seen = Some(loaded);
        Ok(true)
    }
}

/// The verifier of the CA file's certificates, and the file's bytes.
fn load_verifier(ca_path: &Path) -> Result<(Arc<dyn ClientCertVerifier>, Vec<u8>), TlsError> {
    let (certificates, pem) = read_certificates(ca_path)?;
    let mut roots = rustls::RootCertStore::empty();
    for certificate in certificates {
        roots
            .add(certificate)
            .map_err(|e| TlsError::BadCertificate {
                path: ca_path.to_owned(),
                reason: e.to_string(),
            })?;
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|e| TlsError::BadCertificate {
            path: ca_path.to_owned(),
            reason: e.to_string(),
        })?;
    Ok((verifier, pem))
}

/// A name a certificate holds.
enum CertificateName {
    CommonName(String),
    Dns(String),
}

impl CertificateName {
    fn text(&self) -> &str {
        match self {
            CertificateName::CommonName(name) | CertificateName::Dns(name) => name,
        }
    }
}

/// The CN and DNS SANs of a certificate (already verified, so well formed).
fn certificate_names(der: &CertificateDer<'_>) -> Vec<CertificateName> {
    let Ok((_, certificate)) = x509_parser::parse_x509_certificate(der.as_ref()) else {
        return Vec::new();
    };
    let mut names: Vec<CertificateName> = certificate
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok())
        .map(|cn| CertificateName::CommonName(cn.to_owned()))
        .collect();
    if let Ok(Some(san)) = certificate.subject_alternative_name() {
        names.extend(
            san.value
                .general_names
                .iter()
                .filter_map(|name| match name {
                    x509_parser::extensions::GeneralName::DNSName(dns) => {
                        Some(CertificateName::Dns((*dns).to_owned()))
                    }
                    _ => None,
                }),
        );
    }
    names
}

/// The handshake's side of client authentication: asks for a certificate, requires none, and
/// checks that a presented certificate's key signed the handshake. Whether the certificate is
/// trusted is judged after the handshake, so that the answer can be a 401 that says why.
#[derive(Debug)]
pub(crate) struct RequestClientCert {
    algorithms: WebPkiSupportedAlgorithms,
}

impl RequestClientCert {
    pub(crate) fn new() -> Self {
        Self {
            algorithms: provider().signature_verification_algorithms,
        }
    }
}

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        // No hints: the CA may change while connections are accepted; a client with one
        // certificate (the API server's kubeconfig entry) presents it without them.
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drift_testkit::pki::Ca;
    use rustls_pki_types::pem::PemObject;

    fn der(pem: &str) -> Vec<CertificateDer<'static>> {
        CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .expect("PEM")
    }

    #[test]
    fn callers_are_judged_by_ca_and_name() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new("webhook-clients");
        let other = Ca::new("someone-else");
        let ca_path = dir.path().join("ca.crt");
        std::fs::write(&ca_path, ca.cert_pem()).unwrap();
        let auth = ClientAuth::new(ca_path, vec!["kube-apiserver".into()]).unwrap();

        let good = der(&ca.client("kube-apiserver", &[]).cert_pem);
        let wrong_name = der(&ca.client("alice", &[]).cert_pem);
        let wrong_ca = der(&other.client("kube-apiserver", &[]).cert_pem);
        // A CN is a user name, compared exactly.
        let upper = der(&ca.client("KUBE-APISERVER", &[]).cert_pem);
        let cases: [(&str, &[CertificateDer<'_>], Option<&str>); 5] = [
            ("none", &[], Some("no_certificate")),
            ("accepted", &good, None),
            ("another name", &wrong_name, Some("name_not_allowed")),
            ("the name in capitals", &upper, Some("name_not_allowed")),
            ("another CA", &wrong_ca, Some("untrusted_certificate")),
        ];
        for (what, chain, want) in cases {
            let got = auth.refusal_of(chain);
            assert_eq!(got.as_ref().map(Refusal::reason), want, "{what}: {got:?}");
        }
    }

    #[test]
    fn an_open_connection_is_judged_again_when_the_ca_changes() {
        let dir = tempfile::tempdir().unwrap();
        let (ca, rotated) = (Ca::new("before"), Ca::new("after"));
        let ca_path = dir.path().join("ca.crt");
        std::fs::write(&ca_path, ca.cert_pem()).unwrap();
        let auth = ClientAuth::new(ca_path.clone(), vec!["kube-apiserver".into()]).unwrap();
        let peer = "127.0.0.1:1".parse().unwrap();
        let old = der(&ca.client("kube-apiserver", &[]).cert_pem);
        let new = der(&rotated.client("kube-apiserver", &[]).cert_pem);
        let (old_connection, new_connection) = (
            PeerCertificates::new(peer, Some(&old)),
            PeerCertificates::new(peer, Some(&new)),
        );
        assert_eq!(auth.refusal(&old_connection), None);
        assert!(auth.refusal(&new_connection).is_some());
        assert!(!auth.reload_if_changed().unwrap(), "unchanged");

        std::fs::write(&ca_path, rotated.cert_pem()).unwrap();
        assert!(auth.reload_if_changed().unwrap());
        assert!(matches!(
            auth.refusal(&old_connection),
            Some(Refusal::Untrusted { .. })
        ));
        assert_eq!(auth.refusal(&new_connection), None);

        // A file that no longer parses keeps the CA in force, and is tried once.
        std::fs::write(&ca_path, "garbage\n").unwrap();
        assert!(auth.reload_if_changed().is_err());
        assert!(!auth.reload_if_changed().unwrap());
        assert_eq!(auth.refusal(&new_connection), None);
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.crt");
        std::fs::write(&path, "not a certificate\n").unwrap();
        let error = ClientAuth::new(path, vec!["kube-apiserver".into()]).unwrap_err();
        assert!(
            error.to_string().contains("holds no PEM certificate"),
            "{error}"
        );
    }
}
