//! The collector handle given to the Distribution API's success path and the gateway
//! outcome path. Recording never waits: a full queue drops the event and counts it.
//! It must never touch Redis or SQL itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::mpsc;

use crate::day::Clock;
use crate::model::{Event, Kind, valid_name};

/// Most Upstream entries one extraction event carries.
pub const MAX_UPSTREAMS_PER_EVENT: usize = 64;
/// Longest identity accepted (longer ones are truncated before hashing).
pub const MAX_IDENTITY_BYTES: usize = 512;

/// Counters of the collector.
#[derive(Debug, Default)]
pub struct CollectorStats {
    accepted: AtomicU64,
    dropped: AtomicU64,
    rejected: AtomicU64,
}

/// A copy of the collector counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CollectorCounts {
    /// Events queued.
    pub accepted: u64,
    /// Events dropped because the queue was full or the worker gone.
    pub dropped: u64,
    /// Events refused for an invalid name.
    pub rejected: u64,
}

impl CollectorStats {
    /// Copies the counters.
    pub fn counts(&self) -> CollectorCounts {
        CollectorCounts {
            accepted: self.accepted.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
        }
    }
}

/// Cheap to clone; a disabled collector ignores everything.
#[derive(Debug, Clone)]
pub struct Collector {
    tx: Option<mpsc::Sender<Event>>,
    clock: Arc<dyn Clock>,
    stats: Arc<CollectorStats>,
}

impl Collector {
    /// A collector with a queue of `capacity`; the receiver goes to the worker.
    pub fn bounded(capacity: usize, clock: Arc<dyn Clock>) -> (Self, mpsc::Receiver<Event>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (
            Self {
                tx: Some(tx),
                clock,
                stats: Arc::default(),
            },
            rx,
        )
    }

    /// A collector that records nothing (analytics off).
    pub fn disabled() -> Self {
        Self {
            tx: None,
            clock: Arc::new(crate::day::SystemClock),
            stats: Arc::default(),
        }
    }

    /// The shared counters.
    pub fn stats(&self) -> Arc<CollectorStats> {
        Arc::clone(&self.stats)
    }

    /// Events waiting in the queue.
    pub fn queued(&self) -> usize {
        self.tx
            .as_ref()
            .map_or(0, |tx| tx.max_capacity() - tx.capacity())
    }

    /// A successful extraction: `client` got `per_upstream` proxies.
    pub fn extraction(&self, client: &str, identity: &str, per_upstream: &[(&str, u32)]) {
        if !self.admits(valid_name(client) && per_upstream.iter().all(|(u, _)| valid_name(u))) {
            return;
        }
        self.send(Event::Extraction {
            at: self.clock.now(),
            client: client.to_owned(),
            identity: clip(identity),
            per_upstream: per_upstream
                .iter()
                .take(MAX_UPSTREAMS_PER_EVENT)
                .map(|(u, n)| ((*u).to_owned(), *n))
                .collect(),
        });
    }

    /// `requests` gateway requests on `routing` by `identity`.
    pub fn gateway_requests(&self, routing: &str, identity: &str, requests: u32) {
        if requests == 0 || !self.admits(valid_name(routing)) {
            return;
        }
        self.send(Event::GatewayRequests {
            at: self.clock.now(),
            routing: routing.to_owned(),
            identity: clip(identity),
            requests,
        });
    }

    /// Gateway bytes of Routing `routing` (every client's): up from the clients, down to
    /// them. Nothing is sent for zero bytes.
    pub fn routing_bytes(&self, routing: &str, bytes_up: u64, bytes_down: u64) {
        self.gateway_bytes(Kind::Routings, routing, bytes_up, bytes_down);
    }

    /// Gateway bytes of configured client `client` (over every Routing).
    pub fn client_bytes(&self, client: &str, bytes_up: u64, bytes_down: u64) {
        self.gateway_bytes(Kind::Clients, client, bytes_up, bytes_down);
    }

    fn gateway_bytes(&self, kind: Kind, name: &str, bytes_up: u64, bytes_down: u64) {
        if (bytes_up == 0 && bytes_down == 0) || !self.admits(valid_name(name)) {
            return;
        }
        self.send(Event::GatewayBytes {
            at: self.clock.now(),
            kind,
            name: name.to_owned(),
            bytes_up,
            bytes_down,
        });
    }

    /// Whether an event is to be sent: collection is on and the names it carries are
    /// valid (an event with an invalid name is counted as rejected).
    fn admits(&self, names_valid: bool) -> bool {
        if self.tx.is_none() {
            return false;
        }
        if !names_valid {
            self.stats.rejected.fetch_add(1, Ordering::Relaxed);
        }
        names_valid
    }

    fn send(&self, e: Event) {
        let Some(tx) = &self.tx else { return };
        match tx.try_send(e) {
            Ok(()) => self.stats.accepted.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.stats.dropped.fetch_add(1, Ordering::Relaxed),
        };
    }
}

fn clip(s: &str) -> String {
    let mut end = s.len().min(MAX_IDENTITY_BYTES);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::day::SystemClock;

    #[test]
    fn a_full_queue_drops_and_counts_without_waiting() {
        let (c, mut rx) = Collector::bounded(2, Arc::new(SystemClock));
        for _ in 0..5 {
            c.gateway_requests("r1", "alice", 1);
        }
        c.extraction("bad|name", "x", &[("u1", 1)]);
        assert_eq!(
            c.stats().counts(),
            CollectorCounts {
                accepted: 2,
                dropped: 3,
                rejected: 1
            }
        );
        assert!(rx.try_recv().is_ok());
        Collector::disabled().gateway_requests("r1", "a", 1);
    }
}
