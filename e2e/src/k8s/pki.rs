//! Throw-away PKI for one test control plane: a CA, the API server's serving cert for
//! `127.0.0.1`/`localhost`, an admin client cert (`system:masters`) and the
//! ServiceAccount token signing key. Keys are ECDSA P-256; everything is PEM.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// PEM material, written to the harness's temp dir by the caller.
pub(crate) struct Pki {
    pub(crate) ca_cert: String,
    pub(crate) serving_cert: String,
    pub(crate) serving_key: String,
    pub(crate) admin_cert: String,
    pub(crate) admin_key: String,
    /// PKCS#8 private key that signs ServiceAccount tokens.
    pub(crate) sa_key: String,
    /// Its SubjectPublicKeyInfo, which verifies them.
    pub(crate) sa_pub: String,
}

impl Pki {
    pub(crate) fn generate() -> Result<Self, rcgen::Error> {
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.distinguished_name
            .push(DnType::CommonName, "proxy-pool-e2e-ca");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, ca_key);

        let (serving_cert, serving_key) = leaf(
            &issuer,
            &[
                "127.0.0.1",
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
            ],
            &[(DnType::CommonName, "kube-apiserver")],
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        let (admin_cert, admin_key) = leaf(
            &issuer,
            &[],
            &[
                (DnType::CommonName, "proxy-pool-e2e-admin"),
                (DnType::OrganizationName, "system:masters"),
            ],
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;

        let sa_key = KeyPair::generate()?;
        Ok(Self {
            ca_cert: ca_cert.pem(),
            serving_cert,
            serving_key,
            admin_cert,
            admin_key,
            sa_pub: sa_key.public_key_pem(),
            sa_key: sa_key.serialize_pem(),
        })
    }
}

/// A certificate for `sans` with the subject `names`, signed by `issuer` for one
/// extended usage, and its fresh key: (cert PEM, key PEM).
fn leaf(
    issuer: &Issuer<'_, KeyPair>,
    sans: &[&str],
    names: &[(DnType, &str)],
    usage: ExtendedKeyUsagePurpose,
) -> Result<(String, String), rcgen::Error> {
    let key = KeyPair::generate()?;
    let mut params =
        CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())?;
    for (kind, value) in names {
        params.distinguished_name.push(kind.clone(), *value);
    }
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![usage];
    let cert = params.signed_by(&key, issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_distinct_pem_material() {
        let pki = Pki::generate().unwrap();
        assert!(pki.ca_cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(pki.sa_key.contains("PRIVATE KEY"));
        assert!(pki.sa_pub.contains("BEGIN PUBLIC KEY"));
        assert_ne!(pki.serving_key, pki.admin_key);
    }
}
