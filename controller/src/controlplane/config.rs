//! Typed settings of the control plane. The composition root builds them from the
//! controller's validated configuration; every field has a production default.

use std::time::Duration;

use activity_pool::model::UpstreamId;
use proxy_pool_api::controlplane::model::Routing;

/// A routing as the control plane publishes it, and which gateway groups see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutingSpec {
    /// The routing sent to workers.
    pub routing: Routing,
    /// Gateway groups that serve it (empty: every worker).
    pub gateway_groups: Vec<String>,
}

impl RoutingSpec {
    /// Whether a worker of `group` sees this routing.
    pub fn visible_to(&self, group: &str) -> bool {
        self.gateway_groups.is_empty() || self.gateway_groups.iter().any(|g| g == group)
    }
}

/// A configured client as the control plane meters it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientSpec {
    /// The client's name (the identity gateways report for it).
    pub name: String,
    /// Its fleet-wide daily byte quota (`gatewayLimits.dailyBytes`), up + down.
    pub daily_bytes: Option<u64>,
}

/// Limits on messages, streams and batches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Concurrent HTTP/2 streams per connection.
    pub max_concurrent_streams_per_connection: u32,
    /// Open WatchSnapshots + StreamTasks streams in total.
    pub max_open_streams: usize,
    /// A stream ends after this long; the client re-opens it.
    pub max_stream_duration: Duration,
    /// Outcomes in one ReportOutcomes.
    pub max_outcome_batch: usize,
    /// Observations in one ReportObservations.
    pub max_observation_batch: usize,
    /// Counts in one ReportRuntime.
    pub max_runtime_entries: usize,
    /// HTTP/2 keepalive ping interval.
    pub keepalive_interval: Duration,
    /// Keepalive answer deadline.
    pub keepalive_timeout: Duration,
    /// Deadline of one unary call.
    pub request_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_concurrent_streams_per_connection: 16,
            max_open_streams: 4_096,
            max_stream_duration: Duration::from_secs(30 * 60),
            max_outcome_batch: 1_000,
            max_observation_batch: 1_000,
            max_runtime_entries: activity_pool::options::MAX_REPORT_ENTRIES,
            keepalive_interval: Duration::from_secs(20),
            keepalive_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(10),
        }
    }
}

/// Ownership manager settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnershipConfig {
    /// Time between two passes of the assign / renew / drain / expire loop.
    pub interval: Duration,
    /// Lease of one assignment (capped by the pool at `usable_until`).
    pub lease: Duration,
    /// Renew when less than this remains of a lease.
    pub renew_before: Duration,
    /// Capacity (sum of `max_concurrency`) the manager aims to give each live worker.
    pub target_slots_per_worker: u64,
    /// Most proxies one worker may own.
    pub max_proxies_per_worker: usize,
    /// Assignable proxies of each upstream left unassigned for extraction.
    pub extraction_reserve: u32,
    /// A proxy drained for extraction is not assigned again for this long.
    pub drain_hold: Duration,
    /// Most drains begun per pass for extraction demand.
    pub drain_batch: u32,
    /// Most new assignments per worker per pass.
    pub assign_batch: u32,
    /// Most leases released per `expire` call.
    pub expire_batch: u32,
    /// Upstreams proxies are assigned from.
    pub upstreams: Vec<UpstreamId>,
}

impl Default for OwnershipConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(1),
            lease: Duration::from_secs(30),
            renew_before: Duration::from_secs(15),
            target_slots_per_worker: 10_000,
            max_proxies_per_worker: 100_000,
            extraction_reserve: 0,
            drain_hold: Duration::from_secs(30),
            drain_batch: 64,
            assign_batch: 512,
            expire_batch: 1_000,
            upstreams: Vec::new(),
        }
    }
}

/// Everything the control plane needs to know besides its ports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlPlaneConfig {
    /// Worker session lifetime (pool time), renewed by ACKs and reports.
    pub session_ttl: Duration,
    /// Lifetime of a runtime report (pool time); past it capacity fails closed.
    pub runtime_report_ttl: Duration,
    /// Told to workers: past this age without a valid snapshot, refuse new traffic.
    pub max_stale_age: Duration,
    /// Validity of a published snapshot; an unchanged snapshot is re-published (as
    /// an empty delta) after half of it.
    pub snapshot_validity: Duration,
    /// Suggested runtime report interval.
    pub report_interval: Duration,
    /// Snapshot versions kept per worker for deltas and ACK checks.
    pub history: usize,
    /// Message, stream and batch limits.
    pub limits: Limits,
    /// Ownership manager.
    pub ownership: OwnershipConfig,
    /// Routings, in match order.
    pub routings: Vec<RoutingSpec>,
    /// Configured clients: the `client` label values of the traffic metrics, and the
    /// daily byte quotas judged from gateway reports.
    pub clients: Vec<ClientSpec>,
}

impl Default for ControlPlaneConfig {
    fn default() -> Self {
        Self {
            session_ttl: Duration::from_secs(30),
            runtime_report_ttl: Duration::from_secs(15),
            max_stale_age: Duration::from_secs(60),
            snapshot_validity: Duration::from_secs(30),
            report_interval: Duration::from_secs(5),
            history: 64,
            limits: Limits::default(),
            ownership: OwnershipConfig::default(),
            routings: Vec::new(),
            clients: Vec::new(),
        }
    }
}
