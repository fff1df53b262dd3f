//! Proxy selection within one routing's precomputed candidates: round-robin,
//! least-active and power-of-two-choices, each falling back to a full scan so a
//! request is refused only when no candidate is usable and has room. Returns a
//! [`Slot`] on the chosen proxy's counters, borrowed from the candidate set: capacity is
//! taken in the same step as the choice, with no reference count touched.
//!
//! Hot path: no locks, no allocation, atomics only; it reads the routing's
//! contiguous candidate array and each candidate's counters, nothing else.

mod rng;

use crate::capacity::Slot;
use crate::snapshot::{Candidate, Candidates, CompiledRouting, LiveSnapshot, ProxyId};
use proxy_pool_api::controlplane::model::Strategy;

/// Up to this many candidates least-active compares exactly; beyond it, a window of
/// this size starting at a rotating offset (so one pick stays O(1)).
pub const LEAST_ACTIVE_WINDOW: usize = 16;

/// Up to this many candidates power-of-two-choices draws its two from all of them;
/// beyond it, from a window of this size at a rotating offset (the cursor round robin
/// uses), which moves by one candidate per pick and is warmed ahead ([`warm`]): the two
/// draws then find their candidates and counters in cache, where two draws over a large
/// set cost up to four cache misses (125–340 ns a pick on a 100,000-proxy snapshot,
/// against 15–20 ns for least active). The draws stay independent of load (the list is
/// ordered by proxy index), and every candidate passes through the window once per
/// cycle of the cursor.
pub const TWO_CHOICES_WINDOW: usize = 64;

/// A chosen proxy with a Reserved slot on it (borrowed from the candidates it was
/// picked among; [`Slot::keep`] makes it owned).
#[derive(Debug)]
pub struct Choice<'a> {
    /// Index into [`LiveSnapshot::proxies`].
    pub idx: u32,
    /// The slot.
    pub slot: Slot<'a>,
}

/// Picks a proxy for `routing` among all its candidates: usable at `now_ms`, not in
/// `exclude`, with room. (`_snap` is the snapshot the routing belongs to; selection
/// needs only the routing.)
pub fn pick<'a>(
    _snap: &LiveSnapshot,
    routing: &'a CompiledRouting,
    now_ms: u64,
    exclude: &[ProxyId],
) -> Option<Choice<'a>> {
    pick_in(routing.all().view(), routing.spec.strategy, now_ms, exclude)
}

/// Picks a proxy in `set` (a routing's candidates, or a selection within them) with
/// `strategy`.
pub fn pick_in<'a>(
    set: Candidates<'a>,
    strategy: Strategy,
    now_ms: u64,
    exclude: &[ProxyId],
) -> Option<Choice<'a>> {
    if set.is_empty() {
        return None;
    }
    let first = match strategy {
        Strategy::RoundRobin => None,
        Strategy::LeastActive => least_active(set, now_ms, exclude),
        Strategy::PowerOfTwoChoices => two_choices(set, now_ms, exclude),
    };
    first.or_else(|| scan(set, set.next_start(), now_ms, exclude))
}

/// Reads the counters of candidate `at` (modulo the set's size; below twice it) and
/// drops the value: a load issued now, while this pick works, so that the picks that
/// draw the candidate later (power-of-two-choices' window takes it in next) find it and
/// its counters in cache. Without it a draw costs a cache miss or two whenever the
/// counters lie scattered in the heap (created as proxies arrived); with it those misses
/// overlap with the picks instead of adding to them (`select_100k_by_params/
/// power_of_two/country` 160–190 → 62–79 ns). Round robin and least active do not
/// need it: they walk the list in order, which the hardware prefetches.
#[inline]
fn warm(set: Candidates<'_>, at: usize) {
    if let Some(c) = set.get(wrap(at, set.len())) {
        std::hint::black_box(c.state.load());
    }
}

/// `i` modulo `n` for `i` below `2 n` (a start below `n` plus an offset below `n`): a
/// compare, not a division — a round-robin pick, a least-active window and a
/// power-of-two draw all step through the list from a rotating start this way.
#[inline]
fn wrap(i: usize, n: usize) -> usize {
    if i >= n { i - n } else { i }
}

