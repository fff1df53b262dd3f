//! The controller's configuration file as written: serde structs only.
//!
//! Every struct denies unknown fields and carries its defaults; nothing here checks a
//! value (that is `validate.rs`) and nothing here does I/O.

use serde::{Deserialize, Serialize};

/// The whole file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawConfig {
    /// Where the activity pool lives.
    #[serde(default)]
    pub store: RawStore,
    /// Activity pool tunables.
    #[serde(default)]
    pub pool: RawPool,
    /// The Distribution HTTP API listener.
    #[serde(default)]
    pub distribution: RawDistribution,
    /// The admin / ops listener.
    #[serde(default)]
    pub admin: RawAdmin,
    /// The gRPC control-plane listener (off by default).
    #[serde(default)]
    pub control_plane: RawControlPlane,
    /// Providers of proxies.
    #[serde(default)]
    pub upstreams: Vec<RawUpstream>,
    /// Gateway routing rules.
    #[serde(default)]
    pub routings: Vec<RawRouting>,
    /// Distribution (and gateway) clients.
    #[serde(default)]
    pub clients: Vec<RawClient>,
    /// Usage analytics (off by default).
    #[serde(default)]
    pub analytics: RawAnalytics,
    /// Read-through cache (off by default).
    #[serde(default)]
    pub cache: RawCache,
    /// Graceful shutdown.
    #[serde(default)]
    pub shutdown: RawShutdown,
    /// Controller replicas and the leader lease.
    #[serde(default)]
    pub leadership: RawLeadership,
    /// Addresses the controller dials for others (vendor-supplied proxy addresses).
    #[serde(default)]
    pub egress: RawEgress,
}

/// `leadership`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawLeadership {
    /// How many controller replicas share the store (1..=16; memory store: 1).
    #[serde(default)]
    pub replicas: Option<u32>,
    /// The leader lease, e.g. `10s`.
    #[serde(default)]
    pub lease: Option<String>,
    /// How often the leader renews it (at most a third of the lease).
    #[serde(default)]
    pub renew_every: Option<String>,
    /// How often a follower tries to take it.
    #[serde(default)]
    pub retry_every: Option<String>,
    /// Where the lease lives: `redis` (default) or `kubernetes`.
    #[serde(default)]
    pub backend: Option<String>,
    /// The Kubernetes Lease (`backend: kubernetes`).
    #[serde(default)]
    pub kubernetes: Option<RawKubernetesLeadership>,
}

/// `leadership.kubernetes`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawKubernetesLeadership {
    /// Name of the `coordination.k8s.io/v1` Lease in the pod's namespace.
    #[serde(default)]
    pub lease_name: Option<String>,
    /// Whether the leader labels its own pod (`proxypool.io/leader`).
    #[serde(default)]
    pub label_pod: Option<bool>,
}

/// `egress`: the egress policy (`proxy_pool_api::egress`). Built-in deny ranges
/// (loopback, link-local, metadata, unspecified, multicast) always apply.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawEgress {
    /// More ranges refused: the cluster's pod and service CIDRs, other internal ranges.
    #[serde(default)]
    pub deny_cidrs: Vec<String>,
    /// Ranges allowed even when denied above or built in (explicit opt-in, e.g.
    /// `127.0.0.0/8` for local runs with the vendor simulator).
    #[serde(default)]
    pub allow_cidrs: Vec<String>,
}

/// `store`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawStore {
    /// `memory` (default) or `redis`.
    #[serde(default)]
    pub backend: Option<String>,
    /// Redis connection; required when `backend: redis`.
    #[serde(default)]
    pub redis: Option<RawRedis>,
}

/// `store.redis`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawRedis {
    /// `redis://host:port/[db]` of a single Redis.
    #[serde(default)]
    pub address: Option<String>,
    /// A Sentinel-monitored master instead of `address`.
    #[serde(default)]
    pub sentinel: Option<RawSentinel>,
    /// ACL user name.
    #[serde(default)]
    pub username: Option<String>,
    /// File holding the password (a mounted Secret key).
    #[serde(default)]
    pub password_file: Option<String>,
    /// Bound on one Redis round trip, e.g. `500ms`.
    #[serde(default)]
    pub command_timeout: Option<String>,
    /// TLS settings (`rediss://` addresses, or `sentinel.tls`).
    #[serde(default)]
    pub tls: Option<RawRedisTls>,
}

