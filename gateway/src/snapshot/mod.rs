//! The gateway's own view of a control-plane snapshot: plain domain values
//! ([`Snapshot`], [`Routing`], [`UpstreamProxy`]) that the control-plane client (or a
//! test) fills in, the compiled [`LiveSnapshot`] the hot path reads (per-routing
//! candidate lists precomputed), and the [`SnapshotHandle`] that publishes it with one
//! atomic pointer swap. Protobuf never reaches this module: conversion happens at the
//! edge.

pub mod file;
mod handle;
pub mod live;

pub use handle::{ChannelSource, SnapshotHandle, SnapshotSource, run_source};
pub use live::{Candidate, CompiledRouting, LiveSnapshot, ProxyEntry, SnapshotError, UpstreamAddr};

use proxy_pool_api::egress::PortRanges;
use proxy_pool_api::secret::SaltedHash;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// A proxy's ID (cheap to clone).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProxyId(Arc<str>);

impl ProxyId {
    /// The ID text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for ProxyId {
    fn from(s: &str) -> Self {
        Self(Arc::from(s))
    }
}

impl From<String> for ProxyId {
    fn from(s: String) -> Self {
        Self(Arc::from(s))
    }
}

impl fmt::Debug for ProxyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for ProxyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The protocol a vendor proxy speaks to us.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UpstreamProtocol {
    /// HTTP proxy: `CONNECT` tunnels and absolute-URI forwarding.
    Http,
    /// SOCKS5 (`CONNECT`, optional username/password).
    Socks5,
}

/// A vendor proxy's credentials. `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct ProxyCredentials {
    /// User name.
    pub username: String,
    /// Password.
    pub password: String,
}

impl fmt::Debug for ProxyCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyCredentials")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// How long before its lease end the gateway stops using a proxy: room for clock
/// skew between this host and the pool's clock (Redis `TIME`), so a proxy the pool
/// releases at the lease end is no longer in use by then.
pub const LEASE_SAFETY: Duration = Duration::from_secs(1);

/// One vendor proxy assigned to this worker.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamProxy {
    /// Pool-wide ID.
    pub id: ProxyId,
    /// Protocol it speaks.
    pub protocol: UpstreamProtocol,
    /// Host (IP literal or DNS name).
    pub host: String,
    /// Port.
    pub port: u16,
    /// Credentials, if the proxy needs them.
    pub credentials: Option<ProxyCredentials>,
    /// Name of the Upstream (vendor) it came from.
    pub upstream: String,
    /// Region label.
    pub region: String,
    /// Carrier label.
    pub carrier: String,
    /// Most concurrent requests/tunnels through it.
    pub max_concurrent: u32,
    /// Hard expiry.
    pub expires_at: SystemTime,
    /// No new work is started on it from this instant.
    pub usable_until: SystemTime,
    /// Latency the health checks observed, if any.
    pub observed_latency: Option<Duration>,
    /// Being drained: keep counting, never select.
    pub draining: bool,
    /// Ownership epoch of this worker's assignment (echoed in runtime reports).
    pub assignment_epoch: u64,
    /// End of this worker's lease on the proxy (`None`: no lease bound, e.g. a
    /// snapshot file). Nothing goes through the proxy from
    /// `lease_until − LEASE_SAFETY` on: no new request, and open tunnels are closed.
    pub lease_until: Option<SystemTime>,
    /// Routings that must not use it (failed TARGET checks for their targets).
    pub excluded_routings: Vec<String>,
}

/// Proxy selection strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// Each candidate in turn.
    #[default]
    RoundRobin,
    /// The candidate with the fewest active + reserved (exact up to
    /// [`crate::select::LEAST_ACTIVE_WINDOW`] candidates, a rotating window beyond).
    LeastActive,
    /// The better of two random candidates by (load + 1) × latency.
    PowerOfTwoChoices,
}

