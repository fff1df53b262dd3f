//! Proxy selection within one routing's precomputed candidates: round-robin,
//! least-active and power-of-two-choices, each falling back to a full scan so a
//! request is refused only when no candidate is usable and has room. Returns a
//! [`Reservation`]: capacity is taken in the same step as the choice.
//!
//! Hot path: no locks, no allocation, atomics only.

mod rng;

use std::sync::atomic::Ordering;

use crate::capacity::Reservation;
use crate::snapshot::{CompiledRouting, LiveSnapshot, ProxyId, Strategy};

/// Up to this many candidates least-active compares exactly; beyond it, a window of
/// this size starting at a rotating offset (so one pick stays O(1)).
pub const LEAST_ACTIVE_WINDOW: usize = 16;

/// A chosen proxy with a Reserved slot on it.
#[derive(Debug)]
pub struct Choice {
    /// Index into [`LiveSnapshot::proxies`].
    pub idx: u32,
    /// The slot.
    pub reservation: Reservation,
}

/// Picks a proxy for `routing`: usable at `now_ms`, not in `exclude`, with room.
pub fn pick(
    snap: &LiveSnapshot,
    routing: &CompiledRouting,
    now_ms: u64,
    exclude: &[ProxyId],
) -> Option<Choice> {
    let n = routing.candidates.len();
    if n == 0 {
        return None;
    }
    let first = match routing.spec.strategy {
        Strategy::RoundRobin => None,
        Strategy::LeastActive => least_active(snap, routing, now_ms, exclude),
        Strategy::PowerOfTwoChoices => two_choices(snap, routing, now_ms, exclude),
    };
    first.or_else(|| {
        let start = routing.cursor.fetch_add(1, Ordering::Relaxed);
        scan(snap, routing, start, now_ms, exclude)
    })
}

/// Tries `idx`: usable, not excluded, and a slot could be reserved.
pub fn try_take(snap: &LiveSnapshot, idx: u32, now_ms: u64, exclude: &[ProxyId]) -> Option<Choice> {
    let entry = snap.proxies.get(idx as usize)?;
    if now_ms >= entry.usable_until_ms || is_excluded(&entry.id, exclude) {
        return None;
    }
    entry
        .state
        .try_reserve()
        .map(|reservation| Choice { idx, reservation })
}

fn is_excluded(id: &ProxyId, exclude: &[ProxyId]) -> bool {
    !exclude.is_empty() && exclude.contains(id)
}

/// Every candidate once, from `start` on.
fn scan(
    snap: &LiveSnapshot,
    routing: &CompiledRouting,
    start: usize,
    now_ms: u64,
    exclude: &[ProxyId],
) -> Option<Choice> {
    let cands = &routing.candidates;
    let n = cands.len();
    let start = start % n;
    cands[start..]
        .iter()
        .chain(&cands[..start])
        .find_map(|&idx| try_take(snap, idx, now_ms, exclude))
}

fn usable_load(snap: &LiveSnapshot, idx: u32, now_ms: u64, exclude: &[ProxyId]) -> Option<u32> {
    let entry = snap.proxies.get(idx as usize)?;
    let state = &entry.state;
    (now_ms < entry.usable_until_ms && state.has_room() && !is_excluded(&entry.id, exclude))
        .then(|| state.load())
}

fn least_active(
    snap: &LiveSnapshot,
    routing: &CompiledRouting,
    now_ms: u64,
    exclude: &[ProxyId],
) -> Option<Choice> {
    let cands = &routing.candidates;
    let n = cands.len();
    let (start, len) = if n <= LEAST_ACTIVE_WINDOW {
        (0, n)
    } else {
        (
            routing.cursor.fetch_add(1, Ordering::Relaxed) % n,
            LEAST_ACTIVE_WINDOW,
        )
    };
    let mut best: Option<(u32, u32)> = None;
    for i in 0..len {
        let idx = cands[(start + i) % n];
        if let Some(load) = usable_load(snap, idx, now_ms, exclude)
            && best.is_none_or(|(_, b)| load < b)
        {
            best = Some((idx, load));
            if load == 0 {
                break;
            }
        }
    }
    best.and_then(|(idx, _)| try_take(snap, idx, now_ms, exclude))
}

fn two_choices(
    snap: &LiveSnapshot,
    routing: &CompiledRouting,
    now_ms: u64,
    exclude: &[ProxyId],
) -> Option<Choice> {
    let cands = &routing.candidates;
    let n = cands.len();
    if n == 1 {
        return try_take(snap, cands[0], now_ms, exclude);
    }
    let (a, b) = rng::two_distinct(n);
    let score = |idx: u32| {
        usable_load(snap, idx, now_ms, exclude).map(|load| {
            let latency = snap.proxies[idx as usize].state.latency_us();
            (u64::from(load) + 1) * u64::from(latency)
        })
    };
    let (ia, ib) = (cands[a], cands[b]);
    let order = match (score(ia), score(ib)) {
        (Some(sa), Some(sb)) if sb < sa => [ib, ia],
        (Some(_), _) => [ia, ib],
        (None, Some(_)) => [ib, ia],
        (None, None) => return None,
    };
    order
        .into_iter()
        .find_map(|idx| try_take(snap, idx, now_ms, exclude))
}

#[cfg(test)]
mod tests;
