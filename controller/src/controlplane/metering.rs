//! Gateway traffic per client and Routing as metrics, from the usage of accepted
//! runtime reports (counted once per (session, report sequence)):
//! `gateway_requests_total{client,routing}` and
//! `gateway_bytes_total{client,routing,direction="up"|"down"}`.
//!
//! Labels are bounded: `client` is a client name the controller's config lists and
//! `routing` a configured Routing; anything else — open-auth identities, identities a
//! gateway did not list (past its cap), names the config does not know — is counted
//! under [`OTHER`], which no configured name can be (parentheses are not allowed in
//! names). At most [`MAX_PAIRS`] (client, routing) pairs get their own series; past
//! that, new pairs are counted under (`(other)`, `(other)`). The totals per Routing
//! stay exact: the `(other)` client of a Routing carries what the named clients do not.

use std::collections::HashSet;

use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::outcomes::RoutingUsage;
use crate::metrics::register_all;

/// The label value of everything the config does not name.
pub const OTHER: &str = "(other)";
/// Most (client, routing) label pairs with their own series (3 series each).
pub const MAX_PAIRS: usize = 5_000;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PairLabels {
    client: String,
    routing: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BytesLabels {
    client: String,
    routing: String,
    direction: &'static str,
}

/// Exposition name and help text of each metric, in registration order.
const DOCS: [(&str, &str); 2] = [
    (
        "gateway_requests",
        "Gateway requests from runtime reports, by configured client and Routing \
         (`(other)`: names the config does not list)",
    ),
    (
        "gateway_bytes",
        "Gateway bytes from runtime reports, by configured client, Routing and direction \
         (up: from the client, down: to it; `(other)`: names the config does not list)",
    ),
];

/// One client's traffic on one Routing in a report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Requests.
    pub requests: u64,
    /// Bytes read from the client.
    pub bytes_up: u64,
    /// Bytes written to the client.
    pub bytes_down: u64,
}

impl Traffic {
    fn add(&mut self, o: Traffic) {
        self.requests = self.requests.saturating_add(o.requests);
        self.bytes_up = self.bytes_up.saturating_add(o.bytes_up);
        self.bytes_down = self.bytes_down.saturating_add(o.bytes_down);
    }

    fn minus(self, o: Traffic) -> Traffic {
        Traffic {
            requests: self.requests.saturating_sub(o.requests),
            bytes_up: self.bytes_up.saturating_sub(o.bytes_up),
            bytes_down: self.bytes_down.saturating_sub(o.bytes_down),
        }
    }

    fn is_zero(&self) -> bool {
        *self == Traffic::default()
    }
}

/// The traffic metrics of the control plane.
#[derive(Debug)]
pub struct TrafficMetrics {
    requests: Family<PairLabels, Counter>,
    bytes: Family<BytesLabels, Counter>,
    clients: HashSet<String>,
    routings: HashSet<String>,
    pairs: Mutex<HashSet<(String, String)>>,
}

