//! Per-client limits (a DistributionClient's `gatewayLimits`, from the clients file):
//! concurrent connections, request rate and the daily byte quota, each enforced at this
//! gateway's share of the client's fleet-wide budget.
//!
//! - **Share**: `ceil(budget / group_gateways)` ([`GatewayLimits::share`]), with the group's
//!   gateway count from the last runtime report's answer (`ClientBudgets`); 1 until the
//!   first answer (the whole budget), kept when an answer does not say.
//! - **Connections**: a counter per client, held by each client connection that served
//!   one of its requests (a kept-alive HTTP connection, a CONNECT tunnel, a SOCKS5
//!   connection) for its life ([`ConnHold`]); a new connection beyond the share is refused.
//! - **Rate**: GCRA on one `AtomicU64` (the theoretical arrival time): the share of
//!   `requestsPerSecond`, bursts up to the share of `burst`. Lock-free.
//! - **Quota**: a flag per client, set while the controller's last answer lists the client
//!   in `quota_exhausted_clients` (the controller sums every gateway's metered bytes).
//!
//! The state of a client lives as long as the client is in the clients file: a snapshot
//! rebuild (or a new clients file) updates its limits in place, so connection counts held
//! by live connections stay consistent. Hot path: a few relaxed atomic loads per request;
//! one `fetch_add` per new connection; one compare-and-swap per rate-limited request.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use proxy_pool_api::client_limits::GatewayLimits;
use proxy_pool_api::controlplane::pb;

/// Which limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    /// Concurrent connections at the share.
    Connections,
    /// Request rate above the share.
    Rate,
    /// The daily byte quota is used up.
    Quota,
}

impl LimitKind {
    /// Every kind, in label order.
    pub const ALL: [LimitKind; 3] = [Self::Connections, Self::Rate, Self::Quota];

    /// The reason (`X-Proxy-Pool-Error`, metric label).
    pub const fn reason(self) -> &'static str {
        match self {
            Self::Connections => "client-connection-limit",
            Self::Rate => "client-rate-limit",
            Self::Quota => "quota-exceeded",
        }
    }
}

const NO_LIMIT: u64 = u64::MAX;

/// One client's live limit state.
#[derive(Debug)]
pub struct ClientState {
    name: Arc<str>,
    /// The fleet-wide limits (re-shared when the group's gateway count changes).
    fleet: Mutex<GatewayLimits>,
    /// Local share of connections ([`NO_LIMIT`]: none).
    max_connections: AtomicU64,
    /// Nanoseconds per request at the local rate (0: no rate limit).
    emission_ns: AtomicU64,
    /// How far ahead of now the arrival time may run: burst × emission.
    tolerance_ns: AtomicU64,
    /// Connections holding a slot now.
    connections: AtomicU64,
    /// GCRA theoretical arrival time, nanoseconds since `base`.
    tat: AtomicU64,
    exhausted: AtomicBool,
    base: Instant,
}

impl ClientState {
    fn new(name: Arc<str>, base: Instant) -> Self {
        Self {
            name,
            fleet: Mutex::new(GatewayLimits::default()),
            max_connections: AtomicU64::new(NO_LIMIT),
            emission_ns: AtomicU64::new(0),
            tolerance_ns: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            tat: AtomicU64::new(0),
            exhausted: AtomicBool::new(false),
            base,
        }
    }

    /// The client's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The client's name, shared.
    pub(crate) fn name_arc(&self) -> Arc<str> {
        Arc::clone(&self.name)
    }

    /// Connections holding one of the client's slots now.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Whether the controller reported the daily quota used up.
    pub fn quota_exhausted(&self) -> bool {
        self.exhausted.load(Ordering::Relaxed)
    }

    /// Sets the fleet-wide limits and this gateway's share of them.
    fn set_limits(&self, limits: GatewayLimits, gateways: u32) {
        *self.fleet.lock() = limits;
        let share = limits.share(gateways);
        self.max_connections
            .store(share.max_connections.unwrap_or(NO_LIMIT), Ordering::Relaxed);
        let emission = share
            .requests_per_second
            .map_or(0, |r| 1_000_000_000 / r.max(1));
        let burst = share.burst.unwrap_or(1);
        self.emission_ns.store(emission, Ordering::Relaxed);
        self.tolerance_ns
            .store(emission.saturating_mul(burst), Ordering::Relaxed);
    }

