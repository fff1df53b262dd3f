//! Gateway settings: limits on every buffer, queue and wait, upstream pooling, client
//! authentication, staleness and drain. `validate()` reports every problem at once;
//! nothing here reads files or the environment.

use std::time::Duration;

use proxy_pool_api::egress::EgressPolicy;
use proxy_pool_api::throttle::ThrottleConfig;

use crate::listener::TrustedSources;
use crate::parse::http_head::{HARD_MAX_HEADERS, HeadLimits};

/// How clients are authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthMode {
    /// Credentials must match a client in the snapshot.
    #[default]
    Required,
    /// Any (or no) credentials; the base username (or `anonymous`) is the identity.
    /// For local runs and tests only.
    Open,
}

/// Gateway settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayConfig {
    /// Request-head limits.
    pub head: HeadLimits,
    /// Time a client has to send its first request head / SOCKS5 handshake.
    pub handshake_timeout: Duration,
    /// Time a kept-alive client connection may sit idle between requests.
    pub client_idle_timeout: Duration,
    /// Time a tunnel or body transfer may see no bytes in either direction.
    pub io_idle_timeout: Duration,
    /// Time one write to a client or an upstream may make no progress (a peer that
    /// stopped reading): then the connection ends and releases its slot.
    pub write_timeout: Duration,
    /// Longest time a client may take to send one request body.
    pub request_body_timeout: Duration,
    /// Open client connections per listener.
    pub max_connections: usize,
    /// Open client connections from one source address (all listeners together): a
    /// flood from one address cannot take every slot.
    pub max_connections_per_source: usize,
    /// Upstream dialing and pooling.
    pub upstream: UpstreamConfig,
    /// Client authentication.
    pub auth: AuthMode,
    /// Most sticky-session bindings.
    pub max_sessions: usize,
    /// Most sticky-session bindings of one client: a client flooding session IDs
    /// cannot push out other clients' sessions.
    pub max_sessions_per_client: usize,
    /// Which vendor proxies and targets may be dialled (the gateway never dials a
    /// refused address, and never asks a vendor proxy to).
    pub egress: EgressPolicy,
    /// Throttling of failed client authentications (per source and per user).
    pub auth_throttle: ThrottleConfig,
    /// Capacity of the outcome-observation queue (drops beyond it).
    pub outcome_queue: usize,
    /// Grace period for in-flight work on shutdown.
    pub drain_grace: Duration,
    /// Sources (load balancers) whose connections start with a PROXY protocol header
    /// naming the real client; read within `handshake_timeout`. Empty: none.
    pub proxy_protocol: TrustedSources,
}

/// Upstream dialing and connection reuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamConfig {
    /// TCP connect timeout per attempt.
    pub connect_timeout: Duration,
    /// Vendor-proxy handshake timeout per attempt.
    pub handshake_timeout: Duration,
    /// Time to wait for response headers on forwarded requests.
    pub response_timeout: Duration,
    /// Idle kept-alive connections per proxy (and target, for SOCKS5).
    pub pool_max_idle_per_key: usize,
    /// Idle kept-alive connections in total.
    pub pool_max_idle_total: usize,
    /// How long an idle pooled connection is kept.
    pub pool_idle_timeout: Duration,
    /// Upstream response heads larger than this are rejected.
    pub max_response_head: usize,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(3),
            handshake_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(30),
            pool_max_idle_per_key: 8,
            pool_max_idle_total: 4096,
            pool_idle_timeout: Duration::from_secs(30),
            max_response_head: 32 * 1024,
        }
    }
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            head: HeadLimits::default(),
            handshake_timeout: Duration::from_secs(10),
            client_idle_timeout: Duration::from_secs(60),
            io_idle_timeout: Duration::from_secs(300),
            write_timeout: Duration::from_secs(30),
            request_body_timeout: Duration::from_secs(120),
            max_connections: 10_000,
            max_connections_per_source: 2_500,
            upstream: UpstreamConfig::default(),
            auth: AuthMode::Required,
            max_sessions: 100_000,
            max_sessions_per_client: 10_000,
            egress: EgressPolicy::default(),
            auth_throttle: ThrottleConfig::default(),
            outcome_queue: 4096,
            drain_grace: Duration::from_secs(30),
            proxy_protocol: TrustedSources::default(),
        }
    }
}

/// Every problem found in a config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid gateway config: {}", problems.join("; "))]
pub struct ConfigError {
    /// Problems with their field paths.
    pub problems: Vec<String>,
}

impl GatewayConfig {
    /// Checks every field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut problems = Vec::new();
        let mut check = |ok: bool, msg: &str| {
            if !ok {
                problems.push(msg.to_owned());
            }
        };
        check(
            (1024..=1024 * 1024).contains(&self.head.max_head_bytes),
            "head.maxHeadBytes: must be in 1KiB..=1MiB",
        );
        check(
            (1..=HARD_MAX_HEADERS).contains(&self.head.max_headers),
            "head.maxHeaders: must be in 1..=256",
        );
        for (name, d) in [
            ("handshakeTimeout", self.handshake_timeout),
            ("clientIdleTimeout", self.client_idle_timeout),
            ("ioIdleTimeout", self.io_idle_timeout),
            ("writeTimeout", self.write_timeout),
            ("requestBodyTimeout", self.request_body_timeout),
            ("upstream.connectTimeout", self.upstream.connect_timeout),
            ("upstream.handshakeTimeout", self.upstream.handshake_timeout),
            ("upstream.responseTimeout", self.upstream.response_timeout),
            ("upstream.poolIdleTimeout", self.upstream.pool_idle_timeout),
        ] {
            check(!d.is_zero(), &format!("{name}: must be positive"));
        }
        check(
            self.max_connections > 0,
            "maxConnections: must be at least 1",
        );
        check(
            self.max_connections_per_source > 0,
            "maxConnectionsPerSource: must be at least 1",
        );
        check(self.max_sessions > 0, "maxSessions: must be at least 1");
        check(
            (1..=self.max_sessions.max(1)).contains(&self.max_sessions_per_client),
            "maxSessionsPerClient: must be in 1..=maxSessions",
        );
        check(
            self.auth_throttle.burst > 0 && !self.auth_throttle.refill.is_zero(),
            "authThrottle: burst and refill must be positive",
        );
        check(self.outcome_queue > 0, "outcomeQueue: must be at least 1");
        check(
            self.upstream.max_response_head >= 1024,
            "upstream.maxResponseHead: must be at least 1KiB",
        );
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError { problems })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_problems_are_collected() {
        assert!(GatewayConfig::default().validate().is_ok());
        let mut bad = GatewayConfig::default();
        bad.head.max_headers = 0;
        bad.max_connections = 0;
        bad.upstream.connect_timeout = Duration::ZERO;
        let err = bad.validate().unwrap_err();
        assert_eq!(err.problems.len(), 3, "{err}");
        assert!(err.to_string().contains("upstream.connectTimeout"));
    }
}
