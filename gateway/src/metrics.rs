//! Gateway metrics, all `proxy_pool_gateway_…` in one prometheus-client registry.
//!
//! Hot path: every counter a request touches is a prometheus-client [`Counter`] (an
//! `Arc<AtomicU64>`) whose handle was resolved once — per listener, per error reason,
//! per direction when the gateway starts, per Routing and per upstream when a snapshot
//! is built ([`Breakdown`]) — and the per-request histograms are the runtime's
//! lock-free [`AtomicHistogram`]. A request does `fetch_add`s only: no lock, no label
//! lookup, no allocation. What is read at scrape time (snapshot state, the outcome
//! queue, usage, certificate expiry) is encoded by [`StateCollector`].
//!
//! Every label value is a fixed set or a configured name (Routing, upstream, worker
//! index), never a client, a proxy address or a credential.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;
use proxy_pool_api::egress::EgressDenied;
use proxy_pool_runtime::telemetry::histogram::AtomicHistogram;

use crate::clock::now_ms;
use crate::error::GatewayError;
use crate::limits::LimitKind;
use crate::outcome::OutcomeSink;
use crate::snapshot::SnapshotHandle;
use crate::usage::UsageRecorder;

/// Listener kinds (label `listener`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerKind {
    /// HTTP proxy listener.
    Http,
    /// SOCKS5 listener.
    Socks5,
}

impl ListenerKind {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Socks5 => "socks5",
        }
    }
}

const LISTENERS: [ListenerKind; 2] = [ListenerKind::Http, ListenerKind::Socks5];

/// Values of `request_errors_total{reason}` (every [`GatewayError::reason`]).
pub const REASONS: [&str; 25] = [
    "head-too-large",
    "bad-request",
    "unsupported",
    "auth-required",
    "auth-failed",
    "client-io",
    "client-timeout",
    "no-snapshot",
    "snapshot-stale",
    "no-routing",
    "no-capacity",
    "shutting-down",
    "upstream-dial-failed",
    "upstream-timeout",
    "upstream-handshake-failed",
    "target-unreachable",
    "upstream-io",
    "upstream-bad-response",
    "auth-throttled",
    "bad-parameter",
    "no-matching-proxy",
    "egress-denied",
    "client-connection-limit",
    "client-rate-limit",
    "quota-exceeded",
];

/// Direction of relayed bytes (label `direction` of `bytes_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the client to the vendor proxy (and the target behind it).
    ClientToUpstream,
    /// From the vendor proxy back to the client.
    UpstreamToClient,
}

impl Direction {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClientToUpstream => "client-to-upstream",
            Self::UpstreamToClient => "upstream-to-client",
        }
    }
}

const DIRECTIONS: [Direction; 2] = [Direction::ClientToUpstream, Direction::UpstreamToClient];

