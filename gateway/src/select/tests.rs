use super::*;
use crate::capacity::CapacityRegistry;
use crate::clock::now_ms;
use crate::metrics::Breakdown;
use crate::snapshot::fixture;
use proxy_pool_api::controlplane::model::SnapshotProxy;
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

fn proxy(i: usize, max: u32) -> SnapshotProxy {
    let mut p = fixture::proxy(&format!("p{i}"), max);
    p.dial.port = 1000 + i as u16;
    p.labels.region = Some(if i.is_multiple_of(2) { "even" } else { "odd" }.into());
    p
}

pub(crate) fn live(proxies: Vec<SnapshotProxy>, strategy: Strategy) -> LiveSnapshot {
    let mut routing = fixture::routing("all");
    routing.strategy = strategy;
    let snapshot = fixture::input(1, vec![routing], proxies);
    let far = SystemTime::now() + Duration::from_secs(600);
    LiveSnapshot::build(
        snapshot,
        &CapacityRegistry::default(),
        &Breakdown::default(),
        far,
    )
    .unwrap()
}

/// A live snapshot of proxies `p0`… `p{n-1}`, each taking `max` concurrent uses, all
/// candidates of one routing picking by `strategy`.
fn uniform(n: usize, max: u32, strategy: Strategy) -> LiveSnapshot {
    live((0..n).map(|i| proxy(i, max)).collect(), strategy)
}

/// `n` picks from the snapshot's first routing, all held.
fn hold(snap: &LiveSnapshot, n: usize) -> Vec<Choice<'_>> {
    (0..n)
        .map(|_| pick(snap, &snap.routings[0], now_ms(), &[]).unwrap())
        .collect()
}

fn ids(snap: &LiveSnapshot, strategy_picks: usize) -> Vec<String> {
    hold(snap, strategy_picks)
        .iter()
        .map(|c| snap.proxies[c.idx as usize].id.to_string())
        .collect()
}

#[test]
fn round_robin_cycles_through_candidates() {
    let snap = uniform(3, 10, Strategy::RoundRobin);
    assert_eq!(ids(&snap, 6), ["p0", "p1", "p2", "p0", "p1", "p2"]);
}

#[test]
fn full_and_unusable_proxies_are_skipped_and_exhaustion_is_none() {
    let mut ps: Vec<_> = (0..3).map(|i| proxy(i, 1)).collect();
    ps[1].usable_until_ms = fixture::unix_ms_in(-1_000);
    for strategy in [
        Strategy::RoundRobin,
        Strategy::LeastActive,
        Strategy::PowerOfTwoChoices,
    ] {
        let snap = live(ps.clone(), strategy);
        let r = &snap.routings[0];
        let a = pick(&snap, r, now_ms(), &[]).unwrap();
        let b = pick(&snap, r, now_ms(), &[]).unwrap();
        let mut got = [a.idx, b.idx];
        got.sort();
        assert_eq!(got, [0, 2], "{strategy:?}");
        assert!(pick(&snap, r, now_ms(), &[]).is_none(), "{strategy:?}");
        drop(a);
        assert!(pick(&snap, r, now_ms(), &[]).is_some());
    }
}

#[test]
fn excluded_proxies_are_not_picked() {
    let snap = uniform(2, 5, Strategy::PowerOfTwoChoices);
    let exclude = [ProxyId::from("p0")];
    for _ in 0..20 {
        let c = pick(&snap, &snap.routings[0], now_ms(), &exclude).unwrap();
        assert_eq!(c.idx, 1);
    }
}

#[test]
fn least_active_prefers_the_idle_proxy() {
    let snap = uniform(4, 10, Strategy::LeastActive);
    let r = &snap.routings[0];
    let held = hold(&snap, 4);
    let mut idxs: Vec<_> = held.iter().map(|c| c.idx).collect();
    idxs.sort();
    assert_eq!(idxs, [0, 1, 2, 3], "spreads one each");
    drop(held);
    let _busy: Vec<_> = [0usize, 0, 1, 3]
        .iter()
        .map(|&i| try_take(&r.all().candidates[i], now_ms(), &[]).unwrap())
        .collect();
    assert_eq!(pick(&snap, r, now_ms(), &[]).unwrap().idx, 2);
}

#[test]
fn two_choices_favours_low_latency_and_low_load() {
    let snap = uniform(2, 100, Strategy::PowerOfTwoChoices);
    for _ in 0..50 {
        snap.proxies[0].state.observe_latency(1_000_000);
        snap.proxies[1].state.observe_latency(1_000);
    }
    let mut counts = HashMap::new();
    let mut held = Vec::new();
    for _ in 0..20 {
        let c = pick(&snap, &snap.routings[0], now_ms(), &[]).unwrap();
        *counts.entry(c.idx).or_insert(0) += 1;
        held.push(c);
    }
    assert!(counts.get(&1).copied().unwrap_or(0) >= 18, "{counts:?}");
}

