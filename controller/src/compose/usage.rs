//! Usage analytics in the controller: the typed `analytics` section → the
//! `proxy-pool-analytics` settings (checked again by the crate's own rules), the DSN
//! and identity key read from their files, the start-up database check, a reconnecting
//! Redis connection to the store's Redis, and the collector handed to the Distribution
//! API and the control plane.
//!
//! Start-up policy: a schema that is missing or at another version, or a history in
//! another time zone, refuses the start (run `proxy-pool-controller migrate`); an
//! unreachable PostgreSQL does not (the worker keeps the data in Redis and retries at
//! each flush; the stats API answers 503). Nothing here logs the DSN or a key.
//!
//! Every replica records usage into the store's Redis; only the leader's worker
//! flushes it to PostgreSQL (one writer per deployment, like the other leader loops).

use std::sync::Arc;
use std::time::Duration;

use proxy_pool_analytics::{
    AnalyticsError, AnalyticsOptions, Collector, FlushKind, RedisConn, Settings,
};
use proxy_pool_api::config::{AnalyticsConfig, Config, RedisConfig, StoreConfig};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::ComposeError;
use crate::leadership::{Leadership, Role};
use crate::metrics::Metrics;
use crate::store;

/// The analytics half of a prepared controller.
#[derive(Debug)]
pub struct Usage {
    collector: Collector,
    analytics: Option<proxy_pool_analytics::Prepared>,
    router: Option<axum::Router>,
    flush_timeout: Duration,
}

impl Usage {
    /// Analytics off: a collector that records nothing.
    pub fn disabled() -> Self {
        Self {
            collector: Collector::disabled(),
            analytics: None,
            router: None,
            flush_timeout: Duration::ZERO,
        }
    }

    /// The collector (disabled when analytics is off).
    pub fn collector(&self) -> Collector {
        self.collector.clone()
    }

    /// The stats API and dashboard router for the admin listener.
    pub fn router(&self) -> Option<axum::Router> {
        self.router.clone()
    }

    /// Starts the worker (when analytics is on): it records usage into Redis on every
    /// replica and flushes to PostgreSQL only while `leadership` leads; the final flush
    /// at shutdown is made by a replica that led (its role reads `Deposed` once
    /// shutdown released the lease; a flush after another replica took over is safe,
    /// see `proxy_pool_analytics::WorkingSet::committed`).
    pub fn start(&mut self, leadership: &Leadership) -> Option<UsageWorker> {
        let prepared = self.analytics.take()?;
        let (tx, rx) = oneshot::channel::<()>();
        let leading = leadership.clone();
        let handle = prepared.spawn(
            async move {
                let _ = rx.await;
            },
            Arc::new(move |kind| match kind {
                FlushKind::Periodic => leading.is_leader(),
                FlushKind::Final => !matches!(leading.role(), Role::Follower),
            }),
        );
        Some(UsageWorker {
            stop: tx,
            handle,
            flush_timeout: self.flush_timeout,
        })
    }
}

/// The running analytics worker.
#[derive(Debug)]
pub struct UsageWorker {
    stop: oneshot::Sender<()>,
    handle: JoinHandle<()>,
    flush_timeout: Duration,
}

impl UsageWorker {
    /// How long the final flush may take (reserved at the end of the grace period).
    pub fn flush_timeout(&self) -> Duration {
        self.flush_timeout
    }

    /// Stops collecting, applies what is queued and makes the final flush; waits at
    /// most until `deadline` (the worker bounds the flush itself by its timeout).
    pub async fn stop(self, deadline: Instant) {
        let _ = self.stop.send(());
        let mut handle = self.handle;
        if tokio::time::timeout_at(deadline, &mut handle)
            .await
            .is_err()
        {
            handle.abort();
            tracing::warn!("analytics final flush not done by the deadline; data left in redis");
        }
    }
}

