//! Per-Routing usage for the controller's analytics: requests admitted per Routing and
//! the distinct client identities seen, per report interval.
//!
//! Hot path: [`UsageRecorder::record`] hashes the client name to one of
//! [`SHARDS`] shards, takes that shard's mutex for a map lookup and an increment
//! (never across I/O), and allocates only the first time an identity is seen in an
//! interval. Everything else — draining, merging, the wire form — runs on the
//! control-plane agent's report tick, off the request path.
//!
//! Bounded: at most [`MAX_CLIENTS_PER_ROUTING`] identities per Routing per interval
//! (split evenly over the shards) and [`MAX_ROUTINGS`] Routings; a request whose
//! identity does not fit is still counted in its Routing's total, and its identity is
//! dropped and counted (`proxy_pool_gateway_usage_identities_dropped_total`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use proxy_pool_api::controlplane::pb;

/// Lock shards, chosen by a hash of the client identity.
pub const SHARDS: usize = 16;
/// Most distinct client identities listed per Routing per report.
pub const MAX_CLIENTS_PER_ROUTING: usize = 10_000;
/// Most Routings per report (the controller refuses more).
pub const MAX_ROUTINGS: usize = 256;
/// Longest identity listed, in bytes (longer ones are dropped and counted).
pub const MAX_IDENTITY_BYTES: usize = 256;

const PER_SHARD: usize = MAX_CLIENTS_PER_ROUTING / SHARDS;

#[derive(Debug, Default)]
struct Acc {
    requests: u64,
    clients: HashMap<Box<str>, u64>,
}

/// One shard: usage per Routing name.
type Shard = Mutex<HashMap<Arc<str>, Acc>>;

/// The hot-path side: cheap to share (`Arc`), lock-striped.
#[derive(Debug)]
pub struct UsageRecorder {
    shards: Box<[Shard]>,
    recorded: AtomicU64,
    identities_dropped: AtomicU64,
    routings_dropped: AtomicU64,
    reports_lost: AtomicU64,
    requests_lost: AtomicU64,
}

impl Default for UsageRecorder {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            recorded: AtomicU64::new(0),
            identities_dropped: AtomicU64::new(0),
            routings_dropped: AtomicU64::new(0),
            reports_lost: AtomicU64::new(0),
            requests_lost: AtomicU64::new(0),
        }
    }
}

/// FNV-1a: a few nanoseconds for a short name; only spreads lock contention.
fn shard_of(client: &str) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in client.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % SHARDS as u64) as usize
}

