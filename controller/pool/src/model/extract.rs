//! Exclusive extraction: the request, its filters and limits, and what it hands out.

use std::num::NonZeroU32;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ids::{ClientId, IdempotencyKey, Label, ProxyId, RequestDigest, RequestId, UpstreamId};
use super::record::{Dial, Labels, Protocol};
use crate::clock::Timestamp;

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
    /// Cities.
    pub cities: Vec<Label>,
    /// Upstreams.
    pub upstreams: Vec<UpstreamId>,
}

impl Filters {
    /// Whether a proxy of `upstream` that speaks `protocol` and carries `labels` passes
    /// (OR within a dimension, AND across; an empty dimension passes everything).
    pub fn admits(&self, upstream: &UpstreamId, protocol: Protocol, labels: &Labels) -> bool {
        self.admits_values(
            upstream.as_str(),
            protocol.as_str(),
            &labels.map(Label::as_str),
        )
    }
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

/// A proxy handed out by an extraction. Not serializable: it carries the password,
/// and every encoding of it (the Redis one, the Distribution API's) is written out
/// field by field where it is needed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtractedProxy {
    /// ID.
    pub id: ProxyId,
    /// Upstream.
    pub upstream: UpstreamId,
    /// How to dial it.
    pub dial: Dial,
    /// Its labels.
    pub labels: Labels,
    /// Hard expiry.
    pub expires_at: Timestamp,
}

/// A successful extraction (possibly replayed).
#[derive(Clone, Debug, PartialEq, Eq)]
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
