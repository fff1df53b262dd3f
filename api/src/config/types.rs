//! The validated controller configuration: every value parsed into its final type.
//!
//! Built only by [`super::validate`]; every later function trusts it.

use std::collections::BTreeSet;
use std::fmt;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;

pub use crate::egress::{EgressPolicy, PortRanges};
pub use crate::proxy::{Protocol, Strategy};
pub use crate::secret::SaltedHash;

/// The controller's configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Where the activity pool lives.
    pub store: StoreConfig,
    /// Activity pool tunables.
    pub pool: PoolConfig,
    /// The Distribution API.
    pub distribution: DistributionConfig,
    /// The admin listener.
    pub admin: AdminConfig,
    /// The gRPC control plane (`None`: off).
    pub control_plane: Option<ControlPlaneConfig>,
    /// Providers of proxies, by unique name.
    pub upstreams: Vec<UpstreamConfig>,
    /// Gateway routing rules, ordered by priority then name.
    pub routings: Vec<RoutingConfig>,
    /// Distribution clients.
    pub clients: Vec<ClientConfig>,
    /// Usage analytics (`None`: off).
    pub analytics: Option<AnalyticsConfig>,
    /// Read-through cache (`None`: off).
    pub cache: Option<CacheConfig>,
    /// Graceful shutdown.
    pub shutdown: ShutdownConfig,
    /// Controller replicas and the leader lease.
    pub leadership: LeadershipConfig,
    /// Addresses the controller dials for others (vendor-supplied proxy addresses).
    pub egress: EgressPolicy,
}

/// Controller replicas and the leader lease (`leadership`, `docs/reliability.md`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeadershipConfig {
    /// How many controller replicas share the store (1 with the memory store).
    pub replicas: u32,
    /// The leader lease: a leader that could not renew for this long has stopped.
    pub lease: Duration,
    /// How often the leader renews its lease.
    pub renew_every: Duration,
    /// How often a follower tries to take the lease.
    pub retry_every: Duration,
    /// Where the lease lives.
    pub backend: LeadershipBackend,
}

/// Where the leader lease lives (`leadership.backend`). Either way the fencing token
/// of every leader-only write comes from the pool's Redis.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum LeadershipBackend {
    /// The lease is a key on the pool's Redis (also the choice outside Kubernetes).
    #[default]
    Redis,
    /// A `coordination.k8s.io/v1` Lease in the controller pod's namespace.
    Kubernetes(KubernetesLeadership),
}

/// The Kubernetes Lease of the controller replicas (`leadership.kubernetes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubernetesLeadership {
    /// Name of the Lease (a DNS subdomain).
    pub lease_name: String,
    /// The leader labels its own pod `proxypool.io/leader=true` (every other replica
    /// labels its own `false`), so a Service can select the leader alone.
    pub label_pod: bool,
}

/// The pod label that marks the leading controller replica (`true` / `false`).
pub const LEADER_POD_LABEL: &str = "proxypool.io/leader";

impl LeadershipConfig {
    /// Longest time from a leader's death to another replica leading.
    pub fn failover_bound(&self) -> Duration {
        self.lease + self.retry_every
    }
}

impl Default for LeadershipConfig {
    fn default() -> Self {
        Self {
            replicas: 1,
            lease: Duration::from_secs(10),
            renew_every: Duration::from_secs(2),
            retry_every: Duration::from_secs(2),
            backend: LeadershipBackend::Redis,
        }
    }
}

/// The pool's backing store.
#[derive(Clone, Debug, PartialEq)]
pub enum StoreConfig {
    /// The embedded in-memory pool (one controller replica only).
    Memory,
    /// Redis (production).
    Redis(RedisConfig),
}

/// How to reach Redis.
#[derive(Clone, Debug, PartialEq)]
pub struct RedisConfig {
    /// Direct or through sentinels.
    pub target: RedisTarget,
    /// ACL user.
    pub username: Option<String>,
    /// File holding the password; read when the store is built.
    pub password_file: Option<PathBuf>,
    /// Bound on one round trip.
    pub command_timeout: Duration,
    /// TLS to the master (and sentinels); `None`: plaintext.
    pub tls: Option<RedisTls>,
}

/// TLS to Redis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisTls {
    /// PEM trust bundle (`None`: the system's roots).
    pub ca_file: Option<PathBuf>,
}

