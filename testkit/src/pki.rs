//! Test certificates made with rcgen: a CA, serving certificates for loopback, and client
//! certificates whose subject Kubernetes reads as a user and its groups.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose,
};

/// A certificate authority that signs serving and client certificates.
pub struct Ca {
    cert: Certificate,
    key: KeyPair,
}

/// A certificate and its private key, PEM-encoded.
#[derive(Clone)]
pub struct Pair {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Pair {
    /// Writes `<stem>.crt` and `<stem>.key` into `dir`: the key first, the certificate last (a
    /// process reloading on change then sees a matching pair once the certificate lands).
    pub fn write(&self, dir: &Path, stem: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{stem}.crt"));
        let key = dir.join(format!("{stem}.key"));
        std::fs::write(&key, &self.key_pem).expect("write key");
        std::fs::write(&cert, &self.cert_pem).expect("write certificate");
        (cert, key)
    }
}

impl Ca {
    pub fn new(name: &str) -> Self {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        let cert = params.self_signed(&key).expect("CA certificate");
        Self { cert, key }
    }

    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    /// A serving certificate for `names` (DNS names or IP addresses).
    pub fn serving(&self, names: &[&str]) -> Pair {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let params = CertificateParams::new(names).expect("serving params");
        self.sign(params)
    }

    /// A serving certificate for `localhost` and `127.0.0.1`.
    pub fn loopback_serving(&self) -> Pair {
        self.serving(&["localhost", "127.0.0.1"])
    }

    /// A client certificate: Kubernetes reads the common name as the user and each
    /// organisation as a group.
    pub fn client(&self, user: &str, groups: &[&str]) -> Pair {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("client params");
        params.distinguished_name.push(DnType::CommonName, user);
        for group in groups {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *group);
        }
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> Pair {
        let key = KeyPair::generate().expect("key");
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .expect("signed certificate");
        Pair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

/// A key pair alone, PEM-encoded (private key PKCS#8, public key SPKI), e.g. to sign and
/// verify service-account tokens.
pub fn key_pair_pem() -> (String, String) {
    let key = KeyPair::generate().expect("key");
    (key.serialize_pem(), key.public_key_pem())
}
