//! What a load-generator run is asked to do, checked before it starts: the mode, the
//! pacing, the proxies and the target (loopback only), and the bounds of every knob.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Most concurrent connections (or tunnels held) one run may open.
pub const MAX_CONNECTIONS: usize = 10_000;
/// Most proxy endpoints one run spreads its connections over.
pub const MAX_PROXIES: usize = 1_024;
/// Highest open-loop rate (operations per second).
pub const MAX_RATE: f64 = 10_000_000.0;
/// Longest run.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);
/// Most operations one run may do.
pub const MAX_OPS: u64 = 1_000_000_000_000;
/// Longest per-operation timeout.
pub const MAX_OP_TIMEOUT: Duration = Duration::from_secs(300);
/// Largest latency the histograms hold (larger values are recorded as this).
pub const MAX_LATENCY_US: u64 = 3_600_000_000;
/// What one operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// `GET http://target/path` over kept-alive client connections.
    #[serde(rename = "http")]
    HttpProxy,
    /// A new `CONNECT` tunnel per operation, then one request inside it.
    Connect,
    /// A new SOCKS5 tunnel per operation (username/password when credentials are
    /// given), then one request inside it.
    Socks5,
}

/// How operations are paced.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Pacing {
    /// Every connection sends as fast as its responses come back.
    Closed,
    /// `rate` operations per second in all, spread over the connections; latency from
    /// each operation's intended send time.
    Open {
        /// Operations per second.
        rate: f64,
    },
}

/// A proxy to send through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyEndpoint {
    /// Its loopback address.
    pub addr: SocketAddr,
    /// Username and password (Basic for HTTP, RFC 1929 for SOCKS5); routing parameters
    /// go in the username (`user-region-x-session-y`).
    pub credentials: Option<(String, String)>,
}

impl ProxyEndpoint {
    /// Parses `[scheme://][user:pass@]ip:port` (the scheme is ignored; the mode decides).
    pub fn parse(s: &str) -> Result<Self, ConfigError> {
        let rest = s.split_once("://").map_or(s, |(_, rest)| rest);
        let rest = rest.trim_end_matches('/');
        let (credentials, hostport) = match rest.rsplit_once('@') {
            Some((userinfo, hostport)) => {
                let (u, p) = userinfo
                    .split_once(':')
                    .ok_or_else(|| ConfigError::Proxy("credentials need user:password".into()))?;
                (Some((u.to_owned(), p.to_owned())), hostport)
            }
            None => (None, rest),
        };
        let addr = hostport
            .parse::<SocketAddr>()
            .map_err(|_| ConfigError::Proxy("the proxy must be ip:port".into()))?;
        Ok(Self { addr, credentials })
    }
}

/// The origin every request is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Host (loopback IP literal or `localhost`), as sent to the proxy.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
}

impl Target {
    /// Parses `http://host:port/path`.
    pub fn parse(s: &str) -> Result<Self, ConfigError> {
        let rest = s
            .strip_prefix("http://")
            .ok_or_else(|| ConfigError::Target("the target must be an http:// URL".into()))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => (
                h,
                p.parse::<u16>()
                    .map_err(|_| ConfigError::Target("bad port".into()))?,
            ),
            None => (authority, 80),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        Ok(Self {
            host: host.to_owned(),
            port,
            path: path.to_owned(),
        })
    }

    pub(crate) fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// One run.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// What each operation is.
    pub mode: Mode,
    /// Connection `i` goes through `proxies[i % len]`.
    pub proxies: Vec<ProxyEndpoint>,
    /// The origin.
    pub target: Target,
    /// Concurrent connections (workers).
    pub connections: usize,
    /// Closed or open loop.
    pub pacing: Pacing,
    /// Stop after this many operations (exact: successes + errors).
    pub max_ops: Option<u64>,
    /// Stop issuing operations after this long.
    pub duration: Option<Duration>,
    /// Per operation (including the connect when one is needed).
    pub op_timeout: Duration,
}

/// A configuration the load generator refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Bad proxy endpoint or credentials.
    #[error("proxy: {0}")]
    Proxy(String),
    /// Bad target.
    #[error("target: {0}")]
    Target(String),
    /// A bound or a missing stop condition.
    #[error("{0}")]
    Limit(String),
}

fn is_loopback_host(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn clean(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_graphic())
}

impl LoadConfig {
    /// Checks every bound; load is sent to loopback addresses only.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.proxies.is_empty() || self.proxies.len() > MAX_PROXIES {
            return Err(ConfigError::Limit(format!(
                "1 to {MAX_PROXIES} proxies are needed"
            )));
        }
        for p in &self.proxies {
            if !p.addr.ip().is_loopback() {
                return Err(ConfigError::Proxy(format!(
                    "{}: load goes to loopback proxies only",
                    p.addr
                )));
            }
            if let Some((u, pw)) = &p.credentials {
                if u.is_empty() || u.len() > 255 || pw.len() > 255 || u.contains(':') {
                    return Err(ConfigError::Proxy(
                        "username 1-255 bytes without ':', password up to 255 bytes".into(),
                    ));
                }
                if !clean(u) || !clean(pw) {
                    return Err(ConfigError::Proxy(
                        "credentials must be printable ASCII without spaces".into(),
                    ));
                }
            }
        }
        let t = &self.target;
        if !is_loopback_host(&t.host) {
            return Err(ConfigError::Target(format!(
                "{}: load goes to loopback targets only",
                t.host
            )));
        }
        if t.port == 0 || !t.path.starts_with('/') || t.path.len() > 2048 || !clean(&t.path) {
            return Err(ConfigError::Target(
                "port 1-65535, path starting with '/' (printable, ≤ 2048 bytes)".into(),
            ));
        }
        if self.connections == 0 || self.connections > MAX_CONNECTIONS {
            return Err(ConfigError::Limit(format!(
                "connections: 1 to {MAX_CONNECTIONS}"
            )));
        }
        if let Pacing::Open { rate } = self.pacing
            && !(rate.is_finite() && rate > 0.0 && rate <= MAX_RATE)
        {
            return Err(ConfigError::Limit(format!(
                "rate: above 0, at most {MAX_RATE}"
            )));
        }
        match (self.max_ops, self.duration) {
            (None, None) => {
                return Err(ConfigError::Limit(
                    "a number of operations or a duration is needed".into(),
                ));
            }
            (Some(n), _) if n == 0 || n > MAX_OPS => {
                return Err(ConfigError::Limit(format!("operations: 1 to {MAX_OPS}")));
            }
            (_, Some(d)) if d.is_zero() || d > MAX_DURATION => {
                return Err(ConfigError::Limit("duration: above 0, at most 24 h".into()));
            }
            _ => {}
        }
        if self.op_timeout < Duration::from_millis(1) || self.op_timeout > MAX_OP_TIMEOUT {
            return Err(ConfigError::Limit("timeout: 1 ms to 300 s".into()));
        }
        Ok(())
    }

    /// Operations an open-loop run does (exact): those due before the duration ends,
    /// capped by `max_ops`.
    pub fn open_loop_ops(&self, rate: f64) -> u64 {
        let by_time = self
            .duration
            .map_or(u64::MAX, |d| (d.as_secs_f64() * rate).ceil() as u64);
        self.max_ops.unwrap_or(u64::MAX).min(by_time).min(MAX_OPS)
    }
}
