//! Exclusive, idempotent extraction: one script call (two result keys, the driver's
//! index keys by dimension, every known index key for the records it will extract).

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use super::codec::{StoredExtraction, decode, ms};
use super::keys::{self, CallKeys};
use super::scripts::Script;
use super::{Call, RedisPool};
use crate::clock::Timestamp;
use crate::error::PoolResult;
use crate::model::{ExtractOutcome, ExtractRequest, Extraction, Fulfillment};
use crate::ports::ExtractionStore;
use crate::validate::prepare_extract;

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
        let op = keys::op_key(&["extract", req.client_id.as_str(), req.request_id.as_str()]);
        let (k1, k2) = match &req.idempotency_key {
            Some(k) => (keys::idem_key(req.client_id.as_str(), k.as_str()), Some(op)),
            None => (op, None),
        };
        let mut ck = CallKeys::new(Some(k1), k2);
        let mut dim =
            |names: Vec<String>| names.into_iter().map(|n| ck.index(n)).collect::<Vec<_>>();
        let dims = json!({
            "u": dim(f.upstreams.iter().map(keys::upstream_key).collect()),
            "r": dim(f.regions.iter().map(|v| keys::region_key(v.as_str())).collect()),
            "c": dim(f.carriers.iter().map(|v| keys::carrier_key(v.as_str())).collect()),
            "p": dim(f.protocols.iter().map(|p| keys::protocol_key(*p)).collect()),
        });
        let ck = ck.with_known(&self.inner.keys);
        // A retry of this very call (after a dropped connection) finds its own result:
        // that is the first answer, not a replay.
        let nonce = self.fresh_op(Script::Extract);
        let nonce = nonce.rsplit(':').next().unwrap_or_default().to_owned();
        let mut payload = json!({
            "n": nonce,
            "cnt": req.count.get(),
            "res": req.reserve_for_gateway,
            "aon": req.fulfillment == Fulfillment::AllOrNothing,
            "dig": req.request_digest.as_str(),
            "ittl": ms(req.idempotency_ttl),
            "minttl": ms(req.min_remaining_ttl),
            "budget": self.options().extract_scan_budget,
            "dims": dims,
            "f": {
                "proto": f.protocols.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
                "region": f.regions,
                "carrier": f.carriers,
                "up": f.upstreams,
            },
        });
        if let Some(age) = req.max_health_check_age {
            payload["maxage"] = ms(age).into();
        }
        let r: ExtractReply = decode(
            self.run(Call::new(Script::Extract, ck, payload)).await?,
            "extract reply",
        )?;
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