/// Where the Redis master is.
#[derive(Clone, Debug, PartialEq)]
pub enum RedisTarget {
    /// `redis://host:port/[db]`.
    Address(String),
    /// A Sentinel-monitored master.
    Sentinel {
        /// Master name.
        master_name: String,
        /// `host:port` of each sentinel.
        addresses: Vec<String>,
        /// ACL user on the sentinels.
        username: Option<String>,
        /// File holding the sentinels' password; read when the store is built.
        password_file: Option<PathBuf>,
    },
}

/// Activity pool tunables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Index members one extraction may examine.
    pub extract_scan_budget: u32,
    /// Index members one inventory read may examine.
    pub inventory_scan_budget: u32,
    /// Expired records each write purges on the side.
    pub opportunistic_purge: u32,
    /// Longest vendor TTL accepted.
    pub max_ttl: Duration,
    /// Time between two maintenance passes.
    pub maintenance_interval: Duration,
    /// Records one maintenance pass purges at most.
    pub maintenance_batch: u32,
}

/// Fulfilment used when a request omits it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FulfillmentDefault {
    /// Return what is eligible.
    Partial,
    /// All or nothing.
    AllOrNothing,
}

/// The Distribution API.
#[derive(Clone, Debug, PartialEq)]
pub struct DistributionConfig {
    /// Listen address.
    pub listen: SocketAddr,
    /// Largest `count`.
    pub max_count_per_request: NonZeroU32,
    /// Fulfilment when omitted.
    pub default_fulfillment: FulfillmentDefault,
    /// Least remaining life of a returned proxy.
    pub min_remaining_ttl: Duration,
    /// Oldest health check of a returned proxy (`None`: not required).
    pub max_health_check_age: Option<Duration>,
    /// Eligible proxies kept for the gateway.
    pub reserve_for_gateway: u32,
    /// Replay window of idempotent results.
    pub idempotency_ttl: Duration,
    /// Request limits.
    pub limits: LimitsConfig,
    /// CIDRs whose forwarded headers are believed.
    pub trusted_proxies: Vec<IpNet>,
    /// Source CIDRs allowed to call the API (empty: any source).
    pub allowed_sources: Vec<IpNet>,
    /// Across every client and replica (`None`: unlimited).
    pub global_rate: Option<Rate>,
    /// Default per-client rate (`None`: unlimited).
    pub per_client_rate: Option<Rate>,
    /// Authentication.
    pub auth: AuthConfig,
}

/// Request limits of the Distribution listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitsConfig {
    /// Largest body.
    pub max_body_bytes: u32,
    /// Largest sum of header names and values.
    pub max_header_bytes: u32,
    /// Most header fields.
    pub max_headers: u32,
    /// Most open connections.
    pub max_connections: u32,
    /// Most open connections from one source address.
    pub max_connections_per_source: u32,
    /// Most requests served at once.
    pub max_in_flight: u32,
    /// Deadline of one request.
    pub request_timeout: Duration,
}

/// A token bucket: `requests_per_second` sustained, `burst` at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    /// Sustained rate.
    pub requests_per_second: NonZeroU32,
    /// Bucket size (≥ 1).
    pub burst: NonZeroU32,
}

/// A permission.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Permission {
    /// `distribution:extract`.
    DistributionExtract,
    /// `gateway:connect`.
    GatewayConnect,
    /// `stats:read`.
    StatsRead,
}

impl Permission {
    /// Every permission (what a credential without declared permissions holds).
    pub const ALL: [Permission; 3] = [
        Permission::DistributionExtract,
        Permission::GatewayConnect,
        Permission::StatsRead,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DistributionExtract => "distribution:extract",
            Self::GatewayConnect => "gateway:connect",
            Self::StatsRead => "stats:read",
        }
    }

    /// Inverse of [`Permission::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

/// An authentication method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AuthMethodKind {
    /// `X-API-Key`.
    ApiKey,
    /// `Authorization: Basic`.
    Basic,
    /// `Authorization: Bearer`.
    Bearer,
}

impl AuthMethodKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ApiKey => "apiKey",
            Self::Basic => "basic",
            Self::Bearer => "bearer",
        }
    }
}

/// How the listener authenticates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthMode {
    /// No credentials; clients are identified by source address. Only when the config
    /// says `auth.mode: none`.
    None,
    /// Any enabled method identifies a configured client; without a usable client
    /// every request is refused (401).
    Any,
}

/// Authentication of the Distribution listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthConfig {
    /// Mode.
    pub mode: AuthMode,
    /// Permissions of credentials (and anonymous clients) that declare none
    /// (`None`: every permission, the compatible default).
    pub permissions: Option<BTreeSet<Permission>>,
    /// Enabled methods, each with optional permissions.
    pub methods: Vec<AuthMethodConfig>,
}

