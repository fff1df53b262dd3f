//! Validation done in Rust before any storage is touched, shared by every implementation.
//!
//! An invalid call fails here as `InvalidInput` with the field path; an invalid
//! candidate is dropped with a reason and the rest of the batch proceeds.

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::error::{PoolError, PoolResult};
use crate::model::{
    Candidate, CheckEnd, CheckStart, DropReason, ExtractRequest, FetchedBatch, Filters,
    HealthUpdate, MAX_EXTRACT_COUNT, MAX_FILTER_VALUES, ProxyId, RuntimeReport,
};
use crate::options::{
    MAX_BATCH, MAX_CHECK_HOLD, MAX_REPORT_ENTRIES, MAX_SWEEP, MAX_UPDATE_BATCH, MIN_CHECK_HOLD,
    PoolOptions,
};

/// Largest per-proxy capacity accepted.
pub const MAX_CONCURRENCY: u32 = 100_000;

/// A candidate that passed validation.
#[derive(Clone, Debug)]
pub struct PreparedCandidate {
    /// The candidate.
    pub candidate: Candidate,
    /// Digest of the endpoint identity (protocol, host, port, username).
    pub unique: String,
}

/// A batch that passed validation.
#[derive(Clone, Debug)]
pub struct PreparedBatch {
    /// The batch (candidates moved out into `candidates`).
    pub batch: FetchedBatch,
    /// Valid candidates in input order.
    pub candidates: Vec<PreparedCandidate>,
    /// Candidates dropped by validation.
    pub dropped: BTreeMap<DropReason, u32>,
}

/// Digest of a proxy endpoint's identity; the same endpoint always maps here.
pub fn unique_key(c: &Candidate) -> String {
    let d = &c.dial;
    let mut h = Sha256::new();
    h.update(b"pp-unique-v1\0");
    h.update(d.protocol.as_str().as_bytes());
    h.update(b"\0");
    h.update(d.host.to_ascii_lowercase().as_bytes());
    h.update(b"\0");
    h.update(d.port.to_string().as_bytes());
    h.update(b"\0");
    if let Some(cr) = &d.credentials {
        h.update(cr.username.as_bytes());
    }
    hex::encode(&h.finalize()[..16])
}

/// Short digest used inside storage keys for values that must not appear in them.
pub fn key_digest(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update(b"\0");
    }
    hex::encode(&h.finalize()[..16])
}

fn valid_host(host: &str) -> bool {
    if host.parse::<IpAddr>().is_ok() {
        return true;
    }
    if host.is_empty() || host.len() > 253 {
        return false;
    }
    host.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !label.starts_with('-')
            && !label.ends_with('-')
    })
}

fn valid_secretish(s: &str, allow_empty: bool) -> bool {
    (allow_empty || !s.is_empty()) && s.len() <= 255 && !s.chars().any(char::is_control)
}

fn check_candidate(
    c: &Candidate,
    batch: &FetchedBatch,
    options: &PoolOptions,
) -> Result<(), DropReason> {
    if !valid_host(&c.dial.host) {
        return Err(DropReason::InvalidHost);
    }
    if c.dial.port == 0 {
        return Err(DropReason::InvalidPort);
    }
    if let Some(cr) = &c.dial.credentials
        && (!valid_secretish(&cr.username, false) || !valid_secretish(cr.password.expose(), true))
    {
        return Err(DropReason::InvalidCredentials);
    }
    if c.max_concurrency == 0 || c.max_concurrency > MAX_CONCURRENCY {
        return Err(DropReason::InvalidCapacity);
    }
    if c.ttl <= batch.safety_margin {
        return Err(DropReason::TtlTooShort);
    }
    if c.ttl > options.max_ttl {
        return Err(DropReason::TtlTooLong);
    }
    Ok(())
}

/// Validates a provider batch.
pub fn prepare_batch(mut batch: FetchedBatch, options: &PoolOptions) -> PoolResult<PreparedBatch> {
    if batch.candidates.len() > MAX_BATCH {
        return Err(PoolError::invalid(
            "candidates",
            format!(
                "{} candidates exceed the limit of {MAX_BATCH}",
                batch.candidates.len()
            ),
        ));
    }
    if batch.safety_margin >= options.max_ttl {
        return Err(PoolError::invalid(
            "safety_margin",
            "must be shorter than the maximum TTL",
        ));
    }
    if batch.quarantine > options.max_ttl {
        return Err(PoolError::invalid(
            "quarantine",
            "must not exceed the maximum TTL",
        ));
    }
    let candidates = std::mem::take(&mut batch.candidates);
    let mut dropped: BTreeMap<DropReason, u32> = BTreeMap::new();
    let mut seen_ids: HashSet<ProxyId> = HashSet::new();
    let mut seen_unique: HashSet<String> = HashSet::new();
    let mut prepared = Vec::with_capacity(candidates.len());
    for c in candidates {
        if let Err(reason) = check_candidate(&c, &batch, options) {
            *dropped.entry(reason).or_default() += 1;
            continue;
        }
        let unique = unique_key(&c);
        if !seen_ids.insert(c.id.clone()) || !seen_unique.insert(unique.clone()) {
            *dropped.entry(DropReason::DuplicateInBatch).or_default() += 1;
            continue;
        }
        prepared.push(PreparedCandidate {
            candidate: c,
            unique,
        });
    }
    Ok(PreparedBatch {
        batch,
        candidates: prepared,
        dropped,
    })
}

