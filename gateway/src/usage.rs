//! Per-client metering: requests, bytes up and bytes down per (client identity, Routing),
//! sent to the controller in runtime reports (deltas per report interval).
//!
//! Hot path: a request admitted on a Routing resolves its [`Meter`] once — two lock-free
//! map reads (the Routing's, then the identity's shard, through `arc-swap`) — and the
//! connection then adds to it with relaxed atomics: one `fetch_add` per request and one
//! per read or write on the client connection (per chunk, never per byte). A cell is
//! created under its shard's write lock the first time an identity is seen on a
//! Routing (the shard's map is copied and swapped; readers never wait). Everything else —
//! draining, merging, the wire form — runs on the control-plane agent's report tick.
//!
//! Bytes (the proto's definition): **up** = bytes read from the client's connection,
//! **down** = bytes written to it, the whole connection after any PROXY protocol header
//! (handshakes, heads, bodies, tunnel payload), attributed to the request they served
//! (see [`crate::io::ClientStream`]).
//!
//! Bounded: at most [`MAX_CLIENTS_PER_ROUTING`] identities per Routing (split evenly over
//! the shards) and [`MAX_ROUTINGS`] Routings. A request whose identity does not fit is
//! metered in its Routing's unlisted cell — the Routing's totals stay exact — and counted
//! as dropped (`proxy_pool_gateway_usage_identities_dropped_total`). Cells idle for a whole
//! interval and held by no connection are removed at the report tick, so identities that
//! come and go (open-auth mode) do not fill the caps for good; a removed cell is drained
//! once more at the next tick before it is freed, so a count that raced its removal is
//! still reported.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use proxy_pool_api::controlplane::pb;

/// Shards of each Routing's identity map, chosen by a hash of the identity.
pub const SHARDS: usize = 16;
/// Most distinct client identities listed per Routing per report.
pub const MAX_CLIENTS_PER_ROUTING: usize = 10_000;
/// Most Routings per report (the controller refuses more).
pub const MAX_ROUTINGS: usize = 256;
/// Longest identity listed, in bytes (longer ones are dropped and counted).
pub const MAX_IDENTITY_BYTES: usize = 256;

const PER_SHARD: usize = MAX_CLIENTS_PER_ROUTING / SHARDS;

/// Requests and bytes, as counted so far (plain numbers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Requests admitted.
    pub requests: u64,
    /// Bytes read from the client connection.
    pub bytes_up: u64,
    /// Bytes written to the client connection.
    pub bytes_down: u64,
}

impl Counts {
    fn is_zero(&self) -> bool {
        *self == Self::default()
    }

    fn add(&mut self, other: Counts) {
        self.requests += other.requests;
        self.bytes_up += other.bytes_up;
        self.bytes_down += other.bytes_down;
    }
}

/// The live counters of one (identity, Routing), or of a Routing's unlisted identities.
#[derive(Debug, Default)]
struct Cell {
    requests: AtomicU64,
    up: AtomicU64,
    down: AtomicU64,
}

impl Cell {
    /// Takes the counts (each counter reset to zero; a concurrent add lands in this
    /// take or the next, never lost).
    fn take(&self) -> Counts {
        Counts {
            requests: self.requests.swap(0, Ordering::Relaxed),
            bytes_up: self.up.swap(0, Ordering::Relaxed),
            bytes_down: self.down.swap(0, Ordering::Relaxed),
        }
    }
}

/// What one admitted request adds to: cheap to clone (one `Arc`), relaxed atomics only.
#[derive(Debug, Clone)]
pub struct Meter {
    cell: Arc<Cell>,
}

impl Meter {
    /// `n` bytes read from the client connection.
    #[inline]
    pub fn up(&self, n: u64) {
        self.cell.up.fetch_add(n, Ordering::Relaxed);
    }

    /// `n` bytes written to the client connection.
    #[inline]
    pub fn down(&self, n: u64) {
        self.cell.down.fetch_add(n, Ordering::Relaxed);
    }
}

/// One shard of a Routing's identities: read without locks, written under `write`.
#[derive(Debug, Default)]
struct Shard {
    cells: ArcSwap<HashMap<Box<str>, Arc<Cell>>>,
    write: Mutex<()>,
}

/// One Routing's cells.
#[derive(Debug)]
struct RoutingCells {
    /// Requests whose identity is not listed (cap reached, identity too long).
    unlisted: Arc<Cell>,
    shards: Box<[Shard]>,
}

impl Default for RoutingCells {
    fn default() -> Self {
        Self {
            unlisted: Arc::default(),
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
        }
    }
}