/// `store.redis.tls`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawRedisTls {
    /// PEM trust bundle the server certificates are verified against (default: the
    /// system's roots).
    #[serde(default)]
    pub ca_file: Option<String>,
}

/// `store.redis.sentinel`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawSentinel {
    /// The master's name in the sentinels' configuration.
    pub master_name: String,
    /// `host:port` of each sentinel.
    pub addresses: Vec<String>,
    /// ACL user name on the sentinels.
    #[serde(default)]
    pub username: Option<String>,
    /// File holding the sentinels' password (a mounted Secret key).
    #[serde(default)]
    pub password_file: Option<String>,
    /// Talk TLS to the sentinels and to the master they name.
    #[serde(default)]
    pub tls: bool,
}

/// `pool`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawPool {
    /// Index members one extraction may examine.
    #[serde(default)]
    pub extract_scan_budget: Option<u32>,
    /// Index members one inventory read may examine.
    #[serde(default)]
    pub inventory_scan_budget: Option<u32>,
    /// Expired records each write purges on the side.
    #[serde(default)]
    pub opportunistic_purge: Option<u32>,
    /// Longest vendor TTL accepted.
    #[serde(default)]
    pub max_ttl: Option<String>,
    /// Time between two maintenance passes.
    #[serde(default)]
    pub maintenance_interval: Option<String>,
    /// Records one maintenance pass purges at most.
    #[serde(default)]
    pub maintenance_batch: Option<u32>,
}

/// `distribution`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawDistribution {
    /// Listen address, e.g. `0.0.0.0:8081`.
    #[serde(default)]
    pub listen: Option<String>,
    /// Largest `count` one request may ask for.
    #[serde(default)]
    pub max_count_per_request: Option<u32>,
    /// `partial` (default) or `allOrNothing`, used when a request omits it.
    #[serde(default)]
    pub default_fulfillment: Option<String>,
    /// Each returned proxy has at least this much life left.
    #[serde(default)]
    pub min_remaining_ttl: Option<String>,
    /// Each returned proxy was health-checked at most this long ago (unset: not required).
    #[serde(default)]
    pub max_health_check_age: Option<String>,
    /// Eligible proxies always kept for the gateway.
    #[serde(default)]
    pub reserve_for_gateway: Option<u32>,
    /// How long an idempotent result answers replays.
    #[serde(default)]
    pub idempotency_ttl: Option<String>,
    /// Request size and concurrency limits.
    #[serde(default)]
    pub limits: RawLimits,
    /// CIDRs whose forwarded headers are believed.
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    /// Source CIDRs allowed to call the API (empty: any source).
    #[serde(default)]
    pub allowed_sources: Vec<String>,
    /// Global and default per-client rate limits.
    #[serde(default)]
    pub rate_limit: RawRateLimits,
    /// Authentication of the listener.
    #[serde(default)]
    pub auth: RawAuth,
}

/// `distribution.limits`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawLimits {
    /// Largest request body.
    #[serde(default)]
    pub max_body_bytes: Option<u32>,
    /// Largest sum of header names and values.
    #[serde(default)]
    pub max_header_bytes: Option<u32>,
    /// Most header fields.
    #[serde(default)]
    pub max_headers: Option<u32>,
    /// Most open connections.
    #[serde(default)]
    pub max_connections: Option<u32>,
    /// Most open connections from one source address.
    #[serde(default)]
    pub max_connections_per_source: Option<u32>,
    /// Most requests served at once; more wait briefly, then get 503.
    #[serde(default)]
    pub max_in_flight: Option<u32>,
    /// Deadline of one request.
    #[serde(default)]
    pub request_timeout: Option<String>,
}

/// `distribution.rateLimit`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawRateLimits {
    /// Across every client and replica.
    #[serde(default)]
    pub global: Option<RawRate>,
    /// Per client unless the client sets its own.
    #[serde(default)]
    pub per_client: Option<RawRate>,
}

/// A token bucket.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawRate {
    /// Sustained requests per second.
    pub requests_per_second: u32,
    /// Bucket size; default `requestsPerSecond`.
    #[serde(default)]
    pub burst: Option<u32>,
}