impl TrafficMetrics {
    /// Metrics labelled with these configured client and Routing names.
    pub fn new<'a>(
        clients: impl IntoIterator<Item = &'a str>,
        routings: impl IntoIterator<Item = &'a str>,
    ) -> Self {
        Self {
            requests: Family::default(),
            bytes: Family::default(),
            clients: clients.into_iter().map(str::to_owned).collect(),
            routings: routings.into_iter().map(str::to_owned).collect(),
            pairs: Mutex::new(HashSet::new()),
        }
    }

    /// Whether `name` is a configured client.
    pub fn is_client(&self, name: &str) -> bool {
        self.clients.contains(name)
    }

    /// Whether `name` is a configured Routing.
    pub fn is_routing(&self, name: &str) -> bool {
        self.routings.contains(name)
    }

    /// Registers the two families.
    pub fn register(&self, registry: &mut Registry) {
        register_all(registry, DOCS, [&self.requests, &self.bytes]);
    }

    /// Counts the usage of one accepted report.
    pub fn record(&self, usage: &[RoutingUsage]) {
        for u in usage {
            let routing = if self.routings.contains(&u.routing) {
                u.routing.as_str()
            } else {
                OTHER
            };
            let mut named = Traffic::default();
            for c in &u.clients {
                if self.clients.contains(&c.identity) {
                    named.add(c.traffic);
                    self.count(&c.identity, routing, c.traffic);
                }
            }
            self.count(OTHER, routing, u.traffic.minus(named));
        }
    }

    fn count(&self, client: &str, routing: &str, t: Traffic) {
        if t.is_zero() {
            return;
        }
        let (client, routing) = self.admit(client, routing);
        self.requests
            .get_or_create(&PairLabels {
                client: client.clone(),
                routing: routing.clone(),
            })
            .inc_by(t.requests);
        for (direction, n) in [("up", t.bytes_up), ("down", t.bytes_down)] {
            self.bytes
                .get_or_create(&BytesLabels {
                    client: client.clone(),
                    routing: routing.clone(),
                    direction,
                })
                .inc_by(n);
        }
    }

    /// The labels this pair is counted under: its own while the cap allows.
    fn admit(&self, client: &str, routing: &str) -> (String, String) {
        let key = (client.to_owned(), routing.to_owned());
        let mut pairs = self.pairs.lock();
        if pairs.contains(&key) || pairs.len() < MAX_PAIRS {
            pairs.insert(key.clone());
            return key;
        }
        (OTHER.to_owned(), OTHER.to_owned())
    }

    /// The requests counted for (client, routing) labels (tests).
    pub fn requests(&self, client: &str, routing: &str) -> u64 {
        self.requests
            .get_or_create(&PairLabels {
                client: client.into(),
                routing: routing.into(),
            })
            .get()
    }

    /// The bytes counted for (client, routing) labels: (up, down) (tests).
    pub fn bytes(&self, client: &str, routing: &str) -> (u64, u64) {
        let get = |direction| {
            self.bytes
                .get_or_create(&BytesLabels {
                    client: client.into(),
                    routing: routing.into(),
                    direction,
                })
                .get()
        };
        (get("up"), get("down"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controlplane::outcomes::ClientTraffic;

    fn t(requests: u64, bytes_up: u64, bytes_down: u64) -> Traffic {
        Traffic {
            requests,
            bytes_up,
            bytes_down,
        }
    }

    fn usage(routing: &str, total: Traffic, clients: &[(&str, Traffic)]) -> RoutingUsage {
        RoutingUsage {
            routing: routing.into(),
            traffic: total,
            clients: clients
                .iter()
                .map(|(identity, traffic)| ClientTraffic {
                    identity: (*identity).into(),
                    traffic: *traffic,
                })
                .collect(),
        }
    }

    #[test]
    fn named_clients_and_routings_get_labels_the_rest_is_other() {
        let m = TrafficMetrics::new(["alice"], ["r1"]);
        m.record(&[
            usage(
                "r1",
                t(10, 1000, 5000),
                &[("alice", t(4, 400, 2000)), ("open-user", t(5, 500, 2500))],
            ),
            usage("ghost", t(2, 20, 30), &[("alice", t(2, 20, 30))]),
        ]);
        assert_eq!(m.requests("alice", "r1"), 4);
        assert_eq!(m.bytes("alice", "r1"), (400, 2000));
        // The open-auth identity and the unlisted remainder.
        assert_eq!(m.requests(OTHER, "r1"), 6);
        assert_eq!(m.bytes(OTHER, "r1"), (600, 3000));
        assert_eq!(m.requests("alice", OTHER), 2);
        assert_eq!(m.bytes("alice", OTHER), (20, 30));
        assert_eq!(m.requests("open-user", "r1"), 0);
    }

    #[test]
    fn past_the_pair_cap_new_pairs_fold_into_other() {
        let names: Vec<String> = (0..=MAX_PAIRS).map(|i| format!("c{i}")).collect();
        let m = TrafficMetrics::new(names.iter().map(String::as_str), ["r1"]);
        for n in &names {
            m.record(&[usage("r1", t(1, 1, 1), &[(n, t(1, 1, 1))])]);
        }
        assert_eq!(m.pairs.lock().len(), MAX_PAIRS);
        assert_eq!(m.requests(&names[MAX_PAIRS], "r1"), 0);
        assert_eq!(m.requests(OTHER, OTHER), 1);
    }
}
