//! The in-memory identity and the handle rustls reads it through.
//!
//! [`IdentityHandle`] is an `ArcSwapOption`: the renewal loop stores a new identity with
//! one pointer swap and every handshake loads the current one without a lock. Plug it
//! into `ClientConfig::with_client_cert_resolver` / `ServerConfig::with_cert_resolver`.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwapOption;
use rustls::SignatureScheme;
use rustls::client::ResolvesClientCert;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::error::ClientError;
use crate::wire::IssueResponse;

/// An issued workload certificate with its private key.
pub struct Identity {
    certified: Arc<CertifiedKey>,
    spiffe_id: String,
    certificate_pem: String,
    key_pem: String,
    trust_bundle_pem: String,
    not_before: SystemTime,
    not_after: SystemTime,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("spiffe_id", &self.spiffe_id)
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// Pairs the issuer's answer with the key whose public half was in the CSR.
    pub(crate) fn from_response(
        response: IssueResponse,
        key_pkcs8_der: Vec<u8>,
        key_pem: String,
    ) -> Result<Self, ClientError> {
        let bad = |what: &str| ClientError::BadResponse(what.to_owned());
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(response.certificate.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|_| bad("certificate is not PEM"))?;
        if chain.is_empty() {
            return Err(bad("no certificate"));
        }
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key_pkcs8_der));
        let signing = rustls::crypto::ring::sign::any_supported_type(&key)?;
        let certified = CertifiedKey::new(chain, signing);
        // The certificate must carry the key we generated (guards against a confused
        // or malicious issuer handing back someone else's certificate).
        certified
            .keys_match()
            .map_err(|_| bad("certificate does not match our key"))?;
        let not_before = UNIX_EPOCH + Duration::from_secs(response.not_before);
        let not_after = UNIX_EPOCH + Duration::from_secs(response.not_after);
        if not_after <= not_before {
            return Err(bad("empty validity period"));
        }
        Ok(Self {
            certified: Arc::new(certified),
            spiffe_id: response.spiffe_id,
            certificate_pem: response.certificate,
            key_pem,
            trust_bundle_pem: response.trust_bundle,
            not_before,
            not_after,
        })
    }

    /// The certificate chain and signing key, for rustls.
    pub fn certified_key(&self) -> Arc<CertifiedKey> {
        Arc::clone(&self.certified)
    }

    /// `spiffe://<trust-domain>/<environment>/worker/<pod-name>`.
    pub fn spiffe_id(&self) -> &str {
        &self.spiffe_id
    }

    /// The leaf certificate, PEM.
    pub fn certificate_pem(&self) -> &str {
        &self.certificate_pem
    }

    /// The private key, PKCS#8 PEM, for TLS stacks that take PEM (tonic). Keep it in
    /// memory; never log or persist it.
    pub fn private_key_pem(&self) -> &str {
        &self.key_pem
    }

    /// The trust bundle the issuer returned with the certificate, PEM.
    pub fn trust_bundle_pem(&self) -> &str {
        &self.trust_bundle_pem
    }

    /// Start of validity.
    pub fn not_before(&self) -> SystemTime {
        self.not_before
    }

    /// End of validity.
    pub fn not_after(&self) -> SystemTime {
        self.not_after
    }

    /// Whether the certificate is valid at `now`.
    pub fn is_valid_at(&self, now: SystemTime) -> bool {
        self.not_before <= now && now < self.not_after
    }
}

/// Shared, lock-free access to the current identity (empty until the first issuance).
#[derive(Clone, Default)]
pub struct IdentityHandle {
    current: Arc<ArcSwapOption<Identity>>,
}

impl fmt::Debug for IdentityHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdentityHandle")
            .field("current", &self.current.load().as_deref())
            .finish()
    }
}

impl IdentityHandle {
    /// An empty handle.
    pub fn new() -> Self {
        Self::default()
    }

    /// The current identity, if one was issued.
    pub fn current(&self) -> Option<Arc<Identity>> {
        self.current.load_full()
    }

    /// Replaces the current identity.
    pub fn store(&self, identity: Identity) {
        self.current.store(Some(Arc::new(identity)));
    }

    fn certified(&self) -> Option<Arc<CertifiedKey>> {
        self.current.load().as_ref().map(|i| i.certified_key())
    }
}

impl ResolvesClientCert for IdentityHandle {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        self.certified()
    }

    fn has_certs(&self) -> bool {
        self.current.load().is_some()
    }
}

impl ResolvesServerCert for IdentityHandle {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.certified()
    }
}
