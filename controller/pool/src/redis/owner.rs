//! Worker leases: assign, renew, drain, acknowledge, read, expire.

use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use super::codec::{StoredAssignment, decode, lua_vec, ms};
use super::keys::CallKeys;
use super::scripts::Script;
use super::write::SCRIPT_SWEEP;
use super::{Call, RedisPool};
use crate::error::{PoolError, PoolResult};
use crate::model::{Assignment, ExpiredAssignments, LeasePage, ProxyId, WorkerId};
use crate::options::MAX_SWEEP;
use crate::ports::OwnershipRepository;

#[derive(Deserialize)]
struct AssignmentReply {
    a: Option<StoredAssignment>,
}

#[derive(Deserialize)]
struct LeasesReply {
    c: String,
    #[serde(deserialize_with = "lua_vec")]
    l: Vec<StoredAssignment>,
}

#[derive(Deserialize)]
struct ExpireReply {
    #[serde(deserialize_with = "lua_vec")]
    rel: Vec<StoredAssignment>,
    more: bool,
}

impl RedisPool {
    async fn assignment_call(
        &self,
        script: Script,
        payload: serde_json::Value,
    ) -> PoolResult<Assignment> {
        let r: AssignmentReply = decode(
            self.run(Call::new(script, self.write_keys(script), payload))
                .await?,
            "assignment",
        )?;
        r.a.map(Assignment::from)
            .ok_or_else(|| super::codec::corrupt("assignment"))
    }
}

#[async_trait]
impl OwnershipRepository for RedisPool {
    async fn assign(
        &self,
        proxy: &ProxyId,
        worker: &WorkerId,
        lease: Duration,
    ) -> PoolResult<Assignment> {
        self.assignment_call(
            Script::Assign,
            json!({ "id": proxy, "w": worker, "lease": ms(lease) }),
        )
        .await
    }

    async fn renew(
        &self,
        proxy: &ProxyId,
        worker: &WorkerId,
        epoch: u64,
        lease: Duration,
    ) -> PoolResult<Assignment> {
        let payload =
            json!({ "id": proxy, "w": worker, "e": epoch.to_string(), "lease": ms(lease) });
        self.assignment_call(Script::Renew, payload).await
    }

    async fn begin_drain(
        &self,
        proxy: &ProxyId,
        worker: &WorkerId,
        epoch: u64,
    ) -> PoolResult<Assignment> {
        self.assignment_call(
            Script::Drain,
            json!({ "id": proxy, "w": worker, "e": epoch.to_string() }),
        )
        .await
    }

    async fn acknowledge_drain(
        &self,
        proxy: &ProxyId,
        worker: &WorkerId,
        epoch: u64,
        active: u32,
        reserved: u32,
    ) -> PoolResult<()> {
        let payload = json!({ "id": proxy, "w": worker, "e": epoch.to_string(), "act": active, "res": reserved });
        self.run(Call::new(
            Script::AckDrain,
            self.write_keys(Script::AckDrain),
            payload,
        ))
        .await?;
        Ok(())
    }

    async fn get(&self, proxy: &ProxyId) -> PoolResult<Option<Assignment>> {
        let ck = CallKeys::new(None, None);
        let r: AssignmentReply = decode(
            self.run(Call::new(Script::OwnerGet, ck, json!({ "id": proxy })))
                .await?,
            "assignment",
        )?;
        Ok(r.a.map(Assignment::from))
    }

    async fn expire(&self, limit: u32) -> PoolResult<ExpiredAssignments> {
        if limit > MAX_SWEEP {
            return Err(PoolError::invalid("limit", format!("at most {MAX_SWEEP}")));
        }
        let mut out = ExpiredAssignments::default();
        let mut left = limit;
        loop {
            let lim = left.min(SCRIPT_SWEEP);
            let keys = self.write_keys(Script::Expire);
            let r = self
                .run(Call::new(Script::Expire, keys, json!({ "lim": lim })))
                .await?;
            let r: ExpireReply = decode(r, "expire reply")?;
            out.released.extend(r.rel.into_iter().map(Assignment::from));
            out.more = r.more;
            left -= lim;
            if left == 0 || !r.more {
                return Ok(out);
            }
        }
    }

    async fn leases(&self, cursor: Option<&str>, limit: u32) -> PoolResult<LeasePage> {
        if limit == 0 || limit > MAX_SWEEP {
            return Err(PoolError::invalid("limit", format!("1 to {MAX_SWEEP}")));
        }
        // The cursor is HSCAN's over the owners hash ("0": start and end).
        let c = match cursor {
            None => "0".to_owned(),
            Some(c) if !c.is_empty() && c.len() <= 20 && c.bytes().all(|b| b.is_ascii_digit()) => {
                c.to_owned()
            }
            Some(_) => return Err(PoolError::invalid("cursor", "not a cursor of this pool")),
        };
        let r: LeasesReply = decode(
            self.run(Call::new(
                Script::Leases,
                CallKeys::new(None, None),
                json!({ "c": c, "lim": limit }),
            ))
            .await?,
            "leases",
        )?;
        Ok(LeasePage {
            leases: r.l.into_iter().map(Assignment::from).collect(),
            next: (r.c != "0").then_some(r.c),
        })
    }
}
