//! Daily byte quotas of gateway clients (`clients[].gatewayLimits.dailyBytes`): the
//! fleet-wide bytes (up + down) each quota'd client used in the current UTC day, from
//! every gateway's runtime reports, counted once per (session, report sequence).
//!
//! One narrow port, [`DailyMeter`]: `record` adds one report's bytes (a replay, or any
//! report of a session not above the highest sequence already counted for it that day,
//! adds nothing) and answers the day's totals of the clients asked for, in one call.
//! [`MemoryMeter`] keeps it in process (the memory store: one controller);
//! [`RedisMeter`] keeps it in the store's Redis (shared by every replica, so a new
//! leader after a failover continues the day's totals): one Lua script per report,
//! two hashes per UTC day that expire two days later. Nothing else knows the keys.
//!
//! Only names the controller's config lists with a `dailyBytes` quota are ever counted,
//! so the state per day is bounded by the config (plus one sequence entry per session).

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use jiff::civil::Date;
use parking_lot::Mutex;

use crate::redis_link::RedisLink;

/// How long a day's counters live in Redis after their last write.
pub const DAY_TTL_SECONDS: u64 = 2 * 86_400;
/// Most sessions the memory meter remembers per day (older ones are forgotten first;
/// a forgotten session's replay would be counted again, which needs 100,000 sessions
/// registering in one day on one controller).
pub const MAX_MEMORY_SESSIONS: usize = 100_000;

/// The UTC day of a pool timestamp (milliseconds since the epoch).
pub fn utc_day(millis: i64) -> Date {
    jiff::Timestamp::from_millisecond(millis)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .to_zoned(jiff::tz::TimeZone::UTC)
        .date()
}

/// Which report the bytes come from: counted once per (session, sequence).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportKey<'a> {
    /// The worker session.
    pub session: &'a str,
    /// The report sequence within it.
    pub sequence: u64,
}

/// The meter could not answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MeterError {
    /// Storage unreachable, too slow, or answered something else than expected.
    #[error("daily byte meter unavailable")]
    Unavailable,
}

/// Fleet-wide daily bytes per client.
#[async_trait]
pub trait DailyMeter: Send + Sync + std::fmt::Debug {
    /// Adds `bytes` (client, bytes up + down) of report `report` to `day`, unless
    /// that session already had a report of this or a higher sequence counted on
    /// `day`; then returns the day's total of each of `read`, in order.
    async fn record(
        &self,
        day: Date,
        report: ReportKey<'_>,
        bytes: &[(&str, u64)],
        read: &[&str],
    ) -> Result<Vec<u64>, MeterError>;
}

/// The in-process meter (memory store). Keeps the current day only.
#[derive(Debug, Default)]
pub struct MemoryMeter {
    state: Mutex<MemoryDay>,
}

#[derive(Debug, Default)]
struct MemoryDay {
    day: Option<Date>,
    totals: HashMap<String, u64>,
    sessions: HashMap<String, u64>,
    /// Sessions in first-seen order (forgotten oldest first past the cap).
    order: std::collections::VecDeque<String>,
}

impl MemoryDay {
    /// The day's totals of `clients`, in order (0 for one without bytes).
    fn read(&self, clients: &[&str]) -> Vec<u64> {
        clients
            .iter()
            .map(|c| self.totals.get(*c).copied().unwrap_or(0))
            .collect()
    }
}

#[async_trait]
impl DailyMeter for MemoryMeter {
    async fn record(
        &self,
        day: Date,
        report: ReportKey<'_>,
        bytes: &[(&str, u64)],
        read: &[&str],
    ) -> Result<Vec<u64>, MeterError> {
        let mut st = self.state.lock();
        if st.day.is_some_and(|d| d > day) {
            // A report stamped before the day already counted (clock stepped back):
            // the current day's totals stand, nothing is added to a past day.
            return Ok(st.read(read));
        }
        if st.day != Some(day) {
            *st = MemoryDay {
                day: Some(day),
                ..MemoryDay::default()
            };
        }
        let seen = st.sessions.get(report.session).copied();
        if seen.is_none_or(|s| report.sequence > s) {
            if seen.is_none() {
                st.order.push_back(report.session.to_owned());
                while st.order.len() > MAX_MEMORY_SESSIONS {
                    if let Some(old) = st.order.pop_front() {
                        st.sessions.remove(&old);
                    }
                }
            }
            st.sessions
                .insert(report.session.to_owned(), report.sequence);
            for (client, n) in bytes {
                let t = st.totals.entry((*client).to_owned()).or_default();
                *t = t.saturating_add(*n);
            }
        }
        Ok(st.read(read))
    }
}