/// `distribution.auth`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawAuth {
    /// `any` (default: a configured client's credential is required) or `none`
    /// (anonymous callers, identified by source address; only when written).
    #[serde(default)]
    pub mode: Option<String>,
    /// Permissions of credentials (and of anonymous clients) that declare none.
    #[serde(default)]
    pub permissions: Option<Vec<String>>,
    /// Enabled methods (`mode: any`; default: every method some client uses).
    #[serde(default)]
    pub methods: Vec<RawAuthMethod>,
}

/// One entry of `distribution.auth.methods`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawAuthMethod {
    /// `apiKey`, `basic` or `bearer`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Permissions granted through this method when the client declares none.
    #[serde(default)]
    pub permissions: Option<Vec<String>>,
    /// `type: bearer` only: tokens that match no `bearerTokens` hash are Kubernetes
    /// ServiceAccount tokens checked with a `TokenReview` (see `clients[].serviceAccounts`).
    #[serde(default)]
    pub token_review: Option<RawTokenReview>,
}

/// `distribution.auth.methods[].tokenReview`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawTokenReview {
    /// The audience tokens must be issued for (the TokenRequest `audiences`).
    #[serde(default)]
    pub audience: String,
    /// Kubeconfig used to reach the API server (default: `KUBECONFIG`, then
    /// `~/.kube/config`, then the pod's ServiceAccount).
    #[serde(default)]
    pub kubeconfig_file: Option<String>,
}

/// `admin`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawAdmin {
    /// Listen address, e.g. `127.0.0.1:9090`.
    #[serde(default)]
    pub listen: Option<String>,
}

/// `controlPlane`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawControlPlane {
    /// Serve the gRPC control plane.
    #[serde(default)]
    pub enabled: bool,
    /// Listen address.
    #[serde(default)]
    pub listen: Option<String>,
    /// Serve plaintext: a test fixture, allowed only on a loopback listener.
    #[serde(default)]
    pub loopback_plaintext: bool,
    /// mTLS material (required to serve anything but the loopback fixture).
    #[serde(default)]
    pub tls: Option<RawControlPlaneTls>,
    /// Assignable proxies of each upstream the ownership manager leaves unassigned,
    /// for the Distribution API (default 0).
    #[serde(default)]
    pub extraction_reserve: Option<u32>,
    /// Capacity (sum of `maxConcurrency`) the ownership manager aims to give each
    /// gateway (default 10000).
    #[serde(default)]
    pub target_slots_per_worker: Option<u64>,
    /// Most drains begun per ownership pass for extraction demand (default 64).
    #[serde(default)]
    pub drain_batch: Option<u32>,
    /// How long an extraction the unowned pool cannot serve waits for drains
    /// (default 5s; `0s`: an allOrNothing request answers 409 at once).
    #[serde(default)]
    pub drain_wait: Option<String>,
    /// Lease of one assignment (default 30s).
    #[serde(default)]
    pub lease: Option<String>,
    /// Renew a lease when less than this is left (default 15s).
    #[serde(default)]
    pub renew_before: Option<String>,
    /// Validity of a published snapshot (default 30s).
    #[serde(default)]
    pub snapshot_validity: Option<String>,
    /// A gateway refuses new traffic past this age without a valid snapshot
    /// (default 60s).
    #[serde(default)]
    pub max_stale_age: Option<String>,
    /// Interval of the gateways' runtime reports (default 5s).
    #[serde(default)]
    pub report_interval: Option<String>,
}

/// `controlPlane.tls`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawControlPlaneTls {
    /// Server certificate chain (PEM file).
    #[serde(default)]
    pub cert_file: String,
    /// Server private key (PEM file).
    #[serde(default)]
    pub key_file: String,
    /// Trust bundle of worker / checker certificates (PEM file).
    #[serde(default)]
    pub client_ca_file: String,
    /// SPIFFE trust domain of accepted clients.
    #[serde(default)]
    pub trust_domain: Option<String>,
    /// Environment segment of accepted SPIFFE IDs.
    #[serde(default)]
    pub environment: Option<String>,
}