fn check_dimension<T: Ord + Clone>(name: &str, values: &[T]) -> PoolResult<Vec<T>> {
    if values.len() > MAX_FILTER_VALUES {
        return Err(PoolError::invalid(
            format!("filters.{name}"),
            format!("at most {MAX_FILTER_VALUES} values"),
        ));
    }
    let mut sorted = values.to_vec();
    sorted.sort();
    if let Some(pos) = sorted.windows(2).position(|w| w[0] == w[1]) {
        let dup = &sorted[pos];
        let index = values.iter().rposition(|v| v == dup).unwrap_or(0);
        return Err(PoolError::invalid(
            format!("filters.{name}[{index}]"),
            "duplicate value",
        ));
    }
    Ok(sorted)
}

/// `field`, a lifetime, is not zero.
pub fn check_positive(field: &str, value: Duration) -> PoolResult<()> {
    if value.is_zero() {
        return Err(PoolError::invalid(field, "must be positive"));
    }
    Ok(())
}

/// The `limit` of a bounded sweep or scan (expire, purge, assignable): at most
/// `MAX_SWEEP`.
pub fn check_sweep_limit(limit: u32) -> PoolResult<()> {
    if limit > MAX_SWEEP {
        return Err(PoolError::invalid("limit", format!("at most {MAX_SWEEP}")));
    }
    Ok(())
}

/// The `limit` of a page (leases): 1 to `MAX_SWEEP`.
pub fn check_page_limit(limit: u32) -> PoolResult<()> {
    if limit == 0 || limit > MAX_SWEEP {
        return Err(PoolError::invalid("limit", format!("1 to {MAX_SWEEP}")));
    }
    Ok(())
}

/// Validates an extraction and returns its filters with every dimension sorted.
pub fn prepare_extract(request: &ExtractRequest) -> PoolResult<Filters> {
    if request.count.get() > MAX_EXTRACT_COUNT {
        return Err(PoolError::invalid(
            "count",
            format!("must be at most {MAX_EXTRACT_COUNT}"),
        ));
    }
    check_positive("idempotency_ttl", request.idempotency_ttl)?;
    let f = &request.filters;
    Ok(Filters {
        protocols: check_dimension("protocols", &f.protocols)?,
        regions: check_dimension("regions", &f.regions)?,
        carriers: check_dimension("carriers", &f.carriers)?,
        cities: check_dimension("cities", &f.cities)?,
        upstreams: check_dimension("upstreams", &f.upstreams)?,
    })
}

/// `field` (a batch of `len` entries) holds at most `MAX_UPDATE_BATCH`: the bound of
/// every per-entry write batch (health, check marks, removal, record reads).
fn check_update_batch(field: &str, len: usize) -> PoolResult<()> {
    if len > MAX_UPDATE_BATCH {
        return Err(PoolError::invalid(
            field,
            format!("at most {MAX_UPDATE_BATCH} per call"),
        ));
    }
    Ok(())
}

/// Validates the size of a batch of ownership requests (`assign_many`, `renew_many`).
pub fn check_ownership_batch(len: usize) -> PoolResult<()> {
    check_update_batch("requests", len)
}

/// Validates a health batch.
pub fn check_health_batch(updates: &[HealthUpdate]) -> PoolResult<()> {
    check_update_batch("updates", updates.len())
}

/// Validates a batch of check marks: bounded, each hold `MIN_CHECK_HOLD` to
/// `MAX_CHECK_HOLD`.
pub fn check_check_starts(starts: &[CheckStart]) -> PoolResult<()> {
    check_update_batch("starts", starts.len())?;
    for (i, s) in starts.iter().enumerate() {
        if !(MIN_CHECK_HOLD..=MAX_CHECK_HOLD).contains(&s.hold) {
            return Err(PoolError::invalid(
                format!("starts[{i}].hold"),
                format!(
                    "must be {} ms to {} s",
                    MIN_CHECK_HOLD.as_millis(),
                    MAX_CHECK_HOLD.as_secs()
                ),
            ));
        }
    }
    Ok(())
}

/// Validates a batch of check ends.
pub fn check_check_ends(ends: &[CheckEnd]) -> PoolResult<()> {
    check_update_batch("ends", ends.len())
}

/// Validates an ID batch (removal).
pub fn check_id_batch(ids: &[ProxyId]) -> PoolResult<()> {
    check_update_batch("ids", ids.len())
}

