//! Exclusive, idempotent extraction: the reference of the extract script.

use async_trait::async_trait;

use super::MemoryPool;
use super::state::{Index, State, StoredResult};
use crate::clock::Timestamp;
use crate::combo;
use crate::error::{ConflictReason, PoolError, PoolResult};
use crate::model::{
    ExtractOutcome, ExtractRequest, ExtractedProxy, Extraction, Filters, Fulfillment, ProxyId,
    ProxyRecord, ProxyState,
};
use crate::ports::ExtractionStore;
use crate::validate::{key_digest, order_combinations, prepare_extract};

/// Storage key of an extraction's stored result: only an idempotency key makes one
/// (the memory pool has no connection whose retry would need its own result; the
/// request ID never replays).
pub(crate) fn result_key(request: &ExtractRequest) -> Option<String> {
    request.idempotency_key.as_ref().map(|k| {
        format!(
            "idem:{}",
            key_digest(&[request.client_id.as_str(), k.as_str()])
        )
    })
}

/// The scan sources: `available` without a filter, else every combination index whose
/// labels pass the filters, in the request's walk order (`order_combinations`).
fn sources<'a>(st: &'a State, req: &ExtractRequest, f: &Filters) -> Vec<&'a Index> {
    if f.is_empty() {
        return vec![&st.available];
    }
    let mut combos: Vec<(&String, &Index)> = st
        .combos
        .iter()
        .filter(|(name, _)| combo::parse(name).is_some_and(|c| f.admits_combo(&c)))
        .collect();
    order_combinations(req, &mut combos, |(name, _)| name.as_str());
    combos.into_iter().map(|(_, ix)| ix).collect()
}

/// Members of `sources` with score > now, one source after the other, each in its own
/// order (descending score, then descending ID) — how the script pages through its
/// `ZREVRANGEBYSCORE` reads.
fn walked<'a>(sources: Vec<&'a Index>, now: Timestamp) -> impl Iterator<Item = &'a ProxyId> + 'a {
    sources.into_iter().flat_map(move |ix| {
        ix.iter()
            .rev()
            .take_while(move |(s, _)| *s > now.0)
            .map(|(_, id)| id)
    })
}

/// Members of `sources` with score > now, merged by descending score; equal scores in
/// source order, each source in its own (descending member) order — how the
/// `assignable` script merges an upstream's combinations. Sources come in
/// combination-name order.
pub(super) fn merged<'a>(
    sources: Vec<&'a Index>,
    now: Timestamp,
) -> impl Iterator<Item = &'a ProxyId> + 'a {
    let mut heads: Vec<_> = sources
        .into_iter()
        .map(|ix| {
            ix.iter()
                .rev()
                .take_while(move |(s, _)| *s > now.0)
                .peekable()
        })
        .collect();
    std::iter::from_fn(move || {
        let mut best: Option<(usize, &'a (i64, ProxyId))> = None;
        for (i, head) in heads.iter_mut().enumerate() {
            let Some(&h) = head.peek() else { continue };
            if best.is_none_or(|(_, b)| h.0 > b.0) {
                best = Some((i, h));
            }
        }
        best.and_then(|(b, _)| heads[b].next()).map(|(_, id)| id)
    })
}

fn eligible(
    st: &State,
    r: &ProxyRecord,
    req: &ExtractRequest,
    f: &Filters,
    now: Timestamp,
) -> bool {
    let fresh = match req.max_health_check_age {
        None => true,
        Some(age) => r.health.last_check_at.is_some_and(|t| now.since(t) <= age),
    };
    r.expires_at > now
        && r.state == ProxyState::Available
        && !st.owners.contains_key(&r.id)
        && r.usable_until > now
        && st.held(&r.upstream, now).is_none()
        && !st.marked(&r.id, now)
        && r.expires_at.since(now) >= req.min_remaining_ttl
        && fresh
        && f.admits(&r.upstream, r.dial.protocol, &r.labels)
}

/// Scans the driver; returns the eligible IDs found and whether the scan was complete.
fn scan(
    st: &State,
    req: &ExtractRequest,
    f: &Filters,
    need: usize,
    budget: u32,
    now: Timestamp,
) -> (Vec<ProxyId>, bool) {
    let mut found = Vec::new();
    // Every upstream with un-extracted proxies held back (a new pool generation):
    // nothing can be eligible, so nothing is read.
    if st
        .inventory
        .iter()
        .filter(|(_, n)| **n > 0)
        .all(|(u, _)| st.held(u, now).is_some())
    {
        return (found, true);
    }
    // Every member read costs one unit of the budget.
    for (examined, id) in walked(sources(st, req, f), now).enumerate() {
        if examined == budget as usize {
            return (found, false);
        }
        let ok = st
            .records
            .get(id)
            .is_some_and(|s| eligible(st, &s.record, req, f, now));
        if ok {
            found.push(id.clone());
            if found.len() == need {
                return (found, true);
            }
        }
    }
    (found, true)
}

#[async_trait]
impl ExtractionStore for MemoryPool {
    async fn extract(&self, req: &ExtractRequest) -> PoolResult<ExtractOutcome> {
        let filters = prepare_extract(req)?;
        let now = self.clock.now();
        let key = result_key(req);
        let mut st = self.state.lock();
        if let Some(StoredResult::Extract { digest, extraction }) =
            key.as_ref().and_then(|k| st.result(k, now))
        {
            if digest != req.request_digest.as_str() {
                return Err(PoolError::Conflict(ConflictReason::IdempotencyKeyReused));
            }
            let mut replay = extraction.clone();
            replay.replayed = true;
            return Ok(ExtractOutcome::Extracted(replay));
        }
        // A filtered extraction purges nothing on the side: the Redis script is given
        // only its matching combinations, which cannot name every expired record's keys
        // (the maintenance loop and the other writes purge them).
        if filters.is_empty() {
            st.purge_expired(now, self.options.opportunistic_purge);
        }

        let count = req.count.get() as usize;
        let reserve = req.reserve_for_gateway as usize;
        let need = count + reserve;
        let (found, complete) = scan(
            &st,
            req,
            &filters,
            need,
            self.options.extract_scan_budget,
            now,
        );
        if !complete && found.len() < need {
            return Err(PoolError::ScanBudgetExhausted);
        }
        let beyond_reserve = found.len().saturating_sub(reserve);
        let n = count.min(beyond_reserve);
        if req.fulfillment == Fulfillment::AllOrNothing && n < count {
            return Ok(ExtractOutcome::Insufficient {
                eligible: beyond_reserve as u32,
            });
        }

        let mut proxies = Vec::with_capacity(n);
        for id in &found[..n] {
            st.update(id, now, |r| {
                r.state = ProxyState::Extracted;
                r.extracted_at = Some(now);
            });
            if let Some(s) = st.records.get(id) {
                let r = &s.record;
                proxies.push(ExtractedProxy {
                    id: r.id.clone(),
                    upstream: r.upstream.clone(),
                    dial: r.dial.clone(),
                    labels: r.labels.clone(),
                    expires_at: r.expires_at,
                });
            }
        }
        let extraction = Extraction {
            proxies,
            extracted_at: now,
            replayed: false,
        };
        if let (Some(key), Some(earliest)) =
            (key, extraction.proxies.iter().map(|p| p.expires_at).min())
        {
            let expires = now.plus(req.idempotency_ttl).min(earliest);
            let stored = StoredResult::Extract {
                digest: req.request_digest.as_str().to_owned(),
                extraction: extraction.clone(),
            };
            st.store_result(key, expires, now, stored);
        }
        Ok(ExtractOutcome::Extracted(extraction))
    }
}
