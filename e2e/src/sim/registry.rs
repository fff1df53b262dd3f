//! The set of live simulated proxies: admission against the live cap, egress
//! address leases, lookup by ID. Owns bookkeeping only; the proxy tasks own their
//! sockets and remove themselves when they end.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::egress::EgressPool;
use super::error::SimError;
use super::failure::{FailureMode, Switch};
use super::model::{ProxyStatus, SimProxy};

/// One live proxy's shared state (read by its connection tasks and the control API).
#[derive(Debug)]
pub(crate) struct ProxyState {
    pub(crate) info: SimProxy,
    pub(crate) egress_ip: Ipv4Addr,
    pub(crate) failure: Switch<FailureMode>,
    /// One permit per concurrent client connection.
    pub(crate) conn_limit: Arc<Semaphore>,
    pub(crate) max_connections: usize,
    /// Cancelled at expiry or shutdown: closes the listener and every open tunnel.
    pub(crate) token: CancellationToken,
}

impl ProxyState {
    pub(crate) fn status(&self) -> ProxyStatus {
        ProxyStatus {
            proxy: self.info.clone(),
            egress_ip: self.egress_ip,
            failure: self.failure.get(),
            active_connections: self
                .max_connections
                .saturating_sub(self.conn_limit.available_permits()),
        }
    }
}

/// Live proxies by ID. A mutex, not a lock-free map: every operation is a short
/// map or set update, never held across `.await`, and proxies are created at
/// vendor-API rates, not per request.
#[derive(Debug)]
pub(crate) struct Registry {
    max_live: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    live: BTreeMap<String, Arc<ProxyState>>,
    /// Admitted but not yet inserted (listener being bound).
    pending: usize,
    egress: EgressPool,
}

impl Registry {
    pub(crate) fn new(max_live: usize, egress: EgressPool) -> Self {
        Self {
            max_live,
            inner: Mutex::new(Inner {
                live: BTreeMap::new(),
                pending: 0,
                egress,
            }),
        }
    }

    /// Reserves room for one proxy and leases its egress address.
    pub(crate) fn admit(&self) -> Result<Ipv4Addr, SimError> {
        let mut inner = self.inner.lock();
        let full = SimError::PoolFull { max: self.max_live };
        if inner.live.len() + inner.pending >= self.max_live {
            return Err(full);
        }
        let ip = inner.egress.allocate().ok_or(full)?;
        inner.pending += 1;
        Ok(ip)
    }

    /// Undoes [`Registry::admit`] when the proxy could not be started.
    pub(crate) fn abandon(&self, ip: Ipv4Addr) {
        let mut inner = self.inner.lock();
        inner.pending = inner.pending.saturating_sub(1);
        inner.egress.release(ip);
    }

    /// Turns an admission into a live entry.
    pub(crate) fn insert(&self, state: Arc<ProxyState>) {
        let mut inner = self.inner.lock();
        inner.pending = inner.pending.saturating_sub(1);
        inner.live.insert(state.info.id.clone(), state);
    }

    /// Forgets a proxy and returns its egress address to the pool.
    pub(crate) fn remove(&self, id: &str) {
        let mut inner = self.inner.lock();
        if let Some(state) = inner.live.remove(id) {
            inner.egress.release(state.egress_ip);
        }
    }

    /// Ends a proxy now: closes its listener and tunnels and forgets it.
    pub(crate) fn expire(&self, id: &str) -> Result<(), SimError> {
        self.get(id)?.token.cancel();
        self.remove(id);
        Ok(())
    }

    pub(crate) fn get(&self, id: &str) -> Result<Arc<ProxyState>, SimError> {
        self.inner
            .lock()
            .live
            .get(id)
            .cloned()
            .ok_or_else(|| SimError::UnknownProxy(id.to_owned()))
    }

    /// Live proxies in creation order.
    pub(crate) fn list(&self) -> Vec<Arc<ProxyState>> {
        self.inner.lock().live.values().cloned().collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.inner.lock().live.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry(max: usize) -> Registry {
        Registry::new(
            max,
            EgressPool::new(
                Ipv4Addr::new(127, 0, 0, 2),
                Ipv4Addr::new(127, 0, 0, 254),
                Ipv4Addr::LOCALHOST,
            ),
        )
    }

    #[test]
    fn admission_respects_the_live_cap() {
        let reg = registry(2);
        let a = reg.admit().unwrap();
        let b = reg.admit().unwrap();
        assert_ne!(a, b);
        assert!(matches!(reg.admit(), Err(SimError::PoolFull { max: 2 })));
        reg.abandon(b);
        assert!(reg.admit().is_ok());
    }

    #[test]
    fn unknown_ids_are_reported() {
        let reg = registry(1);
        assert!(matches!(reg.get("nope"), Err(SimError::UnknownProxy(_))));
        assert_eq!(reg.len(), 0);
    }
}
