//! `store` and `pool`: the Redis connection (direct or Sentinel, TLS) and the pool's
//! tunables.

use std::path::PathBuf;
use std::time::Duration;

use super::ctx::Ctx;
use super::ctx::secret_file;
use crate::config::checks::split_host_port;
use crate::config::raw::{RawPool, RawRedis, RawStore};
use crate::config::types::{PoolConfig, RedisConfig, RedisTarget, RedisTls, StoreConfig};

pub(super) fn store(cx: &mut Ctx, raw: &RawStore) -> StoreConfig {
    match raw.backend.as_deref().unwrap_or("memory") {
        "memory" => {
            if raw.redis.is_some() {
                cx.err("store.redis", "only allowed with `backend: redis`");
            }
            StoreConfig::Memory
        }
        "redis" => match &raw.redis {
            Some(r) => StoreConfig::Redis(redis(cx, r)),
            None => {
                cx.err("store.redis", "is required with `backend: redis`");
                StoreConfig::Memory
            }
        },
        other => {
            cx.err(
                "store.backend",
                format!("`{other}` is not one of memory, redis"),
            );
            StoreConfig::Memory
        }
    }
}

fn redis(cx: &mut Ctx, raw: &RawRedis) -> RedisConfig {
    let mut tls_wanted = false;
    let target = match (&raw.address, &raw.sentinel) {
        (Some(a), None) => {
            if a.starts_with("rediss://") {
                tls_wanted = true;
            } else if !(a.starts_with("redis://") || a.starts_with("redis+unix://")) {
                cx.err(
                    "store.redis.address",
                    "must be a redis:// or rediss:// (TLS) URL",
                );
            }
            RedisTarget::Address(a.clone())
        }
        (None, Some(s)) => {
            tls_wanted = s.tls;
            if let Some(u) = &s.username
                && (u.is_empty() || u.len() > 256 || u.chars().any(|c| c.is_whitespace()))
            {
                cx.err(
                    "store.redis.sentinel.username",
                    "must be 1 to 256 bytes without spaces",
                );
            }
            if s.master_name.is_empty() {
                cx.err("store.redis.sentinel.masterName", "must not be empty");
            }
            if s.addresses.is_empty() {
                cx.err("store.redis.sentinel.addresses", "at least one sentinel");
            }
            for (i, a) in s.addresses.iter().enumerate() {
                if split_host_port(a).is_none() {
                    cx.err(
                        format!("store.redis.sentinel.addresses[{i}]"),
                        format!("`{a}` is not host:port"),
                    );
                }
            }
            RedisTarget::Sentinel {
                master_name: s.master_name.clone(),
                addresses: s.addresses.clone(),
                username: s.username.clone(),
                password_file: s
                    .password_file
                    .as_deref()
                    .map(|f| secret_file(cx, "store.redis.sentinel.passwordFile", f)),
            }
        }
        _ => {
            cx.err("store.redis", "needs exactly one of address or sentinel");
            RedisTarget::Address(String::new())
        }
    };
    let command_timeout = cx.positive_duration(
        "store.redis.commandTimeout",
        raw.command_timeout.as_deref(),
        Duration::from_millis(500),
    );
    if let Some(u) = &raw.username
        && (u.is_empty() || u.len() > 256 || u.chars().any(|c| c.is_whitespace()))
    {
        cx.err(
            "store.redis.username",
            "must be 1 to 256 bytes without spaces",
        );
    }
    let tls = match (&raw.tls, tls_wanted) {
        (_, true) => Some(RedisTls {
            ca_file: raw
                .tls
                .as_ref()
                .and_then(|t| t.ca_file.as_deref())
                .map(|f| secret_file(cx, "store.redis.tls.caFile", f)),
        }),
        (Some(_), false) => {
            cx.err(
                "store.redis.tls",
                "only with a rediss:// address or `sentinel.tls: true`",
            );
            None
        }
        (None, false) => None,
    };
    RedisConfig {
        target,
        username: raw.username.clone(),
        password_file: raw.password_file.as_ref().map(PathBuf::from),
        command_timeout,
        tls,
    }
}

pub(super) fn pool(cx: &mut Ctx, raw: &RawPool) -> PoolConfig {
    PoolConfig {
        extract_scan_budget: cx.range(
            "pool.extractScanBudget",
            raw.extract_scan_budget,
            2048,
            16,
            1_000_000,
        ),
        inventory_scan_budget: cx.range(
            "pool.inventoryScanBudget",
            raw.inventory_scan_budget,
            20_000,
            16,
            10_000_000,
        ),
        opportunistic_purge: cx.range(
            "pool.opportunisticPurge",
            raw.opportunistic_purge,
            16,
            0,
            10_000,
        ),
        max_ttl: cx.duration(
            "pool.maxTtl",
            raw.max_ttl.as_deref(),
            Duration::from_secs(24 * 3600),
        ),
        maintenance_interval: cx.duration(
            "pool.maintenanceInterval",
            raw.maintenance_interval.as_deref(),
            Duration::from_secs(1),
        ),
        maintenance_batch: cx.range(
            "pool.maintenanceBatch",
            raw.maintenance_batch,
            1000,
            1,
            10_000,
        ),
    }
}
