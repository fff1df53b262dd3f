//! Gateway counters: plain atomics bumped on the request path, rendered in the
//! Prometheus text format on demand. Every label set is a fixed enum, never a user
//! value, proxy address or credential.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use proxy_pool_api::egress::EgressDenied;

use crate::error::GatewayError;
use crate::snapshot::live::LiveSnapshot;

/// Listener kinds (label `listener`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerKind {
    /// HTTP proxy listener.
    Http,
    /// SOCKS5 listener.
    Socks5,
}

const REASONS: [&str; 20] = [
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
    "egress-denied",
];

/// All counters.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Client connections accepted, per listener.
    pub connections: [AtomicU64; 2],
    /// Client connections open now.
    pub open_connections: AtomicI64,
    /// Client connections refused at the connection cap.
    pub connections_refused: AtomicU64,
    /// CONNECT tunnels established (HTTP and SOCKS5).
    pub tunnels: AtomicU64,
    /// Tunnels closed at their proxy's lease cut (this worker was cut off from the
    /// control plane past its lease; nothing goes through a proxy after it).
    pub tunnels_lease_cut: AtomicU64,
    /// Plain HTTP requests forwarded.
    pub forwarded: AtomicU64,
    /// Forwarded requests served on a pooled upstream connection.
    pub pool_reused: AtomicU64,
    /// Attempts retried on another proxy.
    pub retries: AtomicU64,
    /// Sticky sessions moved to another proxy.
    pub sessions_moved: AtomicU64,
    errors: [AtomicU64; REASONS.len()],
    egress_denied: [AtomicU64; EgressDenied::ALL.len()],
}

