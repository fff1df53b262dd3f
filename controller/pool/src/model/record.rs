//! Proxy records and what writes them: how to dial a proxy and its labels (the
//! contract's types, re-exported), its life-cycle state, provider batches and their
//! upsert report, the stored record, an upstream's inventory figures and what
//! maintenance did.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use proxy_pool_api::controlplane::model::{Credentials, Dial, Labels, Protocol, Secret};

use super::ids::{Label, OperationId, ProxyId, UpstreamId};
use super::worker::Assignment;
use crate::clock::Timestamp;

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

    /// EXTRACTED or REMOVED: the end of this lifetime; nothing but the purge changes
    /// the record any more.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Extracted | Self::Removed)
    }

    /// Counted in an upstream's un-extracted inventory.
    pub fn is_unextracted(self) -> bool {
        !matches!(self, Self::Extracted | Self::Expired | Self::Removed)
    }
}

/// One proxy offered by a provider fetch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// ID chosen by the provider parser (stable for the same vendor proxy).
    pub id: ProxyId,
    /// How to dial it.
    pub dial: Dial,
    /// Its labels.
    pub labels: Labels,
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
    /// How to dial it.
    pub dial: Dial,
    /// Its labels.
    pub labels: Labels,
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