/// Validates a runtime report: bounded, unique proxies, positive TTL.
pub fn check_report(report: &RuntimeReport) -> PoolResult<()> {
    if report.entries.len() > MAX_REPORT_ENTRIES {
        return Err(PoolError::invalid(
            "entries",
            format!("at most {MAX_REPORT_ENTRIES} entries"),
        ));
    }
    check_positive("ttl", report.ttl)?;
    let mut seen = HashSet::new();
    for (i, e) in report.entries.iter().enumerate() {
        if !seen.insert(&e.proxy_id) {
            return Err(PoolError::invalid(
                format!("entries[{i}].proxy_id"),
                "duplicate proxy",
            ));
        }
    }
    Ok(())
}

/// Canonical digest of a report's content (for replay detection).
pub fn report_digest(report: &RuntimeReport) -> String {
    let mut entries: Vec<_> = report.entries.iter().collect();
    entries.sort_by(|a, b| a.proxy_id.cmp(&b.proxy_id));
    let mut h = Sha256::new();
    h.update(
        format!(
            "{}|{}|",
            report.header.snapshot_version, report.header.epoch
        )
        .as_bytes(),
    );
    for e in entries {
        h.update(
            format!(
                "{}|{}|{}|{}|{};",
                e.proxy_id, e.epoch, e.active, e.reserved, e.draining
            )
            .as_bytes(),
        );
    }
    hex::encode(&h.finalize()[..16])
}

/// Sorts the combinations a filtered extraction will scan into the order it walks them:
/// a per-request permutation (rendezvous hashing of the client and request ID over each
/// combination's name), so consecutive requests spread over upstreams and carriers, the
/// same request always walks the same order, and the relative order of two
/// combinations does not depend on which other combinations exist (an adapter that
/// still lists an emptied combination walks the rest in the same order). `name` gives a
/// combination's name (`crate::combo`).
pub fn order_combinations<T>(request: &ExtractRequest, items: &mut [T], name: impl Fn(&T) -> &str) {
    let seed = fnv1a(
        FNV_OFFSET,
        &[
            request.client_id.as_str().as_bytes(),
            b"\0",
            request.request_id.as_str().as_bytes(),
            b"\0",
        ],
    );
    items.sort_by_cached_key(|item| {
        let n = name(item);
        let rank = mix64(fnv1a(seed, &[n.as_bytes()]));
        (std::cmp::Reverse(rank), n.to_owned())
    });
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a (64 bit) over `parts`, continuing from `h`.
fn fnv1a(mut h: u64, parts: &[&[u8]]) -> u64 {
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The 64-bit finaliser of MurmurHash3: FNV alone mixes similar names poorly.
fn mix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(id: &str) -> ExtractRequest {
        use crate::model::*;
        ExtractRequest {
            client_id: ClientId::new("c").unwrap(),
            request_id: RequestId::new(id).unwrap(),
            idempotency_key: None,
            request_digest: RequestDigest::of(b"x"),
            count: std::num::NonZeroU32::new(1).unwrap(),
            fulfillment: Fulfillment::Partial,
            filters: Filters::default(),
            min_remaining_ttl: std::time::Duration::ZERO,
            max_health_check_age: None,
            reserve_for_gateway: 0,
            idempotency_ttl: std::time::Duration::from_secs(1),
        }
    }

    #[test]
    fn combination_order_is_a_stable_per_request_permutation() {
        let names: Vec<String> = (0..8).map(|i| format!("v{i}|HTTP|r1|")).collect();
        let order = |id: &str, names: &[String]| {
            let mut v = names.to_vec();
            order_combinations(&request(id), &mut v, |s| s.as_str());
            v
        };
        // Same request, same order; a permutation of the input.
        let a = order("req-1", &names);
        assert_eq!(a, order("req-1", &names));
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, names);
        // Removing one combination leaves the others' relative order unchanged.
        let fewer: Vec<String> = names.iter().filter(|n| **n != a[3]).cloned().collect();
        let b = order("req-1", &fewer);
        let a_without: Vec<String> = a.iter().filter(|n| **n != a[3]).cloned().collect();
        assert_eq!(b, a_without);
        // Requests spread: over 400 requests every combination comes first at least
        // 20 times (uniform would be 50).
        let mut first = BTreeMap::new();
        for i in 0..400 {
            *first
                .entry(order(&format!("req-{i}"), &names)[0].clone())
                .or_insert(0) += 1;
        }
        assert_eq!(first.len(), 8, "{first:?}");
        assert!(first.values().all(|&n| n >= 20), "{first:?}");
    }

    #[test]
    fn hosts() {
        assert!(valid_host("127.0.0.1"));
        assert!(valid_host("::1"));
        assert!(valid_host("proxy-1.vendor.example"));
        assert!(!valid_host(""));
        assert!(!valid_host("a b"));
        assert!(!valid_host("user@host"));
        assert!(!valid_host("-bad.example"));
    }
}