/// Cells removed from the maps, drained once more before they are freed.
#[derive(Debug)]
enum Removed {
    /// One identity's cell.
    Cell {
        routing: Arc<str>,
        identity: Box<str>,
        cell: Arc<Cell>,
    },
    /// A whole Routing (a request that raced the removal may have added to it).
    Routing {
        name: Arc<str>,
        cells: Arc<RoutingCells>,
    },
}

impl Removed {
    /// Adds what was counted since the removal to `report`; whether someone may still
    /// count into it (then it is kept another round).
    fn drain(&self, report: &mut UsageReport) -> bool {
        match self {
            Self::Cell {
                routing,
                identity,
                cell,
            } => {
                report.add(routing, Some(identity), cell.take());
                Arc::strong_count(cell) > 1
            }
            Self::Routing { name, cells } => {
                report.add(name, None, cells.unlisted.take());
                let mut held = Arc::strong_count(cells) > 1;
                for shard in cells.shards.iter() {
                    for (identity, cell) in shard.cells.load().iter() {
                        report.add(name, Some(identity), cell.take());
                        held |= Arc::strong_count(cell) > 1;
                    }
                }
                held
            }
        }
    }
}

/// The hot-path side: cheap to share (`Arc`), lock-free on the request path.
#[derive(Debug, Default)]
pub struct UsageRecorder {
    routings: ArcSwap<HashMap<Arc<str>, Arc<RoutingCells>>>,
    write: Mutex<()>,
    removed: Mutex<Vec<Removed>>,
    recorded: AtomicU64,
    identities_dropped: AtomicU64,
    routings_dropped: AtomicU64,
    reports_lost: AtomicU64,
    requests_lost: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
}

/// FNV-1a: a few nanoseconds for a short name; only spreads the identities.
fn shard_of(client: &str) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in client.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % SHARDS as u64) as usize
}

