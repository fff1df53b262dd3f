//! The running CA: loads the stored CA set, applies the rotation rule, saves changes
//! (optimistic concurrency on the store's version) and republishes the trust bundle;
//! [`Authority::run`] repeats that whenever the set may change and at least every
//! few minutes. Signers read the current set with one atomic load.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;

use super::ca::{CaCert, CaError, CaParams, CaSet};
use super::clock::Clock;
use super::store::{CaStore, StoreError, StoredCa};

/// Longest pause between two reconciles (also picks up another replica's writes).
const MAX_PAUSE: Duration = Duration::from_secs(5 * 60);
/// Shortest pause, and the first retry delay after a failure.
const MIN_PAUSE: Duration = Duration::from_secs(1);
/// Attempts of one reconcile when the store reports concurrent writes.
const ATTEMPTS: usize = 4;

/// Why the CA could not be loaded, rotated or published.
#[derive(Debug, thiserror::Error)]
pub enum AuthorityError {
    /// CA material problem.
    #[error(transparent)]
    Ca(#[from] CaError),
    /// Store problem.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The operator's identity CA.
#[derive(Debug)]
pub struct Authority {
    store: Arc<dyn CaStore>,
    clock: Arc<dyn Clock>,
    params: CaParams,
    current: ArcSwap<CaSet>,
}

impl Authority {
    /// Loads (creating if missing) the CA, rotates it if due and publishes the bundle.
    pub async fn start(
        store: Arc<dyn CaStore>,
        clock: Arc<dyn Clock>,
        params: CaParams,
    ) -> Result<Arc<Self>, AuthorityError> {
        params.validate()?;
        let this = Self {
            store,
            clock,
            params,
            current: ArcSwap::from_pointee(CaSet::default()),
        };
        this.reconcile().await?;
        Ok(Arc::new(this))
    }

    /// The CA set in use.
    pub fn cas(&self) -> Arc<CaSet> {
        self.current.load_full()
    }

    /// The lifetimes in force.
    pub fn params(&self) -> &CaParams {
        &self.params
    }

    /// The clock the CA runs on.
    pub fn now(&self) -> SystemTime {
        self.clock.now()
    }

    /// One pass: load, rotate if due, save, publish the bundle, swap in the new set.
    #[tracing::instrument(skip_all)]
    pub async fn reconcile(&self) -> Result<(), AuthorityError> {
        for _ in 0..ATTEMPTS {
            let loaded = self.store.load().await?;
            let cas = loaded
                .cas
                .iter()
                .map(|c| CaCert::from_pem(&c.cert_pem, &c.key_pem).map(Arc::new))
                .collect::<Result<Vec<_>, _>>()?;
            let set = CaSet::new(cas);
            let now = self.clock.now();
            if let Some(next) = set.rotated(now, &self.params)? {
                match self
                    .store
                    .save(&stored(&next), loaded.version.as_deref())
                    .await
                {
                    Ok(()) => {
                        tracing::info!(
                            before = set.cas().len(),
                            after = next.cas().len(),
                            "identity CA set rotated"
                        );
                        // Read back what is stored: another replica may have raced us.
                        continue;
                    }
                    Err(StoreError::Conflict) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            self.store.publish_bundle(&set.bundle_pem(now)).await?;
            self.current.store(Arc::new(set));
            return Ok(());
        }
        Err(StoreError::Conflict.into())
    }

    /// Reconciles whenever the set may change (and at least every 5 min) until
    /// `shutdown` completes; failures are logged and retried with backoff.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut failures = 0u32;
        loop {
            let pause = if failures > 0 {
                (MIN_PAUSE * 2u32.saturating_pow(failures.min(8))).min(MAX_PAUSE)
            } else {
                let now = self.clock.now();
                self.cas()
                    .next_change(now, &self.params)
                    .map_or(MIN_PAUSE, |t| {
                        t.duration_since(now).unwrap_or(Duration::ZERO)
                    })
                    .clamp(MIN_PAUSE, MAX_PAUSE)
            };
            tokio::select! {
                () = &mut shutdown => return,
                () = tokio::time::sleep(pause) => {}
            }
            match self.reconcile().await {
                Ok(()) => failures = 0,
                Err(error) => {
                    failures = failures.saturating_add(1);
                    tracing::warn!(%error, failures, "identity CA reconcile failed");
                }
            }
        }
    }
}

fn stored(set: &CaSet) -> Vec<StoredCa> {
    set.cas()
        .iter()
        .map(|c| StoredCa {
            cert_pem: c.cert_pem().to_owned(),
            key_pem: c.key_pem().to_owned(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::clock::ManualClock;
    use crate::identity::store::MemoryCaStore;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    fn params() -> CaParams {
        CaParams {
            ca_lifetime: 100 * DAY,
            overlap: 10 * DAY,
            publish_lead: Duration::from_secs(3600),
            leaf_lifetime: DAY,
        }
    }

    #[tokio::test]
    async fn creates_persists_rotates_and_publishes_the_bundle() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let clock = ManualClock::new(start);
        let store = Arc::new(MemoryCaStore::new());
        let first = Authority::start(store.clone(), Arc::new(clock.clone()), params())
            .await
            .unwrap();
        let a = first.cas().cas()[0].cert_pem().to_owned();
        assert_eq!(store.bundle().as_deref(), Some(a.as_str()));

        // A restart (or another replica) reuses the stored CA.
        let second = Authority::start(store.clone(), Arc::new(clock.clone()), params())
            .await
            .unwrap();
        assert_eq!(second.cas().cas()[0].cert_pem(), a);

        // Rotation time: both CAs stored and published.
        clock.advance(90 * DAY);
        first.reconcile().await.unwrap();
        let bundle = store.bundle().unwrap();
        assert_eq!(bundle.matches("BEGIN CERTIFICATE").count(), 2);
        assert!(bundle.starts_with(&a));
        // The other instance sees the same set on its next pass.
        second.reconcile().await.unwrap();
        assert_eq!(second.cas().cas().len(), 2);
        assert_eq!(store.load().await.unwrap().cas.len(), 2);

        // Past A's expiry: A is gone everywhere.
        clock.advance(11 * DAY);
        second.reconcile().await.unwrap();
        let bundle = store.bundle().unwrap();
        assert_eq!(bundle.matches("BEGIN CERTIFICATE").count(), 1);
        assert!(!bundle.contains(&a));
        assert_eq!(store.load().await.unwrap().cas.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_run_loop_rotates_when_due_and_stops_on_shutdown() {
        let clock = ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000));
        let store = Arc::new(MemoryCaStore::new());
        let authority = Authority::start(store.clone(), Arc::new(clock.clone()), params())
            .await
            .unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = Arc::clone(&authority);
        let task = tokio::spawn(async move {
            running
                .run(async {
                    let _ = stopped.await;
                })
                .await;
        });
        clock.advance(90 * DAY);
        // The loop re-checks at least every MAX_PAUSE (paused time advances by itself).
        tokio::time::sleep(MAX_PAUSE + Duration::from_secs(1)).await;
        assert_eq!(store.load().await.unwrap().cas.len(), 2);
        assert_eq!(authority.cas().cas().len(), 2);
        stop.send(()).unwrap();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn invalid_params_are_refused_before_touching_the_store() {
        let store = Arc::new(MemoryCaStore::new());
        let bad = CaParams {
            overlap: Duration::ZERO,
            ..params()
        };
        let err = Authority::start(store.clone(), Arc::new(crate::identity::SystemClock), bad)
            .await
            .unwrap_err();
        assert!(
            matches!(err, AuthorityError::Ca(CaError::Params(_))),
            "{err}"
        );
        assert!(store.load().await.unwrap().cas.is_empty());
    }
}