    fn reshare(&self, gateways: u32) {
        let limits = *self.fleet.lock();
        self.set_limits(limits, gateways);
    }

    /// Admits one request of this client on a connection that holds this client's slot
    /// already (`held`) or not: the quota, then a connection slot (returned, to be held
    /// by the connection), then a rate token.
    pub fn admit(self: &Arc<Self>, held: bool) -> Result<Option<ConnHold>, LimitKind> {
        if self.exhausted.load(Ordering::Relaxed) {
            return Err(LimitKind::Quota);
        }
        let hold = if held {
            None
        } else {
            let max = self.max_connections.load(Ordering::Relaxed);
            let before = self.connections.fetch_add(1, Ordering::Relaxed);
            let hold = ConnHold(Arc::clone(self));
            if before >= max {
                return Err(LimitKind::Connections);
            }
            Some(hold)
        };
        self.take_token()?;
        Ok(hold)
    }

    /// GCRA: admits when the arrival time, pushed one emission interval on, stays within
    /// the tolerance of now.
    fn take_token(&self) -> Result<(), LimitKind> {
        let emission = self.emission_ns.load(Ordering::Relaxed);
        if emission == 0 {
            return Ok(());
        }
        let tolerance = self.tolerance_ns.load(Ordering::Relaxed);
        let now = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            let next = tat.max(now).saturating_add(emission);
            if next - now > tolerance {
                return Err(LimitKind::Rate);
            }
            match self
                .tat
                .compare_exchange_weak(tat, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(seen) => tat = seen,
            }
        }
    }
}

/// One of a client's connection slots, released when dropped (a clone is another slot).
#[derive(Debug)]
pub struct ConnHold(Arc<ClientState>);

impl ConnHold {
    /// The client holding the slot.
    pub fn client(&self) -> &ClientState {
        &self.0
    }
}

impl Clone for ConnHold {
    fn clone(&self) -> Self {
        self.0.connections.fetch_add(1, Ordering::Relaxed);
        Self(Arc::clone(&self.0))
    }
}

impl Drop for ConnHold {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Every client's state, by client name; shared by snapshot builds (which resolve it) and
/// the control-plane agent (which applies the report answers).
#[derive(Debug)]
pub struct ClientStates {
    clients: Mutex<HashMap<Arc<str>, Arc<ClientState>>>,
    gateways: AtomicU32,
    /// Clients the last answer listed as out of quota (applied to clients added later).
    exhausted: Mutex<Vec<String>>,
    base: Instant,
}

impl Default for ClientStates {
    fn default() -> Self {
        Self {
            clients: Mutex::default(),
            gateways: AtomicU32::new(1),
            exhausted: Mutex::default(),
            base: Instant::now(),
        }
    }
}

impl ClientStates {
    /// The states of `clients` (name, limits), created or updated in place; clients no
    /// longer listed are forgotten (connections still holding their slots release them
    /// on their own).
    pub fn resolve<'a>(
        &self,
        clients: impl IntoIterator<Item = (&'a str, Option<GatewayLimits>)>,
    ) -> HashMap<Arc<str>, Arc<ClientState>> {
        let gateways = self.gateways.load(Ordering::Relaxed);
        let exhausted = self.exhausted.lock().clone();
        let mut map = self.clients.lock();
        let mut next: HashMap<Arc<str>, Arc<ClientState>> = HashMap::new();
        for (name, limits) in clients {
            if let Some(state) = next.get(name) {
                // Several credentials of one client share its state (and its limits:
                // the clients file loader refuses differing ones).
                state.set_limits(limits.unwrap_or_default(), gateways);
                continue;
            }
            let state = match map.get(name) {
                Some(state) => Arc::clone(state),
                None => {
                    let state = Arc::new(ClientState::new(Arc::from(name), self.base));
                    let out = exhausted.iter().any(|c| c == name);
                    state.exhausted.store(out, Ordering::Relaxed);
                    state
                }
            };
            state.set_limits(limits.unwrap_or_default(), gateways);
            next.insert(Arc::clone(&state.name), state);
        }
        *map = next.clone();
        next
    }