/// One enabled method.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthMethodConfig {
    /// Which.
    pub kind: AuthMethodKind,
    /// Permissions through this method when the client declares none.
    pub permissions: Option<BTreeSet<Permission>>,
    /// `bearer` only: ServiceAccount tokens reviewed by Kubernetes.
    pub token_review: Option<TokenReviewConfig>,
}

/// Bearer tokens checked with a Kubernetes `TokenReview`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenReviewConfig {
    /// The audience tokens must carry.
    pub audience: String,
    /// Kubeconfig to use (`None`: `KUBECONFIG`, `~/.kube/config`, then in-cluster).
    pub kubeconfig_file: Option<PathBuf>,
}

/// The admin listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminConfig {
    /// Listen address.
    pub listen: SocketAddr,
}

/// The gRPC control plane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlPlaneConfig {
    /// Listen address.
    pub listen: SocketAddr,
    /// How the listener is secured.
    pub transport: ControlPlaneTransport,
    /// Assignable proxies of each upstream left unassigned for extraction.
    pub extraction_reserve: u32,
    /// Capacity (sum of `maxConcurrency`) the ownership manager aims to give each
    /// gateway.
    pub target_slots_per_worker: u64,
    /// Most drains begun per ownership pass for extraction demand.
    pub drain_batch: u32,
    /// How long an extraction the unowned pool cannot serve waits for drains (zero:
    /// an allOrNothing request answers 409 at once, a partial one what it got).
    pub drain_wait: Duration,
    /// Lease of one assignment.
    pub lease: Duration,
    /// Renew a lease when less than this is left.
    pub renew_before: Duration,
    /// Validity of a published snapshot.
    pub snapshot_validity: Duration,
    /// A gateway refuses new traffic past this age without a valid snapshot.
    pub max_stale_age: Duration,
    /// Interval of the gateways' runtime reports.
    pub report_interval: Duration,
}

/// How the control-plane listener is secured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlPlaneTransport {
    /// Neither `tls` nor `loopbackPlaintext` given: the controller does not serve the
    /// control plane (and says so in its log).
    Unconfigured,
    /// Plaintext on a loopback listener, explicitly configured as a test fixture.
    LoopbackPlaintext,
    /// mTLS with SPIFFE identities.
    Mtls(ControlPlaneTls),
}

/// mTLS material of the control-plane listener (files read at start-up).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlPlaneTls {
    /// Server certificate chain (PEM).
    pub cert_file: PathBuf,
    /// Server private key (PEM).
    pub key_file: PathBuf,
    /// Trust bundle of client certificates (PEM).
    pub client_ca_file: PathBuf,
    /// SPIFFE trust domain of accepted clients.
    pub trust_domain: String,
    /// Environment segment of accepted SPIFFE IDs.
    pub environment: String,
}

/// One provider.
#[derive(Clone, Debug, PartialEq)]
pub struct UpstreamConfig {
    /// Unique name (a valid pool upstream ID).
    pub name: String,
    /// Source.
    pub source: SourceConfig,
    /// Protocol.
    pub protocol: Protocol,
    /// Region label.
    pub region: Option<String>,
    /// Carrier label.
    pub carrier: Option<String>,
    /// Hard lifetime.
    pub ttl: Duration,
    /// Safety margin (< ttl).
    pub safety_margin: Duration,
    /// How long after a new pool generation begins (first install, or a store that
    /// lost its data) this upstream's proxies are held back: neither extracted nor
    /// assigned to gateways (`docs/pool.md`, "Pool generations"). Default `ttl`; at
    /// most `pool.maxTtl`; `0s` turns the hold-back off.
    pub quarantine: Duration,
    /// Per-proxy capacity.
    pub max_concurrency_per_proxy: u32,
    /// Hard limit on un-extracted inventory.
    pub max_size: NonZeroU32,
    /// Time between fetches.
    pub fetch_interval: Duration,
    /// Health checking of its proxies.
    pub health: UpstreamHealthConfig,
}

/// Health checking of one upstream's proxies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamHealthConfig {
    /// Time between two checks of one AVAILABLE proxy.
    pub interval: Duration,
    /// Deadline of one check (≤ `interval`).
    pub timeout: Duration,
    /// Consecutive failures that make a proxy UNHEALTHY (1–20).
    pub failure_threshold: NonZeroU32,
    /// Also run EGRESS checks.
    pub egress: bool,
    /// TARGET check URLs (http/https, at most 16).
    pub targets: Vec<String>,
}

