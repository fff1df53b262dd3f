//! Publishing snapshots: [`SnapshotHandle`] builds a [`LiveSnapshot`] off the hot path
//! and swaps it in with one atomic pointer store (`arc-swap`); requests do one atomic
//! load. [`SnapshotSource`] is the seam a control-plane client (or a test) feeds.

use crate::limits::ClientStates;
use arc_swap::{ArcSwapOption, Guard};
use parking_lot::Mutex;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::live::{LiveSnapshot, SnapshotError};
use super::{ProxyId, SnapshotInput};
use crate::capacity::{CapacityRegistry, RuntimeCounts};
use crate::clock::now_ms;
use crate::metrics::Breakdown;
use std::sync::atomic::{AtomicU64, Ordering};

/// The current snapshot, shared by every listener task.
#[derive(Debug, Clone)]
pub struct SnapshotHandle {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    current: ArcSwapOption<LiveSnapshot>,
    /// Serialises builds (a build reads and updates the registry); never taken on
    /// the request path.
    registry: Mutex<()>,
    capacity: CapacityRegistry,
    /// Per-Routing and per-upstream counters, resolved into each snapshot built.
    breakdown: Breakdown,
    /// Per-client limit state, resolved into each snapshot built.
    clients: Arc<ClientStates>,
    /// Unix ms when the control plane last delivered or confirmed the snapshot; 0
    /// before the first.
    fresh_at_ms: AtomicU64,
    /// Milliseconds; set by the control plane at registration.
    max_stale_age_ms: AtomicU64,
    /// A new control-plane session began: its first snapshot is installed whatever
    /// its (epoch, version) (a restarted controller numbers afresh).
    new_session: std::sync::atomic::AtomicBool,
}

