//! The `redis` and `cache` configuration sections: raw serde structs with
//! `deny_unknown_fields` and a pure `validate()` that reports every problem with its
//! field path. Both sections are off by default.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Most keys one Redis `MGET` or one loader call sees.
pub const MAX_BATCH: usize = 100;

/// One configuration problem, with the path of the offending field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Dotted field path, e.g. `cache.namespaces.token_review.ttl_seconds`.
    pub path: String,
    /// What is wrong, for a human.
    pub message: String,
}

impl FieldError {
    /// A problem at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }

    /// "must be within MIN..=MAX" at `path`, unless `value` is within `range`.
    pub fn unless_within<T: PartialOrd + std::fmt::Display>(
        path: impl Into<String>,
        value: T,
        range: RangeInclusive<T>,
    ) -> Option<Self> {
        (!range.contains(&value)).then(|| {
            Self::new(
                path,
                format!("must be within {}..={}", range.start(), range.end()),
            )
        })
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// `redis`: the client shared by the cache and analytics (not the activity pool's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct RedisOptions {
    /// Create the client at all.
    pub enabled: bool,
    /// `redis://host:port/db` without a password.
    pub url: String,
    /// File holding the password (optional).
    pub password_file: Option<String>,
    /// Prefix of every key this client writes, e.g. `pp:prod`.
    pub key_prefix: String,
    /// Connect timeout.
    pub connect_timeout_ms: u64,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            enabled: false,
            url: "redis://127.0.0.1:6379/0".into(),
            password_file: None,
            key_prefix: "pp".into(),
            connect_timeout_ms: 500,
        }
    }
}

impl RedisOptions {
    /// Every problem with the section; `prefix` is its path (e.g. `redis`).
    pub fn validate(&self, prefix: &str) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if !self.enabled {
            return errs;
        }
        if !(self.url.starts_with("redis://") || self.url.starts_with("rediss://")) {
            errs.push(FieldError::new(
                format!("{prefix}.url"),
                "must start with redis:// or rediss://",
            ));
        }
        if self.url.contains('@') {
            errs.push(FieldError::new(
                format!("{prefix}.url"),
                "must not carry credentials; use passwordFile",
            ));
        }
        if let Some(p) = &self.password_file
            && !p.starts_with('/')
        {
            errs.push(FieldError::new(
                format!("{prefix}.passwordFile"),
                "must be an absolute path",
            ));
        }
        if self.key_prefix.is_empty()
            || self.key_prefix.len() > 64
            || !self
                .key_prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '-' | '_' | '.'))
        {
            errs.push(FieldError::new(
                format!("{prefix}.keyPrefix"),
                "1..64 characters of [A-Za-z0-9:._-]",
            ));
        }
        errs.extend(FieldError::unless_within(
            format!("{prefix}.connectTimeoutMs"),
            self.connect_timeout_ms,
            10..=30_000,
        ));
        errs
    }
}

/// Per-namespace cache settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct NamespaceOptions {
    /// Hard TTL of a positive entry.
    pub ttl_seconds: u64,
    /// ± jitter applied to the TTL, in percent (never past the hard TTL's cap).
    pub jitter_percent: u8,
    /// TTL of a negative ("confirmed absent") entry; 0 = never store negatives.
    pub negative_ttl_seconds: u64,
    /// Largest encoded entry stored, bytes.
    pub max_entry_bytes: usize,
}

impl Default for NamespaceOptions {
    fn default() -> Self {
        Self {
            ttl_seconds: 60,
            jitter_percent: 10,
            negative_ttl_seconds: 0,
            max_entry_bytes: 64 * 1024,
        }
    }
}

/// `cache`: the Redis read-through cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct CacheOptions {
    /// Off: every read goes straight to the source.
    pub enabled: bool,
    /// Keys per batch (≤ 100).
    pub batch_size: usize,
    /// Longest a shared loader call may run.
    pub loader_timeout_ms: u64,
    /// Loader calls running at once, per cache.
    pub loader_concurrency: usize,
    /// Budget of one Redis `MGET` or write pipeline.
    pub redis_timeout_ms: u64,
    /// Enabled namespaces and their settings.
    pub namespaces: BTreeMap<String, NamespaceOptions>,
}

/// Namespaces the product knows about. Credentials (Secrets) are kubelet-mounted files
/// read once at load, so no Secret look-up needs a cache.
pub const KNOWN_NAMESPACES: &[&str] = &["token_review"];

impl Default for CacheOptions {
    fn default() -> Self {
        let mut namespaces = BTreeMap::new();
        namespaces.insert(
            "token_review".to_owned(),
            NamespaceOptions {
                ttl_seconds: 120,
                ..NamespaceOptions::default()
            },
        );
        Self {
            enabled: false,
            batch_size: MAX_BATCH,
            loader_timeout_ms: 3_000,
            loader_concurrency: 16,
            redis_timeout_ms: 20,
            namespaces,
        }
    }
}

