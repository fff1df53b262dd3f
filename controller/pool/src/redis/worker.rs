//! Worker sessions, runtime reports and the inventory reader.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use super::codec::{self, BodyEntry, ReportBody, StoredSession, decode, ms};
use super::keys::{self, CallKeys};
use super::scripts::Script;
use super::{Call, RedisPool};
use crate::clock::Timestamp;
use crate::error::PoolResult;
use crate::model::{
    ReportAck, ReportHeader, RuntimeEntry, RuntimeReport, SessionRegistration, SnapshotAck,
    SnapshotReject, UpstreamId, UpstreamInventory, WorkerId, WorkerRuntime, WorkerSession,
};
use crate::ports::{InventoryReader, ReportWriter, RuntimeReader, SessionWriter};
use crate::validate::{check_positive, check_report, report_digest};

#[derive(Deserialize)]
struct SessionReply {
    s: Option<StoredSession>,
}

impl RedisPool {
    async fn session_call(
        &self,
        script: Script,
        payload: serde_json::Value,
    ) -> PoolResult<Option<WorkerSession>> {
        let keys = if script == Script::SessionGet {
            CallKeys::new(None, None)
        } else {
            self.write_keys(script)
        };
        let r: SessionReply = decode(self.run(Call::new(script, keys, payload)).await?, "session")?;
        Ok(r.s.map(WorkerSession::from))
    }

    async fn session_write(
        &self,
        script: Script,
        payload: serde_json::Value,
    ) -> PoolResult<WorkerSession> {
        self.session_call(script, payload)
            .await?
            .ok_or_else(|| codec::corrupt("session"))
    }
}

#[async_trait]
impl SessionWriter for RedisPool {
    async fn register(&self, reg: &SessionRegistration) -> PoolResult<WorkerSession> {
        check_positive("ttl", reg.ttl)?;
        let payload = json!({ "w": reg.worker_id, "i": reg.instance_id, "s": reg.session_id, "ttl": ms(reg.ttl) });
        self.session_write(Script::Register, payload).await
    }

    async fn acknowledge(&self, ack: &SnapshotAck) -> PoolResult<WorkerSession> {
        check_positive("ttl", ack.ttl)?;
        let payload = json!({
            "w": ack.worker_id, "s": ack.session_id, "v": ack.version.to_string(),
            "e": ack.epoch.to_string(), "ttl": ms(ack.ttl),
        });
        self.session_write(Script::Ack, payload).await
    }

    async fn reject_snapshot(&self, reject: &SnapshotReject) -> PoolResult<WorkerSession> {
        check_positive("ttl", reject.ttl)?;
        let payload =
            json!({ "w": reject.worker_id, "s": reject.session_id, "ttl": ms(reject.ttl) });
        self.session_write(Script::Reject, payload).await
    }

    async fn session(&self, worker: &WorkerId) -> PoolResult<Option<WorkerSession>> {
        self.session_call(Script::SessionGet, json!({ "w": worker }))
            .await
    }
}

#[derive(Deserialize)]
struct AckReply {
    ack: String,
}

#[async_trait]
impl ReportWriter for RedisPool {
    async fn write_report(&self, report: &RuntimeReport) -> PoolResult<ReportAck> {
        check_report(report)?;
        let digest = report_digest(report);
        let mut entries: Vec<&RuntimeEntry> = report.entries.iter().collect();
        entries.sort_by(|a, b| a.proxy_id.cmp(&b.proxy_id));
        let chk: Vec<_> = entries
            .iter()
            .filter(|e| e.active > 0 || e.reserved > 0)
            .map(|e| json!({ "p": e.proxy_id, "e": e.epoch.to_string() }))
            .collect();
        let body = ReportBody {
            s: report.header.session_id.clone(),
            q: report.header.sequence.to_string(),
            v: report.header.snapshot_version.to_string(),
            e: report.header.epoch.to_string(),
            ent: entries
                .iter()
                .map(|e| BodyEntry {
                    p: e.proxy_id.clone(),
                    e: e.epoch.to_string(),
                    a: e.active,
                    r: e.reserved,
                    d: e.draining,
                })
                .collect(),
        };
        let payload = json!({
            "w": report.header.worker_id,
            "s": report.header.session_id,
            "q": report.header.sequence.to_string(),
            "v": report.header.snapshot_version.to_string(),
            "e": report.header.epoch.to_string(),
            "dig": digest,
            "ttl": ms(report.ttl),
            "chk": chk,
        });
        let mut call = Call::new(Script::Report, self.write_keys(Script::Report), payload);
        call.extra = Some(serde_json::to_string(&body).map_err(|_| codec::corrupt("report"))?);
        let r: AckReply = decode(self.run(call).await?, "report reply")?;
        match r.ack.as_str() {
            "accepted" => Ok(ReportAck::Accepted),
            "replayed" => Ok(ReportAck::Replayed),
            _ => Err(codec::corrupt("report reply")),
        }
    }
}

