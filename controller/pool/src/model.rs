//! Domain values of the activity pool: identifiers, records, requests and results.
//!
//! The identifier types are the contract's ([`proxy_pool_api::ids`]), re-exported here.

use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;

pub use proxy_pool_api::ids::{
    ClientId, IdError, IdempotencyKey, InstanceId, Label, OperationId, ProxyId, RequestDigest,
    RequestId, SessionId, UpstreamId, WorkerId,
};

/// The protocol an upstream (vendor) proxy speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// HTTP proxy: `CONNECT` and absolute-URI forwarding.
    Http,
    /// SOCKS5 with username/password.
    Socks5,
}

impl Protocol {
    /// `http` or `socks5`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Socks5 => "socks5",
        }
    }

    /// Inverse of [`Protocol::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "http" => Some(Self::Http),
            "socks5" => Some(Self::Socks5),
            _ => None,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Life-cycle state of a proxy record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ProxyState {
    /// Inserted by a provider batch, not yet checked.
    Fetched,
    /// A check is under way.
    Checking,
    /// Healthy; eligible for extraction or assignment while unowned and usable.
    Available,
    /// Recent checks failed; kept out of every AVAILABLE index.
    Suspect,
    /// Failed past the reducer's threshold.
    Unhealthy,
    /// Owned by a worker that is draining it.
    Draining,
    /// Handed out by the Distribution API; never re-enters in this lifetime.
    Extracted,
    /// Past its hard expiry, not yet purged.
    Expired,
    /// Withdrawn by its provider; never re-enters in this lifetime.
    Removed,
}

impl ProxyState {
    /// The upper-case name used on the wire and in storage.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fetched => "FETCHED",
            Self::Checking => "CHECKING",
            Self::Available => "AVAILABLE",
            Self::Suspect => "SUSPECT",
            Self::Unhealthy => "UNHEALTHY",
            Self::Draining => "DRAINING",
            Self::Extracted => "EXTRACTED",
            Self::Expired => "EXPIRED",
            Self::Removed => "REMOVED",
        }
    }

    /// Inverse of [`ProxyState::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Fetched,
            Self::Checking,
            Self::Available,
            Self::Suspect,
            Self::Unhealthy,
            Self::Draining,
            Self::Extracted,
            Self::Expired,
            Self::Removed,
        ]
        .into_iter()
        .find(|s2| s2.as_str() == s)
    }

    /// Counted in an upstream's Managed figure.
    pub fn is_managed(self) -> bool {
        matches!(
            self,
            Self::Fetched | Self::Checking | Self::Available | Self::Suspect | Self::Draining
        )
    }

    /// Counted in an upstream's un-extracted inventory.
    pub fn is_unextracted(self) -> bool {
        !matches!(self, Self::Extracted | Self::Expired | Self::Removed)
    }
}

/// A secret string: never printed by `Debug` or `Display`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
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

/// Credentials of an upstream proxy, resolved before they reach the pool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    /// Username.
    pub username: String,
    /// Password.
    pub password: Secret,
}

/// One proxy offered by a provider fetch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// ID chosen by the provider parser (stable for the same vendor proxy).
    pub id: ProxyId,
    /// Protocol the proxy speaks.
    pub protocol: Protocol,
    /// Host name or IP address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Vendor credentials, if the proxy needs them.
    pub credentials: Option<Credentials>,
    /// Region label.
    pub region: Option<Label>,
    /// Carrier label.
    pub carrier: Option<Label>,
    /// Remaining life the vendor promises, counted from the pool's "now" at upsert.
    pub ttl: Duration,
    /// Most concurrent requests the vendor allows through this proxy.
    pub max_concurrency: u32,
}

/// One provider fetch for one upstream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchedBatch {
    /// The upstream that offered every candidate.
    pub upstream: UpstreamId,
    /// Makes the write safe to retry; chunks derive their own IDs from it.
    pub operation_id: OperationId,
    /// `usable_until = expires_at - safety_margin`.
    pub safety_margin: Duration,
    /// Hard cap on this upstream's un-extracted inventory.
    pub max_size: NonZeroU32,
    /// How long after a new pool generation begins this upstream's proxies are held
    /// back (neither extractable nor assignable): until `generation start + quarantine`
    /// (`docs/pool.md`, "Pool generations"). At most the pool's maximum TTL.
    pub quarantine: Duration,
    /// The candidates.
    pub candidates: Vec<Candidate>,
}

