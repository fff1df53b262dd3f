//! Worker request outcomes on their way to the health reducer: a bounded queue that
//! drops (and counts) rather than back-pressuring workers. Outcomes are observations
//! only; nothing here changes the activity pool.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use activity_pool::model::WorkerId;
use proxy_pool_api::controlplane::model::Outcome;
use tokio::sync::mpsc;

pub use super::metering::Traffic;

/// One outcome with the worker that reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerOutcome {
    /// Reporting worker.
    pub worker_id: WorkerId,
    /// The outcome.
    pub outcome: Outcome,
}

/// Producer side of the outcome queue. Cheap to clone.
#[derive(Clone, Debug)]
pub struct OutcomeQueue {
    tx: mpsc::Sender<WorkerOutcome>,
    counters: Arc<Counters>,
}

#[derive(Debug, Default)]
struct Counters {
    accepted: AtomicU64,
    dropped: AtomicU64,
}

impl OutcomeQueue {
    /// A queue of `capacity` outcomes and its consumer (give it to the reducer).
    pub fn bounded(capacity: usize) -> (Self, mpsc::Receiver<WorkerOutcome>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (
            Self {
                tx,
                counters: Arc::default(),
            },
            rx,
        )
    }

    /// Enqueues without waiting; `false` (and counted) when full or closed.
    pub fn offer(&self, item: WorkerOutcome) -> bool {
        match self.tx.try_send(item) {
            Ok(()) => {
                self.counters.accepted.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(_) => {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Outcomes enqueued so far.
    pub fn accepted(&self) -> u64 {
        self.counters.accepted.load(Ordering::Relaxed)
    }

    /// Outcomes dropped so far because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::Relaxed)
    }
}

/// Most routings one runtime report may carry usage for.
pub const MAX_USAGE_ROUTINGS: usize = 256;
/// Most client identities per routing in one report (the gateway caps at this).
pub const MAX_USAGE_CLIENTS: usize = 10_000;
/// Longest client identity accepted in a usage report, in bytes.
pub const MAX_USAGE_IDENTITY_BYTES: usize = 256;
/// The identity the requests of unlisted clients (past the gateway's cap) are counted
/// under: their requests stay exact, the unique-client estimate gains at most one.
pub const UNLISTED_IDENTITY: &str = "(unlisted)";

/// Gateway usage from runtime reports on its way to the analytics collector. The
/// collector is disabled until [`super::ControlPlane::with_analytics`] sets one;
/// feeding it never waits (the collector drops and counts when full).
#[derive(Debug, Default)]
pub struct UsageSink {
    collector: std::sync::OnceLock<proxy_pool_analytics::Collector>,
    counters: UsageCounterCells,
}

#[derive(Debug, Default)]
struct UsageCounterCells {
    requests: AtomicU64,
    unknown_routings: AtomicU64,
    unknown_requests: AtomicU64,
    unlisted_requests: AtomicU64,
}

/// A copy of the usage counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsageCounts {
    /// Requests handed to the collector (including unlisted clients' requests).
    pub requests: u64,
    /// Routing entries ignored because the controller does not know the routing.
    pub unknown_routings: u64,
    /// Requests in those ignored entries.
    pub unknown_requests: u64,
    /// Requests of clients gateways did not list (past their identity cap).
    pub unlisted_requests: u64,
}

/// One routing's usage as validated from the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutingUsage {
    /// Routing name.
    pub routing: String,
    /// Every request and byte on it in the interval (listed clients or not).
    pub traffic: Traffic,
    /// Listed clients.
    pub clients: Vec<ClientTraffic>,
}

/// One listed client's usage of a routing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientTraffic {
    /// Client identity (the authenticated client name, or the open-auth username).
    pub identity: String,
    /// Its requests and bytes.
    pub traffic: Traffic,
}

impl UsageSink {
    /// Sets the collector once; `false` when one was already set.
    pub fn set_collector(&self, collector: proxy_pool_analytics::Collector) -> bool {
        self.collector.set(collector).is_ok()
    }