/// A one-label set with a fixed value.
type Fixed = [(&'static str, &'static str); 1];
/// A one-label set with a configured name.
type Named = [(&'static str, String); 1];

/// Counter handles of one label of `family`, resolved now, in `values` order.
fn resolve<const N: usize>(
    family: &Family<Fixed, Counter>,
    label: &'static str,
    values: [&'static str; N],
) -> [Counter; N] {
    values.map(|v| family.get_or_create_owned(&[(label, v)]))
}

/// The counters and histograms the request path bumps.
#[derive(Debug)]
pub struct Metrics {
    connections: [Counter; 2],
    /// Client connections open now.
    pub open_connections: Gauge<i64, AtomicI64>,
    /// Client connections refused at the connection caps.
    pub connections_refused: Counter,
    tunnels: [Counter; 2],
    /// Tunnels closed at their proxy's lease cut (this worker was cut off from the
    /// control plane past its lease; nothing goes through a proxy after it).
    pub tunnels_lease_cut: Counter,
    /// Plain HTTP requests forwarded.
    pub forwarded: Counter,
    /// Forwarded requests served on a pooled upstream connection.
    pub pool_reused: Counter,
    /// Attempts retried on another proxy.
    pub retries: Counter,
    /// Sticky sessions moved to another proxy.
    pub sessions_moved: Counter,
    errors: [Counter; REASONS.len()],
    egress_denied: [Counter; EgressDenied::ALL.len()],
    limit_refusals: [Counter; LimitKind::ALL.len()],
    bytes: [Counter; 2],
    /// Plain HTTP forwards, from the request head to the end of the response.
    pub request_duration: AtomicHistogram,
    /// Tunnels, from established to closed.
    pub tunnel_duration: AtomicHistogram,
    /// Successful TCP connects to vendor proxies.
    pub dial_duration: AtomicHistogram,
    /// Successful vendor proxy handshakes (HTTP CONNECT or SOCKS5), after the dial.
    pub handshake_duration: AtomicHistogram,
}

impl Default for Metrics {
    /// Metrics registered nowhere (tests, benches).
    fn default() -> Self {
        Self::register(&mut Registry::default())
    }
}

impl Metrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let connections = Family::<Fixed, Counter>::default();
        let tunnels = Family::<Fixed, Counter>::default();
        let errors = Family::<Fixed, Counter>::default();
        let egress = Family::<Fixed, Counter>::default();
        let bytes = Family::<Fixed, Counter>::default();
        let refusals = Family::<Fixed, Counter>::default();
        let listeners = LISTENERS.map(ListenerKind::as_str);
        let metrics = Self {
            connections: resolve(&connections, "listener", listeners),
            open_connections: Gauge::default(),
            connections_refused: Counter::default(),
            tunnels: resolve(&tunnels, "listener", listeners),
            tunnels_lease_cut: Counter::default(),
            forwarded: Counter::default(),
            pool_reused: Counter::default(),
            retries: Counter::default(),
            sessions_moved: Counter::default(),
            errors: resolve(&errors, "reason", REASONS),
            egress_denied: resolve(&egress, "reason", EgressDenied::ALL.map(|r| r.as_str())),
            limit_refusals: resolve(&refusals, "reason", LimitKind::ALL.map(LimitKind::reason)),
            bytes: resolve(&bytes, "direction", DIRECTIONS.map(Direction::as_str)),
            request_duration: AtomicHistogram::durations(),
            tunnel_duration: AtomicHistogram::long_durations(),
            dial_duration: AtomicHistogram::durations(),
            handshake_duration: AtomicHistogram::durations(),
        };
        let r = registry;
        r.register("connections", "Client connections accepted", connections);
        r.register(
            "client_limit_refusals",
            "Requests refused at a client's gatewayLimits share (or its exhausted daily quota)",
            refusals,
        );
        r.register(
            "connections_refused",
            "Client connections closed at the connection caps (in total and per source)",
            metrics.connections_refused.clone(),
        );
        r.register(
            "open_connections",
            "Client connections open now",
            metrics.open_connections.clone(),
        );
        r.register(
            "tunnels",
            "Tunnels established (HTTP CONNECT and SOCKS5)",
            tunnels,
        );
        r.register(
            "tunnels_lease_cut",
            "Open tunnels closed at their proxy's lease end",
            metrics.tunnels_lease_cut.clone(),
        );
        r.register(
            "forwarded",
            "Plain HTTP requests forwarded",
            metrics.forwarded.clone(),
        );
        r.register(
            "upstream_pool_reused",
            "Forwarded requests served on a pooled upstream connection",
            metrics.pool_reused.clone(),
        );
        r.register(
            "retries",
            "Attempts retried on another proxy",
            metrics.retries.clone(),
        );
        r.register(
            "sessions_moved",
            "Sticky sessions moved to another proxy",
            metrics.sessions_moved.clone(),
        );
        r.register("request_errors", "Requests ended early, by reason", errors);
        r.register(
            "egress_denied",
            "Requests refused by the egress policy, by what the address or port was",
            egress,
        );
        r.register(
            "bytes",
            "Bytes relayed through tunnels and plain HTTP forwards, by direction",
            bytes,
        );
        r.register(
            "request_duration_seconds",
            "Plain HTTP forwards, from the request head to the end of the response",
            metrics.request_duration.clone(),
        );
        r.register(
            "tunnel_duration_seconds",
            "Tunnels, from established to closed",
            metrics.tunnel_duration.clone(),
        );
        r.register(
            "upstream_dial_duration_seconds",
            "Successful TCP connects to vendor proxies",
            metrics.dial_duration.clone(),
        );
        r.register(
            "upstream_handshake_duration_seconds",
            "Successful vendor proxy handshakes (HTTP CONNECT or SOCKS5) after the connect",
            metrics.handshake_duration.clone(),
        );
        metrics
    }

    /// Counts an accepted connection.
    pub fn accepted(&self, kind: ListenerKind) {
        self.connections[kind as usize].inc();
    }

    /// Counts an established tunnel.
    pub fn tunnel(&self, kind: ListenerKind) {
        self.tunnels[kind as usize].inc();
    }

    /// Counts `n` bytes relayed in `direction`.
    pub fn relayed(&self, direction: Direction, n: u64) {
        if n > 0 {
            self.bytes[direction as usize].inc_by(n);
        }
    }

    /// Bytes relayed in `direction` so far.
    pub fn bytes(&self, direction: Direction) -> u64 {
        self.bytes[direction as usize].get()
    }

    /// Counts a failed request by reason (and an egress refusal by its own reason).
    pub fn error(&self, err: &GatewayError) {
        if let GatewayError::EgressDenied(why) = err {
            self.egress_refused(*why);
        }
        if let GatewayError::ClientLimit(kind) = err {
            self.limit_refusals[*kind as usize].inc();
        }
        let reason = err.reason();
        if let Some(i) = REASONS.iter().position(|r| *r == reason) {
            self.errors[i].inc();
        }
    }

    /// Counts a vendor proxy address the egress policy refused at dial time.
    pub fn egress_refused(&self, why: EgressDenied) {
        if let Some(i) = EgressDenied::ALL.iter().position(|r| *r == why) {
            self.egress_denied[i].inc();
        }
    }

    /// Egress refusals counted for `why`.
    pub fn egress_denied_for(&self, why: EgressDenied) -> u64 {
        EgressDenied::ALL
            .iter()
            .position(|r| *r == why)
            .map_or(0, |i| self.egress_denied[i].get())
    }

    /// Refusals at a client limit of `kind` so far.
    pub fn limit_refusals(&self, kind: LimitKind) -> u64 {
        self.limit_refusals[kind as usize].get()
    }

    /// Failures counted for `reason`.
    pub fn errors_for(&self, reason: &str) -> u64 {
        REASONS
            .iter()
            .position(|r| *r == reason)
            .map_or(0, |i| self.errors[i].get())
    }
}

/// The counters of one Routing or one upstream: resolved when a snapshot is built,
/// held by its compiled routing / proxy entries (and by the requests using them, as a
/// plain reference: no reference count is touched per request), bumped by requests.
#[derive(Debug, Default)]
pub struct NamedCounters {
    /// Plain HTTP requests forwarded.
    pub requests: Counter,
    /// Tunnels established.
    pub tunnels: Counter,
    /// Failures: for a Routing, admitted requests and tunnels that failed; for an
    /// upstream, failed attempts on its proxies (retried ones included).
    pub errors: Counter,
}

#[derive(Debug, Clone, Default)]
struct NamedFamilies {
    requests: Family<Named, Counter>,
    tunnels: Family<Named, Counter>,
    errors: Family<Named, Counter>,
}

/// Per-Routing and per-upstream counters, by configured name. Families and the name
/// index are touched when a snapshot is built and at scrape time, never per request.
///
/// The counters of a name, once resolved, live as long as the process (`&'static`):
/// names come from configuration, so they are few, and a counter must outlive every
/// snapshot and request that refers to it anyway (series are never removed either).
#[derive(Debug, Clone, Default)]
pub struct Breakdown {
    inner: Arc<BreakdownInner>,
}

#[derive(Debug, Default)]
struct BreakdownInner {
    routing: NamedFamilies,
    upstream: NamedFamilies,
    /// Handles already resolved, by (label, name).
    resolved: Mutex<HashMap<(&'static str, String), &'static NamedCounters>>,
}

impl Breakdown {
    /// The counters of Routing `name`.
    pub fn routing(&self, name: &str) -> &'static NamedCounters {
        self.resolve("routing", name)
    }

    /// The counters of upstream `name`; `None` for a proxy without one (a local
    /// snapshot file may leave it empty).
    pub fn upstream(&self, name: &str) -> Option<&'static NamedCounters> {
        (!name.is_empty()).then(|| self.resolve("upstream", name))
    }

    fn resolve(&self, label: &'static str, name: &str) -> &'static NamedCounters {
        let mut resolved = self.inner.resolved.lock();
        if let Some(c) = resolved.get(&(label, name.to_owned())) {
            return c;
        }
        let families = if label == "routing" {
            &self.inner.routing
        } else {
            &self.inner.upstream
        };
        let labels = [(label, name.to_owned())];
        let counters: &'static NamedCounters = Box::leak(Box::new(NamedCounters {
            requests: families.requests.get_or_create_owned(&labels),
            tunnels: families.tunnels.get_or_create_owned(&labels),
            errors: families.errors.get_or_create_owned(&labels),
        }));
        resolved.insert((label, name.to_owned()), counters);
        counters
    }

    /// Registers the families (each appears once a snapshot names a Routing or an
    /// upstream).
    pub fn register(&self, registry: &mut Registry) {
        let (r, u) = (&self.inner.routing, &self.inner.upstream);
        registry.register(
            "routing_requests",
            "Plain HTTP requests forwarded, per Routing",
            r.requests.clone(),
        );
        registry.register(
            "routing_tunnels",
            "Tunnels established, per Routing",
            r.tunnels.clone(),
        );
        registry.register(
            "routing_errors",
            "Requests and tunnels admitted on a Routing that failed, per Routing",
            r.errors.clone(),
        );
        registry.register(
            "upstream_requests",
            "Plain HTTP requests forwarded, per upstream of the proxy used",
            u.requests.clone(),
        );
        registry.register(
            "upstream_tunnels",
            "Tunnels established, per upstream of the proxy used",
            u.tunnels.clone(),
        );
        registry.register(
            "upstream_errors",
            "Failed attempts on a proxy (dial, handshake, response), per upstream",
            u.errors.clone(),
        );
    }
}

