//! Domain values of the control plane, as both ends use them once the protobuf edge
//! ([`super::convert`]) has checked the wire messages. Times are Unix milliseconds.

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

pub use crate::proxy::{Dial, Dimension, Labels, Protocol, Selector, Strategy};

/// A secret string (an upstream proxy password, a gateway client's inline password):
/// never printed by `Debug`. Serde reads and writes it as the plain string, for the
/// files that must carry it (the gateway clients file's inline form).
#[derive(Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself; call only where it must leave the process.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Credentials for dialing an upstream (vendor) proxy.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Credentials {
    /// Username.
    pub username: String,
    /// Password.
    pub password: Secret,
}

/// One proxy of a worker snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SnapshotProxy {
    /// Proxy ID (unique in the pool).
    pub id: String,
    /// Its upstream.
    pub upstream: String,
    /// How to dial it.
    pub dial: Dial,
    /// Its labels, as the wire carries them (unchecked strings).
    pub labels: Labels<String>,
    /// Most concurrent Active + Reserved uses.
    pub max_concurrency: u32,
    /// Hard expiry.
    pub expires_at_ms: i64,
    /// Last instant a new request may use it.
    pub usable_until_ms: i64,
    /// Ownership epoch of the worker's assignment.
    pub assignment_epoch: u64,
    /// Draining: no new reservations.
    pub draining: bool,
    /// End of the worker's lease (0: no lease bound): nothing goes through the
    /// proxy at or after it.
    pub lease_expires_at_ms: i64,
    /// Routings that must not use this proxy (failed TARGET checks), sorted.
    pub excluded_routings: Vec<String>,
}

/// A username parameter condition (`user-region-shanghai` has key `region`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct UsernameParam {
    /// Key.
    pub key: String,
    /// Accepted values (empty: any value, key present).
    pub values: Vec<String>,
}

impl UsernameParam {
    /// The condition that `key` is present with one of `values` (none: any value).
    pub fn new<V: Into<String>>(
        key: impl Into<String>,
        values: impl IntoIterator<Item = V>,
    ) -> Self {
        Self {
            key: key.into(),
            values: values.into_iter().map(Into::into).collect(),
        }
    }
}

/// When a routing applies: every non-empty part must match.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct RoutingMatch {
    /// Username parameter conditions.
    pub username_params: Vec<UsernameParam>,
    /// Client identities (empty: any).
    pub clients: Vec<String>,
    /// Target hosts, exact or `*.suffix` (empty: any).
    pub target_hosts: Vec<String>,
}

/// Sticky sessions of a routing: on every routing unless it turns them off, as on the
/// commercial gateways (a client that asks for `session-…` gets one).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sticky {
    /// Username parameter holding the session key.
    pub param: String,
    /// Longest life of a session (unless the client chooses with `sesstime`).
    pub session_ttl: Duration,
    /// A session unused this long ends.
    pub idle_timeout: Duration,
    /// Longest life a client may choose with the `sesstime-<minutes>` parameter
    /// (at least `session_ttl`).
    pub max_ttl: Duration,
}

impl Sticky {
    /// Default session lifetime: 10 minutes.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(600);
    /// Default idle timeout: 2 minutes.
    pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
    /// Default longest client-chosen lifetime: 30 minutes.
    pub const DEFAULT_MAX_TTL: Duration = Duration::from_secs(30 * 60);
    /// Upper bound of any session lifetime: one day (`sesstime` is at most 1440).
    pub const LIMIT: Duration = Duration::from_secs(24 * 3600);
    /// The default username parameter: `session`.
    pub const DEFAULT_PARAM: &str = "session";

    /// The longest client-chosen lifetime when none is configured: 30 minutes, or the
    /// routing's own `ttl` when that is longer.
    pub fn default_max_ttl(session_ttl: Duration) -> Duration {
        Self::DEFAULT_MAX_TTL.max(session_ttl)
    }
}

impl Default for Sticky {
    /// Sessions keyed by `session`, 10 minutes, forgotten after 2 idle, clients may ask
    /// for up to 30 (`sesstime-30`).
    fn default() -> Self {
        Self {
            param: Self::DEFAULT_PARAM.to_owned(),
            session_ttl: Self::DEFAULT_TTL,
            idle_timeout: Self::DEFAULT_IDLE_TIMEOUT,
            max_ttl: Self::DEFAULT_MAX_TTL,
        }
    }
}

/// Retries of DIAL / PROXY_HANDSHAKE failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RetryBudget {
    /// Attempts including the first (≥ 1).
    pub max_attempts: u32,
    /// Deadline over all attempts.
    pub deadline: Duration,
}

impl Default for RetryBudget {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            deadline: Duration::from_secs(10),
        }
    }
}

impl RetryBudget {
    /// Most attempts a routing may make, the first included.
    pub const MAX_ATTEMPTS: u32 = 10;