/// Why a candidate was not inserted or refreshed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// Host is empty, too long, or not a host name / IP address.
    InvalidHost,
    /// Port 0.
    InvalidPort,
    /// Username or password empty, too long, or with control characters.
    InvalidCredentials,
    /// `max_concurrency` is 0 or above the limit.
    InvalidCapacity,
    /// TTL not longer than the safety margin.
    TtlTooShort,
    /// TTL above the pool's maximum.
    TtlTooLong,
    /// Same ID or same endpoint earlier in this batch.
    DuplicateInBatch,
    /// ID already maps to another endpoint, or the endpoint to another ID.
    IdConflict,
    /// The endpoint's current lifetime belongs to another upstream.
    IncumbentOtherUpstream,
    /// Extracted in its current lifetime: never re-enters through refresh.
    AlreadyExtracted,
    /// Removed in its current lifetime.
    AlreadyRemoved,
    /// The upstream's un-extracted inventory is at `max_size`.
    PoolFull,
}

impl DropReason {
    /// Stable snake_case code (metrics label).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidHost => "invalid_host",
            Self::InvalidPort => "invalid_port",
            Self::InvalidCredentials => "invalid_credentials",
            Self::InvalidCapacity => "invalid_capacity",
            Self::TtlTooShort => "ttl_too_short",
            Self::TtlTooLong => "ttl_too_long",
            Self::DuplicateInBatch => "duplicate_in_batch",
            Self::IdConflict => "id_conflict",
            Self::IncumbentOtherUpstream => "incumbent_other_upstream",
            Self::AlreadyExtracted => "already_extracted",
            Self::AlreadyRemoved => "already_removed",
            Self::PoolFull => "pool_full",
        }
    }

    /// Inverse of [`DropReason::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::InvalidHost,
            Self::InvalidPort,
            Self::InvalidCredentials,
            Self::InvalidCapacity,
            Self::TtlTooShort,
            Self::TtlTooLong,
            Self::DuplicateInBatch,
            Self::IdConflict,
            Self::IncumbentOtherUpstream,
            Self::AlreadyExtracted,
            Self::AlreadyRemoved,
            Self::PoolFull,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }
}

/// What an upsert did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpsertReport {
    /// New records (new lifetimes).
    pub inserted: u32,
    /// Existing records of the same upstream refreshed.
    pub refreshed: u32,
    /// Candidates not written, by reason.
    pub dropped: BTreeMap<DropReason, u32>,
    /// Set when this upsert found no pool generation and began one (first install, or
    /// a store that lost its data): the new generation's start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_started: Option<Timestamp>,
    /// While the batch's upstream is held back after a new pool generation: when the
    /// hold ends (its proxies are neither extractable nor assignable before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_until: Option<Timestamp>,
}

impl UpsertReport {
    /// Total dropped candidates.
    pub fn dropped_total(&self) -> u32 {
        self.dropped.values().sum()
    }

    /// Adds another chunk's counts.
    pub fn merge(&mut self, other: &UpsertReport) {
        self.inserted += other.inserted;
        self.refreshed += other.refreshed;
        for (r, n) in &other.dropped {
            *self.dropped.entry(*r).or_default() += n;
        }
        self.generation_started = self.generation_started.or(other.generation_started);
        self.held_until = self.held_until.max(other.held_until);
    }
}

/// What happened to one ID of a removal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RemoveResult {
    /// Now REMOVED.
    Removed,
    /// No live record with that ID for that upstream.
    NotFound,
    /// Already EXTRACTED or REMOVED; unchanged.
    Ignored,
}

/// A health verdict of the reducer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum HealthVerdict {
    /// A check started.
    Checking,
    /// Healthy.
    Available,
    /// Doubtful.
    Suspect,
    /// Failed.
    Unhealthy,
}

impl HealthVerdict {
    /// The state this verdict sets.
    pub fn state(self) -> ProxyState {
        match self {
            Self::Checking => ProxyState::Checking,
            Self::Available => ProxyState::Available,
            Self::Suspect => ProxyState::Suspect,
            Self::Unhealthy => ProxyState::Unhealthy,
        }
    }
}

/// One health update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthUpdate {
    /// The proxy.
    pub proxy_id: ProxyId,
    /// New state.
    pub verdict: HealthVerdict,
    /// Whether the check that led to it succeeded (sets `last_success_at`).
    pub success: bool,
    /// Measured latency, if any.
    pub latency: Option<Duration>,
    /// Failure code of the check (`None` clears it). A code, never free text.
    pub failure: Option<Label>,
}

/// Outcome of one health update.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "result", content = "state")]
pub enum HealthResult {
    /// Applied; the record is now in this state.
    Applied(ProxyState),
    /// No live record.
    NotFound,
    /// The record is DRAINING, EXTRACTED or REMOVED; unchanged.
    Ignored(ProxyState),
}

/// A health check about to go through a proxy (`HealthStore::begin_checks`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckStart {
    /// The proxy.
    pub proxy_id: ProxyId,
    /// The check's ID, unique per check: `end_checks` with this ID ends this check's
    /// mark and no other.
    pub check: u64,
    /// Longest the mark lasts, from the pool's now: past the last moment the check may
    /// go through the proxy (its deadline, plus slack for the clocks of whoever runs
    /// it). [`crate::options::MIN_CHECK_HOLD`] to [`crate::options::MAX_CHECK_HOLD`].
    pub hold: Duration,
}

