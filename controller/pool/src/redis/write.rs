//! Provider upsert and removal, health updates and the maintenance purge.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::codec::{self, decode, ms};
use super::keys::{self, CallKeys};
use super::scripts::Script;
use super::{Call, RedisPool};
use crate::clock::Timestamp;
use crate::error::PoolResult;
use crate::model::{
    CheckEnd, CheckMark, CheckStart, DropReason, FetchedBatch, HealthResult, HealthUpdate, Label,
    ProxyId, ProxyState, PurgeReport, RemoveResult, UpsertReport, UpstreamId,
};
use crate::options::UPSERT_CHUNK;

/// Most updates / IDs one health or removal script carries (each update is its own
/// atomic step; chunks keep every script well under a few milliseconds).
pub(super) const SCRIPT_BATCH: usize = 128;
/// Most records / leases one purge or expire script handles.
pub(super) const SCRIPT_SWEEP: u32 = 256;
/// Up to this many known index keys, a purge step after one that found more records
/// due is given all of them (it asks for none); beyond, the `owned:` keys and it asks,
/// as every other write does.
const PURGE_PASS_ALL_UP_TO: usize = 4_096;
use crate::ports::{HealthStore, Maintenance, Upserter};
use crate::validate::{
    PreparedBatch, PreparedCandidate, check_check_ends, check_check_starts, check_health_batch,
    check_id_batch, check_sweep_limit, prepare_batch,
};

#[derive(Deserialize)]
struct ChunkReply {
    ins: u32,
    #[serde(rename = "ref")]
    refreshed: u32,
    drop: std::collections::BTreeMap<String, u32>,
    /// Set when this chunk began a new pool generation.
    #[serde(default)]
    #[serde(rename = "gen")]
    began: Option<i64>,
    /// The end of the upstream's hold-back, while it lasts.
    #[serde(default)]
    held: Option<i64>,
}

impl RedisPool {
    /// The candidate as the upsert script takes it; its index keys are added to `ck`.
    fn candidate_json(
        &self,
        c: &PreparedCandidate,
        batch: &PreparedBatch,
        ck: &mut CallKeys,
        learned: &mut Vec<String>,
    ) -> Value {
        let cand = &c.candidate;
        let mut ix = serde_json::Map::new();
        let mut add = |dim: &str, name: String, ck: &mut CallKeys| {
            ix.insert(dim.to_owned(), ck.index(name.clone()).into());
            learned.push(name);
        };
        add(
            "a",
            keys::combo_key(
                &batch.batch.upstream,
                cand.dial.protocol,
                &cand.labels.map(Label::as_str),
            ),
            ck,
        );
        add("o", keys::owned_key(&batch.batch.upstream), ck);
        let mut v = json!({
            "id": cand.id,
            "proto": cand.dial.protocol.as_str(),
            "host": cand.dial.host,
            "port": cand.dial.port,
            "ttl": ms(cand.ttl),
            "cap": cand.max_concurrency,
            "uq": c.unique,
            "ix": ix,
        });
        if let Some(r) = &cand.labels.region {
            v["region"] = r.as_str().into();
        }
        if let Some(cr) = &cand.labels.carrier {
            v["carrier"] = cr.as_str().into();
        }
        if let Some(ci) = &cand.labels.city {
            v["city"] = ci.as_str().into();
        }
        if let Some(cr) = &cand.dial.credentials {
            // Sorted last (serde_json orders keys): a Redis SLOWLOG entry keeps only the
            // first 128 bytes of an argument, so credentials never reach it.
            v["zu"] = cr.username.clone().into();
            v["zp"] = cr.password.expose().into();
        }
        v
    }
}

#[async_trait]
impl Upserter for RedisPool {
    async fn upsert(&self, batch: FetchedBatch) -> PoolResult<UpsertReport> {
        let prepared = prepare_batch(batch, self.options())?;
        let mut total = UpsertReport {
            dropped: prepared.dropped.clone(),
            ..Default::default()
        };
        let b = &prepared.batch;
        for (i, chunk) in prepared.candidates.chunks(UPSERT_CHUNK).enumerate() {
            let op = keys::op_key(&["upsert", b.operation_id.as_str(), &i.to_string()]);
            let mut ck = CallKeys::new(Some(op), None).with_known(&self.inner.keys);
            let mut learned = Vec::new();
            let cands: Vec<Value> = chunk
                .iter()
                .map(|c| self.candidate_json(c, &prepared, &mut ck, &mut learned))
                .collect();
            self.inner.keys.learn(&learned);
            let payload = json!({
                "up": b.upstream,
                "mg": ms(b.safety_margin),
                "max": b.max_size.get(),
                "q": ms(b.quarantine),
                "z": cands,
            });
            let reply: ChunkReply = decode(
                self.run(Call::new(Script::Upsert, ck, payload)).await?,
                "upsert reply",
            )?;
            let mut report = UpsertReport {
                inserted: reply.ins,
                refreshed: reply.refreshed,
                generation_started: reply.began.map(Timestamp),
                held_until: reply.held.map(Timestamp),
                ..Default::default()
            };
            for (reason, n) in reply.drop {
                let reason =
                    DropReason::parse(&reason).ok_or_else(|| codec::corrupt("drop reason"))?;
                report.dropped.insert(reason, n);
            }
            total.merge(&report);
        }
        Ok(total)
    }

