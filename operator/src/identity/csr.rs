//! Parsing an untrusted PKCS#10 CSR: exactly one PEM block, DER with nothing trailing,
//! a valid self-signature (proof the caller holds the private key), and then only its
//! public key is kept. Requested names and extensions are ignored on purpose: the
//! certificate's identity comes from the authenticated caller.

use rcgen::SubjectPublicKeyInfo;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::prelude::FromDer as _;

/// Largest CSR PEM accepted.
pub const MAX_CSR_PEM_BYTES: usize = 8 * 1024;

/// Why a CSR is unusable (each maps to 400).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CsrError {
    /// Over [`MAX_CSR_PEM_BYTES`].
    #[error("CSR is too large")]
    TooLarge,
    /// Not one `CERTIFICATE REQUEST` PEM block.
    #[error("CSR is not a PEM certificate request")]
    NotPem,
    /// Not a well-formed PKCS#10 structure.
    #[error("CSR is not a valid PKCS#10 request")]
    Malformed,
    /// The self-signature does not verify.
    #[error("CSR signature does not verify")]
    BadSignature,
    /// The public key algorithm is not supported.
    #[error("CSR public key type is not supported (use ECDSA P-256/P-384, Ed25519 or RSA)")]
    UnsupportedKey,
}

/// The public key of a verified CSR.
pub fn public_key_of(csr_pem: &str) -> Result<SubjectPublicKeyInfo, CsrError> {
    if csr_pem.len() > MAX_CSR_PEM_BYTES {
        return Err(CsrError::TooLarge);
    }
    let (rest, pem) =
        x509_parser::pem::parse_x509_pem(csr_pem.as_bytes()).map_err(|_| CsrError::NotPem)?;
    if pem.label != "CERTIFICATE REQUEST" && pem.label != "NEW CERTIFICATE REQUEST" {
        return Err(CsrError::NotPem);
    }
    if !rest.iter().all(u8::is_ascii_whitespace) {
        return Err(CsrError::NotPem);
    }
    let (trailing, csr) =
        X509CertificationRequest::from_der(&pem.contents).map_err(|_| CsrError::Malformed)?;
    if !trailing.is_empty() {
        return Err(CsrError::Malformed);
    }
    csr.verify_signature().map_err(|_| CsrError::BadSignature)?;
    SubjectPublicKeyInfo::from_der(csr.certification_request_info.subject_pki.raw)
        .map_err(|_| CsrError::UnsupportedKey)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, KeyPair, PublicKeyData as _};

    fn csr(params: &CertificateParams, key: &KeyPair) -> String {
        params.serialize_request(key).unwrap().pem().unwrap()
    }

    #[test]
    fn keeps_only_the_public_key() {
        let key = KeyPair::generate().unwrap();
        let params = CertificateParams::new(vec!["evil.example".to_owned()]).unwrap();
        let spki = public_key_of(&csr(&params, &key)).unwrap();
        assert_eq!(spki.der_bytes(), key.public_key_raw());
    }

    #[test]
    fn rejects_garbage_and_tampering() {
        assert_eq!(public_key_of("hello").unwrap_err(), CsrError::NotPem);
        let key = KeyPair::generate().unwrap();
        let good = csr(&CertificateParams::default(), &key);
        // A certificate is not a CSR.
        let cert = CertificateParams::default()
            .self_signed(&key)
            .unwrap()
            .pem();
        assert_eq!(public_key_of(&cert).unwrap_err(), CsrError::NotPem);
        // Two blocks are not one.
        assert_eq!(
            public_key_of(&format!("{good}{good}")).unwrap_err(),
            CsrError::NotPem
        );
        assert_eq!(
            public_key_of(&"A".repeat(MAX_CSR_PEM_BYTES + 1)).unwrap_err(),
            CsrError::TooLarge
        );
        // Flip one bit of the signed content: the self-signature no longer verifies.
        let (_, pem) = x509_parser::pem::parse_x509_pem(good.as_bytes()).unwrap();
        let mut der = pem.contents.clone();
        let i = der.len() / 3;
        der[i] ^= 0x01;
        let b64 = base64_encode(&der);
        let pem = format!(
            "-----BEGIN CERTIFICATE REQUEST-----\n{b64}\n-----END CERTIFICATE REQUEST-----\n"
        );
        let err = public_key_of(&pem).unwrap_err();
        assert!(
            matches!(err, CsrError::BadSignature | CsrError::Malformed),
            "{err:?}"
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Untrusted input: arbitrary text, and arbitrary bytes inside a well-formed
        /// PEM envelope, are refused with an error, never a panic.
        #[test]
        fn arbitrary_input_never_panics(text in ".{0,600}", der in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)) {
            let _ = public_key_of(&text);
            let pem = format!(
                "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
                base64_encode(&der)
            );
            proptest::prop_assert!(public_key_of(&pem).is_err());
        }
    }

    fn base64_encode(bytes: &[u8]) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }
}
