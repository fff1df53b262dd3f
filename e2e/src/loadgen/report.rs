//! What a run measured, as text (a human's table) or JSON (the bench harness).

use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

use super::{LoadConfig, Mode, OpError, Pacing};

/// Percentiles of one histogram, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50_us: u64,
    /// 90th percentile.
    pub p90_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// 99.9th percentile.
    pub p999_us: u64,
    /// Largest.
    pub max_us: u64,
    /// Mean.
    pub mean_us: f64,
}

impl Percentiles {
    fn of(h: &Histogram<u64>) -> Self {
        Self {
            count: h.len(),
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
            mean_us: h.mean(),
        }
    }
}

/// The result of one [`run`](super::run).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// What each operation was.
    pub mode: Mode,
    /// Closed or open loop (with its rate).
    pub pacing: Pacing,
    /// Concurrent connections.
    pub connections: usize,
    /// Operations done: `ok` + every error.
    pub ops: u64,
    /// Operations that succeeded (2xx through the whole chain).
    pub ok: u64,
    /// Failed operations by kind (`connect`, `timeout`, `status-502`, …).
    pub errors: BTreeMap<String, u64>,
    /// Wall time from the first send to the last completion.
    pub elapsed_s: f64,
    /// Successful operations per second of `elapsed`.
    pub ok_per_s: f64,
    /// Latency of successful operations from their **intended** send time (open loop:
    /// coordinated omission corrected; closed loop: equal to `service`).
    pub latency: Percentiles,
    /// Latency from the actual send time.
    pub service: Percentiles,
    /// The latest any operation was sent after its intended time (open loop), µs.
    pub max_send_lag_us: u64,
    #[serde(skip)]
    latency_hist: Histogram<u64>,
}

impl Report {
    pub(crate) fn new(
        config: &LoadConfig,
        ok: u64,
        errors: BTreeMap<OpError, u64>,
        elapsed: Duration,
        latency: Histogram<u64>,
        service: Histogram<u64>,
        max_lag: Duration,
    ) -> Self {
        let failed: u64 = errors.values().sum();
        let secs = elapsed.as_secs_f64();
        Self {
            mode: config.mode,
            pacing: config.pacing,
            connections: config.connections,
            ops: ok + failed,
            ok,
            errors: errors.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            elapsed_s: secs,
            ok_per_s: if secs > 0.0 { ok as f64 / secs } else { 0.0 },
            latency: Percentiles::of(&latency),
            service: Percentiles::of(&service),
            max_send_lag_us: u64::try_from(max_lag.as_micros()).unwrap_or(u64::MAX),
            latency_hist: latency,
        }
    }

    /// Failed operations.
    pub fn failed(&self) -> u64 {
        self.errors.values().sum()
    }

    /// Successful operations whose (intended-time) latency was at least `us`.
    pub fn count_at_least_us(&self, us: u64) -> u64 {
        self.latency_hist
            .iter_recorded()
            .filter(|v| v.value_iterated_to() >= us)
            .map(|v| v.count_at_value())
            .sum()
    }

    /// A human-readable table.
    pub fn text(&self) -> String {
        let pacing = match self.pacing {
            Pacing::Closed => "closed loop".to_owned(),
            Pacing::Open { rate } => format!("open loop at {rate:.0}/s"),
        };
        let mut out = format!(
            "mode {:?}, {pacing}, {} connections: {} ops, {} ok, {} failed in {:.3} s = {:.0} ok/s\n",
            self.mode,
            self.connections,
            self.ops,
            self.ok,
            self.failed(),
            self.elapsed_s,
            self.ok_per_s
        );
        out.push_str("             p50       p90       p99     p99.9       max  (µs)\n");
        for (name, p) in [("latency", &self.latency), ("service", &self.service)] {
            out.push_str(&format!(
                "{name:8} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
                p.p50_us, p.p90_us, p.p99_us, p.p999_us, p.max_us
            ));
        }
        if let Pacing::Open { .. } = self.pacing {
            out.push_str(&format!("max send lag {} µs\n", self.max_send_lag_us));
        }
        for (kind, n) in &self.errors {
            out.push_str(&format!("error {kind}: {n}\n"));
        }
        out
    }
}