    /// Whether the attempts are within the rule: 1 to [`Self::MAX_ATTEMPTS`].
    pub fn attempts_valid(&self) -> bool {
        (1..=Self::MAX_ATTEMPTS).contains(&self.max_attempts)
    }

    /// Whether the deadline is within the rule: positive.
    pub fn deadline_valid(&self) -> bool {
        !self.deadline.is_zero()
    }
}

/// A routing rule as the worker serves it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Routing {
    /// Unique name.
    pub name: String,
    /// When it applies.
    pub matcher: RoutingMatch,
    /// Upstreams it draws from (empty: any).
    pub upstreams: Vec<String>,
    /// Regions (empty: any).
    pub regions: Vec<String>,
    /// Carriers (empty: any).
    pub carriers: Vec<String>,
    /// Cities (empty: any).
    pub cities: Vec<String>,
    /// Strategy.
    pub strategy: Strategy,
    /// Sticky sessions, if enabled.
    pub sticky: Option<Sticky>,
    /// Retry budget.
    pub retry: RetryBudget,
    /// Target ports CONNECT may reach.
    pub connect_ports: crate::egress::PortRanges,
    /// Username parameters that select proxies by a dimension; `None`: the defaults
    /// ([`Selector::defaults`]), `Some(vec![])`: none.
    pub selectors: Option<Vec<Selector>>,
}

impl Routing {
    /// Most selectors a routing may declare.
    pub const MAX_SELECTORS: usize = 16;

    /// The selectors in force: the declared ones, or the defaults.
    pub fn selectors(&self) -> std::borrow::Cow<'_, [Selector]> {
        match &self.selectors {
            Some(s) => std::borrow::Cow::Borrowed(s),
            None => std::borrow::Cow::Owned(Selector::defaults()),
        }
    }
}

/// A snapshot checksum (SHA-256, see [`super::state`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Checksum(pub [u8; 32]);

impl fmt::Debug for Checksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.0[..6] {
            write!(f, "{b:02x}")?;
        }
        f.write_str("…")
    }
}

/// What names one snapshot version: the header a full snapshot and a delta carry (all
/// zero before the first snapshot).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Header {
    /// Monotonic version.
    pub version: u64,
    /// Ownership epoch (never decreases for a worker).
    pub ownership_epoch: u64,
    /// When it was built.
    pub generated_at_ms: i64,
    /// Not fresh after this instant.
    pub valid_until_ms: i64,
}

/// A complete worker snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Its version.
    pub header: Header,
    /// Routings in match order.
    pub routings: Vec<Routing>,
    /// The worker's proxies, sorted by ID.
    pub proxies: Vec<SnapshotProxy>,
    /// Content checksum.
    pub checksum: Checksum,
}

/// Changes from `base_version` to `version`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delta {
    /// Version the delta applies to.
    pub base_version: u64,
    /// The version after applying.
    pub header: Header,
    /// Added or changed proxies, sorted by ID.
    pub upserts: Vec<SnapshotProxy>,
    /// Removed proxy IDs, sorted.
    pub removals: Vec<String>,
    /// The new routing list, when it changed.
    pub routings: Option<Vec<Routing>>,
    /// Checksum after applying.
    pub checksum: Checksum,
}

/// Where a request failed (or ended).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OutcomeStage {
    /// Connecting to the proxy.
    Dial,
    /// CONNECT / SOCKS5 handshake with the proxy.
    ProxyHandshake,
    /// Before the target's response headers.
    ResponseHeaders,
    /// After the tunnel was up.
    Tunnel,
}

impl OutcomeStage {
    /// Stable lowercase name (metrics label).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dial => "dial",
            Self::ProxyHandshake => "proxy_handshake",
            Self::ResponseHeaders => "response_headers",
            Self::Tunnel => "tunnel",
        }
    }
}

/// One request outcome reported by a worker (an observation only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Proxy.
    pub proxy_id: String,
    /// Routing, if known.
    pub routing: Option<String>,
    /// Stage.
    pub stage: OutcomeStage,
    /// Success.
    pub success: bool,
    /// Latency.
    pub latency: Duration,
    /// Failure code.
    pub failure_code: Option<String>,
    /// When the worker saw it.
    pub observed_at_ms: i64,
}

/// Health-check tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CheckTier {
    /// Connectivity and proxy handshake.
    Basic,
    /// Egress identity and anonymity.
    Egress,
    /// Target reachability per routing.
    Target,
}

impl CheckTier {
    /// Stable lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Basic => "basic",
            Self::Egress => "egress",
            Self::Target => "target",
        }
    }
}

