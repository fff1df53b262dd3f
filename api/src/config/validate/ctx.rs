//! What every section's validator shares: the problem collector with its typed
//! readers (durations, ranges, addresses, lists, rates, hashes) and the shared limits.

use std::collections::{BTreeSet, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;

use crate::config::checks::check_identifier;
use crate::config::duration::{duration_at, duration_in, show};
use crate::config::error::{ConfigError, FieldPath};
use crate::config::raw::RawRate;
use crate::config::types::{Permission, Rate, SecretHash};
use crate::proxy::one_of;

/// Largest `count` the pool accepts in one extraction.
pub const MAX_COUNT_PER_REQUEST: u32 = 1000;

/// Most values of one list filter or allow-list.
pub const MAX_LIST_VALUES: usize = 64;

/// Collects problems while building the typed config.
#[derive(Default)]
pub(super) struct Ctx {
    pub(super) errors: Vec<ConfigError>,
}

impl Ctx {
    pub(super) fn err(&mut self, path: impl Into<FieldPath>, message: impl Into<String>) {
        self.errors.push(ConfigError::new(path, message));
    }

    pub(super) fn duration(
        &mut self,
        path: &str,
        raw: Option<&str>,
        default: Duration,
    ) -> Duration {
        duration_at(&mut self.errors, path, raw, default).unwrap_or(default)
    }

    /// A duration within `bounds` (`default` stands in after a problem).
    pub(super) fn duration_in(
        &mut self,
        path: &str,
        raw: Option<&str>,
        default: Duration,
        bounds: RangeInclusive<Duration>,
    ) -> Duration {
        duration_in(&mut self.errors, path, raw, default, bounds)
    }

    /// A duration of at least `min`; a shorter one is reported ("must be at least
    /// <min>") and kept, so later checks compare what was written.
    pub(super) fn duration_at_least(
        &mut self,
        path: &str,
        raw: Option<&str>,
        default: Duration,
        min: Duration,
    ) -> Duration {
        let d = self.duration(path, raw, default);
        if d < min {
            self.err(path, format!("must be at least {}", show(min)));
        }
        d
    }

    /// A duration above zero; zero is reported ("must be positive") and kept.
    pub(super) fn positive_duration(
        &mut self,
        path: &str,
        raw: Option<&str>,
        default: Duration,
    ) -> Duration {
        let d = self.duration(path, raw, default);
        if d.is_zero() {
            self.err(path, "must be positive");
        }
        d
    }

    pub(super) fn required_duration(&mut self, path: &str, raw: Option<&str>) -> Duration {
        if raw.is_none() {
            self.err(path, "is required");
        }
        self.duration(path, raw, Duration::from_secs(1))
    }

    pub(super) fn socket(&mut self, path: &str, raw: Option<&str>, default: &str) -> SocketAddr {
        let text = raw.unwrap_or(default);
        text.parse().unwrap_or_else(|_| {
            self.err(path, format!("`{text}` is not an `ip:port` address"));
            SocketAddr::from(([127, 0, 0, 1], 0))
        })
    }

    pub(super) fn range(
        &mut self,
        path: &str,
        value: Option<u32>,
        default: u32,
        min: u32,
        max: u32,
    ) -> u32 {
        let v = value.unwrap_or(default);
        if v < min || v > max {
            self.err(path, format!("must be between {min} and {max}, got {v}"));
            return default;
        }
        v
    }

    /// `text` as the one of `values` whose wire `name` it is, or `fallback` after an
    /// error at `path` that lists the accepted names.
    pub(super) fn one_of<T: Copy>(
        &mut self,
        path: impl Into<FieldPath>,
        text: &str,
        values: &[T],
        name: fn(T) -> &'static str,
        fallback: T,
    ) -> T {
        if let Some(v) = values.iter().copied().find(|v| name(*v) == text) {
            return v;
        }
        let accepted = one_of(values.iter().map(|v| name(*v)));
        self.err(path, format!("`{text}` is not one of {accepted}"));
        fallback
    }

    pub(super) fn identifier(&mut self, path: &str, value: &str, max: usize) -> bool {
        match check_identifier(value, max) {
            Ok(()) => true,
            Err(e) => {
                self.err(path, e);
                false
            }
        }
    }

    pub(super) fn list(&mut self, path: &str, values: &[String], max_len: usize) -> Vec<String> {
        if values.len() > MAX_LIST_VALUES {
            self.err(path, format!("at most {MAX_LIST_VALUES} values"));
        }
        let mut seen = HashSet::new();
        for (i, v) in values.iter().enumerate() {
            self.identifier(&format!("{path}[{i}]"), v, max_len);
            if !seen.insert(v.as_str()) {
                self.err(format!("{path}[{i}]"), format!("duplicate value `{v}`"));
            }
        }
        values.to_vec()
    }

    pub(super) fn permissions(
        &mut self,
        path: &str,
        raw: Option<&Vec<String>>,
    ) -> Option<BTreeSet<Permission>> {
        let raw = raw?;
        let mut set = BTreeSet::new();
        for (i, p) in raw.iter().enumerate() {
            match Permission::parse(p) {
                Some(p) => {
                    set.insert(p);
                }
                None => self.err(
                    format!("{path}[{i}]"),
                    format!(
                        "unknown permission `{p}` (use distribution:extract, gateway:connect, stats:read)"
                    ),
                ),
            }
        }
        Some(set)
    }

    pub(super) fn rate(&mut self, path: &str, raw: Option<&RawRate>) -> Option<Rate> {
        let raw = raw?;
        let Some(rps) = NonZeroU32::new(raw.requests_per_second) else {
            self.err(format!("{path}.requestsPerSecond"), "must be at least 1");
            return None;
        };
        let burst = raw.burst.unwrap_or(raw.requests_per_second);
        if burst < raw.requests_per_second {
            self.err(
                format!("{path}.burst"),
                "must be at least requestsPerSecond",
            );
        }
        Some(Rate {
            requests_per_second: rps,
            burst: NonZeroU32::new(burst).unwrap_or(rps),
        })
    }

    pub(super) fn cidrs(&mut self, path: &str, values: &[String]) -> Vec<IpNet> {
        values
            .iter()
            .enumerate()
            .filter_map(|(i, t)| {
                let parsed = t
                    .parse::<IpNet>()
                    .ok()
                    .or_else(|| t.parse::<IpAddr>().ok().map(IpNet::from));
                if parsed.is_none() {
                    self.err(
                        format!("{path}[{i}]"),
                        format!("`{t}` is not a CIDR or IP address"),
                    );
                }
                parsed
            })
            .collect()
    }

    pub(super) fn hash(&mut self, path: &str, hex_text: &str) -> SecretHash {
        let mut out = [0u8; 32];
        let ok = hex_text.len() == 64
            && hex_text
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            && hex::decode_to_slice(hex_text, &mut out).is_ok();
        if !ok {
            self.err(path, "must be a lower-case hex SHA-256 (64 characters)");
        }
        SecretHash(out)
    }
}

/// A file path of a credential: non-empty, no NUL.
pub(super) fn secret_file(cx: &mut Ctx, path: &str, file: &str) -> PathBuf {
    if file.trim().is_empty() || file.contains('\0') {
        cx.err(path, "must be a file path");
    }
    PathBuf::from(file)
}