/// A least-active window that starts near the end of the list wraps to its start: the
/// idle candidate just past the end is found before the busy ones at the end.
#[test]
fn least_active_window_wraps_past_the_end() {
    let n = LEAST_ACTIVE_WINDOW + 4;
    let snap = uniform(n, 10, Strategy::LeastActive);
    let r = &snap.routings[0];
    // Each pick advances the cursor by one: after n - 2 of them the next window starts
    // at candidate n - 2.
    for _ in 0..n - 2 {
        drop(pick(&snap, r, now_ms(), &[]).unwrap());
    }
    let _busy: Vec<_> = [n - 2, n - 1]
        .iter()
        .map(|&i| try_take(&r.all().candidates[i], now_ms(), &[]).unwrap())
        .collect();
    assert_eq!(pick(&snap, r, now_ms(), &[]).unwrap().idx, 0);
}

/// In a list longer than [`TWO_CHOICES_WINDOW`], power-of-two-choices draws both
/// candidates from the window at the cursor (which moves by one per pick), still
/// favours the faster proxies there, and a full window falls back to the whole list.
#[test]
fn two_choices_in_a_large_list_draws_from_the_window_at_the_cursor() {
    let n = TWO_CHOICES_WINDOW * 4;
    let snap = uniform(n, 1_000, Strategy::PowerOfTwoChoices);
    for (i, p) in snap.proxies.iter().enumerate() {
        for _ in 0..50 {
            p.state.observe_latency(if i.is_multiple_of(2) {
                1_000
            } else {
                1_000_000
            });
        }
    }
    let r = &snap.routings[0];
    let mut fast = 0;
    let mut held = Vec::new();
    for k in 0..200 {
        let c = pick(&snap, r, now_ms(), &[]).unwrap();
        let offset = (c.idx as usize + n - k % n) % n;
        assert!(
            offset < TWO_CHOICES_WINDOW,
            "pick {k} took {} outside the window",
            c.idx
        );
        fast += usize::from(c.idx.is_multiple_of(2));
        held.push(c);
    }
    // Both draws slow: 32/64 × 31/63 ≈ ¼ of the picks.
    assert!(fast >= 120, "{fast} of 200 picks on the fast proxies");
    drop(held);

    let snap = uniform(n, 1, Strategy::PowerOfTwoChoices);
    let held = hold(&snap, n);
    assert!(pick(&snap, &snap.routings[0], now_ms(), &[]).is_none());
    drop(held);
}

#[test]
fn large_candidate_lists_use_a_bounded_window() {
    let snap = uniform(1000, 1, Strategy::LeastActive);
    let held = hold(&snap, 1000);
    assert!(pick(&snap, &snap.routings[0], now_ms(), &[]).is_none());
    drop(held);
}

/// Round robin from several threads at once: the cursor is advanced without a
/// read-modify-write, so racing picks may repeat or skip a start, but every candidate
/// still leads about as often as any other, and capacity stays exact.
#[test]
fn concurrent_round_robin_spreads_and_never_exceeds_capacity() {
    const THREADS: usize = 4;
    const PICKS: usize = 20_000;
    const N: usize = 8;
    let snap = uniform(N, 3, Strategy::RoundRobin);
    let r = &snap.routings[0];
    let per_thread: Vec<[usize; N]> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                scope.spawn(|| {
                    let mut seen = [0usize; N];
                    for _ in 0..PICKS {
                        // One slot held while picking again: loads of up to two per
                        // thread, so full proxies get skipped now and then.
                        let a = pick(&snap, r, now_ms(), &[]);
                        let b = pick(&snap, r, now_ms(), &[]);
                        for c in [&a, &b].into_iter().flatten() {
                            let state = &snap.proxies[c.idx as usize].state;
                            assert!(state.load() <= state.max(), "over capacity");
                            seen[c.idx as usize] += 1;
                        }
                    }
                    seen
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let picks: usize = per_thread.iter().flatten().sum();
    assert_eq!(
        picks,
        2 * THREADS * PICKS,
        "capacity 24 > 8 held: never refused"
    );
    for i in 0..N {
        let got: usize = per_thread.iter().map(|seen| seen[i]).sum();
        assert!(
            got >= picks / N / 2 && got <= picks / N * 2,
            "candidate {i}: {got} of {picks} picks"
        );
    }
    assert!(snap.proxies.iter().all(|p| p.state.load() == 0));
}
