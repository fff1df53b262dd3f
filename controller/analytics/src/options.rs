//! The `analytics` configuration section (off by default) and the cross-section check
//! that analytics needs Redis and a PostgreSQL DSN.

use std::time::Duration;

use proxy_pool_cache::{FieldError, RedisOptions};
use serde::{Deserialize, Serialize};

use crate::day::Days;

/// `analytics`: usage counting, persisted to PostgreSQL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct AnalyticsOptions {
    /// Start the collector, worker and stats API.
    pub enabled: bool,
    /// IANA time zone of the day boundaries. Fixed for a history: changing it is refused.
    pub time_zone: String,
    /// libpq-style DSN (`host=… port=… user=… dbname=…`) without a password.
    pub postgres_dsn: String,
    /// File holding the PostgreSQL password (optional).
    pub postgres_password_file: Option<String>,
    /// Natural days of daily rows kept in PostgreSQL (D−89…D for 90).
    pub retention_days: u16,
    /// Days of daily buckets kept in Redis after they were persisted.
    pub hot_days: u16,
    /// Normal interval between flushes.
    pub flush_interval_seconds: u64,
    /// Flush early after this many events.
    pub flush_after_events: u64,
    /// Bounded event queue; full ⇒ dropped and counted.
    pub queue_size: usize,
    /// Longest wait for the final flush at shutdown.
    pub shutdown_grace_seconds: u64,
    /// File with a key mixed into client-identity digests (optional, ≥ 32 bytes).
    pub identity_key_file: Option<String>,
}

impl Default for AnalyticsOptions {
    fn default() -> Self {
        Self {
            enabled: false,
            time_zone: "UTC".into(),
            postgres_dsn: String::new(),
            postgres_password_file: None,
            retention_days: 90,
            hot_days: 3,
            flush_interval_seconds: 60,
            flush_after_events: 10_000,
            queue_size: 4096,
            shutdown_grace_seconds: 5,
            identity_key_file: None,
        }
    }
}

impl AnalyticsOptions {
    /// Every problem with the section (path `prefix`), given the `redis` section.
    pub fn validate(&self, prefix: &str, redis: &RedisOptions) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if !self.enabled {
            return errs;
        }
        let p = |f: &str| format!("{prefix}.{f}");
        if !redis.enabled {
            errs.push(FieldError::new(p("enabled"), "needs redis.enabled"));
        }
        if self.postgres_dsn.trim().is_empty() {
            errs.push(FieldError::new(p("postgresDsn"), "required when enabled"));
        } else if self.postgres_dsn.contains("password") || self.postgres_dsn.contains('@') {
            errs.push(FieldError::new(
                p("postgresDsn"),
                "must not carry a password; use postgresPasswordFile",
            ));
        } else if self.postgres_dsn.parse::<tokio_postgres::Config>().is_err() {
            errs.push(FieldError::new(p("postgresDsn"), "not a valid DSN"));
        }
        for (f, v) in [
            ("postgresPasswordFile", &self.postgres_password_file),
            ("identityKeyFile", &self.identity_key_file),
        ] {
            if v.as_ref().is_some_and(|v| !v.starts_with('/')) {
                errs.push(FieldError::new(p(f), "must be an absolute path"));
            }
        }
        if jiff::tz::TimeZone::get(&self.time_zone).is_err() {
            errs.push(FieldError::new(p("timeZone"), "unknown IANA time zone"));
        }
        for (field, value, range) in [
            ("retentionDays", u64::from(self.retention_days), 90..=3660),
            ("hotDays", u64::from(self.hot_days), 1..=31),
            (
                "flushIntervalSeconds",
                self.flush_interval_seconds,
                1..=3600,
            ),
            ("flushAfterEvents", self.flush_after_events, 1..=1_000_000),
            ("queueSize", self.queue_size as u64, 1..=1_048_576),
            ("shutdownGraceSeconds", self.shutdown_grace_seconds, 1..=60),
        ] {
            errs.extend(FieldError::unless_within(p(field), value, range));
        }
        errs
    }

    /// The typed settings; call after `validate` returned nothing.
    pub fn settings(&self) -> Result<Settings, FieldError> {
        let tz = jiff::tz::TimeZone::get(&self.time_zone)
            .map_err(|_| FieldError::new("analytics.timeZone", "unknown IANA time zone"))?;
        Ok(Settings {
            days: Days::new(self.time_zone.clone(), tz),
            retention_days: self.retention_days,
            hot_days: self.hot_days,
            flush_interval: Duration::from_secs(self.flush_interval_seconds),
            flush_after_events: self.flush_after_events,
            queue_size: self.queue_size,
            shutdown_grace: Duration::from_secs(self.shutdown_grace_seconds),
        })
    }
}

/// Validated analytics settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Day boundaries.
    pub days: Days,
    /// Daily rows kept.
    pub retention_days: u16,
    /// Persisted daily buckets kept in Redis.
    pub hot_days: u16,
    /// Flush period.
    pub flush_interval: Duration,
    /// Early flush threshold.
    pub flush_after_events: u64,
    /// Queue bound.
    pub queue_size: usize,
    /// Final flush budget.
    pub shutdown_grace: Duration,
}

impl Settings {
    /// Defaults in `time_zone` (tests and embedders).
    pub fn for_zone(time_zone: &str) -> Result<Self, FieldError> {
        AnalyticsOptions {
            time_zone: time_zone.to_owned(),
            ..AnalyticsOptions::default()
        }
        .settings()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_by_default_and_requires_redis_and_dsn() {
        let r = RedisOptions::default();
        assert!(
            AnalyticsOptions::default()
                .validate("analytics", &r)
                .is_empty()
        );
        let a = AnalyticsOptions {
            enabled: true,
            time_zone: "Mars/Base".into(),
            retention_days: 30,
            queue_size: 0,
            ..AnalyticsOptions::default()
        };
        let paths: Vec<String> = a
            .validate("analytics", &r)
            .into_iter()
            .map(|e| e.path)
            .collect();
        for want in [
            "analytics.enabled",
            "analytics.postgresDsn",
            "analytics.timeZone",
            "analytics.retentionDays",
            "analytics.queueSize",
        ] {
            assert!(paths.contains(&want.to_owned()), "{want} in {paths:?}");
        }
        let a = AnalyticsOptions {
            enabled: true,
            postgres_dsn: "host=db user=pp password=x".into(),
            ..AnalyticsOptions::default()
        };
        let r = RedisOptions {
            enabled: true,
            ..RedisOptions::default()
        };
        let errs = a.validate("analytics", &r);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].path, "analytics.postgresDsn");
        assert!(serde_json::from_str::<AnalyticsOptions>(r#"{"bogus":true}"#).is_err());
    }
}
