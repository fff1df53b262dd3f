//! How long each script call takes, per operation: a fixed-bucket histogram per
//! [`Script`] made of atomics only (a call records with a few relaxed adds: no lock, no
//! allocation), read by the controller's `/metrics`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::scripts::Script;

/// Upper bounds of the buckets, seconds (a last, unbounded bucket follows).
pub const SCRIPT_BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// The same bounds in nanoseconds (compared with a call's duration).
const BOUNDS_NANOS: [u64; 12] = [
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    1_000_000_000,
];

#[derive(Debug, Default)]
struct Timing {
    /// Calls per bucket (not cumulative); the last is above every bound.
    buckets: [AtomicU64; SCRIPT_BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
}

/// Per-operation latency of the script calls of one adapter (shared by its clones).
#[derive(Debug)]
pub struct ScriptTimings {
    per_script: [Timing; Script::ALL.len()],
}

impl Default for ScriptTimings {
    fn default() -> Self {
        Self {
            per_script: std::array::from_fn(|_| Timing::default()),
        }
    }
}

/// One operation's histogram as read: non-cumulative bucket counts (the last bucket
/// unbounded), their total and the sum of durations.
#[derive(Clone, Debug, PartialEq)]
pub struct ScriptTiming {
    /// The operation (the script's name: `extract`, `upsert`, `assign`, …).
    pub operation: &'static str,
    /// Calls per bucket of [`SCRIPT_BUCKETS`], then the calls above the last bound.
    pub buckets: [u64; SCRIPT_BUCKETS.len() + 1],
    /// Calls.
    pub count: u64,
    /// Sum of the calls' durations, seconds.
    pub sum_seconds: f64,
}

impl ScriptTimings {
    /// Records one call of `script` that took `took` (with its retry, if any).
    pub(crate) fn record(&self, script: Script, took: Duration) {
        let Some(t) = self.per_script.get(script as usize) else {
            return;
        };
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let i = BOUNDS_NANOS
            .iter()
            .position(|b| nanos <= *b)
            .unwrap_or(BOUNDS_NANOS.len());
        if let Some(b) = t.buckets.get(i) {
            b.fetch_add(1, Ordering::Relaxed);
        }
        t.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Every operation's histogram, in a fixed order (all operations, called or not).
    pub fn read(&self) -> Vec<ScriptTiming> {
        Script::ALL
            .iter()
            .zip(&self.per_script)
            .map(|(s, t)| {
                let buckets: [u64; SCRIPT_BUCKETS.len() + 1] =
                    std::array::from_fn(|i| t.buckets[i].load(Ordering::Relaxed));
                let nanos = t.sum_nanos.load(Ordering::Relaxed);
                ScriptTiming {
                    operation: s.name(),
                    count: buckets.iter().sum(),
                    buckets,
                    sum_seconds: Duration::from_nanos(nanos).as_secs_f64(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_land_in_their_bucket_per_operation() {
        let t = ScriptTimings::default();
        t.record(Script::Extract, Duration::from_micros(80));
        t.record(Script::Extract, Duration::from_millis(3));
        t.record(Script::Upsert, Duration::from_secs(2));
        let read = t.read();
        assert_eq!(read.len(), Script::ALL.len());
        let extract = read.iter().find(|r| r.operation == "extract").unwrap();
        assert_eq!(extract.count, 2);
        assert_eq!(extract.buckets[0], 1);
        assert_eq!(extract.buckets[5], 1);
        assert!((extract.sum_seconds - 0.00308).abs() < 1e-9);
        let upsert = read.iter().find(|r| r.operation == "upsert").unwrap();
        assert_eq!(upsert.buckets[SCRIPT_BUCKETS.len()], 1);
        assert_eq!(read.iter().map(|r| r.count).sum::<u64>(), 3);
    }
}