impl Default for UpstreamHealthConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(15),
            timeout: Duration::from_secs(5),
            failure_threshold: NonZeroU32::MIN.saturating_add(1),
            egress: false,
            targets: Vec::new(),
        }
    }
}

/// Where an upstream's proxies come from.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceConfig {
    /// A fixed list.
    Static(StaticSourceConfig),
    /// A vendor API (fetched by the provider reconciler).
    VendorApi(VendorApiConfig),
}

/// A fixed list of proxies.
#[derive(Clone, Debug, PartialEq)]
pub struct StaticSourceConfig {
    /// Endpoints.
    pub proxies: Vec<StaticProxy>,
    /// Credentials of every listed proxy.
    pub credentials: Option<ProxyCredentials>,
    /// Mark upserted proxies AVAILABLE right away.
    pub assume_healthy: bool,
}

/// One listed endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticProxy {
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// Port.
    pub port: u16,
}

/// Credentials of upstream proxies.
#[derive(Clone, PartialEq, Eq)]
pub struct ProxyCredentials {
    /// Username.
    pub username: String,
    /// Where the password is.
    pub password: PasswordSource,
}

impl fmt::Debug for ProxyCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyCredentials")
            .field("username", &self.username)
            .field("password", &"***")
            .finish()
    }
}

/// A password inline or in a file.
#[derive(Clone, PartialEq, Eq)]
pub enum PasswordSource {
    /// Inline (local runs).
    Inline(String),
    /// A file read at start-up.
    File(PathBuf),
}

impl fmt::Debug for PasswordSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Inline(_) => f.write_str("Inline(***)"),
            Self::File(p) => f.debug_tuple("File").field(p).finish(),
        }
    }
}

/// A vendor API source.
#[derive(Clone, Debug, PartialEq)]
pub struct VendorApiConfig {
    /// URL.
    pub url: String,
    /// `json` or `lines`.
    pub format: VendorFormat,
    /// File with the API key.
    pub api_key_file: Option<PathBuf>,
    /// Credentials of the vendor's proxies.
    pub credentials: Option<ProxyCredentials>,
    /// Deadline of one call.
    pub timeout: Duration,
    /// Most calls per minute.
    pub max_requests_per_minute: u32,
    /// Most proxies taken from one call (`None`: as many as the vendor returns).
    pub max_proxies_per_fetch: Option<NonZeroU32>,
}

/// Vendor response formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VendorFormat {
    /// JSON array of objects.
    Json,
    /// One `host:port[:user:pass]` per line.
    Lines,
}

/// One routing rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutingConfig {
    /// Name.
    pub name: String,
    /// Order.
    pub priority: i32,
    /// Clients (empty: all).
    pub clients: Vec<String>,
    /// Upstreams.
    pub upstreams: Vec<String>,
    /// Regions (empty: any).
    pub regions: Vec<String>,
    /// Carriers (empty: any).
    pub carriers: Vec<String>,
    /// Strategy.
    pub strategy: Strategy,
    /// Username parameters that must match, by key (sorted).
    pub username_params: Vec<UsernameParamConfig>,
    /// Target hosts, exact or `*.suffix` (empty: any).
    pub target_hosts: Vec<String>,
    /// Port of the TARGET health checks of the exact `target_hosts`.
    pub target_check_port: u16,
    /// Sticky sessions (`None`: off).
    pub sticky: Option<StickyConfig>,
    /// Retry budget.
    pub retry: RetryConfig,
    /// Gateway groups that serve it (empty: every gateway).
    pub gateway_groups: Vec<String>,
    /// Target ports CONNECT may reach.
    pub connect_ports: PortRanges,
}

/// One username parameter condition of a routing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsernameParamConfig {
    /// Key, e.g. `region`.
    pub key: String,
    /// Accepted values (empty: the key must be present with any value).
    pub values: Vec<String>,
}

/// Sticky sessions of a routing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StickyConfig {
    /// Username parameter holding the session key.
    pub param: String,
    /// Longest life of a binding.
    pub ttl: Duration,
    /// A session unused this long ends (≤ `ttl`).
    pub idle_timeout: Duration,
}

/// Retries of DIAL / PROXY_HANDSHAKE failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryConfig {
    /// Attempts including the first (1–10).
    pub max_attempts: u32,
    /// Deadline over all attempts.
    pub deadline: Duration,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            deadline: Duration::from_secs(10),
        }
    }
}

/// A SHA-256 of a secret; compared in constant time by the authenticator.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SecretHash(pub [u8; 32]);

