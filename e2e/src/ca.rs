//! Throw-away certificate authorities for the harnesses: a CA generated at start and
//! the leaf certificates it signs. Keys are ECDSA P-256.

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

/// A CA: its self-signed certificate and its key, which signs the leaves.
pub(crate) struct Ca {
    cert: Certificate,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    /// A fresh CA with the subject `common_name`.
    pub(crate) fn generate(common_name: &str) -> Result<Self, rcgen::Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key)?;
        Ok(Self {
            cert,
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA's certificate, the one to trust.
    pub(crate) fn cert(&self) -> &Certificate {
        &self.cert
    }

    /// A certificate for `sans` with the subject `names`, signed for one extended
    /// usage, and its fresh key.
    pub(crate) fn leaf(
        &self,
        sans: &[&str],
        names: &[(DnType, &str)],
        usage: ExtendedKeyUsagePurpose,
    ) -> Result<(Certificate, KeyPair), rcgen::Error> {
        let key = KeyPair::generate()?;
        let mut params =
            CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())?;
        for (kind, value) in names {
            params.distinguished_name.push(kind.clone(), *value);
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok((cert, key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::ServerCertVerifier as _;
    use rustls::pki_types::{ServerName, UnixTime};
    use std::sync::Arc;

    #[test]
    fn a_leaf_verifies_against_its_ca() {
        let ca = Ca::generate("test CA").unwrap();
        assert!(ca.cert().pem().starts_with("-----BEGIN CERTIFICATE-----"));
        let (leaf, key) = ca
            .leaf(
                &["localhost"],
                &[(DnType::CommonName, "test leaf")],
                ExtendedKeyUsagePurpose::ServerAuth,
            )
            .unwrap();
        assert!(key.serialize_pem().contains("PRIVATE KEY"));
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.cert().der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
        let name = ServerName::try_from("localhost").unwrap();
        verifier
            .verify_server_cert(leaf.der(), &[], &name, &[], UnixTime::now())
            .unwrap();
    }
}
