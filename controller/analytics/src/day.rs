//! Day boundaries in the configured time zone, and the clock port.

use std::fmt::Debug;

use jiff::Timestamp;
use jiff::civil::Date;
use jiff::tz::TimeZone;

/// Analytics' reading of a clock, as a `jiff` instant (injected, so tests can cross
/// midnight). The clocks themselves are the runtime's ([`SystemClock`],
/// [`ManualClock`]): every `proxy_pool_runtime::Clock` is an analytics clock.
pub trait Clock: Send + Sync + Debug {
    /// The current instant.
    fn now(&self) -> Timestamp;
}

impl<C: proxy_pool_runtime::Clock + ?Sized> Clock for C {
    fn now(&self) -> Timestamp {
        Timestamp::try_from(proxy_pool_runtime::Clock::now(self)).unwrap_or(Timestamp::UNIX_EPOCH)
    }
}

pub use proxy_pool_runtime::clock::{ManualClock, SystemClock};

/// The day calendar of one time zone.
#[derive(Debug, Clone)]
pub struct Days {
    name: String,
    tz: TimeZone,
}

impl Days {
    /// A calendar for `tz` named `name`.
    pub fn new(name: String, tz: TimeZone) -> Self {
        Self { name, tz }
    }
    /// The zone's IANA name.
    pub fn zone_name(&self) -> &str {
        &self.name
    }
    /// The natural day `t` falls on.
    pub fn day_of(&self, t: Timestamp) -> Date {
        t.to_zoned(self.tz.clone()).date()
    }
    /// Seconds from `t` until the start of `day + after_days + 1`, at least 60.
    pub fn secs_until_end_plus(&self, day: Date, after_days: i64, t: Timestamp) -> i64 {
        let end = day
            .checked_add(jiff::Span::new().days(after_days + 1))
            .ok()
            .and_then(|d| d.to_zoned(self.tz.clone()).ok())
            .map(|z| z.timestamp().as_second());
        end.map_or(86_400, |e| (e - t.as_second()).max(60))
    }
}

/// `day − n` days (saturating at the calendar's start).
pub fn minus_days(day: Date, n: i64) -> Date {
    day.checked_sub(jiff::Span::new().days(n))
        .unwrap_or(Date::MIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn day_boundaries_follow_the_zone() {
        let t: Timestamp = "2026-03-01T16:30:00Z".parse().unwrap();
        let utc = Days::new("UTC".into(), TimeZone::UTC);
        let sh = Days::new(
            "Asia/Shanghai".into(),
            TimeZone::get("Asia/Shanghai").unwrap(),
        );
        assert_eq!(utc.day_of(t).to_string(), "2026-03-01");
        assert_eq!(sh.day_of(t).to_string(), "2026-03-02");
        assert_eq!(minus_days(utc.day_of(t), 89).to_string(), "2025-12-02");
        assert_eq!(
            utc.secs_until_end_plus(utc.day_of(t), 0, t),
            7 * 3600 + 1800
        );
    }
}