/// Sticky-session policy, keyed by the `session` username parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StickyPolicy {
    /// Longest life of a session's binding to one proxy.
    pub ttl: Duration,
    /// A binding unused this long is forgotten.
    pub idle_timeout: Duration,
}

/// Retries on DIAL and PROXY_HANDSHAKE failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts per request, the first included (at least 1).
    pub max_attempts: u32,
    /// Deadline for all attempts together.
    pub deadline: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            deadline: Duration::from_secs(10),
        }
    }
}

/// A username parameter condition: `key` present, with one of `values` (any value
/// when `values` is empty). Compared ASCII case-insensitively.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ParamMatch {
    /// Parameter key, e.g. `region`.
    pub key: String,
    /// Accepted values.
    pub values: Vec<String>,
}

impl ParamMatch {
    /// `key` must equal `value`.
    pub fn exact(key: &str, value: &str) -> Self {
        Self {
            key: key.to_owned(),
            values: vec![value.to_owned()],
        }
    }
}

/// Which requests a routing takes; every non-empty condition must hold.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RoutingMatch {
    /// Client names (empty: any authenticated client).
    pub clients: Vec<String>,
    /// Username parameter conditions (all must hold).
    pub username_params: Vec<ParamMatch>,
    /// Target hosts: exact names/IPs or `*.suffix` (empty: any).
    pub target_hosts: Vec<String>,
}

/// A routing rule, in snapshot order (first match wins).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routing {
    /// Name (unique in a snapshot).
    pub name: String,
    /// Which requests it takes.
    pub matcher: RoutingMatch,
    /// Allowed Upstreams (empty: any).
    pub upstreams: Vec<String>,
    /// Allowed regions (empty: any).
    pub regions: Vec<String>,
    /// Allowed carriers (empty: any).
    pub carriers: Vec<String>,
    /// Selection strategy.
    pub strategy: Strategy,
    /// Sticky sessions, if enabled.
    pub sticky: Option<StickyPolicy>,
    /// Username parameter carrying the session key (`session`).
    pub session_param: String,
    /// Retry budget.
    pub retry: RetryPolicy,
    /// Target ports CONNECT may reach (default 443 and 80).
    pub connect_ports: PortRanges,
}

impl Routing {
    /// A routing that matches everything and allows every proxy (CONNECT to 443 and
    /// 80 only).
    pub fn catch_all(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            matcher: RoutingMatch::default(),
            upstreams: Vec::new(),
            regions: Vec::new(),
            carriers: Vec::new(),
            strategy: Strategy::RoundRobin,
            sticky: None,
            session_param: "session".to_owned(),
            retry: RetryPolicy::default(),
            connect_ports: PortRanges::default(),
        }
    }
}

/// A client allowed to use the gateway: the base username it presents and its
/// password salted and hashed (never the password itself, never an unsalted digest).
#[derive(Clone, PartialEq, Eq)]
pub struct ClientCredential {
    /// Client name (what `RoutingMatch::clients` lists).
    pub client: String,
    /// Base username (before any `-key-value` parameters).
    pub username: String,
    /// The password, salted and hashed.
    pub password: SaltedHash,
}

impl ClientCredential {
    /// Builds a credential from a clear password (tests and static configs).
    pub fn from_password(client: &str, username: &str, password: &str) -> Self {
        Self {
            client: client.to_owned(),
            username: username.to_owned(),
            password: SaltedHash::new(password.as_bytes()),
        }
    }
}

impl fmt::Debug for ClientCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCredential")
            .field("client", &self.client)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// A versioned snapshot as delivered by the control plane.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// Monotonic version.
    pub version: u64,
    /// Ownership epoch.
    pub epoch: u64,
    /// When the controller built it.
    pub generated_at: SystemTime,
    /// No new traffic on it after this instant.
    pub valid_until: SystemTime,
    /// Routings in match order.
    pub routings: Vec<Routing>,
    /// This worker's proxies.
    pub proxies: Vec<UpstreamProxy>,
    /// Clients allowed to authenticate.
    pub clients: Vec<ClientCredential>,
}
