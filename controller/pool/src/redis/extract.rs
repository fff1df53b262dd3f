//! Exclusive, idempotent extraction: one script call (two result keys, every known
//! combination matching the filters as the sources in the request's walk order, every
//! known index key for the records it will extract or purge).

use std::sync::Mutex;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use super::codec::{StoredExtraction, decode, ms};
use super::keys::{self, CallKeys, KeyBook};
use super::scripts::Script;
use super::{Call, RedisPool};
use crate::clock::Timestamp;
use crate::error::PoolResult;
use crate::model::{ExtractOutcome, ExtractRequest, Extraction, Fulfillment};
use crate::ports::ExtractionStore;
use crate::validate::{order_combinations, prepare_extract};

/// Most index keys [`AskedKeys`] holds: the combinations of an extraction's records and
/// of the 32 members after them, and the keys of the expired records it purges on the
/// side. Each key given costs Redis about half a microsecond per call.
const ASKED_MAX: usize = 64;

/// The index keys the latest asking unfiltered extraction named (`lua/extract.lua`:
/// the combinations of the records it picked and of the eligible records after them,
/// given or not), at most [`ASKED_MAX`]. Unfiltered extractions pass them beyond the key
/// book's pass-all bound: callers taking the head of `available` one after the other
/// then find its combinations given instead of each asking (one more script call; a
/// call asked twice, when concurrent callers took its records, is given every known
/// key).
#[derive(Debug, Default)]
pub(super) struct AskedKeys(Mutex<Vec<String>>);

impl AskedKeys {
    /// Takes `need`, the keys an extraction was just asked for, instead of the last
    /// (its first [`ASKED_MAX`]).
    pub(super) fn replace(&self, need: &[String]) {
        if let Ok(mut asked) = self.0.lock() {
            asked.clear();
            asked.extend(need.iter().take(ASKED_MAX).cloned());
        }
    }

    fn get(&self) -> Vec<String> {
        self.0.lock().map(|a| a.clone()).unwrap_or_default()
    }
}

#[derive(Deserialize)]
struct ExtractReply {
    replay: Option<StoredExtraction>,
    x: Option<StoredExtraction>,
    insufficient: Option<u32>,
}

fn extraction(s: StoredExtraction, replayed: bool) -> PoolResult<Extraction> {
    let proxies =
        s.px.into_iter()
            .map(|p| p.into_proxy())
            .collect::<PoolResult<Vec<_>>>()?;
    Ok(Extraction {
        proxies,
        extracted_at: Timestamp(s.at),
        replayed,
    })
}

#[async_trait]
impl ExtractionStore for RedisPool {
    async fn extract(&self, req: &ExtractRequest) -> PoolResult<ExtractOutcome> {
        let f = prepare_extract(req)?;
        // This call's own operation key: a retry of the very same call (after a dropped
        // connection or a timed-out reply) finds the stored result and returns it as
        // the first answer (`n` = this nonce). The request ID plays no part: two calls
        // with the same request ID are two extractions unless an idempotency key says
        // otherwise.
        let op = self.fresh_op(Script::Extract);
        let nonce = op.rsplit(':').next().unwrap_or_default().to_owned();
        let (k1, k2) = match &req.idempotency_key {
            Some(k) => (keys::idem_key(req.client_id.as_str(), k.as_str()), None),
            None => (op, None),
        };
        let filtered = !f.is_empty();
        let mut payload = json!({
            "n": nonce,
            "cnt": req.count.get(),
            "res": req.reserve_for_gateway,
            "aon": req.fulfillment == Fulfillment::AllOrNothing,
            "dig": req.request_digest.as_str(),
            "ittl": ms(req.idempotency_ttl),
            "minttl": ms(req.min_remaining_ttl),
            "budget": self.options().extract_scan_budget,
        });
        if let Some(age) = req.max_health_check_age {
            payload["maxage"] = ms(age).into();
        }
        let build = |book: &KeyBook| {
            let mut ck = CallKeys::new(Some(k1.clone()), k2.clone());
            let mut payload = payload.clone();
            if filtered {
                // Every known combination whose labels pass the filters (OR within a
                // dimension, AND across; an empty dimension passes everything), walked
                // one after the other in the request's order (see `order_combinations`);
                // the script pages through them in `src` order.
                let mut combos = book.combos(|c| f.admits_combo(c));
                order_combinations(req, &mut combos, |k| keys::combo_name(k));
                ck.pass_combos(book, combos, &mut payload);
                // The script writes only these combinations (and purges only records
                // in them, which may also sit in an owned:<d> key): nothing else.
                ck.extend(book.owned_keys());
                Call::new(Script::Extract, ck, payload)
            } else {
                // Beyond the pass-all bound `with_known` gives the `owned:` keys only;
                // the combinations the last extraction asked for are those at the
                // head of `available`, where this one starts.
                let mut ck = ck.with_known(book);
                ck.extend(self.inner.asked.get());
                Call::new(Script::Extract, ck, payload)
            }
        };
        let r: ExtractReply = decode(self.run_combos(build).await?, "extract reply")?;
        if let Some(s) = r.replay {
            let replayed = s.n.as_deref() != Some(nonce.as_str());
            return Ok(ExtractOutcome::Extracted(extraction(s, replayed)?));
        }
        if let Some(eligible) = r.insufficient {
            return Ok(ExtractOutcome::Insufficient { eligible });
        }
        match r.x {
            Some(s) => Ok(ExtractOutcome::Extracted(extraction(s, false)?)),
            None => Err(super::codec::corrupt("extract reply")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asked_keys_are_the_latest_ask_and_bounded() {
        let asked = AskedKeys::default();
        let names = |r: std::ops::Range<usize>| r.map(|i| format!("k{i}")).collect::<Vec<_>>();
        asked.replace(&names(0..10));
        asked.replace(&names(10..20));
        assert_eq!(asked.get(), names(10..20));
        asked.replace(&names(0..400));
        assert_eq!(asked.get(), names(0..ASKED_MAX));
    }
}