impl UsageRecorder {
    /// One request admitted on `routing` for `client`.
    pub fn record(&self, routing: &Arc<str>, client: &str) {
        self.recorded.fetch_add(1, Ordering::Relaxed);
        let mut shard = self.shards[shard_of(client)].lock();
        let acc = match shard.get_mut(routing.as_ref()) {
            Some(acc) => acc,
            None => {
                if shard.len() >= MAX_ROUTINGS {
                    drop(shard);
                    self.routings_dropped.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                shard.entry(Arc::clone(routing)).or_default()
            }
        };
        acc.requests += 1;
        if let Some(n) = acc.clients.get_mut(client) {
            *n += 1;
        } else if acc.clients.len() < PER_SHARD && client.len() <= MAX_IDENTITY_BYTES {
            acc.clients.insert(client.into(), 1);
        } else {
            drop(shard);
            self.identities_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Takes everything recorded since the last call (the interval's usage).
    pub fn take(&self) -> UsageReport {
        let mut report = UsageReport::default();
        for shard in self.shards.iter() {
            let taken = std::mem::take(&mut *shard.lock());
            for (routing, acc) in taken {
                let entry = report.routings.entry(routing.to_string()).or_default();
                entry.requests += acc.requests;
                // Shards partition identities: no identity appears in two shards.
                entry
                    .clients
                    .extend(acc.clients.into_iter().map(|(k, v)| (k.into_string(), v)));
            }
        }
        report
    }

    /// Counts a report that could not be delivered and will not be retried.
    pub fn lost(&self, report: &UsageReport) {
        self.reports_lost.fetch_add(1, Ordering::Relaxed);
        self.requests_lost
            .fetch_add(report.requests(), Ordering::Relaxed);
    }

    /// Counts identities a merge had no room for.
    pub fn count_dropped(&self, identities: u64) {
        self.identities_dropped
            .fetch_add(identities, Ordering::Relaxed);
    }

    /// Requests recorded so far.
    pub fn recorded(&self) -> u64 {
        self.recorded.load(Ordering::Relaxed)
    }

    /// Requests whose identity was not listed (cap reached, or identity too long).
    pub fn identities_dropped(&self) -> u64 {
        self.identities_dropped.load(Ordering::Relaxed)
    }

    /// Requests not recorded at all because a shard held [`MAX_ROUTINGS`] Routings.
    pub fn routings_dropped(&self) -> u64 {
        self.routings_dropped.load(Ordering::Relaxed)
    }

    /// Usage reports that could not be delivered.
    pub fn reports_lost(&self) -> u64 {
        self.reports_lost.load(Ordering::Relaxed)
    }

    /// Requests in usage reports that could not be delivered.
    pub fn requests_lost(&self) -> u64 {
        self.requests_lost.load(Ordering::Relaxed)
    }
}

/// One Routing's usage in a report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoutingTotals {
    /// Every request admitted on the Routing (listed clients' and the rest).
    pub requests: u64,
    /// Requests per listed client identity.
    pub clients: HashMap<String, u64>,
}

/// Usage of one or more intervals, ready to send.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageReport {
    /// Per Routing name.
    pub routings: HashMap<String, RoutingTotals>,
}

impl UsageReport {
    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.routings.is_empty()
    }

    /// Requests in the report.
    pub fn requests(&self) -> u64 {
        self.routings.values().map(|r| r.requests).sum()
    }

    /// Adds `other` (a report that could not be sent) into this one, within the same
    /// caps: counts stay exact; identities past the cap are dropped and returned.
    pub fn merge(&mut self, other: UsageReport) -> u64 {
        let mut dropped = 0;
        for (name, totals) in other.routings {
            if !self.routings.contains_key(&name) && self.routings.len() >= MAX_ROUTINGS {
                dropped += totals.clients.len() as u64;
                continue;
            }
            let mine = self.routings.entry(name).or_default();
            mine.requests += totals.requests;
            for (identity, n) in totals.clients {
                let room = mine.clients.len() < MAX_CLIENTS_PER_ROUTING;
                match mine.clients.get_mut(&identity) {
                    Some(v) => *v += n,
                    None if room => {
                        mine.clients.insert(identity, n);
                    }
                    None => dropped += 1,
                }
            }
        }
        dropped
    }

    /// The wire form, Routings and identities in name order (deterministic).
    pub fn to_wire(&self) -> Vec<pb::RoutingUsage> {
        let mut names: Vec<&String> = self.routings.keys().collect();
        names.sort();
        names
            .into_iter()
            .take(MAX_ROUTINGS)
            .map(|name| {
                let totals = &self.routings[name];
                let mut clients: Vec<pb::ClientUsage> = totals
                    .clients
                    .iter()
                    .map(|(identity, n)| pb::ClientUsage {
                        identity: identity.clone(),
                        requests: *n,
                        ..pb::ClientUsage::default()
                    })
                    .collect();
                clients.sort_by(|a, b| a.identity.cmp(&b.identity));
                clients.truncate(MAX_CLIENTS_PER_ROUTING);
                pb::RoutingUsage {
                    routing: name.clone(),
                    requests: totals.requests,
                    clients,
                    ..pb::RoutingUsage::default()
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(name: &str) -> Arc<str> {
        Arc::from(name)
    }

    #[test]
    fn counts_are_exact_per_routing_and_client() {
        let u = UsageRecorder::default();
        let (a, b) = (r("r-a"), r("r-b"));
        for _ in 0..3 {
            u.record(&a, "alice");
        }
        u.record(&a, "bob");
        u.record(&b, "alice");
        let report = u.take();
        assert_eq!(report.requests(), 5);
        let ra = &report.routings["r-a"];
        assert_eq!(ra.requests, 4);
        assert_eq!(ra.clients["alice"], 3);
        assert_eq!(ra.clients["bob"], 1);
        assert_eq!(report.routings["r-b"].clients["alice"], 1);
        // The interval was taken: the next one starts empty.
        assert!(u.take().is_empty());
        assert_eq!(u.recorded(), 5);
    }

    #[test]
    fn identities_are_capped_but_requests_stay_exact() {
        let u = UsageRecorder::default();
        let a = r("r-a");
        let n = MAX_CLIENTS_PER_ROUTING + 5_000;
        for i in 0..n {
            u.record(&a, &format!("client-{i}"));
        }
        // Known identities keep counting after the cap.
        u.record(&a, "client-0");
        let report = u.take();
        let ra = &report.routings["r-a"];
        assert_eq!(ra.requests, n as u64 + 1);
        assert!(ra.clients.len() <= MAX_CLIENTS_PER_ROUTING);
        assert!(
            ra.clients.len() > MAX_CLIENTS_PER_ROUTING * 9 / 10,
            "shards fill evenly: {}",
            ra.clients.len()
        );
        let listed: u64 = ra.clients.values().sum();
        assert_eq!(
            u.identities_dropped(),
            ra.requests - listed,
            "every unlisted request is counted as dropped"
        );
        let wire = report.to_wire();
        assert_eq!(wire.len(), 1);
        assert_eq!(wire[0].requests, n as u64 + 1);
        assert_eq!(wire[0].clients.len(), ra.clients.len());
    }

    #[test]
    fn long_identities_are_not_listed() {
        let u = UsageRecorder::default();
        u.record(&r("r"), &"x".repeat(MAX_IDENTITY_BYTES + 1));
        let report = u.take();
        assert_eq!(report.routings["r"].requests, 1);
        assert!(report.routings["r"].clients.is_empty());
        assert_eq!(u.identities_dropped(), 1);
    }

    #[test]
    fn merge_keeps_counts_exact_within_the_cap() {
        let u = UsageRecorder::default();
        let a = r("r-a");
        u.record(&a, "alice");
        let mut first = u.take();
        u.record(&a, "alice");
        u.record(&a, "carol");
        u.record(&r("r-b"), "bob");
        let second = u.take();
        assert_eq!(first.merge(second), 0);
        assert_eq!(first.requests(), 4);
        assert_eq!(first.routings["r-a"].clients["alice"], 2);
        assert_eq!(first.routings["r-a"].clients["carol"], 1);

        let mut full = UsageReport::default();
        let big = full.routings.entry("r-a".into()).or_default();
        for i in 0..MAX_CLIENTS_PER_ROUTING {
            big.clients.insert(format!("c{i}"), 1);
        }
        big.requests = MAX_CLIENTS_PER_ROUTING as u64;
        let dropped = full.merge(first);
        assert_eq!(dropped, 2, "alice and carol do not fit");
        assert_eq!(
            full.routings["r-a"].requests,
            MAX_CLIENTS_PER_ROUTING as u64 + 3
        );
        assert_eq!(full.routings["r-b"].requests, 1);
    }

    #[test]
    fn concurrent_recording_loses_nothing() {
        let u = Arc::new(UsageRecorder::default());
        let a = r("r-a");
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (u, a) = (Arc::clone(&u), Arc::clone(&a));
                std::thread::spawn(move || {
                    for i in 0..10_000 {
                        u.record(&a, &format!("c{}", (i + t) % 50));
                    }
                })
            })
            .collect();
        let mut taken = UsageReport::default();
        for _ in 0..10 {
            taken.merge(u.take());
        }
        for t in threads {
            t.join().unwrap();
        }
        taken.merge(u.take());
        assert_eq!(taken.routings["r-a"].requests, 40_000);
        assert_eq!(taken.routings["r-a"].clients.values().sum::<u64>(), 40_000);
        assert_eq!(taken.routings["r-a"].clients.len(), 50);
    }
}