/// One `upstreams[]` entry.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawUpstream {
    /// Unique name.
    pub name: String,
    /// Where the proxies come from.
    #[serde(default)]
    pub source: RawSource,
    /// `http` or `socks5`.
    #[serde(default)]
    pub protocol: Option<String>,
    /// Labels given to every proxy.
    #[serde(default)]
    pub labels: RawLabels,
    /// Hard lifetime of a proxy.
    #[serde(default)]
    pub ttl: Option<String>,
    /// `usableUntil = expiresAt - safetyMargin`.
    #[serde(default)]
    pub safety_margin: Option<String>,
    /// How long this upstream's proxies are held back after a new pool generation
    /// begins (default: `ttl`).
    #[serde(default)]
    pub quarantine: Option<String>,
    /// Most concurrent requests one proxy may carry.
    #[serde(default)]
    pub max_concurrency_per_proxy: Option<u32>,
    /// Hard limit on un-extracted inventory.
    #[serde(default)]
    pub max_size: Option<u32>,
    /// Time between two fetches.
    #[serde(default)]
    pub fetch_interval: Option<String>,
    /// Health checking of this upstream's proxies.
    #[serde(default)]
    pub health: Option<RawUpstreamHealth>,
}

/// `upstreams[].health`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawUpstreamHealth {
    /// Time between two checks of one AVAILABLE proxy.
    #[serde(default)]
    pub interval: Option<String>,
    /// Deadline of one check.
    #[serde(default)]
    pub timeout: Option<String>,
    /// Consecutive failures that make a proxy UNHEALTHY.
    #[serde(default)]
    pub failure_threshold: Option<u32>,
    /// Also run EGRESS checks (exit address and anonymity).
    #[serde(default)]
    pub egress: Option<bool>,
    /// URLs probed by TARGET checks.
    #[serde(default)]
    pub targets: Vec<String>,
}

/// `upstreams[].source`: exactly one of `static` or `vendorApi`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawSource {
    /// A fixed list of proxies.
    #[serde(default, rename = "static")]
    pub static_list: Option<RawStaticSource>,
    /// A vendor HTTP API.
    #[serde(default)]
    pub vendor_api: Option<RawVendorApi>,
}

/// `upstreams[].source.static`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawStaticSource {
    /// `host:port` entries.
    pub proxies: Vec<String>,
    /// Credentials used for every listed proxy.
    #[serde(default)]
    pub credentials: Option<RawProxyCredentials>,
    /// Mark upserted proxies AVAILABLE right away (no checker needed). Default `true`.
    #[serde(default)]
    pub assume_healthy: Option<bool>,
}

/// Credentials of upstream proxies.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawProxyCredentials {
    /// Username (empty when `usernameFile` is given).
    #[serde(default)]
    pub username: String,
    /// File holding the username (a mounted Secret key): read by
    /// [`crate::config::load_yaml_with_files`] when the controller loads its config.
    #[serde(default)]
    pub username_file: Option<String>,
    /// Inline password (local runs only; prefer `passwordFile`).
    #[serde(default)]
    pub password: Option<String>,
    /// File holding the password (a mounted Secret key).
    #[serde(default)]
    pub password_file: Option<String>,
}

/// `upstreams[].source.vendorApi`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawVendorApi {
    /// URL fetched with GET.
    pub url: String,
    /// `json` or `lines`.
    pub format: String,
    /// File with the vendor API key (sent as a bearer token).
    #[serde(default)]
    pub api_key_file: Option<String>,
    /// Credentials of the vendor's proxies.
    #[serde(default)]
    pub credentials: Option<RawProxyCredentials>,
    /// Deadline of one vendor call.
    #[serde(default)]
    pub timeout: Option<String>,
    /// Most vendor calls per minute.
    #[serde(default)]
    pub max_requests_per_minute: Option<u32>,
    /// Most proxies asked for in one call (unset: what the vendor returns, up to
    /// `maxSize`).
    #[serde(default)]
    pub max_proxies_per_fetch: Option<u32>,
}

/// Region / carrier labels.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawLabels {
    /// Region, e.g. `shanghai`.
    #[serde(default)]
    pub region: Option<String>,
    /// Carrier, e.g. `telecom`.
    #[serde(default)]
    pub carrier: Option<String>,
}

