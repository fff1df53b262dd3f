//! Exact per-proxy capacity: Reserved while the upstream handshake runs, Active for
//! the life of a tunnel or request, both released on every path by RAII guards.
//!
//! One `AtomicU64` per proxy packs `active << 32 | reserved`, so "is there room" and
//! "take a slot" are one compare-and-swap on the sum: the limit can never be
//! overshot, even by racing workers. The state outlives snapshots (the registry hands
//! the same `Arc` to the next snapshot that still lists the proxy), so a proxy that
//! leaves a snapshot keeps its counts until its last guard drops (drain).
//!
//! A pick takes a [`Slot`], borrowing the counters from the snapshot it picked in: the
//! compare-and-swap and the release are its only atomic writes. A request that keeps
//! its slot past that borrow turns it into a [`Reservation`] riding on the `Arc` it
//! holds for the proxy anyway (the snapshot's entry, see [`Counted`]), not on a
//! reference count of its own.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::proxy_id::ProxyId;

const RESERVED_MASK: u64 = 0xFFFF_FFFF;
const ACTIVE_ONE: u64 = 1 << 32;
/// Latency assumed for a proxy nobody has measured yet (microseconds).
pub const DEFAULT_LATENCY_US: u32 = 100_000;

/// Live counters of one upstream proxy.
#[derive(Debug)]
pub struct ProxyState {
    id: ProxyId,
    counts: AtomicU64,
    max: AtomicU32,
    latency_us: AtomicU32,
    /// Assignment epoch of the snapshot that last listed it.
    epoch: AtomicU64,
    /// Draining or removed: no new work, counts reported until zero.
    draining: std::sync::atomic::AtomicBool,
    /// Unix ms from which nothing may go through the proxy (its lease end less
    /// the safety margin, from the snapshot that last listed it); `u64::MAX`: none.
    lease_cut_ms: AtomicU64,
}

/// A point-in-time copy of a proxy's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeCounts {
    /// Proxy ID.
    pub id: ProxyId,
    /// Requests or tunnels using it.
    pub active: u32,
    /// Upstream handshakes in progress.
    pub reserved: u32,
    /// Assignment epoch of the snapshot that last listed it.
    pub assignment_epoch: u64,
    /// Draining (or removed from the snapshot).
    pub draining: bool,
}

impl ProxyState {
    /// A state with zero counts.
    pub fn new(id: ProxyId, max: u32, latency_us: u32) -> Self {
        Self {
            id,
            counts: AtomicU64::new(0),
            max: AtomicU32::new(max),
            latency_us: AtomicU32::new(latency_us.max(1)),
            epoch: AtomicU64::new(0),
            draining: std::sync::atomic::AtomicBool::new(false),
            lease_cut_ms: AtomicU64::new(u64::MAX),
        }
    }

    pub(crate) fn set_assignment(&self, epoch: u64, draining: bool, lease_cut_ms: u64) {
        self.epoch.store(epoch, Ordering::Relaxed);
        self.draining.store(draining, Ordering::Relaxed);
        self.lease_cut_ms.store(lease_cut_ms, Ordering::Relaxed);
    }

    /// Unix ms from which nothing may go through the proxy (`u64::MAX`: no bound).
    pub fn lease_cut_ms(&self) -> u64 {
        self.lease_cut_ms.load(Ordering::Relaxed)
    }

    /// Resolves once the lease cut has passed. Re-reads it after every wake-up (a
    /// later snapshot may extend the lease) and at least every second (a proxy with
    /// no bound yet may get one).
    pub async fn lease_ended(&self) {
        const RECHECK: u64 = 1_000;
        loop {
            let cut = self.lease_cut_ms();
            let now = crate::clock::now_ms();
            if now >= cut {
                return;
            }
            let wait = (cut - now).min(RECHECK);
            tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
        }
    }

    /// The proxy's ID.
    pub fn id(&self) -> &ProxyId {
        &self.id
    }

    /// `(active, reserved)` now.
    pub fn counts(&self) -> (u32, u32) {
        split(self.counts.load(Ordering::Acquire))
    }

    /// Active + reserved.
    pub fn load(&self) -> u32 {
        let (a, r) = self.counts();
        a.saturating_add(r)
    }

    /// Whether a slot is free right now (a hint; only `try_reserve` decides).
    pub fn has_room(&self) -> bool {
        self.load() < self.max.load(Ordering::Relaxed)
    }

    /// Configured maximum concurrency.
    pub fn max(&self) -> u32 {
        self.max.load(Ordering::Relaxed)
    }

    pub(crate) fn set_max(&self, max: u32) {
        self.max.store(max, Ordering::Relaxed);
    }