/// The crate options of a typed section (the DSN is read from its file separately).
pub fn analytics_options(a: &AnalyticsConfig) -> AnalyticsOptions {
    AnalyticsOptions {
        enabled: true,
        time_zone: a.time_zone.clone(),
        postgres_dsn: String::new(),
        postgres_password_file: None,
        retention_days: u16::try_from(a.retention_days).unwrap_or(u16::MAX),
        hot_days: u16::try_from(a.hot_days).unwrap_or(u16::MAX),
        flush_interval_seconds: a.flush_interval.as_secs(),
        flush_after_events: u64::from(a.flush_after_events),
        queue_size: a.queue_capacity as usize,
        shutdown_grace_seconds: a.shutdown_flush_timeout.as_secs(),
        identity_key_file: a
            .identity_key_file
            .as_ref()
            .map(|p| p.display().to_string()),
    }
}

/// The crate's rules applied to a validated section (the ranges are the same; the time
/// zone is resolved here). `Err` lists every problem as `path: message`.
pub fn analytics_settings(a: &AnalyticsConfig) -> Result<Settings, Vec<String>> {
    let opts = analytics_options(a);
    let redis = proxy_pool_cache::RedisOptions {
        enabled: true,
        key_prefix: a.key_prefix.clone(),
        ..proxy_pool_cache::RedisOptions::default()
    };
    let errs: Vec<String> = opts
        .validate("analytics", &redis)
        .into_iter()
        // The DSN comes from `analytics.dsnFile`, checked when the file is read.
        .filter(|e| e.path != "analytics.postgresDsn")
        .map(|e| e.to_string())
        .collect();
    if !errs.is_empty() {
        return Err(errs);
    }
    opts.settings().map_err(|e| vec![e.to_string()])
}

/// Problems only the controller can see in a valid config (used by `validate-config`).
pub fn check(config: &Config) -> Vec<String> {
    config
        .analytics
        .as_ref()
        .map(|a| analytics_settings(a).err().unwrap_or_default())
        .unwrap_or_default()
}

/// A connect function for the store's Redis: the store's own connector (direct or
/// Sentinel-resolved master, TLS, ACL users).
pub(super) fn redis_connect(
    r: &RedisConfig,
) -> Result<proxy_pool_analytics::Connect, ComposeError> {
    let connector = store::connector(r)?;
    let timeout = r.command_timeout;
    Ok(Arc::new(move || {
        let connector = connector.clone();
        Box::pin(async move {
            connector.connect(timeout).await.map_err(|e| {
                redis::RedisError::from((redis::ErrorKind::Io, "redis unavailable", e.to_string()))
            })
        })
    }))
}

/// Builds analytics when the config enables it: reads the DSN and key files, checks
/// the database, registers the metrics. The worker starts with [`Usage::start`].
pub async fn prepare(config: &Config, metrics: &Metrics) -> Result<Usage, ComposeError> {
    let Some(a) = &config.analytics else {
        return Ok(Usage::disabled());
    };
    let StoreConfig::Redis(redis) = &config.store else {
        return Err(ComposeError::Analytics(
            "analytics.enabled: needs `store.backend: redis`".into(),
        ));
    };
    let settings = analytics_settings(a).map_err(|e| ComposeError::Analytics(e.join("; ")))?;
    let pg = proxy_pool_analytics::pg_config_from_file(&a.dsn_file)
        .map_err(|e| ComposeError::Analytics(format!("analytics.dsnFile: {e}")))?;
    let identity_key = proxy_pool_analytics::identity_key_from_file(a.identity_key_file.as_deref())
        .map_err(|e| ComposeError::Analytics(format!("analytics.identityKeyFile: {e}")))?;
    match proxy_pool_analytics::check_database(&pg, &settings).await {
        Ok(()) => {}
        Err(e @ (AnalyticsError::SchemaMissing | AnalyticsError::TimeZoneMismatch { .. })) => {
            return Err(ComposeError::AnalyticsSchema(e.to_string()));
        }
        Err(e) => tracing::warn!(
            error = %e,
            "analytics: PostgreSQL not usable at start; counting continues in Redis and every flush retries"
        ),
    }
    let conn = RedisConn::relink(redis_connect(redis)?);
    let prepared = proxy_pool_analytics::prepare(settings, pg, &a.key_prefix, identity_key, conn);
    let m = prepared.metrics.clone();
    metrics.register_with(|r| r.register_collector(Box::new(m)));
    tracing::info!(
        time_zone = %a.time_zone,
        key_prefix = %a.key_prefix,
        "analytics enabled"
    );
    Ok(Usage {
        collector: prepared.collector.clone(),
        router: Some(prepared.router.clone()),
        analytics: Some(prepared),
        flush_timeout: a.shutdown_flush_timeout,
    })
}