/// One `routings[]` entry (the gateway's section; only its references are checked here).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawRouting {
    /// Unique name.
    pub name: String,
    /// Lower runs first.
    #[serde(default)]
    pub priority: i32,
    /// Clients it applies to (empty: every client).
    #[serde(default)]
    pub clients: Vec<String>,
    /// Upstreams it draws from.
    #[serde(default)]
    pub upstreams: Vec<String>,
    /// Allowed regions (empty: any).
    #[serde(default)]
    pub regions: Vec<String>,
    /// Allowed carriers (empty: any).
    #[serde(default)]
    pub carriers: Vec<String>,
    /// `roundRobin`, `leastActive` or `powerOfTwoChoices`.
    #[serde(default)]
    pub strategy: Option<String>,
    /// Username parameters that must be present, each with its accepted values
    /// (empty list: any value), e.g. `region: [shanghai]`.
    #[serde(default)]
    pub username_params: std::collections::BTreeMap<String, Vec<String>>,
    /// Target hosts: exact names or `*.suffix` wildcards (empty: any target).
    #[serde(default)]
    pub target_hosts: Vec<String>,
    /// Port TARGET health checks of this routing's exact `targetHosts` use (default 443).
    #[serde(default)]
    pub target_check_port: Option<u16>,
    /// Keep a session (the `session` username parameter) on one proxy.
    #[serde(default)]
    pub sticky_session: Option<RawStickySession>,
    /// Retries of DIAL / PROXY_HANDSHAKE failures on another proxy.
    #[serde(default)]
    pub retry: Option<RawRetry>,
    /// Gateway groups that serve this routing (empty: every gateway).
    #[serde(default)]
    pub gateway_groups: Vec<String>,
    /// Target ports CONNECT may reach: `443`, `8000-8999` (empty: 443 and 80).
    #[serde(default)]
    pub connect_ports: Vec<String>,
}

/// `routings[].stickySession`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawStickySession {
    /// Longest life of a session's binding to one proxy.
    #[serde(default)]
    pub ttl: Option<String>,
    /// A session unused this long is forgotten.
    #[serde(default)]
    pub idle_timeout: Option<String>,
    /// Username parameter holding the session key (default `session`).
    #[serde(default)]
    pub param: Option<String>,
}

/// `routings[].retry`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawRetry {
    /// Attempts per request, the first included.
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// Deadline for all attempts together.
    #[serde(default)]
    pub deadline: Option<String>,
}

/// One `clients[]` entry: a DistributionClient.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawClient {
    /// Unique name; the client's ID.
    pub name: String,
    /// Permissions; unset: those of the method / listener.
    #[serde(default)]
    pub permissions: Option<Vec<String>>,
    /// Most proxies one request may ask for.
    #[serde(default)]
    pub max_extract_count: Option<u32>,
    /// Upstreams it may take proxies from (empty: any).
    #[serde(default)]
    pub allowed_upstreams: Vec<String>,
    /// Regions it may take proxies from (empty: any).
    #[serde(default)]
    pub allowed_regions: Vec<String>,
    /// Its own rate limit.
    #[serde(default)]
    pub rate_limit: Option<RawRate>,
    /// `X-API-Key` values, as hashes.
    #[serde(default)]
    pub api_keys: Vec<RawHashedSecret>,
    /// HTTP Basic.
    #[serde(default)]
    pub basic: Option<RawBasic>,
    /// `Authorization: Bearer` tokens, as hashes.
    #[serde(default)]
    pub bearer_tokens: Vec<RawHashedSecret>,
    /// Kubernetes ServiceAccounts (`namespace/name`) whose tokens identify this client
    /// (needs a `bearer` method with `tokenReview`).
    #[serde(default)]
    pub service_accounts: Vec<String>,
}

/// A client secret: exactly one of its hash or a file holding it (a mounted Secret
/// key, read and hashed when the controller loads its config).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawHashedSecret {
    /// Lower-case hex SHA-256 of the secret.
    #[serde(default)]
    pub sha256: Option<String>,
    /// File holding the secret (trailing newline ignored).
    #[serde(default)]
    pub file: Option<String>,
}

/// HTTP Basic credentials: the user name in clear or in a file, the password as its
/// salted hash or in a file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawBasic {
    /// User name.
    #[serde(default)]
    pub username: Option<String>,
    /// File holding the user name (trailing newline ignored).
    #[serde(default)]
    pub username_file: Option<String>,
    /// No longer accepted (an unsalted digest of a guessable password): refused with
    /// a message pointing to `passwordHash` / `passwordFile`.
    #[serde(default)]
    pub password_sha256: Option<String>,
    /// The password as `sha256:<salt hex>:<SHA-256(salt || password) hex>`
    /// (`proxy-pool-controller hash-password` prints it).
    #[serde(default)]
    pub password_hash: Option<String>,
    /// File holding the password (trailing newline ignored).
    #[serde(default)]
    pub password_file: Option<String>,
}