#[derive(Deserialize)]
struct RuntimeReply {
    x: Option<i64>,
    b: Option<ReportBody>,
}

#[async_trait]
impl RuntimeReader for RedisPool {
    async fn runtime(&self, worker: &WorkerId) -> PoolResult<Option<WorkerRuntime>> {
        let r = self
            .run(Call::new(
                Script::RuntimeGet,
                CallKeys::new(None, None),
                json!({ "w": worker }),
            ))
            .await?;
        // A body that does not decode reads as no report: capacity fails closed.
        let Ok(RuntimeReply {
            x: Some(x),
            b: Some(b),
        }) = serde_json::from_value::<RuntimeReply>(r)
        else {
            return Ok(None);
        };
        let parse = |s: &str| s.parse::<u64>().ok();
        let (Some(sequence), Some(snapshot_version), Some(epoch)) =
            (parse(&b.q), parse(&b.v), parse(&b.e))
        else {
            return Ok(None);
        };
        let mut entries = Vec::with_capacity(b.ent.len());
        for e in b.ent {
            let Some(ep) = parse(&e.e) else {
                return Ok(None);
            };
            entries.push(RuntimeEntry {
                proxy_id: e.p,
                epoch: ep,
                active: e.a,
                reserved: e.r,
                draining: e.d,
            });
        }
        let header = ReportHeader {
            worker_id: worker.clone(),
            session_id: b.s,
            sequence,
            snapshot_version,
            epoch,
        };
        Ok(Some(WorkerRuntime {
            header,
            entries,
            expires_at: Timestamp(x),
        }))
    }
}

#[derive(Deserialize)]
struct InventoryReply {
    inv: i64,
    man: i64,
    avail: u64,
    slots: u64,
    /// The end of the upstream's hold-back, while it lasts.
    #[serde(default)]
    held: Option<i64>,
}

#[derive(Deserialize)]
struct GenerationReply {
    /// When the generation began, ms.
    #[serde(default)]
    s: Option<i64>,
}

#[async_trait]
impl InventoryReader for RedisPool {
    async fn inventory(&self, upstream: &UpstreamId) -> PoolResult<UpstreamInventory> {
        let budget = self.options().inventory_scan_budget;
        let r: InventoryReply = decode(
            self.run_combos(|book| {
                let mut ck = CallKeys::new(None, None);
                let o = ck.index(keys::owned_key(upstream));
                let mut payload = json!({ "up": upstream, "o": o, "budget": budget });
                let combos = book.combos(|c| c.upstream == upstream.as_str());
                ck.pass_combos(book, combos, &mut payload);
                Call::new(Script::Inventory, ck, payload)
            })
            .await?,
            "inventory",
        )?;
        Ok(UpstreamInventory {
            unextracted: u64::try_from(r.inv).unwrap_or(0),
            managed: u64::try_from(r.man).unwrap_or(0),
            available: r.avail,
            available_slots: r.slots,
            quarantined_until: r.held.map(Timestamp),
        })
    }

    async fn generation(&self) -> PoolResult<Option<Timestamp>> {
        let r: GenerationReply = self
            .run_plain(Script::Generation, json!({}), "generation")
            .await?;
        Ok(r.s.map(Timestamp))
    }
}