    async fn remove(
        &self,
        upstream: &UpstreamId,
        ids: &[ProxyId],
    ) -> PoolResult<Vec<RemoveResult>> {
        check_id_batch(ids)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let codes: Vec<String> = self
            .per_item(
                Script::Remove,
                || self.write_keys(Script::Remove),
                ids,
                |chunk| json!({ "up": upstream, "ids": chunk }),
                "remove reply",
            )
            .await?;
        codes
            .iter()
            .map(|c| match c.as_str() {
                "removed" => Ok(RemoveResult::Removed),
                "not_found" => Ok(RemoveResult::NotFound),
                "ignored" => Ok(RemoveResult::Ignored),
                _ => Err(codec::corrupt("remove result")),
            })
            .collect()
    }
}

impl RedisPool {
    /// Runs `script` over `items` in batches of [`SCRIPT_BATCH`] (`payload` of each
    /// batch, keys from `keys`), every script answering one reply per item; the replies
    /// in order (`what` names them when one is corrupt).
    async fn per_item<T, R: serde::de::DeserializeOwned>(
        &self,
        script: Script,
        keys: impl Fn() -> CallKeys,
        items: &[T],
        payload: impl Fn(&[T]) -> Value,
        what: &str,
    ) -> PoolResult<Vec<R>> {
        let mut out = Vec::with_capacity(items.len());
        for chunk in items.chunks(SCRIPT_BATCH) {
            let r = self.run(Call::new(script, keys(), payload(chunk))).await?;
            out.extend(decode::<Vec<R>>(r, what)?);
        }
        Ok(out)
    }
}

#[async_trait]
impl HealthStore for RedisPool {
    async fn apply_health(&self, updates: &[HealthUpdate]) -> PoolResult<Vec<HealthResult>> {
        check_health_batch(updates)?;
        if updates.is_empty() {
            return Ok(Vec::new());
        }
        let list: Vec<Value> = updates
            .iter()
            .map(|u| {
                let mut v =
                    json!({ "id": u.proxy_id, "st": u.verdict.state().as_str(), "ok": u.success });
                if let Some(l) = u.latency {
                    v["lat"] = ms(l).into();
                }
                if let Some(f) = &u.failure {
                    v["fail"] = f.as_str().into();
                }
                v
            })
            .collect();
        let codes: Vec<String> = self
            .per_item(
                Script::Health,
                || self.write_keys(Script::Health),
                &list,
                |chunk| json!({ "u": chunk }),
                "health reply",
            )
            .await?;
        codes.iter().map(|c| health_result(c)).collect()
    }

    async fn begin_checks(&self, starts: &[CheckStart]) -> PoolResult<Vec<CheckMark>> {
        check_check_starts(starts)?;
        // Check IDs travel as decimal strings: Lua numbers are doubles, which cannot
        // hold every u64.
        let marks = starts
            .iter()
            .map(|s| json!({ "id": s.proxy_id, "c": s.check.to_string(), "h": ms(s.hold) }));
        let codes: Vec<String> = self
            .per_check(Script::CheckBegin, marks, "m", "check mark reply")
            .await?;
        codes.iter().map(|c| check_mark(c)).collect()
    }

    async fn end_checks(&self, ends: &[CheckEnd]) -> PoolResult<Vec<bool>> {
        check_check_ends(ends)?;
        let ends = ends
            .iter()
            .map(|e| json!({ "id": e.proxy_id, "c": e.check.to_string() }));
        self.per_check(Script::CheckEnd, ends, "e", "check end reply")
            .await
    }
}

