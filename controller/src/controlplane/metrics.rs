//! Metrics of the control plane: connected workers by kind, per-worker snapshot
//! version and age (label `worker`: the IDs of the registered fleet, gone with the
//! worker), push → ACK latency, negative ACKs, and the expiry of the certificates the
//! control plane serves mTLS with. Registered by [`ControlPlane::register_metrics`]
//! and [`register_certificates`].
//!
//! Costs: a stream opening or closing updates a small map (one per stream, not per
//! message); an ACK takes the registry's lock it takes anyway plus one histogram
//! observation; the per-worker series are read at scrape time.
//!
//! [`ControlPlane::register_metrics`]: super::ControlPlane::register_metrics

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::Shared;
use crate::metrics::register_all;

/// A control-plane client: `gateway` (a worker) or `checker`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClientKind {
    /// A gateway (`WatchSnapshots` stream).
    Gateway,
    /// A checker (`StreamTasks` stream).
    Checker,
}

impl ClientKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Gateway => "gateway",
            Self::Checker => "checker",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CertificateLabels {
    certificate: &'static str,
}

/// Exposition name and help text of each metric [`ControlPlaneMetrics::register`]
/// registers, in order.
const DOCS: [(&str, &str); 3] = [
    (
        "controlplane_connected_workers",
        "Workers with an open control-plane stream, by kind (gateway, checker)",
    ),
    (
        "controlplane_snapshot_ack_duration_seconds",
        "Time from sending a snapshot update to a worker to its positive ACK",
    ),
    (
        "controlplane_snapshot_nacks",
        "Snapshot updates a worker refused (negative ACK: its runtime fence closes)",
    ),
];

/// Buckets of the push → ACK latency, seconds.
const ACK_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// Open streams per client.
#[derive(Debug, Default)]
struct Connections {
    open: Mutex<HashMap<(ClientKind, String), u32>>,
    gauge: Family<KindLabels, Gauge>,
}

impl Connections {
    /// Recounts the distinct clients of `kind` with a stream open.
    fn publish(&self, open: &HashMap<(ClientKind, String), u32>, kind: ClientKind) {
        let n = open.keys().filter(|(k, _)| *k == kind).count();
        self.gauge
            .get_or_create(&KindLabels {
                kind: kind.as_str(),
            })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
}

/// Held while a client's stream is open: dropping it counts the stream closed.
#[derive(Debug)]
pub struct StreamGuard {
    connections: Arc<Connections>,
    key: (ClientKind, String),
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let mut open = self.connections.open.lock();
        if let Some(n) = open.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.key);
            }
        }
        self.connections.publish(&open, self.key.0);
    }
}

/// The control plane's metrics. Cheap to clone (clones share their values).
#[derive(Clone, Debug)]
pub struct ControlPlaneMetrics {
    connections: Arc<Connections>,
    ack_duration: Histogram,
    nacks: Counter,
}

impl Default for ControlPlaneMetrics {
    fn default() -> Self {
        let connections = Arc::new(Connections::default());
        for kind in [ClientKind::Gateway, ClientKind::Checker] {
            connections.publish(&HashMap::new(), kind);
        }
        Self {
            connections,
            ack_duration: Histogram::new(ACK_BUCKETS),
            nacks: Counter::default(),
        }
    }
}

impl ControlPlaneMetrics {
    /// Registers the metrics above (not the per-worker collector).
    pub(super) fn register(&self, registry: &mut Registry) {
        register_all(
            registry,
            DOCS,
            [&self.connections.gauge, &self.ack_duration, &self.nacks],
        );
    }

    /// Counts a stream of client `id` of `kind` open until the guard drops.
    pub fn stream_opened(&self, kind: ClientKind, id: &str) -> StreamGuard {
        let key = (kind, id.to_owned());
        let mut open = self.connections.open.lock();
        *open.entry(key.clone()).or_default() += 1;
        self.connections.publish(&open, kind);
        drop(open);
        StreamGuard {
            connections: self.connections.clone(),
            key,
        }
    }

    /// A positive ACK came `took` after its update was sent.
    pub fn acked(&self, took: Duration) {
        self.ack_duration.observe(took.as_secs_f64());
    }

    /// A negative ACK came.
    pub fn nacked(&self) {
        self.nacks.inc();
    }

    /// Workers with a stream of `kind` open.
    pub fn connected(&self, kind: ClientKind) -> i64 {
        self.connections
            .gauge
            .get_or_create(&KindLabels {
                kind: kind.as_str(),
            })
            .get()
    }
}