impl Metrics {
    /// Counts an accepted connection.
    pub fn accepted(&self, kind: ListenerKind) {
        self.connections[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a failed request by reason (and an egress refusal by its own reason).
    pub fn error(&self, err: &GatewayError) {
        if let GatewayError::EgressDenied(why) = err
            && let Some(i) = EgressDenied::ALL.iter().position(|r| r == why)
        {
            self.egress_denied[i].fetch_add(1, Ordering::Relaxed);
        }
        let reason = err.reason();
        if let Some(i) = REASONS.iter().position(|r| *r == reason) {
            self.errors[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a vendor proxy address the egress policy refused at dial time.
    pub fn egress_refused(&self, why: EgressDenied) {
        if let Some(i) = EgressDenied::ALL.iter().position(|r| *r == why) {
            self.egress_denied[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Egress refusals counted for `why`.
    pub fn egress_denied_for(&self, why: EgressDenied) -> u64 {
        EgressDenied::ALL
            .iter()
            .position(|r| *r == why)
            .map_or(0, |i| self.egress_denied[i].load(Ordering::Relaxed))
    }

    /// Failures counted for `reason`.
    pub fn errors_for(&self, reason: &str) -> u64 {
        REASONS
            .iter()
            .position(|r| *r == reason)
            .map_or(0, |i| self.errors[i].load(Ordering::Relaxed))
    }

    /// Prometheus text exposition.
    pub fn render(&self, outcomes_dropped: u64) -> String {
        let mut out = String::with_capacity(4096);
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut counter = |name: &str, help: &str, lines: &[(String, u64)]| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (labels, v) in lines {
                let _ = writeln!(out, "{name}{labels} {v}");
            }
        };
        counter(
            "gateway_connections_total",
            "Client connections accepted.",
            &[
                ("{listener=\"http\"}".into(), get(&self.connections[0])),
                ("{listener=\"socks5\"}".into(), get(&self.connections[1])),
            ],
        );
        // The counters without labels, each with its help text, in exposition order.
        let plain: [(&str, &str, &AtomicU64); 7] = [
            (
                "gateway_connections_refused_total",
                "Client connections closed at the connection cap.",
                &self.connections_refused,
            ),
            (
                "gateway_tunnels_total",
                "CONNECT tunnels established.",
                &self.tunnels,
            ),
            (
                "gateway_tunnels_lease_cut_total",
                "Open tunnels closed at their proxy's lease end.",
                &self.tunnels_lease_cut,
            ),
            (
                "gateway_forwarded_total",
                "Plain HTTP requests forwarded.",
                &self.forwarded,
            ),
            (
                "gateway_upstream_pool_reused_total",
                "Forwarded requests served on a pooled upstream connection.",
                &self.pool_reused,
            ),
            (
                "gateway_retries_total",
                "Attempts retried on another proxy.",
                &self.retries,
            ),
            (
                "gateway_sessions_moved_total",
                "Sticky sessions moved to another proxy.",
                &self.sessions_moved,
            ),
        ];
        for (name, help, c) in plain {
            counter(name, help, &[(String::new(), get(c))]);
        }
        counter(
            "gateway_outcomes_dropped_total",
            "Outcome observations dropped at the full queue.",
            &[(String::new(), outcomes_dropped)],
        );
        let errors: Vec<_> = REASONS
            .iter()
            .zip(&self.errors)
            .map(|(r, c)| (format!("{{reason=\"{r}\"}}"), get(c)))
            .collect();
        counter(
            "gateway_request_errors_total",
            "Requests ended early, by reason.",
            &errors,
        );
        let egress: Vec<_> = EgressDenied::ALL
            .iter()
            .zip(&self.egress_denied)
            .map(|(r, c)| (format!("{{reason=\"{}\"}}", r.as_str()), get(c)))
            .collect();
        counter(
            "gateway_egress_denied_total",
            "Requests refused by the egress policy, by what the address or port was.",
            &egress,
        );
        let _ = writeln!(
            out,
            "# HELP gateway_open_connections Client connections open now.\n# TYPE gateway_open_connections gauge\ngateway_open_connections {}",
            self.open_connections.load(Ordering::Relaxed)
        );
        out
    }
}

/// Prometheus text of the installed snapshot at `now`: `gateway_snapshot_version` and
/// `gateway_snapshot_age_seconds` (since the controller generated it; 0 if its clock is
/// ahead). Without a snapshot both are declared with no sample, so "absent" alerts fire.
/// One atomic load and a few bytes per scrape; nothing on the request path.
pub fn render_snapshot(snap: Option<&LiveSnapshot>, now: std::time::SystemTime) -> String {
    let mut out = String::with_capacity(320);
    let _ = writeln!(
        out,
        "# HELP gateway_snapshot_version Version of the snapshot in service.\n# TYPE gateway_snapshot_version gauge"
    );
    if let Some(s) = snap {
        let _ = writeln!(out, "gateway_snapshot_version {}", s.version);
    }
    let _ = writeln!(
        out,
        "# HELP gateway_snapshot_age_seconds Seconds since the controller generated the snapshot in service.\n# TYPE gateway_snapshot_age_seconds gauge"
    );
    if let Some(s) = snap {
        let age = now
            .duration_since(s.generated_at)
            .map_or(0.0, |d| d.as_secs_f64());
        let _ = writeln!(out, "gateway_snapshot_age_seconds {age:.3}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_gauges_show_version_and_age() {
        use crate::capacity::CapacityRegistry;
        use crate::clock::{from_unix_ms, now_ms, to_model_ms, unix_ms};
        use crate::snapshot::fixture;
        use std::time::Duration;
        // A whole millisecond, as snapshot times are.
        let now = from_unix_ms(now_ms());
        assert!(
            !render_snapshot(None, now)
                .lines()
                .any(|l| l.starts_with("gateway_snapshot")),
            "no sample without a snapshot"
        );
        let ms = |t| to_model_ms(unix_ms(t));
        let mut snap = fixture::input(42, vec![fixture::routing("all")], vec![]);
        snap.snapshot.header.generated_at_ms = ms(now - Duration::from_millis(2500));
        snap.snapshot.header.valid_until_ms = ms(now + Duration::from_secs(60));
        let live = LiveSnapshot::build(snap, &CapacityRegistry::default(), now).unwrap();
        let text = render_snapshot(Some(&live), now);
        assert!(text.contains("gateway_snapshot_version 42\n"), "{text}");
        assert!(
            text.contains("gateway_snapshot_age_seconds 2.500\n"),
            "{text}"
        );
        let skewed = render_snapshot(Some(&live), now - Duration::from_secs(10));
        assert!(
            skewed.contains("gateway_snapshot_age_seconds 0.000\n"),
            "{skewed}"
        );
    }

    /// The exposition text of the plain counters, to the byte, and the order of all.
    #[test]
    fn exposition_text_is_stable() {
        let m = Metrics::default();
        m.accepted(ListenerKind::Socks5);
        for (i, c) in [
            &m.connections_refused,
            &m.tunnels,
            &m.tunnels_lease_cut,
            &m.forwarded,
            &m.pool_reused,
            &m.retries,
            &m.sessions_moved,
        ]
        .into_iter()
        .enumerate()
        {
            c.store(i as u64 + 1, Ordering::Relaxed);
        }
        m.open_connections.store(-1, Ordering::Relaxed);
        let text = m.render(8);
        let head = "\
# HELP gateway_connections_total Client connections accepted.
# TYPE gateway_connections_total counter
gateway_connections_total{listener=\"http\"} 0
gateway_connections_total{listener=\"socks5\"} 1
# HELP gateway_connections_refused_total Client connections closed at the connection cap.
# TYPE gateway_connections_refused_total counter
gateway_connections_refused_total 1
# HELP gateway_tunnels_total CONNECT tunnels established.
# TYPE gateway_tunnels_total counter
gateway_tunnels_total 2
# HELP gateway_tunnels_lease_cut_total Open tunnels closed at their proxy's lease end.
# TYPE gateway_tunnels_lease_cut_total counter
gateway_tunnels_lease_cut_total 3
# HELP gateway_forwarded_total Plain HTTP requests forwarded.
# TYPE gateway_forwarded_total counter
gateway_forwarded_total 4
# HELP gateway_upstream_pool_reused_total Forwarded requests served on a pooled upstream connection.
# TYPE gateway_upstream_pool_reused_total counter
gateway_upstream_pool_reused_total 5
# HELP gateway_retries_total Attempts retried on another proxy.
# TYPE gateway_retries_total counter
gateway_retries_total 6
# HELP gateway_sessions_moved_total Sticky sessions moved to another proxy.
# TYPE gateway_sessions_moved_total counter
gateway_sessions_moved_total 7
# HELP gateway_outcomes_dropped_total Outcome observations dropped at the full queue.
# TYPE gateway_outcomes_dropped_total counter
gateway_outcomes_dropped_total 8
# HELP gateway_request_errors_total Requests ended early, by reason.
# TYPE gateway_request_errors_total counter
gateway_request_errors_total{reason=\"head-too-large\"} 0
";
        assert!(text.starts_with(head), "{text}");
        let tail = "\
# HELP gateway_open_connections Client connections open now.
# TYPE gateway_open_connections gauge
gateway_open_connections -1
";
        assert!(text.ends_with(tail), "{text}");
        let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE")).collect();
        assert_eq!(types.len(), 12, "{text}");
        let samples = text.lines().filter(|l| !l.starts_with('#')).count();
        assert_eq!(
            samples,
            11 + REASONS.len() + EgressDenied::ALL.len(),
            "{text}"
        );
        assert!(text.contains(
            "# HELP gateway_egress_denied_total Requests refused by the egress policy, by what the address or port was.\n# TYPE gateway_egress_denied_total counter\n"
        ));
    }

    #[test]
    fn every_error_reason_has_a_counter() {
        let m = Metrics::default();
        m.error(&GatewayError::NoCapacity);
        m.error(&GatewayError::Stale);
        assert_eq!(m.errors_for("no-capacity"), 1);
        let text = m.render(3);
        assert!(text.contains("gateway_request_errors_total{reason=\"snapshot-stale\"} 1"));
        assert!(text.contains("gateway_outcomes_dropped_total 3"));
    }
}