/// `analytics`: usage counting (Redis working set → PostgreSQL). Uses the store's Redis
/// (`store.backend: redis`); see `docs/analytics.md`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawAnalytics {
    /// Off by default.
    #[serde(default)]
    pub enabled: bool,
    /// File holding the PostgreSQL DSN (a mounted Secret key; may carry the password).
    /// Required when enabled.
    #[serde(default)]
    pub dsn_file: Option<String>,
    /// IANA time zone of the day boundaries (default `UTC`).
    #[serde(default)]
    pub time_zone: Option<String>,
    /// Prefix of the Redis keys (default `pp`; keys are `<prefix>:analytics:v1:…`).
    #[serde(default)]
    pub key_prefix: Option<String>,
    /// Bounded event queue; full ⇒ dropped and counted (default 4096).
    #[serde(default)]
    pub queue_capacity: Option<u32>,
    /// Time between two flushes to PostgreSQL (default `60s`).
    #[serde(default)]
    pub flush_interval: Option<String>,
    /// Flush early after this many events (default 10000).
    #[serde(default)]
    pub flush_after_events: Option<u32>,
    /// Natural days of daily rows kept (default 90).
    #[serde(default)]
    pub retention_days: Option<u32>,
    /// Days of persisted daily buckets kept in Redis (default 3).
    #[serde(default)]
    pub hot_days: Option<u32>,
    /// Budget of the final flush at shutdown (default `5s`, within `shutdown.gracePeriod`).
    #[serde(default)]
    pub shutdown_flush_timeout: Option<String>,
    /// File with a key mixed into client-identity digests (optional, a Secret key).
    #[serde(default)]
    pub identity_key_file: Option<String>,
}

/// `cache`: the Redis read-through cache of slow look-ups. Uses the store's Redis.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawCache {
    /// Off by default.
    #[serde(default)]
    pub enabled: bool,
    /// Prefix of the Redis keys (default `pp`; keys are `<prefix>:cache:v1:…`).
    #[serde(default)]
    pub key_prefix: Option<String>,
    /// Keys per Redis `MGET` / loader call (default and most 100).
    #[serde(default)]
    pub batch_size: Option<u32>,
    /// Longest a shared loader call may run (default `3s`).
    #[serde(default)]
    pub loader_timeout: Option<String>,
    /// Loader calls running at once per namespace (default 16).
    #[serde(default)]
    pub loader_concurrency: Option<u32>,
    /// Budget of one Redis round trip (default `20ms`).
    #[serde(default)]
    pub redis_timeout: Option<String>,
    /// Per-namespace settings.
    #[serde(default)]
    pub namespaces: RawCacheNamespaces,
}

/// `cache.namespaces`: the known namespaces.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawCacheNamespaces {
    /// Kubernetes `TokenReview` results (ttl ≤ 120s, never past the token's expiry).
    /// (Secrets need no cache: they are kubelet-mounted files read at load.)
    #[serde(default)]
    pub token_review: RawCacheNamespace,
}

/// One cache namespace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawCacheNamespace {
    /// Hard TTL of an entry (`tokenReview`: default and most `120s`).
    #[serde(default)]
    pub ttl: Option<String>,
    /// TTL shortened by up to this percent at random (default 10, most 50).
    #[serde(default)]
    pub jitter_percent: Option<u32>,
    /// TTL of a "confirmed absent" entry (default `0s` = never stored; the only value
    /// allowed for `tokenReview`).
    #[serde(default)]
    pub negative_ttl: Option<String>,
    /// Largest encoded entry stored (default 65536).
    #[serde(default)]
    pub max_entry_bytes: Option<u32>,
}

/// `shutdown`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawShutdown {
    /// Longest time from the signal to exit.
    #[serde(default)]
    pub grace_period: Option<String>,
    /// Time spent not-ready (answering 503) before the listeners stop accepting.
    #[serde(default)]
    pub drain_delay: Option<String>,
}