impl SnapshotHandle {
    /// An empty handle: every request is refused until a snapshot is installed.
    pub fn new(max_stale_age: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                current: ArcSwapOption::empty(),
                registry: Mutex::new(()),
                capacity: CapacityRegistry::default(),
                breakdown: Breakdown::default(),
                clients: Arc::default(),
                fresh_at_ms: AtomicU64::new(0),
                max_stale_age_ms: AtomicU64::new(duration_ms(max_stale_age)),
                new_session: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// Validates, compiles and publishes `input`. It stays usable until
    /// `min(valid_until, now + max_stale_age)` unless refreshed.
    pub fn install(&self, input: SnapshotInput) -> Result<Arc<LiveSnapshot>, SnapshotError> {
        let snapshot = &input.snapshot;
        let (version, epoch) = (snapshot.header.version, snapshot.header.ownership_epoch);
        let _build = self.inner.registry.lock();
        let fresh_session = self.inner.new_session.load(Ordering::Acquire);
        if let Some(cur) = self.inner.current.load().as_ref()
            && !fresh_session
            && (epoch, version) < (cur.epoch, cur.version)
        {
            return Err(SnapshotError {
                problems: vec![format!(
                    "version: {version}@{epoch} is older than the installed {}@{}",
                    cur.version, cur.epoch
                )],
            });
        }
        let stale_at = SystemTime::now() + self.max_stale_age();
        let live = Arc::new(LiveSnapshot::build_with(
            input,
            &self.inner.capacity,
            &self.inner.breakdown,
            &self.inner.clients,
            stale_at,
        )?);
        self.inner.current.store(Some(live.clone()));
        self.inner.fresh_at_ms.store(now_ms(), Ordering::Relaxed);
        self.inner.new_session.store(false, Ordering::Release);
        debug!(
            version,
            proxies = live.proxies.len(),
            routings = live.routings.len(),
            "snapshot installed"
        );
        Ok(live)
    }

    /// The clients' limit state (the control-plane agent applies report answers to it).
    pub fn clients(&self) -> &Arc<ClientStates> {
        &self.inner.clients
    }

    /// The current snapshot (one atomic load; hold the guard only briefly).
    pub fn load(&self) -> Guard<Option<Arc<LiveSnapshot>>> {
        self.inner.current.load()
    }

    /// A new control-plane session began (the worker registered again, perhaps with a
    /// restarted controller whose versions start afresh): the next snapshot replaces
    /// the current one whatever its (epoch, version). Within a session they only grow.
    pub fn new_session(&self) {
        self.inner.new_session.store(true, Ordering::Release);
    }

    /// Records that the control plane confirmed the current snapshot is still
    /// current (e.g. a heartbeat): its staleness deadline moves forward.
    pub fn confirm_fresh(&self) {
        if let Some(cur) = self.inner.current.load().as_ref() {
            cur.refresh(SystemTime::now() + self.max_stale_age());
            self.inner.fresh_at_ms.store(now_ms(), Ordering::Relaxed);
        }
    }

    /// Unix ms when the control plane last delivered or confirmed the snapshot in
    /// service; `None` before the first.
    pub fn last_fresh_ms(&self) -> Option<u64> {
        match self.inner.fresh_at_ms.load(Ordering::Relaxed) {
            0 => None,
            at => Some(at),
        }
    }

    /// The per-Routing and per-upstream counters snapshots are built with (register
    /// them once, see [`Breakdown::register`]).
    pub fn breakdown(&self) -> &Breakdown {
        &self.inner.breakdown
    }

    /// Changes how long a snapshot stays usable without a newer one (from the next
    /// install or confirmation on).
    pub fn set_max_stale_age(&self, age: Duration) {
        self.inner
            .max_stale_age_ms
            .store(duration_ms(age), Ordering::Relaxed);
    }

    fn max_stale_age(&self) -> Duration {
        Duration::from_millis(self.inner.max_stale_age_ms.load(Ordering::Relaxed))
    }

    /// Stops new work on these proxies now (the controller's `revoke_proxy_ids`); the
    /// next snapshot is authoritative again.
    pub fn revoke(&self, ids: &[ProxyId]) {
        for id in ids {
            self.inner.capacity.close(id);
        }
    }

    /// Draining (or removed) proxies that are still in use: the agent reports as soon
    /// as one of them becomes idle, so the controller can finish its drain.
    pub fn busy_draining(&self) -> Vec<ProxyId> {
        self.inner.capacity.busy_draining()
    }

    /// Active/Reserved counts of every proxy, including removed ones still draining.
    pub fn runtime_report(&self) -> Vec<RuntimeCounts> {
        let _build = self.inner.registry.lock();
        self.inner.capacity.retain(|id| {
            self.inner
                .current
                .load()
                .as_ref()
                .is_some_and(|s| s.index_of(id).is_some())
        });
        self.inner.capacity.report()
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Something that delivers snapshots (the control-plane client, a file, a test).
pub trait SnapshotSource: Send {
    /// The next snapshot; `None` when the source has ended.
    fn next(&mut self) -> impl Future<Output = Option<SnapshotInput>> + Send;
}

/// A source fed through a bounded channel.
#[derive(Debug)]
pub struct ChannelSource(pub mpsc::Receiver<SnapshotInput>);

impl SnapshotSource for ChannelSource {
    async fn next(&mut self) -> Option<SnapshotInput> {
        self.0.recv().await
    }
}

/// Installs every snapshot `source` delivers until it ends or `shutdown` resolves.
pub async fn run_source<S: SnapshotSource>(
    mut source: S,
    handle: SnapshotHandle,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        let next = tokio::select! {
            next = source.next() => next,
            () = &mut shutdown => return,
        };
        let Some(input) = next else {
            info!("snapshot source ended");
            return;
        };
        let version = input.snapshot.header.version;
        if let Err(err) = handle.install(input) {
            warn!(version, error = %err, "snapshot rejected");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::fixture::{self, proxy};
    use proxy_pool_api::controlplane::model::{Credentials, Secret, SnapshotProxy};

    fn snapshot(version: u64, proxies: Vec<SnapshotProxy>) -> SnapshotInput {
        fixture::input(version, vec![fixture::routing("all")], proxies)
    }

    #[test]
    fn install_swaps_and_keeps_counters_across_versions() {
        let handle = SnapshotHandle::new(Duration::from_secs(60));
        let first = handle.install(snapshot(1, vec![proxy("a", 2)])).unwrap();
        let lease = first.proxies[0].state.try_reserve().unwrap().activate();
        let second = handle
            .install(snapshot(2, vec![proxy("b", 1), proxy("a", 2)]))
            .unwrap();
        assert_eq!(second.proxies[1].state.counts(), (1, 0));
        assert_eq!(handle.load().as_ref().unwrap().version, 2);
        // "a" removed: it keeps counting (draining) until the lease ends.
        handle.install(snapshot(3, vec![proxy("b", 1)])).unwrap();
        let report = handle.runtime_report();
        assert!(report.iter().any(|r| r.id.as_str() == "a" && r.active == 1));
        drop(lease);
        let report = handle.runtime_report();
        assert_eq!(report.len(), 1);
        assert!(
            handle.install(snapshot(2, vec![])).is_err(),
            "older version refused"
        );
    }

    #[test]
    fn invalid_snapshots_report_every_problem() {
        let handle = SnapshotHandle::new(Duration::from_secs(60));
        let mut bad = proxy("a", 1);
        bad.dial.credentials = Some(Credentials {
            username: "user:name".into(),
            password: Secret::new("pw"),
        });
        bad.dial.host = "bad host".into();
        let mut s = snapshot(1, vec![bad, proxy("a", 1)]);
        s.snapshot.routings.push(fixture::routing("all"));
        let err = handle.install(s).unwrap_err();
        assert_eq!(err.problems.len(), 4, "{err}");
        assert!(handle.load().is_none());
    }

    #[test]
    fn staleness_uses_the_earlier_of_validity_and_max_stale_age() {
        let handle = SnapshotHandle::new(Duration::from_millis(0));
        let live = handle.install(snapshot(1, vec![])).unwrap();
        assert!(live.is_stale(crate::clock::now_ms()));
        let handle = SnapshotHandle::new(Duration::from_secs(60));
        let mut s = snapshot(1, vec![]);
        s.snapshot.header.valid_until_ms = fixture::unix_ms_in(-1_000);
        let live = handle.install(s).unwrap();
        assert!(live.is_stale(crate::clock::now_ms()));
    }
}