    /// Smoothed handshake latency in microseconds (never 0).
    pub fn latency_us(&self) -> u32 {
        self.latency_us.load(Ordering::Relaxed)
    }

    /// Folds a new latency sample into the moving average (weight 1/8). Racing
    /// updates may lose a sample; that is fine for a load-balancing score.
    pub fn observe_latency(&self, sample_us: u32) {
        let old = u64::from(self.latency_us());
        let new = (old * 7 + u64::from(sample_us.max(1))) / 8;
        self.latency_us.store(
            u32::try_from(new).unwrap_or(u32::MAX).max(1),
            Ordering::Relaxed,
        );
    }

    /// Takes a Reserved slot if active + reserved < max, as an owned [`Reservation`]
    /// that keeps these counters alive (one `Arc` clone on top of the slot).
    pub fn try_reserve(self: &Arc<Self>) -> Option<Reservation> {
        self.try_take().and_then(|slot| slot.keep(Arc::clone(self)))
    }

    /// Takes a Reserved slot if active + reserved < max, borrowing the counters for
    /// the slot's life: the compare-and-swap is the only write (no reference count).
    #[inline]
    pub fn try_take(&self) -> Option<Slot<'_>> {
        let max = u64::from(self.max.load(Ordering::Relaxed));
        let mut cur = self.counts.load(Ordering::Relaxed);
        loop {
            let (a, r) = split(cur);
            if u64::from(a) + u64::from(r) >= max {
                return None;
            }
            match self.counts.compare_exchange_weak(
                cur,
                cur + 1,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(Slot { state: self }),
                Err(actual) => cur = actual,
            }
        }
    }

    /// A point-in-time copy of the counters.
    pub fn runtime(&self) -> RuntimeCounts {
        let (active, reserved) = self.counts();
        RuntimeCounts {
            id: self.id.clone(),
            active,
            reserved,
            assignment_epoch: self.epoch.load(Ordering::Relaxed),
            draining: self.draining.load(Ordering::Relaxed),
        }
    }
}

fn split(v: u64) -> (u32, u32) {
    ((v >> 32) as u32, (v & RESERVED_MASK) as u32)
}

/// What holds a proxy's counters for an owned slot: the counters themselves, or a
/// snapshot's proxy entry (so a request keeps one `Arc` for its proxy — the entry it
/// dials — and its slot rides on it).
pub trait Counted: Send + Sync + 'static {
    /// The counters the slot is taken on.
    fn counters(&self) -> &ProxyState;
}

impl Counted for ProxyState {
    fn counters(&self) -> &ProxyState {
        self
    }
}

/// A Reserved slot on counters borrowed for the slot's life (a pick within a snapshot
/// the caller holds); released on drop unless kept as a [`Reservation`].
#[derive(Debug)]
#[must_use = "dropping the slot releases it"]
pub struct Slot<'a> {
    state: &'a ProxyState,
}

