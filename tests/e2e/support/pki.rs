//! Generates the certificates and the service-account key of a throwaway control plane.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

/// Paths of the PEM files written by [`write`].
pub struct Pki {
    pub ca_cert: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub admin_cert: PathBuf,
    pub admin_key: PathBuf,
    pub service_account_public: PathBuf,
    pub service_account_private: PathBuf,
}

/// Writes a CA, a serving certificate for loopback, a client certificate in the
/// `system:masters` group for the tests and the controllers, and a service-account key pair.
pub fn write(dir: &Path) -> Pki {
    let file = |name: &str, contents: String| {
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap_or_else(|e| panic!("failed to write {}: {e}", path.display()));
        path
    };

    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "muster-e2e-ca");
    ca_params.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("ca key"))
        .expect("failed to sign the CA certificate");

    let serving_key = KeyPair::generate().expect("serving key");
    let names = ["127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"];
    let mut serving = CertificateParams::new(names.map(String::from).to_vec()).expect("serving params");
    serving.distinguished_name.push(DnType::CommonName, "kube-apiserver");
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let serving_cert = serving.signed_by(&serving_key, &ca).expect("failed to sign the serving certificate");

    let admin_key = KeyPair::generate().expect("admin key");
    let mut admin = CertificateParams::new(Vec::<String>::new()).expect("admin params");
    admin.distinguished_name.push(DnType::CommonName, "muster-e2e-admin");
    admin.distinguished_name.push(DnType::OrganizationName, "system:masters");
    admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let admin_cert = admin.signed_by(&admin_key, &ca).expect("failed to sign the admin certificate");

    let service_account = KeyPair::generate().expect("service-account key");

    Pki {
        ca_cert: file("ca.crt", ca.pem()),
        serving_cert: file("apiserver.crt", serving_cert.pem()),
        serving_key: file("apiserver.key", serving_key.serialize_pem()),
        admin_cert: file("admin.crt", admin_cert.pem()),
        admin_key: file("admin.key", admin_key.serialize_pem()),
        service_account_public: file("sa.pub", service_account.public_key_pem()),
        service_account_private: file("sa.key", service_account.serialize_pem()),
    }
}