/// The end of a health check (`HealthStore::end_checks`): its result was applied, or
/// it will not run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckEnd {
    /// The proxy.
    pub proxy_id: ProxyId,
    /// The ID its `CheckStart` carried.
    pub check: u64,
}

/// Outcome of one `begin_checks` entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "result", content = "until")]
pub enum CheckMark {
    /// Marked: no extraction takes the proxy before this instant (pool time), unless
    /// the check ends earlier (and no earlier check's mark lasts longer).
    Marked(Timestamp),
    /// No live record: the check must not run.
    NotFound,
    /// EXTRACTED or REMOVED: not marked, and the check must not run.
    Refused(ProxyState),
}

/// Health facts of a record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// Last check.
    pub last_check_at: Option<Timestamp>,
    /// Last successful check.
    pub last_success_at: Option<Timestamp>,
    /// Last measured latency, milliseconds.
    pub latency_ms: Option<u64>,
    /// Last failure code.
    pub failure: Option<Label>,
}

/// A proxy record as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyRecord {
    /// ID.
    pub id: ProxyId,
    /// Owning upstream.
    pub upstream: UpstreamId,
    /// Protocol.
    pub protocol: Protocol,
    /// Host.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Credentials.
    pub credentials: Option<Credentials>,
    /// Region label.
    pub region: Option<Label>,
    /// Carrier label.
    pub carrier: Option<Label>,
    /// State (EXPIRED when read past `expires_at` before the purge).
    pub state: ProxyState,
    /// Health facts.
    pub health: Health,
    /// When this lifetime was inserted.
    pub fetched_at: Timestamp,
    /// Hard expiry.
    pub expires_at: Timestamp,
    /// `expires_at - safety_margin`.
    pub usable_until: Timestamp,
    /// Per-proxy capacity.
    pub max_concurrency: u32,
    /// When it was extracted, if it was.
    pub extracted_at: Option<Timestamp>,
    /// Current worker assignment.
    pub owner: Option<Assignment>,
}

/// Fulfilment mode of an extraction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Fulfillment {
    /// Return what is eligible, up to `count` (possibly none).
    Partial,
    /// Return exactly `count` or change nothing.
    AllOrNothing,
}

/// Extraction filters: OR within a dimension, AND across; empty means any.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filters {
    /// Protocols.
    pub protocols: Vec<Protocol>,
    /// Regions.
    pub regions: Vec<Label>,
    /// Carriers.
    pub carriers: Vec<Label>,
    /// Upstreams.
    pub upstreams: Vec<UpstreamId>,
}

/// Most distinct values per filter dimension.
pub const MAX_FILTER_VALUES: usize = 64;
/// Most proxies one extraction may ask for.
pub const MAX_EXTRACT_COUNT: u32 = 1000;

/// One extraction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtractRequest {
    /// Who asks (already authenticated).
    pub client_id: ClientId,
    /// Request ID; guards one low-level retry when there is no idempotency key.
    pub request_id: RequestId,
    /// Client idempotency key.
    pub idempotency_key: Option<IdempotencyKey>,
    /// Digest of the canonical request; the same key with another digest is a conflict.
    pub request_digest: RequestDigest,
    /// How many proxies (1..=MAX_EXTRACT_COUNT).
    pub count: NonZeroU32,
    /// Partial or all-or-nothing.
    pub fulfillment: Fulfillment,
    /// Filters.
    pub filters: Filters,
    /// Each returned proxy has at least this much life left.
    pub min_remaining_ttl: Duration,
    /// Each returned proxy was checked at most this long ago (`None`: not required).
    pub max_health_check_age: Option<Duration>,
    /// Eligible proxies kept back for the gateway.
    pub reserve_for_gateway: u32,
    /// How long the stored result answers replays (capped by the earliest hard expiry).
    pub idempotency_ttl: Duration,
}

/// A proxy handed out by an extraction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtractedProxy {
    /// ID.
    pub id: ProxyId,
    /// Upstream.
    pub upstream: UpstreamId,
    /// Protocol.
    pub protocol: Protocol,
    /// Host.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Credentials.
    pub credentials: Option<Credentials>,
    /// Region.
    pub region: Option<Label>,
    /// Carrier.
    pub carrier: Option<Label>,
    /// Hard expiry.
    pub expires_at: Timestamp,
}

/// A successful extraction (possibly replayed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extraction {
    /// The proxies, in scan order.
    pub proxies: Vec<ExtractedProxy>,
    /// When they were extracted (the first time).
    pub extracted_at: Timestamp,
    /// `true` when this is the stored result of an earlier call.
    pub replayed: bool,
}