/// Tries one candidate: usable, not excluded, and a slot could be reserved.
#[inline]
pub fn try_take<'a>(c: &'a Candidate, now_ms: u64, exclude: &[ProxyId]) -> Option<Choice<'a>> {
    if now_ms >= c.usable_until_ms || is_excluded(c, exclude) {
        return None;
    }
    c.state.try_take().map(|slot| Choice { idx: c.idx, slot })
}

fn is_excluded(c: &Candidate, exclude: &[ProxyId]) -> bool {
    !exclude.is_empty() && exclude.contains(c.state.id())
}

/// Every candidate once, from `start` (below the number of candidates) on.
fn scan<'a>(
    set: Candidates<'a>,
    start: usize,
    now_ms: u64,
    exclude: &[ProxyId],
) -> Option<Choice<'a>> {
    // An index loop, not `(start..n).chain(0..start)`: a round-robin pick almost
    // always ends at `start`, and the chained iterator's set-up and state checks cost
    // more than the pick itself (`select_100k/round_robin` 32–38 → 14–18 ns).
    let n = set.len();
    let start = if start < n { start } else { 0 };
    (0..n).find_map(|k| {
        set.get(wrap(start + k, n))
            .and_then(|c| try_take(c, now_ms, exclude))
    })
}

/// Current load of a candidate that could take work, else `None`.
fn usable_load(c: &Candidate, now_ms: u64, exclude: &[ProxyId]) -> Option<u32> {
    (now_ms < c.usable_until_ms && c.state.has_room() && !is_excluded(c, exclude))
        .then(|| c.state.load())
}

fn least_active<'a>(set: Candidates<'a>, now_ms: u64, exclude: &[ProxyId]) -> Option<Choice<'a>> {
    let n = set.len();
    let (start, len) = if n <= LEAST_ACTIVE_WINDOW {
        (0, n)
    } else {
        (set.next_start(), LEAST_ACTIVE_WINDOW)
    };
    let mut best: Option<(&'a Candidate, u32)> = None;
    // The window wraps by a compare, not `% n` (a division per candidate).
    let start = if start < n { start } else { 0 };
    for k in 0..len {
        if let Some(c) = set.get(wrap(start + k, n))
            && let Some(load) = usable_load(c, now_ms, exclude)
            && best.is_none_or(|(_, b)| load < b)
        {
            best = Some((c, load));
            if load == 0 {
                break;
            }
        }
    }
    best.and_then(|(c, _)| try_take(c, now_ms, exclude))
}

fn two_choices<'a>(set: Candidates<'a>, now_ms: u64, exclude: &[ProxyId]) -> Option<Choice<'a>> {
    let n = set.len();
    if n == 1 {
        return set.get(0).and_then(|c| try_take(c, now_ms, exclude));
    }
    let (a, b) = if n <= TWO_CHOICES_WINDOW {
        rng::two_distinct(n)
    } else {
        // Two distinct candidates of the window at the rotating offset.
        let start = set.next_start();
        let (a, b) = rng::two_distinct(TWO_CHOICES_WINDOW);
        warm(set, start + TWO_CHOICES_WINDOW);
        (wrap(start + a, n), wrap(start + b, n))
    };
    let (Some(ca), Some(cb)) = (set.get(a), set.get(b)) else {
        return None;
    };
    let score = |c: &Candidate| {
        usable_load(c, now_ms, exclude)
            .map(|load| (u64::from(load) + 1) * u64::from(c.state.latency_us()))
    };
    let order = match (score(ca), score(cb)) {
        (Some(sa), Some(sb)) if sb < sa => [cb, ca],
        (Some(_), _) => [ca, cb],
        (None, Some(_)) => [cb, ca],
        (None, None) => return None,
    };
    order.into_iter().find_map(|c| try_take(c, now_ms, exclude))
}

#[cfg(test)]
mod tests;