impl UsageRecorder {
    /// One request admitted on `routing` for `client`: counts it and returns the meter
    /// its bytes go to (`None` only when the Routing cap is reached; counted).
    pub fn meter(&self, routing: &Arc<str>, client: &str) -> Option<Meter> {
        self.recorded.fetch_add(1, Ordering::Relaxed);
        let cells = match self.routings.load().get(routing.as_ref()) {
            Some(cells) => Arc::clone(cells),
            None => match self.add_routing(routing) {
                Some(cells) => cells,
                None => {
                    self.routings_dropped.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
            },
        };
        let shard = &cells.shards[shard_of(client)];
        let cell = match shard.cells.load().get(client) {
            Some(cell) => Arc::clone(cell),
            None => self.add_identity(shard, client).unwrap_or_else(|| {
                self.identities_dropped.fetch_add(1, Ordering::Relaxed);
                Arc::clone(&cells.unlisted)
            }),
        };
        cell.requests.fetch_add(1, Ordering::Relaxed);
        Some(Meter { cell })
    }

    /// Records one request without its bytes (tests, benches).
    pub fn record(&self, routing: &Arc<str>, client: &str) {
        let _ = self.meter(routing, client);
    }

    fn add_routing(&self, routing: &Arc<str>) -> Option<Arc<RoutingCells>> {
        let _write = self.write.lock();
        let current = self.routings.load();
        if let Some(cells) = current.get(routing.as_ref()) {
            return Some(Arc::clone(cells));
        }
        if current.len() >= MAX_ROUTINGS {
            return None;
        }
        let cells = Arc::new(RoutingCells::default());
        let mut next = HashMap::clone(&current);
        next.insert(Arc::clone(routing), Arc::clone(&cells));
        self.routings.store(Arc::new(next));
        Some(cells)
    }

    fn add_identity(&self, shard: &Shard, client: &str) -> Option<Arc<Cell>> {
        if client.len() > MAX_IDENTITY_BYTES {
            return None;
        }
        let _write = shard.write.lock();
        let current = shard.cells.load();
        if let Some(cell) = current.get(client) {
            return Some(Arc::clone(cell));
        }
        if current.len() >= PER_SHARD {
            return None;
        }
        let cell = Arc::new(Cell::default());
        let mut next = HashMap::clone(&current);
        next.insert(client.into(), Arc::clone(&cell));
        shard.cells.store(Arc::new(next));
        Some(cell)
    }

    /// Takes everything counted since the last call (the interval's usage), and removes
    /// cells idle for the interval that no connection holds.
    pub fn take(&self) -> UsageReport {
        let mut report = UsageReport::default();
        // Cells removed at the last take: drained once more, then freed unless a
        // connection that raced the removal still holds one (then kept another round).
        let removed = std::mem::take(&mut *self.removed.lock());
        let mut keep = Vec::new();
        for r in removed {
            if r.drain(&mut report) {
                keep.push(r);
            }
        }
        let _write = self.write.lock();
        let routings = self.routings.load_full();
        let mut idle_routings = Vec::new();
        for (name, cells) in routings.iter() {
            let unlisted = cells.unlisted.take();
            report.add(name, None, unlisted);
            let mut listed = 0;
            for shard in cells.shards.iter() {
                let _write = shard.write.lock();
                let current = shard.cells.load_full();
                let mut idle = Vec::new();
                for (identity, cell) in current.iter() {
                    let counts = cell.take();
                    if counts.is_zero() {
                        if Arc::strong_count(cell) == 1 {
                            idle.push(identity.clone());
                        }
                    } else {
                        report.add(name, Some(identity), counts);
                    }
                }
                if !idle.is_empty() {
                    let mut next = HashMap::clone(&current);
                    for identity in idle {
                        if let Some(cell) = next.remove(&identity) {
                            keep.push(Removed::Cell {
                                routing: Arc::clone(name),
                                identity,
                                cell,
                            });
                        }
                    }
                    shard.cells.store(Arc::new(next));
                }
                listed += shard.cells.load().len();
            }
            // Idle: no identity left, nothing unlisted, nobody holding it (the map's
            // reference and this loop's are the only ones).
            if listed == 0 && unlisted.is_zero() && Arc::strong_count(cells) <= 2 {
                idle_routings.push(Arc::clone(name));
            }
        }
        if !idle_routings.is_empty() {
            let mut next = HashMap::clone(&routings);
            for name in idle_routings {
                if let Some(cells) = next.remove(&name) {
                    keep.push(Removed::Routing { name, cells });
                }
            }
            self.routings.store(Arc::new(next));
        }
        *self.removed.lock() = keep;
        let (up, down) = report.bytes();
        self.bytes_up.fetch_add(up, Ordering::Relaxed);
        self.bytes_down.fetch_add(down, Ordering::Relaxed);
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

    /// Bytes up and down metered so far, as of the last report tick.
    pub fn bytes(&self) -> (u64, u64) {
        (
            self.bytes_up.load(Ordering::Relaxed),
            self.bytes_down.load(Ordering::Relaxed),
        )
    }

    /// Requests whose identity was not listed (cap reached, or identity too long).
    pub fn identities_dropped(&self) -> u64 {
        self.identities_dropped.load(Ordering::Relaxed)
    }

    /// Requests not recorded at all because [`MAX_ROUTINGS`] Routings were metered.
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
    /// Every request and byte on the Routing (listed clients' and the rest).
    pub totals: Counts,
    /// Per listed client identity.
    pub clients: HashMap<String, Counts>,
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
        self.routings.values().map(|r| r.totals.requests).sum()
    }

    /// Bytes up and down in the report.
    pub fn bytes(&self) -> (u64, u64) {
        self.routings.values().fold((0, 0), |(u, d), r| {
            (u + r.totals.bytes_up, d + r.totals.bytes_down)
        })
    }

    /// Adds `counts` of `identity` (`None`: unlisted) on `routing` (one take of one
    /// cell: identities are unique per Routing, so no cap applies here).
    fn add(&mut self, routing: &str, identity: Option<&str>, counts: Counts) {
        if counts.is_zero() {
            return;
        }
        let entry = match self.routings.get_mut(routing) {
            Some(entry) => entry,
            None => self.routings.entry(routing.to_owned()).or_default(),
        };
        entry.totals.add(counts);
        if let Some(identity) = identity {
            match entry.clients.get_mut(identity) {
                Some(c) => c.add(counts),
                None => {
                    entry.clients.insert(identity.to_owned(), counts);
                }
            }
        }
    }

    /// Adds `other` (a report that could not be sent) into this one, within the same
    /// caps: totals stay exact; identities past the cap are dropped and returned.
    pub fn merge(&mut self, other: UsageReport) -> u64 {
        let mut dropped = 0;
        for (name, theirs) in other.routings {
            if !self.routings.contains_key(&name) && self.routings.len() >= MAX_ROUTINGS {
                dropped += theirs.clients.len() as u64;
                continue;
            }
            let mine = self.routings.entry(name).or_default();
            mine.totals.add(theirs.totals);
            for (identity, counts) in theirs.clients {
                let room = mine.clients.len() < MAX_CLIENTS_PER_ROUTING;
                match mine.clients.get_mut(&identity) {
                    Some(v) => v.add(counts),
                    None if room => {
                        mine.clients.insert(identity, counts);
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
                let r = &self.routings[name];
                let mut clients: Vec<pb::ClientUsage> = r
                    .clients
                    .iter()
                    .map(|(identity, c)| pb::ClientUsage {
                        identity: identity.clone(),
                        requests: c.requests,
                        bytes_up: c.bytes_up,
                        bytes_down: c.bytes_down,
                    })
                    .collect();
                clients.sort_by(|a, b| a.identity.cmp(&b.identity));
                clients.truncate(MAX_CLIENTS_PER_ROUTING);
                pb::RoutingUsage {
                    routing: name.clone(),
                    requests: r.totals.requests,
                    clients,
                    bytes_up: r.totals.bytes_up,
                    bytes_down: r.totals.bytes_down,
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

    fn one() -> Counts {
        Counts {
            requests: 1,
            ..Counts::default()
        }
    }

    #[test]
    fn bytes_go_to_the_requests_cell_and_are_taken_as_deltas() {
        let u = UsageRecorder::default();
        let a = r("r-a");
        let m = u.meter(&a, "alice").expect("metered");
        m.up(100);
        m.down(1_000);
        let report = u.take();
        let ra = &report.routings["r-a"];
        let want = Counts {
            requests: 1,
            bytes_up: 100,
            bytes_down: 1_000,
        };
        assert_eq!(ra.totals, want);
        assert_eq!(ra.clients["alice"], want);
        // A long tunnel keeps counting into its held cell: reported in the next
        // interval, the cell not removed while held.
        m.up(5);
        let _ = u.take();
        m.down(7);
        let report = u.take();
        assert_eq!(report.routings["r-a"].clients["alice"].bytes_down, 7);
        let wire = report.to_wire();
        assert_eq!((wire[0].bytes_up, wire[0].bytes_down), (0, 7));
        assert_eq!(u.bytes(), (105, 1_007));
    }

    #[test]
    fn idle_cells_are_removed_and_a_late_count_is_still_reported() {
        let u = UsageRecorder::default();
        let a = r("r-a");
        for i in 0..100 {
            u.record(&a, &format!("c{i}"));
        }
        assert_eq!(u.take().routings["r-a"].clients.len(), 100);
        // Idle for an interval: removed, the identities' room is free again.
        assert!(u.take().is_empty());
        assert!(
            u.routings.load().get("r-a").is_none(),
            "idle Routing removed"
        );
        let m = u.meter(&a, "late").expect("metered");
        drop(u.take());
        m.up(3);
        drop(m);
        // Nobody holds it any more, nothing is lost: counted, then freed.
        let report = u.take();
        assert_eq!(report.routings["r-a"].clients["late"].bytes_up, 3);
        // Idle again: removed (drained once more at the next take), then freed.
        assert!(u.take().is_empty());
        assert!(!u.removed.lock().is_empty());
        assert!(u.take().is_empty());
        assert!(u.removed.lock().is_empty());
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
        assert_eq!(ra.totals.requests, 4);
        assert_eq!(ra.clients["alice"].requests, 3);
        assert_eq!(ra.clients["bob"].requests, 1);
        assert_eq!(report.routings["r-b"].clients["alice"].requests, 1);
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
        assert_eq!(ra.totals.requests, n as u64 + 1);
        assert!(ra.clients.len() <= MAX_CLIENTS_PER_ROUTING);
        assert!(
            ra.clients.len() > MAX_CLIENTS_PER_ROUTING * 9 / 10,
            "shards fill evenly: {}",
            ra.clients.len()
        );
        let listed: u64 = ra.clients.values().map(|c| c.requests).sum();
        assert_eq!(
            u.identities_dropped(),
            ra.totals.requests - listed,
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
        assert_eq!(report.routings["r"].totals.requests, 1);
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
        assert_eq!(first.routings["r-a"].clients["alice"].requests, 2);
        assert_eq!(first.routings["r-a"].clients["carol"].requests, 1);

        let mut full = UsageReport::default();
        let big = full.routings.entry("r-a".into()).or_default();
        for i in 0..MAX_CLIENTS_PER_ROUTING {
            big.clients.insert(format!("c{i}"), one());
        }
        big.totals.requests = MAX_CLIENTS_PER_ROUTING as u64;
        let dropped = full.merge(first);
        assert_eq!(dropped, 2, "alice and carol do not fit");
        assert_eq!(
            full.routings["r-a"].totals.requests,
            MAX_CLIENTS_PER_ROUTING as u64 + 3
        );
        assert_eq!(full.routings["r-b"].totals.requests, 1);
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
        assert_eq!(taken.routings["r-a"].totals.requests, 40_000);
        assert_eq!(
            taken.routings["r-a"]
                .clients
                .values()
                .map(|c| c.requests)
                .sum::<u64>(),
            40_000
        );
        assert_eq!(taken.routings["r-a"].clients.len(), 50);
    }
}