    /// Applies a runtime report's answer: the group's gateway count (kept when absent or
    /// 0) and the clients out of daily quota (exactly those listed).
    pub fn apply(&self, budgets: Option<&pb::ClientBudgets>) {
        let Some(budgets) = budgets else {
            return;
        };
        let map = self.clients.lock();
        if budgets.group_gateways > 0 {
            let before = self
                .gateways
                .swap(budgets.group_gateways, Ordering::Relaxed);
            if before != budgets.group_gateways {
                for state in map.values() {
                    state.reshare(budgets.group_gateways);
                }
            }
        }
        let listed = &budgets.quota_exhausted_clients;
        for state in map.values() {
            let out = listed.iter().any(|c| *c == *state.name);
            state.exhausted.store(out, Ordering::Relaxed);
        }
        *self.exhausted.lock() = listed.clone();
    }

    /// The group's gateway count this gateway shares budgets by.
    pub fn group_gateways(&self) -> u32 {
        self.gateways.load(Ordering::Relaxed)
    }

    /// A client's state, by name.
    pub fn get(&self, name: &str) -> Option<Arc<ClientState>> {
        self.clients.lock().get(name).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroU32;

    fn limits(conns: Option<u32>, rps: Option<u32>, burst: Option<u32>) -> GatewayLimits {
        GatewayLimits {
            max_connections: conns.and_then(NonZeroU32::new),
            requests_per_second: rps.and_then(NonZeroU32::new),
            burst: burst.and_then(NonZeroU32::new),
            daily_bytes: None,
        }
    }

    fn state(states: &ClientStates, l: GatewayLimits) -> Arc<ClientState> {
        states.resolve([("team", Some(l))])["team"].clone()
    }

    #[test]
    fn connections_are_held_and_released_and_shared_by_the_group() {
        let states = ClientStates::default();
        let s = state(&states, limits(Some(4), None, None));
        let holds: Vec<_> = (0..4).map(|_| s.admit(false).expect("room")).collect();
        assert_eq!(s.admit(false).err(), Some(LimitKind::Connections));
        assert_eq!(s.connections(), 4, "a refusal holds nothing");
        // A connection already holding a slot is not counted again.
        assert!(matches!(s.admit(true), Ok(None)));
        drop(holds);
        assert_eq!(s.connections(), 0);
        states.apply(Some(&pb::ClientBudgets {
            group_gateways: 2,
            quota_exhausted_clients: Vec::new(),
        }));
        let _a = s.admit(false).expect("room");
        let _b = s.admit(false).expect("room");
        assert_eq!(s.admit(false).err(), Some(LimitKind::Connections));
        // A reload keeps the state (and its count).
        let again = state(&states, limits(Some(4), None, None));
        assert!(Arc::ptr_eq(&s, &again));
        assert_eq!(again.connections(), 2);
        // An answer without a count keeps the last one.
        states.apply(Some(&pb::ClientBudgets::default()));
        assert_eq!(states.group_gateways(), 2);
    }

    #[test]
    fn rate_admits_the_burst_then_refuses() {
        let states = ClientStates::default();
        // 1 request per second: the burst of 5 goes through at once, the 6th does not
        // (a sixth token takes a second to come back).
        let s = state(&states, limits(None, Some(1), Some(5)));
        for i in 0..5 {
            assert!(s.admit(true).is_ok(), "request {i} within the burst");
        }
        assert_eq!(s.admit(true).err(), Some(LimitKind::Rate));
    }

    #[test]
    fn quota_follows_the_last_answer() {
        let states = ClientStates::default();
        let s = state(&states, limits(None, None, None));
        let out = |names: &[&str]| pb::ClientBudgets {
            group_gateways: 0,
            quota_exhausted_clients: names.iter().map(|n| (*n).to_owned()).collect(),
        };
        states.apply(Some(&out(&["team"])));
        assert_eq!(s.admit(true).err(), Some(LimitKind::Quota));
        states.apply(None);
        assert!(s.quota_exhausted(), "no answer field: kept");
        states.apply(Some(&out(&[])));
        assert!(s.admit(true).is_ok());
    }
}