impl<'a> Slot<'a> {
    /// The counters the slot is on.
    pub fn state(&self) -> &'a ProxyState {
        self.state
    }

    /// The slot as a [`Reservation`] that `owner` keeps alive (no count changes).
    /// `None`, with the slot released, when `owner` holds other counters than the
    /// slot's (a caller's mistake: the slot is never moved to counters it was not
    /// taken on).
    pub fn keep<O: Counted>(self, owner: Arc<O>) -> Option<Reservation<O>> {
        if !std::ptr::eq(owner.counters(), self.state) {
            return None;
        }
        // The slot now belongs to the reservation, which releases it.
        std::mem::forget(self);
        Some(Reservation(Held {
            owner,
            active: false,
        }))
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.state.counts.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A slot and the `Arc` keeping its counters alive; releases it on drop.
#[derive(Debug)]
struct Held<O: Counted> {
    owner: Arc<O>,
    /// Active (else Reserved).
    active: bool,
}

impl<O: Counted> Drop for Held<O> {
    fn drop(&mut self) {
        let one = if self.active { ACTIVE_ONE } else { 1 };
        self.owner
            .counters()
            .counts
            .fetch_sub(one, Ordering::AcqRel);
    }
}

/// A Reserved slot owned past any borrow (the counters kept alive by `O`); released
/// on drop unless turned into an [`ActiveLease`].
#[derive(Debug)]
pub struct Reservation<O: Counted = ProxyState>(Held<O>);

impl<O: Counted> Reservation<O> {
    /// What keeps the slot's counters alive (the proxy it is on).
    pub fn owner(&self) -> &Arc<O> {
        &self.0.owner
    }

    /// Moves the slot from Reserved to Active in one atomic step.
    pub fn activate(self) -> ActiveLease<O> {
        let mut held = self.0;
        // reserved >= 1, so adding 2^32 - 1 is active + 1, reserved - 1.
        held.owner
            .counters()
            .counts
            .fetch_add(ACTIVE_ONE - 1, Ordering::AcqRel);
        held.active = true;
        ActiveLease(held)
    }
}

/// An Active slot, released on drop.
#[derive(Debug)]
pub struct ActiveLease<O: Counted = ProxyState>(Held<O>);

impl<O: Counted> ActiveLease<O> {
    /// What keeps the slot's counters alive (the proxy it is on).
    pub fn owner(&self) -> &Arc<O> {
        &self.0.owner
    }
}

/// Every proxy state this gateway knows: those in the current snapshot and those
/// removed from it that still have counts (draining). Touched only when a snapshot
/// is built and when a runtime report is taken, never per request.
#[derive(Debug, Default)]
pub struct CapacityRegistry {
    states: Mutex<HashMap<ProxyId, Arc<ProxyState>>>,
}

impl CapacityRegistry {
    /// The state for `id`, reused if known, with `max` and a latency hint applied.
    pub fn state_for(&self, id: &ProxyId, max: u32, latency_us: Option<u32>) -> Arc<ProxyState> {
        let mut states = self.states.lock();
        let state = states
            .entry(id.clone())
            .or_insert_with(|| {
                Arc::new(ProxyState::new(
                    id.clone(),
                    max,
                    latency_us.unwrap_or(DEFAULT_LATENCY_US),
                ))
            })
            .clone();
        state.set_max(max);
        state
    }

    /// Forgets states that are neither in `keep` nor busy.
    pub fn retain(&self, keep: impl Fn(&ProxyId) -> bool) {
        self.states
            .lock()
            .retain(|id, state| keep(id) || state.load() > 0);
    }

    /// Counters of every known proxy, including draining ones.
    pub fn report(&self) -> Vec<RuntimeCounts> {
        let mut out: Vec<_> = self.states.lock().values().map(|s| s.runtime()).collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }

    /// Marks a proxy's slots unavailable for new work (its maximum becomes zero);
    /// used for proxies removed from the snapshot.
    pub fn close(&self, id: &ProxyId) {
        if let Some(state) = self.states.lock().get(id) {
            state.set_max(0);
            state.draining.store(true, Ordering::Relaxed);
        }
    }

    /// IDs of draining (or removed) proxies that still have Active or Reserved uses.
    pub fn busy_draining(&self) -> Vec<ProxyId> {
        self.states
            .lock()
            .values()
            .filter(|s| s.draining.load(Ordering::Relaxed) && s.load() > 0)
            .map(|s| s.id.clone())
            .collect()
    }

    /// IDs of proxies known now.
    pub fn ids(&self) -> Vec<ProxyId> {
        self.states.lock().keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(max: u32) -> Arc<ProxyState> {
        Arc::new(ProxyState::new(ProxyId::from("p"), max, 10))
    }

    #[test]
    fn reserve_activate_release() {
        let s = state(2);
        let r1 = s.try_reserve().unwrap();
        let r2 = s.try_reserve().unwrap();
        assert!(s.try_reserve().is_none());
        assert_eq!(s.counts(), (0, 2));
        let a1 = r1.activate();
        assert_eq!(s.counts(), (1, 1));
        drop(r2);
        assert_eq!(s.counts(), (1, 0));
        let r3 = s.try_reserve().unwrap();
        drop(a1);
        assert_eq!(s.counts(), (0, 1));
        drop(r3);
        assert_eq!(s.counts(), (0, 0));
    }

    #[test]
    fn concurrent_reservations_never_exceed_the_limit() {
        let s = state(7);
        let peak = Arc::new(AtomicU32::new(0));
        std::thread::scope(|scope| {
            for _ in 0..8 {
                let s = s.clone();
                let peak = peak.clone();
                scope.spawn(move || {
                    for _ in 0..20_000 {
                        if let Some(r) = s.try_reserve() {
                            let lease = r.activate();
                            peak.fetch_max(s.load(), Ordering::Relaxed);
                            drop(lease);
                        }
                    }
                });
            }
        });
        assert!(peak.load(Ordering::Relaxed) <= 7);
        assert_eq!(s.counts(), (0, 0));
    }

    #[test]
    fn a_borrowed_slot_is_released_on_drop_and_kept_only_by_its_own_counters() {
        let s = state(2);
        let other = state(2);
        let slot = s.try_take().unwrap();
        assert_eq!(s.counts(), (0, 1));
        drop(slot);
        assert_eq!(s.counts(), (0, 0));
        // Kept by an owner of other counters: refused, and the slot released.
        assert!(s.try_take().unwrap().keep(other.clone()).is_none());
        assert_eq!((s.counts(), other.counts()), ((0, 0), (0, 0)));
        // Kept by its own: the count moves with the reservation, then the lease.
        let kept = s.try_take().unwrap().keep(s.clone()).unwrap();
        assert!(Arc::ptr_eq(kept.owner(), &s));
        assert_eq!(s.counts(), (0, 1));
        let lease = kept.activate();
        assert_eq!(s.counts(), (1, 0));
        assert!(Arc::ptr_eq(lease.owner(), &s));
        let _second = s.try_take().unwrap();
        assert!(s.try_take().is_none(), "max 2: one active, one reserved");
        drop(lease);
        assert_eq!(s.counts(), (0, 1));
    }

    #[test]
    fn concurrent_borrowed_slots_never_exceed_the_limit() {
        let s = state(5);
        let peak = AtomicU32::new(0);
        std::thread::scope(|scope| {
            for t in 0..8 {
                let (s, peak) = (&s, &peak);
                scope.spawn(move || {
                    for i in 0..20_000 {
                        if let Some(slot) = s.try_take() {
                            peak.fetch_max(s.load(), Ordering::Relaxed);
                            if (i + t) % 2 == 0 {
                                drop(slot.keep(s.clone()).unwrap().activate());
                            }
                        }
                    }
                });
            }
        });
        assert!(peak.load(Ordering::Relaxed) <= 5);
        assert_eq!(s.counts(), (0, 0));
    }

    #[test]
    fn registry_keeps_busy_states_across_snapshots() {
        let reg = CapacityRegistry::default();
        let id = ProxyId::from("a");
        let s = reg.state_for(&id, 3, None);
        let lease = s.try_reserve().unwrap().activate();
        reg.close(&id);
        reg.retain(|_| false);
        assert_eq!(
            reg.report().len(),
            1,
            "busy proxy kept for the drain report"
        );
        assert!(s.try_reserve().is_none(), "closed proxy takes no new work");
        drop(lease);
        reg.retain(|_| false);
        assert!(reg.report().is_empty());
        assert!(Arc::ptr_eq(
            &reg.state_for(&id, 1, None),
            &reg.state_for(&id, 1, None)
        ));
    }

    #[test]
    fn latency_moves_towards_samples() {
        let s = state(1);
        for _ in 0..64 {
            s.observe_latency(1000);
        }
        assert!((900..=1000).contains(&s.latency_us()));
    }
}

#[cfg(test)]
mod model_tests {
    //! Model test: random sequences of reserve / activate / release / limit changes run
    //! against a plain-integer model; the real counters must agree after every step and
    //! never exceed the limit at the moment a slot was taken.

    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Reserve,
        Activate(usize),
        DropReserved(usize),
        DropActive(usize),
        SetMax(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => Just(Op::Reserve),
            3 => any::<usize>().prop_map(Op::Activate),
            2 => any::<usize>().prop_map(Op::DropReserved),
            2 => any::<usize>().prop_map(Op::DropActive),
            1 => (0u32..6).prop_map(Op::SetMax),
        ]
    }

    proptest! {
        #[test]
        fn counters_follow_the_model(ops in proptest::collection::vec(op(), 1..200)) {
            let state = Arc::new(ProxyState::new(ProxyId::from("p"), 3, 1));
            let mut max = 3u32;
            let mut reserved: Vec<Reservation> = Vec::new();
            let mut active: Vec<ActiveLease> = Vec::new();
            for op in ops {
                match op {
                    Op::Reserve => {
                        let room = ((reserved.len() + active.len()) as u32) < max;
                        match state.try_reserve() {
                            Some(r) => {
                                prop_assert!(room, "reserved past the limit");
                                reserved.push(r);
                            }
                            None => prop_assert!(!room, "refused with room"),
                        }
                    }
                    Op::Activate(i) if !reserved.is_empty() => {
                        let r = reserved.swap_remove(i % reserved.len());
                        active.push(r.activate());
                    }
                    Op::DropReserved(i) if !reserved.is_empty() => {
                        reserved.swap_remove(i % reserved.len());
                    }
                    Op::DropActive(i) if !active.is_empty() => {
                        active.swap_remove(i % active.len());
                    }
                    Op::SetMax(m) => {
                        max = m;
                        state.set_max(m);
                    }
                    _ => {}
                }
                prop_assert_eq!(state.counts(), (active.len() as u32, reserved.len() as u32));
            }
            drop((reserved, active));
            prop_assert_eq!(state.counts(), (0, 0));
        }
    }
}