/// Adds one report's bytes once per (session, sequence) and reads totals.
/// KEYS: the day's totals hash, the day's session hash. ARGV: session, sequence, TTL
/// seconds, the number n of (client, bytes) pairs, the n pairs, then the clients to
/// read. Returns the totals read, as strings.
const RECORD: &str = r"
local seen = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '-1')
local seq = tonumber(ARGV[2])
local n = tonumber(ARGV[4])
if seq > seen then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
  for i = 0, n - 1 do
    redis.call('HINCRBY', KEYS[1], ARGV[5 + i * 2], ARGV[6 + i * 2])
  end
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  redis.call('EXPIRE', KEYS[2], ARGV[3])
end
local out = {}
for i = 5 + n * 2, #ARGV do
  out[#out + 1] = redis.call('HGET', KEYS[1], ARGV[i]) or '0'
end
return out
";

/// The meter in the store's Redis, shared by every controller replica.
#[derive(Debug)]
pub struct RedisMeter {
    link: Arc<RedisLink>,
    script: redis::Script,
}

impl RedisMeter {
    /// A meter on `link` (the controller's own link to the store's Redis).
    pub fn new(link: Arc<RedisLink>) -> Self {
        Self {
            link,
            script: redis::Script::new(RECORD),
        }
    }
}

/// Bytes one HINCRBY may add (Redis integers are signed 64-bit).
fn redis_int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[async_trait]
impl DailyMeter for RedisMeter {
    async fn record(
        &self,
        day: Date,
        report: ReportKey<'_>,
        bytes: &[(&str, u64)],
        read: &[&str],
    ) -> Result<Vec<u64>, MeterError> {
        let mut inv = self.script.prepare_invoke();
        // One hash tag: both keys in one slot.
        inv.key(format!("pp:{{quota:{day}}}:bytes"))
            .key(format!("pp:{{quota:{day}}}:sessions"))
            .arg(report.session)
            .arg(report.sequence)
            .arg(DAY_TTL_SECONDS)
            .arg(bytes.len());
        for (client, n) in bytes {
            inv.arg(*client).arg(redis_int(*n));
        }
        for client in read {
            inv.arg(*client);
        }
        let totals: Vec<String> = self
            .link
            .invoke(&inv)
            .await
            .map_err(|_| MeterError::Unavailable)?;
        if totals.len() != read.len() {
            return Err(MeterError::Unavailable);
        }
        totals
            .iter()
            .map(|t| t.parse::<i64>().map(|v| u64::try_from(v).unwrap_or(0)))
            .collect::<Result<_, _>>()
            .map_err(|_| MeterError::Unavailable)
    }
}

/// Most clients one answer lists as over quota (the proto's bound).
pub const MAX_EXHAUSTED: usize = 10_000;

/// The configured daily quotas and the last answer, judged at every runtime report.
#[derive(Debug)]
pub struct Quotas {
    /// (client, dailyBytes), sorted by client.
    quotas: Vec<(String, u64)>,
    /// The last list answered, and its day: answered again when the meter fails.
    last: Mutex<(Option<Date>, Vec<String>)>,
    errors: prometheus_client::metrics::counter::Counter,
}

impl Quotas {
    /// The quotas of `clients` (name, dailyBytes); clients without one are not metered.
    pub fn new<'a>(clients: impl IntoIterator<Item = (&'a str, Option<u64>)>) -> Self {
        let mut quotas: Vec<(String, u64)> = clients
            .into_iter()
            .filter_map(|(c, q)| Some((c.to_owned(), q?)))
            .collect();
        quotas.sort();
        quotas.dedup_by(|a, b| a.0 == b.0);
        Self {
            quotas,
            last: Mutex::new((None, Vec::new())),
            errors: prometheus_client::metrics::counter::Counter::default(),
        }
    }

    /// Registers `gateway_quota_meter_errors` (reports whose bytes the meter could not
    /// count: the quota undercounts them).
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register(
            "gateway_quota_meter_errors",
            "Runtime reports whose bytes the daily quota meter could not count (Redis \
             unavailable): the answer repeats the last over-quota list",
            self.errors.clone(),
        );
    }

    /// Meters the bytes (up + down, every routing) of the quota'd clients of one report
    /// on `day`, and answers the clients at or over their quota, sorted. A meter
    /// failure is counted and answered with the last list of the same day.
    pub async fn judge(
        &self,
        meter: &dyn DailyMeter,
        day: Date,
        report: ReportKey<'_>,
        usage: &[super::outcomes::RoutingUsage],
    ) -> Vec<String> {
        if self.quotas.is_empty() {
            return Vec::new();
        }
        let mut bytes: Vec<(&str, u64)> = Vec::new();
        for u in usage {
            for c in &u.clients {
                let Ok(i) = self
                    .quotas
                    .binary_search_by(|(name, _)| name.as_str().cmp(c.identity.as_str()))
                else {
                    continue;
                };
                let n = c.traffic.bytes_up.saturating_add(c.traffic.bytes_down);
                if n == 0 {
                    continue;
                }
                match bytes.iter_mut().find(|(name, _)| *name == self.quotas[i].0) {
                    Some((_, b)) => *b = b.saturating_add(n),
                    None => bytes.push((self.quotas[i].0.as_str(), n)),
                }
            }
        }
        let read: Vec<&str> = self.quotas.iter().map(|(c, _)| c.as_str()).collect();
        match meter.record(day, report, &bytes, &read).await {
            Ok(totals) => {
                let over: Vec<String> = self
                    .quotas
                    .iter()
                    .zip(totals)
                    .filter(|((_, quota), used)| used >= quota)
                    .map(|((c, _), _)| c.clone())
                    .take(MAX_EXHAUSTED)
                    .collect();
                *self.last.lock() = (Some(day), over.clone());
                over
            }
            Err(e) => {
                self.errors.inc();
                tracing::warn!(error = %e, "daily quota meter failed; answering the last over-quota list");
                let last = self.last.lock();
                if last.0 == Some(day) {
                    last.1.clone()
                } else {
                    Vec::new()
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_utc_day_of_a_timestamp() {
        assert_eq!(utc_day(0).to_string(), "1970-01-01");
        assert_eq!(utc_day(86_400_000 - 1).to_string(), "1970-01-01");
        assert_eq!(utc_day(86_400_000).to_string(), "1970-01-02");
    }
}
