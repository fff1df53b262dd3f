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

/// Most index keys [`AskedKeys`] holds (as many as the key book passes whole).
const ASKED_MAX: usize = 256;

/// The index keys unfiltered extractions were asked for lately (`lua/extract.lua`
/// names the combinations of the records it picked and of the eligible records after
/// them), the latest last, at most [`ASKED_MAX`]. Unfiltered extractions pass them
/// beyond the key book's pass-all bound: callers taking the head of `available` one
/// after the other then find its combinations given instead of each asking (one more
/// script call; a call asked twice, when concurrent callers took its records, is given
/// every known key). A script names only keys it was not given, so the keys asked for
/// before are kept (a call passes them, and the records after its own may sit in them).
#[derive(Debug, Default)]
pub(super) struct AskedKeys(Mutex<Vec<String>>);

impl AskedKeys {
    /// Adds `need`, the keys an extraction was just asked for, as the latest; forgets
    /// the oldest beyond [`ASKED_MAX`].
    pub(super) fn add(&self, need: &[String]) {
        let Ok(mut asked) = self.0.lock() else {
            return;
        };
        asked.retain(|k| !need.contains(k));
        asked.extend(need.iter().cloned());
        let over = asked.len().saturating_sub(ASKED_MAX);
        asked.drain(..over);
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
    fn asked_keys_keep_the_latest_and_are_bounded() {
        let asked = AskedKeys::default();
        let names = |r: std::ops::Range<usize>| r.map(|i| format!("k{i}")).collect::<Vec<_>>();
        asked.add(&names(0..10));
        // Keys asked for before stay: a script names only keys it was not given.
        asked.add(&names(10..20));
        assert_eq!(asked.get(), names(0..20));
        // Asked again: the latest.
        asked.add(&names(0..1));
        assert_eq!(asked.get().last().map(String::as_str), Some("k0"));
        asked.add(&names(20..400));
        let kept = asked.get();
        assert_eq!(kept.len(), ASKED_MAX);
        assert_eq!(kept, names(400 - ASKED_MAX..400));
    }
}