/// One check of a health task: what a checker runs through a proxy. The planner
/// (controller) and the prober (checker) share it; on the wire a task carries one
/// check as its tier plus, for TARGET, its routing and target.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Check {
    /// BASIC: connect and proxy handshake.
    Basic,
    /// EGRESS: the address a target sees, and whether the checker's leaks.
    Egress,
    /// TARGET for one routing.
    Target {
        /// The routing it serves.
        routing: String,
        /// Target host.
        host: String,
        /// Target port.
        port: u16,
    },
}

impl Check {
    /// The tier of this check.
    pub fn tier(&self) -> CheckTier {
        match self {
            Self::Basic => CheckTier::Basic,
            Self::Egress => CheckTier::Egress,
            Self::Target { .. } => CheckTier::Target,
        }
    }
}

/// Why a check failed: a bounded code set, carried on the wire as its `as_str` code and
/// used as the pool's failure label. Shared by the checker and the controller's reducer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FailureCode {
    /// TCP connect to the proxy refused or reset.
    ConnectRefused,
    /// TCP connect to the proxy timed out.
    ConnectTimeout,
    /// The proxy rejected the vendor credentials.
    AuthRejected,
    /// The proxy protocol handshake failed otherwise (closed, garbage, unexpected status).
    HandshakeFailed,
    /// The proxy could not reach the target.
    TargetUnreachable,
    /// The echo answer was missing or malformed.
    BadResponse,
    /// The target saw the checker's own address (the proxy is transparent / leaks).
    ClientLeaked,
    /// The check ran past its deadline.
    Timeout,
    /// The checker could not run the check (not the proxy's fault).
    CheckerError,
    /// The proxy's address is refused by the egress policy (loopback, link-local,
    /// metadata, an internal range): never dialled.
    EgressDenied,
}

impl FailureCode {
    const ALL: [FailureCode; 10] = [
        Self::ConnectRefused,
        Self::ConnectTimeout,
        Self::AuthRejected,
        Self::HandshakeFailed,
        Self::TargetUnreachable,
        Self::BadResponse,
        Self::ClientLeaked,
        Self::Timeout,
        Self::CheckerError,
        Self::EgressDenied,
    ];

    /// Stable snake_case code.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ConnectRefused => "connect_refused",
            Self::ConnectTimeout => "connect_timeout",
            Self::AuthRejected => "auth_rejected",
            Self::HandshakeFailed => "handshake_failed",
            Self::TargetUnreachable => "target_unreachable",
            Self::BadResponse => "bad_response",
            Self::ClientLeaked => "client_leaked",
            Self::Timeout => "timeout",
            Self::CheckerError => "checker_error",
            Self::EgressDenied => "egress_denied",
        }
    }

    /// Inverse of [`FailureCode::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// The failure a reported check carries: none on success, `ClientLeaked` for an
    /// anonymity leak, else the code (an unknown one reads as `HandshakeFailed`).
    pub fn reported(success: bool, leak: bool, code: &str) -> Option<Self> {
        if success {
            None
        } else if leak {
            Some(Self::ClientLeaked)
        } else {
            Some(Self::parse(code).unwrap_or(Self::HandshakeFailed))
        }
    }
}

/// The proxy a check task probes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyEndpoint {
    /// Proxy ID.
    pub id: String,
    /// Upstream.
    pub upstream: String,
    /// How to dial it.
    pub dial: Dial,
}

/// A TARGET-tier target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckTarget {
    /// URL or `host:port`.
    pub url: String,
    /// Expected status (`None`: any 2xx/3xx).
    pub expect_status: Option<u16>,
}

/// One deadline-bound health-check task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckTask {
    /// Task ID (unique per controller run).
    pub task_id: String,
    /// Tier.
    pub tier: CheckTier,
    /// The proxy.
    pub proxy: ProxyEndpoint,
    /// Report by then or the result is discarded.
    pub deadline_ms: i64,
    /// TARGET tier: routing name.
    pub routing: Option<String>,
    /// TARGET tier: the target.
    pub target: Option<CheckTarget>,
}

/// What a checker saw for one check of a task: the checker builds it, the wire
/// carries it ([`super::convert`] maps it to and from `pb::Observation`), the
/// controller's health bridge hands it to the reducer.
///
/// On the wire a failure is a code string plus an anonymity-leak flag; here it is one
/// [`FailureCode`] (`ClientLeaked` for a leak). An unknown code from the wire reads as
/// `HandshakeFailed`; a success carries no failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    /// Task.
    pub task_id: String,
    /// Proxy.
    pub proxy_id: String,
    /// Tier.
    pub tier: CheckTier,
    /// Routing (TARGET tier).
    pub routing: Option<String>,
    /// Whether the check passed.
    pub success: bool,
    /// Time the check took.
    pub latency: Option<Duration>,
    /// Why it failed (`None` on success).
    pub failure: Option<FailureCode>,
    /// Egress address the target saw (EGRESS).
    pub egress: Option<IpAddr>,
    /// When it was observed.
    pub observed_at_ms: i64,
}
