//! Where the CA lives: the [`CaStore`] port (the Kubernetes Secret + ConfigMaps adapter
//! is in `kube_adapters`) and [`MemoryCaStore`] for tests and local runs.

use std::fmt;

use async_trait::async_trait;
use parking_lot::Mutex;

/// One stored CA: certificate and key, PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredCa {
    /// Certificate, PEM.
    pub cert_pem: String,
    /// Private key, PKCS#8 PEM.
    pub key_pem: String,
}

impl fmt::Debug for StoredCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoredCa").finish_non_exhaustive()
    }
}

/// The stored CA set and the version it was read at (for optimistic concurrency).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loaded {
    /// CAs, oldest first.
    pub cas: Vec<StoredCa>,
    /// Opaque version (a resourceVersion); `None` when nothing is stored.
    pub version: Option<String>,
}

/// Why the store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Someone else wrote since we read: reload and retry.
    #[error("the stored CA changed concurrently")]
    Conflict,
    /// The stored data is unreadable.
    #[error("stored CA data is invalid: {0}")]
    Invalid(String),
    /// The backing API failed.
    #[error("CA store unavailable: {0}")]
    Unavailable(String),
}

/// Persistence of the CA and publication of its trust bundle.
#[async_trait]
pub trait CaStore: fmt::Debug + Send + Sync {
    /// The stored CA set (empty when none is stored yet).
    async fn load(&self) -> Result<Loaded, StoreError>;
    /// Stores `cas`, failing with [`StoreError::Conflict`] when the stored version is
    /// no longer `version` (`None`: create if absent).
    async fn save(&self, cas: &[StoredCa], version: Option<&str>) -> Result<(), StoreError>;
    /// Publishes the trust bundle (PEM of every trusted CA certificate).
    async fn publish_bundle(&self, bundle_pem: &str) -> Result<(), StoreError>;
}

/// An in-memory [`CaStore`].
#[derive(Debug, Default)]
pub struct MemoryCaStore {
    state: Mutex<MemoryState>,
}

#[derive(Debug, Default)]
struct MemoryState {
    cas: Vec<StoredCa>,
    version: u64,
    bundle: Option<String>,
}

impl MemoryCaStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The last published bundle.
    pub fn bundle(&self) -> Option<String> {
        self.state.lock().bundle.clone()
    }
}

#[async_trait]
impl CaStore for MemoryCaStore {
    async fn load(&self) -> Result<Loaded, StoreError> {
        let state = self.state.lock();
        Ok(Loaded {
            cas: state.cas.clone(),
            version: (state.version > 0).then(|| state.version.to_string()),
        })
    }

    async fn save(&self, cas: &[StoredCa], version: Option<&str>) -> Result<(), StoreError> {
        let mut state = self.state.lock();
        let current = (state.version > 0).then(|| state.version.to_string());
        if let Some(v) = version
            && current.as_deref() != Some(v)
        {
            return Err(StoreError::Conflict);
        }
        state.cas = cas.to_vec();
        state.version += 1;
        Ok(())
    }

    async fn publish_bundle(&self, bundle_pem: &str) -> Result<(), StoreError> {
        self.state.lock().bundle = Some(bundle_pem.to_owned());
        Ok(())
    }
}