impl CacheOptions {
    /// Every problem with the section; `redis` is the `redis` section it needs.
    pub fn validate(&self, prefix: &str, redis: &RedisOptions) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if !self.enabled {
            return errs;
        }
        if !redis.enabled {
            errs.push(FieldError::new(
                format!("{prefix}.enabled"),
                "needs redis.enabled",
            ));
        }
        for (field, value, range) in [
            ("batchSize", self.batch_size as u64, 1..=MAX_BATCH as u64),
            ("loaderTimeoutMs", self.loader_timeout_ms, 10..=30_000),
            ("loaderConcurrency", self.loader_concurrency as u64, 1..=256),
            ("redisTimeoutMs", self.redis_timeout_ms, 1..=5_000),
        ] {
            errs.extend(FieldError::unless_within(
                format!("{prefix}.{field}"),
                value,
                range,
            ));
        }
        for (name, ns) in &self.namespaces {
            let p = format!("{prefix}.namespaces.{name}");
            if !KNOWN_NAMESPACES.contains(&name.as_str()) {
                errs.push(FieldError::new(&p, "unknown namespace"));
            }
            let cap = if name == "token_review" { 120 } else { 86_400 };
            for (field, value, range) in [
                ("ttlSeconds", ns.ttl_seconds, 1..=cap),
                ("maxEntryBytes", ns.max_entry_bytes as u64, 64..=1024 * 1024),
            ] {
                errs.extend(FieldError::unless_within(
                    format!("{p}.{field}"),
                    value,
                    range,
                ));
            }
            if ns.jitter_percent > 50 {
                errs.push(FieldError::new(format!("{p}.jitterPercent"), "at most 50"));
            }
            if ns.negative_ttl_seconds > ns.ttl_seconds.min(300) {
                errs.push(FieldError::new(
                    format!("{p}.negativeTtlSeconds"),
                    "at most min(ttlSeconds, 300)",
                ));
            }
            if name == "token_review" && ns.negative_ttl_seconds != 0 {
                errs.push(FieldError::new(
                    format!("{p}.negativeTtlSeconds"),
                    "token reviews never cache a negative answer",
                ));
            }
        }
        errs
    }

    /// The typed settings of one namespace, when it is enabled.
    pub fn namespace(&self, name: &str) -> Option<Namespace> {
        if !self.enabled {
            return None;
        }
        let ns = self.namespaces.get(name)?;
        Some(Namespace {
            name: name.to_owned(),
            ttl: Duration::from_secs(ns.ttl_seconds),
            jitter_percent: ns.jitter_percent,
            negative_ttl: (ns.negative_ttl_seconds > 0)
                .then(|| Duration::from_secs(ns.negative_ttl_seconds)),
            max_entry_bytes: ns.max_entry_bytes,
            batch_size: self.batch_size.clamp(1, MAX_BATCH),
            loader_timeout: Duration::from_millis(self.loader_timeout_ms),
            loader_concurrency: self.loader_concurrency.max(1),
            redis_timeout: Duration::from_millis(self.redis_timeout_ms),
        })
    }
}

/// Validated settings of one cache namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespace {
    /// Namespace name (a metrics label and part of every key).
    pub name: String,
    /// Hard TTL of positive entries.
    pub ttl: Duration,
    /// ± jitter in percent; the jittered TTL never exceeds `ttl`.
    pub jitter_percent: u8,
    /// Negative entries' TTL, `None` = never stored.
    pub negative_ttl: Option<Duration>,
    /// Largest encoded entry stored.
    pub max_entry_bytes: usize,
    /// Keys per batch.
    pub batch_size: usize,
    /// Longest shared loader call.
    pub loader_timeout: Duration,
    /// Loader calls at once.
    pub loader_concurrency: usize,
    /// Budget of one Redis round trip.
    pub redis_timeout: Duration,
}

impl Namespace {
    /// Defaults for tests and embedders: 60 s TTL, no negatives, 100 a batch.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            ttl: Duration::from_secs(60),
            jitter_percent: 10,
            negative_ttl: None,
            max_entry_bytes: 64 * 1024,
            batch_size: MAX_BATCH,
            loader_timeout: Duration::from_secs(3),
            loader_concurrency: 16,
            redis_timeout: Duration::from_millis(20),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_off_and_valid() {
        let r = RedisOptions::default();
        let c = CacheOptions::default();
        assert!(!r.enabled && !c.enabled);
        assert!(c.validate("cache", &r).is_empty());
        assert!(c.namespace("secret").is_none());
    }

    #[test]
    fn every_problem_is_reported_with_its_path() {
        let r = RedisOptions::default();
        let mut c = CacheOptions {
            enabled: true,
            batch_size: 101,
            ..CacheOptions::default()
        };
        c.namespaces.insert(
            "token_review".into(),
            NamespaceOptions {
                ttl_seconds: 300,
                negative_ttl_seconds: 5,
                ..NamespaceOptions::default()
            },
        );
        c.namespaces
            .insert("books".into(), NamespaceOptions::default());
        let paths: Vec<String> = c
            .validate("cache", &r)
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert!(paths.contains(&"cache.enabled".to_owned()));
        assert!(paths.contains(&"cache.batchSize".to_owned()));
        assert!(paths.contains(&"cache.namespaces.books".to_owned()));
        assert!(paths.contains(&"cache.namespaces.token_review.ttlSeconds".to_owned()));
        assert!(paths.contains(&"cache.namespaces.token_review.negativeTtlSeconds".to_owned()));
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let e = serde_json::from_str::<CacheOptions>(r#"{"enabled":true,"nope":1}"#);
        assert!(e.is_err());
        let r = serde_json::from_str::<RedisOptions>(
            r#"{"enabled":true,"url":"redis://u:p@h/0","keyPrefix":""}"#,
        )
        .unwrap_or_default();
        assert_eq!(r.validate("redis").len(), 2);
    }
}