/// The per-worker snapshot series, read from the control plane at scrape time.
#[derive(Debug)]
pub(super) struct WorkerSnapshots(pub(super) Arc<Shared>);

impl Collector for WorkerSnapshots {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let status = self.0.registry.snapshot_status();
        if status.is_empty() {
            // No worker, no series: a family without series is left out, as the
            // registry's own are.
            return Ok(());
        }
        per_worker(
            &mut encoder,
            "controlplane_snapshot_version",
            "The latest snapshot version published for the worker",
            status.iter().map(|s| {
                (
                    s.worker.as_str(),
                    u64_value(self.0.publisher.version(&s.worker)),
                )
            }),
        )?;
        per_worker(
            &mut encoder,
            "controlplane_acked_snapshot_version",
            "The latest snapshot version the worker accepted in its session (0: none)",
            status
                .iter()
                .map(|s| (s.worker.as_str(), u64_value(s.accepted_version))),
        )?;
        per_worker(
            &mut encoder,
            "controlplane_snapshot_age_seconds",
            "Time since the snapshot the worker last accepted was sent to it (since its \
             session began when it accepted none)",
            status
                .iter()
                .map(|s| (s.worker.as_str(), s.age.as_secs_f64())),
        )
    }
}

/// One gauge family labelled `worker`.
fn per_worker<'a>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl Iterator<Item = (&'a str, f64)>,
) -> Result<(), std::fmt::Error> {
    let gauge = ConstGauge::new(0f64);
    let mut family = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
    for (worker, value) in rows {
        let labels = [("worker", worker)];
        ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A version as a sample value (exact below 2^53).
#[allow(clippy::cast_precision_loss)]
fn u64_value(v: u64) -> f64 {
    v as f64
}

/// Registers `certificate_expiry_timestamp_seconds{certificate}`: the `notAfter` of
/// the controller's serving certificate (`controller`) and of the client CA
/// (`ca`; the earliest one of a bundle), as Unix seconds. A PEM that does not parse
/// leaves its series out (the TLS set-up reports it).
pub fn register_certificates(registry: &mut Registry, cert_pem: &str, client_ca_pem: &str) {
    let family = Family::<CertificateLabels, Gauge>::default();
    for (certificate, pem) in [("controller", cert_pem), ("ca", client_ca_pem)] {
        if let Some(not_after) = earliest_not_after(pem) {
            family
                .get_or_create(&CertificateLabels { certificate })
                .set(not_after);
        }
    }
    registry.register(
        "certificate_expiry_timestamp_seconds",
        "When a certificate the control plane serves mTLS with expires (Unix seconds)",
        family,
    );
}

/// The earliest `notAfter` (Unix seconds) among the certificates of `pem`; for a
/// chain or bundle the first to expire is the one that matters.
fn earliest_not_after(pem: &str) -> Option<i64> {
    x509_parser::pem::Pem::iter_from_buffer(pem.as_bytes())
        .filter_map(Result::ok)
        .filter_map(|p| {
            p.parse_x509()
                .ok()
                .map(|c| c.validity().not_after.timestamp())
        })
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connected_counts_distinct_workers_with_an_open_stream() {
        let m = ControlPlaneMetrics::default();
        assert_eq!(m.connected(ClientKind::Gateway), 0);
        let a1 = m.stream_opened(ClientKind::Gateway, "gw-a");
        let a2 = m.stream_opened(ClientKind::Gateway, "gw-a");
        let b = m.stream_opened(ClientKind::Gateway, "gw-b");
        let c = m.stream_opened(ClientKind::Checker, "gw-a");
        assert_eq!(m.connected(ClientKind::Gateway), 2);
        assert_eq!(m.connected(ClientKind::Checker), 1);
        drop(a1);
        assert_eq!(m.connected(ClientKind::Gateway), 2);
        drop((a2, b, c));
        assert_eq!(m.connected(ClientKind::Gateway), 0);
        assert_eq!(m.connected(ClientKind::Checker), 0);
    }

    #[test]
    fn certificate_expiry_is_the_earliest_not_after() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["a.test".to_owned()]).unwrap();
        params.not_after = rcgen::date_time_ymd(2031, 1, 2);
        let late = params.self_signed(&key).unwrap().pem();
        params.not_after = rcgen::date_time_ymd(2030, 1, 2);
        let early = params.self_signed(&key).unwrap().pem();
        let bundle = format!("{late}{early}");
        assert_eq!(earliest_not_after(&bundle), Some(1_893_542_400));
        assert_eq!(earliest_not_after("not a certificate"), None);
    }
}