/// The answer of an extraction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExtractOutcome {
    /// Proxies were extracted (partial may return none).
    Extracted(Extraction),
    /// All-or-nothing could not be met; nothing changed.
    Insufficient {
        /// Eligible proxies beyond the gateway reserve at the time.
        eligible: u32,
    },
}

/// A worker's lease on a proxy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    /// The proxy.
    pub proxy_id: ProxyId,
    /// Its upstream.
    pub upstream: UpstreamId,
    /// The owning worker.
    pub worker_id: WorkerId,
    /// Ownership epoch of this assignment (never reused).
    pub epoch: u64,
    /// End of the lease (never past `usable_until`).
    pub lease_expires_at: Timestamp,
    /// Draining was begun.
    pub draining: bool,
}

/// One page of the live assignments (`OwnershipRepository::leases`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeasePage {
    /// Assignments with an unexpired lease on a live record.
    pub leases: Vec<Assignment>,
    /// Where the next page starts; `None` when the walk is complete.
    pub next: Option<String>,
}

/// A batch of leases released by `expire`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExpiredAssignments {
    /// Released assignments.
    pub released: Vec<Assignment>,
    /// More expired leases remain.
    pub more: bool,
}

/// Registration of a worker instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRegistration {
    /// Logical worker.
    pub worker_id: WorkerId,
    /// Process.
    pub instance_id: InstanceId,
    /// Session; replaces any earlier one.
    pub session_id: SessionId,
    /// Session lifetime from now (renewed by every ACK).
    pub ttl: Duration,
}

/// A stored worker session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerSession {
    /// Logical worker.
    pub worker_id: WorkerId,
    /// Process.
    pub instance_id: InstanceId,
    /// Session.
    pub session_id: SessionId,
    /// Last positively ACKed snapshot version.
    pub acked_version: Option<u64>,
    /// Ownership epoch of that snapshot.
    pub acked_epoch: Option<u64>,
    /// Runtime writes allowed (closed by a negative ACK until the next positive one).
    pub fence_open: bool,
    /// Session expiry.
    pub expires_at: Timestamp,
}

/// One proxy's counts in a runtime report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeEntry {
    /// The proxy.
    pub proxy_id: ProxyId,
    /// The assignment epoch the worker holds it under.
    pub epoch: u64,
    /// Requests / tunnels in use.
    pub active: u32,
    /// Slots reserved during upstream handshakes.
    pub reserved: u32,
    /// No longer in the worker's snapshot but still in use.
    pub draining: bool,
}

/// A complete, sparse runtime report of one worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeReport {
    /// Worker.
    pub worker_id: WorkerId,
    /// Its current session.
    pub session_id: SessionId,
    /// Strictly increasing per worker session.
    pub sequence: u64,
    /// Must equal the session's ACKed version.
    pub snapshot_version: u64,
    /// Must equal the session's ACKed epoch.
    pub epoch: u64,
    /// Proxies with non-zero use (missing ones count zero).
    pub entries: Vec<RuntimeEntry>,
    /// Report lifetime from now; past it capacity fails closed.
    pub ttl: Duration,
}

/// Answer to an accepted report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportAck {
    /// Stored.
    Accepted,
    /// Same sequence, same content as the stored one: nothing changed.
    Replayed,
}

/// A worker's current runtime, as read back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerRuntime {
    /// Worker.
    pub worker_id: WorkerId,
    /// Session the report was written under.
    pub session_id: SessionId,
    /// Report sequence.
    pub sequence: u64,
    /// ACKed snapshot version it was bound to.
    pub snapshot_version: u64,
    /// Epoch it was bound to.
    pub epoch: u64,
    /// Entries by proxy ID order.
    pub entries: Vec<RuntimeEntry>,
    /// Expiry of the report.
    pub expires_at: Timestamp,
}

/// Inventory figures of one upstream.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamInventory {
    /// Un-extracted live records (the inventory truth).
    pub unextracted: u64,
    /// FETCHED + CHECKING + AVAILABLE + SUSPECT + DRAINING.
    pub managed: u64,
    /// AVAILABLE proxies with no owner, before their `usable_until`: what extraction
    /// can take now.
    pub available: u64,
    /// Sum of free capacity over fresh, consistent AVAILABLE proxies (unowned ones
    /// count zero while the upstream is quarantined).
    pub available_slots: u64,
    /// While the upstream's proxies are held back after a new pool generation: when
    /// the hold ends. `available` is 0 meanwhile.
    pub quarantined_until: Option<Timestamp>,
}

/// What a maintenance pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PurgeReport {
    /// Records purged past their hard expiry.
    pub purged: u32,
    /// Expired sessions and runtime reports dropped.
    pub sessions_purged: u32,
    /// More work remains.
    pub more: bool,
}
