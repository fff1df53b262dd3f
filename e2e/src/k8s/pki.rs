//! Throw-away PKI for one test control plane: a CA, the API server's serving cert for
//! `127.0.0.1`/`localhost`, an admin client cert (`system:masters`) and the
//! ServiceAccount token signing key. Keys are ECDSA P-256; everything is PEM.

use rcgen::{Certificate, DnType, ExtendedKeyUsagePurpose, KeyPair};

use crate::ca::Ca;

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
        let ca = Ca::generate("proxy-pool-e2e-ca")?;
        let (serving_cert, serving_key) = pem(ca.leaf(
            &[
                "127.0.0.1",
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
            ],
            &[(DnType::CommonName, "kube-apiserver")],
            ExtendedKeyUsagePurpose::ServerAuth,
        )?);
        let (admin_cert, admin_key) = pem(ca.leaf(
            &[],
            &[
                (DnType::CommonName, "proxy-pool-e2e-admin"),
                (DnType::OrganizationName, "system:masters"),
            ],
            ExtendedKeyUsagePurpose::ClientAuth,
        )?);

        let sa_key = KeyPair::generate()?;
        Ok(Self {
            ca_cert: ca.cert().pem(),
            serving_cert,
            serving_key,
            admin_cert,
            admin_key,
            sa_pub: sa_key.public_key_pem(),
            sa_key: sa_key.serialize_pem(),
        })
    }
}

/// A certificate and its key as PEM: (cert, key).
fn pem((cert, key): (Certificate, KeyPair)) -> (String, String) {
    (cert.pem(), key.serialize_pem())
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