    /// The counters so far.
    pub fn counts(&self) -> UsageCounts {
        let c = &self.counters;
        UsageCounts {
            requests: c.requests.load(Ordering::Relaxed),
            unknown_routings: c.unknown_routings.load(Ordering::Relaxed),
            unknown_requests: c.unknown_requests.load(Ordering::Relaxed),
            unlisted_requests: c.unlisted_requests.load(Ordering::Relaxed),
        }
    }

    /// Feeds one accepted report's usage: entries for routings `known` rejects are
    /// ignored and counted; the rest become one collector event per listed client,
    /// plus one for the requests of unlisted clients, and the bytes of the routing
    /// and of each listed client `client` accepts (a configured client).
    pub fn feed(
        &self,
        usage: &[RoutingUsage],
        known: impl Fn(&str) -> bool,
        client: impl Fn(&str) -> bool,
    ) {
        let c = &self.counters;
        for u in usage {
            if !known(&u.routing) {
                c.unknown_routings.fetch_add(1, Ordering::Relaxed);
                c.unknown_requests
                    .fetch_add(u.traffic.requests, Ordering::Relaxed);
                continue;
            }
            let listed: u64 = u.clients.iter().map(|c| c.traffic.requests).sum();
            let unlisted = u.traffic.requests.saturating_sub(listed);
            c.requests.fetch_add(u.traffic.requests, Ordering::Relaxed);
            c.unlisted_requests.fetch_add(unlisted, Ordering::Relaxed);
            let Some(collector) = self.collector.get() else {
                continue;
            };
            for listed in &u.clients {
                send(
                    collector,
                    &u.routing,
                    &listed.identity,
                    listed.traffic.requests,
                );
                if client(&listed.identity) {
                    collector.client_bytes(
                        &listed.identity,
                        listed.traffic.bytes_up,
                        listed.traffic.bytes_down,
                    );
                }
            }
            send(collector, &u.routing, UNLISTED_IDENTITY, unlisted);
            collector.routing_bytes(&u.routing, u.traffic.bytes_up, u.traffic.bytes_down);
        }
    }
}

/// One event per `u32::MAX` requests (the collector's unit), none for zero.
fn send(collector: &proxy_pool_analytics::Collector, routing: &str, identity: &str, n: u64) {
    let mut left = n;
    while left > 0 {
        let chunk = u32::try_from(left).unwrap_or(u32::MAX);
        collector.gateway_requests(routing, identity, chunk);
        left -= u64::from(chunk);
    }
}