/// Applies the analytics migrations to the configured database (`migrate` command).
pub async fn migrate(config: &Config) -> Result<(), ComposeError> {
    let Some(a) = &config.analytics else {
        return Err(ComposeError::Analytics(
            "analytics is not enabled in this config: nothing to migrate".into(),
        ));
    };
    let pg = proxy_pool_analytics::pg_config_from_file(&a.dsn_file)
        .map_err(|e| ComposeError::Analytics(format!("analytics.dsnFile: {e}")))?;
    proxy_pool_analytics::migrate(pg)
        .await
        .map_err(|e| ComposeError::Analytics(format!("migrate: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proxy_pool_api::config::load_yaml;

    const BASE: &str = "store: {backend: redis, redis: {address: \"redis://127.0.0.1:1/0\"}}\n";

    fn section(extra: &str) -> Result<AnalyticsConfig, Vec<String>> {
        let text = format!("{BASE}analytics: {{enabled: true, dsnFile: /d{extra}}}\n");
        load_yaml(&text)
            .map_err(|e| e.0.into_iter().map(|e| e.path.to_string()).collect())
            .map(|c| c.analytics.unwrap_or_else(|| panic!("analytics on")))
    }

    /// The api crate's ranges and the analytics crate's rules agree at every bound: what
    /// the config accepts the crate accepts, and one step past is refused by both.
    #[test]
    fn config_ranges_match_the_crate_rules() {
        for ok in [
            "",
            ", retentionDays: 90",
            ", retentionDays: 3660",
            ", hotDays: 1",
            ", hotDays: 31",
            ", queueCapacity: 1",
            ", queueCapacity: 1048576",
            ", flushInterval: 1s",
            ", flushInterval: 1h",
            ", flushAfterEvents: 1",
            ", flushAfterEvents: 1000000",
            ", shutdownFlushTimeout: 1s",
            ", shutdownFlushTimeout: 20s",
            ", timeZone: Asia/Shanghai",
        ] {
            let a = section(ok).unwrap_or_else(|e| panic!("{ok}: {e:?}"));
            assert!(analytics_settings(&a).is_ok(), "{ok}");
        }
        for bad in [
            ", retentionDays: 89",
            ", retentionDays: 3661",
            ", hotDays: 0",
            ", hotDays: 32",
            ", queueCapacity: 0",
            ", queueCapacity: 1048577",
            ", flushInterval: 0s",
            ", flushInterval: 3601s",
            ", flushAfterEvents: 0",
            ", flushAfterEvents: 1000001",
            ", shutdownFlushTimeout: 0s",
        ] {
            assert!(section(bad).is_err(), "config accepted {bad}");
        }
    }

    #[test]
    fn an_unknown_zone_of_the_right_shape_is_refused_by_the_controller() {
        let a = section(", timeZone: Mars/Olympus_Mons").unwrap_or_else(|e| panic!("{e:?}"));
        let e = analytics_settings(&a).err().unwrap_or_default();
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("analytics.timeZone"), "{e:?}");
    }

    #[test]
    fn the_crate_options_of_a_section() {
        let a = section(", flushInterval: 2m, shutdownFlushTimeout: 3s, queueCapacity: 7")
            .unwrap_or_else(|e| panic!("{e:?}"));
        let o = analytics_options(&a);
        assert_eq!(o.flush_interval_seconds, 120);
        assert_eq!(o.shutdown_grace_seconds, 3);
        assert_eq!(o.queue_size, 7);
        assert_eq!(o.time_zone, "UTC");
    }
}