impl RedisPool {
    /// [`Self::per_item`] for check marks: each batch under an operation key of its
    /// own, its items as the payload's `field`.
    async fn per_check<R: serde::de::DeserializeOwned>(
        &self,
        script: Script,
        items: impl Iterator<Item = Value>,
        field: &str,
        what: &str,
    ) -> PoolResult<Vec<R>> {
        let list: Vec<Value> = items.collect();
        self.per_item(
            script,
            || CallKeys::new(Some(self.fresh_op(script)), None),
            &list,
            |chunk| {
                let mut payload = serde_json::Map::new();
                payload.insert(field.to_owned(), chunk.into());
                Value::Object(payload)
            },
            what,
        )
        .await
    }
}

fn check_mark(code: &str) -> PoolResult<CheckMark> {
    let bad = || codec::corrupt("check mark");
    match code.split_once(':') {
        Some(("M", t)) => Ok(CheckMark::Marked(Timestamp(t.parse().map_err(|_| bad())?))),
        Some(("R", s)) => Ok(CheckMark::Refused(ProxyState::parse(s).ok_or_else(bad)?)),
        _ if code == "N" => Ok(CheckMark::NotFound),
        _ => Err(bad()),
    }
}

fn health_result(code: &str) -> PoolResult<HealthResult> {
    let state = |s: &str| ProxyState::parse(s).ok_or_else(|| codec::corrupt("health result"));
    match code.split_once(':') {
        Some(("A", s)) => Ok(HealthResult::Applied(state(s)?)),
        Some(("I", s)) => Ok(HealthResult::Ignored(state(s)?)),
        _ if code == "N" => Ok(HealthResult::NotFound),
        _ => Err(codec::corrupt("health result")),
    }
}

#[derive(Deserialize)]
struct PurgeReply {
    p: u32,
    s: u32,
    more: bool,
}

#[async_trait]
impl Maintenance for RedisPool {
    async fn purge_expired(&self, limit: u32) -> PoolResult<PurgeReport> {
        let mut report = PurgeReport::default();
        self.sweep(Script::Purge, limit, "purge reply", |p: PurgeReply| {
            report.purged += p.p;
            report.sessions_purged += p.s;
            report.more = p.more;
            p.more
        })
        .await?;
        self.sweep_combinations(limit.max(1)).await?;
        Ok(report)
    }
}

#[derive(Deserialize)]
struct GcReply {
    #[serde(deserialize_with = "super::codec::lua_vec")]
    d: Vec<String>,
}

impl RedisPool {
    /// Runs the sweep `script` over at most `limit` (checked) due items, one script per
    /// `SCRIPT_SWEEP` of them to keep every script short, until the limit is spent or
    /// `take`, given each reply (`what` names it when corrupt), says no more are due.
    pub(super) async fn sweep<R: serde::de::DeserializeOwned>(
        &self,
        script: Script,
        limit: u32,
        what: &str,
        mut take: impl FnMut(R) -> bool + Send,
    ) -> PoolResult<()> {
        check_sweep_limit(limit)?;
        let mut left = limit;
        let mut pass_all = false;
        loop {
            let lim = left.min(SCRIPT_SWEEP);
            let mut keys = self.write_keys(script);
            if pass_all {
                keys.extend_known(&self.inner.keys);
            }
            let r = self
                .run(Call::new(script, keys, json!({ "lim": lim })))
                .await?;
            let more = take(decode(r, what)?);
            // Expired records sit in any combination: past the pass-all bound a purge
            // step given the `owned:` keys only reads its records, asks for their
            // combinations and reads them all again. Once a step says more are due,
            // the next ones are given every known name (≈ 0.5 µs of Redis each, less
            // than a second check phase of 256 records); an idle sweep is not.
            pass_all =
                script == Script::Purge && more && self.inner.keys.len() <= PURGE_PASS_ALL_UP_TO;
            left -= lim;
            if left == 0 || !more {
                return Ok(());
            }
        }
    }

    /// Drops up to `limit` known combinations that hold nothing from the registry (in
    /// scripts of at most `SCRIPT_SWEEP` keys, rotating through the book), and forgets
    /// them here; other processes re-learn the registry at its new version.
    async fn sweep_combinations(&self, limit: u32) -> PoolResult<()> {
        let window = self.inner.keys.gc_window(limit as usize);
        for chunk in window.chunks(SCRIPT_SWEEP as usize) {
            let mut ck = CallKeys::new(None, None);
            ck.extend(chunk.iter().cloned());
            let r = self.run(Call::new(Script::CombosGc, ck, json!({}))).await?;
            let r: GcReply = decode(r, "combination sweep")?;
            if !r.d.is_empty() {
                tracing::debug!(dropped = r.d.len(), "empty combinations dropped");
                self.inner.keys.forget(&r.d);
            }
        }
        Ok(())
    }
}