impl fmt::Debug for SecretHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretHash(***)")
    }
}

/// HTTP Basic credentials.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BasicCredentials {
    /// User name.
    pub username: String,
    /// Password, salted and hashed.
    pub password: SaltedHash,
}

/// A Distribution client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientConfig {
    /// Name and client ID.
    pub name: String,
    /// Declared permissions.
    pub permissions: Option<BTreeSet<Permission>>,
    /// Most proxies per request.
    pub max_extract_count: Option<NonZeroU32>,
    /// Allowed upstreams (empty: any).
    pub allowed_upstreams: Vec<String>,
    /// Allowed regions (empty: any).
    pub allowed_regions: Vec<String>,
    /// Own rate limit (`None`: the listener default).
    pub rate_limit: Option<Rate>,
    /// API key hashes.
    pub api_keys: Vec<SecretHash>,
    /// Basic credentials.
    pub basic: Option<BasicCredentials>,
    /// Bearer token hashes.
    pub bearer_tokens: Vec<SecretHash>,
    /// Kubernetes ServiceAccounts (`namespace/name`) whose reviewed tokens are this
    /// client.
    pub service_accounts: Vec<String>,
    /// Credentials still in files: [`super::resolve_secret_files`] reads and hashes
    /// them into the fields above (and empties this list).
    pub secret_files: Vec<ClientSecretFile>,
}

/// The Kubernetes user a `namespace/name` ServiceAccount authenticates as
/// (`system:serviceaccount:<namespace>:<name>`); `None` when not of that shape.
pub fn service_account_user(service_account: &str) -> Option<String> {
    let (ns, name) = service_account.split_once('/')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains('/'))
        .then(|| format!("system:serviceaccount:{ns}:{name}"))
}

/// What a client credential file holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientSecretKind {
    /// An `X-API-Key` value.
    ApiKey,
    /// A bearer token.
    BearerToken,
    /// The HTTP Basic user name (the password comes with a `BasicPassword` entry or
    /// is the salted hash in `password`).
    BasicUsername {
        /// The password's salted hash when it is given inline.
        password: Option<SaltedHash>,
    },
    /// The HTTP Basic password.
    BasicPassword {
        /// The user name when it is given inline (else a `BasicUsername` entry).
        username: Option<String>,
    },
}

/// A client credential referenced by file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientSecretFile {
    /// What it holds.
    pub kind: ClientSecretKind,
    /// The file.
    pub path: PathBuf,
    /// Its field path in the config, for error messages.
    pub field: String,
}

/// Graceful shutdown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShutdownConfig {
    /// Longest time from the signal to exit.
    pub grace_period: Duration,
    /// Time spent not-ready before the listeners stop accepting.
    pub drain_delay: Duration,
}

/// Usage analytics (`analytics`, see `docs/analytics.md`): uses the store's Redis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnalyticsConfig {
    /// File holding the PostgreSQL DSN (a secret: read at start-up, never logged).
    pub dsn_file: PathBuf,
    /// IANA time zone of the day boundaries.
    pub time_zone: String,
    /// Prefix of the Redis keys.
    pub key_prefix: String,
    /// Bounded event queue.
    pub queue_capacity: u32,
    /// Time between two flushes.
    pub flush_interval: Duration,
    /// Early flush threshold.
    pub flush_after_events: u32,
    /// Natural days of daily rows kept.
    pub retention_days: u32,
    /// Persisted daily buckets kept in Redis.
    pub hot_days: u32,
    /// Budget of the final flush at shutdown.
    pub shutdown_flush_timeout: Duration,
    /// File with the identity digest key (optional).
    pub identity_key_file: Option<PathBuf>,
}

/// The read-through cache (`cache`): uses the store's Redis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheConfig {
    /// Prefix of the Redis keys.
    pub key_prefix: String,
    /// Keys per batch (1..=100).
    pub batch_size: u32,
    /// Longest shared loader call.
    pub loader_timeout: Duration,
    /// Loader calls at once, per namespace.
    pub loader_concurrency: u32,
    /// Budget of one Redis round trip.
    pub redis_timeout: Duration,
    /// `TokenReview` results.
    pub token_review: CacheNamespaceConfig,
}

/// One cache namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheNamespaceConfig {
    /// Hard TTL.
    pub ttl: Duration,
    /// Random shortening of the TTL, percent.
    pub jitter_percent: u8,
    /// TTL of negative entries (`None`: never stored).
    pub negative_ttl: Option<Duration>,
    /// Largest encoded entry stored.
    pub max_entry_bytes: u32,
}