/// Validates the usage of a runtime report: bounded sizes, every routing listed once,
/// identities non-empty and short, listed requests not above the routing's total.
/// Bytes are taken as sent (a listed client's bytes above its routing's total only
/// shrink the `(other)` remainder of the metrics to zero; they never refuse a report).
pub fn usage_from_wire(
    usage: Vec<proxy_pool_api::controlplane::pb::RoutingUsage>,
) -> Result<Vec<RoutingUsage>, &'static str> {
    if usage.len() > MAX_USAGE_ROUTINGS {
        return Err("usage");
    }
    let mut seen = std::collections::HashSet::with_capacity(usage.len());
    usage
        .into_iter()
        .map(|u| {
            if u.routing.is_empty() || u.routing.len() > 253 || !seen.insert(u.routing.clone()) {
                return Err("usage[].routing");
            }
            if u.clients.len() > MAX_USAGE_CLIENTS {
                return Err("usage[].clients");
            }
            let mut listed = 0u64;
            let clients = u
                .clients
                .into_iter()
                .map(|c| {
                    if c.identity.is_empty() || c.identity.len() > MAX_USAGE_IDENTITY_BYTES {
                        return Err("usage[].clients[].identity");
                    }
                    listed = listed.checked_add(c.requests).ok_or("usage[].clients")?;
                    Ok(ClientTraffic {
                        identity: c.identity,
                        traffic: Traffic {
                            requests: c.requests,
                            bytes_up: c.bytes_up,
                            bytes_down: c.bytes_down,
                        },
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            if listed > u.requests {
                return Err("usage[].requests");
            }
            Ok(RoutingUsage {
                routing: u.routing,
                traffic: Traffic {
                    requests: u.requests,
                    bytes_up: u.bytes_up,
                    bytes_down: u.bytes_down,
                },
                clients,
            })
        })
        .collect()
}

/// A gateway's usage of `routing` as the wire carries it, with bytes: `total` in all,
/// and per client identity (test fixtures build reports with it).
#[cfg(any(test, feature = "testkit"))]
pub fn wire_traffic(
    routing: &str,
    total: Traffic,
    clients: &[(&str, Traffic)],
) -> proxy_pool_api::controlplane::pb::RoutingUsage {
    use proxy_pool_api::controlplane::pb;
    pb::RoutingUsage {
        routing: routing.into(),
        requests: total.requests,
        bytes_up: total.bytes_up,
        bytes_down: total.bytes_down,
        clients: clients
            .iter()
            .map(|(identity, t)| pb::ClientUsage {
                identity: (*identity).into(),
                requests: t.requests,
                bytes_up: t.bytes_up,
                bytes_down: t.bytes_down,
            })
            .collect(),
    }
}

/// A gateway's usage of `routing` as the wire carries it: `requests` in all, and per
/// client identity (test fixtures build reports with it).
#[cfg(any(test, feature = "testkit"))]
pub fn wire_usage(
    routing: &str,
    requests: u64,
    clients: &[(&str, u64)],
) -> proxy_pool_api::controlplane::pb::RoutingUsage {
    use proxy_pool_api::controlplane::pb;
    pb::RoutingUsage {
        routing: routing.into(),
        requests,
        clients: clients
            .iter()
            .map(|(identity, n)| pb::ClientUsage {
                identity: (*identity).into(),
                requests: *n,
                ..pb::ClientUsage::default()
            })
            .collect(),
        ..pb::RoutingUsage::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proxy_pool_analytics::{Collector, Event, SystemClock};

    use super::wire_usage as wire;

    #[test]
    fn usage_reaches_the_collector_with_exact_counts() {
        let (collector, mut rx) = Collector::bounded(64, Arc::new(SystemClock));
        let sink = UsageSink::default();
        assert!(sink.set_collector(collector));
        let usage = usage_from_wire(vec![
            wire("r1", 10, &[("alice", 3), ("bob", 5)]),
            wire("ghost", 7, &[("carol", 7)]),
        ])
        .unwrap();
        sink.feed(&usage, |r| r == "r1", |_| false);
        let mut got = Vec::new();
        while let Ok(Event::GatewayRequests {
            routing,
            identity,
            requests,
            ..
        }) = rx.try_recv()
        {
            got.push((routing, identity, requests));
        }
        assert_eq!(
            got,
            vec![
                ("r1".to_owned(), "alice".to_owned(), 3),
                ("r1".to_owned(), "bob".to_owned(), 5),
                ("r1".to_owned(), UNLISTED_IDENTITY.to_owned(), 2),
            ]
        );
        assert_eq!(
            sink.counts(),
            UsageCounts {
                requests: 10,
                unknown_routings: 1,
                unknown_requests: 7,
                unlisted_requests: 2,
            }
        );
    }

    #[test]
    fn malformed_usage_is_refused() {
        assert!(usage_from_wire(vec![wire("r1", 2, &[("a", 3)])]).is_err());
        assert!(usage_from_wire(vec![wire("r1", 1, &[]), wire("r1", 1, &[])]).is_err());
        assert!(usage_from_wire(vec![wire("r1", 1, &[("", 1)])]).is_err());
        let long = "x".repeat(MAX_USAGE_IDENTITY_BYTES + 1);
        assert!(usage_from_wire(vec![wire("r1", 1, &[(long.as_str(), 1)])]).is_err());
        assert!(usage_from_wire(vec![wire("r1", 0, &[])]).is_ok());
    }

    #[test]
    fn without_a_collector_only_the_counters_move() {
        let sink = UsageSink::default();
        let usage = usage_from_wire(vec![wire("r1", 4, &[("a", 4)])]).unwrap();
        sink.feed(&usage, |_| true, |_| true);
        assert_eq!(sink.counts().requests, 4);
    }
}