/// What is read at scrape time: the snapshot's state, the connection cap, the
/// outcome queue, usage and the data-plane workers' accept counts.
#[derive(Debug)]
pub(crate) struct StateCollector {
    pub(crate) snapshots: SnapshotHandle,
    pub(crate) max_connections: usize,
    pub(crate) outcomes: OutcomeSink,
    pub(crate) usage: Arc<UsageRecorder>,
    /// Accepted connections per data-plane worker, by worker index.
    pub(crate) workers: Arc<Mutex<Vec<Counter>>>,
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: impl EncodeGaugeValue,
) -> Result<(), std::fmt::Error> {
    let g = ConstGauge::new(value);
    g.encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let c = ConstCounter::new(value);
    c.encode(encoder.encode_descriptor(name, help, None, MetricType::Counter)?)
}

impl Collector for StateCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let e = &mut encoder;
        let now = now_ms();
        let snap = self.snapshots.load();
        let stale = snap.as_ref().is_none_or(|s| s.is_stale(now));
        gauge(
            e,
            "snapshot_stale",
            "1 while new traffic is refused for want of a fresh snapshot (none yet, or past its staleness deadline)",
            u32::from(stale),
        )?;
        let age = self
            .snapshots
            .last_fresh_ms()
            .map_or(0.0, |at| now.saturating_sub(at) as f64 / 1000.0);
        gauge(
            e,
            "snapshot_age_seconds",
            "Seconds since the control plane last delivered or confirmed the snapshot (0 before the first)",
            age,
        )?;
        let version = snap.as_ref().map_or(0, |s| s.version);
        drop(snap);
        gauge(
            e,
            "snapshot_version",
            "Version of the snapshot in service (0 before the first)",
            version,
        )?;
        gauge(
            e,
            "max_connections",
            "Client connections this gateway serves at once (the cap)",
            self.max_connections,
        )?;
        counter(
            e,
            "outcomes_dropped",
            "Outcome observations dropped at the full queue",
            self.outcomes.dropped(),
        )?;
        let u = &self.usage;
        for (name, help, v) in [
            (
                "usage_requests",
                "Requests recorded for per-Routing usage",
                u.recorded(),
            ),
            (
                "usage_bytes_up",
                "Bytes read from client connections, metered per client and Routing (as of the last report)",
                u.bytes().0,
            ),
            (
                "usage_bytes_down",
                "Bytes written to client connections, metered per client and Routing (as of the last report)",
                u.bytes().1,
            ),
            (
                "usage_identities_dropped",
                "Requests whose client identity was not listed (per-Routing cap reached or identity too long)",
                u.identities_dropped(),
            ),
            (
                "usage_routings_dropped",
                "Requests not recorded because too many Routings were seen in one interval",
                u.routings_dropped(),
            ),
            (
                "usage_reports_lost",
                "Usage reports that could not be delivered to the controller",
                u.reports_lost(),
            ),
            (
                "usage_requests_lost",
                "Requests in usage reports that could not be delivered",
                u.requests_lost(),
            ),
        ] {
            counter(e, name, help, v)?;
        }
        {
            let mut m = e.encode_descriptor(
                "worker_connections",
                "Client connections accepted, per data-plane worker",
                None,
                MetricType::Counter,
            )?;
            for (i, c) in self.workers.lock().iter().enumerate() {
                c.encode(m.encode_family(&[("worker", i.to_string())])?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    fn text(registry: &Registry) -> String {
        let mut out = String::new();
        encode(&mut out, registry).unwrap();
        out
    }

    #[test]
    fn every_error_reason_has_a_counter() {
        let mut registry = Registry::with_prefix("proxy_pool_gateway");
        let m = Metrics::register(&mut registry);
        m.error(&GatewayError::NoCapacity);
        m.error(&GatewayError::Stale);
        m.error(&GatewayError::EgressDenied(EgressDenied::Loopback));
        assert_eq!(m.errors_for("no-capacity"), 1);
        assert_eq!(m.egress_denied_for(EgressDenied::Loopback), 1);
        let out = text(&registry);
        for line in [
            "proxy_pool_gateway_request_errors_total{reason=\"snapshot-stale\"} 1",
            "proxy_pool_gateway_request_errors_total{reason=\"head-too-large\"} 0",
            "proxy_pool_gateway_egress_denied_total{reason=\"loopback\"} 1",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} in\n{out}");
        }
        let samples = out
            .lines()
            .filter(|l| l.starts_with("proxy_pool_gateway_request_errors_total{"))
            .count();
        assert_eq!(samples, REASONS.len());
    }

    #[test]
    fn labelled_counters_are_resolved_once_and_shared() {
        let mut registry = Registry::default();
        let m = Metrics::register(&mut registry);
        m.accepted(ListenerKind::Socks5);
        m.tunnel(ListenerKind::Http);
        m.relayed(Direction::UpstreamToClient, 42);
        m.open_connections.inc();
        let out = text(&registry);
        for line in [
            "connections_total{listener=\"http\"} 0",
            "connections_total{listener=\"socks5\"} 1",
            "tunnels_total{listener=\"http\"} 1",
            "bytes_total{direction=\"upstream-to-client\"} 42",
            "bytes_total{direction=\"client-to-upstream\"} 0",
            "open_connections 1",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} in\n{out}");
        }
    }

    #[test]
    fn breakdown_handles_are_shared_by_name() {
        let mut registry = Registry::default();
        let b = Breakdown::default();
        b.register(&mut registry);
        assert!(b.upstream("").is_none());
        let (r1, r2) = (b.routing("eu"), b.routing("eu"));
        assert!(std::ptr::eq(r1, r2));
        r1.requests.inc();
        b.upstream("vendor-a").unwrap().errors.inc();
        let out = text(&registry);
        assert!(
            out.contains("routing_requests_total{routing=\"eu\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("upstream_errors_total{upstream=\"vendor-a\"} 1\n"),
            "{out}"
        );
        assert!(!out.contains("upstream_requests_total{routing"), "{out}");
    }

    #[test]
    fn snapshot_gauges_follow_the_handle() {
        use crate::snapshot::fixture;
        let snapshots = SnapshotHandle::new(std::time::Duration::from_secs(60));
        let (outcomes, _rx) = crate::outcome::queue(4);
        let mut registry = Registry::default();
        registry.register_collector(Box::new(StateCollector {
            snapshots: snapshots.clone(),
            max_connections: 7,
            outcomes,
            usage: Arc::default(),
            workers: Arc::default(),
        }));
        let before = text(&registry);
        for line in [
            "snapshot_stale 1",
            "snapshot_age_seconds 0.0",
            "snapshot_version 0",
            "max_connections 7",
        ] {
            assert!(before.lines().any(|l| l == line), "{line} in\n{before}");
        }
        snapshots
            .install(fixture::input(42, vec![fixture::routing("all")], vec![]))
            .unwrap();
        let after = text(&registry);
        for line in ["snapshot_stale 0", "snapshot_version 42"] {
            assert!(after.lines().any(|l| l == line), "{line} in\n{after}");
        }
        let age: f64 = after
            .lines()
            .find_map(|l| l.strip_prefix("snapshot_age_seconds "))
            .unwrap()
            .parse()
            .unwrap();
        assert!((0.0..5.0).contains(&age), "{age}");
    }
}
