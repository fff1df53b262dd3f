//! The issuance endpoint's own serving certificate, signed by the identity CA (so
//! workers verify it with the same trust bundle), kept in memory and renewed at
//! half-life; rustls reads it through [`ResolvesServerCert`].

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use rcgen::KeyPair;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::authority::Authority;
use super::ca::CaError;

const RETRY: Duration = Duration::from_secs(30);
const MAX_PAUSE: Duration = Duration::from_secs(3600);

/// Why the serving certificate could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ServingError {
    /// Signing failed.
    #[error(transparent)]
    Ca(#[from] CaError),
    /// Key generation failed.
    #[error("serving key: {0}")]
    Key(#[from] rcgen::Error),
    /// rustls refused the key or certificate.
    #[error("serving certificate: {0}")]
    Tls(String),
}

#[derive(Debug)]
struct Current {
    key: Arc<CertifiedKey>,
    renew_at: SystemTime,
    not_after: SystemTime,
}

/// The endpoint's certificate for `names` (DNS names or IP addresses). `Debug` shows
/// no key: rustls prints only a signing key's algorithm.
#[derive(Debug)]
pub struct ServingCert {
    authority: Arc<Authority>,
    names: Vec<String>,
    current: ArcSwap<Current>,
}

impl ServingCert {
    /// Issues the first certificate.
    pub fn new(authority: Arc<Authority>, names: Vec<String>) -> Result<Arc<Self>, ServingError> {
        let first = make(&authority, &names)?;
        Ok(Arc::new(Self {
            authority,
            names,
            current: ArcSwap::from_pointee(first),
        }))
    }

    /// Replaces the certificate with a fresh key and certificate.
    pub fn refresh(&self) -> Result<(), ServingError> {
        self.current
            .store(Arc::new(make(&self.authority, &self.names)?));
        Ok(())
    }

    /// When the certificate served now expires.
    pub fn not_after(&self) -> SystemTime {
        self.current.load().not_after
    }

    /// Renews at half-life until `shutdown` completes.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut pause = self.pause();
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                () = tokio::time::sleep(pause) => {}
            }
            pause = match self.refresh() {
                Ok(()) => self.pause(),
                Err(error) => {
                    tracing::warn!(%error, "renewing the identity endpoint's certificate failed");
                    RETRY
                }
            };
        }
    }

    fn pause(&self) -> Duration {
        let now = self.authority.now();
        self.current
            .load()
            .renew_at
            .duration_since(now)
            .unwrap_or(Duration::ZERO)
            .clamp(Duration::from_secs(1), MAX_PAUSE)
    }
}

fn make(authority: &Authority, names: &[String]) -> Result<Current, ServingError> {
    let key = KeyPair::generate()?;
    let now = authority.now();
    let leaf = authority
        .cas()
        .sign_serving(now, authority.params(), &key, names)?;
    let chain = CertificateDer::pem_slice_iter(leaf.pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ServingError::Tls(e.to_string()))?;
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let signing = rustls::crypto::ring::sign::any_supported_type(&der)
        .map_err(|e| ServingError::Tls(e.to_string()))?;
    let lifetime = leaf
        .not_after
        .duration_since(leaf.not_before)
        .unwrap_or(Duration::ZERO);
    Ok(Current {
        key: Arc::new(CertifiedKey::new(chain, signing)),
        renew_at: leaf.not_before + lifetime / 2,
        not_after: leaf.not_after,
    })
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.current.load().key))
    }
}
